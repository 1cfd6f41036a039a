//! Lazy cards: what a PE that joined with [`Bootstrap::join_lazy`](crate::Bootstrap::join_lazy)
//! gets instead of every card ([`Localities`]: node, switch and tree id of
//! every rank, as runs), the cards it fetches later ([`Cards`]), and the
//! frames that carry them (localities, card request, card answer, card
//! refusal; the table is in the crate docs). Bytes only, no I/O.

use std::collections::BTreeMap;

use crate::{
    card::{Card, CardError},
    cursor::Cursor,
};

/// The most ranks one card request may name.
pub const MAX_CARDS_PER_REQUEST: usize = 1024;

/// How many times the root serves one card on one connection; a third
/// request for it is refused ([`CardRefusal::AskedTwice`]).
pub const MAX_SERVES_PER_CARD: u8 = 2;

/// Bytes of one run in the localities frame: length `u32`, node `u64`,
/// switch `u32`, tree `u32`.
pub(crate) const RUN_LEN: usize = 4 + 8 + 4 + 4;

/// Where one rank is: what its topology row needs of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Locality {
    /// Its node (machine) id.
    pub node_id: u64,
    /// Its leaf switch id ([`SWITCH_UNKNOWN`](crate::SWITCH_UNKNOWN) when unknown).
    pub switch_id: u32,
    /// Its spine/tree id.
    pub tree_id: u32,
}

impl Locality {
    /// The locality a card announces.
    pub fn of(card: &Card) -> Locality {
        Locality {
            node_id: card.node_id,
            switch_id: card.switch_id,
            tree_id: card.tree_id,
        }
    }
}

/// Bytes of one run in the node localities frame: first rank `u32`,
/// length `u32`, switch `u32`, tree `u32`.
pub(crate) const NODE_RUN_LEN: usize = 4 + 4 + 4 + 4;

/// Every rank's [`Locality`], as runs of consecutive ranks that share one
/// (a job placed by blocks has one run per node): memory O(runs), lookup
/// O(log runs). From the node localities frame
/// ([`Bootstrap::join_lazy_node`](crate::Bootstrap::join_lazy_node)) it
/// holds only the ranks of this PE's node: the others are gaps, whose
/// [`get`](Localities::get) is `None` ([`Localities::is_complete`] is
/// false); their locality comes with their card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Localities {
    size: u32,
    class_encoding_version: u8,
    /// The first rank after each run, increasing; the last is `size`.
    ends: Vec<u32>,
    /// Each run's locality; `None` for a gap (ranks off this PE's node,
    /// from the node localities frame).
    runs: Vec<Option<Locality>>,
}

impl Localities {
    /// The runs of `cards` (one per rank, in rank order).
    pub(crate) fn from_cards(cards: &[Card], class_encoding_version: u8) -> Localities {
        let mut l = Localities {
            size: 0,
            class_encoding_version,
            ends: Vec::new(),
            runs: Vec::new(),
        };
        for c in cards {
            l.push(Locality::of(c));
        }
        l
    }

    /// Appends the next rank's locality.
    pub(crate) fn push(&mut self, loc: Locality) {
        self.size += 1;
        match (self.runs.last(), self.ends.last_mut()) {
            (Some(Some(last)), Some(end)) if *last == loc => *end = self.size,
            _ => {
                self.runs.push(Some(loc));
                self.ends.push(self.size);
            }
        }
    }

    /// Whether every rank's locality is known (false for the node
    /// localities frame, unless the job is one node).
    pub fn is_complete(&self) -> bool {
        self.runs.iter().all(Option::is_some)
    }

    /// The job size.
    pub fn len(&self) -> u32 {
        self.size
    }

    /// Whether it holds no rank (never, for a joined job).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The path-class encoding version every PE's card announced.
    pub fn class_encoding_version(&self) -> u8 {
        self.class_encoding_version
    }

    /// How many runs of known localities it holds (gaps not counted).
    pub fn run_count(&self) -> usize {
        self.runs.iter().flatten().count()
    }

    /// Each run of known localities: its first rank, its length and its
    /// locality (gaps skipped).
    pub fn runs(&self) -> impl Iterator<Item = (u32, u32, Locality)> + '_ {
        let mut start = 0;
        self.ends
            .iter()
            .zip(&self.runs)
            .filter_map(move |(&end, &loc)| {
                let run = (start, end - start, loc);
                start = end;
                Some((run.0, run.1, run.2?))
            })
    }

    /// Where `rank` is, or `None` for a rank not below the size or in a
    /// gap (not on this PE's node, from the node localities frame).
    pub fn get(&self, rank: u32) -> Option<Locality> {
        let i = self.ends.partition_point(|&end| end <= rank);
        self.runs.get(i).copied().flatten()
    }

    /// The ranks on `node_id`, in order.
    pub fn ranks_on(&self, node_id: u64) -> Vec<u32> {
        self.runs()
            .filter(|(_, _, loc)| loc.node_id == node_id)
            .flat_map(|(start, len, _)| start..start + len)
            .collect()
    }

    /// The localities frame's payload: size `u32`, class encoding version
    /// `u8`, run count `u32`, then each run: length `u32`, node `u64`,
    /// switch `u32`, tree `u32`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(9 + RUN_LEN * self.runs.len());
        p.extend_from_slice(&self.size.to_le_bytes());
        p.push(self.class_encoding_version);
        p.extend_from_slice(&u32::try_from(self.run_count()).unwrap_or(0).to_le_bytes());
        for (_, len, loc) in self.runs() {
            p.extend_from_slice(&len.to_le_bytes());
            p.extend_from_slice(&loc.node_id.to_le_bytes());
            p.extend_from_slice(&loc.switch_id.to_le_bytes());
            p.extend_from_slice(&loc.tree_id.to_le_bytes());
        }
        p
    }

    /// Decodes a localities payload. Every run is at least one rank long,
    /// and the runs add up to the size; nothing is allocated beyond what
    /// the bytes hold.
    pub(crate) fn decode(body: &[u8]) -> Result<Localities, CardError> {
        let mut c = Cursor::new(body);
        let size = c.u32("localities size")?;
        let class_encoding_version = c.u8("localities class version")?;
        let n = c.u32("localities run count")? as usize;
        let room = body.len().saturating_sub(9) / RUN_LEN;
        if n > room || n > size as usize {
            return Err(CardError::Overlong {
                field: "localities runs",
                len: n,
                max: room.min(size as usize),
            });
        }
        let mut l = Localities {
            size: 0,
            class_encoding_version,
            ends: Vec::with_capacity(n),
            runs: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let len = c.u32("run length")?;
            let loc = Locality {
                node_id: c.u64("run node")?,
                switch_id: c.u32("run switch")?,
                tree_id: c.u32("run tree")?,
            };
            let end = l.size.checked_add(len).filter(|&e| len > 0 && e <= size);
            let Some(end) = end else {
                return Err(CardError::Inconsistent {
                    field: "run length",
                    reason: "a run is empty or goes past the job size",
                });
            };
            l.size = end;
            l.ends.push(end);
            l.runs.push(Some(loc));
        }
        if l.size != size {
            return Err(CardError::Inconsistent {
                field: "localities runs",
                reason: "the runs do not add up to the job size",
            });
        }
        c.end()?;
        Ok(l)
    }

    /// The node localities frame's payload (the root's answer to a PE
    /// that joined with [`Bootstrap::join_lazy_node`](crate::Bootstrap::join_lazy_node)):
    /// size `u32`, class encoding version `u8`, node `u64`, run count
    /// `u32`, then each run of that node's ranks, in rank order: first
    /// rank `u32`, length `u32`, switch `u32`, tree `u32`. Its bytes grow
    /// with the node's runs, not with the job.
    pub(crate) fn encode_node(
        size: u32,
        class_encoding_version: u8,
        node_id: u64,
        runs: &[NodeRun],
    ) -> Vec<u8> {
        let mut p = Vec::with_capacity(17 + NODE_RUN_LEN * runs.len());
        p.extend_from_slice(&size.to_le_bytes());
        p.push(class_encoding_version);
        p.extend_from_slice(&node_id.to_le_bytes());
        p.extend_from_slice(&u32::try_from(runs.len()).unwrap_or(0).to_le_bytes());
        for r in runs {
            for v in [r.first, r.len, r.switch_id, r.tree_id] {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        p
    }

    /// Decodes a node localities payload into localities with gaps (the
    /// ranks of other nodes). Runs are at least one rank long, in
    /// increasing rank order without overlap, and below the size; at
    /// least one (the PE's own); nothing is allocated beyond what the
    /// bytes hold.
    pub(crate) fn decode_node(body: &[u8]) -> Result<Localities, CardError> {
        let mut c = Cursor::new(body);
        let size = c.u32("node localities size")?;
        let class_encoding_version = c.u8("node localities class version")?;
        let node_id = c.u64("node localities node")?;
        let n = c.u32("node localities run count")? as usize;
        let room = body.len().saturating_sub(17) / NODE_RUN_LEN;
        if n > room || n > size as usize {
            return Err(CardError::Overlong {
                field: "node localities runs",
                len: n,
                max: room.min(size as usize),
            });
        }
        if n == 0 {
            return Err(CardError::Inconsistent {
                field: "node localities runs",
                reason: "no run (the PE's own rank is on its node)",
            });
        }
        // A gap before each run at most, and one after the last.
        let mut l = Localities {
            size: 0,
            class_encoding_version,
            ends: Vec::with_capacity(2 * n + 1),
            runs: Vec::with_capacity(2 * n + 1),
        };
        for _ in 0..n {
            let first = c.u32("node run first rank")?;
            let len = c.u32("node run length")?;
            let loc = Locality {
                node_id,
                switch_id: c.u32("node run switch")?,
                tree_id: c.u32("node run tree")?,
            };
            let end = first.checked_add(len).filter(|&e| len > 0 && e <= size);
            let Some(end) = end.filter(|_| first >= l.size) else {
                return Err(CardError::Inconsistent {
                    field: "node run",
                    reason: "a run is empty, overlaps or precedes the one before, or goes past the job size",
                });
            };
            if first > l.size {
                l.ends.push(first);
                l.runs.push(None);
            }
            l.size = end;
            l.ends.push(end);
            l.runs.push(Some(loc));
        }
        if l.size < size {
            l.ends.push(size);
            l.runs.push(None);
            l.size = size;
        }
        c.end()?;
        Ok(l)
    }
}

impl Localities {
    /// The node localities payload of what [`Localities::decode_node`]
    /// gave (its known runs, all on one node), for the fuzz round trip.
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn encode_node_of(&self) -> Vec<u8> {
        let runs: Vec<NodeRun> = self
            .runs()
            .map(|(first, len, l)| NodeRun {
                first,
                len,
                switch_id: l.switch_id,
                tree_id: l.tree_id,
            })
            .collect();
        let node = self.runs().next().map_or(0, |(_, _, l)| l.node_id);
        Localities::encode_node(self.size, self.class_encoding_version, node, &runs)
    }
}

/// One run of a node's ranks in the node localities frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeRun {
    pub(crate) first: u32,
    pub(crate) len: u32,
    pub(crate) switch_id: u32,
    pub(crate) tree_id: u32,
}

/// Each node's runs of ranks (consecutive ranks with the same locality),
/// from every rank's locality in rank order: O(runs) memory, what the
/// root sends a PE that joined with the node flag.
pub(crate) fn node_runs(locs: &[Locality]) -> std::collections::HashMap<u64, Vec<NodeRun>> {
    let mut by_node: std::collections::HashMap<u64, Vec<NodeRun>> =
        std::collections::HashMap::new();
    let mut start = 0usize;
    while start < locs.len() {
        let loc = locs[start];
        let len = locs[start..].iter().take_while(|&&l| l == loc).count();
        by_node.entry(loc.node_id).or_default().push(NodeRun {
            first: start as u32,
            len: len as u32,
            switch_id: loc.switch_id,
            tree_id: loc.tree_id,
        });
        start += len;
    }
    by_node
}

/// Cards fetched from the root ([`Bootstrap::fetch_cards`](crate::Bootstrap::fetch_cards)),
/// by rank: memory O(cards fetched).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cards {
    by_rank: BTreeMap<u32, Card>,
}

impl Cards {
    /// The card of `rank`, if fetched.
    pub fn get(&self, rank: u32) -> Option<&Card> {
        self.by_rank.get(&rank)
    }

    /// How many cards it holds.
    pub fn len(&self) -> usize {
        self.by_rank.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.by_rank.is_empty()
    }

    /// The cards, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = &Card> {
        self.by_rank.values()
    }

    /// Adds `card` (replacing one of the same rank).
    pub fn insert(&mut self, card: Card) {
        self.by_rank.insert(card.rank, card);
    }

    /// Moves every card of `other` in.
    pub fn extend(&mut self, other: Cards) {
        self.by_rank.extend(other.by_rank);
    }
}

impl IntoIterator for Cards {
    type Item = Card;
    type IntoIter = std::collections::btree_map::IntoValues<u32, Card>;
    fn into_iter(self) -> Self::IntoIter {
        self.by_rank.into_values()
    }
}

/// Why the root refused a card request (the whole request: nothing of it
/// is served). The connection stays usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CardRefusal {
    /// The request names a rank not below the job size.
    UnknownRank(u32),
    /// The request names more than [`MAX_CARDS_PER_REQUEST`] ranks (or
    /// none).
    TooMany(u32),
    /// The request names a card this connection was served
    /// [`MAX_SERVES_PER_CARD`] times already.
    AskedTwice(u32),
    /// A request came while the answer to an earlier one was still being
    /// written (one request is outstanding per connection at most), or in
    /// a job where no PE joined lazily (the root kept no cards), or, under
    /// PMIx with every card, after the rendezvous (every card came then;
    /// refused by the PE itself). A request
    /// before the allgather ends is not refused but fails the job, like
    /// any frame out of turn.
    NotNow,
}

impl CardRefusal {
    fn code(self) -> (u8, u32) {
        match self {
            CardRefusal::UnknownRank(r) => (1, r),
            CardRefusal::TooMany(n) => (2, n),
            CardRefusal::AskedTwice(r) => (3, r),
            CardRefusal::NotNow => (4, 0),
        }
    }

    /// The refusal frame's payload: reason `u8` (1 unknown rank, 2 too
    /// many, 3 asked twice, 4 not now), then the rank (or count) `u32`.
    pub(crate) fn encode(self) -> Vec<u8> {
        let (code, n) = self.code();
        let mut p = vec![code];
        p.extend_from_slice(&n.to_le_bytes());
        p
    }

    pub(crate) fn decode(body: &[u8]) -> Result<CardRefusal, CardError> {
        let mut c = Cursor::new(body);
        let code = c.u8("refusal reason")?;
        let n = c.u32("refusal rank")?;
        c.end()?;
        Ok(match code {
            1 => CardRefusal::UnknownRank(n),
            2 => CardRefusal::TooMany(n),
            3 => CardRefusal::AskedTwice(n),
            4 if n == 0 => CardRefusal::NotNow,
            _ => {
                return Err(CardError::Inconsistent {
                    field: "refusal reason",
                    reason: "not 1 to 4 (4 with a rank of 0)",
                });
            }
        })
    }
}

impl std::fmt::Display for CardRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CardRefusal::UnknownRank(r) => write!(f, "rank {r} is not in the job"),
            CardRefusal::TooMany(n) => write!(
                f,
                "{n} ranks in one request (1 to {MAX_CARDS_PER_REQUEST} allowed)"
            ),
            CardRefusal::AskedTwice(r) => write!(
                f,
                "the card of rank {r} was served {MAX_SERVES_PER_CARD} times on this connection already"
            ),
            CardRefusal::NotNow => f.write_str(
                "not now (an earlier answer is still being sent, or no PE of the job joined lazily)",
            ),
        }
    }
}

/// A card request's payload: count `u16`, then each rank `u32`.
pub(crate) fn encode_request(ranks: &[u32]) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + 4 * ranks.len());
    p.extend_from_slice(&u16::try_from(ranks.len()).unwrap_or(u16::MAX).to_le_bytes());
    for r in ranks {
        p.extend_from_slice(&r.to_le_bytes());
    }
    p
}

/// A decoded card request: its ranks, or the refusal it earns by its
/// count alone.
pub(crate) fn decode_request(body: &[u8]) -> Result<Result<Vec<u32>, CardRefusal>, CardError> {
    let mut c = Cursor::new(body);
    let n = usize::from(c.u16("request count")?);
    if n == 0 || n > MAX_CARDS_PER_REQUEST {
        return Ok(Err(CardRefusal::TooMany(n as u32)));
    }
    let mut ranks = Vec::with_capacity(n);
    for _ in 0..n {
        ranks.push(c.u32("requested rank")?);
    }
    c.end()?;
    Ok(Ok(ranks))
}

/// The cap on a card answer's payload.
pub(crate) const ANSWER_CAP: usize = 2 + MAX_CARDS_PER_REQUEST * (2 + Card::MAX_ENCODED_LEN);

/// A card answer's payload: count `u16`, then each card with its `u16`
/// length, in the request's order.
pub(crate) fn encode_answer<'a>(cards: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&u16::try_from(cards.len()).unwrap_or(0).to_le_bytes());
    for c in cards {
        p.extend_from_slice(&u16::try_from(c.len()).unwrap_or(u16::MAX).to_le_bytes());
        p.extend_from_slice(c);
    }
    p
}

/// Decodes a card answer's payload into cards (not checked against the
/// request: the caller does that).
pub(crate) fn decode_answer(body: &[u8]) -> Result<Vec<Card>, CardError> {
    let mut c = Cursor::new(body);
    let n = usize::from(c.u16("answer count")?);
    if n > MAX_CARDS_PER_REQUEST {
        return Err(CardError::Overlong {
            field: "answer cards",
            len: n,
            max: MAX_CARDS_PER_REQUEST,
        });
    }
    let mut cards = Vec::with_capacity(n);
    for _ in 0..n {
        let len = usize::from(c.u16("answer card length")?);
        cards.push(Card::decode(c.take(len, "answer card")?)?);
    }
    c.end()?;
    Ok(cards)
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn localities_runs_round_trip() {
        let cards: Vec<Card> = (0..10u32)
            .map(|r| Card::new(0, r, u64::from(r / 4)))
            .collect();
        let l = Localities::from_cards(&cards, 1);
        assert_eq!((l.len(), l.run_count()), (10, 3));
        assert_eq!(l.get(5).map(|x| x.node_id), Some(1));
        assert_eq!(l.get(9).map(|x| x.node_id), Some(2));
        assert_eq!(l.get(10), None);
        assert_eq!(l.ranks_on(1), vec![4, 5, 6, 7]);
        let back = Localities::decode(&l.encode()).unwrap();
        assert_eq!(back, l);
        let mut bad = l.encode();
        bad[0] = 11; // size 11, runs add up to 10
        assert!(Localities::decode(&bad).is_err());
        assert!(Localities::decode(&l.encode()[..20]).is_err());
    }

    #[test]
    fn node_localities_have_gaps_for_other_nodes() {
        // Ranks 0..10, four a node; node 1's frame: ranks 4..8, as one run.
        let cards: Vec<Card> = (0..10u32)
            .map(|r| Card::new(0, r, u64::from(r / 4)))
            .collect();
        let locs: Vec<Locality> = cards.iter().map(Locality::of).collect();
        let runs = node_runs(&locs);
        assert_eq!(runs.len(), 3);
        let mine = &runs[&1];
        assert_eq!(mine.len(), 1);
        let bytes = Localities::encode_node(10, 1, 1, mine);
        assert_eq!(bytes.len(), 17 + NODE_RUN_LEN);
        let l = Localities::decode_node(&bytes).unwrap();
        assert_eq!((l.len(), l.run_count(), l.is_complete()), (10, 1, false));
        assert_eq!(l.get(3), None);
        assert_eq!(l.get(4).map(|x| x.node_id), Some(1));
        assert_eq!(l.get(7).map(|x| x.node_id), Some(1));
        assert_eq!(l.get(8), None);
        assert_eq!(l.get(10), None);
        assert_eq!(l.ranks_on(1), vec![4, 5, 6, 7]);
        assert_eq!(l.encode_node_of(), bytes);
        // Round-robin: node 1 of 3 holds ranks 1, 4, 7: three runs.
        let rr: Vec<Locality> = (0..9u32)
            .map(|r| Locality::of(&Card::new(0, r, u64::from(r % 3))))
            .collect();
        let l = Localities::decode_node(&Localities::encode_node(9, 1, 1, &node_runs(&rr)[&1]))
            .unwrap();
        assert_eq!(l.ranks_on(1), vec![1, 4, 7]);
        assert_eq!((l.get(0), l.get(8)), (None, None));
        // One node: complete.
        let one: Vec<Locality> = (0..4u32)
            .map(|r| Locality::of(&Card::new(0, r, 7)))
            .collect();
        let l = Localities::decode_node(&Localities::encode_node(4, 1, 7, &node_runs(&one)[&7]))
            .unwrap();
        assert!(l.is_complete());
        // Empty, overlapping, out of order, past the size, truncated,
        // trailing bytes: typed errors.
        let run = |first, len| NodeRun {
            first,
            len,
            switch_id: 0,
            tree_id: 0,
        };
        for bad in [
            Localities::encode_node(4, 1, 7, &[]),
            Localities::encode_node(4, 1, 7, &[run(0, 0)]),
            Localities::encode_node(4, 1, 7, &[run(0, 2), run(1, 1)]),
            Localities::encode_node(4, 1, 7, &[run(2, 1), run(0, 1)]),
            Localities::encode_node(4, 1, 7, &[run(3, 2)]),
            Localities::encode_node(4, 1, 7, &[run(u32::MAX, 2)]),
            Localities::encode_node(4, 1, 7, &[run(0, 1)])[..20].to_vec(),
            [Localities::encode_node(4, 1, 7, &[run(0, 1)]), vec![0]].concat(),
        ] {
            assert!(Localities::decode_node(&bad).is_err(), "{bad:?}");
        }
        // A run count beyond the bytes is refused before anything is
        // allocated for it.
        let mut huge = Localities::encode_node(u32::MAX, 1, 7, &[run(0, 1)]);
        huge[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Localities::decode_node(&huge),
            Err(CardError::Overlong { .. })
        ));
    }

    #[test]
    fn requests_answers_refusals() {
        assert_eq!(
            decode_request(&encode_request(&[3, 1])).unwrap(),
            Ok(vec![3, 1])
        );
        assert_eq!(
            decode_request(&encode_request(&[0; 1025])).unwrap(),
            Err(CardRefusal::TooMany(1025))
        );
        assert_eq!(
            decode_request(&0u16.to_le_bytes()).unwrap(),
            Err(CardRefusal::TooMany(0))
        );
        assert!(decode_request(&[2, 0, 1]).is_err());
        for r in [
            CardRefusal::UnknownRank(7),
            CardRefusal::TooMany(2000),
            CardRefusal::AskedTwice(3),
            CardRefusal::NotNow,
        ] {
            assert_eq!(CardRefusal::decode(&r.encode()).unwrap(), r);
        }
        assert!(CardRefusal::decode(&[9, 0, 0, 0, 0]).is_err());
        let card = Card::new(0, 4, 1).encode().unwrap();
        let a = encode_answer([card.as_slice()].into_iter());
        let cards = decode_answer(&a).unwrap();
        assert_eq!(cards[0].rank, 4);
        assert!(decode_answer(&a[..a.len() - 1]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = Localities::decode(&bytes);
            if let Ok(l) = Localities::decode_node(&bytes) {
                prop_assert_eq!(l.encode_node_of(), bytes.clone());
            }
            let _ = decode_request(&bytes);
            let _ = decode_answer(&bytes);
            let _ = CardRefusal::decode(&bytes);
        }
    }
}
