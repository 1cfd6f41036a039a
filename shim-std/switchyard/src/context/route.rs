//! The routed data path of every operation: select a route (the core's
//! [`Selector`](switchyard_core::route::Selector)), borrow the driver behind
//! the chosen transport id, run the operation on it, and trace the decision.
//! A full send window makes progress and retries; a dead link flips its
//! health bit and selects again when the route allows a retry; every wait is
//! bounded by the op timeout. After a hand-off to a TCP rail or to verbs,
//! that (transport, peer)'s backlog sets its load bit when over the load
//! watermark (`load.rs`).
//!
//! **The shm leg.** Put, get and the atomics select in line, then, when the
//! route is shared memory, not a downgrade, and nothing is pending
//! (`Context::leg_open`: no load yield possible, no verbs hold on the peer;
//! a downgraded route, rare on shared memory, takes the generic loop, which
//! counts the downgrade, so the leg tests no downgrade; shared memory has no
//! ordering kind and no load bit), run the shm driver's leg (`put_leg`,
//! `get_leg`, `atomic_leg`): one bounds check against the driver's cached
//! (base, heap length) of the peer's live mapping, and the store, load or
//! CPU atomic; a get or an atomic completes at once, without a ticket. The
//! operation is then counted and traced like any other. Whatever the leg
//! does not take (TCP, verbs, a pending state, a failed selection, a dead
//! or unmapped peer, a range out of bounds) goes, with the selection
//! already made, to the generic loop below, out of line: the leg writes
//! nothing when it declines, so nothing runs twice, and the typed error,
//! failover and waits are the loop's, as before.

use std::time::Instant;

use switchyard_core::{
    class::{PathClass, TransportId},
    route::{Op, Route, SelectError, UnreachableReason},
    topology::LinkState,
    trace::TraceRecord,
    transport::{ErrorKind, Ticket, TransportError},
    wire::FrameOp,
};
use switchyard_socket::SocketError;

use super::{
    Context, Error, Result, SHM, VERBS,
    drv::{Drv, DrvError},
    first_use::Located,
    order, progress, rail_of,
    wait::Watch,
};

/// A selection: the route, or why there is none (already traced).
pub(super) type Selected = core::result::Result<Route, SelectError>;

impl Context {
    /// Selects a route for one operation. A failed selection is traced at
    /// once; a successful one by [`Context::trace_route`] after the operation
    /// was issued, so recording it is off the critical path of the store.
    /// The selection is a core [`Selected`] (16 bytes, passed in
    /// registers to the out-of-line paths); [`Error::Route`] wraps its
    /// error where an operation returns it.
    #[inline(always)]
    pub(super) fn select(&mut self, pe: u32, len: u64, op: Op, frame: FrameOp) -> Selected {
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        self.sx_start();
        // Sticky pin, kept view: one Acquire load of the published version
        // per operation, no store, no fence; `pause` unpins when idle.
        match self.sel.select_sticky(pe, len32, op) {
            Ok(route) => Ok(route),
            Err(e) => Err(self.select_failed(pe, len32, frame, e)),
        }
    }

    /// Traces a failed selection (whatever the trace mode, unless off).
    #[cold]
    #[inline(never)]
    fn select_failed(
        &mut self,
        pe: u32,
        len32: u32,
        frame: FrameOp,
        e: SelectError,
    ) -> SelectError {
        // Not a failure yet: the peer is located at this first use
        // (`first_use.rs`), and traced then if it is unreachable.
        if matches!(
            e,
            SelectError::Unreachable {
                reason: UnreachableReason::NoLink,
                ..
            }
        ) && self.located_by_none(pe)
        {
            return e;
        }
        let class = match e {
            SelectError::Unreachable { class, .. }
            | SelectError::DowngradeForbidden { class, .. } => class.to_wire(),
            SelectError::InvalidPe { .. } => PathClass::Unreachable.to_wire(),
        };
        self.trace_always(TraceRecord {
            seq: 0,
            src: self.me,
            dst: pe,
            len: len32,
            class,
            transport: TraceRecord::NO_TRANSPORT,
            op: frame as u8,
            flags: TraceRecord::ERROR,
            timestamp: 0,
        });
        e
    }

    /// Handles a driver error: a dead peer flips its health bit (so the next
    /// select falls back or fails at once) and may be retried elsewhere (an
    /// operation the driver refused unsent, [`DrvError::not_issued`], always
    /// is).
    /// `retry_allowed`: the route's (by value, so the caller's route is
    /// never taken by reference into this cold call).
    #[cold]
    #[inline(never)]
    pub(super) fn on_error(
        &mut self,
        t: TransportId,
        e: DrvError,
        retry_allowed: bool,
    ) -> Option<Error> {
        if t == VERBS {
            // The link failed: apply its events and replay what it handed
            // back over TCP before this operation is retried there.
            self.verbs_events();
        }
        if e.kind() == ErrorKind::PeerDown {
            if let Some(pe) = e.peer() {
                self.topo.apply_link_state(t, pe, LinkState::Error);
                // The retry elsewhere is this peer's failover.
                self.failover.link(t, pe, false);
                if self.dead.get(pe as usize).copied().unwrap_or(false) {
                    return Some(Error::PeerDead {
                        pe,
                        what: "an operation on it",
                    });
                }
            }
            // An operation the driver refused before sending any of it
            // (a rail already down) is retried whatever the route says:
            // an atomic the route may not retry is not in doubt then, and
            // a select that finds no healthy link waits for one to come back.
            if retry_allowed || e.not_issued() {
                self.stats.reroutes += 1;
                if let Some(pe) = e.peer() {
                    self.sx_bump(t, pe, crate::statseg::PeerWord::Reroutes);
                }
                return None;
            }
        }
        Some(Error::from(e))
    }

    /// The driver behind transport id `t`, borrowed for one call; for
    /// verbs with `on_set`, this context's own QP set toward `pe`
    /// ([`Context::verbs_set_route`]), without the entry lock.
    #[inline]
    fn drv(&mut self, t: TransportId, pe: u32, on_set: bool) -> Option<Drv<'_>> {
        if t == SHM {
            return Some(Drv::Shm(&mut self.shm));
        }
        if t == VERBS {
            if on_set {
                return self.verbs_set_for(pe).map(Drv::Verbs);
            }
            // The PE's shared driver: this context's quiet and fence wait
            // for it from now on (`order.rs`).
            self.order.shared |= order::V;
            self.verbs_in();
            return self.verbs.as_mut().map(|v| Drv::Verbs(&mut v.drv));
        }
        let r = rail_of(t)?;
        // TCP: likewise.
        self.order.shared |= order::T;
        let tcp = self.tcp.as_mut().map(progress::Tcp::get)?;
        (r < tcp.rails()).then(|| Drv::Tcp(tcp.rail(r)))
    }

    /// Routes one operation and runs it on the chosen driver: `WouldBlock`
    /// makes progress and retries (bounded by the op timeout), a dead peer or
    /// link flips its health bit and re-selects when the route allows a
    /// retry, anything else is returned.
    #[inline]
    pub(super) fn routed<R>(
        &mut self,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        mut run: impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<R, DrvError>,
    ) -> Result<R> {
        self.routed_with(pe, len, op, frame, &mut run)
            .map(|(r, _)| r)
    }

    /// [`Context::routed`], also returning the route taken. Gives the TCP
    /// driver back to the progress thread when done.
    #[inline]
    fn routed_with<R>(
        &mut self,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        run: &mut impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<R, DrvError>,
    ) -> Result<(R, Route)> {
        self.routed_from(None, pe, len, op, frame, run)
    }

    /// The generic routed loop, out of line: what every operation the shm
    /// leg does not take runs (TCP, verbs; and on shared memory a pending
    /// load or verbs hold, or an error), starting from `first`, the
    /// selection the caller already made for it (or `None`: select here).
    /// Gives the TCP driver back to the progress thread when done.
    #[inline(never)]
    pub(super) fn routed_from<R>(
        &mut self,
        first: Option<Selected>,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        run: &mut impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<R, DrvError>,
    ) -> Result<(R, Route)> {
        self.call()
            .routed_with_in(first, pe, len, op, frame, run)
            .map(|(r, route, _)| (r, route))
    }

    /// Whether the shm leg may run an operation routed `r` toward `pe`:
    /// the route is shared memory, not downgraded, and nothing is pending
    /// that the generic loop would act on first (a verbs hold on `pe`; a
    /// load yield needs a downgraded route). A downgraded route goes to the
    /// generic loop, which counts the downgrade: the leg counts none. Shared
    /// memory has no ordering kind (`order::kind` is 0), no load bit and
    /// nothing to give back at `leave`. The flags are or-ed, so the leg is
    /// one branch.
    #[inline(always)]
    pub(super) fn leg_open(&self, pe: u32, r: &Route) -> bool {
        (r.transport == SHM) & !r.downgraded & !self.verbs_holds(pe)
    }

    /// What follows an operation the shm leg completed (on shared memory,
    /// not downgraded: [`Context::leg_open`]): counted, and its decision
    /// traced, as the generic loop does.
    #[inline(always)]
    pub(super) fn leg_done(&mut self, pe: u32, len: u64, frame: FrameOp, route: &Route) {
        self.sx_done_shm(pe, len);
        self.trace_route(pe, len, frame, route, false);
    }

    /// The generic loop; also returns the route taken and whether the
    /// operation went on this context's own QP set (its ticket is polled
    /// there).
    #[inline]
    fn routed_with_in<R>(
        &mut self,
        mut first: Option<Selected>,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        run: &mut impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<R, DrvError>,
    ) -> Result<(R, Route, bool)> {
        // What this context submitted through its ring goes first.
        self.ring_sync()?;
        // Set on the first WouldBlock: the wait for the window to open.
        let mut blocked_since: Option<Instant> = None;
        let mut spins = 0u32;
        // An off-node peer not located at init is located once per
        // operation at most (`first_use.rs`).
        let mut locate = true;
        loop {
            let sel = match first.take() {
                Some(sel) => sel,
                None => self.select(pe, len, op, frame),
            };
            let mut route = match sel.map_err(Error::Route) {
                Ok(r) => r,
                // Every link to `pe` is down, but the drivers have not given
                // up on it: they reconnect and replay. Wait for a link (the
                // wait ends with PeerDead at the give-up time, or the op
                // timeout) instead of failing an operation a brief cut would
                // only delay.
                Err(Error::Route(SelectError::Unreachable {
                    reason: UnreachableReason::NoHealthyTransport,
                    ..
                })) if self.tcp.is_some() && !self.is_dead(pe) => {
                    let start = *blocked_since.get_or_insert_with(Instant::now);
                    self.pause(&mut spins, start, "a link to come back", Watch::Peer(pe))?;
                    continue;
                }
                // `cards = lazy` under the own root: an off-node peer whose
                // locality comes with its card, at this first operation
                // toward it (`first_use.rs`).
                Err(Error::Route(
                    e @ SelectError::Unreachable {
                        reason: UnreachableReason::NoLink,
                        ..
                    },
                )) if locate && self.locates_later(pe) => {
                    match self.locate(pe)? {
                        Located::Applied => locate = false,
                        Located::Busy => {
                            let start = *blocked_since.get_or_insert_with(Instant::now);
                            let what = "the topology to take a peer's class";
                            self.pause(&mut spins, start, what, Watch::Peer(pe))?;
                        }
                        Located::Unreachable => {
                            let len32 = u32::try_from(len).unwrap_or(u32::MAX);
                            return Err(Error::Route(self.select_failed(pe, len32, frame, e)));
                        }
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let yielded = self.load_yield(pe, len, op, &mut route);
            if (route.transport != VERBS && self.verbs_holds(pe)) || self.verbs_set_holds(pe) {
                // The verbs link to `pe` (the PE's, or this context's QP
                // set's) failed with puts in doubt: nothing newer may
                // overtake their replay (or their receipts).
                let start = *blocked_since.get_or_insert_with(Instant::now);
                self.pause(&mut spins, start, "verbs receipts", Watch::Peer(pe))?;
                continue;
            }
            let k = if self.order.enabled {
                order::kind(route.transport)
            } else {
                0
            };
            if k != 0 {
                self.order_before(pe, k, op)?;
            }
            if let Some(r) = rail_of(route.transport) {
                self.order_rails(pe, r, op)?;
            }
            // Verbs: this context's own QP set toward `pe` once it routes
            // there (`verbs_context_sets`), else the PE's shared driver.
            let on_set = route.transport == VERBS && self.verbs_set_route(pe);
            let Some(mut d) = self.drv(route.transport, pe, on_set) else {
                return Err(Error::TransportUnavailable {
                    transport: route.transport,
                    pe,
                });
            };
            match run(&mut d, &route) {
                Ok(r) => {
                    if on_set {
                        self.stats.verbs_set_ops += 1;
                    } else if route.transport == VERBS {
                        // In flight on the shared driver for this context
                        // (its loss reports).
                        self.verbs_issued(pe);
                    }
                    if k != 0 && matches!(op, Op::Put | Op::Atomic) {
                        // A write that may be pending until quiet.
                        let code = self.order.get(pe) | k;
                        self.order.set(pe, code);
                    }
                    // Counted once issued (not per attempt: a send window
                    // that pushes back makes the loop select again; not
                    // again for a ring entry taken back after a stall,
                    // counted when it was submitted).
                    if !self.tcp.as_ref().is_some_and(progress::Tcp::redoing) {
                        self.sx_done(pe, len, &route);
                    }
                    if on_set {
                        // The set's backlog is this context's own: it
                        // sets no load bit (the PE's contexts share them).
                        self.load_yielded(yielded);
                    } else {
                        self.load_after(pe, &route, yielded);
                    }
                    self.trace_route(pe, len, frame, &route, false);
                    return Ok((r, route, on_set));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Flow control: the target pushes back. Progress, and
                    // give up only at the op timeout or when it dies.
                    self.sx_bump(route.transport, pe, crate::statseg::PeerWord::Retries);
                    if on_set {
                        // Its completions free room (no entry lock).
                        self.verbs_set_progress(pe);
                    }
                    let start = *blocked_since.get_or_insert_with(Instant::now);
                    self.pause(&mut spins, start, "a send window to open", Watch::Peer(pe))?;
                }
                // `cards = lazy`: the first operation toward a peer whose
                // card this PE has not fetched (nothing was sent): fetch
                // it, connect, and wait for the link (`first_use.rs`).
                Err(DrvError::Tcp(e @ SocketError::PeerUnknown { .. })) => {
                    self.first_use(pe, e)?;
                }
                Err(e) if on_set && e.kind() == ErrorKind::PeerDown => {
                    // The set's link is not up: the driver refused the
                    // operation before posting any of it, so it goes on
                    // the shared driver (selected again), and the set
                    // takes nothing more until its failure is settled.
                    // The shared driver's link is not concerned.
                    self.sx_bump(route.transport, pe, crate::statseg::PeerWord::Errors);
                    self.trace_route(pe, len, frame, &route, true);
                    self.verbs_set_unusable(pe);
                    self.stats.reroutes += 1;
                }
                Err(e) => {
                    self.sx_bump(route.transport, pe, crate::statseg::PeerWord::Errors);
                    self.trace_route(pe, len, frame, &route, true);
                    if let Some(err) = self.on_error(route.transport, e, route.retry_allowed) {
                        return Err(err);
                    }
                }
            }
        }
    }

    /// A blocking routed operation: `start` issues it, `poll` completes it
    /// (at once on shared memory; after the reply on TCP). A transport that
    /// fails meanwhile flips its health bit and, when the route allows, the
    /// operation is issued again elsewhere. `first`: the selection the
    /// caller already made for the operation (the shm leg's, when it did not
    /// take it), or `None`. Out of line.
    // The operation's description (pe, len, op, frame, what) and its two
    // halves; a struct for five plain values would only rename them.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn routed_wait<R>(
        &mut self,
        first: Option<Selected>,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        what: &'static str,
        start: impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<Ticket, DrvError>,
        poll: impl FnMut(&mut Drv<'_>, &Ticket) -> std::result::Result<Option<R>, DrvError>,
    ) -> Result<R> {
        // The latency of a sampled one is taken when its reply is in.
        let mut call = self.call();
        call.sx_defer(true);
        let r = call.routed_wait_in(first, pe, len, op, frame, what, start, poll);
        call.sx_defer(false);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn routed_wait_in<R>(
        &mut self,
        mut first: Option<Selected>,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        what: &'static str,
        mut start: impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<Ticket, DrvError>,
        mut poll: impl FnMut(&mut Drv<'_>, &Ticket) -> std::result::Result<Option<R>, DrvError>,
    ) -> Result<R> {
        loop {
            let (ticket, route, on_set) =
                self.routed_with_in(first.take(), pe, len, op, frame, &mut start)?;
            // The clock is read only if the first poll does not complete
            // (shared memory always does): no clock read per operation.
            let mut t0: Option<Instant> = None;
            let mut spins = 0u32;
            loop {
                let Some(mut d) = self.drv(route.transport, pe, on_set) else {
                    return Err(Error::TransportUnavailable {
                        transport: route.transport,
                        pe,
                    });
                };
                match poll(&mut d, &ticket) {
                    Ok(Some(r)) => {
                        self.sx_latency(frame, route.transport);
                        return Ok(r);
                    }
                    Ok(None) => {
                        let since = *t0.get_or_insert_with(Instant::now);
                        self.pause(&mut spins, since, what, Watch::Peer(pe))?;
                    }
                    Err(e) if on_set && e.kind() == ErrorKind::PeerDown => {
                        // The set's link failed under a get, or an atomic
                        // that never reached the device (one that may
                        // have run is `OutcomeUnknown`, below): issued
                        // again on the shared driver.
                        self.sx_bump(route.transport, pe, crate::statseg::PeerWord::Errors);
                        self.trace_route(pe, len, frame, &route, true);
                        self.verbs_set_unusable(pe);
                        self.stats.reroutes += 1;
                        break;
                    }
                    Err(e) => {
                        self.sx_bump(route.transport, pe, crate::statseg::PeerWord::Errors);
                        self.trace_route(pe, len, frame, &route, true);
                        match self.on_error(route.transport, e, route.retry_allowed) {
                            Some(err) => return Err(err),
                            None => break,
                        }
                    }
                }
            }
        }
    }
}
