//! The verbs transport: resources, connect and rebuild, the data path, and
//! failure handling (crate docs).
#![allow(unsafe_code)]

use std::ptr;

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, Instant, LinkState, PollResult, Ticket, Transport},
};

use crate::{
    Event, Receipts, Result, VerbsError, VerbsStats, Withheld,
    atomic_plan::{AtomicPlan, Next, Wr},
    card::{LinkLayer, MAX_QPS, QpAddr, VerbsCard},
    params::{DeviceLimits, Mtu, QpParams, VerbsConfig, derive},
    probe,
    qp_plan::{LocalQp, QpState, RemoteQp, plan_connect, plan_rebuild, psn_for},
    recv::RecvSide,
    seq::{Settle, SettleWindow},
    signal::{CqCredits, SendQueue},
    stage::StageRing,
    sys::{self, POLL_BATCH, SendWr, Sge, access, send_flags},
};

/// Heap block size for data-QP placement: every byte of a block always goes
/// over the same data QP, so operations on the same bytes stay ordered.
pub const BLOCK: u64 = 64 << 10;
/// Work requests chained per doorbell at most.
const BATCH: usize = 16;
/// Progress steps between reads of the async event fd (a syscall).
const ASYNC_EVERY: u32 = 256;
/// Events kept until polled, at least (more with many peers: `assemble`).
const EVENT_RING: usize = 256;
/// Smallest staging ring per QP (two blocks).
const MIN_STAGE: u64 = 2 * BLOCK;
/// `Ticket::slot` of a get from this PE's own heap (copied at poll).
const LOCAL_SLOT: u32 = u32::MAX;
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
    /// A get into a ticket's buffer.
    Get { ticket: u32 },
    /// A step of an atomic (its ticket).
    Atomic { ticket: u32, first: bool },
    /// A quiet marker.
    Marker,
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

/// One QP toward a peer, with its accounting, staging ring and batch.
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
    fence: bool,
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
    owned_heap: Option<OwnedWords>,
    scratch_ptr: *mut u8,
    get_off: usize,
    atomic_off: usize,
    peers: Vec<Option<Peer>>,
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
    heap_mr: Option<sys::Mr>,
    /// The shared receive queue of every data QP, its receive CQ and the
    /// receipts seen (index `peer * data_qps + qp - 1`); a clone may be
    /// polled by another thread ([`VerbsDriver::recv_side`]).
    recv: Option<RecvSide>,
    /// Peers whose receipts are being collected.
    collecting: u32,
    /// The `now` of the last `progress` (the driver has no clock).
    now: Instant,
    cq: Option<sys::Cq>,
    pd: Option<sys::Pd>,
    ctx: Option<sys::Ctx>,
    scratch: Option<OwnedWords>,
}

/// Zeroed 8-aligned memory owned through a raw pointer (the device writes
/// it behind Rust's back, so no reference to it is ever held), freed on
/// drop.
struct OwnedWords {
    ptr: *mut [u64],
}

impl OwnedWords {
    fn zeroed(bytes: u64) -> OwnedWords {
        let words = usize::try_from(bytes.div_ceil(8))
            .unwrap_or(usize::MAX / 8)
            .max(1);
        OwnedWords {
            ptr: Box::into_raw(vec![0u64; words].into_boxed_slice()),
        }
    }

    fn ptr(&self) -> *mut u8 {
        self.ptr.cast()
    }

    fn bytes(&self) -> usize {
        self.ptr.len() * 8
    }
}

impl Drop for OwnedWords {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw` in `zeroed`, freed once; the owner
        // drops it only after deregistering it.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// The port this driver uses, as the card carries it.
#[derive(Debug, Clone, Copy)]
struct PortAddr {
    port: u8,
    link_layer: LinkLayer,
    lid: u16,
    gid: Option<[u8; 16]>,
    gid_index: Option<u8>,
    mtu: Mtu,
}

fn res(call: &'static str) -> impl Fn(std::io::Error) -> VerbsError {
    move |source| VerbsError::Resource { call, source }
}

// SAFETY: the driver owns its verbs objects, heap mapping (or borrows it
// under `new`'s contract) and scratch exclusively; libibverbs objects may be
// used from any thread, one at a time, which `&mut self` guarantees.
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
    /// Opens the device, registers `heap` and creates one CQ and the QPs
    /// toward every other PE (in RESET until [`Transport::connect`]).
    ///
    /// # Safety
    ///
    /// `heap` must be valid for reads and writes of `heap_len` bytes, 8-byte
    /// aligned, and stay mapped until the driver is closed or dropped; the
    /// device reads and writes it asynchronously.
    ///
    /// # Errors
    ///
    /// [`VerbsError::Unavailable`] with the probe's reason when RDMA cannot
    /// be used here; [`VerbsError::Config`] for a bad setting;
    /// [`VerbsError::Resource`] when a verbs call fails.
    pub unsafe fn new(
        cfg: VerbsConfig,
        me: u32,
        n_pes: u32,
        seed: u64,
        heap: *mut u8,
        heap_len: u64,
    ) -> Result<VerbsDriver> {
        if n_pes == 0 || me >= n_pes || n_pes > MAX_PES {
            return Err(VerbsError::InvalidPe { peer: me, n_pes });
        }
        let found = probe::probe();
        if let Some(why) = &found.unavailable {
            return Err(VerbsError::Unavailable {
                reason: why.to_string(),
            });
        }
        let chosen = match &cfg.device {
            Some(d) => found
                .ports
                .iter()
                .find(|p| &p.device == d && p.port == cfg.port && p.usable()),
            None => found.ports.iter().find(|p| p.usable()),
        }
        .ok_or_else(|| VerbsError::Unavailable {
            reason: format!(
                "no usable port {} on {}",
                cfg.port,
                cfg.device.as_deref().unwrap_or("any device")
            ),
        })?;
        let (ctx, _name) = sys::Ctx::open(Some(&chosen.device)).map_err(res("ibv_open_device"))?;
        let port = chosen.port;
        let attrs = sys::device_attrs(&chosen.device).map_err(res("ibv_query_device"))?;
        let pattr = ctx.query_port(port).map_err(res("ibv_query_port"))?;
        let port_mtu = Mtu::from_ibv(pattr.active_mtu).unwrap_or(Mtu::M1024);
        let limits = attrs.limits(port_mtu);
        let gid_index = match cfg.gid_index {
            Some(i) => Some(i),
            None => chosen.best_gid().map(|g| g.index),
        };
        let gid = match gid_index {
            Some(i) => Some(ctx.query_gid(port, i).map_err(res("ibv_query_gid"))?),
            None => None,
        };
        let addr = PortAddr {
            port,
            link_layer: LinkLayer::from_u8(pattr.link_layer).unwrap_or(LinkLayer::InfiniBand),
            lid: pattr.lid,
            gid,
            gid_index: gid_index.and_then(|i| u8::try_from(i).ok()),
            mtu: port_mtu,
        };
        ctx.async_nonblocking()
            .map_err(res("fcntl(async_fd, O_NONBLOCK)"))?;
        let pd = sys::Pd::alloc(&ctx).map_err(res("ibv_alloc_pd"))?;
        // SAFETY: the caller's promise about the heap is passed on.
        let mut drv = unsafe {
            VerbsDriver::assemble(
                cfg,
                (me, n_pes, seed),
                heap,
                heap_len,
                &limits,
                addr,
                &sys::Backend::Real(&ctx, &pd),
            )
        }?;
        drv.pd = Some(pd);
        drv.ctx = Some(ctx);
        Ok(drv)
    }

    /// [`VerbsDriver::new`] on the in-process fake HCA ([`crate::fake`]):
    /// every PE of a test shares one `fabric`. No device is needed.
    ///
    /// # Safety
    ///
    /// As [`VerbsDriver::new`].
    ///
    /// # Errors
    ///
    /// As [`VerbsDriver::new`], without the probe.
    #[cfg(any(test, feature = "fake-hca"))]
    pub unsafe fn new_fake(
        cfg: VerbsConfig,
        me: u32,
        n_pes: u32,
        seed: u64,
        heap: *mut u8,
        heap_len: u64,
        fabric: &crate::fake::Fabric,
    ) -> Result<VerbsDriver> {
        if n_pes == 0 || me >= n_pes || n_pes > MAX_PES {
            return Err(VerbsError::InvalidPe { peer: me, n_pes });
        }
        let limits = DeviceLimits {
            max_qp_wr: 16384,
            max_cqe: 1 << 20,
            max_qp: 1 << 16,
            max_sge: 1,
            max_qp_init_rd_atom: 16,
            max_qp_rd_atom: 16,
            atomic_cap: fabric.atomic_cap(),
            max_mr_size: u64::MAX,
            max_srq_wr: 1 << 16,
            active_mtu: Mtu::M4096,
        };
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[12..].copy_from_slice(&(me + 1).to_be_bytes());
        let addr = PortAddr {
            port: 1,
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            gid: Some(gid),
            gid_index: Some(1),
            mtu: Mtu::M4096,
        };
        // SAFETY: the caller's promise about the heap is passed on.
        unsafe {
            VerbsDriver::assemble(
                cfg,
                (me, n_pes, seed),
                heap,
                heap_len,
                &limits,
                addr,
                &sys::Backend::Fake(fabric),
            )
        }
    }

    /// [`VerbsDriver::new_fake`] with an owned heap of `heap_len` zeroed bytes.
    ///
    /// # Errors
    ///
    /// As [`VerbsDriver::new_fake`].
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_with_owned_heap(
        cfg: VerbsConfig,
        me: u32,
        n_pes: u32,
        seed: u64,
        heap_len: u64,
        fabric: &crate::fake::Fabric,
    ) -> Result<VerbsDriver> {
        let heap = OwnedWords::zeroed(heap_len);
        // SAFETY: the heap is owned by the driver (dropped after its MR).
        let mut d =
            unsafe { VerbsDriver::new_fake(cfg, me, n_pes, seed, heap.ptr(), heap_len, fabric) }?;
        d.owned_heap = Some(heap);
        Ok(d)
    }

    /// Registers the heap and the scratch, creates the CQ and the QPs.
    ///
    /// # Safety
    ///
    /// As [`VerbsDriver::new`] for `heap`.
    unsafe fn assemble(
        cfg: VerbsConfig,
        (me, n_pes, seed): (u32, u32, u64),
        heap: *mut u8,
        heap_len: u64,
        limits: &DeviceLimits,
        addr: PortAddr,
        backend: &sys::Backend<'_>,
    ) -> Result<VerbsDriver> {
        let p = derive(&cfg, limits)?;
        let n_peers = u64::from(n_pes - 1);
        let qps_per_peer = 1 + u64::from(p.data_qps);
        if n_peers * qps_per_peer > u64::from(limits.max_qp) {
            return Err(VerbsError::Config(crate::params::ParamError {
                field: "data_qps",
                value: p.data_qps.to_string(),
                expected: format!(
                    "(1 + data_qps) * {n_peers} peers within the device's max_qp ({})",
                    limits.max_qp
                ),
            }));
        }
        // SAFETY: the caller keeps the heap mapped for the driver's life.
        let heap_mr = unsafe {
            backend.register(
                heap,
                usize::try_from(heap_len).unwrap_or(usize::MAX),
                access::LOCAL_WRITE
                    | access::REMOTE_WRITE
                    | access::REMOTE_READ
                    | access::REMOTE_ATOMIC,
            )
        }
        .map_err(res("ibv_reg_mr (heap)"))?;
        // Scratch: per-QP staging rings, get buffers, atomic result words.
        let total_qps = (n_peers * qps_per_peer).max(1);
        let stage_per_qp = (u64::from(cfg.staging_bytes) / total_qps).max(MIN_STAGE) & !63;
        let stage_total = stage_per_qp * total_qps;
        let get_bytes = u64::from(cfg.get_slots) * u64::from(cfg.get_slot_bytes);
        let atomic_bytes = u64::from(cfg.get_slots) * 8;
        let scratch = OwnedWords::zeroed(stage_total + get_bytes + atomic_bytes);
        // SAFETY: the scratch lives until `release` drops it after this MR.
        let scratch_mr =
            unsafe { backend.register(scratch.ptr(), scratch.bytes(), access::LOCAL_WRITE) }
                .map_err(res("ibv_reg_mr (scratch)"))?;
        let flush_headroom = qps_per_peer * u64::from(p.sq_depth) * n_peers.min(4);
        let cq_entries =
            (u64::from(p.cq_depth) + flush_headroom).min(u64::from(limits.max_cqe)) as u32;
        let cq = backend.cq(cq_entries).map_err(res("ibv_create_cq"))?;
        // Receipts: one SRQ for every peer's data QPs, fully posted.
        let srq = backend.srq(p.srq_depth).map_err(res("ibv_create_srq"))?;
        let mut qpns = Vec::with_capacity((n_peers * u64::from(p.data_qps)) as usize);
        let mut peers = Vec::with_capacity(n_pes as usize);
        let mut stage_off = 0usize;
        for pe in 0..n_pes {
            if pe == me {
                peers.push(None);
                continue;
            }
            let mut qps = Vec::with_capacity(qps_per_peer as usize);
            for qi in 0..qps_per_peer as u8 {
                let tag = (pe as usize) << 8 | usize::from(qi);
                let qp = backend
                    .qp(&cq, (qi > 0).then_some(&srq), p.sq_depth, p.max_inline, tag)
                    .map_err(res("ibv_create_qp"))?;
                if qi > 0 {
                    qpns.push((qp.qpn(), pe * u32::from(p.data_qps) + u32::from(qi) - 1));
                }
                let inline_cap = qp.cap.max_inline_data.min(p.max_inline);
                let mut batch = vec![sys::empty_wr(); BATCH].into_boxed_slice();
                for w in batch.iter_mut() {
                    w.num_sge = 1;
                }
                qps.push(QpSlot {
                    qp,
                    state: QpState::Reset,
                    sq: SendQueue::new(p.sq_depth, p.signal_every),
                    to_hw: 0,
                    sig_in_flight: 0,
                    records: vec![EMPTY; p.sq_depth as usize].into_boxed_slice(),
                    stage_off,
                    stage: StageRing::new(stage_per_qp),
                    batch,
                    sges: vec![
                        Sge {
                            addr: 0,
                            length: 0,
                            lkey: 0
                        };
                        BATCH
                    ]
                    .into_boxed_slice(),
                    n_batch: 0,
                    inline_cap,
                    rcpt_next: 1,
                    wqe: Wqe::Idle,
                    listed: false,
                });
                stage_off += stage_per_qp as usize;
            }
            let replay_cap = (qps_per_peer * u64::from(p.sq_depth)) as usize;
            peers.push(Some(Peer {
                qps: qps.into_boxed_slice(),
                remote: None,
                state: LinkState::Down,
                incarnation: 0,
                generation: 0,
                next_seq: 1,
                settle: SettleWindow::new(),
                fence: false,
                replays: vec![None; replay_cap].into_boxed_slice(),
                n_replays: 0,
                unreported: None,
                lost: 0,
                await_receipts: false,
                collect: false,
                receipts: None,
                collect_until: None,
            }));
        }
        let scratch_ptr = scratch.ptr();
        Ok(VerbsDriver {
            me,
            n_pes,
            seed,
            p,
            cfg: cfg.clone(),
            port: addr.port,
            link_layer: addr.link_layer,
            lid: addr.lid,
            gid: addr.gid,
            gid_index: addr.gid_index,
            port_mtu: addr.mtu,
            heap,
            heap_len,
            owned_heap: None,
            scratch_ptr,
            get_off: stage_total as usize,
            atomic_off: (stage_total + get_bytes) as usize,
            peers,
            tickets: vec![FREE_TICKET; cfg.get_slots as usize].into_boxed_slice(),
            free_list: FreeList {
                idx: (0..cfg.get_slots)
                    .rev()
                    .collect::<Vec<u32>>()
                    .into_boxed_slice(),
                n: cfg.get_slots as usize,
            },
            reposts: 0,
            batched: 0,
            pending: vec![0; n_pes as usize * qps_per_peer as usize].into_boxed_slice(),
            n_pending: 0,
            cqes: vec![sys::Cqe::default(); POLL_BATCH].into_boxed_slice(),
            credits: CqCredits::new(p.cq_depth),
            // Room for every peer's events of one failure cycle (link
            // error, rebuild needed, receipts, rebuilt, link up) plus the
            // device's: a device or port failure reports every peer at
            // once, and the shim holds a peer's newer operations (and asks
            // for its receipts) on its link event, so none may be dropped.
            events: vec![None; EVENT_RING.max(5 * n_pes as usize + 8)].into_boxed_slice(),
            ev_head: 0,
            ev_len: 0,
            steps: 0,
            stats: VerbsStats::default(),
            fatal: false,
            closed: false,
            scratch_mr: Some(scratch_mr),
            heap_mr: Some(heap_mr),
            recv: Some(RecvSide::new(
                srq,
                p.srq_depth,
                &qpns,
                n_pes as usize * usize::from(p.data_qps),
            )),
            collecting: 0,
            now: Instant::default(),
            cq: Some(cq),
            pd: None,
            ctx: None,
            scratch: Some(scratch),
        })
    }

    /// [`VerbsDriver::new`] with a heap of `heap_len` zeroed bytes the driver
    /// allocates and owns (tests, `switchyard perf`).
    ///
    /// # Errors
    ///
    /// As [`VerbsDriver::new`].
    pub fn with_owned_heap(
        cfg: VerbsConfig,
        me: u32,
        n_pes: u32,
        seed: u64,
        heap_len: u64,
    ) -> Result<VerbsDriver> {
        let heap = OwnedWords::zeroed(heap_len);
        // SAFETY: the heap is owned by the driver (dropped in `release`,
        // after its MR), 8-aligned and at least `heap_len` bytes long.
        let mut d = unsafe { VerbsDriver::new(cfg, me, n_pes, seed, heap.ptr(), heap_len) }?;
        d.owned_heap = Some(heap);
        Ok(d)
    }

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

    /// This PE's *PE card*: the port address and the heap (no QPs), for
    /// the bootstrap card's `verbs` field.
    pub fn pe_card(&self) -> VerbsCard {
        VerbsCard {
            link_layer: self.link_layer,
            mtu: self.port_mtu,
            lid: self.lid,
            gid: self.gid,
            atomics: self.p.atomics,
            rkey: self.heap_mr.as_ref().map_or(0, sys::Mr::rkey),
            heap_base: self.heap as u64,
            heap_len: self.heap_len,
            qps: [QpAddr::default(); MAX_QPS],
            n_qps: 0,
        }
    }

    /// This PE's *pair card* toward `peer`: QPNs and initial PSNs of the QPs this
    /// driver created for that peer, plus the port address and the heap.
    ///
    /// # Errors
    ///
    /// [`VerbsError::InvalidPe`] for this PE or one outside the job.
    pub fn card_for(&self, peer: u32) -> Result<VerbsCard> {
        let pe = self.peer_ref(peer)?;
        let mut card = self.pe_card();
        for (i, q) in pe.qps.iter().enumerate() {
            card.qps[i] = QpAddr {
                qpn: q.qp.qpn(),
                psn: psn_for(self.seed, self.me, peer, i as u8, 0),
            };
        }
        card.n_qps = pe.qps.len() as u8;
        Ok(card)
    }

    /// Records `peer`'s card toward this PE (before [`Transport::connect`]).
    ///
    /// # Errors
    ///
    /// [`VerbsError::Card`] when it does not match this driver (QP count,
    /// link layer) or is invalid.
    pub fn set_peer_card(&mut self, peer: u32, card: VerbsCard) -> Result<()> {
        let ll = self.link_layer;
        let pe = self.peer_mut(peer)?;
        card.check()
            .map_err(|source| VerbsError::Card { peer, source })?;
        let bad = |field, value: u64, expected| VerbsError::Card {
            peer,
            source: crate::card::CardError::Field {
                field,
                value,
                expected,
            },
        };
        if usize::from(card.n_qps) != pe.qps.len() {
            return Err(bad(
                "qp count",
                card.n_qps.into(),
                "the same number of QPs as this PE (data_qps + 1)",
            ));
        }
        if card.link_layer != ll {
            return Err(bad(
                "link layer",
                card.link_layer.to_u8().into(),
                "the same link layer as this PE's port",
            ));
        }
        pe.remote = Some(card);
        Ok(())
    }

    /// Decodes and records a peer's card bytes.
    ///
    /// # Errors
    ///
    /// As [`VerbsDriver::set_peer_card`], and [`VerbsError::Card`] for bad bytes.
    pub fn set_peer_card_bytes(&mut self, peer: u32, bytes: &[u8]) -> Result<()> {
        let card = VerbsCard::decode(bytes).map_err(|source| VerbsError::Card { peer, source })?;
        self.set_peer_card(peer, card)
    }

    fn peer_ref(&self, peer: u32) -> Result<&Peer> {
        let n_pes = self.n_pes;
        self.peers
            .get(peer as usize)
            .and_then(Option::as_ref)
            .ok_or(VerbsError::InvalidPe { peer, n_pes })
    }

    fn peer_mut(&mut self, peer: u32) -> Result<&mut Peer> {
        let n_pes = self.n_pes;
        self.peers
            .get_mut(peer as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::InvalidPe { peer, n_pes })
    }

    fn local_qp(&self, psn: u32) -> LocalQp {
        LocalQp {
            port: self.port,
            link_layer: self.link_layer,
            gid_index: self.gid_index,
            psn,
        }
    }

    /// Brings every QP toward `peer` to RTS for `generation` (0: the first
    /// connect, with the cards' PSNs; later: a rebuild, RESET first).
    fn bring_up(&mut self, peer: u32, generation: u32, rebuild: bool) -> Result<()> {
        let (me, seed, p) = (self.me, self.seed, self.p);
        let local: Vec<LocalQp> = (0..MAX_QPS as u8)
            .map(|qi| self.local_qp(psn_for(seed, me, peer, qi, generation)))
            .collect();
        let pe = self.peer_mut(peer)?;
        let card = pe.remote.ok_or(VerbsError::PeerUnknown { peer })?;
        for (qi, q) in pe.qps.iter_mut().enumerate() {
            let addr = card.qps()[qi];
            let remote = RemoteQp {
                qpn: addr.qpn,
                psn: if generation == 0 {
                    addr.psn
                } else {
                    psn_for(seed, peer, me, qi as u8, generation)
                },
                lid: card.lid,
                gid: card.gid,
                mtu: card.mtu,
            };
            let plan = if rebuild {
                plan_rebuild(q.state, &local[qi], &remote, &p)
            } else {
                plan_connect(q.state, &local[qi], &remote, &p)
            }
            .map_err(|source| VerbsError::Plan {
                peer,
                qp: qi as u8,
                source,
            })?;
            for step in plan.steps() {
                q.qp.modify(step).map_err(|source| VerbsError::Modify {
                    peer,
                    qp: qi as u8,
                    state: step.target(),
                    source,
                })?;
                q.state = step.target();
            }
        }
        pe.generation = generation;
        Ok(())
    }

    /// Rebuilds the QPs toward `peer` for `generation` (agreed with the
    /// peer after [`Event::RebuildNeeded`]): RESET→INIT→RTR→RTS on the same
    /// QPs with the generation's PSNs. The peer stays Down until
    /// [`VerbsDriver::peer_rebuilt`].
    ///
    /// # Errors
    ///
    /// [`VerbsError::Modify`] or [`VerbsError::Plan`] when a transition
    /// fails (the peer stays in Error); [`VerbsError::PeerDown`] while
    /// replays are still waiting to be drained, the peer's receipts are
    /// not settled or abandoned, or this side still collects its receipts
    /// of the peer's puts (at most
    /// [`VerbsConfig::collect_timeout_ms`](crate::params::VerbsConfig::collect_timeout_ms)
    /// of `progress` time after the failure).
    pub fn rebuild(&mut self, peer: u32, generation: u32) -> Result<()> {
        self.peer_ref(peer)?;
        // Events of the old QPs queued until now are read while the link
        // is still in Error: a late QP-fatal one then changes nothing
        // (after the rebuild it would fail the new link), a late last-WQE
        // one is ignored once the QPs are back to `Wqe::Idle`.
        self.async_events();
        self.collect_receipts();
        let pe = self.peer_mut(peer)?;
        if pe.n_replays > 0 || pe.await_receipts || pe.collect {
            // Replays not drained yet, or receipts not settled: a reset
            // now would lose what tells which puts landed.
            return Err(VerbsError::PeerDown { peer });
        }
        if pe.state == LinkState::Up || (pe.state == LinkState::Down && pe.generation == 0) {
            // Resetting a working (or never connected) link would drop its
            // outstanding work unsettled.
            return Err(VerbsError::Plan {
                peer,
                qp: 0,
                source: crate::qp_plan::PlanError::Attr {
                    field: "link state",
                    value: 0,
                    expected: "a failed link (Error), or one rebuilt and waiting for its peer",
                },
            });
        }
        if generation <= pe.generation {
            return Err(VerbsError::Plan {
                peer,
                qp: 0,
                source: crate::qp_plan::PlanError::Attr {
                    field: "generation",
                    value: generation.into(),
                    expected: "a generation above the current one",
                },
            });
        }
        for q in pe.qps.iter_mut() {
            q.stage.reset();
            // Receipts count from 1 again in the new generation, at both
            // ends (the peer's were collected before this rebuild).
            q.rcpt_next = 1;
            q.wqe = Wqe::Idle;
        }
        self.bring_up(peer, generation, true)?;
        // After the reset (nothing of the old QPs completes any more) and
        // before the peer hears of the rebuild (nothing of the new ones
        // yet): old completions still queued (a collection given up, a
        // provider whose reset keeps them) are taken before the receipts
        // count from 0 again.
        if let Some(r) = &self.recv {
            r.reset(self.seen_range(peer));
        }
        self.stats.rebuilds += 1;
        let pe = self.peer_mut(peer)?;
        pe.state = LinkState::Down;
        self.push_event(Event::Rebuilt { peer, generation });
        Ok(())
    }

    /// The peer reported its QPs at RTS for `generation`: the link is Up.
    ///
    /// # Errors
    ///
    /// [`VerbsError::PeerDown`] when this side is not rebuilt to that
    /// generation.
    pub fn peer_rebuilt(&mut self, peer: u32, generation: u32) -> Result<()> {
        let pe = self.peer_mut(peer)?;
        if pe.generation != generation || pe.qps.iter().any(|q| q.state != QpState::Rts) {
            return Err(VerbsError::PeerDown { peer });
        }
        pe.state = LinkState::Up;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Up,
        });
        Ok(())
    }

    /// The peer reports (over another transport) that its side of the link
    /// failed: this side is taken down the same way as after a local
    /// failure (QPs reset, outstanding work settled once, [`Event::Link`]
    /// Error and [`Event::RebuildNeeded`]), so both sides rebuild to the
    /// same generation. A QP whose peer was reset would otherwise only find
    /// out at its next post, after the transport retries ran out. No-op
    /// when the link already failed or was never connected.
    ///
    /// As after every failure, this side then collects its receipts of the
    /// peer's puts ([`Event::Receipts`]) for the peer's
    /// [`VerbsDriver::settle_receipts`].
    ///
    /// # Errors
    ///
    /// [`VerbsError::InvalidPe`] for this PE or one outside the job.
    pub fn peer_failed(&mut self, peer: u32) -> Result<()> {
        self.peer_ref(peer)?;
        self.fail_peer(peer);
        Ok(())
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

    /// Fake HCA only: the device reports `IBV_EVENT_DEVICE_FATAL` (seen
    /// at the next async-event check of `progress`), as a real device
    /// that died would.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_device_fatal(&self) {
        if let Some(cq) = &self.cq {
            cq.fake_push_event(sys::event::DEVICE_FATAL);
        }
    }

    /// Fake HCA only: keeps at most `n` operations toward `peer` for
    /// replay (the list is sized for every outstanding WR, so tests shrink
    /// it to reach the full case). Allocates: call it before traffic.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_limit_replays(&mut self, peer: u32, n: usize) {
        if let Ok(pe) = self.peer_mut(peer)
            && pe.n_replays == 0
        {
            pe.replays = vec![None; n].into_boxed_slice();
        }
    }

    /// The receipts this side collected at the last failure of the link to
    /// `peer` (and the generation that failure rebuilds to), once
    /// [`Event::Receipts`] was reported; `None` before, or while
    /// collecting. Kept until the next failure, so a peer that asks late is
    /// answered the same.
    pub fn receipts(&self, peer: u32) -> Option<(u32, Receipts)> {
        self.peer_ref(peer).ok()?.receipts
    }

    /// Whether in-doubt puts toward `peer` wait for its receipts.
    pub fn awaits_receipts(&self, peer: u32) -> bool {
        self.peer_ref(peer).is_ok_and(|p| p.await_receipts)
    }

    /// Settles the in-doubt puts toward `peer` with its receipts (from its
    /// [`Event::Receipts`] for `generation`, the one this side's
    /// [`Event::RebuildNeeded`] named): each put whose receipt is at most
    /// the one `applied` gives for its data QP landed, and is dropped from
    /// the replays; the rest are drained by the next
    /// [`VerbsDriver::drain_replays`], in order. Returns how many were
    /// known landed. Without puts waiting, nothing happens (`Ok(0)`).
    ///
    /// # Errors
    ///
    /// [`VerbsError::BadReceipts`] when `generation` is not the failure's,
    /// `applied` has not one entry per data QP, or a receipt is above any
    /// put this side posted on that QP (nothing is settled then).
    pub fn settle_receipts(&mut self, peer: u32, generation: u32, applied: &[u64]) -> Result<u64> {
        let pe = self.peer_mut(peer)?;
        if !pe.await_receipts {
            return Ok(0);
        }
        let bad = |what| Err(VerbsError::BadReceipts { peer, what });
        if generation != pe.generation + 1 {
            return bad("not the generation of this side's failure");
        }
        if applied.len() + 1 != pe.qps.len() {
            return bad("not one receipt per data QP");
        }
        if applied
            .iter()
            .zip(pe.qps.iter().skip(1))
            .any(|(&a, q)| a >= q.rcpt_next)
        {
            return bad("a receipt above every put posted on its QP");
        }
        let mut landed = 0u64;
        for r in pe.replays.iter_mut().take(pe.n_replays) {
            let Some(rec) = r else { continue };
            let put = matches!(rec.what, What::PutStaged { .. } | What::PutHeap { .. });
            if put && rec.rcpt != 0 && rec.qp > 0 && rec.rcpt <= applied[usize::from(rec.qp) - 1] {
                *r = None;
                landed += 1;
            }
        }
        pe.await_receipts = false;
        self.stats.receipts_settled += landed;
        self.stats.replays -= landed.min(self.stats.replays);
        Ok(landed)
    }

    /// Gives up on `peer`'s receipts (it is dead, or did not answer in
    /// time): every put waiting for them is dropped and counted, for the
    /// caller to report as lost (replaying one could apply it twice, not
    /// replaying it could lose it: neither is silent). Gets and atomics
    /// waiting stay for [`VerbsDriver::drain_replays`]. Returns the puts
    /// dropped.
    pub fn abandon_receipts(&mut self, peer: u32) -> u64 {
        let Ok(pe) = self.peer_mut(peer) else {
            return 0;
        };
        if !pe.await_receipts {
            return 0;
        }
        let mut n = 0u64;
        for r in pe.replays.iter_mut().take(pe.n_replays) {
            if r.is_some_and(|rec| {
                matches!(rec.what, What::PutStaged { .. } | What::PutHeap { .. })
            }) {
                *r = None;
                n += 1;
            }
        }
        pe.await_receipts = false;
        self.stats.receipts_abandoned += n;
        self.stats.replays -= n.min(self.stats.replays);
        n
    }

    /// Calls `f` with every operation waiting for replay over the fallback
    /// (each once: settled by sequence), then frees what they held. Replay
    /// them before any later operation to that peer, in the order given:
    /// per QP in issue order, and operations on the same bytes always
    /// shared a QP, so their order is kept.
    pub fn drain_replays(&mut self, mut f: impl FnMut(Replay<'_>)) {
        let scratch = self.scratch_ptr;
        for (pe_idx, slot) in self.peers.iter_mut().enumerate() {
            let Some(pe) = slot else { continue };
            if pe.n_replays == 0 || pe.await_receipts {
                continue;
            }
            let peer = pe_idx as u32;
            for r in pe.replays.iter_mut().take(pe.n_replays) {
                let Some(r) = r.take() else { continue };
                let replay = match (r.what, r.atomic) {
                    (_, Some((offset, op))) => Replay::Atomic {
                        peer,
                        seq: r.seq,
                        offset,
                        op,
                    },
                    (What::PutStaged { offset, len, at }, None) => {
                        let q = &pe.qps[usize::from(r.qp)];
                        let start = q.stage_off + q.stage.offset(at) as usize;
                        // SAFETY: the staged bytes lie inside the scratch
                        // allocation and the QP is in the error state (the
                        // device no longer reads them; it is reset only by
                        // a rebuild, after the replays are drained).
                        let bytes =
                            unsafe { std::slice::from_raw_parts(scratch.add(start), len as usize) };
                        Replay::Put {
                            peer,
                            seq: r.seq,
                            offset,
                            bytes,
                        }
                    }
                    (
                        What::PutHeap {
                            offset,
                            len,
                            local_offset,
                        },
                        None,
                    ) => Replay::PutFromHeap {
                        peer,
                        seq: r.seq,
                        offset,
                        local_offset,
                        len,
                    },
                    (
                        What::GetHeap {
                            offset,
                            len,
                            local_offset,
                        },
                        None,
                    ) => Replay::GetIntoHeap {
                        peer,
                        seq: r.seq,
                        offset,
                        local_offset,
                        len,
                    },
                    _ => continue,
                };
                f(replay);
            }
            pe.n_replays = 0;
            for q in pe.qps.iter_mut() {
                q.stage.release_all();
            }
        }
    }

    // ---------------------------------------------------------------
    // Data path helpers

    fn check_up(&self, peer: u32) -> Result<&Peer> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        if self.fatal {
            return Err(VerbsError::DeviceFatal);
        }
        let pe = self.peer_ref(peer)?;
        if pe.remote.is_none() {
            return Err(VerbsError::PeerUnknown { peer });
        }
        if pe.state != LinkState::Up {
            return Err(VerbsError::PeerDown { peer });
        }
        Ok(pe)
    }

    fn remote_bounds(&self, peer: u32, offset: u64, len: u64) -> Result<VerbsCard> {
        let card = self
            .check_up(peer)?
            .remote
            .ok_or(VerbsError::PeerUnknown { peer })?;
        if offset
            .checked_add(len)
            .is_none_or(|end| end > card.heap_len)
        {
            return Err(VerbsError::OutOfBounds {
                peer,
                offset,
                len,
                heap_len: card.heap_len,
            });
        }
        Ok(card)
    }

    fn local_bounds(&self, offset: u64, len: u64) -> Result<()> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.heap_len)
        {
            return Err(VerbsError::OutOfBounds {
                peer: self.me,
                offset,
                len,
                heap_len: self.heap_len,
            });
        }
        Ok(())
    }

    fn data_qp(&self, offset: u64) -> usize {
        1 + ((offset / BLOCK) % u64::from(self.p.data_qps)) as usize
    }

    fn would_block(&mut self, peer: u32, what: &'static str) -> VerbsError {
        self.stats.would_block += 1;
        VerbsError::WouldBlock { peer, what }
    }

    /// A pending fence before posting to QP `qi` of `peer`: the peer's other
    /// QPs must drain first (markers make them report); then the next WR on
    /// `qi` carries `IBV_SEND_FENCE` (it also waits for earlier reads and
    /// atomics on `qi`). Returns whether to set the flag; the caller clears
    /// the fence once that WR is queued.
    fn fence_check(&mut self, peer: u32, qi: usize) -> Result<bool> {
        if !self.peer_ref(peer)?.fence {
            return Ok(false);
        }
        for spin in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            let pe = self.peer_ref(peer)?;
            let n = pe.qps.len();
            let busy = pe
                .qps
                .iter()
                .enumerate()
                .any(|(i, q)| i != qi && q.outstanding() > 0);
            if !busy {
                return Ok(true);
            }
            if spin == 0 {
                self.stats.fence_waits += 1;
            }
            for i in (0..n).filter(|&i| i != qi) {
                let _ = self.marker(peer, i);
                self.flush_qp(peer, i);
            }
            self.poll_cq();
        }
        Err(self.would_block(peer, "fence"))
    }

    fn fence_done(&mut self, peer: u32) {
        if let Some(Some(pe)) = self.peers.get_mut(peer as usize) {
            pe.fence = false;
        }
    }

    /// Sequence numbers for `n` operations toward `peer`, if the settle
    /// window has room for all of them.
    fn seqs_fit(&self, peer: u32, n: u64) -> bool {
        self.peer_ref(peer)
            .is_ok_and(|pe| pe.settle.can_issue(pe.next_seq + n.saturating_sub(1)))
    }

    /// Queues one WR on QP `qi` of `peer`. `sge` is (addr, len, lkey) or
    /// `None` for a zero-length WR. Posts the batch when full or `flush`.
    #[allow(clippy::too_many_arguments)]
    fn queue_wr(
        &mut self,
        peer: u32,
        qi: usize,
        what: What,
        seq: u64,
        opcode: u32,
        sge: Option<(u64, u32, u32)>,
        remote: (u64, u32),
        atomic: Option<(u64, u64)>,
        must_signal: bool,
        fence: bool,
        inline: bool,
        stage_end: u64,
    ) -> Result<()> {
        if self.peer_ref(peer)?.qps[qi].n_batch == BATCH {
            self.flush_qp(peer, qi);
            // A refused doorbell failed the link: queue nothing on it.
            self.check_up(peer)?;
        }
        if self.peer_ref(peer)?.qps[qi].sq.free() == 0 {
            return Err(self.would_block(peer, "send queue"));
        }
        let pe_inc;
        let slot;
        {
            let n_pes = self.n_pes;
            let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
                return Err(VerbsError::InvalidPe { peer, n_pes });
            };
            pe_inc = pe.incarnation;
            let q = &mut pe.qps[qi];
            let (run, last) = q.sq.checkpoint();
            slot = match q.sq.reserve(must_signal) {
                Ok(s) => s,
                Err(_) => return Err(self.would_block(peer, "send queue")),
            };
            if slot.signaled && !self.credits.take() {
                q.sq.unreserve(slot, run, last);
                return Err(self.would_block(peer, "completion queue credits"));
            }
            if slot.signaled {
                q.sig_in_flight += 1;
            }
            let depth = q.records.len() as u64;
            let rcpt = if opcode == sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM {
                q.rcpt_next += 1;
                q.rcpt_next - 1
            } else {
                0
            };
            q.records[(slot.index % depth) as usize] = Record {
                seq,
                what,
                stage_end,
                rcpt,
            };
            let n = q.n_batch;
            let wr = &mut q.batch[n];
            if rcpt != 0 {
                // The low 32 bits; the target extends them (in order, one
                // at a time, so never ambiguous).
                sys::set_imm(wr, rcpt as u32);
            }
            wr.wr_id = wr_id(peer, qi as u8, pe_inc, slot.index);
            wr.opcode = opcode;
            wr.send_flags = if slot.signaled {
                send_flags::SIGNALED
            } else {
                0
            } | if fence { send_flags::FENCE } else { 0 }
                | if inline { send_flags::INLINE } else { 0 };
            match sge {
                Some((addr, length, lkey)) => {
                    q.sges[n] = Sge { addr, length, lkey };
                    wr.num_sge = 1;
                }
                None => wr.num_sge = 0,
            }
            match atomic {
                Some((compare_add, swap)) => {
                    sys::set_atomic(wr, remote.0, remote.1, compare_add, swap)
                }
                None => sys::set_rdma(wr, remote.0, remote.1),
            }
            if q.n_batch == 0 {
                self.batched += 1;
                if !q.listed && self.n_pending < self.pending.len() {
                    q.listed = true;
                    self.pending[self.n_pending] = pending_code(peer, qi);
                    self.n_pending += 1;
                }
            }
            q.n_batch += 1;
            q.stage.commit(stage_end);
        }
        self.stats.wrs += 1;
        if slot.signaled {
            self.stats.signaled += 1;
        }
        if inline {
            self.stats.inline_wrs += 1;
        }
        if must_signal || self.peer_ref(peer)?.qps[qi].n_batch == BATCH {
            self.flush_qp(peer, qi);
        }
        Ok(())
    }

    /// Rings the doorbell of every QP whose work requests are still batched
    /// (small puts wait in a batch so that one doorbell posts many). The
    /// context calls it whenever the application leaves the library, so a
    /// batch never waits on the application's next call: batching coalesces
    /// the work requests of one call (the pieces of a put, a collective's
    /// puts, `quiet`'s markers) and of the calls between two progress steps
    /// inside one wait. Visits only the QPs that batched something; returns
    /// whether it posted anything. No allocation.
    pub fn post_batches(&mut self) -> bool {
        let mut posted = false;
        while self.n_pending > 0 {
            self.n_pending -= 1;
            let code = self.pending[self.n_pending];
            let (peer, qi) = (code >> 4, (code & 0xf) as usize);
            let Some(Some(p)) = self.peers.get_mut(peer as usize) else {
                continue;
            };
            let Some(q) = p.qps.get_mut(qi) else {
                continue;
            };
            q.listed = false;
            if q.n_batch > 0 {
                self.flush_qp(peer, qi);
                posted = true;
            }
        }
        posted
    }

    /// Posts QP `qi`'s batch with one doorbell. A failed post fails the peer.
    fn flush_qp(&mut self, peer: u32, qi: usize) {
        let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
            return;
        };
        let q = &mut pe.qps[qi];
        let n = q.n_batch;
        if n == 0 {
            return;
        }
        let base = q.batch.as_mut_ptr();
        let sges = q.sges.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i < n <= BATCH`, inside both arrays; the chain points
            // only into this QP's own arrays, which do not move.
            unsafe {
                let w = base.add(i);
                (*w).sg_list = sges.add(i);
                (*w).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        // SAFETY: the chain is valid (above); every SGE points into the
        // registered heap or scratch, which outlive the WRs (the QP is reset
        // before either is released), and inline data is read during the call.
        let r = unsafe { q.qp.post(base) };
        q.n_batch = 0;
        self.batched = self.batched.saturating_sub(1);
        self.stats.doorbells += 1;
        match r {
            Ok(()) => q.to_hw = q.sq.posted(),
            Err((_errno, accepted)) => {
                q.to_hw = q.sq.posted() - (n - accepted) as u64;
                self.fail_peer(peer);
            }
        }
    }

    /// Posts a signaled zero-length write on QP `qi` of `peer` when its
    /// outstanding WRs end unsignaled (so a completion will report them).
    fn marker(&mut self, peer: u32, qi: usize) -> Result<()> {
        let (needs, card) = {
            let pe = self.peer_ref(peer)?;
            let q = &pe.qps[qi];
            (q.outstanding() > 0 && q.sq.tail_unsignaled(), pe.remote)
        };
        if !needs {
            return Ok(());
        }
        let card = card.ok_or(VerbsError::PeerUnknown { peer })?;
        self.stats.markers += 1;
        let end = self.peer_ref(peer)?.qps[qi].stage.head();
        self.queue_wr(
            peer,
            qi,
            What::Marker,
            0,
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            None,
            (card.heap_base, card.rkey),
            None,
            true,
            false,
            false,
            end,
        )
    }

    fn next_seq(&mut self, peer: u32) -> Result<u64> {
        let pe = self.peer_mut(peer)?;
        let seq = pe.next_seq;
        if !pe.settle.can_issue(seq) {
            return Err(self.would_block(peer, "sequence window"));
        }
        self.peer_mut(peer)?.next_seq += 1;
        Ok(seq)
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

    /// Posts one atomic step for ticket `idx` on the control QP.
    fn post_atomic(&mut self, idx: u32, wr: Wr, first: bool) -> Result<()> {
        let t = self.tickets[idx as usize];
        let peer = t.peer;
        let card = self
            .peer_ref(peer)?
            .remote
            .ok_or(VerbsError::PeerUnknown { peer })?;
        let lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let local = self.scratch_ptr as u64 + (self.atomic_off + 8 * idx as usize) as u64;
        let (opcode, word_offset, ops) = match wr {
            Wr::FetchAdd { word_offset, add } => (
                sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
                word_offset,
                (add, 0),
            ),
            Wr::CompareSwap {
                word_offset,
                compare,
                swap,
            } => (
                sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
                word_offset,
                (compare, swap),
            ),
        };
        let fence = first && self.fence_check(peer, 0)?;
        let end = self.peer_ref(peer)?.qps[0].stage.head();
        self.queue_wr(
            peer,
            0,
            What::Atomic { ticket: idx, first },
            t.seq,
            opcode,
            Some((local, 8, lkey)),
            (card.heap_base + word_offset, card.rkey),
            Some(ops),
            true,
            fence,
            false,
            end,
        )?;
        if fence {
            self.fence_done(peer);
        }
        Ok(())
    }

    // ---------------------------------------------------------------
    // Completions and failures

    /// Polls the CQ once (a batch). Returns whether anything was reaped.
    fn poll_cq(&mut self) -> bool {
        let Some(cq) = self.cq.as_mut() else {
            return false;
        };
        let n = match cq.poll(&mut self.cqes) {
            Ok(n) => n,
            Err(_) => {
                self.device_failed();
                return false;
            }
        };
        for i in 0..n {
            let c = self.cqes[i];
            self.on_completion(c);
        }
        n > 0
    }

    fn on_completion(&mut self, c: sys::Cqe) {
        let (peer, qi, inc, low) = split_wr_id(c.wr_id);
        let ok = c.ok;
        let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
            self.stats.stale_completions += 1;
            return;
        };
        if pe.incarnation != inc || usize::from(qi) >= pe.qps.len() {
            // A flush of an earlier incarnation: its credits were returned
            // when the peer failed.
            self.stats.stale_completions += 1;
            return;
        }
        if !ok {
            self.stats.completion_errors += 1;
            let q = &mut pe.qps[usize::from(qi)];
            if q.sig_in_flight > 0 {
                q.sig_in_flight -= 1;
                self.credits.give(1);
            }
            self.fail_peer(peer);
            return;
        }
        let q = &mut pe.qps[usize::from(qi)];
        let Some(index) = q.sq.resolve(low) else {
            self.stats.stale_completions += 1;
            return;
        };
        let from = q.sq.posted() - q.sq.outstanding();
        if q.sq.complete(index).is_err() {
            self.stats.stale_completions += 1;
            return;
        }
        q.sig_in_flight = q.sig_in_flight.saturating_sub(1);
        self.credits.give(1);
        self.stats.completions += 1;
        self.retire_rest(peer, usize::from(qi), from, index);
    }

    /// Retires records `from..=to` of QP `qi` (split out of
    /// `on_completion` so the ticket table can be borrowed per record).
    ///
    /// Reads and atomics are always signaled, so only the last record of a
    /// range can be one; the atomic's next step is posted after the loop
    /// anyway, so a new record never lands on one not yet retired.
    fn retire_rest(&mut self, peer: u32, qi: usize, from: u64, to: u64) {
        let mut deferred: Option<u32> = None;
        let mut i = from;
        while i <= to {
            let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
                return;
            };
            let q = &mut pe.qps[qi];
            let depth = q.records.len() as u64;
            let rec = std::mem::replace(&mut q.records[(i % depth) as usize], EMPTY);
            q.stage.release_to(rec.stage_end);
            // An atomic is settled when its last step is done.
            if rec.seq != 0 && !matches!(rec.what, What::Atomic { .. }) {
                let _ = pe.settle.settle(rec.seq);
            }
            match rec.what {
                What::Get { ticket } => {
                    if let Some(t) = self.tickets.get_mut(ticket as usize) {
                        t.state = TState::Done(0);
                    }
                }
                What::Atomic { ticket, .. } => {
                    if let Some(earlier) = deferred.replace(ticket) {
                        self.atomic_step(earlier);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        if let Some(ticket) = deferred {
            self.atomic_step(ticket);
        }
    }

    /// An atomic WR of ticket `idx` completed: read the fetched word and
    /// finish or post the next compare-swap.
    fn atomic_step(&mut self, idx: u32) {
        let at = self.atomic_off + 8 * idx as usize;
        // SAFETY: the word lies in the scratch allocation, 8-aligned (the
        // scratch is u64s and `atomic_off` is a multiple of 8); the device
        // wrote it before the completion was polled.
        let word = unsafe { ptr::read_volatile(self.scratch_ptr.add(at).cast::<u64>()) };
        let t = &mut self.tickets[idx as usize];
        let Some(plan) = t.plan.as_mut() else { return };
        let before = plan.retries();
        let next = plan.on_result(word);
        self.stats.cas_retries += u64::from(plan.retries() - before);
        match next {
            Next::Done(v) => {
                t.state = TState::Done(v);
                let (peer, seq, internal) = (t.peer, t.seq, t.internal);
                if let Some(Some(pe)) = self.peers.get_mut(peer as usize) {
                    let _ = pe.settle.settle(seq);
                }
                if internal {
                    self.free_ticket(idx);
                }
            }
            Next::Post(wr) => {
                if !self.continue_atomic(idx, wr) {
                    self.tickets[idx as usize].repost = Some(wr);
                    self.reposts += 1;
                }
            }
        }
    }

    /// Posts the next compare-swap of ticket `idx`. `false` when the queue
    /// is full (retry later). Any other failure ends the atomic: none of
    /// its earlier steps changed the word (reads and lost compare-swaps), so
    /// it fails with `PeerDown` (safe to retry elsewhere), or is replayed
    /// when nobody polls it.
    fn continue_atomic(&mut self, idx: u32, wr: Wr) -> bool {
        use switchyard_core::transport::{ErrorKind, TransportError};
        match self.post_atomic(idx, wr, false) {
            Ok(()) => return true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => {}
        }
        let t = self.tickets[idx as usize];
        if let Some(Some(pe)) = self.peers.get_mut(t.peer as usize)
            && pe.settle.settle(t.seq) == Settle::New
        {
            if t.internal && pe.n_replays < pe.replays.len() {
                pe.replays[pe.n_replays] = Some(ReplayRec {
                    seq: t.seq,
                    qp: 0,
                    what: What::Atomic {
                        ticket: idx,
                        first: false,
                    },
                    atomic: t.plan.map(|p| (t.offset, *p.op())),
                    rcpt: 0,
                });
                pe.n_replays += 1;
                self.stats.replays += 1;
            } else if t.internal {
                // Never applied (see above), and nobody polls it.
                pe.lost += 1;
            }
        }
        fail_ticket(&mut self.tickets, idx, false, &mut self.stats);
        if t.internal {
            release_ticket(&mut self.tickets, &mut self.free_list, idx);
        }
        true
    }

    /// Retries atomic steps that found the control queue full.
    fn retry_reposts(&mut self) {
        if self.reposts == 0 {
            return;
        }
        for idx in 0..self.tickets.len() as u32 {
            if let Some(wr) = self.tickets[idx as usize].repost
                && self.tickets[idx as usize].state == TState::Pending
                && self.continue_atomic(idx, wr)
            {
                self.tickets[idx as usize].repost = None;
                self.reposts -= 1;
            }
        }
    }

    /// Takes `peer` to Error: resets its QPs, settles every outstanding
    /// operation once (replay, fail, or unknown), reports the events.
    fn fail_peer(&mut self, peer: u32) {
        let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
            return;
        };
        if pe.state == LinkState::Error || pe.remote.is_none() {
            return; // already failed, or never connected
        }
        pe.state = LinkState::Error;
        pe.incarnation = pe.incarnation.wrapping_add(1);
        self.stats.peer_failures += 1;
        let mut give = 0u32;
        let mut puts = false;
        let mut refused = None;
        for qi in 0..pe.qps.len() {
            let q = &mut pe.qps[qi];
            // ERROR, not RESET: nothing more of the peer's lands here, its
            // receive completions stay in the receive CQ (a reset may drop
            // them) and the QP reports its last WQE; rebuild resets it. A
            // data QP that cannot be moved there may still take the
            // peer's puts: its receipts cannot be trusted.
            let moved = q.qp.modify(&crate::qp_plan::Step::Error).is_ok();
            if qi > 0 && !moved {
                refused.get_or_insert(qi as u8);
            }
            q.wqe = if moved { Wqe::Awaiting } else { Wqe::Idle };
            q.state = QpState::Err;
            give += q.sig_in_flight;
            q.sig_in_flight = 0;
            if q.n_batch > 0 {
                q.n_batch = 0;
                self.batched = self.batched.saturating_sub(1);
            }
            let depth = q.records.len() as u64;
            let first = q.sq.posted() - q.sq.outstanding();
            for i in first..q.sq.posted() {
                let rec = std::mem::replace(&mut q.records[(i % depth) as usize], EMPTY);
                let reached = i < q.to_hw;
                if rec.seq == 0 || pe.settle.settle(rec.seq) != Settle::New {
                    continue; // markers, and anything already settled
                }
                match rec.what {
                    What::PutStaged { .. } | What::PutHeap { .. } | What::GetHeap { .. } => {
                        if pe.n_replays < pe.replays.len() {
                            puts |= rec.rcpt != 0 && reached;
                            pe.replays[pe.n_replays] = Some(ReplayRec {
                                seq: rec.seq,
                                qp: qi as u8,
                                what: rec.what,
                                atomic: None,
                                rcpt: rec.rcpt,
                            });
                            pe.n_replays += 1;
                            self.stats.replays += 1;
                        } else {
                            // No room to keep it for replay: lost,
                            // reported by the next quiet.
                            pe.lost += 1;
                        }
                    }
                    What::Get { ticket } => {
                        fail_ticket(&mut self.tickets, ticket, false, &mut self.stats)
                    }
                    What::Atomic { ticket, .. } => {
                        // Only a native op's WR or the emulation's winning
                        // compare-swap changes the word; earlier steps were
                        // reads or lost compare-swaps. So a step that never
                        // reached the device means the op was not applied.
                        let t = self.tickets[ticket as usize];
                        if !reached && t.internal && pe.n_replays < pe.replays.len() {
                            pe.replays[pe.n_replays] = Some(ReplayRec {
                                seq: rec.seq,
                                qp: 0,
                                what: rec.what,
                                atomic: t.plan.map(|p| (t.offset, *p.op())),
                                rcpt: 0,
                            });
                            pe.n_replays += 1;
                            self.stats.replays += 1;
                            release_ticket(&mut self.tickets, &mut self.free_list, ticket);
                        } else {
                            if t.internal && reached && pe.unreported.is_none() {
                                pe.unreported = Some(VerbsError::OutcomeUnknown {
                                    peer,
                                    offset: t.offset,
                                });
                            } else if t.internal && !reached {
                                // Not applied, no room to replay it.
                                pe.lost += 1;
                            }
                            fail_ticket(&mut self.tickets, ticket, reached, &mut self.stats);
                            if t.internal {
                                release_ticket(&mut self.tickets, &mut self.free_list, ticket);
                            }
                        }
                    }
                    What::Marker | What::Empty => {}
                }
            }
            q.sq.reset();
            q.to_hw = q.sq.posted();
        }
        // A put that reached the device may have landed: wait for the
        // peer's receipts before replaying any of them.
        pe.await_receipts = puts;
        // And this side collects its receipts of the peer's puts (not
        // when a data QP stayed out of the error state: withheld below).
        pe.receipts = None;
        pe.collect_until = None;
        if !pe.collect && refused.is_none() {
            pe.collect = true;
            self.collecting += 1;
        }
        self.credits.give(give);
        // Atomics whose next compare-swap was waiting for room never
        // applied it: replay the non-fetching ones, fail the others (safe to
        // retry elsewhere).
        let pe = self.peers[peer as usize]
            .as_mut()
            .expect("peer checked above");
        for idx in 0..self.tickets.len() {
            let t = self.tickets[idx];
            if t.peer != peer || t.repost.is_none() || t.state != TState::Pending {
                continue;
            }
            self.tickets[idx].repost = None;
            self.reposts = self.reposts.saturating_sub(1);
            if pe.settle.settle(t.seq) != Settle::New {
                continue;
            }
            if t.internal && pe.n_replays < pe.replays.len() {
                pe.replays[pe.n_replays] = Some(ReplayRec {
                    seq: t.seq,
                    qp: 0,
                    what: What::Atomic {
                        ticket: idx as u32,
                        first: false,
                    },
                    atomic: t.plan.map(|p| (t.offset, *p.op())),
                    rcpt: 0,
                });
                pe.n_replays += 1;
                self.stats.replays += 1;
            } else {
                fail_ticket(&mut self.tickets, idx as u32, false, &mut self.stats);
                if t.internal {
                    pe.lost += 1;
                }
            }
            if t.internal {
                release_ticket(&mut self.tickets, &mut self.free_list, idx as u32);
            }
        }
        let generation = self.peers[peer as usize]
            .as_ref()
            .map_or(0, |p| p.generation)
            + 1;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Error,
        });
        self.push_event(Event::RebuildNeeded { peer, generation });
        if let Some(qp) = refused {
            self.stats.receipts_withheld += 1;
            self.push_event(Event::ReceiptsWithheld {
                peer,
                generation,
                reason: Withheld::ModifyFailed { qp },
            });
        }
    }

    /// Polls the receive side once (a batch of receipts, receives
    /// re-posted; skipped while another thread polls it). Returns whether
    /// anything was reaped.
    fn poll_recv(&mut self) -> bool {
        let Some(r) = &self.recv else { return false };
        let busy = r.poll() == PollResult::Busy;
        if r.failed() {
            self.device_failed();
        }
        busy
    }

    /// Where `peer`'s receipts are in the receive side's table.
    fn seen_range(&self, peer: u32) -> core::ops::Range<usize> {
        let d = usize::from(self.p.data_qps);
        peer as usize * d..(peer as usize + 1) * d
    }

    /// Finishes the receipt collection of every failed peer whose data QPs
    /// all reported their last WQE: polls the receive CQ empty, keeps the
    /// receipts and reports [`Event::Receipts`]. Gives up on a peer whose
    /// data QPs did not all report it by the collection deadline
    /// ([`VerbsConfig::collect_timeout_ms`] after the first step that saw
    /// it collecting): no answer ([`Event::ReceiptsWithheld`]), and the
    /// rebuild may go ahead. So a missing event costs at most that long of
    /// async-event reads on the progress path.
    fn collect_receipts(&mut self) {
        if self.collecting == 0 {
            return;
        }
        self.async_events();
        let now = self.now.nanos;
        let patience = u64::from(self.cfg.collect_timeout_ms) * 1_000_000;
        for peer in 0..self.n_pes {
            let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
                continue;
            };
            if !pe.collect {
                continue;
            }
            if let Some(i) = pe.qps.iter().skip(1).position(|q| q.wqe != Wqe::Reached) {
                let until = *pe.collect_until.get_or_insert(now.saturating_add(patience));
                if now < until {
                    continue;
                }
                // Receive completions of that QP may still come: an answer
                // now could be too low. Give up without one.
                pe.collect = false;
                pe.collect_until = None;
                let generation = pe.generation + 1;
                self.collecting -= 1;
                self.stats.receipts_withheld += 1;
                self.push_event(Event::ReceiptsWithheld {
                    peer,
                    generation,
                    reason: Withheld::NoLastWqe { qp: i as u8 + 1 },
                });
                continue;
            }
            let mut applied = Receipts {
                n: self.p.data_qps,
                ..Receipts::default()
            };
            let range = self.seen_range(peer);
            if let Some(r) = &self.recv {
                r.drain_and_read(range, &mut applied.seq);
            }
            let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
                continue;
            };
            let generation = pe.generation + 1;
            pe.collect = false;
            pe.collect_until = None;
            pe.receipts = Some((generation, applied));
            self.collecting -= 1;
            self.push_event(Event::Receipts {
                peer,
                generation,
                applied,
            });
        }
    }

    fn device_failed(&mut self) {
        if self.fatal {
            return;
        }
        self.fatal = true;
        for peer in 0..self.n_pes {
            self.fail_peer(peer);
        }
        self.push_event(Event::DeviceFatal);
    }

    /// The next async event: the device's, or the fake HCA's.
    fn next_async(&self) -> Option<sys::AsyncEvent> {
        if let Some(e) = self.ctx.as_ref().and_then(sys::Ctx::next_async_event) {
            return Some(e);
        }
        self.cq.as_ref().and_then(sys::Cq::fake_event)
    }

    fn async_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.next_async() {
            any = true;
            self.stats.async_events += 1;
            use sys::event::*;
            match ev.kind {
                QP_FATAL | QP_REQ_ERR | QP_ACCESS_ERR | PATH_MIG_ERR => {
                    if let Some(tag) = ev.qp_context {
                        self.fail_peer((tag >> 8) as u32);
                    }
                }
                LAST_WQE_REACHED => {
                    if let Some(tag) = ev.qp_context
                        && let Some(Some(pe)) = self.peers.get_mut(tag >> 8)
                        && let Some(q) = pe.qps.get_mut(tag & 0xFF)
                    {
                        if q.wqe == Wqe::Awaiting {
                            q.wqe = Wqe::Reached;
                        } else {
                            self.stats.stale_async_events += 1;
                        }
                    }
                }
                PORT_ERR => {
                    for peer in 0..self.n_pes {
                        self.fail_peer(peer);
                    }
                    self.push_event(Event::PortDown {
                        port: ev.port.unwrap_or(self.port),
                    });
                }
                PORT_ACTIVE => self.push_event(Event::PortActive {
                    port: ev.port.unwrap_or(self.port),
                }),
                DEVICE_FATAL | CQ_ERR => self.device_failed(),
                _ => {}
            }
        }
        any
    }

    fn release(&mut self) {
        // QPs before the CQ, MRs and QPs before the PD, all before the context.
        for p in self.peers.iter_mut().flatten() {
            p.qps = Box::new([]);
        }
        // The SRQ after its QPs (its receive CQ with it), taken out of the
        // receive side even if another thread still holds a clone.
        if let Some(r) = self.recv.take() {
            drop(r.release());
        }
        self.scratch_mr = None;
        self.heap_mr = None;
        self.cq = None;
        self.pd = None;
        self.ctx = None;
        // The memory after its MRs.
        self.scratch = None;
        self.owned_heap = None;
    }

    /// Puts `len` bytes (from staging `src` or the heap) at `offset`,
    /// split at block boundaries, one sequence number per piece. Checks room
    /// for every piece first (SQ slots, staging, CQ credits, sequence
    /// window, fence), so a put is queued whole or not at all.
    fn put_pieces(
        &mut self,
        peer: u32,
        offset: u64,
        len: u64,
        src: Option<&[u8]>,
        local_offset: u64,
    ) -> Result<()> {
        let card = self.remote_bounds(peer, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let fence = self.fence_check(peer, self.data_qp(offset))?;
        let pieces = self.dry_run(peer, offset, len, src.is_some())?;
        let heap_lkey = self.heap_mr.as_ref().map_or(0, sys::Mr::lkey);
        let scratch_lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let (mut at, mut done) = (offset, 0u64);
        for piece in 0..pieces {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            let (what, sge, inline, end) = match src {
                Some(bytes) => {
                    let q = &self.peer_ref(peer)?.qps[qi];
                    let (start, end) =
                        q.stage
                            .fit(q.stage.head(), n)
                            .ok_or(VerbsError::WouldBlock {
                                peer,
                                what: "staging",
                            })?;
                    let inline = n <= u64::from(q.inline_cap);
                    let dst = q.stage_off + q.stage.offset(start) as usize;
                    // SAFETY: `dst..dst + n` lies in this QP's staging ring
                    // inside the scratch allocation, and the ring accounting
                    // says the device no longer reads it; `done + n` is
                    // within `bytes`.
                    unsafe {
                        ptr::copy_nonoverlapping(
                            bytes.as_ptr().add(done as usize),
                            self.scratch_ptr.add(dst),
                            n as usize,
                        );
                    }
                    (
                        What::PutStaged {
                            offset: at,
                            len: n as u32,
                            at: start,
                        },
                        (self.scratch_ptr as u64 + dst as u64, n as u32, scratch_lkey),
                        inline,
                        end,
                    )
                }
                None => (
                    What::PutHeap {
                        offset: at,
                        len: n as u32,
                        local_offset: local_offset + done,
                    },
                    (self.heap as u64 + local_offset + done, n as u32, heap_lkey),
                    false,
                    self.peer_ref(peer)?.qps[qi].stage.head(),
                ),
            };
            let seq = self.next_seq(peer)?;
            if piece > 0 && self.peer_ref(peer)?.state != LinkState::Up {
                // A doorbell for the earlier pieces was refused and failed
                // the link: this piece joins them in the replays instead
                // of the failed QP (where it would be neither done nor
                // replayed).
                self.replay_unposted(peer, qi, what, seq, end);
                done += n;
                at += n;
                continue;
            }
            self.queue_wr(
                peer,
                qi,
                what,
                seq,
                // With immediate: the target's receive completion is the
                // put's receipt.
                sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                Some(sge),
                (card.heap_base + at, card.rkey),
                None,
                false,
                fence && piece == 0,
                inline,
                end,
            )?;
            if piece == 0 && fence {
                self.fence_done(peer);
            }
            done += n;
            at += n;
        }
        Ok(())
    }

    /// Adds a piece of a put that was never posted (its link failed while
    /// the put was queued) to the peer's replays, after the pieces
    /// `fail_peer` put there: it carries no receipt, so it is replayed
    /// whatever the peer's receipts say. Its staged bytes stay until the
    /// replays are drained.
    fn replay_unposted(&mut self, peer: u32, qi: usize, what: What, seq: u64, stage_end: u64) {
        let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
            return;
        };
        pe.qps[qi].stage.commit(stage_end);
        if pe.settle.settle(seq) != Settle::New {
            return;
        }
        if pe.n_replays < pe.replays.len() {
            pe.replays[pe.n_replays] = Some(ReplayRec {
                seq,
                qp: qi as u8,
                what,
                atomic: None,
                rcpt: 0,
            });
            pe.n_replays += 1;
            self.stats.replays += 1;
        } else {
            pe.lost += 1;
        }
    }

    /// Checks that the pieces of an operation of `len` bytes at `offset`
    /// fit: SQ slots per QP, staging (when `staged`), CQ credits (as if
    /// every piece were signaled) and the sequence window. When they do
    /// not, makes room for a bounded while ([`FULL_SPIN`] CQ polls, with
    /// the batches posted and markers behind unsignaled tails so the
    /// completions that free room do come), then gives up with
    /// `WouldBlock`. Returns the number of pieces.
    fn dry_run(&mut self, peer: u32, offset: u64, len: u64, staged: bool) -> Result<u64> {
        let mut what = "send queue";
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            match self.room(peer, offset, len, staged)? {
                Ok(pieces) => return Ok(pieces),
                Err(w) => what = w,
            }
            self.make_room(peer);
        }
        Err(self.would_block(peer, what))
    }

    /// Room for one signaled WR on QP `qi` of `peer` (a get or an atomic
    /// step), with the same bounded spin as [`VerbsDriver::dry_run`].
    fn single_room(&mut self, peer: u32, qi: usize) -> Result<()> {
        let mut what = "send queue";
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            let q = &self.peer_ref(peer)?.qps[qi];
            let short = if q.sq.free() < 2 {
                Some("send queue")
            } else if self.credits.available() < 2 {
                Some("completion queue credits")
            } else if !self.seqs_fit(peer, 1) {
                Some("sequence window")
            } else {
                None
            };
            match short {
                None => return Ok(()),
                Some(w) => what = w,
            }
            self.make_room(peer);
        }
        Err(self.would_block(peer, what))
    }

    /// Waits (a bounded spin, then `WouldBlock`) until QP `qi` of `peer`
    /// has nothing outstanding.
    fn drain_qp(&mut self, peer: u32, qi: usize) -> Result<()> {
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            if self.peer_ref(peer)?.qps[qi].outstanding() == 0 {
                return Ok(());
            }
            let _ = self.marker(peer, qi);
            self.flush_qp(peer, qi);
            self.poll_cq();
        }
        Err(self.would_block(peer, "the next block's queue"))
    }

    /// Posts the peer's batches and markers, and polls the CQ once.
    fn make_room(&mut self, peer: u32) {
        let n = self.peer_ref(peer).map_or(0, |p| p.qps.len());
        for qi in 0..n {
            let _ = self.marker(peer, qi);
            self.flush_qp(peer, qi);
        }
        self.retry_reposts();
        self.poll_cq();
    }

    /// [`VerbsDriver::dry_run`]'s check: `Ok(Ok(pieces))` when everything
    /// fits, `Ok(Err(what))` naming what is short.
    fn room(
        &self,
        peer: u32,
        offset: u64,
        len: u64,
        staged: bool,
    ) -> Result<core::result::Result<u64, &'static str>> {
        let mut heads = [0u64; MAX_QPS];
        let mut slots = [0u32; MAX_QPS];
        let mut pieces = 0u64;
        let pe = self.peer_ref(peer)?;
        for (i, q) in pe.qps.iter().enumerate() {
            heads[i] = q.stage.head();
            // Keep one slot per QP for a quiet marker.
            slots[i] = q.sq.free().saturating_sub(1);
        }
        let mut at = offset;
        while at < offset + len {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            pieces += 1;
            if slots[qi] == 0 {
                return Ok(Err("send queue"));
            }
            slots[qi] -= 1;
            if staged {
                match pe.qps[qi].stage.fit(heads[qi], n) {
                    Some((_, end)) => heads[qi] = end,
                    None => return Ok(Err("staging")),
                }
            }
            at += n;
        }
        // One credit kept for a marker.
        if self.credits.available() < pieces + 1 {
            return Ok(Err("completion queue credits"));
        }
        if !self.seqs_fit(peer, pieces) {
            return Ok(Err("sequence window"));
        }
        Ok(Ok(pieces))
    }

    // ---------------------------------------------------------------
    // This PE's own heap (the contract allows `peer == me`)

    fn own_range(&self, offset: u64, len: u64) -> Result<*mut u8> {
        if self.closed {
            return Err(VerbsError::Closed {
                peer: Some(self.me),
            });
        }
        self.local_bounds(offset, len)?;
        // SAFETY: in bounds of the heap (checked above), which `new`'s
        // contract keeps mapped.
        Ok(unsafe { self.heap.add(offset as usize) })
    }

    /// Copies `len` bytes of this PE's heap from `from` to `to` (ranges may
    /// overlap).
    fn own_copy(&self, to: u64, from: u64, len: u32) -> Result<()> {
        let dst = self.own_range(to, len.into())?;
        let src = self.own_range(from, len.into())?;
        // SAFETY: both ranges are in the heap (own_range); `copy` allows
        // overlap.
        unsafe { ptr::copy(src, dst, len as usize) };
        Ok(())
    }

    fn own_atomic(&mut self, offset: u64, op: AtomicOp) -> Result<u64> {
        let align = op.width.bytes() as u64;
        let p = self.own_range(offset, align)?;
        if !offset.is_multiple_of(align) {
            return Err(VerbsError::Misaligned {
                peer: self.me,
                offset,
                align,
            });
        }
        use switchyard_core::{
            sync::atomic::{AtomicU32, AtomicU64},
            transport::{AtomicWidth, heap_rmw_u32, heap_rmw_u64},
        };
        Ok(match op.width {
            // SAFETY: in bounds and 8-aligned (the heap is 8-aligned); the
            // heap's words are only ever accessed atomically or by the
            // device, as in the other drivers.
            AtomicWidth::W64 => heap_rmw_u64(unsafe { AtomicU64::from_ptr(p.cast()) }, &op),
            // SAFETY: in bounds and 4-aligned, as above.
            AtomicWidth::W32 => heap_rmw_u32(unsafe { AtomicU32::from_ptr(p.cast()) }, &op),
        })
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

impl Transport for VerbsDriver {
    type Error = VerbsError;

    fn name(&self) -> &'static str {
        "verbs"
    }

    fn connect(&mut self, peer: u32) -> Result<()> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        if peer == self.me {
            return Ok(());
        }
        let pe = self.peer_ref(peer)?;
        if pe.state == LinkState::Up {
            return Ok(());
        }
        if pe.state == LinkState::Error || pe.generation > 0 {
            // After a failure the link comes back through rebuild and
            // peer_rebuilt, not connect.
            return Err(VerbsError::PeerDown { peer });
        }
        let generation = pe.generation;
        self.bring_up(peer, generation, false)?;
        self.peer_mut(peer)?.state = LinkState::Up;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Up,
        });
        Ok(())
    }

    fn state(&self, peer: u32) -> LinkState {
        if peer == self.me {
            return if self.closed {
                LinkState::Down
            } else {
                LinkState::Up
            };
        }
        self.peer_ref(peer).map_or(LinkState::Down, |p| p.state)
    }

    fn heap_len(&self, peer: u32) -> Option<u64> {
        if peer == self.me {
            return Some(self.heap_len);
        }
        self.peer_ref(peer).ok()?.remote.map(|c| c.heap_len)
    }

    fn put(&mut self, peer: u32, offset: u64, src: &[u8], _ctx: ContextId) -> Result<()> {
        if peer == self.me {
            let dst = self.own_range(offset, src.len() as u64)?;
            // SAFETY: `dst` has room for `src` (checked by own_range); a
            // caller's buffer never overlaps the heap mapping it writes.
            unsafe { ptr::copy(src.as_ptr(), dst, src.len()) };
            return Ok(());
        }
        self.put_pieces(peer, offset, src.len() as u64, Some(src), 0)
    }

    fn put_from_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        _ctx: ContextId,
    ) -> Result<()> {
        self.local_bounds(local_offset, len.into())?;
        if peer == self.me {
            return self.own_copy(offset, local_offset, len);
        }
        self.put_pieces(peer, offset, len.into(), None, local_offset)
    }

    fn get_into_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        _ctx: ContextId,
    ) -> Result<()> {
        self.local_bounds(local_offset, len.into())?;
        if peer == self.me {
            return self.own_copy(local_offset, offset, len);
        }
        let card = self.remote_bounds(peer, offset, len.into())?;
        if len == 0 {
            return Ok(());
        }
        let len = u64::from(len);
        let fence = self.fence_check(peer, self.data_qp(offset))?;
        let pieces = self.dry_run(peer, offset, len, false)?;
        let lkey = self.heap_mr.as_ref().map_or(0, sys::Mr::lkey);
        let (mut at, mut done) = (offset, 0u64);
        for piece in 0..pieces {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            let end = self.peer_ref(peer)?.qps[qi].stage.head();
            let seq = self.next_seq(peer)?;
            self.queue_wr(
                peer,
                qi,
                What::GetHeap {
                    offset: at,
                    len: n as u32,
                    local_offset: local_offset + done,
                },
                seq,
                sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                Some((self.heap as u64 + local_offset + done, n as u32, lkey)),
                (card.heap_base + at, card.rkey),
                None,
                false,
                fence && piece == 0,
                false,
                end,
            )?;
            if piece == 0 && fence {
                self.fence_done(peer);
            }
            done += n;
            at += n;
        }
        Ok(())
    }

    fn max_get_len(&self) -> u32 {
        // One block, so a get is one READ on one data QP.
        self.cfg.get_slot_bytes.min(BLOCK as u32)
    }

    fn get_start(&mut self, peer: u32, offset: u64, len: u32, ctx: ContextId) -> Result<Ticket> {
        let max = self.max_get_len();
        if len > max {
            return Err(VerbsError::TooLong { peer, len, max });
        }
        if peer == self.me {
            self.own_range(offset, len.into())?;
            return Ok(Ticket {
                peer,
                offset,
                len,
                slot: LOCAL_SLOT,
                atomic: None,
                context: ctx,
            });
        }
        let card = self.remote_bounds(peer, offset, len.into())?;
        // At most one block's length: one READ on the first block's data
        // QP, behind the earlier writes to those bytes (RC executes a QP's
        // requests in order). A get straddling into the next block also
        // reads bytes whose writes went over that block's QP: it waits for
        // that QP to drain first (as the TCP driver waits for the second
        // block's connection).
        let qi = self.data_qp(offset);
        let fence = self.fence_check(peer, qi)?;
        if len > 0 {
            let other = self.data_qp(offset + u64::from(len) - 1);
            if other != qi {
                self.drain_qp(peer, other)?;
            }
        }
        if len > 0 {
            self.single_room(peer, qi)?;
        }
        let idx = self.take_ticket(peer)?;
        let tgen = {
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: if len == 0 {
                    TState::Done(0)
                } else {
                    TState::Pending
                },
                peer,
                offset,
                seq: 0,
                plan: None,
                internal: false,
                repost: None,
            };
            t.tgen
        };
        let ticket = Ticket {
            peer,
            offset,
            len,
            slot: u32::from(tgen) << 16 | idx,
            atomic: None,
            context: ctx,
        };
        if len == 0 {
            return Ok(ticket);
        }
        let local = self.scratch_ptr as u64
            + (self.get_off + idx as usize * self.cfg.get_slot_bytes as usize) as u64;
        let lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let end = self.peer_ref(peer)?.qps[qi].stage.head();
        let seq = match self.next_seq(peer) {
            Ok(seq) => seq,
            Err(e) => {
                self.free_ticket(idx);
                return Err(e);
            }
        };
        self.tickets[idx as usize].seq = seq;
        if let Err(e) = self.queue_wr(
            peer,
            qi,
            What::Get { ticket: idx },
            seq,
            sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
            Some((local, len, lkey)),
            (card.heap_base + offset, card.rkey),
            None,
            true,
            fence,
            false,
            end,
        ) {
            // Checked above; settle the number so the window moves on.
            if let Some(Some(pe)) = self.peers.get_mut(peer as usize) {
                let _ = pe.settle.settle(seq);
            }
            self.free_ticket(idx);
            return Err(e);
        }
        if fence {
            self.fence_done(peer);
        }
        Ok(ticket)
    }

    fn get_poll(&mut self, ticket: &Ticket, dst: &mut [u8]) -> Result<bool> {
        let peer = ticket.peer;
        if peer == self.me && ticket.slot == LOCAL_SLOT {
            let n = (ticket.len as usize).min(dst.len());
            let src = self.own_range(ticket.offset, n as u64)?;
            // SAFETY: `src..src + n` is in the heap (own_range) and `dst`
            // holds `n` bytes; a caller's buffer is not in the heap mapping.
            unsafe { ptr::copy(src, dst.as_mut_ptr(), n) };
            return Ok(true);
        }
        let idx = self.ticket_of(peer, ticket.slot)?;
        if self.tickets[idx as usize].state == TState::Pending {
            self.flush_qp(peer, self.data_qp(ticket.offset));
            self.poll_cq();
        }
        match self.tickets[idx as usize].state {
            TState::Pending => Ok(false),
            TState::Done(_) => {
                let n = (ticket.len as usize).min(dst.len());
                let src = self.get_off + idx as usize * self.cfg.get_slot_bytes as usize;
                // SAFETY: the slot's buffer lies in the scratch allocation
                // and the READ into it completed.
                unsafe { ptr::copy_nonoverlapping(self.scratch_ptr.add(src), dst.as_mut_ptr(), n) };
                self.free_ticket(idx);
                Ok(true)
            }
            TState::Failed { .. } | TState::Free => {
                self.free_ticket(idx);
                Err(VerbsError::PeerDown { peer })
            }
        }
    }

    fn atomic_start(
        &mut self,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket> {
        if peer == self.me {
            let idx = self.take_ticket(peer)?;
            let v = match self.own_atomic(offset, op) {
                Ok(v) => v,
                Err(e) => {
                    self.free_ticket(idx);
                    return Err(e);
                }
            };
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: TState::Done(v),
                peer,
                offset,
                seq: 0,
                plan: None,
                internal: false,
                repost: None,
            };
            let slot = u32::from(t.tgen) << 16 | idx;
            if !op.is_fetching() {
                self.free_ticket(idx);
            }
            return Ok(Ticket {
                peer,
                offset,
                len: op.width.bytes() as u32,
                slot,
                atomic: Some(op),
                context: ctx,
            });
        }
        let card = self.remote_bounds(peer, offset, op.width.bytes() as u64)?;
        if !self.p.atomics || !card.atomics {
            return Err(VerbsError::NoAtomics { peer });
        }
        let plan = AtomicPlan::new(offset, op).map_err(|m| VerbsError::Misaligned {
            peer,
            offset,
            align: m.align,
        })?;
        // The emulation works on the aligned 8-byte word: it must be inside.
        self.remote_bounds(peer, offset & !7, 8)?;
        self.single_room(peer, 0)?;
        let idx = self.take_ticket(peer)?;
        let seq = match self.next_seq(peer) {
            Ok(seq) => seq,
            Err(e) => {
                self.free_ticket(idx);
                return Err(e);
            }
        };
        let tgen = {
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: TState::Pending,
                peer,
                offset,
                seq,
                plan: Some(plan),
                internal: !op.is_fetching(),
                repost: None,
            };
            t.tgen
        };
        if let Err(e) = self.post_atomic(idx, plan.first(), true) {
            // Nothing reached the device: settle the number and give the
            // ticket back.
            if let Some(Some(pe)) = self.peers.get_mut(peer as usize) {
                let _ = pe.settle.settle(seq);
            }
            self.free_ticket(idx);
            return Err(e);
        }
        Ok(Ticket {
            peer,
            offset,
            len: op.width.bytes() as u32,
            slot: u32::from(tgen) << 16 | idx,
            atomic: Some(op),
            context: ctx,
        })
    }

    fn atomic_poll(&mut self, ticket: &Ticket) -> Result<Option<u64>> {
        let peer = ticket.peer;
        let idx = self.ticket_of(peer, ticket.slot)?;
        if self.tickets[idx as usize].state == TState::Pending {
            self.retry_reposts();
            self.poll_cq();
        }
        match self.tickets[idx as usize].state {
            TState::Pending => Ok(None),
            TState::Done(v) => {
                self.free_ticket(idx);
                Ok(Some(v))
            }
            TState::Failed { unknown } => {
                let offset = self.tickets[idx as usize].offset;
                self.free_ticket(idx);
                Err(if unknown {
                    VerbsError::OutcomeUnknown { peer, offset }
                } else {
                    VerbsError::PeerDown { peer }
                })
            }
            TState::Free => Err(VerbsError::StaleTicket {
                peer,
                slot: ticket.slot,
            }),
        }
    }

    fn fence(&mut self) -> Result<()> {
        if self.closed {
            return Err(VerbsError::Closed { peer: None });
        }
        for pe in self.peers.iter_mut().flatten() {
            if pe.state == LinkState::Up && pe.qps.iter().any(|q| q.outstanding() > 0) {
                pe.fence = true;
            }
        }
        Ok(())
    }

    fn quiet_poll(&mut self) -> Result<bool> {
        if self.closed {
            return Err(VerbsError::Closed { peer: None });
        }
        // Operations lost or of unknown outcome first, also after the
        // device died (it fails every peer, which may lose some).
        for (peer, pe) in self.peers.iter_mut().enumerate() {
            let Some(pe) = pe else { continue };
            if let Some(e) = pe.unreported.take() {
                return Err(e);
            }
            if pe.lost > 0 {
                let ops = core::mem::take(&mut pe.lost);
                return Err(VerbsError::ReplayLost {
                    peer: peer as u32,
                    ops,
                });
            }
        }
        if self.fatal {
            return Err(VerbsError::DeviceFatal);
        }
        let mut done = true;
        for peer in 0..self.n_pes {
            let Some(Some(pe)) = self.peers.get_mut(peer as usize) else {
                continue;
            };
            if pe.n_replays > 0 {
                // Completed through the fallback once the shim drains them.
                return Err(VerbsError::PeerDown { peer });
            }
            for qi in 0..pe.qps.len() {
                // The marker joins the batch: one doorbell for both.
                let _ = self.marker(peer, qi);
                self.flush_qp(peer, qi);
                if self.peers[peer as usize]
                    .as_ref()
                    .is_some_and(|p| p.qps[qi].outstanding() > 0)
                {
                    done = false;
                }
            }
        }
        if self
            .tickets
            .iter()
            .any(|t| t.internal && t.state == TState::Pending)
        {
            self.retry_reposts();
            done = false;
        }
        if !done {
            self.poll_cq();
        }
        Ok(done)
    }

    fn progress(&mut self, now: Instant) -> PollResult {
        if self.closed {
            return PollResult::Idle;
        }
        self.now = now;
        let mut busy = false;
        // Doorbells for batches left by puts.
        busy |= self.post_batches();
        self.retry_reposts();
        busy |= self.poll_cq();
        // The target side: receipts of the peers' puts, receives re-posted.
        busy |= self.poll_recv();
        self.collect_receipts();
        self.steps = self.steps.wrapping_add(1);
        // The async fd is a read(2): every ASYNC_EVERY steps, not per spin.
        // Fatal QP events come with error completions anyway when work is
        // outstanding; this catches idle links (port down, device fatal).
        if self.steps.is_multiple_of(ASYNC_EVERY) {
            busy |= self.async_events();
        }
        if busy {
            PollResult::Busy
        } else {
            PollResult::Idle
        }
    }

    fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        for pe in self.peers.iter_mut().flatten() {
            for q in pe.qps.iter_mut() {
                let _ = q.qp.modify(&crate::qp_plan::Step::Reset);
                q.state = QpState::Reset;
            }
            pe.state = LinkState::Down;
        }
        self.release();
        Ok(())
    }
}

impl Drop for VerbsDriver {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::{
        transport::{AtomicWidth, ErrorKind, TransportError},
        wire::AtomicKind,
    };

    use super::*;
    use crate::{fake::Fabric, params::Template};

    const CTX: ContextId = ContextId { pe: 0, seq: 1 };

    #[test]
    fn wr_ids_round_trip() {
        for (peer, qp, inc, idx) in [
            (0u32, 0u8, 0u8, 0u64),
            (MAX_PES - 1, 8, 255, 0xFFFF_FFFF),
            (12345, 3, 7, 1 << 40 | 99),
        ] {
            let id = wr_id(peer, qp, inc, idx);
            assert_eq!(split_wr_id(id), (peer, qp, inc, idx as u32));
        }
    }

    /// Without a device (as on the machine this was written on), creating
    /// a driver fails with the probe's reason, and nothing panics.
    #[test]
    fn new_without_a_device_says_why() {
        let p = probe::probe();
        if p.unavailable.is_none() {
            return; // a device is present: the conformance suite covers it
        }
        match VerbsDriver::with_owned_heap(VerbsConfig::default(), 0, 2, 1, 4096) {
            Err(VerbsError::Unavailable { reason }) => {
                assert_eq!(reason, p.unavailable.unwrap().to_string());
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a driver without a device"),
        }
        assert!(matches!(
            VerbsDriver::with_owned_heap(VerbsConfig::default(), 2, 2, 1, 4096),
            Err(VerbsError::InvalidPe { peer: 2, n_pes: 2 })
        ));
    }

    /// PE 0 and PE 1 on a fake fabric, connected.
    fn pair(cfg: VerbsConfig, heap: u64) -> (VerbsDriver, VerbsDriver, Fabric) {
        let f = Fabric::new();
        let mut a = VerbsDriver::fake_with_owned_heap(cfg.clone(), 0, 2, 7, heap, &f).unwrap();
        let mut b = VerbsDriver::fake_with_owned_heap(cfg, 1, 2, 7, heap, &f).unwrap();
        a.set_peer_card(1, b.card_for(0).unwrap()).unwrap();
        b.set_peer_card(0, a.card_for(1).unwrap()).unwrap();
        b.connect(0).unwrap();
        a.connect(1).unwrap();
        assert_eq!(
            a.poll_event(),
            Some(Event::Link {
                peer: 1,
                state: LinkState::Up
            })
        );
        (a, b, f)
    }

    /// The shim's receipts handshake, by hand: `b` (PE `b_pe`) hears that
    /// the link from `a` (PE `a_pe`) failed and collects its receipts; `a`
    /// settles its in-doubt puts with them. Returns the puts known landed.
    fn handshake(a: &mut VerbsDriver, b: &mut VerbsDriver, a_pe: u32, b_pe: u32) -> u64 {
        b.peer_failed(a_pe).unwrap();
        for _ in 0..1000 {
            b.progress(Instant::default());
            if let Some((generation, r)) = b.receipts(a_pe) {
                return a.settle_receipts(b_pe, generation, r.as_slice()).unwrap();
            }
        }
        panic!("no receipts");
    }

    fn quiet(a: &mut VerbsDriver) -> Result<()> {
        for _ in 0..10_000 {
            if a.quiet_poll()? {
                return Ok(());
            }
        }
        panic!("quiet did not complete");
    }

    fn get(a: &mut VerbsDriver, pe: u32, off: u64, len: u32) -> Result<Vec<u8>> {
        let t = a.get_start(pe, off, len, CTX)?;
        let mut v = vec![0; len as usize];
        for _ in 0..10_000 {
            if a.get_poll(&t, &mut v)? {
                return Ok(v);
            }
        }
        panic!("get did not complete");
    }

    fn fadd(a: &mut VerbsDriver, off: u64, n: u64) -> Result<u64> {
        let op = AtomicOp {
            kind: AtomicKind::FetchAdd,
            width: AtomicWidth::W64,
            operand: n,
            compare: 0,
        };
        let t = a.atomic_start(1, off, op, CTX)?;
        for _ in 0..10_000 {
            if let Some(v) = a.atomic_poll(&t)? {
                return Ok(v);
            }
        }
        panic!("atomic did not complete");
    }

    #[test]
    fn data_path_on_the_fake_hca() {
        let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 20);
        // Small puts are batched (one doorbell for many), then signaled.
        let before = f.posts();
        for i in 0..10u64 {
            a.put(1, i * 8, &i.to_le_bytes(), CTX).unwrap();
        }
        assert_eq!(f.posts(), before, "batched until progress or quiet");
        quiet(&mut a).unwrap();
        assert_eq!(
            f.posts(),
            before + 1,
            "one doorbell for the batch (and its marker)"
        );
        let s = a.stats();
        assert_eq!(s.inline_wrs, 10);
        assert_eq!(s.markers, 1);
        for i in 0..10u64 {
            assert_eq!(get(&mut a, 1, i * 8, 8).unwrap(), i.to_le_bytes());
        }
        // A put across three 64 KiB blocks, from staging; then from the heap.
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        a.put(1, 1000, &big, CTX).unwrap();
        quiet(&mut a).unwrap();
        let mut back = Vec::new();
        let mut off = 1000u64;
        while back.len() < big.len() {
            let n = (big.len() - back.len()).min(a.max_get_len() as usize) as u32;
            back.extend(get(&mut a, 1, off, n).unwrap());
            off += u64::from(n);
        }
        assert_eq!(back, big);
        a.put(0, 500_000, b"from my heap", CTX).unwrap();
        a.put_from_heap(1, 600_000, 500_000, 12, CTX).unwrap();
        a.get_into_heap(1, 600_000, 700_000, 12, CTX).unwrap();
        quiet(&mut a).unwrap();
        assert_eq!(get(&mut a, 0, 700_000, 12).unwrap(), b"from my heap");
        // Atomics: native fetch-add, emulated swap and 32-bit ops.
        assert_eq!(fadd(&mut a, 800_000, 5).unwrap(), 0);
        assert_eq!(fadd(&mut a, 800_000, 5).unwrap(), 5);
        let swap = AtomicOp {
            kind: AtomicKind::Swap,
            width: AtomicWidth::W32,
            operand: 9,
            compare: 0,
        };
        let t = a.atomic_start(1, 800_004, swap, CTX).unwrap();
        while a.atomic_poll(&t).unwrap().is_none() {}
        assert_eq!(
            get(&mut a, 1, 800_000, 8).unwrap(),
            (10u64 | 9 << 32).to_le_bytes()
        );
        // Bounds, alignment, unknown PE.
        let e = a.put(1, (1 << 20) - 4, &[0; 8], CTX).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        assert_eq!(
            fadd(&mut a, 4, 1).unwrap_err().kind(),
            ErrorKind::Misaligned
        );
        assert_eq!(
            a.put(5, 0, &[1], CTX).unwrap_err().kind(),
            ErrorKind::InvalidPe
        );
        assert_eq!(a.stats().completion_errors, 0);
    }

    #[test]
    fn back_pressure_and_signaling_on_a_shallow_queue() {
        let cfg = VerbsConfig {
            template: Template::Storage,
            data_qps: Some(3),
            sq_depth: Some(8),
            signal_every: Some(4),
            cq_depth: Some(8),
            ..VerbsConfig::default()
        };
        let (mut a, _b, _f) = pair(cfg, 1 << 20);
        // Far more puts than the queues hold: room is made by polling.
        for i in 0..2000u64 {
            a.put(1, (i * 4096) % (1 << 20), &[i as u8; 100], CTX)
                .unwrap();
        }
        quiet(&mut a).unwrap();
        let s = a.stats();
        assert!(
            s.signaled * 4 >= s.wrs - s.markers,
            "every 4th signaled: {s:?}"
        );
        assert!(s.signaled < s.wrs, "not every WR signaled: {s:?}");
        // Fence: a flag after the data, data on another QP's block.
        for i in 1..=50u8 {
            a.put(1, 0, &[i; 64], CTX).unwrap();
            a.fence().unwrap();
            a.put(1, 70_000, &[i], CTX).unwrap();
        }
        quiet(&mut a).unwrap();
        assert_eq!(get(&mut a, 1, 70_000, 1).unwrap(), [50]);
        assert_eq!(get(&mut a, 1, 0, 64).unwrap(), [50; 64]);
        assert!(a.stats().fence_waits > 0 || a.stats().markers > 0);
    }

    #[test]
    fn a_cut_link_fails_over_settles_once_and_rebuilds() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
        while a.poll_event().is_some() {}
        a.put(1, 0, b"before", CTX).unwrap();
        quiet(&mut a).unwrap();
        f.break_links();
        // Queued, then posted into a dead link by quiet.
        a.put(1, 100, b"lost in flight", CTX).unwrap();
        a.put(1, 200, b"second", CTX).unwrap();
        let e = quiet(&mut a).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PeerDown);
        assert_eq!(a.state(1), LinkState::Error);
        assert_eq!(
            a.poll_event(),
            Some(Event::Link {
                peer: 1,
                state: LinkState::Error
            })
        );
        assert_eq!(
            a.poll_event(),
            Some(Event::RebuildNeeded {
                peer: 1,
                generation: 1
            })
        );
        // New operations are refused at once (select moves to TCP).
        assert_eq!(
            a.put(1, 0, b"x", CTX).unwrap_err().kind(),
            ErrorKind::PeerDown
        );
        // Nothing is replayed before the target's receipts are in.
        a.drain_replays(|r| panic!("replayed before the receipts: {r:?}"));
        assert_eq!(handshake(&mut a, &mut b, 0, 1), 0, "nothing landed");
        // Each in-doubt put is offered for replay exactly once.
        let mut replays = Vec::new();
        a.drain_replays(|r| {
            if let Replay::Put {
                offset, bytes, seq, ..
            } = r
            {
                replays.push((seq, offset, bytes.to_vec()));
            }
        });
        assert_eq!(
            replays
                .iter()
                .map(|r| (r.1, r.2.clone()))
                .collect::<Vec<_>>(),
            [(100, b"lost in flight".to_vec()), (200, b"second".to_vec())]
        );
        assert!(replays[0].0 < replays[1].0, "in sequence order");
        a.drain_replays(|_| panic!("replayed twice"));
        assert_eq!(a.stats().replays, 2);
        // Rebuild both sides to generation 1, same QPNs, new PSNs.
        f.heal();
        let qpn = a.card_for(1).unwrap().qps()[0].qpn;
        assert_eq!(b.state(0), LinkState::Error, "b was told");
        a.rebuild(1, 1).unwrap();
        assert!(
            matches!(
                a.poll_event(),
                Some(Event::Receipts {
                    peer: 1,
                    generation: 1,
                    ..
                })
            ),
            "a collected its receipts of b's puts first"
        );
        assert_eq!(
            a.poll_event(),
            Some(Event::Rebuilt {
                peer: 1,
                generation: 1
            })
        );
        assert_eq!(
            a.put(1, 0, b"x", CTX).unwrap_err().kind(),
            ErrorKind::PeerDown,
            "until the peer confirms"
        );
        b.drain_replays(|_| {});
        b.rebuild(0, 1).unwrap();
        a.peer_rebuilt(1, 1).unwrap();
        b.peer_rebuilt(0, 1).unwrap();
        assert_eq!(
            a.card_for(1).unwrap().qps()[0].qpn,
            qpn,
            "rebuilt, not re-created"
        );
        a.put(1, 300, b"after", CTX).unwrap();
        quiet(&mut a).unwrap();
        assert_eq!(get(&mut a, 1, 300, 5).unwrap(), b"after");
        assert_eq!(get(&mut a, 1, 0, 6).unwrap(), b"before");
        assert_eq!(a.stats().rebuilds, 1);
        assert!(a.rebuild(1, 1).is_err(), "generations only go up");
        assert!(a.rebuild(1, 2).is_err(), "a working link is not reset");
    }

    /// A remote access error (a wrong rkey in the card) is an error
    /// completion like any other: the peer goes to Error, the put is
    /// offered for replay, nothing is written.
    #[test]
    fn a_remote_access_error_fails_the_link_over() {
        let f = Fabric::new();
        let cfg = VerbsConfig::default;
        let mut a = VerbsDriver::fake_with_owned_heap(cfg(), 0, 2, 7, 4096, &f).unwrap();
        let mut b = VerbsDriver::fake_with_owned_heap(cfg(), 1, 2, 7, 4096, &f).unwrap();
        let mut card = b.card_for(0).unwrap();
        card.rkey ^= 0x40;
        a.set_peer_card(1, card).unwrap();
        b.set_peer_card(0, a.card_for(1).unwrap()).unwrap();
        b.connect(0).unwrap();
        a.connect(1).unwrap();
        a.put(1, 8, b"denied", CTX).unwrap();
        assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
        assert_eq!(a.state(1), LinkState::Error);
        assert_eq!(a.stats().completion_errors, 1);
        assert_eq!(handshake(&mut a, &mut b, 0, 1), 0, "nothing landed");
        let mut n = 0;
        a.drain_replays(|r| {
            assert!(matches!(
                r,
                Replay::Put {
                    offset: 8,
                    bytes: b"denied",
                    ..
                }
            ));
            n += 1;
        });
        assert_eq!(n, 1);
        assert_eq!(get(&mut b, 1, 8, 6).unwrap(), [0; 6], "nothing written");
    }

    #[test]
    fn atomics_in_flight_at_a_cut_are_never_retried_blindly() {
        let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 16);
        f.break_links();
        let op = AtomicOp {
            kind: AtomicKind::FetchAdd,
            width: AtomicWidth::W64,
            operand: 1,
            compare: 0,
        };
        // Posted at once (signaled): it reached the device, so its outcome
        // is unknown.
        let t = a.atomic_start(1, 64, op, CTX).unwrap();
        let e = loop {
            match a.atomic_poll(&t) {
                Ok(None) => {}
                Ok(Some(v)) => panic!("completed with {v}"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                e,
                VerbsError::OutcomeUnknown {
                    peer: 1,
                    offset: 64
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.kind(),
            ErrorKind::Fatal,
            "not PeerDown: the shim must not retry it"
        );
        assert_eq!(a.stats().outcome_unknown, 1);
        // A get in flight fails with PeerDown (retrying a read is safe).
        assert_eq!(
            a.get_start(1, 0, 8, CTX).unwrap_err().kind(),
            ErrorKind::PeerDown
        );
    }

    #[test]
    fn a_get_straddling_two_blocks_sees_earlier_puts_to_both() {
        let cfg = VerbsConfig {
            data_qps: Some(2),
            ..VerbsConfig::default()
        };
        let (mut a, _b, _f) = pair(cfg, 1 << 20);
        // Bytes 65530..65542 straddle blocks 0 and 1 (data QPs 1 and 2).
        a.put(1, 65_530, &[1; 6], CTX).unwrap();
        a.put(1, BLOCK, &[2; 6], CTX).unwrap();
        let got = get(&mut a, 1, 65_530, 12).unwrap();
        assert_eq!(got, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
    }

    #[test]
    fn progress_rings_the_doorbell_for_left_batches() {
        let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 16);
        let before = f.posts();
        a.put(1, 0, b"batched", CTX).unwrap();
        assert_eq!(a.progress(Instant::default()), PollResult::Busy);
        assert_eq!(f.posts(), before + 1);
        assert_eq!(a.progress(Instant::default()), PollResult::Idle);
        assert_eq!(f.posts(), before + 1, "nothing left to post");
        quiet(&mut a).unwrap();
        assert_eq!(get(&mut a, 1, 0, 7).unwrap(), b"batched");
    }

    #[test]
    fn post_batches_posts_every_left_batch_once_and_only_those() {
        let cfg = VerbsConfig {
            data_qps: Some(2),
            ..VerbsConfig::default()
        };
        let (mut a, _b, f) = pair(cfg, 1 << 18);
        assert!(!a.post_batches(), "nothing batched");
        let before = f.posts();
        // Two blocks (two data QPs), twice each: two batches.
        for off in [0u64, 8, 1 << 16, (1 << 16) + 8] {
            a.put(1, off, b"left", CTX).unwrap();
        }
        assert_eq!(f.posts(), before, "batched, not posted yet");
        assert!(a.post_batches());
        assert_eq!(f.posts(), before + 2, "one doorbell per QP");
        assert!(!a.post_batches(), "the list is empty again");
        assert_eq!(f.posts(), before + 2);
        // A batch posted by quiet leaves a stale entry: skipped, not posted.
        a.put(1, 16, b"again", CTX).unwrap();
        quiet(&mut a).unwrap();
        let after_quiet = f.posts();
        assert!(!a.post_batches());
        assert_eq!(f.posts(), after_quiet);
        for off in [0u64, 8, 1 << 16, (1 << 16) + 8] {
            assert_eq!(get(&mut a, 1, off, 4).unwrap(), b"left");
        }
    }

    #[test]
    fn the_qpn_table_finds_every_data_qp() {
        use crate::recv::{qpn_lookup, qpn_table};
        let entries: Vec<(u32, u32)> = (0..300u32)
            .map(|i| ((i * 7919 + 0x11) & 0xFF_FFFF, i << 8 | (i % 8 + 1)))
            .collect();
        let t = qpn_table(&entries);
        assert!(t.len() >= 2 * entries.len());
        for &(qpn, tag) in &entries {
            assert_eq!(qpn_lookup(&t, qpn), Some(tag));
        }
        assert_eq!(qpn_lookup(&t, 0), None);
        assert_eq!(qpn_lookup(&t, 0xFF_FFFF), None);
    }

    /// Replays drained, as (offset, bytes).
    type Replayed = Vec<(u64, Vec<u8>)>;

    /// Data, fence, flag, with the link failing as `fail` sets up; the
    /// target rewrites the data if the flag landed; then the receipts
    /// handshake and the replays (applied by hand, in order). Returns (puts
    /// known landed, the replays, the target's data afterwards).
    fn data_fence_flag(fail: impl FnOnce(&Fabric)) -> (u64, Replayed, Vec<u8>) {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 17);
        while a.poll_event().is_some() {}
        fail(&f);
        a.put(1, 0, b"data", CTX).unwrap();
        a.fence().unwrap();
        a.put(1, 70_000, b"F", CTX).unwrap();
        assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
        assert_eq!(a.state(1), LinkState::Error);
        a.drain_replays(|r| panic!("replayed before the receipts: {r:?}"));
        // The target acts on what landed: it sees the flag, rewrites the
        // data (as a program waiting on the flag would).
        let landed_flag = get(&mut b, 1, 70_000, 1).unwrap() == b"F";
        if landed_flag {
            b.put(1, 0, b"next", CTX).unwrap();
        }
        let landed = handshake(&mut a, &mut b, 0, 1);
        let mut replays = Vec::new();
        a.drain_replays(|r| match r {
            Replay::Put { offset, bytes, .. } => replays.push((offset, bytes.to_vec())),
            r => panic!("unexpected {r:?}"),
        });
        a.drain_replays(|r| panic!("replayed twice: {r:?}"));
        // Replays go over TCP in the shim; here by hand, in order.
        for (offset, bytes) in &replays {
            b.put(1, *offset, bytes, CTX).unwrap();
        }
        (landed, replays, get(&mut b, 1, 0, 4).unwrap())
    }

    #[test]
    fn an_ack_lost_after_the_flag_landed_replays_nothing() {
        // The data and the flag land; the flag's ack is lost.
        let (landed, replays, data) = data_fence_flag(|f| f.lose_ack_after(1));
        assert_eq!(landed, 2, "both puts are known landed");
        assert!(replays.is_empty(), "nothing replayed: {replays:?}");
        assert_eq!(data, b"next", "the target's newer data is not overwritten");
    }

    #[test]
    fn an_ack_lost_after_the_data_landed_replays_the_flag_only() {
        let (landed, replays, data) = data_fence_flag(|f| f.lose_ack_after(0));
        assert_eq!(landed, 1);
        assert_eq!(replays, [(70_000, b"F".to_vec())]);
        assert_eq!(data, b"data");
    }

    #[test]
    fn a_cut_before_landing_replays_everything_once_in_order() {
        let (landed, replays, data) = data_fence_flag(Fabric::break_links);
        assert_eq!(landed, 0);
        assert_eq!(
            replays,
            [(0, b"data".to_vec()), (70_000, b"F".to_vec())],
            "once each, data before flag"
        );
        assert_eq!(data, b"data");
    }

    #[test]
    fn receipts_advance_and_the_srq_keeps_up_with_more_puts_than_it_holds() {
        let cfg = VerbsConfig {
            data_qps: Some(2),
            srq_depth: Some(16),
            ..VerbsConfig::default()
        };
        let (mut a, mut b, f) = pair(cfg, 1 << 20);
        // More puts than the SRQ holds, the target progressing only now
        // and then: senders wait on RNR, nothing fails.
        const PUTS: u64 = 200;
        let at = |i: u64| (i * 4096) % (4 * BLOCK);
        let mut dry = 0;
        for i in 0..PUTS {
            loop {
                match a.put(1, at(i), &i.to_le_bytes(), CTX) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        b.progress(Instant::default());
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            a.progress(Instant::default());
            if i % 40 == 39 {
                dry += usize::from(f.rnr_waiting() > 0);
                b.progress(Instant::default());
            }
        }
        assert!(dry > 0, "the SRQ ran dry at times: puts waited");
        for _ in 0..10_000 {
            b.progress(Instant::default());
            if a.quiet_poll().unwrap() {
                break;
            }
        }
        assert!(a.quiet_poll().unwrap(), "quiet once the target re-posted");
        assert_eq!(a.state(1), LinkState::Up);
        assert!(f.rnr_naks() > 0);
        let s = b.stats();
        assert_eq!(s.receipts, PUTS, "one receipt per put: {s:?}");
        assert!(s.recv_reposts >= PUTS - 16, "{s:?}");
        for i in PUTS - 16..PUTS {
            assert_eq!(get(&mut a, 1, at(i), 8).unwrap(), i.to_le_bytes());
        }
        // The receipts, as reported after a failure: per data QP, the
        // count of puts on it (blocks alternate between the two).
        f.break_links();
        a.put(1, 0, b"x", CTX).unwrap();
        let _ = quiet(&mut a);
        b.peer_failed(0).unwrap();
        let mut got = None;
        for _ in 0..100 {
            b.progress(Instant::default());
            got = b.receipts(0);
            if got.is_some() {
                break;
            }
        }
        let (generation, r) = got.expect("receipts");
        assert_eq!(generation, 1);
        assert_eq!(r.as_slice().iter().sum::<u64>(), PUTS);
        assert_eq!(r.as_slice().len(), 2);
        // Bad receipts are refused, naming why; nothing is settled.
        for (g, applied) in [(2, vec![0, 0]), (1, vec![0]), (1, vec![0, 1 << 20])] {
            assert!(matches!(
                a.settle_receipts(1, g, &applied),
                Err(VerbsError::BadReceipts { peer: 1, .. })
            ));
        }
        assert!(a.awaits_receipts(1));
        assert_eq!(a.settle_receipts(1, 1, r.as_slice()).unwrap(), 0);
        let mut n = 0;
        a.drain_replays(|_| n += 1);
        assert_eq!(n, 1, "the put after the cut");
    }

    /// The target's owner never progresses; a second thread polls its
    /// receive side: the puts (far more than the SRQ holds) complete.
    #[test]
    fn another_thread_can_keep_the_receive_side_going() {
        let cfg = VerbsConfig {
            srq_depth: Some(16),
            ..VerbsConfig::default()
        };
        let (mut a, b, f) = pair(cfg, 1 << 16);
        let r = b.recv_side().expect("open");
        let stop = switchyard_core::sync::atomic::AtomicBool::new(false);
        /// Stops the poller also when the test panics (else the scope
        /// would wait for it forever).
        struct Stop<'a>(&'a switchyard_core::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0
                    .store(true, switchyard_core::sync::atomic::Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(switchyard_core::sync::atomic::Ordering::Relaxed) {
                    if r.poll() == PollResult::Idle {
                        std::thread::yield_now();
                    }
                }
            });
            let _stop = Stop(&stop);
            let t0 = std::time::Instant::now();
            let bound = std::time::Duration::from_secs(60);
            for i in 0..500u64 {
                loop {
                    match a.put(1, (i % 512) * 8, &i.to_le_bytes(), CTX) {
                        Ok(()) => break,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            assert!(t0.elapsed() < bound, "put {i} never had room");
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            while !a.quiet_poll().unwrap() {
                assert!(t0.elapsed() < bound, "quiet");
                std::thread::yield_now();
            }
        });
        assert!(f.rnr_naks() > 0, "the SRQ ran dry at times");
        while r.poll() == PollResult::Busy {}
        assert_eq!(b.stats().receipts, 500);
        assert_eq!(r.receipts(), 500);
        assert_eq!(get(&mut a, 1, 499 * 8, 8).unwrap(), 499u64.to_le_bytes());
        drop(b);
        assert_eq!(
            r.poll(),
            PollResult::Idle,
            "a closed driver's receive side is empty"
        );
    }

    /// Without the peer's receipts (dead, or no answer in time) the puts
    /// in doubt are counted and dropped, never replayed blindly; a get in
    /// the same failure is still replayed, and the link rebuilds.
    #[test]
    fn abandoned_receipts_drop_the_puts_in_doubt_and_count_them() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
        while a.poll_event().is_some() {}
        f.break_links();
        a.put(1, 0, b"one", CTX).unwrap();
        a.put(1, 8, b"two", CTX).unwrap();
        a.get_into_heap(1, 0, 100, 3, CTX).unwrap();
        assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
        assert!(a.awaits_receipts(1));
        assert_eq!(
            a.rebuild(1, 1).unwrap_err().kind(),
            ErrorKind::PeerDown,
            "not while the receipts are pending"
        );
        assert_eq!(a.abandon_receipts(1), 2);
        assert_eq!(a.abandon_receipts(1), 0, "once");
        assert!(!a.awaits_receipts(1));
        assert_eq!(
            a.settle_receipts(1, 1, &[0]).unwrap(),
            0,
            "late receipts find nothing waiting"
        );
        let mut got = Vec::new();
        a.drain_replays(|r| got.push(r.to_owned_kind()));
        assert_eq!(got, ["get"]);
        assert_eq!(a.stats().receipts_abandoned, 2);
        f.heal();
        b.peer_failed(0).unwrap();
        a.rebuild(1, 1).unwrap();
        b.rebuild(0, 1).unwrap();
        a.peer_rebuilt(1, 1).unwrap();
        b.peer_rebuilt(0, 1).unwrap();
        a.put(1, 16, b"after", CTX).unwrap();
        quiet(&mut a).unwrap();
        for _ in 0..100 {
            b.progress(Instant::default());
        }
        assert_eq!(get(&mut a, 1, 16, 5).unwrap(), b"after");
        assert_eq!(b.stats().receipts, 1, "receipts count from 1 again");
    }

    impl Replay<'_> {
        fn to_owned_kind(self) -> &'static str {
            match self {
                Replay::Put { .. } | Replay::PutFromHeap { .. } => "put",
                Replay::GetIntoHeap { .. } => "get",
                Replay::Atomic { .. } => "atomic",
            }
        }
    }

    /// A post refused in the middle of a put (its pieces' batch fills and
    /// the doorbell fails) fails the link; the put's later pieces must
    /// not be queued on the failed QP (neither done nor replayed): every
    /// piece is replayed once, and nothing stays outstanding.
    #[test]
    fn a_post_refused_mid_put_replays_every_piece() {
        const PIECES: u64 = BATCH as u64 + 3;
        let cfg = VerbsConfig {
            data_qps: Some(1),
            ..VerbsConfig::default()
        };
        let (mut a, _b, f) = pair(cfg, 4 << 20);
        f.fail_post_after(0);
        a.put_from_heap(1, 0, 2 << 20, (PIECES * BLOCK) as u32, CTX)
            .unwrap();
        a.progress(Instant::default());
        assert_eq!(a.state(1), LinkState::Error);
        assert!(!a.awaits_receipts(1), "no piece reached the device");
        let mut got = Vec::new();
        a.drain_replays(|r| {
            if let Replay::PutFromHeap {
                offset,
                local_offset,
                len,
                ..
            } = r
            {
                got.push((offset, local_offset, len));
            }
        });
        let want: Vec<(u64, u64, u32)> = (0..PIECES)
            .map(|i| (i * BLOCK, (2 << 20) + i * BLOCK, BLOCK as u32))
            .collect();
        assert_eq!(got, want, "every piece replayed once, in order");
        for _ in 0..100 {
            a.progress(Instant::default());
        }
        assert!(
            a.peers[1]
                .as_ref()
                .unwrap()
                .qps
                .iter()
                .all(|q| q.outstanding() == 0),
            "work left on the failed QPs"
        );
    }

    /// Pieces of a put that found no room in the replay list are lost:
    /// the next `quiet_poll` reports them once as `ReplayLost` (not
    /// `PeerDown`, which means "replays pending" and is retried); the kept
    /// pieces are still replayed.
    #[test]
    fn operations_with_no_room_to_replay_are_reported_lost() {
        const PIECES: u64 = 5;
        let cfg = VerbsConfig {
            data_qps: Some(1),
            ..VerbsConfig::default()
        };
        let (mut a, _b, f) = pair(cfg, 4 << 20);
        a.fake_limit_replays(1, 2);
        f.fail_post_after(0);
        a.put_from_heap(1, 0, 2 << 20, (PIECES * BLOCK) as u32, CTX)
            .unwrap();
        a.progress(Instant::default());
        assert_eq!(a.state(1), LinkState::Error);
        match a.quiet_poll() {
            Err(VerbsError::ReplayLost { peer: 1, ops: 3 }) => {}
            r => panic!("three pieces lost, not reported: {r:?}"),
        }
        assert!(matches!(
            a.quiet_poll(),
            Err(VerbsError::PeerDown { peer: 1 })
        ));
        let mut kept = 0;
        a.drain_replays(|_| kept += 1);
        assert_eq!(kept, 2);
        assert!(quiet(&mut a).is_ok(), "reported once");
    }

    /// After the device died, operations lost at the failure are still
    /// reported before `DeviceFatal`.
    #[test]
    fn operations_lost_at_a_device_failure_are_reported() {
        let (mut a, _b, _f) = pair(VerbsConfig::default(), 4 << 20);
        a.fake_limit_replays(1, 0);
        a.put(1, 0, &[7; 64], CTX).unwrap();
        a.fake_device_fatal();
        for _ in 0..2 * ASYNC_EVERY {
            a.progress(Instant::default());
        }
        match a.quiet_poll() {
            Err(VerbsError::ReplayLost { peer: 1, ops }) if ops >= 1 => {}
            r => panic!("the lost put was not reported: {r:?}"),
        }
        assert!(matches!(a.quiet_poll(), Err(VerbsError::DeviceFatal)));
    }

    /// Other peers keep the receive CQ full while a failed link's
    /// receipts are collected: the drain stops after as many completions
    /// as the CQ holds (all of the failed link's are among them), and the
    /// answer is still right.
    #[test]
    fn the_receipts_drain_is_bounded_when_other_peers_keep_sending() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
        a.put(1, 0, &[1; 64], CTX).unwrap();
        quiet(&mut a).unwrap();
        b.progress(Instant::default());
        let srq = b.params().srq_depth as u64;
        f.flood_receives(1 << 20);
        b.peer_failed(0).unwrap();
        for _ in 0..3 {
            b.progress(Instant::default());
        }
        let (g, r) = b.receipts(0).expect("answered");
        assert_eq!((g, r.as_slice()), (1, &[1u64][..]));
        assert!(
            f.flooded() <= srq + 4 * POLL_BATCH as u64,
            "the drain took {} completions (CQ of {srq})",
            f.flooded()
        );
        f.flood_receives(0);
    }

    /// A collection given up leaves old completions in the receive CQ; the
    /// rebuild takes them before the receipts count from 0 again, so they
    /// never count against the new generation.
    #[test]
    fn a_rebuild_after_a_withheld_collection_starts_the_receipts_from_zero() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
        for i in 0..100u64 {
            a.put(1, i * 64, &[1; 64], CTX).unwrap();
        }
        quiet(&mut a).unwrap();
        f.suppress_last_wqe(true);
        b.peer_failed(0).unwrap();
        b.progress(ms(0));
        b.progress(ms(1000));
        assert_eq!(b.stats().receipts_withheld, 1);
        f.suppress_last_wqe(false);
        b.rebuild(0, 1).unwrap();
        for _ in 0..10 {
            b.progress(ms(1001));
        }
        let mut seen = [0u64; 1];
        let range = b.seen_range(0);
        b.recv.as_ref().unwrap().drain_and_read(range, &mut seen);
        assert_eq!(seen, [0], "old receipts counted in the new generation");
    }

    /// The old link's `LAST_WQE_REACHED` arrives late, after the rebuild
    /// (its collection was given up): it is ignored, so the next failure
    /// still waits for its own event (here withheld too) instead of
    /// answering at once with receipts that may be too low.
    #[test]
    fn a_late_last_wqe_of_the_old_link_does_not_end_the_next_collection() {
        let (_a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
        f.suppress_last_wqe(true);
        b.peer_failed(0).unwrap();
        b.progress(ms(0));
        b.progress(ms(1000));
        assert_eq!(b.stats().receipts_withheld, 1);
        b.rebuild(0, 1).unwrap();
        f.release_last_wqe();
        for _ in 0..2 * ASYNC_EVERY {
            b.progress(ms(1001));
        }
        b.peer_failed(0).unwrap();
        b.progress(ms(2000));
        assert!(
            b.receipts(0).is_none(),
            "answered on the old link's event, before its own"
        );
        b.progress(ms(3000));
        assert_eq!(b.stats().receipts_withheld, 2);
        assert!(b.receipts(0).is_none());
        assert!(b.stats().stale_async_events >= 1);
    }

    /// A QP-fatal event of the old link still queued at the rebuild is
    /// read before it (the link is in Error: nothing happens), not after,
    /// where it would fail the rebuilt link.
    #[test]
    fn a_late_qp_fatal_event_does_not_fail_the_rebuilt_link() {
        let (_a, mut b, _f) = pair(VerbsConfig::default(), 1 << 20);
        b.peer_failed(0).unwrap();
        for _ in 0..10 {
            b.progress(ms(0));
        }
        assert!(b.receipts(0).is_some());
        b.cq.as_ref()
            .unwrap()
            .fake_push_qp_event(sys::event::QP_FATAL, Some(1));
        b.rebuild(0, 1).unwrap();
        for _ in 0..2 * ASYNC_EVERY {
            b.progress(ms(1));
        }
        assert_eq!(b.state(0), LinkState::Down, "the rebuilt link failed");
        assert_eq!(b.stats().peer_failures, 1);
    }

    fn ms(m: u64) -> Instant {
        Instant::from_nanos(m * 1_000_000)
    }

    fn events(d: &mut VerbsDriver) -> Vec<Event> {
        std::iter::from_fn(|| d.poll_event()).collect()
    }

    /// The target never hears `LAST_WQE_REACHED` (a provider without it, a
    /// dead device): it keeps collecting until the deadline on the
    /// `progress` clock, then gives up *without answering*, counts it,
    /// reports `ReceiptsWithheld`, stops reading async events on every
    /// step, and lets the rebuild go ahead.
    #[test]
    fn a_missing_last_wqe_ends_the_collection_at_its_deadline_unanswered() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
        a.put(1, 0, &[1; 64], CTX).unwrap();
        quiet(&mut a).unwrap();
        b.progress(ms(0));
        f.suppress_last_wqe(true);
        b.peer_failed(0).unwrap();
        let _ = events(&mut b);
        for t in 1..300 {
            b.progress(ms(t));
        }
        assert!(b.receipts(0).is_none());
        assert!(
            matches!(b.rebuild(0, 1), Err(VerbsError::PeerDown { peer: 0 })),
            "still collecting before the deadline"
        );
        b.progress(ms(301));
        assert!(b.receipts(0).is_none(), "an answer without the event");
        assert_eq!(
            events(&mut b),
            vec![Event::ReceiptsWithheld {
                peer: 0,
                generation: 1,
                reason: Withheld::NoLastWqe { qp: 1 },
            }]
        );
        assert_eq!(b.stats().receipts_withheld, 1);
        assert_eq!(b.collecting, 0, "async events read on every step");
        f.suppress_last_wqe(false);
        b.rebuild(0, 1).expect("the rebuild goes ahead");
    }

    /// A data QP that cannot be moved to ERROR may still take the peer's
    /// puts: the target does not collect (nor answer) at all.
    #[test]
    fn a_refused_modify_to_error_withholds_the_receipts() {
        let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
        a.put(1, 0, &[1; 64], CTX).unwrap();
        quiet(&mut a).unwrap();
        b.progress(ms(0));
        f.refuse_error_state(true);
        b.peer_failed(0).unwrap();
        f.refuse_error_state(false);
        for t in 0..10 {
            b.progress(ms(t));
        }
        assert!(b.receipts(0).is_none(), "an answer it cannot trust");
        let ev = events(&mut b);
        assert!(
            ev.contains(&Event::ReceiptsWithheld {
                peer: 0,
                generation: 1,
                reason: Withheld::ModifyFailed { qp: 1 },
            }),
            "{ev:?}"
        );
        assert!(!ev.iter().any(|e| matches!(e, Event::Receipts { .. })));
        assert_eq!(b.stats().receipts_withheld, 1);
        assert_eq!(b.collecting, 0);
        b.rebuild(0, 1).expect("the rebuild goes ahead");
    }

    /// A device failure with many peers up reports every peer's link
    /// failure: the shim holds a peer's newer operations (and asks for its
    /// receipts) only on that event, so none may be dropped from the
    /// event ring.
    #[test]
    fn a_device_failure_reports_every_peer_however_many() {
        const N: u32 = 140;
        let cfg = VerbsConfig {
            data_qps: Some(1),
            sq_depth: Some(16),
            srq_depth: Some(16),
            staging_bytes: 4096,
            ..VerbsConfig::default()
        };
        let f = Fabric::new();
        let mut a = VerbsDriver::fake_with_owned_heap(cfg.clone(), 0, N, 7, 1 << 16, &f).unwrap();
        let b = VerbsDriver::fake_with_owned_heap(cfg, 1, 2, 7, 1 << 16, &f).unwrap();
        // Every peer's QPs point at b's (the fake checks nothing more for
        // a link without traffic).
        let card = b.card_for(0).unwrap();
        for peer in 1..N {
            a.set_peer_card(peer, card).unwrap();
            a.connect(peer).unwrap();
        }
        while a.poll_event().is_some() {}
        a.fake_device_fatal();
        for _ in 0..2 * ASYNC_EVERY {
            a.progress(Instant::default());
        }
        let mut failed = vec![false; N as usize];
        while let Some(e) = a.poll_event() {
            if let Event::Link {
                peer,
                state: LinkState::Error,
            } = e
            {
                failed[peer as usize] = true;
            }
        }
        let missing: Vec<u32> = (1..N).filter(|&p| !failed[p as usize]).collect();
        assert!(
            missing.is_empty(),
            "link failures not reported: {missing:?}"
        );
    }

    #[test]
    fn close_releases_everything_once() {
        let (mut a, _b, _f) = pair(VerbsConfig::default(), 4096);
        a.close().unwrap();
        a.close().unwrap();
        assert_eq!(a.state(1), LinkState::Down);
        assert!(a.put(1, 0, &[1], CTX).is_err());
        assert!(a.quiet_poll().is_err());
        assert_eq!(a.progress(Instant::default()), PollResult::Idle);
    }
}
