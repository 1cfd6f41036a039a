//! The route trace ring: one binary record per routing decision (and per
//! failed one), written without allocating or formatting.

use switchyard_core::{
    class::PathClass,
    route::Route,
    trace::{TraceRecord, TraceRing},
    wire::FrameOp,
};

use super::{Context, VERBS};

/// Records kept in the route trace ring.
pub const TRACE_RECORDS: usize = 4096;

impl Context {
    /// The route trace ring (snapshot it with
    /// [`TraceRing::snapshot`](switchyard_core::trace::TraceRing::snapshot)).
    pub fn trace(&self) -> &TraceRing<TRACE_RECORDS> {
        self.trace_ring
    }

    /// Writes the trace record of a routed operation (`failed`: the driver
    /// returned an error for it).
    #[inline]
    pub(super) fn trace_route(
        &mut self,
        pe: u32,
        len: u64,
        frame: FrameOp,
        route: &Route,
        failed: bool,
    ) {
        let mut flags = if route.downgraded {
            TraceRecord::DOWNGRADED
        } else {
            0
        } | core::mem::take(&mut self.next_flags);
        if failed {
            flags |= TraceRecord::ERROR;
        } else if self.cpu_atomics_rule
            && frame == FrameOp::Atomic
            && route.transport != VERBS
            && (route.class == PathClass::Near
                || (route.class == PathClass::Routed
                    && len >= u64::from(self.sel.policy().config().short_threshold)))
            && self.verbs_up(pe)
        {
            flags |= TraceRecord::CPU_ATOMIC;
            self.stats.cpu_atomics += 1;
        }
        let rec = TraceRecord {
            seq: route.context.seq,
            src: self.me,
            dst: pe,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            class: route.class.to_wire(),
            transport: route.transport.index() as u8,
            op: frame as u8,
            flags,
            timestamp: crate::sys::ticks(),
        };
        self.trace.record(&rec);
    }
}
