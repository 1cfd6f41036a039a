//! The counters of a context.

use super::Context;

/// Counters of one context.
///
/// The PE's stats segment mirrors them, read from outside the process
/// (`switchyard stat`, `--json` under `pe`, `--prometheus` and `/metrics`
/// as `switchyard_pe_<name>_total`): each context publishes its counters
/// into its slot's PE block ([`PeWord`](crate::statseg::PeWord), named as
/// the fields here; `downgrades` summed over the classes) at init, every
/// 100 ms of its progress steps, at the end of `barrier_all` and when it
/// drops, and the readers sum the slots. `ops` is in the per-(peer, transport) blocks,
/// `tcp_refused` in the TCP driver's block (`refused_connections`), and
/// `progress_thread` is not there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Whether a progress thread runs for the TCP driver.
    pub progress_thread: bool,
    /// Bursts of progress steps that thread ran while the application was
    /// outside the library.
    pub progress_bursts: u64,
    /// Operations issued per transport id (once each, whatever the attempts
    /// a full send window or a failover took).
    pub ops: [u64; 8],
    /// Operations re-routed after a transport failed.
    pub reroutes: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Link-state transitions this PE's drivers reported.
    pub link_transitions: u64,
    /// Of those, links that went down or failed.
    pub links_lost: u64,
    /// Link-state records sent to other PEs.
    pub link_records_sent: u64,
    /// Link-state records from other PEs applied here.
    pub link_records_applied: u64,
    /// Peers found dead.
    pub dead_peers: u64,
    /// Route fallbacks per path class (`PathClass::index`): every selection
    /// whose route says [`downgraded`](switchyard_core::route::Route::downgraded)
    /// (NEAR to TCP while verbs is unavailable, a same-node peer over TCP
    /// when shared memory is off, a load yield), [`Context::route`] included.
    /// A class whose rule is `Allow` is counted as `AllowAndCount`.
    pub downgrades: [u64; 5],
    /// Verbs links that failed (each clears the verbs health bit; the
    /// peer's traffic goes over TCP until the link is rebuilt): the PE's,
    /// as its contexts share one verbs driver.
    pub verbs_failovers: u64,
    /// Operations the verbs driver handed back after a failure and were
    /// replayed over TCP: the PE's, whichever context replayed them.
    pub verbs_replays: u64,
    /// Verbs operations (puts, gets, atomics) this context posted on its
    /// own QP sets (`verbs_context_sets = on`), not on the PE's shared
    /// driver. In the stats segment as `verbs_set_ops` (the PE's contexts
    /// summed).
    pub verbs_set_ops: u64,
    /// Openings of this context's QP sets refused (the budget spent here
    /// or at the peer, the peer refusing or not answering in time): the
    /// context keeps the shared driver toward that peer for good (as it
    /// does toward a peer that closed its set). In the stats segment as
    /// `verbs_sets_refused` (the PE's contexts summed).
    pub verbs_sets_refused: u64,
    /// Atomics that would have gone over verbs (a NEAR peer, or a ROUTED one
    /// at `short_threshold` and up, whose verbs link was up) but went over
    /// TCP, run by the target's CPU, because the NIC's atomics are not
    /// atomic with respect to the CPU's (`verbs_atomics`). Not failures, not
    /// downgrades; traced with [`TraceRecord::CPU_ATOMIC`](switchyard_core::trace::TraceRecord::CPU_ATOMIC).
    pub cpu_atomics: u64,
    /// Operations (and fences) that first waited for this PE's earlier
    /// operations to the same peer over another transport to complete (a
    /// peer's traffic split over verbs and TCP, see the ordering rules in
    /// [`verbs`](super::verbs); or a get or fetching atomic over one TCP
    /// rail while another still held frames toward the peer, see the
    /// [module docs](super#load)). Traced with [`TraceRecord::ORDERED`](switchyard_core::trace::TraceRecord::ORDERED).
    pub ordering_waits: u64,
    /// Load bits this context set or cleared: a (TCP rail or verbs, peer)
    /// whose backlog went over the load watermark, or back to at most half
    /// of it (the rule is in the [module docs](super#load)).
    pub load_transitions: u64,
    /// Operations routed away from their preferred transport because its
    /// load bit toward the peer was set (the route policy's rule 4); also
    /// downgrades. Traced with [`TraceRecord::LOAD`](switchyard_core::trace::TraceRecord::LOAD).
    pub load_yields: u64,
    /// Connections this PE's TCP rail listeners refused, by
    /// [`RefuseReason::index`](switchyard_socket::RefuseReason::index):
    /// unauthenticated, bad PE, bad rail, not configured, garbage, no hello
    /// in time, overload (the oldest unauthenticated one closed to make
    /// room). As of this context's last progress step.
    pub tcp_refused: [u64; switchyard_socket::RefuseReason::ALL.len()],
}

impl Context {
    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        self.sx_ops(&mut s.ops);
        s.progress_thread = self.tcp.as_ref().is_some_and(|t| t.has_thread());
        s.progress_bursts = self.tcp.as_ref().map_or(0, |t| t.thread_bursts());
        s.downgrades = self.sel.downgrades();
        // The PE's (its contexts share one verbs driver).
        if let Some((f, r)) = self.with_verbs(|v| (v.failovers, v.replays)) {
            s.verbs_failovers = f;
            s.verbs_replays = r;
        }
        s
    }
}
