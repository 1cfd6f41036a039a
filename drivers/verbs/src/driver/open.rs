//! Resources: [`VerbsDriver::new`] (on a device) and
//! `VerbsDriver::new_fake` (on the fake HCA) open everything the driver
//! owns (protection domain, the heap's and the scratch's memory regions,
//! one CQ, the shared receive queue with its receive CQ, and per peer a
//! control QP and the data QPs, with every table, ring and work-request
//! array sized once, so that the data path never allocates); `close`
//! releases them in the order libibverbs needs. A driver created with lazy
//! peers ([`VerbsConfig::lazy_peers`]) creates no QP at first: its pools
//! (staging, CQ, receipts, events, peer table) are sized for that many
//! peers, and [`VerbsDriver::add_peer`] creates one peer's QPs in the next
//! slot (control path).

use std::sync::Arc;

use switchyard_core::transport::{Instant, LinkState};

use super::{
    BATCH, BLOCK, EMPTY, FREE_TICKET, FreeList, Load, MAX_PES, Peer, QpSlot, SET_TAG, VerbsDriver,
    Wqe,
};
use crate::{
    Result, VerbsError, VerbsStats,
    card::LinkLayer,
    params::{DeviceLimits, Mtu, VerbsConfig, derive},
    probe,
    qp_plan::QpState,
    recv::RecvSide,
    seq::SettleWindow,
    sets::SetBudget,
    signal::{CqCredits, SendQueue},
    stage::StageRing,
    sys::{self, POLL_BATCH, Sge, access},
};

/// Events kept until polled, at least (more with many peers: `assemble`).
const EVENT_RING: usize = 256;
/// Smallest staging ring per QP (two blocks).
const MIN_STAGE: u64 = 2 * BLOCK;

impl VerbsDriver {
    /// Opens the device, registers `heap` and creates one CQ and the QPs
    /// toward every other PE (in RESET until
    /// [`Transport::connect`](switchyard_core::transport::Transport::connect)).
    ///
    /// # Safety
    ///
    /// `heap` must be valid for reads and writes of `heap_len` bytes, 8-byte
    /// aligned, and stay mapped until the driver and every QP set opened
    /// from it ([`VerbsDriver::open_set`]) are closed or dropped; the
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
                (heap, heap_len),
                &limits,
                addr,
                &sys::Backend::Real(&ctx, &pd),
                Shape::Pe,
            )
        }?;
        drv.pd = Some(Arc::new(pd));
        drv.ctx = Some(Arc::new(ctx));
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
        let mut drv = unsafe {
            VerbsDriver::assemble(
                cfg,
                (me, n_pes, seed),
                (heap, heap_len),
                &limits,
                addr,
                &sys::Backend::Fake(fabric),
                Shape::Pe,
            )
        }?;
        drv.fabric = Some(fabric.clone());
        Ok(drv)
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
        d.owned_heap = Some(Arc::new(heap));
        Ok(d)
    }

    /// Opens a *QP set* toward `peer` ([`crate::sets`]): a driver of its
    /// own (control and data QPs toward `peer` only, its own CQ, shared
    /// receive queue, staging, tickets, events and link state) on this
    /// driver's device context, protection domain and heap registration
    /// (its cards carry the same `rkey`). The peer opens the matching set
    /// toward this PE with the same `seed` (its PSNs on rebuilds); the two
    /// exchange [`VerbsDriver::card_for`] and connect as PE drivers do.
    /// The set counts one unit of `budget` until it is closed or dropped.
    /// Its memory: staging of the PE driver's size per QP (`data_qps + 1`
    /// QPs), and its own get buffers and atomic results
    /// (`get_slots × (get_slot_bytes + 8)`), registered as one scratch.
    ///
    /// Nothing of the set is shared with this driver on the data path: its
    /// owner posts, polls and quiets it through `&mut`, without a lock;
    /// failures, receipts, replays and rebuilds are the set's own. The
    /// device's async events are read by this driver only (one event queue
    /// per device): it leaves those of a set's QPs (fatal, last WQE
    /// reached) and those of the port and the device in the set's mailbox
    /// in `budget` ([`crate::sets`]), which the set reads at its own
    /// async-event checks; while a set collects its receipts after a
    /// failure, this driver reads the device's events at every progress
    /// step. So this driver must progress for a set to collect its
    /// receipts: otherwise the set gives up at the collection deadline and
    /// withholds them ([`Event::ReceiptsWithheld`](crate::Event::ReceiptsWithheld)),
    /// and the peer reports its puts in doubt lost rather than risk
    /// applying one twice. Every set of a PE uses the same budget.
    ///
    /// # Errors
    ///
    /// [`VerbsError::NoSetLeft`] when `budget` is spent;
    /// [`VerbsError::Config`] for a budget other than the one of this
    /// PE's first set;
    /// [`VerbsError::InvalidPe`] for a PE this driver has no QPs toward;
    /// [`VerbsError::Closed`] once closed; as [`VerbsDriver::new`] when a
    /// resource cannot be created.
    pub fn open_set(&self, peer: u32, seed: u64, budget: &SetBudget) -> Result<VerbsDriver> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        self.peer_ref(peer)?;
        let heap_mr = self
            .heap_mr
            .clone()
            .ok_or(VerbsError::Closed { peer: Some(peer) })?;
        // One budget per PE: the PE's driver forwards the device's events
        // of a set's QPs to its mailbox there.
        let mine = match &self.lease {
            Some((b, _)) => b,
            None => self.sets.get_or_init(|| budget.clone()),
        };
        if !mine.same(budget) {
            return Err(VerbsError::Config(crate::params::ParamError {
                field: "set budget",
                value: "another SetBudget".into(),
                expected: "the SetBudget of this PE's first open_set".into(),
            }));
        }
        let Some(slot) = budget.take() else {
            return Err(VerbsError::NoSetLeft {
                peer,
                max: budget.max(),
            });
        };
        let addr = PortAddr {
            port: self.port,
            link_layer: self.link_layer,
            lid: self.lid,
            gid: self.gid,
            gid_index: self.gid_index,
            mtu: self.port_mtu,
        };
        let backend = match (&self.ctx, &self.pd) {
            (Some(c), Some(p)) => Some(sys::Backend::Real(c, p)),
            #[cfg(any(test, feature = "fake-hca"))]
            _ => self.fabric.as_ref().map(sys::Backend::Fake),
            #[cfg(not(any(test, feature = "fake-hca")))]
            _ => None,
        };
        let Some(backend) = backend else {
            budget.give_back(slot);
            return Err(VerbsError::Closed { peer: Some(peer) });
        };
        // SAFETY: the heap is this driver's, registered by it (`heap_mr`,
        // kept alive by the set's clone); an owned heap is kept alive by
        // the set's clone of it, a caller's by `new`'s contract (mapped
        // until every set opened from the driver is closed or dropped).
        let made = unsafe {
            VerbsDriver::assemble(
                self.cfg.clone(),
                (self.me, self.n_pes, seed),
                (self.heap, self.heap_len),
                &self.limits,
                addr,
                &backend,
                Shape::Set {
                    peer,
                    heap_mr,
                    stage_per_qp: self.stage_per_qp,
                    slot,
                },
            )
        };
        match made {
            Ok(mut d) => {
                d.owned_heap = self.owned_heap.clone();
                d.pd = self.pd.clone();
                d.ctx = self.ctx.clone();
                #[cfg(any(test, feature = "fake-hca"))]
                {
                    d.fabric = self.fabric.clone();
                }
                d.lease = Some((budget.clone(), slot));
                Ok(d)
            }
            Err(e) => {
                budget.give_back(slot);
                Err(e)
            }
        }
    }

    /// The peer of a QP set ([`VerbsDriver::open_set`]); `None` for a PE's
    /// driver.
    pub fn set_peer(&self) -> Option<u32> {
        self.set_peer
    }

    /// Creates the QPs toward `peer` in a driver created with lazy peers
    /// ([`VerbsConfig::lazy_peers`]): a control QP and `data_qps` data QPs
    /// on this driver's CQ and shared receive queue, in RESET (Down) until
    /// [`VerbsDriver::set_peer_card`] and
    /// [`Transport::connect`](switchyard_core::transport::Transport::connect),
    /// with the next slot of the staging pool, the receipts table and the
    /// peer table, all sized at creation (the CQ too: for every slot). So
    /// nothing grows on the data path; this call is the control path (it
    /// allocates the peer's send-queue records, batch and replay list).
    /// Adding a peer that has QPs already (added before, or any peer of a
    /// driver created eagerly) does nothing: both sides may add each other
    /// at once.
    ///
    /// # Errors
    ///
    /// [`VerbsError::NoPeerLeft`] when the budget of lazily added peers is
    /// spent (counted in [`VerbsStats::peers_refused`]): keep the peer on
    /// the other transports; [`VerbsError::InvalidPe`] for this PE, one
    /// outside the job, or another than a QP set's peer;
    /// [`VerbsError::Closed`] once closed; [`VerbsError::Resource`] when a
    /// QP cannot be created (nothing is added then).
    pub fn add_peer(&mut self, peer: u32) -> Result<()> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        let n_pes = self.n_pes;
        if peer == self.me || peer >= n_pes || self.set_peer.is_some_and(|s| s != peer) {
            return Err(VerbsError::InvalidPe { peer, n_pes });
        }
        if self.peers.slot_of(peer).is_some() {
            return Ok(());
        }
        let slot = self.peers.len();
        if slot == self.peers.capacity() {
            self.stats.peers_refused += 1;
            return Err(VerbsError::NoPeerLeft {
                peer,
                max: self.peers.capacity() as u32,
            });
        }
        let backend = match (&self.ctx, &self.pd) {
            (Some(c), Some(p)) => Some(sys::Backend::Real(c, p)),
            #[cfg(any(test, feature = "fake-hca"))]
            _ => self.fabric.as_ref().map(sys::Backend::Fake),
            #[cfg(not(any(test, feature = "fake-hca")))]
            _ => None,
        };
        let closed = || VerbsError::Closed { peer: Some(peer) };
        let (Some(backend), Some(cq), Some(recv)) = (backend, self.cq.as_ref(), self.recv.as_ref())
        else {
            return Err(closed());
        };
        let (p, stage_per_qp) = (self.p, self.stage_per_qp);
        let (made, qpns) = recv
            .with_srq(|srq| {
                new_peer(
                    &backend,
                    cq,
                    srq,
                    &p,
                    slot,
                    |qi| (peer as usize) << 8 | usize::from(qi),
                    stage_per_qp,
                )
            })
            .ok_or_else(closed)??;
        if !recv.add_qpns(&qpns) || self.peers.push(peer, made).is_err() {
            // Sized for every slot at creation: not expected.
            self.stats.peers_refused += 1;
            return Err(VerbsError::NoPeerLeft {
                peer,
                max: self.peers.capacity() as u32,
            });
        }
        self.stats.peers_added += 1;
        Ok(())
    }

    /// Peers this driver has QPs toward, and how many it may have: every
    /// other PE (or a set's one peer) for a driver created eagerly; those
    /// added so far and [`VerbsConfig::lazy_peers`] for a lazy one.
    pub fn peer_count(&self) -> (u32, u32) {
        (self.peers.len() as u32, self.peers.capacity() as u32)
    }

    /// Whether this driver was created with lazy peers
    /// ([`VerbsConfig::lazy_peers`]; never a QP set).
    pub fn lazy(&self) -> bool {
        self.cfg.lazy_peers.is_some() && self.set_peer.is_none()
    }

    /// `peer`'s slot in this driver's peer table: dense from 0, in the
    /// order the peers were created or added, stable for the driver's
    /// life, below [`VerbsDriver::peer_count`]'s second figure; `None` for
    /// a peer without QPs. No allocation: arithmetic for a driver created
    /// eagerly (PE order, this PE skipped), one hash probe for a lazy one.
    /// A caller may key its own per-peer state by it, O(peers) rather than
    /// O(PEs).
    #[inline]
    pub fn peer_slot(&self, peer: u32) -> Option<usize> {
        self.peers.slot_of(peer)
    }

    /// Whether this driver has QPs toward `peer` (created eagerly, or added
    /// by [`VerbsDriver::add_peer`]).
    pub fn has_peer(&self, peer: u32) -> bool {
        self.peers.slot_of(peer).is_some()
    }

    /// Heap bytes of the peer table (its capacity: slots, their PEs and the
    /// index), without what each peer's QPs hold (records, batches,
    /// replays): what a driver holds per PE of the job before any peer is
    /// added.
    pub fn peer_table_bytes(&self) -> usize {
        self.peers.heap_bytes()
    }

    /// Registers the heap and the scratch, creates the CQ and the QPs.
    ///
    /// # Safety
    ///
    /// As [`VerbsDriver::new`] for `heap`.
    unsafe fn assemble(
        cfg: VerbsConfig,
        (me, n_pes, seed): (u32, u32, u64),
        (heap, heap_len): (*mut u8, u64),
        limits: &DeviceLimits,
        addr: PortAddr,
        backend: &sys::Backend<'_>,
        shape: Shape,
    ) -> Result<VerbsDriver> {
        let p = derive(&cfg, limits)?;
        let (only, tag_bits, set_stage) = match &shape {
            Shape::Pe => (None, 0, None),
            Shape::Set {
                peer,
                stage_per_qp,
                slot,
                ..
            } => (
                Some(*peer),
                SET_TAG | (*slot as usize) << 8,
                Some(*stage_per_qp),
            ),
        };
        // A lazy driver: no peer now, room for `lazy_peers` added later.
        let lazy = cfg
            .lazy_peers
            .filter(|_| only.is_none())
            .map(|k| k.min(n_pes - 1).max(1));
        let n_peers = match (only, lazy) {
            (Some(_), _) => 1,
            (None, Some(k)) => u64::from(k),
            (None, None) => u64::from(n_pes - 1),
        };
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
        let heap_mr = match shape {
            // A set uses the PE's registration (one rkey for every set).
            Shape::Set { heap_mr, .. } => heap_mr,
            // SAFETY: the caller keeps the heap mapped for the driver's life.
            Shape::Pe => Arc::new(
                unsafe {
                    backend.register(
                        heap,
                        usize::try_from(heap_len).unwrap_or(usize::MAX),
                        access::LOCAL_WRITE
                            | access::REMOTE_WRITE
                            | access::REMOTE_READ
                            | access::REMOTE_ATOMIC,
                    )
                }
                .map_err(res("ibv_reg_mr (heap)"))?,
            ),
        };
        // Scratch: per-QP staging rings, get buffers, atomic result words.
        let total_qps = (n_peers * qps_per_peer).max(1);
        let stage_per_qp =
            set_stage.unwrap_or((u64::from(cfg.staging_bytes) / total_qps).max(MIN_STAGE) & !63);
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
        #[cfg(any(test, feature = "fake-hca"))]
        cq.fake_set_device(me);
        // Receipts: one SRQ for every peer's data QPs, fully posted.
        let srq = backend.srq(p.srq_depth).map_err(res("ibv_create_srq"))?;
        let mut qpns = Vec::with_capacity((n_peers * u64::from(p.data_qps)) as usize);
        let mut peers = match (only, lazy) {
            (Some(peer), _) => super::table::Peers::one(peer),
            (None, Some(_)) => super::table::Peers::hashed(n_peers as usize),
            (None, None) => super::table::Peers::every(me, n_pes),
        };
        if lazy.is_none() {
            for pe in 0..n_pes {
                if pe == me || only.is_some_and(|o| o != pe) {
                    continue;
                }
                let slot = peers.len();
                let (peer, q) = new_peer(
                    backend,
                    &cq,
                    &srq,
                    &p,
                    slot,
                    |qi| match only {
                        // A set's: its mailbox slot; the PE driver's: the peer.
                        Some(_) => tag_bits | usize::from(qi),
                        None => (pe as usize) << 8 | usize::from(qi),
                    },
                    stage_per_qp,
                )?;
                qpns.extend_from_slice(&q);
                if peers.push(pe, peer).is_err() {
                    unreachable!("the table has room for every peer");
                }
            }
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
            set_peer: only,
            tag_bits: tag_bits & SET_TAG,
            reads_async: only.is_none(),
            lease: None,
            sets: std::sync::OnceLock::new(),
            #[cfg(any(test, feature = "fake-hca"))]
            fabric: None,
            limits: *limits,
            stage_per_qp,
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
            pending: vec![0; (n_peers as usize + 1) * qps_per_peer as usize].into_boxed_slice(),
            n_pending: 0,
            cqes: vec![sys::Cqe::default(); POLL_BATCH].into_boxed_slice(),
            credits: CqCredits::new(p.cq_depth),
            // Room for every peer's events of one failure cycle (link
            // error, rebuild needed, receipts, rebuilt, link up) plus the
            // device's: a device or port failure reports every peer at
            // once, and the shim holds a peer's newer operations (and asks
            // for its receipts) on its link event, so none may be dropped.
            events: vec![None; EVENT_RING.max(5 * n_peers as usize + 8)].into_boxed_slice(),
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
                n_peers as usize * usize::from(p.data_qps),
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
        d.owned_heap = Some(Arc::new(heap));
        Ok(d)
    }

    fn release(&mut self) {
        if let Some((b, slot)) = self.lease.take() {
            for _ in 0..self.collecting {
                b.collecting(false);
            }
            b.give_back(slot);
        }
        // QPs before the CQ, MRs and QPs before the PD, all before the context.
        for p in self.peers.iter_mut() {
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

    /// [`Transport::close`](switchyard_core::transport::Transport::close):
    /// every QP reset, every peer Down, every resource released (once;
    /// later calls do nothing).
    pub(super) fn close_all(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        for pe in self.peers.iter_mut() {
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

/// A peer's state and QPs (`1 + data_qps`, on `cq`, the data QPs on
/// `srq`), in `slot` of the peer table: its staging is the slot's part of
/// the scratch, its receipts the slot's part of the receive side's table
/// (the `(qpn, index)` pairs returned). `tag` is each QP's `qp_context`.
#[allow(clippy::too_many_arguments)]
fn new_peer(
    backend: &sys::Backend<'_>,
    cq: &sys::Cq,
    srq: &sys::Srq,
    p: &crate::params::QpParams,
    slot: usize,
    tag: impl Fn(u8) -> usize,
    stage_per_qp: u64,
) -> Result<(Peer, Vec<(u32, u32)>)> {
    let qps_per_peer = 1 + usize::from(p.data_qps);
    let mut qps = Vec::with_capacity(qps_per_peer);
    let mut qpns = Vec::with_capacity(usize::from(p.data_qps));
    let mut stage_off = slot * qps_per_peer * stage_per_qp as usize;
    for qi in 0..qps_per_peer as u8 {
        let qp = backend
            .qp(
                cq,
                (qi > 0).then_some(srq),
                p.sq_depth,
                p.max_inline,
                tag(qi),
            )
            .map_err(res("ibv_create_qp"))?;
        if qi > 0 {
            qpns.push((
                qp.qpn(),
                (slot * usize::from(p.data_qps)) as u32 + u32::from(qi) - 1,
            ));
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
    let replay_cap = qps_per_peer * p.sq_depth as usize;
    Ok((
        Peer {
            qps: qps.into_boxed_slice(),
            remote: None,
            state: LinkState::Down,
            incarnation: 0,
            generation: 0,
            next_seq: 1,
            settle: SettleWindow::new(),
            load: Load::default(),
            fence: false,
            fence_qp: None,
            replays: vec![None; replay_cap].into_boxed_slice(),
            n_replays: 0,
            unreported: None,
            lost: 0,
            await_receipts: false,
            collect: false,
            receipts: None,
            collect_until: None,
        },
        qpns,
    ))
}

/// What [`VerbsDriver::assemble`] builds.
enum Shape {
    /// The PE's driver: the heap registered, QPs toward every other PE.
    Pe,
    /// A QP set toward `peer`, on the PE's heap registration.
    Set {
        peer: u32,
        heap_mr: Arc<sys::Mr>,
        /// The PE driver's staging per QP (a set's QPs get as much, not
        /// the whole `staging_bytes`).
        stage_per_qp: u64,
        /// Its key in the budget (slot and generation, in its QPs' tags).
        slot: u32,
    },
}

/// Zeroed 8-aligned memory owned through a raw pointer (the device writes
/// it behind Rust's back, so no reference to it is ever held), freed on
/// drop.
pub(super) struct OwnedWords {
    ptr: *mut [u64],
}

// SAFETY: the memory is owned through a raw pointer and never read or
// written through this type (only its address is handed out); freed once,
// by the last holder.
unsafe impl Send for OwnedWords {}
// SAFETY: as above: `&OwnedWords` gives only the address.
unsafe impl Sync for OwnedWords {}

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
