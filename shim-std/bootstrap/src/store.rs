//! Cards and localities from a key-value store (PMIx's, under the `pmix`
//! feature) rather than from the root: their encoding in the store and the
//! checks each passes before a PE uses it. Bytes only, no I/O, so they are
//! tested without a PMIx server.
//!
//! A card in the store is input from outside like a card from the root: it
//! is decoded with [`Card::decode`] and must be the card of the rank it was
//! stored under, carry job id 0 (cards never carry the job id outside a
//! process), speak the asking PE's class encoding version, and put the rank
//! where its stored locality puts it.
//!
//! Each PE also stores its [`Locality`] and its `cards` mode
//! ([`encode_locality`]: a format byte, the mode byte, node `u64`, switch
//! `u32`, tree `u32`; 18 bytes), and every PE builds the job's
//! [`Localities`] from the stored ones ([`localities_from`]), so the root
//! need not send them; a PE of another `cards` mode is found there, before
//! the fences of the two modes part ways.

#![cfg_attr(not(feature = "pmix"), allow(dead_code))]

use std::fmt;

use crate::{
    card::{Card, CardError},
    cursor::Cursor,
    error::BootstrapError,
    lazy::{Localities, Locality},
};

/// The format byte of a stored locality (the first of its bytes).
pub(crate) const LOCALITY_FORMAT: u8 = 1;

/// Bytes of a stored locality: format `u8`, cards mode `u8` (0 all,
/// 1 lazy), node `u64`, switch `u32`, tree `u32`, little-endian.
pub(crate) const LOCALITY_LEN: usize = 1 + 1 + 8 + 4 + 4;

/// What a PE stores beside its card: its [`Locality`], and whether it
/// takes the cards lazily (every PE of a job must agree; the fences that
/// follow differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredLocality {
    /// Where the PE is.
    pub(crate) locality: Locality,
    /// Its `cards` mode is `lazy` (else `all`).
    pub(crate) lazy: bool,
}

impl StoredLocality {
    fn mode(self) -> &'static str {
        if self.lazy { "lazy" } else { "all" }
    }
}

/// A stored locality's bytes.
pub(crate) fn encode_locality(s: StoredLocality) -> [u8; LOCALITY_LEN] {
    let l = s.locality;
    let mut b = [0u8; LOCALITY_LEN];
    b[0] = LOCALITY_FORMAT;
    b[1] = u8::from(s.lazy);
    b[2..10].copy_from_slice(&l.node_id.to_le_bytes());
    b[10..14].copy_from_slice(&l.switch_id.to_le_bytes());
    b[14..18].copy_from_slice(&l.tree_id.to_le_bytes());
    b
}

/// Decodes the locality stored under `rank` in `store` (e.g. `"PMIx"`).
///
/// # Errors
/// [`BootstrapError::Protocol`] naming the rank for bytes of another
/// length, format or cards mode.
pub(crate) fn decode_locality(
    bytes: &[u8],
    store: &str,
    rank: u32,
) -> Result<StoredLocality, BootstrapError> {
    let bad = |reason: String| BootstrapError::Protocol {
        peer: format!("{store} (the locality of rank {rank})"),
        reason,
    };
    if bytes.len() != LOCALITY_LEN {
        return Err(bad(format!(
            "{} bytes, a stored locality has {LOCALITY_LEN}",
            bytes.len()
        )));
    }
    let mut c = Cursor::new(bytes);
    let inner = |c: &mut Cursor<'_>| -> Result<StoredLocality, CardError> {
        let format = c.u8("locality format")?;
        if format != LOCALITY_FORMAT {
            return Err(CardError::Inconsistent {
                field: "locality format",
                reason: "not format 1 (cards mode u8, node u64, switch u32, tree u32)",
            });
        }
        let lazy = match c.u8("locality cards mode")? {
            0 => false,
            1 => true,
            _ => {
                return Err(CardError::Inconsistent {
                    field: "locality cards mode",
                    reason: "neither 0 (all) nor 1 (lazy)",
                });
            }
        };
        let locality = Locality {
            node_id: c.u64("locality node")?,
            switch_id: c.u32("locality switch")?,
            tree_id: c.u32("locality tree")?,
        };
        c.end()?;
        Ok(StoredLocality { locality, lazy })
    };
    inner(&mut c).map_err(|e| bad(e.to_string()))
}

/// The job's [`Localities`] from the store: `get(rank)` returns the bytes
/// rank `rank` stored (for every rank of `0..size`, in order), each
/// decoded with [`decode_locality`]; `me` is this PE's rank and what it
/// stored, which the store must hold for it, and whose cards mode every
/// rank must have. Memory O(runs), whatever `size`.
///
/// # Errors
/// What `get` returns; as [`decode_locality`]; [`BootstrapError::Protocol`]
/// when a rank has another cards mode than this PE (naming both), or the
/// store holds another locality for this PE than it stored.
pub(crate) fn localities_from(
    size: u32,
    class_encoding_version: u8,
    (store, me, mine): (&str, u32, StoredLocality),
    mut get: impl FnMut(u32) -> Result<Vec<u8>, BootstrapError>,
) -> Result<Localities, BootstrapError> {
    let mut locs = Localities::from_cards(&[], class_encoding_version);
    for rank in 0..size {
        let s = decode_locality(&get(rank)?, store, rank)?;
        let peer = || format!("{store} (the locality of rank {rank})");
        if s.lazy != mine.lazy {
            return Err(BootstrapError::Protocol {
                peer: peer(),
                reason: format!(
                    "rank {rank} has cards = {}, this PE (rank {me}) cards = {}: every PE \
                     must have the same `cards` (SWITCHYARD_CARDS)",
                    s.mode(),
                    mine.mode()
                ),
            });
        }
        let (l, m) = (s.locality, mine.locality);
        if rank == me && l != m {
            return Err(BootstrapError::Protocol {
                peer: peer(),
                reason: format!(
                    "it holds node {:016x} switch {} tree {} for this PE, which stored node \
                     {:016x} switch {} tree {}",
                    l.node_id, l.switch_id, l.tree_id, m.node_id, m.switch_id, m.tree_id
                ),
            });
        }
        locs.push(l);
    }
    Ok(locs)
}

/// Where a PE's [`Bootstrap::fetch_cards`](crate::Bootstrap::fetch_cards)
/// (and, with every card, [`rendezvous_at`](crate::rendezvous_at)) gets
/// the cards: [`Bootstrap::card_source`](crate::Bootstrap::card_source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CardSource {
    /// The rendezvous root: the all-cards frame, or card requests on the
    /// PE's connection.
    Root,
    /// The PMIx key-value store (the `pmix` feature): each rank's card is a
    /// `PMIx_Get` of its `switchyard.card`; the root has only localities.
    Pmix,
}

impl CardSource {
    /// `"root"` or `"pmix"`.
    pub const fn name(self) -> &'static str {
        match self {
            CardSource::Root => "root",
            CardSource::Pmix => "pmix",
        }
    }
}

impl fmt::Display for CardSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a card stored under `rank` must match, and the job id it gets back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    /// The rank it was stored under (the rank asked).
    pub(crate) rank: u32,
    /// The asking PE's rank (named in a class version mismatch).
    pub(crate) me: u32,
    /// The asking PE's class encoding version.
    pub(crate) class: u8,
    /// Where the stored localities put `rank`, when known.
    pub(crate) locality: Option<Locality>,
    /// This job's id, put back into the card.
    pub(crate) job_id: u64,
}

/// Decodes `bytes`, stored under `want.rank` in `store` (e.g. `"PMIx"`),
/// and checks it against `want`; the card comes back with this job's id.
///
/// # Errors
/// [`BootstrapError::BadCard`] for bytes that do not decode;
/// [`BootstrapError::Protocol`] for the card of another rank, or one whose
/// locality differs from its stored one; [`BootstrapError::JobIdMismatch`] for
/// a job id other than 0; [`BootstrapError::ClassVersionMismatch`].
pub(crate) fn check_stored(
    bytes: &[u8],
    store: &str,
    want: &Expected,
) -> Result<Card, BootstrapError> {
    let rank = want.rank;
    let from = || format!("{store} (the card of rank {rank})");
    let mut card = Card::decode(bytes).map_err(|source| BootstrapError::BadCard {
        from: from(),
        source,
    })?;
    if card.rank != rank {
        return Err(BootstrapError::Protocol {
            peer: from(),
            reason: format!("stored under rank {rank} is the card of rank {}", card.rank),
        });
    }
    if card.job_id != 0 {
        return Err(BootstrapError::JobIdMismatch {
            what: format!("the card of rank {rank} in {store} (cards are stored with job id 0)"),
            expected: 0,
            found: card.job_id,
        });
    }
    if card.class_encoding_version != want.class {
        return Err(BootstrapError::ClassVersionMismatch {
            rank,
            found: card.class_encoding_version,
            reference: want.me,
            expected: want.class,
        });
    }
    if let Some(l) = want.locality
        && Locality::of(&card) != l
    {
        let got = Locality::of(&card);
        return Err(BootstrapError::Protocol {
            peer: from(),
            reason: format!(
                "it puts rank {rank} on node {:016x} switch {} tree {}, its stored locality \
                 on node {:016x} switch {} tree {}",
                got.node_id, got.switch_id, got.tree_id, l.node_id, l.switch_id, l.tree_id
            ),
        });
    }
    card.job_id = want.job_id;
    Ok(card)
}

/// The card a PE shows the root when its full card is in the store: its
/// rank, locality, class encoding version and pid, and no transport
/// addressing (what the root checks, nothing more).
pub(crate) fn locality_only(card: &Card) -> Card {
    Card {
        cookie: [0; 16],
        shm: None,
        tcp: Vec::new(),
        verbs: None,
        ..card.clone()
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    const JOB: u64 = 0xfeed;

    fn stored(rank: u32) -> Card {
        Card {
            shm: Some(format!("/switchyard-test-{rank}")),
            tcp: vec!["127.0.0.1:4000".parse().expect("addr")],
            verbs: Some(vec![7; 40]),
            ..Card::new(0, rank, 0xabc)
        }
    }

    fn want(rank: u32) -> Expected {
        let c = stored(rank);
        Expected {
            rank,
            me: 0,
            class: c.class_encoding_version,
            locality: Some(Locality::of(&c)),
            job_id: JOB,
        }
    }

    fn bytes(c: &Card) -> Vec<u8> {
        c.encode().expect("encode")
    }

    #[test]
    fn a_good_card_comes_back_with_the_job_id() {
        let c = check_stored(&bytes(&stored(3)), "PMIx", &want(3)).expect("good card");
        assert_eq!(
            c,
            Card {
                job_id: JOB,
                ..stored(3)
            }
        );
        // Without a locality to compare, only the rest is checked.
        let w = Expected {
            locality: None,
            ..want(3)
        };
        assert!(check_stored(&bytes(&stored(3)), "PMIx", &w).is_ok());
    }

    #[test]
    fn garbage_and_truncations_are_typed_errors() {
        let good = bytes(&stored(1));
        for cut in 0..good.len() {
            match check_stored(&good[..cut], "PMIx", &want(1)) {
                Err(BootstrapError::BadCard { from, .. }) => {
                    assert!(from.contains("rank 1") && from.contains("PMIx"), "{from}");
                }
                other => panic!("{cut} bytes: {other:?}"),
            }
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(
            check_stored(&trailing, "PMIx", &want(1)),
            Err(BootstrapError::BadCard {
                source: CardError::TrailingBytes { extra: 1 },
                ..
            })
        ));
        assert!(matches!(
            check_stored(b"not a card at all", "PMIx", &want(1)),
            Err(BootstrapError::BadCard { .. })
        ));
    }

    #[test]
    fn another_ranks_card_is_refused() {
        let e = check_stored(&bytes(&stored(2)), "PMIx", &want(1)).expect_err("rank 2 for 1");
        assert!(matches!(e, BootstrapError::Protocol { .. }), "{e:?}");
        assert!(e.to_string().contains("card of rank 2"), "{e}");
    }

    #[test]
    fn a_job_id_class_or_locality_that_differs_is_refused() {
        let with_job = Card {
            job_id: JOB,
            ..stored(1)
        };
        assert!(matches!(
            check_stored(&bytes(&with_job), "PMIx", &want(1)),
            Err(BootstrapError::JobIdMismatch { found: JOB, .. })
        ));
        let other_class = Card {
            class_encoding_version: stored(1).class_encoding_version.wrapping_add(1),
            ..stored(1)
        };
        assert!(matches!(
            check_stored(&bytes(&other_class), "PMIx", &want(1)),
            Err(BootstrapError::ClassVersionMismatch {
                rank: 1,
                reference: 0,
                ..
            })
        ));
        let elsewhere = Card {
            node_id: 0xdef,
            ..stored(1)
        };
        let e = check_stored(&bytes(&elsewhere), "PMIx", &want(1)).expect_err("moved");
        assert!(e.to_string().contains("0000000000000def"), "{e}");
    }

    proptest! {
        /// Any bytes under any rank: a card that passes, or a typed error,
        /// never a panic; a card that passes is the rank asked.
        #[test]
        fn any_stored_bytes_are_a_card_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            rank in 0u32..8,
        ) {
            if let Ok(c) = check_stored(&bytes, "PMIx", &want(rank)) {
                prop_assert_eq!(c.rank, rank);
                prop_assert_eq!(c.job_id, JOB);
            }
        }

        /// A good card with one byte changed: never a panic.
        #[test]
        fn a_flipped_byte_is_caught_or_harmless(at in 0usize..400, to in any::<u8>()) {
            let mut b = bytes(&stored(2));
            let i = at % b.len();
            b[i] = to;
            if let Ok(c) = check_stored(&b, "PMIx", &want(2)) {
                prop_assert_eq!(c.rank, 2);
                prop_assert_eq!(Locality::of(&c), Locality::of(&stored(2)));
            }
        }
    }

    fn loc(node: u64, switch: u32, tree: u32) -> Locality {
        Locality {
            node_id: node,
            switch_id: switch,
            tree_id: tree,
        }
    }

    fn st(locality: Locality) -> StoredLocality {
        StoredLocality {
            locality,
            lazy: true,
        }
    }

    #[test]
    fn a_locality_round_trips_and_bad_bytes_are_typed_errors() {
        let l = loc(0x0123_4567_89ab_cdef, 7, 9);
        for lazy in [false, true] {
            let s = StoredLocality { locality: l, lazy };
            assert_eq!(
                decode_locality(&encode_locality(s), "PMIx", 3).expect("good"),
                s
            );
        }
        let b = encode_locality(st(l));
        assert_eq!(b.len(), LOCALITY_LEN);
        for cut in 0..b.len() {
            let e = decode_locality(&b[..cut], "PMIx", 3).expect_err("short");
            assert!(
                matches!(&e, BootstrapError::Protocol { peer, .. } if peer.contains("rank 3")),
                "{e:?}"
            );
        }
        let long = [b.as_slice(), &[0]].concat();
        assert!(decode_locality(&long, "PMIx", 3).is_err());
        let mut other_format = b;
        other_format[0] = 2;
        let e = decode_locality(&other_format, "PMIx", 3).expect_err("format 2");
        assert!(e.to_string().contains("format"), "{e}");
        let mut other_mode = b;
        other_mode[1] = 2;
        let e = decode_locality(&other_mode, "PMIx", 3).expect_err("mode 2");
        assert!(e.to_string().contains("cards mode"), "{e}");
    }

    #[test]
    fn localities_from_the_store_are_runs_of_what_each_rank_stored() {
        // 7 ranks: 3 on node a, 1 on b, 2 on a again (another switch), 1 on b.
        let per_rank = [
            loc(0xa, 1, 0),
            loc(0xa, 1, 0),
            loc(0xa, 1, 0),
            loc(0xb, 1, 0),
            loc(0xa, 2, 0),
            loc(0xa, 2, 0),
            loc(0xb, 1, 0),
        ];
        let mut asked = Vec::new();
        let locs = localities_from(7, 4, ("PMIx", 4, st(per_rank[4])), |r| {
            asked.push(r);
            Ok(encode_locality(st(per_rank[r as usize])).to_vec())
        })
        .expect("localities");
        assert_eq!(asked, (0..7).collect::<Vec<_>>());
        assert_eq!((locs.len(), locs.class_encoding_version()), (7, 4));
        assert_eq!(locs.run_count(), 4);
        for (r, l) in per_rank.iter().enumerate() {
            assert_eq!(locs.get(r as u32), Some(*l));
        }
        assert_eq!(locs.ranks_on(0xb), vec![3, 6]);
        // The same as the root's localities frame would carry.
        let cards: Vec<Card> = per_rank
            .iter()
            .enumerate()
            .map(|(r, l)| Card {
                node_id: l.node_id,
                switch_id: l.switch_id,
                tree_id: l.tree_id,
                ..Card::new(0, r as u32, 1)
            })
            .collect();
        assert_eq!(locs, Localities::from_cards(&cards, 4));
    }

    #[test]
    fn localities_from_the_store_refuse_what_does_not_add_up() {
        let good = |r: u32| Ok(encode_locality(st(loc(u64::from(r / 2), 0, 0))).to_vec());
        // A get that fails: its error, at the rank it failed.
        let e = localities_from(4, 1, ("PMIx", 0, st(loc(0, 0, 0))), |r| {
            if r == 2 {
                Err(BootstrapError::Protocol {
                    peer: "test".into(),
                    reason: "no such key".into(),
                })
            } else {
                good(r)
            }
        })
        .expect_err("rank 2 missing");
        assert!(e.to_string().contains("no such key"), "{e}");
        // Garbage under one rank: a typed error naming it.
        let e = localities_from(4, 1, ("PMIx", 0, st(loc(0, 0, 0))), |r| {
            if r == 3 {
                Ok(b"garbage".to_vec())
            } else {
                good(r)
            }
        })
        .expect_err("garbage");
        assert!(e.to_string().contains("rank 3"), "{e}");
        // The store holds another locality for this PE than it stored.
        let e = localities_from(4, 1, ("PMIx", 1, st(loc(9, 0, 0))), good).expect_err("moved");
        assert!(e.to_string().contains("this PE"), "{e}");
        // A PE of another cards mode: named, with both modes.
        let all = StoredLocality {
            locality: loc(0, 0, 0),
            lazy: false,
        };
        let e = localities_from(4, 1, ("PMIx", 0, all), good).expect_err("mixed modes");
        let text = e.to_string();
        assert!(
            text.contains("rank 0 has cards = lazy") && text.contains("cards = all"),
            "{text}"
        );
        // A job of one.
        let one = localities_from(1, 1, ("PMIx", 0, st(loc(0, 0, 0))), good).expect("one");
        assert_eq!((one.len(), one.run_count()), (1, 1));
    }

    proptest! {
        /// Any bytes as a stored locality: a locality or a typed error.
        #[test]
        fn any_stored_locality_bytes_are_a_locality_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            if let Ok(l) = decode_locality(&bytes, "PMIx", 0) {
                let back = encode_locality(l);
                prop_assert_eq!(back.as_slice(), bytes.as_slice());
            }
        }
    }

    #[test]
    fn the_roots_card_keeps_the_locality_and_nothing_to_connect_with() {
        let full = Card {
            cookie: [9; 16],
            ..stored(5)
        };
        let short = locality_only(&full);
        assert_eq!(Locality::of(&short), Locality::of(&full));
        assert_eq!(
            (short.rank, short.pid, short.class_encoding_version),
            (full.rank, full.pid, full.class_encoding_version)
        );
        assert!(short.shm.is_none() && short.tcp.is_empty() && short.verbs.is_none());
        assert_eq!(short.cookie, [0; 16]);
        assert!(bytes(&short).len() < bytes(&full).len());
    }
}
