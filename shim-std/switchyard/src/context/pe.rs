//! The process-wide part of a PE, shared by its contexts: [`Pe`], the handle
//! threads make their own contexts from ([`Pe::context`]).
//!
//! # What is shared, what is each context's
//!
//! Shared (one per PE, behind an `Arc`):
//!
//! * the shared-memory transport (its own segment and the peers' mappings),
//!   behind a mutex that only the slow path takes: every context has its own
//!   copy of the leg table (`ShmPort`), so puts, gets and atomics to same-node
//!   peers take no lock and write nothing another context reads;
//! * the TCP driver and its progress thread, shared through the driver's
//!   entry lock (`progress.rs`): a context holds it from its first TCP use
//!   in a call to the call's end, or to the end of a wait's step, and the
//!   other contexts spin meanwhile (one connection set per PE, not per
//!   context);
//! * the RDMA verbs driver and its link state (health bits, rebuilds, the
//!   receipts handshake, replays), in a cell guarded by that same entry
//!   lock: a context checks it out at its first verbs use in a call (taking
//!   the TCP driver first, so the lock order is always TCP, then verbs) and
//!   puts it back before it gives the TCP driver back. One QP set per PE:
//!   a context's `quiet` waits for every operation on the driver, the other
//!   contexts' included (per-context QP sets are future work, see
//!   docs/ARCHITECTURE.md). An operation lost in a failover is reported
//!   once to each context that had verbs operations to that PE in flight
//!   (its next `quiet`); a context with none there is not told;
//! * the topology row (health and load bits), each context reading it
//!   through its own reader slot and selector;
//! * the heap allocator (a mutex: `alloc` and `free` are collective and
//!   rare), the barrier's epoch (a mutex held for the whole barrier), the
//!   version counter of this PE's link-state records and, per origin PE,
//!   the newest version of its records applied here (whichever context
//!   pulled it from the driver);
//! * the configuration the contexts are made with.
//!
//! Each context's own: its route selector and context-id lane, its trace
//! ring (pooled: a dropped context's ring goes to the next one), its
//! counters ([`Stats`]) and its slot of the PE's stats
//! segment (pooled the same way; readers sum the slots), its record of the
//! load bits it set (the bits themselves are the topology's: any context
//! that routes around one re-checks and may clear it), its view of dead
//! peers, and `fence`/`quiet`: a context's quiet completes that context's
//! operations (on shared memory every operation is complete when it
//! returns; over TCP the quiet waits for the driver's, so also for the other
//! contexts' frames sent before it; over verbs likewise).
//!
//! A context's wait steps take the entry lock for TCP and verbs progress;
//! while other contexts of the PE are alive a context lets at least
//! [`LOCK_SPACING`] pass between two such steps of its own (checking its
//! condition meanwhile), so that contexts waiting at once do not pass the
//! lock back and forth on every step.
//!
//! # Collectives
//!
//! `alloc`, `free`, `barrier_all` and `finalize` are PE-level: per PE, one
//! context calls each, in the same order on every PE (any context of the PE;
//! a second context's barrier at the same time waits for the first one's).
//! `finalize` (the context init made) ends the PE's part in the job: the
//! other contexts are done and dropped before it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use switchyard_core::{
    route::{Policy, PolicyConfig, Selector, SelectorError},
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    topology::Topology,
    trace::TraceWriter,
};
use switchyard_shm::{ShmTransport, trace_object::TraceObject};

use super::{
    Context, Error, Progress, Result, Stats, SymmetricData, heap::SymAllocator, load, order,
    progress, shm_port::ShmPort, trace,
};
use crate::config::TraceMode;

/// Most contexts of one PE alive at once (reader slots of its topology,
/// which has one more, for the progress thread).
pub const MAX_CONTEXTS: usize = 64;

/// Least time between two progress steps of one context's wait that take
/// the entry lock, while other contexts of the PE are alive (see the
/// module docs).
pub(super) const LOCK_SPACING: std::time::Duration = std::time::Duration::from_micros(20);

/// What attaching the verbs driver set on the first context, copied into
/// every later one.
#[derive(Debug, Clone, Copy)]
pub(super) struct VerbsShape {
    /// The route policy (its `rdma_atomics` decided at attach).
    pub(super) policy: PolicyConfig,
    /// Atomics leave RDMA out (see `Context::cpu_atomics_rule`).
    pub(super) cpu_atomics_rule: bool,
    /// Why.
    pub(super) why: &'static str,
    /// `verbs_atomics` and `verbs_routed` as configured.
    pub(super) atomics: crate::config::VerbsAtomics,
    pub(super) routed: bool,
    /// `verbs_context_sets` as configured.
    pub(super) context_sets: bool,
    /// The driver's longest get.
    pub(super) max_get: u32,
}

/// What the contexts of one PE share (see the module docs).
pub(super) struct PeInner {
    pub(super) me: u32,
    pub(super) n_pes: u32,
    pub(super) job_id: u64,
    /// The symmetric handles' owner id (every context of the PE takes them).
    pub(super) owner: u64,
    pub(super) heap_len: u64,
    pub(super) data: Option<SymmetricData>,
    pub(super) op_timeout: std::time::Duration,
    pub(super) progress: Progress,
    /// The time base of every context and of the progress thread.
    pub(super) clock: std::time::Instant,
    /// The route policy, roles filled in.
    pub(super) policy: PolicyConfig,
    pub(super) topo: Topology<'static>,
    pub(super) trace_records: usize,
    pub(super) trace: TraceMode,
    /// What a TCP rail's backlog is measured against (load bits).
    pub(super) tcp_capacity: switchyard_socket::Backlog,
    /// Warnings from init, copied into each context.
    pub(super) warnings: Vec<String>,
    /// Set once a verbs driver is attached (it is in the TCP handle's cell
    /// then, `progress.rs`).
    pub(super) verbs: AtomicBool,
    /// What attaching it set on the first context (`None` before).
    pub(super) verbs_shape: Mutex<Option<VerbsShape>>,
    /// Peers (of the shared verbs state) whose in-doubt puts wait for
    /// their receipts: a copy of its `holding`, read without the lock by
    /// every operation (`Context::verbs_holds`).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    pub(super) verbs_holding: AtomicU32,
    /// The lanes whose next quiet must complete the shared verbs driver
    /// though they may have nothing on it: a copy of its
    /// `Verbs::attention`, published when the state goes back to its cell
    /// (`Context::verbs_back`), read without the lock by every quiet
    /// (`Context::verbs_attention`).
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs glue")
    )]
    pub(super) verbs_attention: AtomicU64,
    /// The contexts' lanes in use (bit `i`: lane `i`), each context's bit
    /// naming it in the shared verbs state's loss reports.
    pub(super) lanes: AtomicU64,
    /// Set by `finalize`: `from_env` makes no context on it any more.
    pub(super) finalized: AtomicBool,
    pub(super) alloc: Mutex<SymAllocator>,
    /// The barrier's epoch, held for a whole barrier.
    pub(super) barrier: Mutex<u64>,
    /// Versions of this PE's own link-state records.
    pub(super) link_version: AtomicU64,
    /// Per origin PE, the newest version of its link-state records applied
    /// by any context of this PE: an older record pulled later by another
    /// context is dropped (raised with `fetch_max`: monotonic).
    pub(super) link_seen: Box<[AtomicU64]>,
    /// Load bits set in the topology row now, by any context: a context
    /// whose own record is empty still re-checks (and may clear) them when
    /// it routes around one (`load.rs`).
    pub(super) load_bits: AtomicU32,
    /// Trace rings of dropped contexts, for the next ones.
    /// (The first context's trace object is the job's shared-memory one,
    /// removed when that context drops; the later contexts' are in process
    /// memory and come back here.)
    pub(super) rings: Mutex<Vec<&'static TraceObject>>,
    /// The PE's own TCP handle (dropping it stops the progress thread);
    /// before `shm`: the driver writes into the heap.
    pub(super) tcp: Option<progress::Tcp>,
    pub(super) shm: Arc<Mutex<ShmTransport>>,
    /// The stats segment (`stats = on`): each context takes a slot of it.
    pub(super) stats: Option<Arc<crate::statseg::StatsSegment>>,
    /// A topology reader slot reserved at init for the progress thread's
    /// stats publisher (taken when it starts).
    pub(super) spare_selector: Mutex<Option<Selector<'static>>>,
    /// `cards = lazy` over TCP: the bootstrap connection and the cards
    /// fetched at first use (`first_use.rs`); `None` when every card this
    /// PE uses was fetched at init.
    pub(super) lazy: Option<super::first_use::LazyCards>,
}

/// Locks `m`, whatever a panicking holder left.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PeInner {
    /// The next barrier's epoch, and the barrier held until the guard drops.
    pub(super) fn barrier(&self) -> MutexGuard<'_, u64> {
        lock(&self.barrier)
    }

    /// Trace rings of `trace_records` records and the initiator ring's
    /// writer: a dropped context's, or new ones in process memory.
    fn ring(&self) -> Result<(trace::Rings, TraceWriter<'static>)> {
        if let Some(obj) = lock(&self.rings).pop()
            && let Some(w) = obj.writer(switchyard_shm::trace_object::INITIATOR)
        {
            return Ok((trace::Rings { obj, dumps: 0 }, w));
        }
        trace::new_rings(
            self.trace_records,
            self.job_id,
            self.me,
            self.n_pes,
            false,
            &mut Vec::new(),
        )
    }

    /// Takes back the trace rings of a context being dropped, when they are
    /// in process memory.
    pub(super) fn give_ring(&self, obj: &'static TraceObject) {
        if obj.path().is_none() {
            lock(&self.rings).push(obj);
        }
    }
}

/// A PE of this process: [`Send`] and [`Sync`], cheap to clone, shared by
/// its threads, each of which makes its own [`Context`] from it
/// ([`Pe::context`]). See the [`context`](super) module docs for what the contexts of
/// a PE share.
#[derive(Clone)]
pub struct Pe {
    inner: Arc<PeInner>,
}

impl std::fmt::Debug for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pe")
            .field("me", &self.inner.me)
            .field("n_pes", &self.inner.n_pes)
            .field("job_id", &format_args!("{:016x}", self.inner.job_id))
            .finish_non_exhaustive()
    }
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Pe>();
};

impl Pe {
    /// This PE's number.
    pub fn my_pe(&self) -> u32 {
        self.inner.me
    }

    /// Number of PEs in the job.
    pub fn n_pes(&self) -> u32 {
        self.inner.n_pes
    }

    /// A new context on this PE, for the calling thread (or one it is moved
    /// to): its own route selector, trace ring and counters; puts, gets and
    /// atomics to same-node peers take no lock shared with other contexts.
    /// Not collective. Symmetric handles from any context of the PE are
    /// valid in every other.
    ///
    /// # Errors
    ///
    /// A PE that uses RDMA verbs shares its driver among its contexts as
    /// it shares TCP (see the [`context`](super) module docs).
    ///
    /// # Errors
    ///
    /// [`Error::NoContext`] when [`MAX_CONTEXTS`] contexts of this PE are
    /// alive; [`Error::TraceRecords`] as at init.
    pub fn context(&self) -> Result<Context> {
        Context::on(&self.inner)
    }
}

impl Context {
    /// A context on `pe`: what every context has of its own (see the
    /// module docs); the one init makes gets its verbs and bootstrap later.
    pub(super) fn on(pe: &Arc<PeInner>) -> Result<Context> {
        Context::on_rings(pe, pe.ring()?)
    }

    /// [`Context::on`] with its trace rings and the initiator ring's writer.
    pub(super) fn on_rings(
        pe: &Arc<PeInner>,
        (trace_ring, trace): (trace::Rings, TraceWriter<'static>),
    ) -> Result<Context> {
        let sel = Selector::new(&pe.topo, Policy::new(pe.policy)).map_err(|e| match e {
            SelectorError::NoReaderSlot => Error::NoContext {
                why: "as many contexts as the PE can have are alive (MAX_CONTEXTS)",
            },
            e => Error::Shm(switchyard_shm::ShmError::BadObject {
                path: std::path::PathBuf::new(),
                why: format!("selector: {e}"),
            }),
        })?;
        let lane = take_lane(&pe.lanes).ok_or(Error::NoContext {
            why: "as many contexts as the PE can have are alive (MAX_CONTEXTS)",
        })?;
        let shape = *lock(&pe.verbs_shape);
        let mut ctx = Context {
            me: pe.me,
            n_pes: pe.n_pes,
            job_id: pe.job_id,
            owner: pe.owner,
            tcp: pe.tcp.as_ref().map(progress::Tcp::handle),
            verbs: None,
            vsets: super::verbs::Sets::default(),
            verbs_why: None,
            verbs_atomics: crate::config::VerbsAtomics::Auto,
            verbs_routed: false,
            verbs_sets_on: false,
            cpu_atomics_rule: false,
            verbs_atomics_why: "",
            order: order::Order::default(),
            next_flags: 0,
            load: load::Load::new(pe.policy.load_watermark, pe.tcp_capacity),
            shm: ShmPort::new(&pe.shm),
            topo: pe.topo,
            sel,
            trace_ring,
            trace,
            failover: super::trace::Failover::default(),
            trace_every: pe.trace.every(),
            trace_left: pe.trace.every(),
            heap_len: pe.heap_len,
            clock: pe.clock,
            op_timeout: pe.op_timeout,
            progress: pe.progress,
            stats: Stats::default(),
            sx: super::statseg::Hook::on(pe.stats.as_ref()),
            dead: vec![false; pe.n_pes as usize],
            boot: None,
            exit_barrier: None,
            root: None,
            warnings: pe.warnings.clone(),
            data: pe.data,
            now_cache: switchyard_core::transport::Instant::from_nanos(0),
            now_age: super::NOW_EVERY - 1,
            lane,
            verbs_max_get: u32::MAX,
            verbs_pe: false,
            last_locked: 0,
            pe: Arc::clone(pe),
            _not_sync: std::marker::PhantomData,
        };
        if let Some(v) = shape {
            // A context made after attach: the same routing as the first.
            if ctx.sel.set_policy(Policy::new(v.policy)).is_ok() {
                ctx.cpu_atomics_rule = v.cpu_atomics_rule;
            }
            ctx.verbs_atomics_why = v.why;
            ctx.verbs_atomics = v.atomics;
            ctx.verbs_routed = v.routed;
            ctx.verbs_sets_on = v.context_sets;
            ctx.verbs_max_get = v.max_get;
            ctx.verbs_pe = true;
            ctx.order.enable(pe.n_pes);
        }
        Ok(ctx)
    }

    /// Checks the PE's verbs state out for this context when it has one
    /// and this context does not have it yet (taking the TCP driver first;
    /// both are given back together, [`Context::leave`]). Whether the
    /// context has it now.
    #[inline]
    pub(super) fn verbs_in(&mut self) -> bool {
        if self.verbs.is_some() {
            return true;
        }
        // Relaxed: set at attach, before any other context of the PE exists.
        if !self.pe.verbs.load(Ordering::Relaxed) {
            return false;
        }
        self.verbs_take()
    }

    #[cold]
    #[inline(never)]
    fn verbs_take(&mut self) -> bool {
        self.verbs = self.tcp.as_mut().and_then(progress::Tcp::take_verbs);
        self.verbs.is_some()
    }

    /// Puts the verbs state back into the PE's cell (before the TCP driver
    /// is given back).
    #[inline]
    pub(super) fn verbs_back(&mut self) {
        if let Some(mut v) = self.verbs.take() {
            // What the contexts' quiets read without the lock, when it
            // changed (before the state goes back: the lock's release
            // publishes it with the state).
            if let Some(a) = v.attention_changed() {
                // SYNC POINT with the Acquire load in
                // `Context::verbs_attention`.
                self.pe.verbs_attention.store(a, Ordering::Release);
            }
            match self.tcp.as_mut() {
                Some(t) => t.put_verbs(v),
                None => self.verbs = Some(v),
            }
        }
    }

    /// `f` on the PE's verbs state, wherever it is now (this context's, or
    /// its cell, read under the entry lock): `None` without one.
    pub(super) fn with_verbs<R>(&self, f: impl FnOnce(&super::verbs::Verbs) -> R) -> Option<R> {
        if let Some(v) = self.verbs.as_deref() {
            return Some(f(v));
        }
        if !self.pe.verbs.load(Ordering::Relaxed) {
            return None;
        }
        self.tcp.as_ref()?.peek_verbs(|v| v.map(f))
    }

    /// Whether other contexts of this PE are alive now.
    #[inline]
    pub(super) fn others(&self) -> bool {
        self.pe.lanes.load(Ordering::Relaxed) & !self.lane != 0
    }

    /// The PE this context is on: other threads make their own contexts
    /// from it ([`Pe::context`]).
    pub fn pe(&self) -> Pe {
        Pe {
            inner: Arc::clone(&self.pe),
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // What the progress thread refused from this context's ring is
        // issued before the ring goes (`submit.rs`).
        let _ = self.ring_sync();
        // This context's last counts, before its slot goes to the next.
        self.sx_publish_pe();
        // The ring goes to the next context of the PE (its writer is
        // released when the field drops, right after this).
        self.pe.give_ring(self.trace_ring.obj);
        // This context's lane is free again: the shared verbs state
        // forgets it (its unreported losses go with it).
        // Its QP sets close, at both ends, once what it posted on them is
        // complete.
        self.verbs_sets_finish();
        self.verbs_close_sets();
        if self.verbs_in()
            && let Some(v) = self.verbs.as_mut()
        {
            v.losses.forget_lane(self.lane);
        }
        // The verbs state and the TCP driver go back to the PE.
        self.leave();
        self.pe.lanes.fetch_and(!self.lane, Ordering::AcqRel);
    }
}

/// Takes the lowest free lane of `lanes`: its bit.
fn take_lane(lanes: &AtomicU64) -> Option<u64> {
    let mut cur = lanes.load(Ordering::Relaxed);
    loop {
        let free = !cur;
        if free == 0 {
            return None;
        }
        let bit = free & free.wrapping_neg();
        match lanes.compare_exchange_weak(cur, cur | bit, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return Some(bit),
            Err(now) => cur = now,
        }
    }
}

/// The PEs this process made from the environment, by (job id, rank): a
/// second `Context::from_env` makes a context on the same PE.
static PES: Mutex<Vec<(u64, u32, Weak<PeInner>)>> = Mutex::new(Vec::new());

/// The context of PE `rank` of job `job_id`: on the PE this process
/// already made from the environment when it is alive and not finalized,
/// else made by `init` (and recorded). Under the registry's lock, so two
/// threads asking at once get one PE.
pub(super) fn once(
    job_id: u64,
    rank: u32,
    init: impl FnOnce() -> Result<Context>,
) -> Result<Context> {
    let mut pes = lock(&PES);
    pes.retain(|(_, _, w)| w.strong_count() > 0);
    let live = pes
        .iter()
        .filter(|&&(j, r, _)| j == job_id && r == rank)
        .find_map(|(_, _, w)| w.upgrade())
        .filter(|p| !p.finalized.load(Ordering::Acquire));
    if let Some(inner) = live {
        return Pe { inner }.context();
    }
    let ctx = init()?;
    pes.push((job_id, rank, Arc::downgrade(&ctx.pe)));
    Ok(ctx)
}
