//! Cards from a key-value store (PMIx's, under the `pmix` feature) rather
//! than from the root: the checks every such card passes before a PE uses
//! it. Bytes only, no I/O, so they are tested without a PMIx server.
//!
//! A card in the store is input from outside like a card from the root: it
//! is decoded with [`Card::decode`] and must be the card of the rank it was
//! stored under, carry job id 0 (cards never carry the job id outside a
//! process), speak the asking PE's class encoding version, and put the rank
//! where the root's localities put it.

#![cfg_attr(not(feature = "pmix"), allow(dead_code))]

use std::fmt;

use crate::{card::Card, error::BootstrapError, lazy::Locality};

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
    /// Where the root's localities put `rank`, when known.
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
/// locality differs from the root's; [`BootstrapError::JobIdMismatch`] for
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
                "it puts rank {rank} on node {:016x} switch {} tree {}, the root on node \
                 {:016x} switch {} tree {}",
                got.node_id, got.switch_id, got.tree_id, l.node_id, l.switch_id, l.tree_id
            ),
        });
    }
    card.job_id = want.job_id;
    Ok(card)
}

/// The card a PE shows the root when its full card is in the store: its
/// rank, locality, class encoding version and pid, and no transport
/// addressing (what the root needs for the localities, nothing more).
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
    use crate::card::CardError;

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
