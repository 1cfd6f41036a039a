//! The Rust API: a [`Context`] per PE, symmetric allocation, put/get, atomics,
//! `wait_until`, `barrier_all`, `fence` and `quiet`.
//!
//! A `Context` belongs to one thread (`&mut self` everywhere, `Send`, not
//! `Sync`); several threads of one PE each make their own from the PE's
//! handle, [`Pe`] ([`Context::pe`], [`Pe::context`]): what they share and
//! what each has of its own is in `pe.rs`. A second [`Context::from_env`] in
//! a process gives a context on the PE the first one made.
//!
//! # The data path
//!
//! Every operation takes the same four steps; nothing on them allocates,
//! locks or formats (a counting-allocator test checks it):
//!
//! 1. **The operation** ([`Context::put`], [`Context::get`],
//!    [`Context::fetch_add`], ...; `rma.rs`, `atomic.rs`) checks the
//!    element range against its [`Sym`] handle and turns it into a heap
//!    offset and a length.
//! 2. **Select** (`route.rs`, `Context::routed`): the core's [`Selector`]
//!    picks the route for PE `pe`, `len` bytes and the kind of operation
//!    ([`Op`]) from this PE's topology row (the path class toward `pe`) and
//!    the health bits of each transport toward it: shared memory on the
//!    node, RDMA verbs toward NEAR peers (and long messages to ROUTED ones),
//!    TCP otherwise or when verbs is down. The result is a transport id
//!    ([`SHM`], [`VERBS`], [`TCP`] and the other TCP rails, [`tcp_rail`]).
//!    [`Context::route`] shows the choice without making it.
//! 3. **Driver** (`drv.rs`): the transport id is one arm of a `Drv` enum
//!    borrowing the driver for one call (static dispatch, no trait object):
//!    the [`ShmTransport`](switchyard_shm::ShmTransport), a [`Rail`](switchyard_socket::Rail) of the
//!    [`SocketDriver`](switchyard_socket::SocketDriver), or the
//!    `VerbsDriver` of `switchyard_verbs` (with the `verbs` feature), each
//!    implementing the core's [`Transport`]. The decision is then written
//!    to the route trace ring ([`Context::trace`], `trace.rs`).
//! 4. **Wire**: shared memory copies into the peer's mapped heap (atomics are
//!    CPU atomics on it); TCP sends frames of the core's wire format
//!    ([`switchyard_core::wire`]: a checked 64-byte header, CRC32C) and
//!    replays them after a reconnect; verbs posts RDMA WRITE, READ and
//!    atomic work requests on its queue pairs.
//!
//! When the driver fails toward `pe`, the health bit of that transport is
//! cleared and, where the route allows, the operation selects again (step 2)
//! and goes elsewhere: failover is the next select, not a separate path. A
//! full TCP send window, a get's reply or a fetching atomic's answer are
//! waited for in bounded steps (`wait.rs`, `Context::pause`), each a progress
//! step of every driver (`peers.rs`, `Context::poll_once`) that also applies
//! link-state changes.
//!
//! # Load
//!
//! A transport that keeps up is not enough: a TCP rail whose send window
//! toward a peer is nearly full, or a verbs link whose send queues toward it
//! are, should let the peer's next operations take another transport. The
//! topology row has a load bit per (transport, peer) beside its health bit,
//! and the route policy's rule 4 passes over a preferred transport whose
//! load bit is set for the next healthy one whose bit is not (when every
//! healthy one is loaded, the first is used: load never fails an
//! operation). The context sets and clears the bits (`load.rs`), with
//! `load_watermark` (`W`, percent;
//! [`PolicyConfig::load_watermark`](switchyard_core::route::PolicyConfig::load_watermark)):
//!
//! * **set** right after an operation was handed to a TCP rail or to
//!   verbs, when that (transport, peer)'s backlog is over `W` of its
//!   capacity (one O(1) read of the driver's counters and a compare; no
//!   allocation, no system call);
//! * **cleared** once the backlog is no longer over `W / 2`, re-checked for
//!   the loaded pairs only (at most [`MAX_LOADED`] at once) in every
//!   progress step, at the end of `quiet`, and after each operation routed
//!   around them.
//!
//! Backlog and capacity, per driver: a TCP rail's frames toward the peer
//! not yet acknowledged (or waiting for their reply), in frames against
//! 4096 and in bytes against `tcp_window` (over in either is over; both
//! capacities are the peer's, shared by its rails); verbs' work requests on
//! the peer's data queue pairs not yet known complete, against
//! `(sq_depth - 1) * data_qps` (atomics do not count; its completions are
//! polled before a bit is set or kept, so work the device finished is not
//! load). Shared memory has no queue and no load bit. `W = 100` turns the
//! bits off. Counted in [`Stats::load_transitions`] and
//! [`Stats::load_yields`]; a yield is traced
//! [`TraceRecord::LOAD`](switchyard_core::trace::TraceRecord::LOAD).
//!
//! Puts and gets yield; atomics do not (they take the first healthy
//! transport, as without load bits): moving one could change the agent
//! that executes it, the NIC or the target's CPU, which are not atomic with
//! each other on most devices (`verbs_atomics`), and verbs' atomics do not
//! queue behind the puts and gets its backlog counts. A yield splits a
//! peer's traffic over two rails or two transports, so:
//!
//! * puts to one word without a fence between them may land in either
//!   order (as OpenSHMEM allows; a fence orders them, across rails too);
//! * a get or fetching atomic over a TCP rail while another rail still
//!   holds frames toward that peer first waits until TCP is complete
//!   (`order.rs`, counted in [`Stats::ordering_waits`]), so it observes
//!   every earlier write of this PE to it; between verbs and TCP the
//!   ordering rules of [`verbs`] apply as for any split.
//!
//! # Where the rest is
//!
//! * init: from the environment `init.rs` ([`Context::from_env`]), from
//!   parts `parts.rs` ([`Setup`], [`PeerInfo`], [`Context::from_parts`]);
//! * the PE's handle and the contexts of its threads, what they share and
//!   what each has of its own: `pe.rs` ([`Pe`], [`Pe::context`]); a
//!   context's port on the shared-memory transport (its own leg table):
//!   `shm_port.rs`;
//! * the symmetric heap and its collective [`Context::alloc`]: `heap.rs`;
//! * [`Context::fence`], [`Context::quiet`] and the ordering of a peer's
//!   operations split over two transports: `order.rs` (the rules are in
//!   [`verbs`]);
//! * [`Context::wait_until`], [`Context::barrier_all`]: `wait.rs`;
//! * link events, link-state records between PEs, dead peers: `peers.rs`;
//! * the TCP progress thread: `progress.rs`; the verbs glue: [`verbs`];
//! * load bits: `load.rs`;
//! * counters ([`Stats`]): `stats.rs`; errors ([`Error`]): `error.rs`;
//! * what the C API needs beyond the typed API: `raw.rs`.
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

#[cfg(test)]
mod amo_test;
mod atomic;
#[cfg(test)]
mod broadcast_test;
mod call;
#[cfg(test)]
mod channel_test;
#[cfg(test)]
mod chanstats_test;
#[cfg(test)]
mod dedicated_test;
mod drv;
mod error;
mod first_use;
#[cfg(test)]
mod first_use_test;
mod heap;
mod init;
mod load;
#[cfg(test)]
mod locate_test;
mod order;
mod parts;
mod pe;
mod peers;
#[cfg(test)]
mod pes_test;
mod progress;
#[cfg(test)]
mod put_signal_test;
mod raw;
#[cfg(test)]
mod ring_test;
mod rma;
mod route;
#[cfg(test)]
mod shm_pair_test;
mod shm_port;
mod signal;
mod stats;
mod statseg;
#[cfg(test)]
mod statseg_test;
mod submit;
#[cfg(test)]
mod tcp_no_alloc_test;
#[cfg(test)]
mod tcp_pair_test;
#[cfg(test)]
mod tcp_refused_test;
#[cfg(test)]
mod threads_test;
mod trace;
#[cfg(test)]
mod trace_failover_test;
// The verbs glue, or without the `verbs` feature its stand-in: the same
// calls, no driver (the only place the feature chooses code).
#[cfg_attr(not(feature = "verbs"), path = "verbs_off.rs")]
pub mod verbs;
mod wait;
mod wait_set;
#[cfg(test)]
mod wait_test;

use std::time::{Duration, Instant};

pub use atomic::AtomicInt;
pub use error::{Error, Result};
use heap::BLOCK_ALIGN;
pub use heap::{Plain, Sym};
pub use init::InitOptions;
pub use load::MAX_LOADED;
pub use parts::{PeerInfo, Setup, SymmetricData};
pub use pe::{MAX_CONTEXTS, Pe};
pub use raw::Bitwise;
pub use signal::{Signal, SignalOp};
pub use stats::Stats;
use switchyard_core::{
    class::{PathClass, TransportId},
    route::{Op, Route, Selector},
    topology::Topology,
    trace::TraceWriter,
    transport::{Instant as CoreInstant, Transport},
};
pub use switchyard_shm::{Alias, HEAP_ALIGN, heap_align};
pub use trace::{TRACE_RECORDS, TraceDumper};
pub use wait::{Cmp, Progress};
pub use wait_set::WaitSet;

/// Transport id of shared memory.
pub const SHM: TransportId = tid(0);
/// Transport id of RDMA verbs.
pub const VERBS: TransportId = tid(1);
/// Transport id of TCP rail 0; rail `r` is [`tcp_rail`]`(r)`.
pub const TCP: TransportId = tid(2);
/// Most TCP rails a context drives.
pub const MAX_TCP_RAILS: usize = switchyard_socket::MAX_RAILS;
/// Number of transport ids in use: shm, verbs, and the TCP rails.
pub(crate) const N_TRANSPORTS: u8 = 2 + MAX_TCP_RAILS as u8;

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

/// Bytes at the start of the heap reserved for the context's own
/// synchronization (barrier flags); user blocks start after them.
pub const RESERVED: u64 = 4096;
/// Progress steps of a wait per clock reading (see `Context::poll_once`).
const NOW_EVERY: u32 = 8;

static NEXT_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One PE's handle on the job. See the [module docs](self).
///
/// Aligned to 128 bytes (two cache lines, the pair the adjacent-line
/// prefetcher fetches together): contexts side by side (a `Vec` of them,
/// one per thread) share no line, so one thread's bookkeeping stores (the
/// trace countdown, the ordering bits) never invalidate a line another
/// thread's context reads at every operation.
#[repr(align(128))]
pub struct Context {
    me: u32,
    n_pes: u32,
    job_id: u64,
    owner: u64,
    /// Declared before `shm`: dropped first, as it writes into shm's heap.
    tcp: Option<progress::Tcp>,
    /// The PE's verbs driver and link state while this context has them
    /// checked out (from its first verbs use in a call to the call's end,
    /// holding the TCP driver meanwhile: `pe.rs`); in the PE's cell
    /// otherwise.
    verbs: Option<Box<verbs::Verbs>>,
    /// This context's own verbs QP sets (`verbs/sets.rs`).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    vsets: verbs::Sets,
    /// Why there is no verbs driver, when init decided not to create one.
    verbs_why: Option<String>,
    /// `verbs_atomics` as configured.
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    verbs_atomics: crate::config::VerbsAtomics,
    /// `verbs_routed` as configured.
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    verbs_routed: bool,
    /// `verbs_context_sets` as configured: the context opens QP sets of
    /// its own and routes its verbs operations over them
    /// (`verbs/sets.rs`).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    verbs_sets_on: bool,
    /// Atomics leave RDMA out (the policy's atomic band is in use): the
    /// device's atomics are not atomic with respect to the CPU's.
    cpu_atomics_rule: bool,
    /// Why (`verbs::nic_atomics`); empty before verbs is attached.
    verbs_atomics_why: &'static str,
    /// Cross-transport ordering: per peer, the transports with writes that
    /// may not be complete.
    order: order::Order,
    /// Trace flags for the next [`Context::trace_route`] (set when the
    /// operation waited for ordering, or was a load yield).
    next_flags: u8,
    /// The load bits this context set, and the rule (`load.rs`).
    load: load::Load,
    /// This context's port on the PE's shared-memory transport.
    shm: shm_port::ShmPort,
    topo: Topology<'static>,
    sel: Selector<'static>,
    trace_ring: trace::Rings,
    trace: TraceWriter<'static>,
    /// Peers whose link failed since the last decision toward them.
    failover: trace::Failover,
    /// Ordinary decisions per trace record: 0 off, 1 all, N sampled
    /// (`trace`, [`TraceMode::every`](crate::config::TraceMode::every)).
    trace_every: u32,
    /// Ordinary decisions until the next sampled record (1 to
    /// `trace_every`).
    trace_left: u32,
    heap_len: u64,
    clock: Instant,
    op_timeout: Duration,
    progress: Progress,
    stats: Stats,
    /// The stats segment (`statseg.rs`).
    sx: statseg::Hook,
    /// Peers known dead (from any driver).
    dead: Vec<bool>,
    boot: Option<switchyard_bootstrap::Bootstrap>,
    /// `finalize`'s barrier where there is no bootstrap
    /// ([`Context::set_exit_barrier`]).
    exit_barrier: Option<ExitBarrier>,
    root: Option<
        std::thread::JoinHandle<std::result::Result<(), switchyard_bootstrap::BootstrapError>>,
    >,
    warnings: Vec<String>,
    /// Where the symmetric global variables are, when there are any.
    data: Option<SymmetricData>,
    /// The clock as `poll_once` last read it, and the steps since.
    now_cache: CoreInstant,
    now_age: u32,
    /// This context's lane: its bit among the PE's live contexts (the
    /// shared verbs state's loss reports name contexts by it).
    lane: u64,
    /// The verbs driver's longest get (`u32::MAX` without one).
    verbs_max_get: u32,
    /// The PE has a verbs driver (so the shm leg of a PE without one reads
    /// nothing shared for `verbs_holds`).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    verbs_pe: bool,
    /// When (ns on the clock) this context's last wait step took the
    /// entry lock (see [`pe::LOCK_SPACING`]).
    last_locked: u64,
    /// What this context shares with the PE's others (last: dropped after
    /// every handle on it).
    pe: std::sync::Arc<pe::PeInner>,
    /// One thread's (`Send`, not `Sync`).
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

/// An out-of-band barrier among a job's PEs, for [`Context::finalize`] on
/// contexts built from parts ([`Context::set_exit_barrier`]): called with
/// the time it may take, it returns `true` once every PE has called it, or
/// `false` when the time is up first. It runs without data-path progress.
pub type ExitBarrier = Box<dyn FnMut(Duration) -> bool + Send>;

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

    /// Warnings from init (huge pages or NUMA placement that fell back).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The route `select` gives for `len` bytes of `op` to `pe` (no trace).
    ///
    /// # Errors
    ///
    /// [`Error::Route`] when nothing reaches `pe` (also, with
    /// `cards = lazy` under the own root, for an off-node peer not yet
    /// used: see [`Context::class`]).
    pub fn route(&mut self, pe: u32, len: u32, op: Op) -> Result<Route> {
        self.sel.select(pe, len, op).map_err(Error::Route)
    }

    /// The path class toward `pe`. With `cards = lazy` under the own root
    /// (no PMIx), an off-node peer's locality comes with its card at the
    /// first operation toward it: until then its class is
    /// [`PathClass::Unreachable`] (so is its state in the statistics).
    pub fn class(&mut self, pe: u32) -> Option<PathClass> {
        self.sel.pin().class(pe)
    }

    /// Gives a context built with [`Context::from_parts`] (an embedding
    /// that brings its own bootstrap) the out-of-band barrier that
    /// [`Context::finalize`] needs: after its last data-path barrier and
    /// quiet, each PE waits there until every PE has acked what it was sent,
    /// so none closes its connections while another still waits for an ack
    /// from it. Without one, a PE built from parts may close under a peer's
    /// quiet, which then fails with [`Error::PeerDead`] or
    /// [`Error::Timeout`]. A context made by init has the bootstrap's
    /// barrier and ignores this.
    pub fn set_exit_barrier(&mut self, barrier: ExitBarrier) {
        self.exit_barrier = Some(barrier);
    }

    pub(crate) fn attach_bootstrap(
        &mut self,
        boot: switchyard_bootstrap::Bootstrap,
        root: Option<
            std::thread::JoinHandle<std::result::Result<(), switchyard_bootstrap::BootstrapError>>,
        >,
    ) {
        // With lazy cards the PE's contexts share it for card fetches.
        match self.pe.lazy.as_ref() {
            Some(lazy) => lazy.attach(boot),
            None => self.boot = Some(boot),
        }
        self.root = root;
    }

    #[inline]
    pub(super) fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    /// The heap offset of elements `at..at+count` of `sym`: one branch on
    /// the three conditions (this context's handle, no overflow, inside the
    /// block), the typed error out of line.
    #[inline(always)]
    pub(super) fn check<T>(&self, sym: &Sym<T>, at: usize, count: usize) -> Result<u64> {
        let end = at.wrapping_add(count);
        if (sym.owner == self.owner) & (end >= at) & (end <= sym.len) {
            // `at < sym.len` elements of a block inside the heap: no overflow.
            return Ok(sym.offset + (at * core::mem::size_of::<T>()) as u64);
        }
        Err(self.check_failed(sym.owner, at, count, sym.len))
    }

    /// The error of a range [`Context::check`] refused.
    #[cold]
    #[inline(never)]
    fn check_failed(&self, owner: u64, at: usize, count: usize, len: usize) -> Error {
        if owner != self.owner {
            Error::ForeignHandle
        } else {
            Error::OutOfBounds { at, count, len }
        }
    }

    pub(super) fn sel_ctx(&self) -> switchyard_core::route::ContextId {
        switchyard_core::route::ContextId {
            pe: self.me,
            seq: 0,
        }
    }

    /// Ends this PE's part in the job: a final barrier (so no PE still uses
    /// this heap), then the bootstrap goodbye. The shared-memory object is
    /// unlinked when the PE's last context drops. PE-level: call it on the
    /// context init made, once the PE's other contexts are done (they keep
    /// the mappings alive, but lose the progress thread and the TCP links).
    ///
    /// # Errors
    ///
    /// Barrier or bootstrap errors (resources are released anyway).
    pub fn finalize(mut self) -> Result<()> {
        self.pe
            .finalized
            .store(true, switchyard_core::sync::atomic::Ordering::Release);
        // From here on this thread progresses everything itself.
        if let Some(t) = self.tcp.as_mut() {
            t.stop();
        }
        // The barrier's last flags are puts like any other: quiet, so every
        // one is applied at its target before this PE closes its connections
        // (a flag still in flight would be lost with them).
        // The PE's drivers are closed below: this quiet completes both
        // shared drivers whatever this context used (a context's quiet
        // waits only for those it used, `order.rs`).
        let mut r = self.barrier_all().and_then(|()| {
            self.order.shared = order::V | order::T;
            self.quiet()
        });
        // Acks owed for what this PE applied go out now: in the bootstrap
        // barrier below it makes no data-path progress.
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            t.flush_acks();
        }
        // Then no PE closes its connections while another still waits for
        // an ack from it: a barrier through the bootstrap, which needs no
        // data-path progress (every PE's frames are acked by now).
        if self.boot.is_none()
            && let Some(lazy) = self.pe.lazy.as_ref()
        {
            self.boot = lazy.take_boot();
        }
        if r.is_ok() {
            if let Some(b) = self.boot.as_mut() {
                r = b.barrier(self.op_timeout).map_err(Error::from);
            } else if let Some(b) = self.exit_barrier.as_mut()
                && !b(self.op_timeout)
            {
                r = Err(Error::Timeout {
                    what: "the exit barrier",
                    waited: self.op_timeout,
                    pe: None,
                });
            }
        }
        let b = self.boot.take().map(|b| b.finish());
        // The hosted root (rank 0 under srun/mpirun) ends once everyone said
        // goodbye, or fails naming who did not, within its own timeout.
        let root = self.root.take().map(|h| {
            h.join()
                .unwrap_or(Err(switchyard_bootstrap::BootstrapError::Unusable))
        });
        // The verbs driver first: it registered the heap shm maps (the
        // PE's, shared by its contexts: they are done by now).
        if self.verbs_in()
            && let Some(v) = self.verbs.as_mut()
        {
            let _ = v.drv.close();
        }
        // (The shared-memory mappings go with the PE's last context.)
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
