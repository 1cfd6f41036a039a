//! Load bits: each (transport, peer)'s backlog against the load watermark,
//! fed to the topology row's load bits, which the route policy's rule 4
//! reads (a preferred transport over its watermark yields to the next
//! healthy one that is not).
//!
//! # The rule
//!
//! Per (transport, peer), for the TCP rails and RDMA verbs; with `W` the
//! configured `load_watermark`:
//!
//! * **Set** when, right after an operation was handed to that transport
//!   toward that peer, its backlog is *over* `W` of its capacity.
//! * **Cleared** when the backlog is no longer over `W / 2` (hysteresis:
//!   a bit set at 75% stays set down to 37.5%, so a queue hovering at the
//!   watermark does not flip its peer's route on every operation).
//!
//! What backlog and capacity are, per driver:
//!
//! * **TCP rail** ([`SocketDriver::backlog`](switchyard_socket::SocketDriver::backlog)):
//!   the put, get and atomic frames on that rail toward the peer not yet
//!   acknowledged (or acknowledged and waiting for their reply), in frames
//!   and in bytes (64-byte header plus payload each), against
//!   [`backlog_capacity`](switchyard_socket::SocketDriver::backlog_capacity):
//!   4096 frames (the receiver's deduplication window) and `tcp_window`
//!   bytes. Over in frames *or* in bytes is over. Both capacities belong to
//!   the peer, shared by its rails: a rail holding 75% of the window leaves
//!   a quarter to the others.
//! * **Verbs** ([`VerbsDriver::backlog`](switchyard_verbs::VerbsDriver::backlog)):
//!   the work requests on the peer's data queue pairs not yet known
//!   complete, against the send-queue slots puts and gets compete for
//!   (`(sq_depth - 1) * data_qps`). Atomics (the control queue pair) do not
//!   count. A work request is known complete only once its completion is
//!   polled, so before the bit is set, and before a set bit is kept when an
//!   operation is routed around it, the driver's completions are polled
//!   once (one verbs progress step): work the device finished is not load.
//! * **Shared memory** has no queue (a put is a copy into the peer's heap,
//!   complete when it returns): it has no load bit and nothing is read.
//!
//! A `load_watermark` of 100 turns the bits off (no queue is over its whole
//! capacity: a full one is flow control's, and the operation waits for it).
//!
//! # Where it runs
//!
//! * **Set**: in the routed path, after a successful hand-off to a TCP rail
//!   or to verbs: one O(1) read of that (transport, peer)'s backlog and a
//!   compare; no allocation, no lock, no system call. Only when it is over
//!   does anything more happen (the record below; for verbs the one
//!   completion poll).
//! * **Clear**: only the pairs whose bit is set are looked at, never every
//!   peer. They are kept in a record of fixed capacity ([`MAX_LOADED`],
//!   inline in the context, nothing allocated), re-checked in every
//!   progress step of the application (`Context::poll_once`: each step of
//!   every wait, where acks and completions are processed), at the end of
//!   every `quiet`, and, for the transports an operation is routed around,
//!   before that operation runs: so a stream of puts returns to its
//!   preferred transport within one operation of the backlog falling,
//!   whether the acks were processed by the application or by the TCP
//!   progress thread. The progress thread itself clears nothing (it holds
//!   the TCP driver, not the context): a bit left set while the application
//!   computes costs at most the one operation that re-checks it.
//! * The bits are the PE's (its topology row), shared by its contexts;
//!   the record of which to re-check is each context's own. A context that
//!   routes around a bit another context set re-checks it and clears it
//!   when that pair drained, so a bit never outlives the context that set
//!   it being busy, idle or dropped; a context whose recorded bit another
//!   one cleared just forgets it, and a bit set again is counted once.
//! * When [`MAX_LOADED`] pairs are loaded at once, a further pair's bit is
//!   not set (it could never be cleared): its traffic stays on its
//!   preferred transport, paced by that transport's flow control.
//!
//! # Which operations yield
//!
//! Puts and gets. Atomics take the first healthy candidate of their route,
//! as without load bits ([`Context::load_route`]). A yield splits a peer's
//! traffic; a get or fetching atomic over one TCP rail while another holds
//! frames toward the peer waits for them first (`order.rs`,
//! `Context::order_rails`).
//!
//! # Counting
//!
//! `Stats::load_transitions` counts the bits set and cleared,
//! `Stats::load_yields` the operations routed away from a loaded preferred
//! transport (also downgrades, counted per class where the class says so);
//! each such operation is traced [`TraceRecord::LOAD`].

use switchyard_core::{
    class::{MAX_TRANSPORTS, TransportId},
    route::{LoadWatermark, Op, Route},
    sync::atomic::Ordering,
    trace::TraceRecord,
};

use super::{Context, VERBS, progress, rail_of};

/// Most (transport, peer) pairs whose load bit is set at once.
pub const MAX_LOADED: usize = 64;

/// When a load bit is set and when it is cleared (the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rule {
    /// Over this: set.
    pub(super) set: LoadWatermark,
    /// No longer over this: cleared (half of `set`).
    pub(super) clear: LoadWatermark,
}

impl Rule {
    /// The rule for `watermark`; `None` (no load bits) at 100% and up.
    pub(super) const fn new(watermark: LoadWatermark) -> Option<Rule> {
        if watermark.per_mille >= 1000 {
            return None;
        }
        Some(Rule {
            set: watermark,
            clear: LoadWatermark {
                per_mille: watermark.per_mille / 2,
            },
        })
    }

    /// The bit's next value, from its value now and whether the backlog is
    /// over a level (`over(level)`, the driver's own comparison).
    #[inline]
    pub(super) fn next(self, bit: bool, over: impl FnOnce(LoadWatermark) -> bool) -> bool {
        if bit {
            over(self.clear)
        } else {
            over(self.set)
        }
    }
}

/// The context's load-bit state: the rule, and the pairs whose bit is set.
#[derive(Debug)]
pub(super) struct Load {
    /// `None`: load bits off (`load_watermark` 100).
    rule: Option<Rule>,
    /// What a TCP rail's backlog is measured against (the driver's
    /// constant, read once).
    tcp_capacity: switchyard_socket::Backlog,
    /// The (transport, peer) pairs whose load bit is set, in no order.
    loaded: heapless::Vec<(TransportId, u32), MAX_LOADED>,
}

impl Load {
    /// The state for `watermark`, TCP backlogs measured against
    /// `tcp_capacity`; no bit set.
    pub(super) fn new(watermark: LoadWatermark, tcp_capacity: switchyard_socket::Backlog) -> Load {
        Load {
            rule: Rule::new(watermark),
            tcp_capacity,
            loaded: heapless::Vec::new(),
        }
    }

    /// Whether some pair's bit is set (what a load yield needs).
    #[inline(always)]
    pub(super) fn any(&self) -> bool {
        !self.loaded.is_empty()
    }

    /// The rule's watermark and the TCP capacity it applies to, for the
    /// progress thread's load hint on a submission ring (`submit.rs`);
    /// `None` when load bits are off.
    #[inline]
    pub(super) fn ring_rule(&self) -> Option<(LoadWatermark, switchyard_socket::Backlog)> {
        self.rule.map(|r| (r.set, self.tcp_capacity))
    }

    /// The pairs whose bit is set now.
    #[cfg(test)]
    pub(super) fn loaded(&self) -> &[(TransportId, u32)] {
        &self.loaded
    }
}

impl Context {
    /// Before `route`'s operation toward `pe` runs: whether `route` is a
    /// load yield ([`Context::load_route`]; only a downgraded route can be
    /// one, and only while some bit is set). An atomic's route may be
    /// changed: atomics do not yield.
    #[inline(always)]
    pub(super) fn load_yield(&mut self, pe: u32, len: u64, op: Op, route: &mut Route) -> bool {
        if !route.downgraded
            || (self.load.loaded.is_empty() && self.pe.load_bits.load(Ordering::Relaxed) == 0)
        {
            return false;
        }
        // By value: the caller's route stays in registers (a reference
        // into the cold call would keep it in memory, and the hot path
        // would read it back through a store-forwarding stall).
        let (yielded, r) = self.load_route(pe, len, op, *route);
        *route = r;
        yielded
    }

    /// After `route`'s operation toward `pe` was handed to its driver:
    /// counts and flags a load yield, and sets the bit of the transport
    /// taken when its backlog went over the watermark. Nothing at all for
    /// shared memory.
    #[inline]
    pub(super) fn load_after(&mut self, pe: u32, route: &Route, yielded: bool) {
        let Some(rule) = self.load.rule else { return };
        if yielded {
            self.stats.load_yields += 1;
            self.next_flags |= TraceRecord::LOAD;
        }
        if self.backlog_over(route.transport, pe, rule.set) {
            self.load_mark(route.transport, pe, rule);
        }
    }

    /// After an operation went on this context's own verbs QP set (no
    /// load bit is set from a set's backlog): counts and flags a load
    /// yield, as [`Context::load_after`] does.
    #[inline]
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "only verbs has per-context QP sets")
    )]
    pub(super) fn load_yielded(&mut self, yielded: bool) {
        if yielded && self.load.rule.is_some() {
            self.stats.load_yields += 1;
            self.next_flags |= TraceRecord::LOAD;
        }
    }

    /// A load hint of this context's submission ring (`submit.rs`): the
    /// progress thread read the named pair's backlog over the watermark
    /// right after issuing a ring entry on it, as `load_after` does after a
    /// direct put: its bit is set (cleared as any other bit).
    #[cold]
    #[inline(never)]
    pub(super) fn ring_load_hint(&mut self, h: u32) {
        let (Some(rule), Some((pe, rail))) = (self.load.rule, super::submit::hint_pair(h)) else {
            return;
        };
        if pe < self.n_pes {
            self.load_mark(super::tcp_rail(rail), pe, rule);
        }
    }

    /// Re-checks every pair whose bit is set and clears those whose backlog
    /// is no longer over half the watermark. `poll`: poll verbs'
    /// completions before keeping its bit (not needed right after a
    /// progress step or a quiet). One branch when no bit is set.
    #[inline]
    pub(super) fn load_recheck(&mut self, poll: bool) {
        if self.load.loaded.is_empty() {
            return;
        }
        self.load_recheck_all(poll);
    }

    #[cold]
    fn load_recheck_all(&mut self, poll: bool) {
        let Some(rule) = self.load.rule else { return };
        let mut i = 0;
        while let Some(&(t, pe)) = self.load.loaded.get(i) {
            if !self.topo.is_overloaded(t, pe) {
                // Another context cleared it: nothing left to watch.
                self.load.loaded.swap_remove(i);
            } else if self.load_keep(t, pe, rule, poll) {
                i += 1;
            } else {
                self.load_clear_at(i);
            }
        }
    }

    /// Whether (`t`, `pe`)'s backlog is over `level`: an O(1) read of the
    /// driver's counters; false for shared memory and for a transport this
    /// context does not drive.
    #[inline]
    fn backlog_over(&mut self, t: TransportId, pe: u32, level: LoadWatermark) -> bool {
        if t == VERBS {
            return self.verbs_backlog_over(pe, level);
        }
        let Some(r) = rail_of(t) else { return false };
        let cap = self.load.tcp_capacity;
        self.tcp
            .as_mut()
            .is_some_and(|tcp| tcp.get().backlog(pe, r).exceeds(level, cap))
    }

    /// Whether (`t`, `pe`)'s set bit stays set ([`Rule::next`]); for verbs,
    /// with `poll`, only if still over after its completions were polled.
    fn load_keep(&mut self, t: TransportId, pe: u32, rule: Rule, poll: bool) -> bool {
        rule.next(true, |level| {
            self.backlog_over(t, pe, level)
                && (t != VERBS || !poll || {
                    self.verbs_poll(self.now_cache);
                    self.verbs_backlog_over(pe, level)
                })
        })
    }

    /// Sets (`t`, `pe`)'s bit (its backlog was read over the watermark),
    /// unless it is set already (by this context or another) or the record
    /// is full; verbs only if it is still over once its completions were
    /// polled.
    #[cold]
    fn load_mark(&mut self, t: TransportId, pe: u32, rule: Rule) {
        if self.topo.is_overloaded(t, pe) {
            return;
        }
        // Still in the record when another context cleared the bit since.
        let known = self.load.loaded.contains(&(t, pe));
        if !known && self.load.loaded.is_full() {
            return;
        }
        if t == VERBS {
            self.verbs_poll(self.now_cache);
            if !rule.next(false, |level| self.verbs_backlog_over(pe, level)) {
                return;
            }
        }
        if (known || self.load.loaded.push((t, pe)).is_ok())
            && self.topo.set_overloaded(t, pe, true) == Some(false)
        {
            self.pe.load_bits.fetch_add(1, Ordering::Relaxed);
            self.stats.load_transitions += 1;
        }
    }

    /// Forgets the `i`-th loaded pair and clears its bit, unless another
    /// context cleared it already.
    fn load_clear_at(&mut self, i: usize) {
        let (t, pe) = self.load.loaded.swap_remove(i);
        self.load_clear(t, pe);
    }

    /// Clears (`t`, `pe`)'s bit, whichever context of the PE set it (the bit
    /// is the PE's, in the shared topology row; a context that set it may
    /// be busy elsewhere or gone); counted by the context that cleared it.
    fn load_clear(&mut self, t: TransportId, pe: u32) {
        if self.topo.set_overloaded(t, pe, false) == Some(true) {
            self.pe.load_bits.fetch_sub(1, Ordering::Relaxed);
            self.stats.load_transitions += 1;
        }
    }

    /// A downgraded route while some bit is set: is it a load yield (a
    /// candidate before the one taken is healthy, so select passed it over
    /// for its load bit)? Re-checks each transport passed over, so that the
    /// next operation returns to it once it drained.
    ///
    /// Atomics do not yield: they take the first healthy candidate, as
    /// without load bits (the route is changed to it). Moving an atomic to
    /// another transport can change the agent that executes it (the NIC's
    /// atomics or the target's CPU, not atomic with each other on most
    /// devices: `verbs_atomics`), and verbs' atomics do not queue behind
    /// the puts and gets its backlog counts.
    #[cold]
    #[inline(never)]
    fn load_route(&mut self, pe: u32, len: u64, op: Op, route: Route) -> (bool, Route) {
        let held = self.tcp.as_ref().is_some_and(progress::Tcp::held);
        let r = self.load_route_in(pe, len, op, route);
        if !held {
            self.verbs_back();
        }
        if !held && let Some(t) = self.tcp.as_mut() {
            // Taken here only to read backlogs: the operation may still go
            // over shared memory, whose leg returns without giving the TCP
            // driver back, which would keep the progress thread out.
            t.leave();
        }
        r
    }

    fn load_route_in(&mut self, pe: u32, len: u64, op: Op, mut route: Route) -> (bool, Route) {
        let Some(rule) = self.load.rule else {
            return (false, route);
        };
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        // (position among the candidates, transport)
        let mut passed: heapless::Vec<(usize, TransportId), MAX_TRANSPORTS> = heapless::Vec::new();
        for (i, t) in self
            .sel
            .policy()
            .candidates_for(route.class, len32, op)
            .enumerate()
        {
            if t == route.transport {
                break;
            }
            if self.topo.is_healthy(t, pe) && self.topo.is_overloaded(t, pe) {
                // At most MAX_TRANSPORTS candidates: it fits.
                let _ = passed.push((i, t));
            }
        }
        let Some(&(first, preferred)) = passed.first() else {
            return (false, route);
        };
        for &(_, t) in &passed {
            if !self.load_keep(t, pe, rule, true) {
                // Set by this context or by another: cleared either way.
                match self.load.loaded.iter().position(|&e| e == (t, pe)) {
                    Some(i) => self.load_clear_at(i),
                    None => self.load_clear(t, pe),
                }
            }
        }
        if op.is_atomic() {
            route.transport = preferred;
            route.downgraded = first > 0;
            return (false, route);
        }
        (true, route)
    }
}

#[cfg(test)]
#[path = "load_test.rs"]
mod test;
