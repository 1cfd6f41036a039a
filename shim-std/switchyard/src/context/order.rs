//! Completion and ordering: [`Context::fence`] and [`Context::quiet`], and
//! the ordering across transports for a peer whose operations are split over
//! RDMA verbs and TCP (see the rules in the [`verbs`](super::verbs) module
//! docs): which transports carried writes to each peer since they were last
//! known complete, two bits per peer, set without allocating.

use std::time::Instant;

use switchyard_core::{class::TransportId, route::Op, trace::TraceRecord, transport::Transport};

use super::{Context, Result, VERBS, progress, rail_of, wait::Watch};

/// The verbs bit of a peer's code.
pub(super) const V: u8 = 1;
/// The TCP bit (every rail: one driver, which orders its rails itself).
pub(super) const T: u8 = 2;

/// The tracking bit of transport `t`: verbs, TCP, or 0 for shared memory
/// (whose puts and atomics are complete when they return).
#[inline]
pub(super) fn kind(t: TransportId) -> u8 {
    if t == VERBS {
        V
    } else if rail_of(t).is_some() {
        T
    } else {
        0
    }
}

/// Per peer, the transports that carried writes (puts, non-fetching
/// atomics) to it that may not be complete yet; and whether a fence or a
/// mix makes the next switch of transport wait.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// Two bits per peer ([`V`], [`T`]), 32 peers a word. Empty while
    /// tracking is off.
    bits: Vec<u64>,
    /// Tracking is on (a verbs driver is attached: a peer's traffic may be
    /// split over two drivers).
    pub(super) enabled: bool,
    /// Some peer had writes over both transports since the last full quiet:
    /// the next fence must be a quiet.
    pub(super) mixed: bool,
    /// A fence was issued while writes were pending: a write over the other
    /// transport than a peer's pending writes must wait for them.
    pub(super) fenced: bool,
    /// Some bit may be set (else [`Order::clear`] has nothing to do).
    dirty: bool,
    /// The PE's shared drivers this context used since its last quiet
    /// ([`V`]: the shared verbs driver; [`T`]: TCP, its submission ring
    /// included): what its `quiet` and `fence` act on beyond shared memory
    /// and its own QP sets. Tracked whether or not `enabled`; set on the
    /// driver's borrow (`Context::drv`), cleared by a successful quiet.
    pub(super) shared: u8,
}

impl Order {
    /// Tracking for `n_pes` peers (allocates once, at init).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "only verbs splits a peer's traffic")
    )]
    pub(super) fn enable(&mut self, n_pes: u32) {
        self.bits = vec![0; (n_pes as usize).div_ceil(32)];
        self.enabled = true;
    }

    /// The code of `pe` (0 for a PE outside the job).
    #[inline]
    pub(super) fn get(&self, pe: u32) -> u8 {
        let (w, sh) = (pe as usize / 32, (pe % 32) * 2);
        self.bits.get(w).map_or(0, |x| ((x >> sh) & 3) as u8)
    }

    /// Sets the code of `pe`.
    #[inline]
    pub(super) fn set(&mut self, pe: u32, code: u8) {
        let (w, sh) = (pe as usize / 32, (pe % 32) * 2);
        if let Some(x) = self.bits.get_mut(w) {
            *x = (*x & !(3 << sh)) | (u64::from(code & 3) << sh);
            self.dirty |= code != 0;
            self.mixed |= code == V | T;
        }
    }

    /// Everything is complete (a full quiet): no peer has pending writes.
    pub(super) fn clear(&mut self) {
        if self.dirty {
            self.bits.fill(0);
            self.dirty = false;
        }
        self.mixed = false;
        self.fenced = false;
    }

    /// A per-driver fence was issued: pending writes stay pending, but a
    /// later write over another transport must wait for them.
    pub(super) fn fence(&mut self) {
        self.fenced |= self.dirty;
    }
}

impl Context {
    /// Orders this context's earlier puts and non-fetching atomics to each
    /// PE before its later ones. Each driver orders its own operations, and
    /// only the drivers this context wrote to since its last quiet are
    /// fenced: shared memory, its own QP sets, and the PE's shared verbs
    /// driver and TCP only when it used them (so a context that wrote over
    /// shared memory and its sets only takes no entry lock). When a peer's
    /// writes since the last quiet went over both verbs and TCP this is a
    /// [`quiet`](Context::quiet) (see the ordering rules in the
    /// [`verbs`](super::verbs) module docs).
    ///
    /// # Errors
    ///
    /// When a transport is unusable; as [`Context::quiet`] when it is one.
    #[inline]
    pub fn fence(&mut self) -> Result<()> {
        // A call: the shared verbs state it may check out goes back (with
        // the TCP driver) when it returns.
        self.call().fence_in()
    }

    #[inline]
    fn fence_in(&mut self) -> Result<()> {
        self.ring_sync()?;
        if self.order.mixed {
            self.stats.ordering_waits += 1;
            return self.quiet();
        }
        self.order.fence();
        self.shm.fence()?;
        // The PE's drivers only when this context wrote on them since its
        // last quiet (nothing of its own to order there otherwise).
        let used = self.order.shared;
        if used & V != 0
            && self.verbs_in()
            && let Some(v) = self.verbs.as_mut()
        {
            v.drv.fence()?;
        }
        // This context's own QP sets count as its verbs (no entry lock).
        self.verbs_sets_fence()?;
        if used & T != 0
            && let Some(t) = self.tcp.as_mut()
        {
            t.enter().fence()?;
        }
        Ok(())
    }

    /// Waits until every earlier operation of this context is complete at
    /// its target (bounded by the op timeout).
    ///
    /// What it waits for: shared memory (complete on return) and this
    /// context's own QP sets, always, without the entry lock; the PE's
    /// shared verbs driver only when this context used it since its last
    /// quiet (its `quiet_poll` completes every context's operations on it),
    /// TCP when it used TCP or the shared verbs driver (whose replays go
    /// over TCP). A context that used neither takes no entry lock at all,
    /// unless the shared verbs state has something for it (a loss to
    /// report, from a failover on the shared driver; or a link that came
    /// back up, whose health bit is set at the end of a quiet that
    /// completed both shared drivers) or one of its sets fails over (its
    /// settling runs under the lock).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](super::Error::Timeout), or the error of a failed operation naming its peer.
    pub fn quiet(&mut self) -> Result<()> {
        self.call().quiet_in()
    }

    fn quiet_in(&mut self) -> Result<()> {
        self.ring_sync()?;
        let start = Instant::now();
        let mut spins = 0u32;
        if self.quiet_local(start, &mut spins)? {
            return Ok(());
        }
        loop {
            let need = self.quiet_needs();
            let shm = self.shm.quiet_poll()?;
            // The shared driver when needed, and this context's own QP
            // sets (no entry lock for those).
            let verbs = self.verbs_quiet_poll(need & V != 0)? & self.verbs_sets_quiet_poll()?;
            let tcp = need & T == 0
                || match self.tcp.as_mut().map(progress::Tcp::get) {
                    Some(t) => t.quiet_poll()?,
                    None => true,
                };
            if shm && verbs && tcp {
                // Every write of this context is complete: no ordering is
                // owed, and nothing of it is on the shared drivers.
                self.order.clear();
                self.order.shared = 0;
                // With both shared drivers quiet, nothing sent over TCP is
                // still in flight: links that came (back) up may take
                // traffic now without overtaking it (only this context's
                // sets otherwise).
                self.verbs_raise(need & V != 0);
                // The drivers it waited for are empty: their load bits
                // clear.
                self.load_recheck(false);
                return Ok(());
            }
            // The drivers report a dead peer with operations pending; one
            // that died with nothing pending does not fail a quiet.
            self.pause(&mut spins, start, "quiet", Watch::Drivers)?;
        }
    }

    /// The PE's shared drivers this context's quiet must complete: those
    /// it used since its last quiet, TCP also after the shared verbs
    /// driver (its replays go over TCP), and both when the shared verbs
    /// state has something for this context ([`Context::verbs_attention`]).
    /// No lock, no allocation.
    #[inline]
    fn quiet_needs(&self) -> u8 {
        let mut k = self.order.shared;
        if self.verbs_attention() {
            k |= V;
        }
        if k & V != 0 {
            k |= T;
        }
        k
    }

    /// `quiet` without the entry lock, while this context has nothing on
    /// the PE's shared drivers (`quiet_needs`) and no QP set failing over:
    /// shared memory and its own sets, polled until complete (bounded by
    /// the op timeout). `Ok(false)`: the lock is needed after all (a set's
    /// link failed meanwhile); the caller goes on with the full quiet.
    #[inline]
    fn quiet_local(&mut self, start: Instant, spins: &mut u32) -> Result<bool> {
        loop {
            if self.quiet_needs() != 0 || !self.verbs_sets_local() {
                return Ok(false);
            }
            let shm = self.shm.quiet_poll()?;
            let verbs = self.verbs_quiet_poll(false)? & self.verbs_sets_quiet_poll()?;
            if shm && verbs {
                // Every write of this context is complete (it has none on
                // the shared drivers): no ordering is owed; its own sets
                // may be raised, the PE's health bits are not.
                self.order.clear();
                self.verbs_raise(false);
                return Ok(true);
            }
            *spins = spins.saturating_add(1);
            if spins.is_multiple_of(64) {
                let waited = start.elapsed();
                if waited > self.op_timeout {
                    return Err(super::Error::Timeout {
                        what: "quiet",
                        waited,
                        pe: None,
                    });
                }
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Cross-transport ordering before an operation of kind `op` goes to
    /// `pe` over transport kind `k` (see the rules in the [`verbs`](super::verbs) module
    /// docs): a read (get, fetching atomic) first completes `pe`'s pending
    /// writes over the other transport, so it observes them; a write does
    /// so only after a fence (else nothing orders them). Costs one bit test
    /// when `pe`'s traffic is not split.
    #[inline]
    pub(super) fn order_before(&mut self, pe: u32, k: u8, op: Op) -> Result<()> {
        let code = self.order.get(pe);
        let other = code & !k;
        if other == 0 {
            return Ok(());
        }
        let must = match op {
            Op::Get | Op::FetchingAtomic => true,
            Op::Put | Op::Atomic => self.order.fenced,
        };
        if must {
            self.quiet_kinds(other)?;
            self.order.set(pe, code & !other);
            self.stats.ordering_waits += 1;
            self.next_flags |= TraceRecord::ORDERED;
        }
        Ok(())
    }

    /// Ordering across TCP rails before a read (get, fetching atomic) goes
    /// to `pe` over rail `rail`. The driver keeps a peer's frames in order
    /// per connection, not across rails, and a load yield (or a rail coming
    /// back after a failover) splits a peer's traffic over rails: while
    /// another rail still holds frames toward `pe` (its backlog), the read
    /// first waits until every TCP operation is complete, so it observes
    /// every earlier write of this PE to that peer. Writes are not held
    /// (without a fence they are not ordered; a fence is, across rails, by
    /// the driver). Up to [`MAX_TCP_RAILS`](super::MAX_TCP_RAILS) counter
    /// reads for a read over TCP with more than one rail; nothing for a
    /// write.
    #[inline]
    pub(super) fn order_rails(&mut self, pe: u32, rail: usize, op: Op) -> Result<()> {
        if !matches!(op, Op::Get | Op::FetchingAtomic) {
            return Ok(());
        }
        let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) else {
            return Ok(());
        };
        if !(0..t.rails()).any(|r| r != rail && t.backlog(pe, r).frames > 0) {
            return Ok(());
        }
        self.quiet_kinds(T)?;
        if self.order.enabled {
            let code = self.order.get(pe);
            self.order.set(pe, code & !T);
        }
        self.stats.ordering_waits += 1;
        self.next_flags |= TraceRecord::ORDERED;
        Ok(())
    }

    /// Waits (bounded by the op timeout) until every earlier operation over
    /// the transports of `kinds` ([`V`], [`T`]) is complete.
    #[cold]
    fn quiet_kinds(&mut self, kinds: u8) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            // Verbs: the shared driver and this context's own QP sets.
            let verbs =
                kinds & V == 0 || (self.verbs_quiet_poll(true)? & self.verbs_sets_quiet_poll()?);
            let tcp = kinds & T == 0
                || match self.tcp.as_mut().map(progress::Tcp::get) {
                    Some(t) => t.quiet_poll()?,
                    None => true,
                };
            if verbs && tcp {
                // Acks and completions were processed (by the polls, maybe
                // with no step of `pause` between): loaded pairs may have
                // drained, as at the end of a quiet.
                self.load_recheck(false);
                return Ok(());
            }
            self.pause(&mut spins, start, "an ordering wait", Watch::Drivers)?;
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::context::{SHM, TCP, tcp_rail};

    #[test]
    fn two_bits_per_peer() {
        let mut o = Order::default();
        o.set(3, V);
        assert_eq!(o.get(3), 0, "off: nothing is kept");
        o.enable(70);
        assert_eq!(o.bits.len(), 3);
        for pe in [0, 31, 32, 69] {
            o.set(pe, V);
            assert_eq!(o.get(pe), V);
        }
        assert!(o.dirty && !o.mixed);
        o.set(32, V | T);
        assert!(o.mixed);
        assert_eq!((o.get(31), o.get(32), o.get(33)), (V, V | T, 0));
        o.set(32, T);
        assert_eq!(o.get(32), T);
        // Out of range: ignored, never a panic.
        o.set(200, V);
        assert_eq!(o.get(200), 0);
        o.fence();
        assert!(o.fenced);
        o.clear();
        assert!(!o.fenced && !o.mixed && (0..70).all(|p| o.get(p) == 0));
        o.fence();
        assert!(!o.fenced, "a fence with nothing pending changes nothing");
        assert_eq!(
            (kind(VERBS), kind(TCP), kind(tcp_rail(1)), kind(SHM)),
            (V, T, T, 0)
        );
    }
}
