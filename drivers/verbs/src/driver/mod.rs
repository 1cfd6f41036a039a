//! The verbs transport ([`VerbsDriver`]) and its state: the per-peer and
//! per-QP tables, the tickets of gets and atomics, the event ring. The work
//! is split by concern, one module each:
//!
//! * [`open`]: resources. Opening the device (or the fake HCA),
//!   registering the heap and the scratch, creating the CQ, the shared
//!   receive queue and every QP, all sized at creation; releasing them.
//! * [`conn`]: connection state. Cards, the QP state machine (connect:
//!   RESET→INIT→RTR→RTS; rebuild: RESET first, the generation's PSNs) and
//!   each peer's link state (Down, Up, Error).
//! * [`transport`]: the [`Transport`] operations the shim calls. Bounds,
//!   this PE's own heap, the tickets of gets and atomics; the work toward
//!   other PEs goes to `post`.
//! * [`post`]: wire I/O. Placement on the data QPs, room and back
//!   pressure, fences, staging, work requests (RDMA WRITE with immediate,
//!   READ, fetch-add, compare-swap) queued in per-QP batches with
//!   selective signaling and posted with one doorbell per batch, quiet
//!   markers.
//! * [`progress`]: the progress loop. CQ polling, completions retiring
//!   their records, the next steps of emulated atomics, the receive side
//!   (receipts), async events.
//! * [`recovery`]: failure, replay and recovery. A failed peer's
//!   outstanding operations settled once, the receipts handshake (collect,
//!   settle, abandon), the replays over the fallback.
//! * [`load`]: each peer's backlog on its data QPs ([`Backlog`]), counted
//!   as WRs are queued and retired, for the load watermark.
//!
//! The path of a put toward another PE: `Transport::put` ([`transport`])
//! → `put_pieces` ([`post`]: bounds, fence, room for every piece, one piece
//! per 64 KiB block, bytes copied into the QP's staging ring) → `queue_wr`
//! (the send-queue record, the receipt, signaled or not, into the batch) →
//! `flush_qp` (one doorbell: when the batch is full, for a signaled WR, or
//! from `post_batches` and `quiet_poll`) → `poll_cq` / `on_completion` /
//! `retire_rest` ([`progress`]: staging freed, the sequence number
//! settled). If the link fails first, `fail_peer` ([`recovery`]) keeps the
//! put for replay until the peer's receipts say whether it landed.
//!
//! **Storage.** Every table is sized once, at creation, and never grows.
//! The peers' state sits in a table of slots ([`table`]) sized for every
//! other PE, or, with lazy peers ([`VerbsConfig::lazy_peers`]), for that
//! many peers added later by [`VerbsDriver::add_peer`]: O(peers), not
//! O(PEs in the job). Every operation finds its peer's slot through one
//! lookup whose layout is fixed at creation: arithmetic for an eager
//! driver (PE order, this PE skipped), one hash probe for a lazy one.
//! Most sizes come from the device and the configuration at run time
//! (send-queue records and replay lists from `sq_depth`, the pending
//! doorbell list and the event ring from the number of PEs, tickets from
//! `get_slots`, the receive side's QPN table from the QPs created): those
//! are boxed slices allocated once with a count beside them, as a
//! const-capacity collection (`heapless`) cannot take a run-time size.
//! The ones of compile-time size are fixed arrays: a QP's doorbell batch
//! (`BATCH` WRs, hand-written because a `heapless::Vec` measured slower,
//! see `QpSlot::batch`), the settle window's bits
//! ([`SettleWindow`]: `bitvec` measured slower),
//! the per-QP scratch of `room` and `bring_up` (`MAX_QPS`). The cards'
//! and receipts' QP arrays stay arrays with a count: they are `Copy`
//! (passed by value in events and cards), which a `heapless::Vec` is not.
#![allow(unsafe_code)]

mod conn;
mod load;
mod open;
mod post;
mod progress;
mod recovery;
mod table;
mod transport;

use std::sync::Arc;

pub use load::Backlog;
use load::Load;
use open::OwnedWords;
use switchyard_core::transport::{AtomicOp, Instant, LinkState, Transport};

use crate::{
    Event, Receipts, Result, VerbsError, VerbsStats,
    atomic_plan::{AtomicPlan, Wr},
    card::{LinkLayer, MAX_QPS, VerbsCard},
    params::{DeviceLimits, Mtu, QpParams, VerbsConfig},
    qp_plan::QpState,
    recv::RecvSide,
    seq::SettleWindow,
    signal::{CqCredits, SendQueue},
    stage::StageRing,
    sys::{self, SendWr, Sge},
};

/// Heap block size for data-QP placement: every byte of a block always goes
/// over the same data QP, so operations on the same bytes stay ordered.
pub const BLOCK: u64 = 64 << 10;
/// Work requests chained per doorbell at most.
const BATCH: usize = 16;
/// Progress steps between reads of the async event fd (a syscall).
const ASYNC_EVERY: u32 = 256;
/// CQ polls a put, get or atomic spends making room before `WouldBlock`.
const FULL_SPIN: u32 = 4096;
/// Largest number of PEs (`wr_id` has 20 bits for the peer).
const MAX_PES: u32 = 1 << 20;

/// A QP's entry in the driver's list of pending batches: the peer above 4
/// bits, the QP index (below [`MAX_QPS`] ≤ 16) in them.
#[inline]
fn pending_code(peer: u32, qi: usize) -> u32 {
    peer << 4 | qi as u32
}
const _: () = assert!(MAX_QPS <= 16);

/// The bit a QP set's QPs carry in their `qp_context` (above every
/// `peer << 8 | qi` tag: peers are below 2^20); a set's tag is
/// `SET_TAG | slot << 8 | qi`, its mailbox slot in the
/// [`SetBudget`](crate::SetBudget).
const SET_TAG: usize = 1 << 30;

/// An operation offered for replay over the fallback transport after the
/// verbs link failed ([`VerbsDriver::drain_replays`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay<'a> {
    /// Write `bytes` at `offset` of `peer`'s heap.
    Put {
        /// The PE.
        peer: u32,
        /// Its sequence number on the verbs link (for logs and dedup).
        seq: u64,
        /// Offset in the peer's heap.
        offset: u64,
        /// The bytes (held in the driver's staging until drained).
        bytes: &'a [u8],
    },
    /// Write `len` bytes of this PE's heap from `local_offset` to `offset`.
    PutFromHeap {
        /// The PE.
        peer: u32,
        /// Sequence number.
        seq: u64,
        /// Offset in the peer's heap.
        offset: u64,
        /// Offset in this PE's heap.
        local_offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Read `len` bytes at `offset` of the peer into this heap at `local_offset`.
    GetIntoHeap {
        /// The PE.
        peer: u32,
        /// Sequence number.
        seq: u64,
        /// Offset in the peer's heap.
        offset: u64,
        /// Offset in this PE's heap.
        local_offset: u64,
        /// Bytes.
        len: u32,
    },
    /// A non-fetching atomic that never reached the device.
    Atomic {
        /// The PE.
        peer: u32,
        /// Sequence number.
        seq: u64,
        /// Offset in the peer's heap.
        offset: u64,
        /// The op.
        op: AtomicOp,
    },
}

/// What a send-queue slot carries until its WR is known complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    /// Nothing (an empty record).
    Empty,
    /// A put from staging (`at` = the ring position of its bytes).
    PutStaged { offset: u64, len: u32, at: u64 },
    /// A put from this PE's heap.
    PutHeap {
        offset: u64,
        len: u32,
        local_offset: u64,
    },
    /// A get into this PE's heap.
    GetHeap {
        offset: u64,
        len: u32,
        local_offset: u64,
    },
    /// A get into a ticket's buffer (`len` bytes).
    Get { ticket: u32, len: u32 },
    /// A step of an atomic (its ticket).
    Atomic { ticket: u32, first: bool },
    /// A quiet marker.
    Marker,
}

impl What {
    /// The bytes the WR moves (a put's or get's piece; 0 for markers).
    #[inline]
    const fn bytes(self) -> u32 {
        match self {
            What::PutStaged { len, .. }
            | What::PutHeap { len, .. }
            | What::GetHeap { len, .. }
            | What::Get { len, .. } => len,
            What::Atomic { .. } => 8,
            What::Empty | What::Marker => 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    seq: u64,
    what: What,
    /// Staging ring head after this WR's bytes (to free in order).
    stage_end: u64,
    /// The put's receipt on its QP (0: not a put).
    rcpt: u64,
}

const EMPTY: Record = Record {
    seq: 0,
    what: What::Empty,
    stage_end: 0,
    rcpt: 0,
};

/// A data QP's wait for its last-WQE event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wqe {
    /// Not moved to ERROR by the driver since its last rebuild: an event
    /// now belongs to an earlier incarnation, or came before the driver
    /// moved the QP (ignored either way: taking an old event for the
    /// current one could end a collection too early).
    Idle,
    /// Moved to ERROR by `fail_peer`: the event is awaited.
    Awaiting,
    /// The event came after the move.
    Reached,
}

/// One QP toward a peer, with its accounting, staging ring and batch.
struct QpSlot {
    qp: sys::Qp,
    state: QpState,
    sq: SendQueue,
    /// WRs below this number reached the device (were accepted by post).
    to_hw: u64,
    /// Signaled WRs in flight (CQ credits held).
    sig_in_flight: u32,
    records: Box<[Record]>,
    stage_off: usize,
    stage: StageRing,
    /// The batch: `n_batch` WRs chained at the next doorbell, each with its
    /// SGE at the same index. A fixed-capacity vector, not
    /// `heapless::Vec<SendWr, BATCH>`: `queue_wr` rewrites only the fields
    /// that change in a slot it keeps, where a heapless push writes the
    /// whole 128-byte WR; bench `verbs_collections`, one run on the 2-core
    /// dev machine, per batch of 16: 68 ns here (`verbs_batch/boxed_slice`)
    /// vs 137 ns (`verbs_batch/heapless_vec`).
    batch: Box<[SendWr]>,
    sges: Box<[Sge]>,
    n_batch: usize,
    inline_cap: u32,
    /// Initiator: the receipt of the next put (RDMA WRITE with immediate)
    /// on this QP in this generation (from 1).
    rcpt_next: u64,
    /// Target: where this (data) QP is in waiting for
    /// `IBV_EVENT_QP_LAST_WQE_REACHED` (no receive completion of it comes
    /// after the event).
    wqe: Wqe,
    /// In the driver's list of QPs that may hold a batch not yet posted
    /// (listed once, so the list never outgrows the QPs).
    listed: bool,
}

impl QpSlot {
    fn outstanding(&self) -> u64 {
        self.sq.outstanding()
    }
}

struct Peer {
    qps: Box<[QpSlot]>,
    remote: Option<VerbsCard>,
    state: LinkState,
    /// Incarnation in `wr_id` (bumped at every failure: older completions
    /// are stale).
    incarnation: u8,
    /// PSN generation agreed with the peer.
    generation: u32,
    next_seq: u64,
    settle: SettleWindow,
    /// The WRs (and their bytes) not yet known complete on the data QPs
    /// ([`VerbsDriver::backlog`]).
    load: Load,
    /// A fence is pending: the next WR waits for the other QPs to drain.
    fence: bool,
    /// The QP whose WR carried the last fence: its pre-fence WRs may still
    /// be outstanding, so a WR on another QP waits for it to drain first
    /// (RC orders one QP's requests only); cleared once it did.
    fence_qp: Option<usize>,
    /// Replays waiting for [`VerbsDriver::drain_replays`].
    replays: Box<[Option<ReplayRec>]>,
    n_replays: usize,
    /// Failures to report through `quiet_poll` (atomics with unknown
    /// outcome that nobody polls).
    unreported: Option<VerbsError>,
    /// Operations nobody polls that were not applied and found no room in
    /// `replays` (nor a ticket to fail): reported once by `quiet_poll` as
    /// [`VerbsError::ReplayLost`], never silently dropped.
    lost: u64,
    /// Initiator: in-doubt puts wait in `replays` for the peer's receipts
    /// ([`VerbsDriver::settle_receipts`]); nothing is drained meanwhile.
    await_receipts: bool,
    /// Target: the link failed and this side's receipts are being
    /// collected (QPs in error, waiting for their last WQE).
    collect: bool,
    /// Target: the receipts collected at the last failure, and the
    /// generation that failure rebuilds to.
    receipts: Option<(u32, Receipts)>,
    /// Target: when the collection gives up (ns on the `progress` clock),
    /// set at the first collection step after the failure.
    collect_until: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct ReplayRec {
    seq: u64,
    qp: u8,
    what: What,
    atomic: Option<(u64, AtomicOp)>,
    /// A put's receipt (0: none).
    rcpt: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TState {
    Free,
    Pending,
    Done(u64),
    Failed { unknown: bool },
}

#[derive(Debug, Clone, Copy)]
struct TicketSlot {
    tgen: u16,
    state: TState,
    peer: u32,
    offset: u64,
    seq: u64,
    plan: Option<AtomicPlan>,
    /// Whether the caller never polls it (a `Set`): freed when done.
    internal: bool,
    /// A next atomic step that found the queue full.
    repost: Option<Wr>,
}

const FREE_TICKET: TicketSlot = TicketSlot {
    tgen: 0,
    state: TState::Free,
    peer: 0,
    offset: 0,
    seq: 0,
    plan: None,
    internal: false,
    repost: None,
};

/// The RDMA verbs transport of one PE (crate docs).
pub struct VerbsDriver {
    me: u32,
    n_pes: u32,
    seed: u64,
    p: QpParams,
    cfg: VerbsConfig,
    port: u8,
    link_layer: LinkLayer,
    lid: u16,
    gid: Option<[u8; 16]>,
    gid_index: Option<u8>,
    port_mtu: Mtu,
    heap: *mut u8,
    heap_len: u64,
    /// The heap when the driver allocated it (shared with the QP sets
    /// opened from it: freed after the last one's heap MR).
    owned_heap: Option<Arc<OwnedWords>>,
    /// `Some(peer)`: this driver is a QP set ([`VerbsDriver::open_set`])
    /// toward that one peer; `None`: the PE's driver.
    set_peer: Option<u32>,
    /// Bits or-ed into every QP's `qp_context` ([`SET_TAG`] for a set), so
    /// the PE's driver, which reads the device's async events, ignores a
    /// set's.
    tag_bits: usize,
    /// Whether this driver reads the device's async events (the PE's
    /// driver does; a set on a device does not: the PE's does).
    reads_async: bool,
    /// A set: the budget it counts against and its mailbox slot there,
    /// given back at close.
    lease: Option<(crate::sets::SetBudget, u32)>,
    /// The PE's driver: the budget of the sets opened from it (the first
    /// `open_set`'s), whose mailboxes get the device's events of their QPs.
    sets: std::sync::OnceLock<crate::sets::SetBudget>,
    /// The device's limits (to size the QP sets opened from this driver).
    limits: DeviceLimits,
    /// Staging bytes per QP (a QP set's QPs get as much as the PE
    /// driver's).
    stage_per_qp: u64,
    /// The fake HCA this driver lives on (to open sets on it).
    #[cfg(any(test, feature = "fake-hca"))]
    fabric: Option<crate::fake::Fabric>,
    scratch_ptr: *mut u8,
    get_off: usize,
    atomic_off: usize,
    /// The peers with QPs: every other PE from creation, or (created with
    /// [`VerbsConfig::lazy_peers`]) those added by
    /// [`VerbsDriver::add_peer`], up to that many ([`table`]).
    peers: table::Peers,
    tickets: Box<[TicketSlot]>,
    free_list: FreeList,
    reposts: u32,
    /// QPs with a batch not yet posted.
    batched: u32,
    /// The QPs that may hold a batch not yet posted ([`pending_code`]), in
    /// a list sized for every QP at creation: [`VerbsDriver::post_batches`]
    /// visits only these, never every peer.
    pending: Box<[u32]>,
    /// Entries used in `pending`.
    n_pending: usize,
    cqes: Box<[sys::Cqe]>,
    credits: CqCredits,
    events: Box<[Option<Event>]>,
    ev_head: usize,
    ev_len: usize,
    steps: u32,
    stats: VerbsStats,
    fatal: bool,
    closed: bool,
    // Verbs objects, released in this order by `release`.
    scratch_mr: Option<sys::Mr>,
    /// The heap's registration: the PE's driver registers it; its QP sets
    /// share it (one rkey for every set).
    heap_mr: Option<Arc<sys::Mr>>,
    /// The shared receive queue of every data QP, its receive CQ and the
    /// receipts seen (index `peer * data_qps + qp - 1`); a clone may be
    /// polled by another thread ([`VerbsDriver::recv_side`]).
    recv: Option<RecvSide>,
    /// Peers whose receipts are being collected.
    collecting: u32,
    /// The `now` of the last `progress` (the driver has no clock).
    now: Instant,
    cq: Option<sys::Cq>,
    /// The protection domain and the device context, shared with the QP
    /// sets (released with the last holder).
    pd: Option<Arc<sys::Pd>>,
    ctx: Option<Arc<sys::Ctx>>,
    scratch: Option<OwnedWords>,
}

// SAFETY: the driver owns its verbs objects, heap mapping (or borrows it
// under `new`'s contract) and scratch exclusively, except what it shares
// with its QP sets through an `Arc` (device context, protection domain,
// heap registration, owned heap): those are only read (keys) or released
// by the last holder, and libibverbs objects may be used from any thread;
// the rest is used one thread at a time, which `&mut self` guarantees.
unsafe impl Send for VerbsDriver {}

/// `wr_id`: WR number (low 32 bits), QP index (4), incarnation (8), peer (20).
const fn wr_id(peer: u32, qp: u8, inc: u8, index: u64) -> u64 {
    (peer as u64) << 44 | (inc as u64) << 36 | ((qp as u64) & 0xF) << 32 | (index & 0xFFFF_FFFF)
}

const fn split_wr_id(id: u64) -> (u32, u8, u8, u32) {
    (
        (id >> 44) as u32,
        ((id >> 32) & 0xF) as u8,
        (id >> 36) as u8,
        id as u32,
    )
}

impl VerbsDriver {
    /// The derived parameters.
    pub fn params(&self) -> &QpParams {
        &self.p
    }

    /// Counters.
    pub fn stats(&self) -> VerbsStats {
        let mut s = self.stats;
        if let Some(r) = &self.recv {
            s.receipts = r.receipts();
            s.recv_reposts = r.reposts();
        }
        s
    }

    /// A handle on this driver's receive side (the receipts of the peers'
    /// puts), for a thread that progresses it while the driver's owner is
    /// busy elsewhere ([`RecvSide::poll`]); `None` once closed. Without
    /// one, only [`Transport::progress`] re-posts receives, so the owner
    /// must call it at least once per `srq_depth` puts received.
    pub fn recv_side(&self) -> Option<RecvSide> {
        self.recv.clone()
    }

    fn peer_ref(&self, peer: u32) -> Result<&Peer> {
        let n_pes = self.n_pes;
        self.peers
            .get(peer)
            .ok_or(VerbsError::InvalidPe { peer, n_pes })
    }

    fn peer_mut(&mut self, peer: u32) -> Result<&mut Peer> {
        let n_pes = self.n_pes;
        self.peers
            .get_mut(peer)
            .ok_or(VerbsError::InvalidPe { peer, n_pes })
    }

    /// The next event, once.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.ev_len == 0 {
            return None;
        }
        let e = self.events[self.ev_head].take();
        self.ev_head = (self.ev_head + 1) % self.events.len();
        self.ev_len -= 1;
        e
    }

    fn push_event(&mut self, e: Event) {
        let cap = self.events.len();
        if self.ev_len == cap {
            // Full (only when the shim stops polling events across many
            // failure cycles): drop the oldest.
            self.ev_head = (self.ev_head + 1) % cap;
            self.ev_len -= 1;
        }
        let at = (self.ev_head + self.ev_len) % cap;
        self.events[at] = Some(e);
        self.ev_len += 1;
    }

    fn would_block(&mut self, peer: u32, what: &'static str) -> VerbsError {
        self.stats.would_block += 1;
        VerbsError::WouldBlock { peer, what }
    }

    fn take_ticket(&mut self, peer: u32) -> Result<u32> {
        if self.free_list.n == 0 {
            return Err(self.would_block(peer, "tickets"));
        }
        self.free_list.n -= 1;
        let idx = self.free_list.idx[self.free_list.n];
        // Live from here, so that `free_ticket` gives it back on any error.
        self.tickets[idx as usize].state = TState::Pending;
        Ok(idx)
    }

    fn free_ticket(&mut self, idx: u32) {
        release_ticket(&mut self.tickets, &mut self.free_list, idx);
    }

    fn ticket_of(&self, peer: u32, slot: u32) -> Result<u32> {
        let idx = slot & 0xFFFF;
        match self.tickets.get(idx as usize) {
            Some(t)
                if t.state != TState::Free && u32::from(t.tgen) == slot >> 16 && t.peer == peer =>
            {
                Ok(idx)
            }
            _ => Err(VerbsError::StaleTicket { peer, slot }),
        }
    }
}

/// The free ticket indices (a stack).
struct FreeList {
    idx: Box<[u32]>,
    n: usize,
}

/// Frees ticket `idx` (once: a free ticket is left alone).
fn release_ticket(tickets: &mut [TicketSlot], fl: &mut FreeList, idx: u32) {
    let Some(t) = tickets.get_mut(idx as usize) else {
        return;
    };
    if t.state == TState::Free {
        return;
    }
    t.state = TState::Free;
    t.plan = None;
    t.repost = None;
    t.tgen = t.tgen.wrapping_add(1);
    if fl.n < fl.idx.len() {
        fl.idx[fl.n] = idx;
        fl.n += 1;
    }
}

fn fail_ticket(tickets: &mut [TicketSlot], idx: u32, unknown: bool, stats: &mut VerbsStats) {
    if let Some(t) = tickets.get_mut(idx as usize)
        && t.state == TState::Pending
    {
        t.state = TState::Failed { unknown };
        if unknown {
            stats.outcome_unknown += 1;
        }
    }
}

impl Drop for VerbsDriver {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod test;
