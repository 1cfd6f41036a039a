//! The Rust API: a [`Context`] per PE, symmetric allocation, put/get, atomics,
//! `wait_until`, `barrier_all`, `fence` and `quiet`.
//!
//! Every operation selects its transport through the core's
//! [`Selector`] (the route for PE `pe`,
//! `len` bytes and the kind of operation), writes a record to the route trace
//! ring, and hands the operation to the chosen driver. Nothing on that path
//! allocates, locks or formats (a counting-allocator test checks it).
//!
//! A `Context` belongs to one thread (`&mut self` everywhere, not `Sync`);
//! several threads of one PE each need their own context (a later issue).
//!
//! # Example
//!
//! Run as one PE (no launcher), or under `switchyard run -n N`:
//!
//! ```
//! use switchyard::context::{Cmp, Context};
//!
//! let mut ctx = Context::from_env()?;
//! let (me, n) = (ctx.my_pe(), ctx.n_pes());
//! let counter = ctx.alloc::<u64>(1)?; // collective
//! ctx.fetch_add(&counter, 0, 1, 0)?; // everyone adds 1 on PE 0
//! ctx.barrier_all()?;
//! if me == 0 {
//!     assert_eq!(ctx.wait_until(&counter, 0, Cmp::Eq, u64::from(n))?, u64::from(n));
//! }
//! # Ok::<(), switchyard::context::Error>(())
//! ```

mod drv;
mod heap;
mod init;
mod order;
mod progress;
mod raw;
pub mod verbs;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use drv::{Drv, DrvError};
use heap::{BLOCK_ALIGN, SymAllocator};
pub use heap::{Plain, Sym};
pub use init::InitOptions;
pub use raw::Bitwise;
use switchyard_core::{
    class::{InterSwitch, Locality, NO_SWITCH, PathClass, TransportId, class_between},
    route::{
        Op, Policy, PolicyConfig, Route, SelectError, Selector, TransportRoles, UnreachableReason,
    },
    topology::{LinkState, Shape, Topology, TopologyBox},
    trace::{TraceRecord, TraceRing, TraceWriter},
    transport::{
        AtomicOp, AtomicWidth, ErrorKind, Instant as CoreInstant, Ticket, Transport, TransportError,
    },
    wire::{AtomicKind, FrameOp},
};
pub use switchyard_shm::{Alias, HEAP_ALIGN};
use switchyard_shm::{HugePages, Segment, SegmentConfig, ShmError, ShmTransport};
use switchyard_socket::{Event, SocketDriver, SocketError};
use zerocopy::IntoBytes;

/// Transport id of shared memory.
pub const SHM: TransportId = tid(0);
/// Transport id of RDMA verbs.
pub const VERBS: TransportId = tid(1);
/// Transport id of TCP rail 0; rail `r` is [`tcp_rail`]`(r)`.
pub const TCP: TransportId = tid(2);
/// Most TCP rails a context drives.
pub const MAX_TCP_RAILS: usize = switchyard_socket::MAX_RAILS;
/// Number of transport ids in use: shm, verbs, and the TCP rails.
const N_TRANSPORTS: u8 = 2 + MAX_TCP_RAILS as u8;

/// The transport id of TCP rail `rail` (`tcp0` is [`TCP`]).
///
/// # Panics
///
/// When `rail >= MAX_TCP_RAILS`.
pub const fn tcp_rail(rail: usize) -> TransportId {
    assert!(rail < MAX_TCP_RAILS, "TCP rail out of range");
    tid(2 + rail as u8)
}

/// The TCP rail a transport id stands for, if it is one.
#[inline]
pub const fn rail_of(t: TransportId) -> Option<usize> {
    match t.index().checked_sub(2) {
        Some(r) if r < MAX_TCP_RAILS => Some(r),
        _ => None,
    }
}

const fn tid(i: u8) -> TransportId {
    match TransportId::new(i) {
        Some(t) => t,
        None => panic!("transport id out of range"),
    }
}

/// Records kept in the route trace ring.
pub const TRACE_RECORDS: usize = 4096;

/// Bytes at the start of the heap reserved for the context's own
/// synchronization (barrier flags); user blocks start after them.
pub const RESERVED: u64 = 4096;
/// Spins of a wait's fast path (a load and a pause instruction each, no clock,
/// no progress) before the bounded slow path starts.
const FAST_SPINS: u32 = 256;
/// Progress steps of a wait per clock reading (see `Context::poll_once`).
const NOW_EVERY: u32 = 8;
/// Barrier flag words (one per dissemination round: enough for 2^32 PEs).
const BARRIER_ROUNDS: u64 = 32;

/// How waits (quiet, blocking gets, `wait_until`, barriers) use the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Spin on the core (pinned, dedicated cores).
    Busy,
    /// Spin `spin` rounds, then yield and sleep in growing steps up to 100 µs.
    Adaptive {
        /// Spins before the first yield.
        spin: u32,
    },
}

/// Comparison for [`Context::wait_until`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Cmp {
    fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
        }
    }
}

/// Integer types with atomic operations: `u32`, `u64`, `i32`, `i64`.
pub trait AtomicInt: Plain + PartialOrd + sealed::Sealed {
    /// Operand width.
    const WIDTH: AtomicWidth;
    /// The value's bits, zero-extended to 64.
    fn to_bits(self) -> u64;
    /// The value from the low bits.
    fn from_bits(b: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

macro_rules! atomic_int {
    ($t:ty, $w:expr, $u:ty) => {
        impl AtomicInt for $t {
            const WIDTH: AtomicWidth = $w;
            #[inline]
            fn to_bits(self) -> u64 {
                u64::from(self as $u)
            }
            #[inline]
            fn from_bits(b: u64) -> Self {
                b as $u as $t
            }
        }
    };
}
atomic_int!(u32, AtomicWidth::W32, u32);
atomic_int!(i32, AtomicWidth::W32, u32);
atomic_int!(u64, AtomicWidth::W64, u64);
atomic_int!(i64, AtomicWidth::W64, u64);

/// Errors of the Rust API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is bad.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The bootstrap failed.
    #[error(transparent)]
    Bootstrap(#[from] switchyard_bootstrap::BootstrapError),
    /// The shared-memory transport failed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The TCP transport failed.
    #[error(transparent)]
    Tcp(#[from] SocketError),
    /// The RDMA verbs transport failed (an atomic whose outcome is unknown,
    /// a device error).
    #[error(transparent)]
    Verbs(#[from] switchyard_verbs::VerbsError),
    /// Operations the verbs driver offered for replay after its link failed
    /// could not be sent over TCP (refused, or the peer is dead): they are
    /// not applied.
    #[error(
        "{ops} operations to PE {pe} could not be replayed over TCP after its verbs link failed"
    )]
    ReplayLost {
        /// The (first) PE concerned.
        pe: u32,
        /// How many operations.
        ops: u64,
    },
    /// No route to the PE.
    #[error("{0}")]
    Route(SelectError),
    /// An element range outside a symmetric block.
    #[error("elements [{at}, +{count}) are outside a symmetric block of {len}")]
    OutOfBounds {
        /// First element.
        at: usize,
        /// Elements asked for.
        count: usize,
        /// The block's length.
        len: usize,
    },
    /// The symmetric heap has no room.
    #[error(
        "symmetric heap exhausted: {requested} bytes asked, {available} free (raise SWITCHYARD_HEAP_SIZE)"
    )]
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// Bytes free.
        available: u64,
    },
    /// A handle from another context, or already freed.
    #[error("the symmetric handle does not belong to this context (or was freed)")]
    ForeignHandle,
    /// A wait ran past its deadline.
    #[error("{what} timed out after {waited:?}{}", pe.map(|p| format!(" waiting for PE {p}")).unwrap_or_default())]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
        /// The PE waited on, where one.
        pe: Option<u32>,
    },
    /// A PE died.
    #[error("PE {pe} is dead ({what})")]
    PeerDead {
        /// The PE.
        pe: u32,
        /// What was being done.
        what: &'static str,
    },
    /// The route chose a transport this build cannot drive yet.
    #[error("transport {transport} chosen for PE {pe} is not available in this build")]
    TransportUnavailable {
        /// The transport.
        transport: TransportId,
        /// The PE.
        pe: u32,
    },
}

/// Result of this module.
pub type Result<T> = std::result::Result<T, Error>;

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

/// Counters of one context.
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
    /// Route fallbacks counted per path class (`PathClass::index`), for the
    /// classes whose downgrade rule is `AllowAndCount` (NEAR to TCP while
    /// verbs is unavailable, for one).
    pub downgrades: [u64; 5],
    /// Verbs links that failed (each clears the verbs health bit; the
    /// peer's traffic goes over TCP until the link is rebuilt).
    pub verbs_failovers: u64,
    /// Operations the verbs driver handed back after a failure and this
    /// context replayed over TCP.
    pub verbs_replays: u64,
    /// Atomics that would have gone over verbs (a NEAR peer, or a ROUTED one
    /// at `short_threshold` and up, whose verbs link was up) but went over
    /// TCP, run by the target's CPU, because the NIC's atomics are not
    /// atomic with respect to the CPU's (`verbs_atomics`). Not failures, not
    /// downgrades; traced with [`TraceRecord::CPU_ATOMIC`].
    pub cpu_atomics: u64,
    /// Operations (and fences) that first waited for this PE's earlier
    /// operations to the same peer over another transport to complete (a
    /// peer's traffic split over verbs and TCP; see the ordering rules in
    /// [`verbs`]). Traced with [`TraceRecord::ORDERED`].
    pub ordering_waits: u64,
}

static NEXT_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One PE's handle on the job. See the [module docs](self).
pub struct Context {
    me: u32,
    n_pes: u32,
    job_id: u64,
    owner: u64,
    /// Declared before `shm`: dropped first, as it writes into shm's heap.
    tcp: Option<progress::Tcp>,
    /// The verbs driver, when one is used (before `shm`: it registered the
    /// heap and the device writes it).
    verbs: Option<verbs::Verbs>,
    /// Why there is no verbs driver, when init decided not to create one.
    verbs_why: Option<String>,
    /// `verbs_atomics` as configured.
    verbs_atomics: crate::config::VerbsAtomics,
    /// `verbs_routed` as configured.
    verbs_routed: bool,
    /// Atomics leave RDMA out (the policy's atomic band is in use): the
    /// device's atomics are not atomic with respect to the CPU's.
    cpu_atomics_rule: bool,
    /// Why ([`verbs::nic_atomics`]); empty before verbs is attached.
    verbs_atomics_why: &'static str,
    /// Cross-transport ordering: per peer, the transports with writes that
    /// may not be complete.
    order: order::Order,
    /// Trace flags for the next [`Context::trace_route`] (set when the
    /// operation waited for ordering).
    next_flags: u8,
    shm: ShmTransport,
    topo: Topology<'static>,
    sel: Selector<'static>,
    trace_ring: &'static TraceRing<TRACE_RECORDS>,
    trace: TraceWriter<'static, TRACE_RECORDS>,
    heap_len: u64,
    alloc: SymAllocator,
    barrier_epoch: u64,
    clock: Instant,
    op_timeout: Duration,
    progress: Progress,
    stats: Stats,
    /// Per origin PE, the newest link-state record version applied.
    link_seen: Vec<u64>,
    /// Versions of this PE's own link-state records.
    link_version: u64,
    /// Peers known dead (from any driver).
    dead: Vec<bool>,
    boot: Option<switchyard_bootstrap::Bootstrap>,
    root: Option<
        std::thread::JoinHandle<std::result::Result<(), switchyard_bootstrap::BootstrapError>>,
    >,
    warnings: Vec<String>,
    /// Where the symmetric global variables are, when there are any.
    data: Option<SymmetricData>,
    /// The clock as `poll_once` last read it, and the steps since.
    now_cache: CoreInstant,
    now_age: u32,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("me", &self.me)
            .field("n_pes", &self.n_pes)
            .field("job_id", &format_args!("{:016x}", self.job_id))
            .field("heap_len", &self.heap_len)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
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
        mut tcp: Option<SocketDriver>,
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
        // Node ids are 64-bit hashes; the topology wants small ids.
        let mut nodes: Vec<u64> = peers.iter().map(|p| p.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let locality = |p: &PeerInfo| Locality {
            node: nodes.binary_search(&p.node).unwrap_or(0) as u32,
            switch: p.switch,
        };
        let my_loc = peers.get(me as usize).map(locality).unwrap_or(Locality {
            node: 0,
            switch: NO_SWITCH,
        });
        let shape = Shape {
            me,
            n_pes: n,
            n_transports: N_TRANSPORTS,
            load_hints: false,
        };
        let store: &'static TopologyBox = Box::leak(Box::new(TopologyBox::new(shape, 4)));
        let my_tree = peers.get(me as usize).map_or(NO_SWITCH, |p| p.tree);
        let topo = Topology::new(store.mem(), shape, |pe| {
            peers.get(pe as usize).map_or(PathClass::Unreachable, |p| {
                let c = class_between(me, my_loc, pe, locality(p), InterSwitch::Routed);
                // Leaves of different trees have no router between them.
                if c == PathClass::Routed
                    && my_tree != NO_SWITCH
                    && p.tree != NO_SWITCH
                    && p.tree != my_tree
                {
                    PathClass::Unreachable
                } else {
                    c
                }
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
        let mut stream = [None; 4];
        if let Some(t) = tcp.as_mut() {
            // Every off-node peer on every rail both sides have; same-node
            // pairs use shared memory.
            let mut remote = Vec::new();
            for (pe, p) in peers.iter().enumerate() {
                let pe = pe as u32;
                let same_node = Some(p.node) == my.map(|m| m.0) && setup.shm_peers;
                if pe != me && !same_node && !p.tcp.is_empty() {
                    t.set_peer(pe, &p.tcp, heap_len)?;
                    remote.push(pe);
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
            }
            if remote.is_empty() {
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
        policy.roles = TransportRoles {
            shm: Some(SHM),
            rdma: Some(VERBS),
            stream,
        };
        let sel = Selector::new(&topo, Policy::new(policy)).map_err(|e| {
            Error::Shm(ShmError::BadObject {
                path: PathBuf::new(),
                why: format!("selector: {e}"),
            })
        })?;
        let trace_ring: &'static TraceRing<TRACE_RECORDS> = Box::leak(Box::new(TraceRing::new()));
        let trace = trace_ring.writer().ok_or_else(|| {
            Error::Shm(ShmError::BadObject {
                path: PathBuf::new(),
                why: "trace ring already has a writer".into(),
            })
        })?;
        if heap_len < RESERVED {
            warnings.push("heap smaller than the reserved area".into());
        }
        Ok(Context {
            me,
            n_pes: n,
            job_id: setup.job_id,
            owner: NEXT_OWNER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            shm,
            topo,
            sel,
            trace_ring,
            trace,
            heap_len,
            // The allocator stops where the aliased global variables start.
            alloc: SymAllocator::new(RESERVED, data.map_or(heap_len, |d| d.offset)),
            data,
            now_cache: CoreInstant::from_nanos(0),
            now_age: NOW_EVERY - 1,
            barrier_epoch: 0,
            clock: Instant::now(),
            op_timeout: setup.op_timeout,
            progress: setup.progress,
            stats: Stats::default(),
            tcp: tcp.map(progress::Tcp::new),
            verbs: None,
            verbs_why: None,
            verbs_atomics: setup.verbs_atomics,
            verbs_routed: setup.verbs_routed,
            cpu_atomics_rule: false,
            verbs_atomics_why: "",
            order: order::Order::default(),
            next_flags: 0,
            link_seen: vec![0; n as usize],
            link_version: 0,
            dead: vec![false; n as usize],
            boot: None,
            root: None,
            warnings,
        })
    }

    /// This PE's number, `0..n_pes`.
    #[inline]
    pub fn my_pe(&self) -> u32 {
        self.me
    }

    /// Number of PEs in the job.
    #[inline]
    pub fn n_pes(&self) -> u32 {
        self.n_pes
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        self.job_id
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.progress_thread = self.tcp.as_ref().is_some_and(|t| t.has_thread());
        s.progress_bursts = self.tcp.as_ref().map_or(0, |t| t.thread_bursts());
        s.downgrades = self.sel.downgrades();
        if let Some(v) = &self.verbs {
            s.verbs_failovers = v.failovers;
            s.verbs_replays = v.replays;
        }
        s
    }

    /// Warnings from init (huge pages or NUMA placement that fell back).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The route trace ring (snapshot it with
    /// [`TraceRing::snapshot`](switchyard_core::trace::TraceRing::snapshot)).
    pub fn trace(&self) -> &TraceRing<TRACE_RECORDS> {
        self.trace_ring
    }

    /// The route `select` gives for `len` bytes of `op` to `pe` (no trace).
    ///
    /// # Errors
    ///
    /// [`Error::Route`] when nothing reaches `pe`.
    pub fn route(&mut self, pe: u32, len: u32, op: Op) -> Result<Route> {
        self.sel.select(pe, len, op).map_err(Error::Route)
    }

    /// The path class toward `pe`.
    pub fn class(&mut self, pe: u32) -> Option<PathClass> {
        self.sel.pin().class(pe)
    }

    pub(crate) fn attach_bootstrap(
        &mut self,
        boot: switchyard_bootstrap::Bootstrap,
        root: Option<
            std::thread::JoinHandle<std::result::Result<(), switchyard_bootstrap::BootstrapError>>,
        >,
    ) {
        self.boot = Some(boot);
        self.root = root;
    }

    #[inline]
    fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    /// Selects a route for one operation. A failed selection is traced at
    /// once; a successful one by [`Context::trace_route`] after the operation
    /// was issued, so recording it is off the critical path of the store.
    #[inline]
    fn select(&mut self, pe: u32, len: u64, op: Op, frame: FrameOp) -> Result<Route> {
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        // Sticky pin: no fence per operation; `pause` unpins when idle.
        match self.sel.pin_sticky().select(pe, len32, op) {
            Ok(route) => Ok(route),
            Err(e) => {
                let rec = TraceRecord {
                    seq: 0,
                    src: self.me,
                    dst: pe,
                    len: len32,
                    class: match e {
                        SelectError::Unreachable { class, .. }
                        | SelectError::DowngradeForbidden { class, .. } => class.to_wire(),
                        SelectError::InvalidPe { .. } => PathClass::Unreachable.to_wire(),
                    },
                    transport: TraceRecord::NO_TRANSPORT,
                    op: frame as u8,
                    flags: TraceRecord::ERROR,
                    timestamp: crate::sys::ticks(),
                };
                self.trace.record(&rec);
                Err(Error::Route(e))
            }
        }
    }

    /// Writes the trace record of a routed operation (`failed`: the driver
    /// returned an error for it).
    #[inline]
    fn trace_route(&mut self, pe: u32, len: u64, frame: FrameOp, route: &Route, failed: bool) {
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

    /// Handles a driver error: a dead peer flips its health bit (so the next
    /// select falls back or fails at once) and may be retried elsewhere.
    fn on_error(&mut self, t: TransportId, e: DrvError, route: &Route) -> Option<Error> {
        if t == VERBS {
            // The link failed: apply its events and replay what it handed
            // back over TCP before this operation is retried there.
            self.verbs_events();
        }
        if e.kind() == ErrorKind::PeerDown {
            if let Some(pe) = e.peer() {
                self.topo.apply_link_state(t, pe, LinkState::Error);
                if self.dead.get(pe as usize).copied().unwrap_or(false) {
                    return Some(Error::PeerDead {
                        pe,
                        what: "an operation on it",
                    });
                }
            }
            if route.retry_allowed {
                self.stats.reroutes += 1;
                return None;
            }
        }
        Some(Error::from(e))
    }

    /// The driver behind transport id `t`, borrowed for one call.
    #[inline]
    fn drv(&mut self, t: TransportId) -> Option<Drv<'_>> {
        if t == SHM {
            return Some(Drv::Shm(&mut self.shm));
        }
        if t == VERBS {
            return self.verbs.as_mut().map(|v| Drv::Verbs(&mut v.drv));
        }
        let r = rail_of(t)?;
        let tcp = self.tcp.as_mut().map(progress::Tcp::get)?;
        (r < tcp.rails()).then(|| Drv::Tcp(tcp.rail(r)))
    }

    /// Routes one operation and runs it on the chosen driver: `WouldBlock`
    /// makes progress and retries (bounded by the op timeout), a dead peer or
    /// link flips its health bit and re-selects when the route allows a
    /// retry, anything else is returned.
    #[inline]
    fn routed<R>(
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
        let r = self.routed_with_in(pe, len, op, frame, run);
        self.leave();
        r
    }

    #[inline]
    fn routed_with_in<R>(
        &mut self,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        run: &mut impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<R, DrvError>,
    ) -> Result<(R, Route)> {
        // Set on the first WouldBlock: the wait for the window to open.
        let mut blocked_since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            let route = match self.select(pe, len, op, frame) {
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
                Err(e) => return Err(e),
            };
            if route.transport != VERBS && self.verbs_holds(pe) {
                // The verbs link to `pe` failed with puts in doubt: nothing
                // newer may overtake their replay (or their receipts).
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
            let Some(mut d) = self.drv(route.transport) else {
                return Err(Error::TransportUnavailable {
                    transport: route.transport,
                    pe,
                });
            };
            match run(&mut d, &route) {
                Ok(r) => {
                    if k != 0 && matches!(op, Op::Put | Op::Atomic) {
                        // A write that may be pending until quiet.
                        let code = self.order.get(pe) | k;
                        self.order.set(pe, code);
                    }
                    // Counted once issued (not per attempt: a send window
                    // that pushes back makes the loop select again).
                    self.stats.ops[route.transport.index()] += 1;
                    self.trace_route(pe, len, frame, &route, false);
                    return Ok((r, route));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Flow control: the target pushes back. Progress, and
                    // give up only at the op timeout or when it dies.
                    let start = *blocked_since.get_or_insert_with(Instant::now);
                    self.pause(&mut spins, start, "a send window to open", Watch::Peer(pe))?;
                }
                Err(e) => {
                    self.trace_route(pe, len, frame, &route, true);
                    if let Some(err) = self.on_error(route.transport, e, &route) {
                        return Err(err);
                    }
                }
            }
        }
    }

    /// Cross-transport ordering before an operation of kind `op` goes to
    /// `pe` over transport kind `k` (see the rules in the [`verbs`] module
    /// docs): a read (get, fetching atomic) first completes `pe`'s pending
    /// writes over the other transport, so it observes them; a write does
    /// so only after a fence (else nothing orders them). Costs one bit test
    /// when `pe`'s traffic is not split.
    #[inline]
    fn order_before(&mut self, pe: u32, k: u8, op: Op) -> Result<()> {
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

    /// Waits (bounded by the op timeout) until every earlier operation over
    /// the transports of `kinds` ([`order::V`], [`order::T`]) is complete.
    #[cold]
    fn quiet_kinds(&mut self, kinds: u8) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let verbs = kinds & order::V == 0 || self.verbs_quiet_poll()?;
            let tcp = kinds & order::T == 0
                || match self.tcp.as_mut().map(progress::Tcp::get) {
                    Some(t) => t.quiet_poll()?,
                    None => true,
                };
            if verbs && tcp {
                return Ok(());
            }
            self.pause(&mut spins, start, "an ordering wait", Watch::Drivers)?;
        }
    }

    /// A blocking routed operation: `start` issues it, `poll` completes it
    /// (at once on shared memory; after the reply on TCP). A transport that
    /// fails meanwhile flips its health bit and, when the route allows, the
    /// operation is issued again elsewhere.
    // The operation's description (pe, len, op, frame, what) and its two
    // halves; a struct for five plain values would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn routed_wait<R>(
        &mut self,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        what: &'static str,
        start: impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<Ticket, DrvError>,
        poll: impl FnMut(&mut Drv<'_>, &Ticket) -> std::result::Result<Option<R>, DrvError>,
    ) -> Result<R> {
        let r = self.routed_wait_in(pe, len, op, frame, what, start, poll);
        self.leave();
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn routed_wait_in<R>(
        &mut self,
        pe: u32,
        len: u64,
        op: Op,
        frame: FrameOp,
        what: &'static str,
        mut start: impl FnMut(&mut Drv<'_>, &Route) -> std::result::Result<Ticket, DrvError>,
        mut poll: impl FnMut(&mut Drv<'_>, &Ticket) -> std::result::Result<Option<R>, DrvError>,
    ) -> Result<R> {
        loop {
            let (ticket, route) = self.routed_with_in(pe, len, op, frame, &mut start)?;
            let t0 = Instant::now();
            let mut spins = 0u32;
            loop {
                let Some(mut d) = self.drv(route.transport) else {
                    return Err(Error::TransportUnavailable {
                        transport: route.transport,
                        pe,
                    });
                };
                match poll(&mut d, &ticket) {
                    Ok(Some(r)) => return Ok(r),
                    Ok(None) => self.pause(&mut spins, t0, what, Watch::Peer(pe))?,
                    Err(e) => {
                        self.trace_route(pe, len, frame, &route, true);
                        match self.on_error(route.transport, e, &route) {
                            Some(err) => return Err(err),
                            None => break,
                        }
                    }
                }
            }
        }
    }

    fn check<T>(&self, sym: &Sym<T>, at: usize, count: usize) -> Result<u64> {
        if sym.owner != self.owner {
            return Err(Error::ForeignHandle);
        }
        match at.checked_add(count) {
            Some(end) if end <= sym.len => Ok(sym.offset + (at * core::mem::size_of::<T>()) as u64),
            _ => Err(Error::OutOfBounds {
                at,
                count,
                len: sym.len,
            }),
        }
    }

    // ---- allocation -----------------------------------------------------

    /// Collectively allocates `len` elements of `T`, zeroed, at the same
    /// symmetric address on every PE. Every PE must make the same sequence of
    /// `alloc`/`free` calls. Ends with a barrier, so no PE can put into the
    /// block before every PE has it.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`]; barrier errors.
    pub fn alloc<T: Plain>(&mut self, len: usize) -> Result<Sym<T>> {
        if core::mem::align_of::<T>() as u64 > BLOCK_ALIGN {
            return Err(Error::OutOfMemory {
                requested: u64::MAX,
                available: self.alloc.available(),
            });
        }
        let bytes = (len as u64)
            .checked_mul(core::mem::size_of::<T>() as u64)
            .ok_or(Error::OutOfMemory {
                requested: u64::MAX,
                available: self.alloc.available(),
            })?;
        let off = self.alloc.alloc(bytes).ok_or(Error::OutOfMemory {
            requested: bytes,
            available: self.alloc.available(),
        })?;
        // SAFETY-free zeroing: through the driver, like any local put.
        let zeros = [0u8; 4096];
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min(zeros.len() as u64);
            self.shm
                .put(self.me, off + done, &zeros[..n as usize], self.sel_ctx())?;
            done += n;
        }
        self.barrier_all()?;
        Ok(Sym::new(off, len, self.owner))
    }

    /// Collectively frees a block (same order on every PE). Starts with a
    /// barrier, so no PE still uses it.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignHandle`] for a handle not from this context or freed.
    pub fn free<T>(&mut self, sym: Sym<T>) -> Result<()> {
        if sym.owner != self.owner {
            return Err(Error::ForeignHandle);
        }
        self.barrier_all()?;
        if self.alloc.free(sym.offset) {
            Ok(())
        } else {
            Err(Error::ForeignHandle)
        }
    }

    fn sel_ctx(&self) -> switchyard_core::route::ContextId {
        switchyard_core::route::ContextId {
            pe: self.me,
            seq: 0,
        }
    }

    // ---- local access ---------------------------------------------------

    /// Reads elements of this PE's own copy of `sym` (other PEs may write it at
    /// any time: this is a copy, never a reference).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn read_local<T: Plain>(&mut self, sym: &Sym<T>, at: usize, dst: &mut [T]) -> Result<()> {
        let off = self.check(sym, at, dst.len())?;
        let t = self.shm.get_start(
            self.me,
            off,
            dst.len() as u32 * size32::<T>(),
            self.sel_ctx(),
        )?;
        self.shm.get_poll(&t, dst.as_mut_bytes())?;
        Ok(())
    }

    /// Writes elements of this PE's own copy of `sym`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn write_local<T: Plain>(&mut self, sym: &Sym<T>, at: usize, src: &[T]) -> Result<()> {
        let off = self.check(sym, at, src.len())?;
        self.shm.put(self.me, off, src.as_bytes(), self.sel_ctx())?;
        Ok(())
    }

    // ---- put / get ------------------------------------------------------

    /// Writes `src` to elements `at..` of `pe`'s copy of `dst`. Returns when
    /// `src` may be reused; complete at `pe` after [`Context::quiet`] (or a
    /// barrier).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] (nothing written), [`Error::Route`], driver
    /// errors naming the peer.
    #[inline]
    pub fn put<T: Plain>(&mut self, dst: &Sym<T>, at: usize, src: &[T], pe: u32) -> Result<()> {
        let off = self.check(dst, at, src.len())?;
        let bytes = src.as_bytes();
        self.routed(pe, bytes.len() as u64, Op::Put, FrameOp::Put, |shm, r| {
            shm.put(pe, off, bytes, r.context)
        })
    }

    /// Non-blocking put from this PE's own copy of `src` (elements
    /// `src_at..src_at+count`) to `pe`'s copy of `dst` (from `dst_at`). The
    /// source must not change, and the target is not complete, until
    /// [`Context::quiet`].
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn put_nbi<T: Plain>(
        &mut self,
        dst: &Sym<T>,
        dst_at: usize,
        src: &Sym<T>,
        src_at: usize,
        count: usize,
        pe: u32,
    ) -> Result<()> {
        let doff = self.check(dst, dst_at, count)?;
        let soff = self.check(src, src_at, count)?;
        let len =
            u32::try_from(count * core::mem::size_of::<T>()).map_err(|_| Error::OutOfBounds {
                at: src_at,
                count,
                len: src.len,
            })?;
        self.routed(pe, u64::from(len), Op::Put, FrameOp::Put, |shm, r| {
            shm.put_from_heap(pe, doff, soff, len, r.context)
        })
    }

    /// Reads elements `at..at+dst.len()` of `pe`'s copy of `src` into `dst`;
    /// returns when they are there.
    ///
    /// # Errors
    ///
    /// As [`Context::put`], plus [`Error::Timeout`].
    #[inline]
    pub fn get<T: Plain>(&mut self, src: &Sym<T>, at: usize, dst: &mut [T], pe: u32) -> Result<()> {
        let off = self.check(src, at, dst.len())?;
        let len = u32::try_from(core::mem::size_of_val(dst)).map_err(|_| Error::OutOfBounds {
            at,
            count: dst.len(),
            len: src.len,
        })?;
        let dst = dst.as_mut_bytes();
        // Chunks a driver can buffer (TCP holds replies until polled).
        let chunk = self
            .tcp
            .as_ref()
            .map_or(u32::MAX, |t| t.max_get_len())
            .min(
                self.verbs
                    .as_ref()
                    .map_or(u32::MAX, |v| v.drv.max_get_len()),
            )
            .max(1);
        let mut done = 0u32;
        loop {
            let n = (len - done).min(chunk);
            let part = &mut dst[done as usize..(done + n) as usize];
            let at_off = off + u64::from(done);
            self.routed_wait(
                pe,
                u64::from(n),
                Op::Get,
                FrameOp::Get,
                "get",
                |d, r| d.get_start(pe, at_off, n, r.context),
                |d, t| Ok(d.get_poll(t, part)?.then_some(())),
            )?;
            done += n;
            if done >= len {
                break;
            }
        }
        Ok(())
    }

    /// Non-blocking get: elements `src_at..src_at+count` of `pe`'s copy of
    /// `src` land in this PE's copy of `dst` (from `dst_at`) by
    /// [`Context::quiet`].
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn get_nbi<T: Plain>(
        &mut self,
        dst: &Sym<T>,
        dst_at: usize,
        src: &Sym<T>,
        src_at: usize,
        count: usize,
        pe: u32,
    ) -> Result<()> {
        let doff = self.check(dst, dst_at, count)?;
        let soff = self.check(src, src_at, count)?;
        let len =
            u32::try_from(count * core::mem::size_of::<T>()).map_err(|_| Error::OutOfBounds {
                at: src_at,
                count,
                len: src.len,
            })?;
        self.routed(pe, u64::from(len), Op::Get, FrameOp::Get, |shm, r| {
            shm.get_into_heap(pe, soff, doff, len, r.context)
        })
    }

    // ---- atomics --------------------------------------------------------

    fn atomic<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        kind: AtomicKind,
        operand: T,
        compare: T,
        pe: u32,
    ) -> Result<T> {
        let off = self.check(sym, at, 1)?;
        let op = AtomicOp {
            kind,
            width: T::WIDTH,
            operand: operand.to_bits(),
            compare: compare.to_bits(),
        };
        let rop = if op.is_fetching() {
            Op::FetchingAtomic
        } else {
            Op::Atomic
        };
        let v = self.routed_wait(
            pe,
            T::WIDTH.bytes() as u64,
            rop,
            FrameOp::Atomic,
            "an atomic",
            |d, r| d.atomic_start(pe, off, op, r.context),
            |d, t| {
                if op.is_fetching() {
                    d.atomic_poll(t)
                } else {
                    // Complete by quiet, like a put.
                    Ok(Some(0))
                }
            },
        )?;
        Ok(T::from_bits(v))
    }

    /// Atomically adds `value` to element `at` of `pe`'s copy of `sym` and
    /// returns the old value.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    #[inline]
    pub fn fetch_add<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        value: T,
        pe: u32,
    ) -> Result<T> {
        self.atomic(sym, at, AtomicKind::FetchAdd, value, value, pe)
    }

    /// Atomically stores `new` if the element equals `expected`; returns the
    /// old value (equal to `expected` when it stored).
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn compare_swap<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        expected: T,
        new: T,
        pe: u32,
    ) -> Result<T> {
        self.atomic(sym, at, AtomicKind::CompareSwap, new, expected, pe)
    }

    /// Atomically stores `value`, returning the old value.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn swap<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<T> {
        self.atomic(sym, at, AtomicKind::Swap, value, value, pe)
    }

    /// Atomically reads the element.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn fetch<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, pe: u32) -> Result<T> {
        let z = T::from_bits(0);
        self.atomic(sym, at, AtomicKind::Fetch, z, z, pe)
    }

    /// Atomically adds `value` to element `at` of `pe`'s copy of `sym`
    /// (OpenSHMEM's `shmem_add`). Today a [`fetch_add`](Context::fetch_add)
    /// whose old value is dropped: it returns once applied.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn add<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<()> {
        self.atomic(sym, at, AtomicKind::FetchAdd, value, value, pe)
            .map(|_| ())
    }

    /// Atomically stores `value` (complete at `pe` after [`Context::quiet`]).
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn set<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<()> {
        self.atomic(sym, at, AtomicKind::Set, value, value, pe)
            .map(|_| ())
    }

    // ---- ordering and waiting ------------------------------------------

    /// Orders this PE's earlier puts and non-fetching atomics to each PE
    /// before its later ones. Each driver orders its own operations; when a
    /// peer's operations since the last quiet went over both verbs and TCP
    /// this is a [`quiet`](Context::quiet) (see the ordering rules in the
    /// [`verbs`] module docs).
    ///
    /// # Errors
    ///
    /// When a transport is unusable; as [`Context::quiet`] when it is one.
    #[inline]
    pub fn fence(&mut self) -> Result<()> {
        if self.order.mixed {
            self.stats.ordering_waits += 1;
            return self.quiet();
        }
        self.order.fence();
        self.shm.fence()?;
        if let Some(v) = self.verbs.as_mut() {
            v.drv.fence()?;
        }
        if let Some(t) = self.tcp.as_mut() {
            let r = t.get().fence();
            t.leave();
            r?;
        }
        Ok(())
    }

    /// Waits until every earlier operation of this PE is complete at its
    /// target (bounded by the op timeout).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], or the error of a failed operation naming its peer.
    pub fn quiet(&mut self) -> Result<()> {
        let r = self.quiet_in();
        self.leave();
        r
    }

    fn quiet_in(&mut self) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let shm = self.shm.quiet_poll()?;
            let verbs = self.verbs_quiet_poll()?;
            let tcp = match self.tcp.as_mut().map(progress::Tcp::get) {
                Some(t) => t.quiet_poll()?,
                None => true,
            };
            if shm && verbs && tcp {
                // Every write is complete: no ordering is owed.
                self.order.clear();
                // Nothing sent over TCP is still in flight: links that came
                // (back) up may take traffic now without overtaking it.
                self.verbs_raise();
                return Ok(());
            }
            // The drivers report a dead peer with operations pending; one
            // that died with nothing pending does not fail a quiet.
            self.pause(&mut spins, start, "quiet", Watch::Drivers)?;
        }
    }

    /// Waits until element `at` of this PE's own copy of `sym` compares to
    /// `value` as `cmp` says, and returns it. Bounded by the op timeout; fails
    /// early if a PE dies meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], [`Error::PeerDead`], [`Error::OutOfBounds`].
    pub fn wait_until<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
    ) -> Result<T> {
        let r = self.wait_until_in(sym, at, cmp, value);
        self.leave();
        r
    }

    fn wait_until_in<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
    ) -> Result<T> {
        let off = self.check(sym, at, 1)?;
        // Fast path: a tight spin on the word, nothing else, so a flag that
        // arrives soon is seen within one cache-line transfer. With TCP peers
        // every spin must also progress the sockets (the flag may come that way).
        let fast = if self.tcp.is_some() { 0 } else { FAST_SPINS };
        for _ in 0..fast {
            let v = T::from_bits(self.load_local(off, T::WIDTH)?);
            if cmp.holds(v, value) {
                return Ok(v);
            }
            core::hint::spin_loop();
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let v = T::from_bits(self.load_local(off, T::WIDTH)?);
            if cmp.holds(v, value) {
                return Ok(v);
            }
            self.pause(&mut spins, start, "wait_until", Watch::Any)?;
        }
    }

    /// An Acquire load of the own heap word at `off` (checked by the caller).
    #[inline]
    fn load_local(&self, off: u64, w: AtomicWidth) -> Result<u64> {
        Ok(self.shm.load_acquire(off, w)?)
    }

    /// Waits until every PE has called `barrier_all` (after a `quiet`: every
    /// PE's earlier operations are complete everywhere). A dissemination
    /// barrier: ⌈log2 n⌉ rounds, each a flag put to one PE and a wait on one
    /// local flag, over whatever transport reaches that PE.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] naming the PE not heard from, [`Error::PeerDead`].
    pub fn barrier_all(&mut self) -> Result<()> {
        let r = self.barrier_all_in();
        self.leave();
        r
    }

    fn barrier_all_in(&mut self) -> Result<()> {
        self.quiet()?;
        self.barrier_epoch += 1;
        let epoch = self.barrier_epoch;
        let n = self.n_pes;
        let mut dist = 1u32;
        let mut round = 0u64;
        while dist < n {
            let to = ((u64::from(self.me) + u64::from(dist)) % u64::from(n)) as u32;
            let from =
                ((u64::from(self.me) + u64::from(n) - u64::from(dist)) % u64::from(n)) as u32;
            let flag = round * 8;
            self.fence()?;
            self.put_raw(to, flag, &epoch.to_le_bytes())?;
            let mut fast = if self.tcp.is_some() { FAST_SPINS } else { 0 };
            while fast < FAST_SPINS && self.load_local(flag, AtomicWidth::W64)? < epoch {
                core::hint::spin_loop();
                fast += 1;
            }
            let start = Instant::now();
            let mut spins = 0u32;
            while self.load_local(flag, AtomicWidth::W64)? < epoch {
                if let Err(e) = self.pause(&mut spins, start, "barrier", Watch::Peer(from)) {
                    // `from` may have written the flag and exited since the load.
                    if self.load_local(flag, AtomicWidth::W64)? >= epoch {
                        break;
                    }
                    return Err(e);
                }
            }
            dist = dist.saturating_mul(2);
            round += 1;
            debug_assert!(round <= BARRIER_ROUNDS);
        }
        self.stats.barriers += 1;
        Ok(())
    }

    /// A put of raw bytes at a heap offset (the context's own reserved area).
    fn put_raw(&mut self, pe: u32, off: u64, bytes: &[u8]) -> Result<()> {
        self.routed(pe, bytes.len() as u64, Op::Put, FrameOp::Put, |shm, r| {
            shm.put(pe, off, bytes, r.context)
        })
    }

    /// One progress step of every driver; link-state changes flip health bits.
    fn poll_once(&mut self) {
        // The drivers' timers (heartbeats, ack delays, reconnects) are in
        // microseconds and up; reading the clock on every step of a wait cost
        // as much as the rest of the step.
        self.now_age = self.now_age.wrapping_add(1);
        if self.now_age.is_multiple_of(NOW_EVERY) {
            self.now_cache = self.now();
        }
        let now = self.now_cache;
        if self.shm.progress(now) == switchyard_core::transport::PollResult::Busy {
            for pe in 0..self.n_pes {
                let st = self.shm.state(pe);
                if st == LinkState::Error {
                    self.topo.apply_link_state(SHM, pe, st);
                    self.mark_dead(pe);
                }
            }
        }
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            t.progress(now);
            while let Some(ev) = self.tcp.as_mut().and_then(|t| t.get().poll_event()) {
                self.on_event(ev);
            }
        }
        if self.verbs.is_some() {
            self.verbs_poll(now);
        }
    }

    /// Applies one TCP driver event: a rail going down or up toward a peer
    /// flips that rail's health bit at once (the next select takes another
    /// rail or transport) and is told to the other PEs; a peer found dead is
    /// made unreachable through a new topology version.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Link { rail, peer, state } => {
                let r = usize::from(rail);
                if r >= MAX_TCP_RAILS {
                    return;
                }
                self.stats.link_transitions += 1;
                if state != LinkState::Up {
                    self.stats.links_lost += 1;
                }
                self.topo.apply_link_state(tcp_rail(r), peer, state);
                self.broadcast_link(peer, rail, state);
                if state == LinkState::Up {
                    self.verbs_tcp_up(peer);
                }
            }
            Event::PeerDead { peer } => self.mark_dead(peer),
            Event::LinkState { from, record } if verbs::Record::is_verbs(&record) => {
                self.verbs_record(from, &record);
            }
            Event::LinkState { from, record } => self.apply_link_record(from, &record),
            Event::Refused { .. } => {}
        }
    }

    /// Tells every other TCP-connected PE that `subject`'s `rail` changed
    /// state, as seen from here (a transition, never a periodic report).
    fn broadcast_link(&mut self, subject: u32, rail: u8, state: LinkState) {
        self.link_version += 1;
        let rec = LinkRecord {
            origin: self.me,
            subject,
            rail,
            state,
            version: self.link_version,
        }
        .encode();
        let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) else {
            return;
        };
        for pe in 0..self.n_pes {
            if pe != self.me
                && pe != subject
                && !self.dead[pe as usize]
                && t.peer_state(pe) == LinkState::Up
                && t.send_link_state(pe, rec).is_ok()
            {
                self.stats.link_records_sent += 1;
            }
        }
    }

    /// Applies another PE's link-state record: newer versions only; a rail
    /// reported down clears that rail's health bit toward the subject here
    /// too, one reported up sets it again only where this PE's own connection
    /// on that rail is up.
    fn apply_link_record(&mut self, from: u32, record: &[u8; 32]) {
        let Some(rec) = LinkRecord::decode(record) else {
            return;
        };
        let (o, r) = (rec.origin as usize, usize::from(rec.rail));
        if rec.origin != from
            || o >= self.link_seen.len()
            || rec.subject >= self.n_pes
            || rec.subject == self.me
            || r >= MAX_TCP_RAILS
            || rec.version <= self.link_seen[o]
        {
            return;
        }
        self.link_seen[o] = rec.version;
        let own_up = self
            .tcp
            .as_mut()
            .map(progress::Tcp::get)
            .is_some_and(|t| r < t.rails() && t.rail(r).state(rec.subject) == LinkState::Up);
        match rec.state {
            LinkState::Up if own_up => {
                self.topo.set_health(tcp_rail(r), rec.subject, true);
            }
            LinkState::Up => {}
            s => {
                self.topo.apply_link_state(tcp_rail(r), rec.subject, s);
            }
        }
        self.stats.link_records_applied += 1;
    }

    /// Marks `pe` dead: every transport's health bit toward it is cleared and
    /// a new topology version makes it unreachable, so every later operation
    /// to it fails at once naming it.
    fn mark_dead(&mut self, pe: u32) {
        let Some(d) = self.dead.get_mut(pe as usize) else {
            return;
        };
        if *d || pe == self.me {
            return;
        }
        *d = true;
        self.stats.dead_peers += 1;
        for t in 0..N_TRANSPORTS {
            self.topo.apply_link_state(tid(t), pe, LinkState::Error);
        }
        // The versioned update: this thread is the only writer; leave the
        // held version first so the writer may reuse its slot.
        self.sel.unpin();
        if let Some(mut w) = self.topo.writer()
            && let Ok(mut u) = w.try_update()
        {
            u.set_class(pe, PathClass::Unreachable);
            u.publish();
        }
    }

    /// Gives the TCP driver back (the end of a call into the library), so the
    /// progress thread may run while the application is outside.
    #[inline]
    fn leave(&mut self) {
        // Work requests batched during the call go out now: nothing waits
        // on the application's next call.
        if let Some(v) = self.verbs.as_mut() {
            v.drv.post_batches();
        }
        if let Some(t) = self.tcp.as_mut() {
            t.leave();
        }
    }

    /// Whether `pe` is known dead by any driver.
    fn is_dead(&mut self, pe: u32) -> bool {
        self.dead.get(pe as usize).copied().unwrap_or(false)
            || self.shm.state(pe) == LinkState::Error
            || self
                .tcp
                .as_mut()
                .is_some_and(|t| t.get().peer_state(pe) == LinkState::Error)
    }

    /// One step of a bounded wait: progress, dead-peer check, deadline, then
    /// spin or park as the progress mode says.
    fn pause(
        &mut self,
        spins: &mut u32,
        start: Instant,
        what: &'static str,
        watch: Watch,
    ) -> Result<()> {
        *spins = spins.saturating_add(1);
        if *spins == 1 {
            // Waiting: let a topology writer reuse the version we held.
            self.sel.unpin();
        }
        // With TCP peers every step polls the sockets (their frames are the
        // progress); shared memory alone needs only the liveness checks.
        if self.tcp.is_some() || (*spins).is_multiple_of(16) {
            self.poll_once();
        }
        if (*spins).is_multiple_of(64) {
            let (dead, pe) = match watch {
                Watch::Peer(p) => (self.is_dead(p).then_some(p), Some(p)),
                Watch::Any => ((0..self.n_pes).find(|&p| self.is_dead(p)), None),
                Watch::Drivers => (None, None),
            };
            if let Some(dead) = dead {
                return Err(Error::PeerDead { pe: dead, what });
            }
            let waited = start.elapsed();
            if waited > self.op_timeout {
                return Err(Error::Timeout { what, waited, pe });
            }
        }
        match self.progress {
            Progress::Busy => core::hint::spin_loop(),
            Progress::Adaptive { spin } => {
                if *spins < spin {
                    core::hint::spin_loop();
                } else if *spins < spin.saturating_add(64) {
                    std::thread::yield_now();
                } else {
                    let over = Duration::from_micros(u64::from((*spins - spin - 64).min(100)));
                    match self.tcp.as_mut().map(progress::Tcp::get) {
                        // Parks on the sockets: a frame wakes it at once.
                        Some(t) => t.wait(over),
                        None => std::thread::sleep(over),
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends this PE's part in the job: a final barrier (so no PE still uses
    /// this heap), then the bootstrap goodbye. The shared-memory object is
    /// unlinked when the context drops.
    ///
    /// # Errors
    ///
    /// Barrier or bootstrap errors (resources are released anyway).
    pub fn finalize(mut self) -> Result<()> {
        // From here on this thread progresses everything itself.
        if let Some(t) = self.tcp.as_mut() {
            t.stop();
        }
        // The barrier's last flags are puts like any other: quiet, so every
        // one is applied at its target before this PE closes its connections
        // (a flag still in flight would be lost with them).
        let mut r = self.barrier_all().and_then(|()| self.quiet());
        // Acks owed for what this PE applied go out now: in the bootstrap
        // barrier below it makes no data-path progress.
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            t.flush_acks();
        }
        // Then no PE closes its connections while another still waits for
        // an ack from it: a barrier through the bootstrap, which needs no
        // data-path progress (every PE's frames are acked by now).
        if r.is_ok()
            && let Some(b) = self.boot.as_mut()
        {
            r = b.barrier(self.op_timeout).map_err(Error::from);
        }
        let b = self.boot.take().map(|b| b.finish());
        // The hosted root (rank 0 under srun/mpirun) ends once everyone said
        // goodbye, or fails naming who did not, within its own timeout.
        let root = self.root.take().map(|h| {
            h.join()
                .unwrap_or(Err(switchyard_bootstrap::BootstrapError::Unusable))
        });
        // The verbs driver first: it registered the heap shm maps.
        if let Some(v) = self.verbs.as_mut() {
            let _ = v.drv.close();
        }
        let _ = self.shm.close();
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            let _ = t.close();
        }
        r?;
        if let Some(b) = b {
            b?;
        }
        if let Some(root) = root {
            root?;
        }
        Ok(())
    }
}

fn size32<T>() -> u32 {
    core::mem::size_of::<T>() as u32
}

/// Whose death ends a wait early.
#[derive(Debug, Clone, Copy)]
enum Watch {
    /// The PE the wait depends on.
    Peer(u32),
    /// Any PE (a local flag anyone may set).
    Any,
    /// None beyond what the drivers report (quiet).
    Drivers,
}

/// A link-state transition as broadcast between PEs (32 bytes, little-endian):
/// magic `"SYLS"`, origin PE `u32`, subject PE `u32`, rail `u8`, state `u8`
/// (0 up, 1 down, 2 error), 2 reserved bytes, version `u64` (per origin,
/// increasing), 8 reserved bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LinkRecord {
    origin: u32,
    subject: u32,
    rail: u8,
    state: LinkState,
    version: u64,
}

impl LinkRecord {
    const MAGIC: [u8; 4] = *b"SYLS";

    fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&Self::MAGIC);
        b[4..8].copy_from_slice(&self.origin.to_le_bytes());
        b[8..12].copy_from_slice(&self.subject.to_le_bytes());
        b[12] = self.rail;
        b[13] = match self.state {
            LinkState::Up => 0,
            LinkState::Down => 1,
            LinkState::Error => 2,
        };
        b[16..24].copy_from_slice(&self.version.to_le_bytes());
        b
    }

    fn decode(b: &[u8; 32]) -> Option<LinkRecord> {
        if b[..4] != Self::MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[16..24]);
        Some(LinkRecord {
            origin: u32_at(4),
            subject: u32_at(8),
            rail: b[12],
            state: match b[13] {
                0 => LinkState::Up,
                1 => LinkState::Down,
                2 => LinkState::Error,
                _ => return None,
            },
            version: u64::from_le_bytes(v),
        })
    }
}

#[cfg(test)]
mod link_record_test {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let r = LinkRecord {
            origin: 3,
            subject: 9,
            rail: 1,
            state: LinkState::Down,
            version: 42,
        };
        assert_eq!(LinkRecord::decode(&r.encode()), Some(r));
        let mut b = r.encode();
        b[13] = 7;
        assert_eq!(LinkRecord::decode(&b), None);
        let mut b = r.encode();
        b[0] = b'X';
        assert_eq!(LinkRecord::decode(&b), None);
    }
}
