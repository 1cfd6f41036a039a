//! Connect-on-first-use over TCP (`cards = lazy`): a PE holds the card of
//! an off-node peer only once it talks to it.
//!
//! At init such a peer is known by its locality alone (the topology row has
//! its class), and its TCP health bits are set, so the router picks TCP for
//! it as for any other off-node peer. The first operation that reaches the
//! TCP driver for it finds the driver does not know it
//! ([`SocketError::PeerUnknown`]): out of line, [`Context::first_use`]
//! clears the peer's TCP health bits (the operation then waits for a link,
//! as during a reconnect, bounded by the op timeout), fetches the peer's
//! card from the rendezvous root, and hands its addresses to the driver,
//! which connects ([`SocketDriver::connect_on_first_use`](switchyard_socket::SocketDriver::connect_on_first_use)).
//! The rail's Up event sets the health bits again and the operation goes
//! out. A peer that connected to this PE first is served without its card
//! (the driver accepts it once its handshake proves the job key), and this
//! PE's operations to it use that connection. The hot path is unchanged:
//! the check is the driver's own peer lookup, and the work runs only on
//! its error.
//!
//! The bootstrap connection ([`LazyCards`]) is the PE's, shared by its
//! contexts behind a mutex: one card request at a time, which the root
//! answers at any time after init (between this PE's barriers: the
//! connection carries one exchange at a time). A context never holds the
//! mutex while it takes the TCP driver, nor holds the driver while it
//! waits for the root, so neither the progress thread nor another context
//! can deadlock with it; two contexts that need the same card get it from
//! the PE's record of fetched addresses (the root serves a card at most
//! twice per connection).
//!
//! Under the own root (no PMIx) a lazy PE knows at init only its node's
//! localities (bootstrap protocol 5, the node localities frame): an
//! off-node peer's class is [`PathClass::Unreachable`] until its first
//! use. The first operation toward it fails to select a route
//! (no link), and out of line, before anything is traced or returned,
//! [`Context::locate`] fetches the peer's card, whose locality gives its
//! class, and puts that class in the PE's topology row, once, in place
//! (`TopologyWriter::set_class_in_place`: no new version, so a context
//! idle with a sticky pin on an old one does not hold it up; readers of
//! every version see it); the operation then selects again (once per
//! operation), and TCP's first use follows as above. Another context
//! whose select failed before the class was there finds it located and
//! selects again. A peer whose card says it is unreachable (no switch,
//! another tree) fails as it would have at init, without another fetch.
//! Until its first use `Context::class` and the statistics show such a
//! peer as unreachable.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use switchyard_bootstrap::{Bootstrap, BootstrapError, Localities};
use switchyard_core::{
    class::PathClass,
    sync::atomic::{AtomicU64, Ordering},
    topology::LinkState,
};
use switchyard_socket::SocketError;

use super::{Context, Error, MAX_TCP_RAILS, Result, pe::lock, progress, tcp_rail};

/// The PE's lazy-card state: the bootstrap connection (after init) and
/// the addresses fetched so far.
#[derive(Debug, Default)]
pub(super) struct LazyCards {
    inner: Mutex<Fetched>,
    /// Cards fetched after init (every one an off-node peer's).
    fetched: AtomicU64,
}

#[derive(Debug, Default)]
struct Fetched {
    /// The connection to the rendezvous root, from the end of init until
    /// `finalize` takes it back.
    boot: Option<Bootstrap>,
    /// Per peer fetched, its TCP addresses: O(peers this PE talks to).
    addrs: BTreeMap<u32, Vec<SocketAddr>>,
    /// Per peer fetched that has one, its verbs PE card (for a lazy verbs
    /// driver: `Context::verbs_first_use`).
    verbs: BTreeMap<u32, Vec<u8>>,
    /// With only the node's localities at init: the off-node peers
    /// located at their first use.
    unlocated: Option<Unlocated>,
}

/// What the first use of an off-node peer whose locality was not sent at
/// init needs (`cards = lazy` under the own root).
#[derive(Debug)]
struct Unlocated {
    me: u32,
    /// This PE's node, switch and tree ids.
    my: (u64, u32, u32),
    /// This node's localities: a rank they do not hold (a gap) was not
    /// located at init.
    node: Localities,
    /// Per peer located since init: its class, and whether it was put in
    /// the topology (once, by the first context to get there). O(peers
    /// this PE talks to).
    located: BTreeMap<u32, (PathClass, bool)>,
}

/// What [`Context::locate`] did.
pub(super) enum Located {
    /// The peer's class is in the topology: select again.
    Applied,
    /// The topology's writer is claimed (another context's update, for
    /// a moment): wait a step and try again.
    Busy,
    /// The peer's card says it is unreachable from here.
    Unreachable,
}

impl LazyCards {
    /// Keeps the bootstrap connection for card fetches.
    pub(super) fn attach(&self, boot: Bootstrap) {
        lock(&self.inner).boot = Some(boot);
    }

    /// Takes the bootstrap connection back (`finalize`).
    pub(super) fn take_boot(&self) -> Option<Bootstrap> {
        lock(&self.inner).boot.take()
    }

    /// Off-node peers are located at their first use: `node` holds only
    /// this node's localities (`me` at `my`: node, switch and tree ids).
    pub(super) fn locate_on_first_use(&self, me: u32, my: (u64, u32, u32), node: Localities) {
        lock(&self.inner).unlocated = Some(Unlocated {
            me,
            my,
            node,
            located: BTreeMap::new(),
        });
    }

    /// Whether `pe` is an off-node peer whose locality was not sent at
    /// init, not known to be unreachable: not located yet, or located
    /// with a class a select may not have seen yet.
    pub(super) fn pending(&self, pe: u32) -> bool {
        self.unlocated(pe, |class| {
            class.is_none_or(|c| c != PathClass::Unreachable)
        })
    }

    /// Whether `pe` is an off-node peer whose locality was not sent at
    /// init and that no context located yet.
    pub(super) fn fresh(&self, pe: u32) -> bool {
        self.unlocated(pe, |class| class.is_none())
    }

    /// Whether `pe` is an off-node peer whose locality was not sent at
    /// init and `located` (its class, if located) says so.
    fn unlocated(&self, pe: u32, located: impl Fn(Option<PathClass>) -> bool) -> bool {
        lock(&self.inner).unlocated.as_ref().is_some_and(|u| {
            pe != u.me
                && pe < u.node.len()
                && u.node.get(pe).is_none()
                && located(u.located.get(&pe).map(|&(class, _)| class))
        })
    }

    /// `pe`'s class from its card's locality: fetched now from the root
    /// (its addresses kept for TCP's first use), or as an earlier fetch
    /// found it.
    fn class_of(&self, pe: u32) -> std::result::Result<PathClass, BootstrapError> {
        let mut f = lock(&self.inner);
        let Fetched {
            boot,
            addrs,
            verbs,
            unlocated,
        } = &mut *f;
        let Some(u) = unlocated.as_mut() else {
            return Ok(PathClass::Unreachable);
        };
        if let Some(&(class, _)) = u.located.get(&pe) {
            return Ok(class);
        }
        let boot = boot.as_mut().ok_or(BootstrapError::Unusable)?;
        let cards = boot.fetch_cards(&[pe])?;
        let Some(card) = cards.get(pe) else {
            return Err(BootstrapError::Unusable);
        };
        let at = (card.node_id, card.switch_id, card.tree_id);
        let class = super::parts::class_from(u.me, u.my, pe, at);
        self.fetched.fetch_add(1, Ordering::Relaxed);
        addrs.insert(pe, card.tcp.clone());
        // Its verbs PE card too: the first use finds the card here and
        // does not fetch it again (`Context::verbs_first_use`).
        if let Some(v) = card.verbs.clone() {
            verbs.insert(pe, v);
        }
        u.located.insert(pe, (class, false));
        Ok(class)
    }

    /// Whether `pe`'s class is in the topology; `set` records that it is.
    fn applied(&self, pe: u32, set: bool) -> bool {
        let mut f = lock(&self.inner);
        let Some(entry) = f.unlocated.as_mut().and_then(|u| u.located.get_mut(&pe)) else {
            return false;
        };
        entry.1 |= set;
        entry.1
    }

    /// Cards fetched after init.
    pub(super) fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// `pe`'s addresses, known already (tests without a rendezvous root):
    /// its first use finds them here (not counted as fetched).
    #[cfg(test)]
    pub(super) fn preload(&self, pe: u32, addrs: Vec<SocketAddr>) {
        lock(&self.inner).addrs.insert(pe, addrs);
    }

    /// As [`LazyCards::preload`], with `pe`'s verbs PE card.
    #[cfg(all(test, feature = "verbs"))]
    pub(super) fn preload_verbs(&self, pe: u32, addrs: Vec<SocketAddr>, verbs: Option<Vec<u8>>) {
        let mut f = lock(&self.inner);
        f.addrs.insert(pe, addrs);
        if let Some(v) = verbs {
            f.verbs.insert(pe, v);
        }
    }

    /// Whether `pe`'s card (addresses) is held: fetched, or preloaded.
    #[cfg(all(test, feature = "verbs"))]
    pub(super) fn holds(&self, pe: u32) -> bool {
        lock(&self.inner).addrs.contains_key(&pe)
    }

    /// `pe`'s verbs PE card, when its fetched card has one.
    fn verbs_of(&self, pe: u32) -> Option<Vec<u8>> {
        lock(&self.inner).verbs.get(&pe).cloned()
    }

    /// `pe`'s TCP addresses: fetched now from the root, or as an earlier
    /// fetch (by any context) found them.
    fn addrs_of(&self, pe: u32) -> std::result::Result<Vec<SocketAddr>, BootstrapError> {
        let mut f = lock(&self.inner);
        if let Some(a) = f.addrs.get(&pe) {
            return Ok(a.clone());
        }
        let boot = f.boot.as_mut().ok_or(BootstrapError::Unusable)?;
        let cards = boot.fetch_cards(&[pe])?;
        let addrs = cards.get(pe).map(|c| c.tcp.clone()).unwrap_or_default();
        if let Some(v) = cards.get(pe).and_then(|c| c.verbs.clone()) {
            f.verbs.insert(pe, v);
        }
        self.fetched.fetch_add(1, Ordering::Relaxed);
        f.addrs.insert(pe, addrs.clone());
        Ok(addrs)
    }
}

impl Context {
    /// Whether `pe` is an off-node peer located at its first use (see the
    /// module docs) and not known dead or unreachable.
    pub(super) fn locates_later(&mut self, pe: u32) -> bool {
        !self.is_dead(pe) && self.pe.lazy.as_ref().is_some_and(|l| l.pending(pe))
    }

    /// Whether no context located `pe` yet, an off-node peer whose
    /// locality was not sent at init: its failed select is not a failure
    /// yet (not traced).
    pub(super) fn located_by_none(&mut self, pe: u32) -> bool {
        !self.is_dead(pe) && self.pe.lazy.as_ref().is_some_and(|l| l.fresh(pe))
    }

    /// The first operation toward `pe`, an off-node peer whose locality
    /// was not sent at init, found no route (see the module docs): fetches
    /// its card (once per PE) and puts its class in the topology (once).
    #[cold]
    #[inline(never)]
    pub(super) fn locate(&mut self, pe: u32) -> Result<Located> {
        let pe_inner = Arc::clone(&self.pe);
        let Some(lazy) = pe_inner.lazy.as_ref() else {
            return Ok(Located::Unreachable);
        };
        // Nothing of the driver is held while the root answers.
        self.leave();
        let class = lazy.class_of(pe)?;
        if class == PathClass::Unreachable {
            lazy.applied(pe, true);
            return Ok(Located::Unreachable);
        }
        // In place, from `Unreachable`, once: under the writer, which
        // `mark_dead` claims too.
        let Some(mut w) = self.topo.writer() else {
            return Ok(Located::Busy);
        };
        if lazy.applied(pe, false) {
            return Ok(Located::Applied);
        }
        w.set_class_in_place(pe, PathClass::Unreachable, class);
        // After the store: a context that sees it applied (under the
        // mutex) reads the class next.
        lazy.applied(pe, true);
        drop(w);
        tracing::debug!(
            pe = self.me,
            peer = pe,
            class = class.name(),
            "lazy cards: located an off-node peer on first use"
        );
        Ok(Located::Applied)
    }

    /// The first operation toward `pe` found the TCP driver without it
    /// (`cards = lazy`; see the module docs): fetches its card and starts
    /// connecting; the caller's routed loop then waits for the link.
    /// Without lazy cards, the driver's error as it is.
    #[cold]
    #[inline(never)]
    pub(super) fn first_use(&mut self, pe: u32, e: SocketError) -> Result<()> {
        let pe_inner = Arc::clone(&self.pe);
        let Some(lazy) = pe_inner.lazy.as_ref() else {
            return Err(Error::Tcp(e));
        };
        let rails = self
            .tcp
            .as_mut()
            .map_or(0, |t| t.get().rails())
            .min(MAX_TCP_RAILS);
        // The operation waits for the link, as it does during a reconnect.
        for r in 0..rails {
            self.topo.apply_link_state(tcp_rail(r), pe, LinkState::Down);
        }
        // Nothing of the driver is held while the root answers.
        self.leave();
        let connected = lazy
            .addrs_of(pe)
            .map_err(Error::from)
            .and_then(|addrs| self.connect_first(pe, &addrs));
        if connected.is_err() {
            // Not connecting: the next operation toward `pe` tries again
            // (and fails at once the same way) rather than waiting for a
            // link nobody makes.
            for r in 0..rails {
                self.topo.set_health(tcp_rail(r), pe, true);
            }
        } else {
            // A lazy verbs driver pairs with `pe` now (its records go over
            // the TCP connection being made); traffic stays on TCP until
            // the link is up at both ends and a quiet raised its bit.
            let card = lazy.verbs_of(pe);
            self.verbs_first_use(pe, card.as_deref());
            self.leave();
        }
        connected
    }

    /// Gives `pe`'s fetched addresses to the TCP driver, which connects
    /// (unless it knows `pe` by now: another context did, or `pe`
    /// connected first).
    fn connect_first(&mut self, pe: u32, addrs: &[SocketAddr]) -> Result<()> {
        if addrs.is_empty() {
            return Err(Error::TransportUnavailable {
                transport: tcp_rail(0),
                pe,
            });
        }
        tracing::debug!(
            pe = self.me,
            peer = pe,
            "lazy cards: connecting on first use"
        );
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get)
            && !t.knows_peer(pe)
        {
            t.connect_on_first_use(pe, addrs)?;
        }
        Ok(())
    }

    /// With `cards = lazy` over TCP: the off-node cards this PE fetched
    /// since init (one per peer it started talking to; peers that
    /// connected to it first need none). `None` otherwise (every card was
    /// fetched at init).
    pub fn lazy_cards_fetched(&self) -> Option<u64> {
        self.pe.lazy.as_ref().map(LazyCards::fetched)
    }

    /// The TCP driver's counters (`None` without TCP).
    pub fn tcp_stats(&mut self) -> Option<switchyard_socket::SocketStats> {
        let s = self.tcp.as_mut().map(|t| t.get().stats());
        self.leave();
        s
    }

    /// How many peers this PE's TCP driver holds connection state for
    /// (0 without TCP): every off-node peer with eager cards, only those
    /// it talked to or that talked to it with lazy ones.
    pub fn tcp_peer_count(&mut self) -> usize {
        let n = self.tcp.as_mut().map_or(0, |t| t.get().peer_count());
        self.leave();
        n
    }
}
