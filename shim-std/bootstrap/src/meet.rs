//! The rendezvous: where the PEs meet ([`RankInfo::meeting`]), hosting the
//! root on rank 0 when asked to, and joining it ([`rendezvous`],
//! [`rendezvous_at`], [`rendezvous_at_lazy`]), into a [`Bootstrap`] and
//! every card or the localities.

use std::{net::SocketAddr, thread::JoinHandle, time::Duration};

use crate::{
    auth::JobSecret,
    card::Card,
    client::Bootstrap,
    env::RankInfo,
    error::BootstrapError,
    lazy::Localities,
    root::{RootServer, RootStats, check_timeout},
};

/// What [`rendezvous`] returns.
#[derive(Debug)]
pub struct Rendezvous {
    /// This PE's connection to the root, for barriers and the goodbye.
    pub bootstrap: Bootstrap,
    /// Every PE's card, indexed by rank.
    pub cards: Vec<Card>,
    /// The root's thread when this PE hosts it: join it after
    /// [`Bootstrap::finish`] (it ends when every PE has said goodbye, or
    /// fails naming who did not).
    pub root: Option<JoinHandle<Result<(), BootstrapError>>>,
    /// The hosted root's live counters ([`RootServer::stats`]), when this
    /// PE hosts it.
    pub root_stats: Option<RootStats>,
}

/// Where a job's PEs meet, decided before they start their transports
/// ([`RankInfo::meeting`]): the root's address, the secret they prove, and,
/// when rank 0 had to bind the root to learn its address (under PMIx),
/// that root.
#[derive(Debug)]
pub struct Meeting {
    /// The root's address.
    pub root: SocketAddr,
    /// The job secret.
    pub secret: JobSecret,
    /// Rank 0's root, bound and not yet serving.
    pub(crate) server: Option<RootServer>,
}

impl Meeting {
    /// Whether this PE holds the bound root (rank 0 under PMIx).
    pub fn hosts_root(&self) -> bool {
        self.server.is_some()
    }
}

impl RankInfo {
    /// Where this job's PEs meet.
    ///
    /// From the environment: `SWITCHYARD_ROOT` and [`RankInfo::job_secret`].
    /// Under PMIx (the `pmix` feature, rank and size from a PMIx server,
    /// the root hosted by rank 0): rank 0 makes the secret (unless the
    /// environment gives one), binds the root (at `SWITCHYARD_ROOT` when
    /// set, else on the loopback address for a job on one node, or an
    /// address of its host name), and publishes both in the PMIx store; the
    /// others read them there. Collective then: every PE calls it once;
    /// it waits at most `timeout` for the others.
    ///
    /// # Errors
    /// [`BootstrapError::NoRoot`], [`BootstrapError::ResolveRoot`],
    /// [`BootstrapError::NoSecret`] (from the environment); under PMIx
    /// also [`BootstrapError::Pmix`], [`BootstrapError::PmixRank0Failed`],
    /// [`BootstrapError::PmixValue`], [`BootstrapError::NoRootAddress`],
    /// [`BootstrapError::Bind`], [`BootstrapError::SecretInvalid`].
    pub fn meeting(&self, timeout: Duration) -> Result<Meeting, BootstrapError> {
        check_timeout(timeout)?;
        #[cfg(feature = "pmix")]
        if let Some(p) = &self.pmix
            && self.size > 1
            && self.root_host == crate::env::RootHost::Rank0
        {
            return p.meet(self, timeout);
        }
        let root = self.root_addr()?;
        let secret = self.job_secret(root)?;
        Ok(Meeting {
            root,
            secret,
            server: None,
        })
    }
}

/// Joins the job's rendezvous at `root`. With `host_root` (normally
/// [`RankInfo::hosts_root`]: `SWITCHYARD_ROOT_HOST=rank0`, the default,
/// under srun or mpirun) rank 0 first binds a [`RootServer`] at `root` itself
/// and serves it on a thread; every other PE (and every PE when the launcher
/// hosts the root) only connects, retrying until `timeout`.
///
/// Every PE proves the job's secret ([`RankInfo::job_secret`]).
///
/// # Errors
/// [`BootstrapError::NoSecret`] for a job with no secret whose root is not
/// on a loopback address; otherwise as [`rendezvous_at`].
pub fn rendezvous(
    info: &RankInfo,
    root: SocketAddr,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<Rendezvous, BootstrapError> {
    let meeting = Meeting {
        root,
        secret: info.job_secret(root)?,
        server: None,
    };
    rendezvous_at(info, meeting, card, timeout, host_root)
}

/// Joins the job's rendezvous where [`RankInfo::meeting`] said. The PE
/// that holds the meeting's bound root serves it on a thread; else, with
/// `host_root`, rank 0 binds a [`RootServer`] at the meeting's address and
/// serves it; every other PE only connects, retrying until `timeout`.
///
/// Under PMIx (the `pmix` feature, a job of more than one PE) every card
/// comes from PMIx's store instead (see the crate docs, "Cards under
/// PMIx"): the PE joins the root with its locality only, publishes its
/// card, enters a fence that collects the cards, and reads them all; the
/// root sends no card. Collective there: every PE must call this (not
/// [`rendezvous_at_lazy`]).
///
/// # Errors
/// [`BootstrapError::Bind`] or [`BootstrapError::Spawn`] when rank 0 cannot
/// host the root; otherwise as [`Bootstrap::join`]. When joining fails, the
/// hosted root's thread is joined first (it fails within its own timeout).
/// Under PMIx also [`BootstrapError::Pmix`] (a failed put, commit, fence
/// or get; the fence after `timeout`), [`BootstrapError::PmixValue`], and
/// those of [`Bootstrap::fetch_cards`] for a card that does not pass; the
/// PE then leaves the rendezvous, which fails the job at the root.
pub fn rendezvous_at(
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<Rendezvous, BootstrapError> {
    #[cfg(feature = "pmix")]
    if let Some(store) = crate::pmix::store_of(info) {
        return crate::pmix::rendezvous_all(store, info, meeting, card, timeout, host_root);
    }
    let j = host_and_join(info, meeting, card, timeout, host_root, Bootstrap::join)?;
    Ok(Rendezvous {
        bootstrap: j.bootstrap,
        cards: j.got,
        root: j.root,
        root_stats: j.root_stats,
    })
}

/// A lazy PE's rendezvous ([`rendezvous_at_lazy`]): every rank's locality
/// instead of every card; the cards it needs it fetches with
/// [`Bootstrap::fetch_cards`].
#[derive(Debug)]
pub struct LazyRendezvous {
    /// This PE's connection to the root, for card fetches, barriers and
    /// the goodbye.
    pub bootstrap: Bootstrap,
    /// Every rank's locality (runs); with [`rendezvous_at_lazy_node`]
    /// under the own root, only this PE's node's (the others are gaps).
    pub localities: Localities,
    /// The root's thread when this PE hosts it (as [`Rendezvous::root`]).
    pub root: Option<JoinHandle<Result<(), BootstrapError>>>,
    /// The hosted root's live counters (as [`Rendezvous::root_stats`]).
    pub root_stats: Option<RootStats>,
}

/// [`rendezvous_at`] with lazy cards ([`Bootstrap::join_lazy`]).
///
/// Under PMIx the PE joins the root with its locality only and publishes
/// its card in PMIx's store, behind a fence that does not collect the
/// cards; [`Bootstrap::fetch_cards`] then reads each card asked for from
/// the store (from its owner's PMIx server), and the returned
/// [`Bootstrap`] keeps the PMIx session open for that until it is dropped
/// or finished.
///
/// # Errors
/// As [`rendezvous_at`].
pub fn rendezvous_at_lazy(
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<LazyRendezvous, BootstrapError> {
    lazy_with(
        info,
        meeting,
        card,
        timeout,
        host_root,
        Bootstrap::join_lazy,
    )
}

/// [`rendezvous_at_lazy`] that asks the root only for this PE's node's
/// localities ([`Bootstrap::join_lazy_node`]): the returned
/// [`LazyRendezvous::localities`] has gaps for the other nodes' ranks,
/// whose localities come with their cards. Under PMIx, as
/// [`rendezvous_at_lazy`] (every locality, from the store; the root sends
/// none there).
///
/// # Errors
/// As [`rendezvous_at`].
pub fn rendezvous_at_lazy_node(
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
) -> Result<LazyRendezvous, BootstrapError> {
    lazy_with(
        info,
        meeting,
        card,
        timeout,
        host_root,
        Bootstrap::join_lazy_node,
    )
}

/// Both lazy rendezvous: PMIx's store when there is one, else the root,
/// joined with `join`.
fn lazy_with(
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
    join: JoinFn<Localities>,
) -> Result<LazyRendezvous, BootstrapError> {
    #[cfg(feature = "pmix")]
    if let Some(store) = crate::pmix::store_of(info) {
        return crate::pmix::rendezvous_lazy(store, info, meeting, card, timeout, host_root);
    }
    let j = host_and_join(info, meeting, card, timeout, host_root, join)?;
    Ok(LazyRendezvous {
        bootstrap: j.bootstrap,
        localities: j.got,
        root: j.root,
        root_stats: j.root_stats,
    })
}

/// The joining function of [`Bootstrap::join`]'s shape.
type JoinFn<T> = fn(
    SocketAddr,
    u32,
    u32,
    u64,
    Card,
    Duration,
    &JobSecret,
) -> Result<(Bootstrap, T), BootstrapError>;

/// What [`host_and_join`] gives: the connection, what the allgather gave,
/// and the hosted root's thread and counters.
pub(crate) struct Joined<T> {
    pub(crate) bootstrap: Bootstrap,
    pub(crate) got: T,
    pub(crate) root: Option<JoinHandle<Result<(), BootstrapError>>>,
    pub(crate) root_stats: Option<RootStats>,
}

/// Hosts the root when this PE should, then joins with `join`.
pub(crate) fn host_and_join<T>(
    info: &RankInfo,
    meeting: Meeting,
    card: Card,
    timeout: Duration,
    host_root: bool,
    join: JoinFn<T>,
) -> Result<Joined<T>, BootstrapError> {
    let Meeting {
        root,
        secret,
        server,
    } = meeting;
    let server = match server {
        Some(s) => Some(s),
        None if host_root && info.rank == 0 => Some(RootServer::bind(
            root,
            info.job_id,
            info.size,
            timeout,
            &secret,
        )?),
        None => None,
    };
    let (addr, handle, root_stats) = match server {
        Some(server) => {
            let stats = server.stats();
            (server.local_addr(), Some(server.spawn()?), Some(stats))
        }
        None => (root, None, None),
    };
    match join(
        addr,
        info.rank,
        info.size,
        info.job_id,
        card,
        timeout,
        &secret,
    ) {
        Ok((bootstrap, got)) => Ok(Joined {
            bootstrap,
            got,
            root: handle,
            root_stats,
        }),
        Err(e) => {
            if let Some(h) = handle {
                let _ = h.join();
            }
            Err(e)
        }
    }
}
