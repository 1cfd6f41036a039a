//! The context's side of its stats segment ([`crate::statseg`]): what the
//! data path counts in it, the latencies of sampled operations, and the
//! state published from the progress path.
//!
//! Each context counts in its own slot of the PE's segment ([`StatsSlot`]):
//! one writer per word, the readers sum the slots. Counted on the data path:
//!
//! * ops and bytes per (peer, transport), once per operation issued (the
//!   shm leg's `leg_done`, the generic loop); a downgraded route also
//!   counts a downgrade. With a slot these words are the context's only
//!   count of operations: [`Stats::ops`](super::Stats::ops) sums them per
//!   transport, so keeping the segment costs the data path one counter
//!   word more than `stats = off` (the bench `context_shm`'s `nostats`
//!   cases measure it);
//! * retries (a full send window), errors (a driver error), reroutes (an
//!   operation selected again after its transport failed);
//! * link transitions and failovers (a link that went down) per (peer,
//!   transport), where the drivers' link events are applied.
//!
//! Published every [`PUBLISH_NS`] from the progress step (`poll_once`),
//! at init and when the context drops: the context's PE block (its
//! [`Stats`] counters, `pe_words`: `verbs_set_ops` and
//! `verbs_sets_refused` are the context's own, like `cpu_atomics`; the
//! PE-wide `progress_bursts`, `verbs_failovers` and `verbs_replays` only
//! from the first context, so the sum counts them once); and from the first
//! context only, the shared part: the socket and verbs drivers' own
//! counters, the socket driver's replays, dedup drops and CRC failures per
//! (peer, rail), and each (peer, transport)'s health, load, route and dead
//! bits. While the
//! TCP progress thread runs it publishes the shared part too ([`Publisher`]),
//! so an idle PE's state stays current.
//!
//! Channel ends take their entries of the segment's channel table from the
//! PE's segment, not the context's slot ([`Context::sx_channel`]), and
//! write them themselves (`crate::channel`).

use std::sync::Arc;

use switchyard_core::{
    class::TransportId,
    route::{Route, Selector},
    topology::{LinkState, Topology},
    transport::Instant as CoreInstant,
    wire::FrameOp,
};

use super::{Context, N_TRANSPORTS, Stats, progress, tid};
use crate::statseg::{
    ChannelEntry, ChannelInfo, PE_COUNTERS, PeWord, PeerWord, STATE_DEAD, STATE_HEALTHY,
    STATE_LOADED, STATE_ROUTE, ShmCounts, StatsSegment, StatsSlot,
};

/// How often the progress path publishes the slow-changing state.
pub const PUBLISH_NS: u64 = 100_000_000;

/// The context's stats segment and the state of the sampled operation in
/// flight.
#[derive(Debug, Default)]
pub(super) struct Hook {
    /// This context's slot of the segment (`None` with `stats = off`, when
    /// the segment could not be made, or all its slots are taken). Set
    /// once, in [`Hook::on`], and kept until the hook drops.
    seg: Option<StatsSlot>,
    /// The slot's dense shm row, for the shm leg (no rows without a
    /// slot): valid while `seg` holds the slot, i.e. the hook's life.
    shm: ShmCounts,
    /// Whether this context publishes the shared part (the PE's first).
    pub(super) owner: bool,
    /// The slot's operation counts per transport when this context took
    /// it (a slot keeps an earlier context's counts).
    ops_base: [u64; N_TRANSPORTS as usize],
    /// The slot's PE block when this context took it: what the earlier
    /// contexts of the slot published, to which this one adds its own.
    pe_base: [u64; PE_COUNTERS],
    /// The trace clock at the start of the operation the trace samples, or 0.
    t0: u64,
    /// Set while a blocking operation waits for its reply: its latency is
    /// taken when it completes, not when it is issued.
    defer: bool,
    /// When to publish next (the context's clock, ns).
    next_publish: u64,
}

impl Hook {
    /// A slot of `seg`, when there is one.
    pub(super) fn on(seg: Option<&Arc<StatsSegment>>) -> Hook {
        let seg = seg.and_then(StatsSegment::slot);
        Hook {
            ops_base: seg.as_ref().map_or([0; _], StatsSlot::ops_by_transport),
            pe_base: seg.as_ref().map_or([0; _], StatsSlot::pe_counts),
            shm: seg
                .as_ref()
                .map_or_else(ShmCounts::default, StatsSlot::shm_counts),
            seg,
            ..Hook::default()
        }
    }
}

/// The segment of `rank`, when `on`; a failure to make it is a warning.
pub(super) fn segment(
    on: bool,
    job_id: u64,
    rank: u32,
    n_pes: u32,
    warn: &mut Vec<String>,
) -> Option<Arc<StatsSegment>> {
    if !on {
        return None;
    }
    StatsSegment::create(job_id, rank, n_pes)
        .map_err(|e| warn.push(format!("no stats segment: {e}")))
        .ok()
}

/// The histogram index of a frame op.
fn hist_op(frame: FrameOp) -> usize {
    match frame {
        FrameOp::Put => 0,
        FrameOp::Get => 1,
        _ => 2,
    }
}

impl Context {
    /// Numbers a channel being made (every PE, at each creation, in the
    /// same order) and, on one of its ends (`end`), takes the end's entry
    /// of the stats segment's channel table: `None` without a segment,
    /// on a bystander, or with the table full.
    pub(crate) fn sx_channel(&self, end: Option<ChannelInfo>) -> Option<ChannelEntry> {
        self.pe.stats.as_ref()?.channel(end)
    }

    /// Where this PE's stats segment is, when it keeps one.
    pub fn stats_segment(&self) -> Option<&std::path::Path> {
        self.sx.seg.as_ref().map(|s| s.segment().path())
    }

    /// A text summary of this PE's stats segment (published first), as
    /// `shmemx_stats_print` prints it; `None` without a segment.
    pub fn stats_summary(&mut self) -> Option<String> {
        // Publishing takes the TCP driver from the progress thread: given
        // back at once.
        self.call().sx_publish();
        let r = crate::statseg::Reader::open(self.stats_segment()?).ok()?;
        Some(crate::statseg::summary(&r.snapshot()))
    }

    /// An operation issued on `route`: ops and bytes, and a downgrade.
    /// With a slot, the slot's ops words are the only count of operations
    /// ([`Stats::ops`](super::Stats::ops) sums them, [`Context::sx_ops`]):
    /// the counters cost the data path one word more than without.
    #[inline(always)]
    pub(super) fn sx_done(&mut self, pe: u32, len: u64, route: &Route) {
        let t = route.transport.index();
        match &self.sx.seg {
            Some(s) => {
                s.op(t, pe, len);
                if route.downgraded {
                    s.bump(t, pe, PeerWord::Downgrades);
                }
            }
            None => self.stats.ops[t] += 1,
        }
    }

    /// [`Context::sx_done`] for the shm leg: a shared-memory route that is
    /// not a downgrade ([`Context::leg_open`]), so the transport is a
    /// constant and no downgrade is tested.
    /// One compare tells both whether there is a slot and whether `pe` has
    /// a row in it ([`ShmCounts`]); without a slot the operation is
    /// counted in process memory, as [`Context::sx_done`] does.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn sx_done_shm(&mut self, pe: u32, len: u64) {
        // SAFETY: `sx.shm` came from the slot in `sx.seg`, which the hook
        // holds from `Hook::on` until it drops (without one it has no rows
        // and touches nothing).
        if !unsafe { self.sx.shm.op(pe, len) } {
            // No slot (a `pe` out of range has none either: the selection
            // that routed it to shared memory checked it).
            self.stats.ops[super::SHM.index()] += 1;
        }
    }

    /// This context's operations per transport, into `ops` (where the
    /// slot counts them).
    pub(super) fn sx_ops(&self, ops: &mut [u64; 8]) {
        if let Some(s) = &self.sx.seg {
            let now = s.ops_by_transport();
            for ((o, n), b) in ops.iter_mut().zip(now).zip(self.sx.ops_base) {
                *o = n.wrapping_sub(b);
            }
        }
    }

    /// Adds 1 to `word` of (`t`, `pe`).
    #[inline]
    pub(super) fn sx_bump(&self, t: TransportId, pe: u32, word: PeerWord) {
        if let Some(s) = &self.sx.seg {
            s.bump(t.index(), pe, word);
        }
    }

    /// A link transition of (`t`, `pe`) a driver reported (also marks the
    /// peer's next decision elsewhere as its failover, for the trace).
    pub(super) fn sx_link(&mut self, t: TransportId, pe: u32, state: LinkState) {
        self.failover.link(t, pe, state == LinkState::Up);
        self.sx_bump(t, pe, PeerWord::LinkTransitions);
        if state != LinkState::Up {
            self.sx_bump(t, pe, PeerWord::Failovers);
        }
    }

    /// At the start of an operation: reads the trace clock when the trace
    /// will sample it (its next ordinary decision is recorded).
    #[inline(always)]
    pub(super) fn sx_start(&mut self) {
        if self.trace_left == 1 && self.sx.t0 == 0 && self.sx.seg.is_some() {
            self.sx.t0 = crate::sys::ticks();
        }
    }

    /// After the trace recorded a decision, stamped `now` (the trace
    /// clock, 0 when tracing is off): the latency of the sampled operation,
    /// unless it failed or still waits for its reply.
    #[inline]
    pub(super) fn sx_sampled(&mut self, frame: FrameOp, t: TransportId, failed: bool, now: u64) {
        if failed {
            self.sx.t0 = 0;
        } else if !self.sx.defer {
            self.sx_latency_at(frame, t, now);
        }
    }

    /// The latency since [`Context::sx_start`] of a completed operation.
    #[inline]
    pub(super) fn sx_latency(&mut self, frame: FrameOp, t: TransportId) {
        self.sx_latency_at(frame, t, 0);
    }

    /// [`Context::sx_latency`] ending at `now` (the clock is read here
    /// when `now` is 0 and the operation is sampled).
    #[inline]
    fn sx_latency_at(&mut self, frame: FrameOp, t: TransportId, now: u64) {
        let t0 = core::mem::take(&mut self.sx.t0);
        if t0 != 0
            && let Some(s) = &self.sx.seg
        {
            let end = if now == 0 { crate::sys::ticks() } else { now };
            s.latency(hist_op(frame), t.index(), end.wrapping_sub(t0));
        }
    }

    /// Whether a blocking operation waits for its reply (its latency is
    /// taken at completion).
    pub(super) fn sx_defer(&mut self, on: bool) {
        self.sx.defer = on;
        if !on {
            self.sx.t0 = 0;
        }
    }

    /// From the progress step: publishes when due.
    #[inline]
    pub(super) fn sx_tick(&mut self, now: CoreInstant) {
        if self.sx.seg.is_some() && now.nanos >= self.sx.next_publish {
            self.sx.next_publish = now.nanos + PUBLISH_NS;
            self.sx_publish();
        }
    }

    /// Publishes this context's PE block (its [`Stats`],
    /// added to what the slot's earlier contexts left).
    pub(super) fn sx_publish_pe(&self) {
        let Some(slot) = &self.sx.seg else { return };
        let mut v = pe_words(&self.stats(), self.sx.owner);
        for (v, b) in v.iter_mut().zip(self.sx.pe_base) {
            *v = v.wrapping_add(b);
        }
        slot.set_pe(&v);
    }

    /// Publishes this context's PE block and, from the first context, the
    /// shared part: the socket driver's counters and every (peer,
    /// transport)'s state bits.
    pub(super) fn sx_publish(&mut self) {
        self.sx_publish_pe();
        if !self.sx.owner || self.sx.seg.is_none() {
            return;
        }
        let verbs = self.verbs_counters();
        let Some(slot) = &self.sx.seg else { return };
        let seg = slot.segment();
        // Taking the driver also makes this the one publisher of the shared
        // part while it holds it (the progress thread is the other).
        if let Some(t) = self.tcp.as_mut() {
            publish_tcp(seg, progress::Tcp::get(t), self.n_pes);
        }
        if let Some(v) = verbs {
            seg.set_wide(super::VERBS.index(), &v);
        }
        let dead = &self.dead;
        publish_state(seg, &mut self.sel, &self.topo, self.n_pes, |pe| {
            dead.get(pe as usize).copied()
        });
        seg.published();
    }
}

/// The words of a context's PE block ([`PeWord`], in `PeWord::ALL`'s
/// order) from its counters `st`; the PE-wide ones only from the PE's
/// first context (`owner`), so that the readers' sum counts them once.
///
/// Exhaustive both ways: a new [`Stats`] field does not compile until it
/// is placed here (a word, or a note saying where else it is published),
/// nor does a new [`PeWord`] until it has its field.
pub(super) fn pe_words(st: &Stats, owner: bool) -> [u64; PE_COUNTERS] {
    let Stats {
        // Not a counter.
        progress_thread: _,
        progress_bursts,
        // Per (peer, transport), in the slot's peer blocks.
        ops: _,
        reroutes,
        barriers,
        link_transitions,
        links_lost,
        link_records_sent,
        link_records_applied,
        dead_peers,
        downgrades,
        verbs_failovers,
        verbs_replays,
        verbs_set_ops,
        verbs_sets_refused,
        cpu_atomics,
        ordering_waits,
        load_transitions,
        load_yields,
        // The socket driver's, in the TCP wide block (`refused_connections`).
        tcp_refused: _,
    } = *st;
    // PE-wide: the shared verbs driver's and the progress thread's.
    let pe_wide = |v: u64| if owner { v } else { 0 };
    let mut out = [0u64; PE_COUNTERS];
    for (o, w) in out.iter_mut().zip(PeWord::ALL) {
        *o = match w {
            PeWord::Barriers => barriers,
            PeWord::LinkTransitions => link_transitions,
            PeWord::LinksLost => links_lost,
            PeWord::DeadPeers => dead_peers,
            PeWord::Reroutes => reroutes,
            PeWord::VerbsFailovers => pe_wide(verbs_failovers),
            PeWord::VerbsReplays => pe_wide(verbs_replays),
            PeWord::CpuAtomics => cpu_atomics,
            PeWord::OrderingWaits => ordering_waits,
            PeWord::LoadTransitions => load_transitions,
            PeWord::LoadYields => load_yields,
            PeWord::ProgressBursts => pe_wide(progress_bursts),
            PeWord::Downgrades => downgrades.iter().sum(),
            PeWord::LinkRecordsSent => link_records_sent,
            PeWord::LinkRecordsApplied => link_records_applied,
            PeWord::VerbsSetOps => verbs_set_ops,
            PeWord::VerbsSetsRefused => verbs_sets_refused,
        };
    }
    out
}

/// The publisher of the shared part on the TCP progress thread: while the
/// application computes and calls nothing, the thread refreshes the state
/// bits and the socket driver's counters every [`PUBLISH_NS`], holding the
/// driver (so the first context, which takes the driver to publish, is
/// never publishing at the same time). Dead bits stay as the context last
/// published them (it alone knows them).
pub(super) struct Publisher {
    seg: Arc<StatsSegment>,
    /// Its own reader slot of the topology (reserved at init).
    sel: Selector<'static>,
    topo: Topology<'static>,
    n_pes: u32,
    /// When to publish next (the context's clock, ns).
    next: u64,
}

impl Publisher {
    /// From the progress thread's burst, holding the driver `d`: publishes
    /// when due (`now`, the context's clock).
    pub(super) fn tick(&mut self, now: u64, d: &switchyard_socket::SocketDriver) {
        if now < self.next {
            return;
        }
        self.next = now + PUBLISH_NS;
        publish_tcp(&self.seg, d, self.n_pes);
        publish_state(&self.seg, &mut self.sel, &self.topo, self.n_pes, |_| None);
        self.seg.published();
    }
}

impl Context {
    /// Hands the publishing of the shared part to the TCP progress thread
    /// too, before it starts (the first context, with a segment and a TCP
    /// driver; once).
    pub(super) fn sx_to_progress_thread(&mut self) {
        if !self.sx.owner {
            return;
        }
        let (Some(slot), Some(t)) = (&self.sx.seg, &self.tcp) else {
            return;
        };
        let Some(sel) = super::pe::lock(&self.pe.spare_selector).take() else {
            return;
        };
        t.set_publisher(Publisher {
            seg: Arc::clone(slot.segment()),
            sel,
            topo: self.topo,
            n_pes: self.n_pes,
            next: 0,
        });
    }
}

/// Publishes the socket driver's counters: its wide block (on `tcp0`) and
/// each (peer, `tcp<rail>`)'s replays, dedup drops and CRC failures.
fn publish_tcp(seg: &StatsSegment, d: &switchyard_socket::SocketDriver, n_pes: u32) {
    seg.set_wide(super::TCP.index(), &tcp_wide(&d.stats()));
    for pe in 0..n_pes {
        for (r, c) in d.peer_stats(pe).iter().enumerate() {
            seg.set_peer_counts(
                super::TCP.index() + r,
                pe,
                [c.replayed, c.duplicates_dropped, c.bad_frames],
            );
        }
    }
}

/// The socket driver's counters as the words of a wide block.
pub(super) fn tcp_wide(s: &switchyard_socket::SocketStats) -> [u64; 11] {
    [
        s.frames_sent,
        s.frames_received,
        s.bytes_sent,
        s.bytes_received,
        s.replayed,
        s.duplicates_dropped,
        s.refused,
        s.bad_frames,
        s.reconnects,
        s.rail_failovers,
        s.would_block,
    ]
}

/// Publishes every (peer, transport)'s state bits from the topology row
/// (health and load), `sel`'s policy (the route of an 8-byte put) and
/// `dead` (whether a peer is dead; `None` keeps the bit as published).
pub(super) fn publish_state(
    seg: &StatsSegment,
    sel: &mut Selector<'static>,
    topo: &Topology<'static>,
    n_pes: u32,
    dead: impl Fn(u32) -> Option<bool>,
) {
    for pe in 0..n_pes {
        let dead = dead(pe).unwrap_or(seg.state(0, pe) & STATE_DEAD != 0);
        let class = sel.pin().class(pe);
        let route = class.and_then(|c| {
            sel.policy()
                .candidates(c, 8)
                .find(|t| topo.is_healthy(*t, pe))
        });
        for i in 0..N_TRANSPORTS {
            let t = tid(i);
            let mut bits = 0;
            if topo.is_healthy(t, pe) {
                bits |= STATE_HEALTHY;
            }
            if topo.is_overloaded(t, pe) {
                bits |= STATE_LOADED;
            }
            if route == Some(t) {
                bits |= STATE_ROUTE;
            }
            if dead {
                bits |= STATE_DEAD;
            }
            seg.set_state(usize::from(i), pe, bits);
        }
    }
}
