//! Cards and localities through the PMIx store: every PE joins the root
//! with a card that holds only its locality ([`locality_only`]) and the
//! hello's store flag ([`Bootstrap::join_store`]: the root answers with the
//! joined frame, not the localities), then puts its locality under
//! [`KEY_LOCALITY`] (and its [`Card`], its encoding with job id 0, under
//! [`KEY_CARD`]; `PMIX_GLOBAL`), commits, and enters a fence over the
//! namespace that collects the data. Each PE reads every rank's locality
//! from its node's copy and builds the [`Localities`] ([`localities_from`]).
//! The root serves hellos, barriers and goodbyes, and never holds or sends
//! a connectable card or the localities.
//!
//! With every card wanted ([`crate::rendezvous_at`]) the card rides in that
//! collecting fence, so each `PMIx_Get` is answered from this node's copy.
//! With lazy cards ([`crate::rendezvous_at_lazy`]) it is put after it and
//! committed, and a fence that does not collect follows: the cards stay
//! with each PE's own PMIx server, and a `PMIx_Get` of a peer's card
//! fetches it from there when [`Bootstrap::fetch_cards`] asks for it
//! ("direct modex"). Every card read is checked ([`check_stored`]) against
//! the rank asked and its stored locality.

use std::time::Duration;

use super::{Handle, KEY_CARD, KEY_LOCALITY, failed, key_name, keys, sys, timeout_s};
use crate::{
    card::Card,
    client::Bootstrap,
    env::RankInfo,
    error::BootstrapError,
    lazy::{CardRefusal, Cards, Localities, Locality},
    meet::{Joined, LazyRendezvous, Meeting, Rendezvous, host_and_join},
    store::{
        Expected, StoredLocality, check_stored, encode_locality, localities_from, locality_only,
    },
};

/// Where a PE that publishes its card in PMIx fetches the others': the
/// session (alive as long as the [`Bootstrap`] that holds this) and the
/// localities from the store, which each card must agree with.
#[derive(Debug)]
pub(crate) struct CardStore {
    handle: Handle,
    localities: Localities,
}

/// Who asks (the fields of its [`Bootstrap`] the checks need).
pub(crate) struct Asker {
    pub(crate) me: u32,
    pub(crate) size: u32,
    pub(crate) job_id: u64,
    pub(crate) class: u8,
    pub(crate) timeout: Duration,
}

impl CardStore {
    /// The cards of `ranks` (duplicates fetched once), by `PMIx_Get`, each
    /// checked and with this job's id.
    ///
    /// # Errors
    /// [`BootstrapError::CardRefused`] with [`CardRefusal::UnknownRank`]
    /// for a rank not below the job size (nothing is fetched, as the root
    /// refuses such a request); [`BootstrapError::Pmix`] when a `PMIx_Get`
    /// fails (`PMIX_ERR_NOT_FOUND` for a rank that published no card);
    /// [`BootstrapError::PmixValue`] for a value that is not bytes; as
    /// [`check_stored`] for a card that does not pass.
    pub(crate) fn fetch(&self, ranks: &[u32], who: &Asker) -> Result<Cards, BootstrapError> {
        if let Some(&r) = ranks.iter().find(|&&r| r >= who.size) {
            return Err(BootstrapError::CardRefused {
                refusal: CardRefusal::UnknownRank(r),
            });
        }
        let mut out = Cards::default();
        for &rank in ranks {
            if out.get(rank).is_some() {
                continue;
            }
            let bytes = self.handle.card_bytes(rank, who.timeout)?;
            let want = Expected {
                rank,
                me: who.me,
                class: who.class,
                locality: self.localities.get(rank),
                job_id: who.job_id,
            };
            out.insert(check_stored(&bytes, "PMIx", &want)?);
        }
        Ok(out)
    }
}

impl Handle {
    /// Publishes this PE's locality and `card` (with job id 0), and builds
    /// the job's localities from every rank's: puts the locality under
    /// [`KEY_LOCALITY`] (and, with `all_cards`, the card under
    /// [`KEY_CARD`]), commits, and enters a fence over the namespace that
    /// collects the data, then reads every rank's locality from this
    /// node's copy. With lazy cards the card is put after that fence (the
    /// collected data holds only localities), committed, and a fence that
    /// does not collect makes sure every card is in its PE's server before
    /// anyone asks for it. Each fence waits at most `timeout`.
    fn publish(
        &self,
        (card, size): (&Card, u32),
        all_cards: bool,
        timeout: Duration,
    ) -> Result<Localities, BootstrapError> {
        let stored = Card {
            job_id: 0,
            ..card.clone()
        };
        let bytes = stored.encode().map_err(|source| BootstrapError::BadCard {
            from: "our own card".into(),
            source,
        })?;
        let mine = StoredLocality {
            locality: Locality::of(card),
            lazy: !all_cards,
        };
        self.put(KEY_LOCALITY, &encode_locality(mine))?;
        if all_cards {
            self.put(KEY_CARD, &bytes)?;
        }
        let key = if all_cards { KEY_CARD } else { KEY_LOCALITY };
        self.commit_and_fence(key, true, timeout)?;
        let me = self.0.me;
        let locs = localities_from(
            size,
            card.class_encoding_version,
            ("PMIx", me.rank(), mine),
            |rank| self.locality_bytes(rank, timeout),
        );
        let locs = locs?;
        if !all_cards {
            self.put(KEY_CARD, &bytes)?;
            self.commit_and_fence(KEY_CARD, false, timeout)?;
        }
        Ok(locs)
    }

    /// Commits what was put, and enters the fence over the namespace
    /// (collecting the data with `collect`; `key` names it in an error).
    fn commit_and_fence(
        &self,
        key: super::Key,
        collect: bool,
        timeout: Duration,
    ) -> Result<(), BootstrapError> {
        sys::commit().map_err(|s| failed("PMIx_Commit", s))?;
        sys::fence_all(&self.0.me, timeout_s(timeout), collect).map_err(|s| {
            let how = if collect {
                "collecting"
            } else {
                "not collecting"
            };
            failed(format!("PMIx_Fence({}, {how})", key_name(key)), s)
        })
    }

    /// The bytes `rank` published under [`KEY_LOCALITY`].
    fn locality_bytes(&self, rank: u32, timeout: Duration) -> Result<Vec<u8>, BootstrapError> {
        self.bytes_of(rank, KEY_LOCALITY, timeout)
    }

    /// The bytes `rank` published under [`KEY_CARD`] (its server is asked
    /// for at most `timeout`).
    fn card_bytes(&self, rank: u32, timeout: Duration) -> Result<Vec<u8>, BootstrapError> {
        self.bytes_of(rank, KEY_CARD, timeout)
    }

    /// The bytes `rank` published under `key` (a byte object; its server
    /// is asked for at most `timeout`).
    fn bytes_of(
        &self,
        rank: u32,
        key: super::Key,
        timeout: Duration,
    ) -> Result<Vec<u8>, BootstrapError> {
        let proc = self.0.me.with_rank(rank);
        self.get(&proc, key, Some(timeout), "a byte object", |v| match v {
            sys::Value::Bytes(b) => Ok(b),
            other => Err(other),
        })?
        .ok_or_else(|| {
            failed(
                format!("PMIx_Get({}, rank {rank})", key_name(key)),
                keys::ERR_NOT_FOUND,
            )
        })
    }
}

/// The PMIx session whose store carries this job's cards: under PMIx, for
/// a job of more than one PE.
pub(crate) fn store_of(info: &RankInfo) -> Option<&Handle> {
    info.pmix.as_ref().filter(|_| info.size > 1)
}

/// Joins the root with `card`'s locality only, saying that cards and
/// localities come from the store (the root sends only the joined frame),
/// then publishes the locality and `card` and builds the localities from
/// every rank's ([`Handle::publish`]); the [`Bootstrap`] keeps the session
/// and the localities for its fetches. The root first: a PE that never
/// comes is named by the root's allgather, which a fence's timeout would
/// not do.
fn join(
    handle: &Handle,
    info: &RankInfo,
    meeting: Meeting,
    card: &Card,
    (timeout, host_root, all_cards): (Duration, bool, bool),
) -> Result<Joined<Localities>, BootstrapError> {
    let short = locality_only(card);
    let j = host_and_join(
        info,
        meeting,
        short,
        timeout,
        host_root,
        Bootstrap::join_store,
    )?;
    let localities = match handle.publish((card, info.size), all_cards, timeout) {
        Ok(l) => l,
        Err(e) => return Err(abandon(j, e)),
    };
    let Joined {
        mut bootstrap,
        got: (),
        root,
        root_stats,
    } = j;
    bootstrap.set_card_store(CardStore {
        handle: handle.clone(),
        localities: localities.clone(),
    });
    Ok(Joined {
        bootstrap,
        got: localities,
        root,
        root_stats,
    })
}

/// Leaves the rendezvous after `e`: our close without a goodbye fails the
/// job at the root, which tells every PE why; a root we host ends with it
/// (within its linger), and is joined.
fn abandon<T>(j: Joined<T>, e: BootstrapError) -> BootstrapError {
    drop(j.bootstrap);
    if let Some(h) = j.root {
        let _ = h.join();
    }
    e
}

/// [`crate::rendezvous_at`] under PMIx: every card from the store (the
/// fence collects them), none through the root.
pub(crate) fn rendezvous_all(
    handle: &Handle,
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<Rendezvous, BootstrapError> {
    let mut j = join(handle, info, meeting, &card, (timeout, host_root, true))?;
    let others: Vec<u32> = (0..info.size).filter(|&r| r != info.rank).collect();
    let fetched = match j.bootstrap.fetch_cards(&others) {
        Ok(f) => f,
        Err(e) => return Err(abandon(j, e)),
    };
    let mut cards = Vec::with_capacity(info.size as usize);
    let mut fetched = fetched.into_iter().peekable();
    for r in 0..info.size {
        if r == info.rank {
            cards.push(card.clone());
        } else if let Some(c) = fetched.next_if(|c| c.rank == r) {
            cards.push(c);
        } else {
            // Not reached: fetch_cards returns one card per rank asked.
            let e = BootstrapError::Protocol {
                peer: "PMIx".into(),
                reason: format!("no card of rank {r}"),
            };
            return Err(abandon(j, e));
        }
    }
    // Every card is here: the session need not outlive the bootstrap
    // (a process that exits without finalizing PMIx is an error to mpirun).
    j.bootstrap.close_card_store();
    Ok(Rendezvous {
        bootstrap: j.bootstrap,
        cards,
        root: j.root,
        root_stats: j.root_stats,
    })
}

/// [`crate::rendezvous_at_lazy`] under PMIx: the fence does not collect the
/// cards; [`Bootstrap::fetch_cards`] gets each from the store when asked.
pub(crate) fn rendezvous_lazy(
    handle: &Handle,
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<LazyRendezvous, BootstrapError> {
    let j = join(handle, info, meeting, &card, (timeout, host_root, false))?;
    // The session outlives the bootstrap: a process that exits without
    // finalizing it (no shmem_finalize) must not fail the job.
    handle.finalize_at_exit();
    Ok(LazyRendezvous {
        bootstrap: j.bootstrap,
        localities: j.got,
        root: j.root,
        root_stats: j.root_stats,
    })
}
