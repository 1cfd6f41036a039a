//! Building a [`Context`] from its parts: the [`Setup`] (however it was
//! learned), this PE's own shared-memory segment, every PE's [`PeerInfo`] and
//! the TCP driver. Init from the environment (`init.rs`) and the tests both
//! end here. Everything is allocated here, once: the topology row, the route
//! selector, the trace ring, the per-peer tables.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use switchyard_core::{
    class::{InterSwitch, Locality, NO_SWITCH, PathClass, class_between},
    route::{Downgrade, Policy, PolicyConfig, Selector, TransportRoles},
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64},
    topology::{LinkState, Shape, Topology, TopologyBox},
    transport::{Instant as CoreInstant, Transport},
};
use switchyard_shm::{Alias, HugePages, Segment, SegmentConfig, ShmError, ShmTransport};
use switchyard_socket::SocketDriver;

use super::{
    Context, Error, N_TRANSPORTS, NEXT_OWNER, Progress, RESERVED, Result, SHM, VERBS,
    heap::SymAllocator, pe::PeInner, progress, tcp_rail, trace,
};

/// The class of `pe` at `their` (node, switch and tree ids) seen from
/// `me` at `my`: the locality rule ([`class_between`]), and no route
/// between leaves of different known trees. At init for every peer, and
/// at the first use of an off-node peer whose locality came with its card
/// (`first_use.rs`).
pub(super) fn class_from(
    me: u32,
    my: (u64, u32, u32),
    pe: u32,
    their: (u64, u32, u32),
) -> PathClass {
    // Only whether the nodes are equal matters: the topology's small node
    // ids are 0 for this node, 1 for any other.
    let at = |(node, switch, _): (u64, u32, u32)| Locality {
        node: u32::from(node != my.0),
        switch,
    };
    let c = class_between(me, at(my), pe, at(their), InterSwitch::Routed);
    // Leaves of different trees have no router between them.
    if c == PathClass::Routed && my.2 != NO_SWITCH && their.2 != NO_SWITCH && their.2 != my.2 {
        PathClass::Unreachable
    } else {
        c
    }
}

/// Where a peer is and how to reach it, from its bootstrap card.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// Node id (equal = same machine).
    pub node: u64,
    /// Switch id, or [`NO_SWITCH`].
    pub switch: u32,
    /// Its tree of switches, or [`NO_SWITCH`] (different known trees cannot
    /// reach each other).
    pub tree: u32,
    /// Its shared-memory object.
    pub shm: Option<PathBuf>,
    /// Its TCP listening address per rail.
    pub tcp: Vec<std::net::SocketAddr>,
}

/// Everything a context needs, however it was learned.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Job id.
    pub job_id: u64,
    /// This PE.
    pub me: u32,
    /// Job size.
    pub n_pes: u32,
    /// Usable heap bytes per PE (the context reserves [`RESERVED`] more).
    pub heap_size: u64,
    /// Huge pages policy.
    pub huge_pages: HugePages,
    /// NUMA node for the heap.
    pub numa_node: Option<u32>,
    /// Deadline of every wait on a peer.
    pub op_timeout: Duration,
    /// How waits use the CPU.
    pub progress: Progress,
    /// Route policy knobs (roles are filled in by the context).
    pub policy: PolicyConfig,
    /// How long connecting the TCP peers at init may take.
    pub connect_timeout: Duration,
    /// Whether PEs of one node use shared memory between them (off: they
    /// use TCP like PEs of different nodes; `transports = tcp`).
    pub shm_peers: bool,
    /// Memory to make symmetric besides the heap (the executable's global
    /// and static variables, for the C API): moved into the segment after
    /// the heap, see [`switchyard_shm::Alias`].
    pub symmetric_data: Option<Alias>,
    /// Whether atomics to verbs peers may use the NIC's atomics
    /// (`verbs_atomics`; decided against the device when verbs is attached).
    pub verbs_atomics: crate::config::VerbsAtomics,
    /// Whether ROUTED peers use verbs for long messages (`verbs_routed`).
    pub verbs_routed: bool,
    /// Whether each context opens verbs QP sets of its own toward the
    /// peers it uses (`verbs_context_sets`; off by default).
    pub verbs_context_sets: bool,
    /// Records the route trace ring keeps, the newest ones (`trace_records`;
    /// [`TRACE_RECORDS`](super::TRACE_RECORDS) by default): a power of two, at most
    /// [`TraceRingBox::MAX_CAPACITY`](switchyard_core::trace::TraceRingBox::MAX_CAPACITY),
    /// allocated at init.
    pub trace_records: usize,
    /// Which routing decisions the ring records (`trace`;
    /// [`TraceMode::DEFAULT`](crate::config::TraceMode::DEFAULT) by default).
    pub trace: crate::config::TraceMode,
    /// Whether to keep the stats segment (`stats`; on by default).
    pub stats: bool,
}

/// The executable's global and static variables, moved into the symmetric
/// heap's object at init ([`Setup::symmetric_data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymmetricData {
    /// Their address range's start in this process (the same variables are
    /// at the same offset from it on every PE).
    pub addr: usize,
    /// Its length in bytes.
    pub len: u64,
    /// Its symmetric offset in the heap: the variable at `addr + k` is heap
    /// offset `offset + k` on every PE.
    pub offset: u64,
}

impl Context {
    /// Creates this PE's own shared-memory object (the first half of init,
    /// before the bootstrap exchange announces it).
    ///
    /// # Errors
    ///
    /// [`Error::Shm`] when the object cannot be created.
    pub fn create_segment(setup: &Setup) -> Result<Segment> {
        let mut cfg = SegmentConfig::new(
            setup.job_id,
            setup.me,
            setup.n_pes,
            setup.heap_size.saturating_add(RESERVED),
        );
        cfg.huge_pages = setup.huge_pages;
        cfg.numa_node = setup.numa_node;
        cfg.alias = setup.symmetric_data;
        Ok(Segment::create(&cfg)?)
    }

    /// Builds a context from its own segment and every PE's [`PeerInfo`]
    /// (index = PE), connecting every same-node peer.
    ///
    /// # Errors
    ///
    /// [`Error::Shm`] when a peer's object cannot be attached.
    pub fn from_parts(
        setup: Setup,
        own: Segment,
        peers: &[PeerInfo],
        tcp: Option<SocketDriver>,
    ) -> Result<Context> {
        Context::from_parts_with(setup, own, peers, tcp, false)
    }

    /// [`Context::from_parts`]; with `lazy` (`cards = lazy`, init), the
    /// TCP driver connects on first use: a peer not on this node (or any
    /// peer, without shared memory) whose [`PeerInfo`] has no TCP address
    /// is reached over TCP once its card is fetched, at the first
    /// operation toward it (`first_use.rs`); its TCP health bits are set
    /// meanwhile, so routes pick TCP for it. Peers with addresses are
    /// connected now, as without `lazy` (but the connect may come from
    /// either side).
    pub(super) fn from_parts_with(
        setup: Setup,
        own: Segment,
        peers: &[PeerInfo],
        mut tcp: Option<SocketDriver>,
        lazy: bool,
    ) -> Result<Context> {
        let (me, n) = (setup.me, setup.n_pes);
        let mut warnings = own.warnings().to_vec();
        let data = match (setup.symmetric_data, own.alias_offset()) {
            (Some(a), Some(offset)) => Some(SymmetricData {
                addr: a.addr(),
                len: a.len() as u64,
                offset,
            }),
            _ => None,
        };
        let mut shm = ShmTransport::new(own, setup.job_id, me, n)?;
        let my = peers.get(me as usize).map(|p| (p.node, p.switch));
        let my_at = peers
            .get(me as usize)
            .map_or((0, NO_SWITCH, NO_SWITCH), |p| (p.node, p.switch, p.tree));
        let shape = Shape {
            me,
            n_pes: n,
            n_transports: N_TRANSPORTS,
            // Load bits per (transport, peer): the row's link words double.
            load_hints: true,
        };
        let store: &'static TopologyBox =
            Box::leak(Box::new(TopologyBox::new(shape, super::MAX_CONTEXTS + 1)));
        let topo = Topology::new(store.mem(), shape, |pe| {
            peers.get(pe as usize).map_or(PathClass::Unreachable, |p| {
                class_from(me, my_at, pe, (p.node, p.switch, p.tree))
            })
        })
        .map_err(|e| {
            Error::Shm(ShmError::BadObject {
                path: PathBuf::new(),
                why: format!("topology layout: {e}"),
            })
        })?;
        for (pe, p) in peers.iter().enumerate() {
            let pe = pe as u32;
            let same_node = Some(p.node) == my.map(|m| m.0);
            if pe == me {
                topo.set_health(SHM, pe, true);
            } else if same_node
                && setup.shm_peers
                && let Some(path) = &p.shm
            {
                shm.set_address(pe, path)?;
                shm.connect(pe)?;
                topo.set_health(SHM, pe, true);
            }
        }
        let (_, heap_len) = shm.local_heap();
        // The trace rings are a shared-memory object of the job (readable
        // from outside, like the heap's); the TCP driver writes the target
        // ring.
        let (trace_ring, trace) = trace::new_rings(
            setup.trace_records,
            setup.job_id,
            me,
            n,
            true,
            &mut warnings,
        )?;
        if let (Some(t), every @ 1..) = (tcp.as_mut(), setup.trace.every())
            && let Some(w) = trace_ring.target_writer()
        {
            t.set_trace(w, crate::sys::ticks, every == 1);
        }
        let mut stream = [None; 4];
        // Off-node peers to reach over TCP at their first use (lazy cards).
        let mut later = Vec::new();
        if let Some(t) = tcp.as_mut() {
            t.set_connect_on_first_use(lazy);
            // Every off-node peer on every rail both sides have; same-node
            // pairs use shared memory.
            let mut remote = Vec::new();
            for (pe, p) in peers.iter().enumerate() {
                let pe = pe as u32;
                let same_node = Some(p.node) == my.map(|m| m.0) && setup.shm_peers;
                if pe != me && !same_node && !p.tcp.is_empty() {
                    t.set_peer(pe, &p.tcp, heap_len)?;
                    remote.push(pe);
                } else if lazy && pe != me && !same_node {
                    later.push(pe);
                }
            }
            if !remote.is_empty() {
                t.connect_all(
                    remote.iter().copied(),
                    CoreInstant::from_nanos(0),
                    setup.connect_timeout,
                )?;
            }
            for (r, slot) in stream.iter_mut().enumerate().take(t.rails()) {
                *slot = Some(tcp_rail(r));
                let rail = t.rail(r);
                for &pe in &remote {
                    if rail.state(pe) == LinkState::Up {
                        topo.set_health(tcp_rail(r), pe, true);
                    }
                }
                // Reachable, as far as routes know, until the first use
                // finds out.
                for &pe in &later {
                    topo.set_health(tcp_rail(r), pe, true);
                }
            }
            if remote.is_empty() && later.is_empty() {
                // Every peer is on this node: no sockets to progress, so the
                // waits keep their shared-memory fast path.
                let _ = t.close();
                stream = [None; 4];
            }
        }
        if stream.iter().all(Option::is_none) {
            tcp = None;
        }
        let mut policy = setup.policy;
        // Every fallback the route reports (`Route::downgraded`) is counted
        // in `Stats::downgrades`: a class may forbid them, not hide them.
        for d in &mut policy.downgrade {
            if *d == Downgrade::Allow {
                *d = Downgrade::AllowAndCount;
            }
        }
        policy.roles = TransportRoles {
            shm: Some(SHM),
            rdma: Some(VERBS),
            stream,
        };
        if heap_len < RESERVED {
            warnings.push("heap smaller than the reserved area".into());
        }
        // The stats segment: each context of the PE counts in its own slot.
        let stats = super::statseg::segment(setup.stats, setup.job_id, me, n, &mut warnings);
        let pe = Arc::new(PeInner {
            me,
            n_pes: n,
            job_id: setup.job_id,
            owner: NEXT_OWNER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            heap_len,
            data,
            op_timeout: setup.op_timeout,
            progress: setup.progress,
            clock: Instant::now(),
            policy,
            topo,
            trace_records: setup.trace_records,
            trace: setup.trace,
            tcp_capacity: tcp
                .as_ref()
                .map_or_else(Default::default, SocketDriver::backlog_capacity),
            warnings,
            verbs: AtomicBool::new(false),
            verbs_shape: Mutex::new(None),
            verbs_holding: AtomicU32::new(0),
            verbs_attention: AtomicU64::new(0),
            lanes: AtomicU64::new(0),
            finalized: AtomicBool::new(false),
            // The allocator stops where the aliased global variables start.
            alloc: Mutex::new(SymAllocator::new(
                RESERVED,
                data.map_or(heap_len, |d| d.offset),
            )),
            barrier: Mutex::new(0),
            link_version: AtomicU64::new(0),
            link_seen: (0..n).map(|_| AtomicU64::new(0)).collect(),
            load_bits: AtomicU32::new(0),
            rings: Mutex::new(Vec::new()),
            tcp: tcp.map(|d| {
                let mut t = progress::Tcp::new(d);
                t.set_op_timeout(setup.op_timeout);
                t
            }),
            shm: Arc::new(Mutex::new(shm)),
            stats,
            spare_selector: Mutex::new(None),
            lazy: (lazy && !later.is_empty()).then(super::first_use::LazyCards::default),
        });
        let mut ctx = Context::on_rings(&pe, (trace_ring, trace))?;
        // The progress thread's reader slot (its stats publisher), the one
        // beyond the contexts' `MAX_CONTEXTS`, taken after the first
        // context's so that context keeps lane 0 of the context ids.
        *super::pe::lock(&pe.spare_selector) = Selector::new(&pe.topo, Policy::new(policy)).ok();
        // The first context publishes the segment's shared part.
        ctx.sx.owner = true;
        ctx.verbs_atomics = setup.verbs_atomics;
        ctx.verbs_routed = setup.verbs_routed;
        ctx.verbs_sets_on = setup.verbs_context_sets;
        Ok(ctx)
    }
}
