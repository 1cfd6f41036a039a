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

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use switchyard_bootstrap::{Bootstrap, BootstrapError};
use switchyard_core::{
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
