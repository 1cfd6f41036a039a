//! The TCP driver shared by the application thread and the progress thread.
//!
//! A PE's peers on other nodes need it to make progress (apply their puts,
//! serve their gets and atomics, ack, send heartbeats) also while the
//! application computes and calls nothing. The progress thread does that, and
//! only that: it takes the driver when the application is not inside the
//! library, runs progress steps, and gives it back.
//!
//! # The hand-off
//!
//! One lock word, `lock` ([`EntryLock`], loom-checked in switchyard-core): bit
//! 0 says the driver is held, the bits above count the application's entries.
//! The application takes it lazily, at its first use of the driver in a call
//! ([`Tcp::get`]: one uncontended compare-exchange on a line its own core
//! holds), and gives it back when the call returns ([`Tcp::leave`]: one
//! store). The progress thread takes it only when the bit is clear and the
//! word did not change since it read it (an application entry always changes
//! it), holds it for a bounded burst of steps, and backs off (sleeping,
//! doubling up to its tick) while the application is inside, so an active
//! application is not slowed by it.
//!
//! * `busy` progress: the thread checks every [`BUSY_CHECK`] on a spinning core
//!   (touching the lock word that rarely keeps the application's line local).
//! * `adaptive`: it parks on the driver's epoll instance (its own descriptor,
//!   [`switchyard_socket::Parker`]) until input arrives or its tick (an eighth
//!   of the heartbeat window, at most [`MAX_TICK`]) passes, so heartbeats go
//!   out in time when nothing arrives.
//! * `dedicated`: the thread never sleeps: it runs a burst whenever the lock
//!   is free and spins on the word meanwhile, on the CPU it was pinned to
//!   (`progress_cpu`, resolved by [`crate::cpus::plan`]). Meant for a core
//!   of its own; it costs the application a cache miss on the lock word at
//!   its first driver use in a call.
//! * `caller`: no thread; progress happens only inside the application's calls.
//!
//! # Submission rings (`dedicated`)
//!
//! Under `dedicated`, a context does not take the driver for a small put
//! (at most [`INLINE`](super::submit::INLINE) bytes; a `put_signal` of at
//! most [`SIGNAL_INLINE`](super::submit::SIGNAL_INLINE)) routed to a TCP
//! rail: it copies the put into its own single-producer ring (the core's
//! [`SubmitRing`](switchyard_core::submit::SubmitRing), registered here at the context's
//! first such put, unregistered when its handle drops) and returns. Each
//! burst first drains every registered ring into the driver, then runs its
//! steps, which send them. Every other use of the driver by that context
//! ([`Tcp::get`]) first waits until the thread has taken everything the
//! context pushed, so nothing overtakes a ring entry, and fence and quiet
//! keep their meaning (quiet = drain the ring, then today's quiet). An
//! entry the driver refuses with a full window stays at the head for the
//! next burst; one it refuses with an error stops the ring, and the context
//! takes it and the rest back at its next operation (`submit.rs`). When the
//! thread has stopped, a context drains its ring itself.
//!
//! Driver events (link transitions, dead peers) the thread's steps produce stay
//! queued in the driver; the context applies them at its next progress step.
//! The thread also publishes the stats segment's shared part (state bits,
//! the driver's counters) when due, so `switchyard stat` stays current
//! while the application computes (`statseg.rs`, `Publisher`).
//!
//! # The verbs receive side
//!
//! When the context drives a verbs driver, each burst also polls that
//! driver's receive side ([`RecvSide`]: the receipts of the peers' puts, and
//! the shared receive queue re-posted), so peers putting to this PE over
//! verbs do not stall on RNR while the application computes. It has its own
//! try-lock ([`switchyard_core::lock::TryLock`]: the application's progress
//! skips a poll the thread is doing). So does each verbs QP set this PE
//! answers for a peer's context (`verbs/sets.rs`): their receive sides are
//! in a list the set's opening and closing change under a mutex, which the
//! thread takes with `try_lock` (a burst that finds it taken skips them).
//! The thread wakes on TCP input or its tick, not on verbs completions: a
//! target outside the library re-posts at least every tick, so it takes up
//! to `srq_depth` puts per tick without RNR. The rest of verbs (the send
//! side, events, the receipts handshake records) still runs only in the
//! application's calls.

#![allow(unsafe_code)]

use std::{
    cell::UnsafeCell,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use switchyard_core::{
    lock::{Entered, EntryLock},
    route::LoadWatermark,
    transport::Instant as CoreInstant,
};
use switchyard_socket::{Backlog, SignalFit, SocketDriver};

use super::{
    submit::{Entry as SubEntry, SubRing, Submit},
    verbs::{RecvSide, Verbs},
};

mod thread;

/// How often a busy progress thread looks at the lock word.
pub(super) const BUSY_CHECK: Duration = Duration::from_micros(20);
/// The longest an adaptive progress thread parks without looking.
pub(super) const MAX_TICK: Duration = Duration::from_millis(5);

/// The longest wait for a ring to drain before a use of the driver until
/// the context sets its op timeout ([`Tcp::set_op_timeout`]).
const DEFAULT_RING_WAIT: Duration = Duration::from_secs(30);

/// Where a context's submission ring stands ([`Tcp::ring_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RingState {
    /// Everything submitted was taken.
    Empty,
    /// The thread stopped at an error: the context takes the rest back.
    Stalled,
    /// Entries wait for the thread.
    Pending,
}

/// How the progress thread waits between bursts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ThreadMode {
    /// Spin, looking every [`BUSY_CHECK`].
    Busy,
    /// Park on the sockets, at most `tick`.
    Adaptive {
        /// The longest park.
        tick: Duration,
    },
    /// Never sleep: a burst whenever the application is out.
    Dedicated,
}

/// Where the progress thread runs, as it found itself once started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placed {
    /// Its kernel thread id (`/proc/self/task/<tid>`).
    pub(super) tid: i32,
    /// The CPU it is pinned to (`None`: not pinned, or pinning failed).
    pub(super) cpu: Option<u32>,
    /// Why pinning to the CPU asked for failed, when it did.
    pub(super) pin_error: Option<String>,
}

struct Shared {
    /// Who may use `driver`: the application (entries counted) or the
    /// progress thread.
    lock: EntryLock,
    stop: AtomicBool,
    /// Bursts the progress thread ran.
    bursts: AtomicU64,
    driver: UnsafeCell<SocketDriver>,
    /// The PE's verbs driver and link state, when it has one and no
    /// context has it checked out ([`Tcp::take_verbs`]): guarded by `lock`
    /// like `driver` (the progress thread never touches it).
    verbs: UnsafeCell<Option<Box<Verbs>>>,
    /// The verbs driver's receive side, polled in each burst too.
    verbs_recv: std::sync::OnceLock<RecvSide>,
    /// The receive sides of the verbs QP sets this PE answers for its
    /// peers' contexts (`verbs/sets.rs`), by key, polled in each burst too
    /// (taken with `try_lock`: a set opening or closing skips a burst's
    /// poll of them, never waits).
    set_recvs: std::sync::Mutex<Vec<(u64, RecvSide)>>,
    /// Whether `set_recvs` holds any (written under its mutex): a burst
    /// looks at the mutex only then, so a PE answering no set pays one
    /// load, not a `try_lock`, per burst.
    has_set_recvs: AtomicBool,
    /// The stats segment's publisher, run in each burst (when due).
    publisher: std::sync::OnceLock<std::sync::Mutex<super::statseg::Publisher>>,
    /// Contexts spinning to take the driver (see [`Tcp::contended`]).
    waiting: AtomicU32,
    /// The progress thread, once started (the PE's, whichever context
    /// started it).
    worker: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// Where it runs, once started.
    placed: std::sync::OnceLock<Placed>,
    /// The thread runs `dedicated`: contexts submit small TCP puts through
    /// their rings (`submit.rs`).
    dedicated: AtomicBool,
    /// The contexts' submission rings the thread drains in each burst.
    rings: std::sync::Mutex<Vec<Arc<SubRing>>>,
    /// The time base of the driver's `now` (the context's clock, set at
    /// the thread's start).
    clock: std::sync::OnceLock<Instant>,
    /// Tests: the thread runs no burst while set (a thread that does not
    /// drain the rings, as a descheduled one would not).
    #[cfg(test)]
    paused: AtomicBool,
}

// SAFETY: `driver` and `verbs` are only accessed by whoever holds `lock` (the
// application through `Tcp::get`, the progress thread in `burst`, which
// touches `driver` only), which takes with Acquire and gives back with
// Release, so accesses never overlap and each sees the previous holder's
// writes. `SocketDriver` and `Verbs` are `Send` (asserted below), so using
// them from any thread is sound.
unsafe impl Sync for Shared {}

const _: () = {
    const fn send<T: Send>() {}
    send::<SocketDriver>();
    send::<Verbs>();
};

/// A handle on the PE's TCP driver, with its progress thread when one runs.
///
/// Every context of the PE has one ([`Tcp::handle`]); they share the driver
/// through the one [`EntryLock`], each holding it from its first use in a
/// call to the call's end (or a wait's step), the others spinning meanwhile.
/// The first handle ([`Tcp::new`]) is the PE's own: dropping it stops the
/// progress thread; the others only give the driver back.
pub(super) struct Tcp {
    shared: Arc<Shared>,
    /// The application's entry while it holds the driver.
    held: Option<Entered>,
    /// Whether this is the PE's own handle (it stops the thread when dropped).
    owner: bool,
    /// The driver's longest get (a constant of its configuration).
    max_get_len: u32,
    /// Whether a `put_signal` fits one frame (a constant of the driver's
    /// configuration).
    signal_fit: SignalFit,
    /// This context's submission ring, once registered (`dedicated` only).
    sub: Option<Submit>,
    /// The ring may hold entries not taken yet: the next [`Tcp::get`] waits
    /// for them first.
    pending: bool,
    /// No ring for this handle (the thread is not `dedicated`, or is gone).
    ring_off: bool,
    /// The context is re-issuing its stalled ring's entries itself.
    redoing: bool,
    /// The longest wait for the ring to drain before a use of the driver
    /// (the context's op timeout).
    op_timeout: Duration,
    /// A wait for the ring to drain before a use of the driver ran past
    /// `op_timeout`: the peer of the entry it waited on (when known) and
    /// how long; returned once by the context's next operation or wait
    /// step ([`Tcp::take_ring_timeout`]).
    ring_timeout: Option<(Option<u32>, Duration)>,
    /// The context has the PE's verbs state checked out
    /// ([`Tcp::take_verbs`]): [`Tcp::leave`] keeps the driver until the
    /// context puts it back ([`Tcp::put_verbs`]), as the verbs state is
    /// only ever out of its cell while the TCP driver is held (the lock
    /// order: TCP, then verbs).
    verbs_out: bool,
    /// The ring's load hint as last seen ([`Tcp::ring_hint`]).
    last_hint: u32,
}

impl core::fmt::Debug for Tcp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tcp")
            .field("held", &self.held.is_some())
            .field("thread", &self.has_thread())
            .finish()
    }
}

impl Tcp {
    /// Wraps the driver; no progress thread yet.
    pub(super) fn new(driver: SocketDriver) -> Tcp {
        let max_get_len = driver.max_get_len();
        let signal_fit = driver.signal_fit();
        Tcp {
            shared: Arc::new(Shared {
                lock: EntryLock::new(),
                stop: AtomicBool::new(false),
                bursts: AtomicU64::new(0),
                driver: UnsafeCell::new(driver),
                verbs: UnsafeCell::new(None),
                verbs_recv: std::sync::OnceLock::new(),
                set_recvs: std::sync::Mutex::new(Vec::new()),
                has_set_recvs: AtomicBool::new(false),
                publisher: std::sync::OnceLock::new(),
                waiting: AtomicU32::new(0),
                worker: std::sync::Mutex::new(None),
                placed: std::sync::OnceLock::new(),
                dedicated: AtomicBool::new(false),
                rings: std::sync::Mutex::new(Vec::new()),
                clock: std::sync::OnceLock::new(),
                #[cfg(test)]
                paused: AtomicBool::new(false),
            }),
            held: None,
            owner: true,
            max_get_len,
            signal_fit,
            sub: None,
            pending: false,
            ring_off: false,
            redoing: false,
            op_timeout: DEFAULT_RING_WAIT,
            ring_timeout: None,
            verbs_out: false,
            last_hint: 0,
        }
    }

    /// Another handle on the same driver, for another context of the PE
    /// (not holding it).
    pub(super) fn handle(&self) -> Tcp {
        Tcp {
            shared: Arc::clone(&self.shared),
            held: None,
            owner: false,
            max_get_len: self.max_get_len,
            signal_fit: self.signal_fit,
            sub: None,
            pending: false,
            ring_off: false,
            redoing: false,
            op_timeout: self.op_timeout,
            ring_timeout: None,
            verbs_out: false,
            last_hint: 0,
        }
    }

    /// Sets the longest wait for this handle's ring to drain before a use
    /// of the driver (the context's op timeout).
    pub(super) fn set_op_timeout(&mut self, t: Duration) {
        self.op_timeout = t;
    }

    /// Starts the progress thread (once). `clock` is the context's time base
    /// (the driver's `now` must not go backwards between the two threads);
    /// `cpu` pins the thread. Returns once the thread runs, pinned: where it
    /// is (also when it already ran).
    ///
    /// # Errors
    ///
    /// When the thread or its epoll descriptor cannot be created.
    pub(super) fn start(
        &mut self,
        mode: ThreadMode,
        clock: Instant,
        cpu: Option<u32>,
        pe: u32,
    ) -> std::io::Result<Placed> {
        if self.has_thread()
            && let Some(p) = self.placed()
        {
            return Ok(p.clone());
        }
        let parker = self
            .enter()
            .parker()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let _ = self.shared.clock.set(clock);
        self.shared
            .dedicated
            .store(mode == ThreadMode::Dedicated, Ordering::Release);
        let shared = Arc::clone(&self.shared);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let h = std::thread::Builder::new()
            .name(format!("sy-progress-{pe}"))
            .spawn(move || {
                let placed = thread::place(cpu);
                let _ = tx.send(placed.clone());
                let _ = shared.placed.set(placed);
                thread::run(&shared, &parker, mode, clock);
            })?;
        let placed = rx
            .recv()
            .map_err(|_| std::io::Error::other("the progress thread ended at its start"))?;
        *self.worker() = Some(h);
        Ok(placed)
    }

    /// Where the progress thread runs, once started.
    pub(super) fn placed(&self) -> Option<&Placed> {
        self.shared.placed.get()
    }

    /// The driver, taken for this thread until [`Tcp::leave`] (at once when
    /// already taken; otherwise after at most one burst of the progress
    /// thread). With entries of this context's ring not taken yet, first
    /// waits for them, at most the op timeout (`Tcp::wait_ring`).
    #[inline]
    pub(super) fn get(&mut self) -> &mut SocketDriver {
        if self.held.is_none() {
            if self.pending {
                self.wait_ring();
            }
            self.acquire();
        }
        // SAFETY: this thread holds the lock (`held` is set), so nobody else
        // touches the driver until `leave`, which needs `&mut self` and so
        // cannot run while the returned borrow lives.
        unsafe { &mut *self.shared.driver.get() }
    }

    #[cold]
    fn acquire(&mut self) {
        // Acquire: the last holder's writes to the driver are visible.
        if let Some(entry) = self.shared.lock.try_enter() {
            self.held = Some(entry);
            return;
        }
        // Another context (or the progress thread) holds it: say so, so a
        // waiting holder gives it up rather than park with it.
        self.shared.waiting.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0u32;
        loop {
            if let Some(entry) = self.shared.lock.try_enter() {
                self.held = Some(entry);
                self.shared.waiting.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // The holder may be preempted (more threads than cores): let
                // it run.
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Submits one small put through this context's ring (`dedicated`
    /// only; registers the ring at the first). False when it must take the
    /// existing path: no ring here, the ring full or stalled, or the driver
    /// held by this handle (nothing is pushed then).
    #[inline]
    pub(super) fn submit(
        &mut self,
        e: SubEntry,
        me: u32,
        load: Option<(LoadWatermark, Backlog)>,
    ) -> bool {
        if self.held.is_some() || self.ring_off {
            return false;
        }
        let Some(s) = self.sub.as_mut() else {
            return self.submit_first(e, me, load);
        };
        if s.ring().stalled() || !s.push(e) {
            return false;
        }
        self.pending = true;
        true
    }

    /// The first submission: registers a ring with the progress thread
    /// when it runs `dedicated`, else marks this handle as having none.
    #[cold]
    fn submit_first(
        &mut self,
        e: SubEntry,
        me: u32,
        load: Option<(LoadWatermark, Backlog)>,
    ) -> bool {
        if !self.shared.dedicated.load(Ordering::Acquire)
            || self.shared.stop.load(Ordering::Acquire)
            || !self.has_thread()
        {
            self.ring_off = true;
            return false;
        }
        let s = Submit::new(me, load);
        self.rings().push(Arc::clone(s.ring()));
        self.sub = Some(s);
        self.submit(e, me, load)
    }

    /// The load hint of this context's ring, when it changed since the
    /// last call and names a pair (`submit::hint_pair`): one load of the
    /// ring's state word, which the push just read.
    #[inline]
    pub(super) fn ring_hint(&mut self) -> Option<u32> {
        let h = self.sub.as_ref()?.ring().hint();
        if h == self.last_hint {
            return None;
        }
        self.last_hint = h;
        (h != 0).then_some(h)
    }

    /// The registration list.
    fn rings(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SubRing>>> {
        self.shared
            .rings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the progress thread took everything this context
    /// submitted, or the ring stalled at an error (the context then takes
    /// the rest back, [`Context::ring_sync`](super::Context)). When the
    /// thread is gone, drains the ring itself. Not holding the driver.
    ///
    /// Bounded by the op timeout: past it, the wait ends with the entries
    /// still in the ring and the timeout recorded, returned once by the
    /// context's next operation or wait step ([`Tcp::take_ring_timeout`]).
    /// The use of the driver that waited goes on: every operation that
    /// issues through the driver waits in `Context::ring_sync` first (and
    /// fails there), so what takes the driver after a timeout here is
    /// progress or control traffic, which no ring entry is ordered with.
    #[cold]
    #[inline(never)]
    fn wait_ring(&mut self) {
        let start = Instant::now();
        let mut spins = 0u32;
        while self.ring_step() == RingState::Pending {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                let waited = start.elapsed();
                if waited > self.op_timeout {
                    let pe = self.ring_head_pe();
                    self.ring_timeout.get_or_insert((pe, waited));
                    return;
                }
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Issues what this context's ring holds under the driver lock (taken
    /// from the thread), making progress for a full send window, at most
    /// the op timeout; a stalled ring is left as it is.
    #[cold]
    fn drain_here(&mut self) {
        let Some(ring) = self.sub.as_ref().map(|s| Arc::clone(s.ring())) else {
            return;
        };
        let start = Instant::now();
        self.acquire();
        // SAFETY: this handle holds the lock (`acquire`); see `Shared`.
        let d = unsafe { &mut *self.shared.driver.get() };
        while !ring.is_empty() && !ring.stalled() && start.elapsed() < self.op_timeout {
            if ring.drain(d) == 0
                && let Some(clock) = self.shared.clock.get()
            {
                let now = CoreInstant::from_nanos(clock.elapsed().as_nanos() as u64);
                d.progress(now);
            }
        }
        self.leave();
    }

    /// The peer of the oldest entry of this context's ring not taken yet,
    /// when it can be read (`None` while the thread is taking entries).
    pub(super) fn ring_head_pe(&self) -> Option<u32> {
        self.sub.as_ref().and_then(|s| s.ring().head_pe())
    }

    /// The timeout a wait for the ring to drain met (the peer of the entry
    /// it waited on, how long), once.
    #[inline]
    pub(super) fn take_ring_timeout(&mut self) -> Option<(Option<u32>, Duration)> {
        self.ring_timeout.take()
    }

    /// Whether the context re-issues its stalled ring's entries now (they
    /// were counted when submitted).
    #[inline]
    pub(super) fn redoing(&self) -> bool {
        self.redoing
    }

    /// Tests: holds the progress thread off its bursts (`on`) or lets it
    /// run again. A burst running now ends first.
    #[cfg(test)]
    pub(super) fn debug_pause(&self, on: bool) {
        self.shared.paused.store(on, Ordering::SeqCst);
        if on && self.held.is_none() {
            // Take the driver once: a burst that began before the store has
            // ended then, and every later one sees the flag (it reads it
            // holding the lock).
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Some(entry) = self.shared.lock.try_enter() {
                    self.shared.lock.leave(entry);
                    return;
                }
                std::thread::yield_now();
            }
            panic!("the progress thread held the driver for 5 s");
        }
    }

    /// Tests: this handle's ring.
    #[cfg(test)]
    pub(super) fn debug_ring(&self) -> Option<Arc<SubRing>> {
        self.sub.as_ref().map(|s| Arc::clone(s.ring()))
    }

    /// Where this context's ring stands: empty (everything submitted was
    /// taken), stalled, or pending. One step of [`Tcp::wait_ring`]: when
    /// the thread is gone, drains what it can itself (making progress for
    /// a full send window). Not holding the driver.
    pub(super) fn ring_step(&mut self) -> RingState {
        let Some(s) = self.sub.as_ref() else {
            self.pending = false;
            return RingState::Empty;
        };
        if s.ring().is_empty() {
            self.pending = false;
            return RingState::Empty;
        }
        if s.ring().stalled() {
            return RingState::Stalled;
        }
        if self.shared.stop.load(Ordering::Acquire) && self.held.is_none() {
            let ring = Arc::clone(s.ring());
            self.acquire();
            // SAFETY: this handle holds the lock (`acquire`); see `Shared`.
            let d = unsafe { &mut *self.shared.driver.get() };
            if ring.drain(d) == 0
                && let Some(clock) = self.shared.clock.get()
            {
                let now = CoreInstant::from_nanos(clock.elapsed().as_nanos() as u64);
                d.progress(now);
            }
            self.leave();
        }
        RingState::Pending
    }

    /// Whether this context may have submitted entries not taken yet.
    #[inline]
    pub(super) fn ring_pending(&self) -> bool {
        self.pending
    }

    /// Whether this context's ring stopped at an error and must be taken
    /// back ([`Context::ring_sync`](super::Context)); false while it is.
    #[inline]
    pub(super) fn ring_stalled(&self) -> bool {
        !self.redoing && self.sub.as_ref().is_some_and(|s| s.ring().stalled())
    }

    /// This context's ring, while it re-issues its stalled entries (`on`),
    /// and after (`!on`).
    pub(super) fn redo(&mut self, on: bool) -> Option<Arc<SubRing>> {
        self.redoing = on;
        self.sub.as_ref().map(|s| Arc::clone(s.ring()))
    }

    /// Lets this handle submit through its ring (`on`, the default) or not;
    /// what it submitted is taken first.
    pub(super) fn set_ring(&mut self, on: bool) {
        if !on && self.pending && self.held.is_none() {
            self.wait_ring();
        }
        self.ring_off = !on;
    }

    /// Whether this handle submits through a ring (tests).
    #[cfg(test)]
    pub(super) fn has_ring(&self) -> bool {
        self.sub.is_some()
    }

    /// The driver for one step, given back when the returned guard drops
    /// (at the end of the statement, for a temporary):
    /// `t.enter().fence()`.
    #[inline]
    pub(super) fn enter(&mut self) -> Entry<'_> {
        self.get();
        Entry(self)
    }

    /// Whether another context of the PE is spinning to take the driver: a
    /// wait should not park on the sockets holding it then.
    #[inline]
    pub(super) fn contended(&self) -> bool {
        self.shared.waiting.load(Ordering::Relaxed) > 0
    }

    /// Gives the driver back (no-op when not taken), so the progress thread
    /// may run while the application is outside the library.
    /// While the context has the verbs state checked out it keeps the
    /// driver: the context's own `leave` puts the verbs state back first.
    #[inline]
    pub(super) fn leave(&mut self) {
        if self.verbs_out {
            return;
        }
        if let Some(entry) = self.held.take() {
            // Release: publishes this thread's driver writes to the next
            // holder.
            self.shared.lock.leave(entry);
        }
    }

    /// Takes the PE's verbs state out of its cell for this context, taking
    /// the TCP driver first (so the lock order is always TCP, then verbs):
    /// `None` when the PE has none. The TCP driver stays held until
    /// [`Tcp::put_verbs`] gives it back.
    #[inline]
    pub(super) fn take_verbs(&mut self) -> Option<Box<Verbs>> {
        self.get();
        // SAFETY: this handle holds the lock (`get`); see `Shared`.
        let v = unsafe { (*self.shared.verbs.get()).take() };
        self.verbs_out |= v.is_some();
        v
    }

    /// Puts the verbs state back into its cell (this handle holds the TCP
    /// driver since [`Tcp::take_verbs`], or takes it now), so that
    /// [`Tcp::leave`] gives the driver back again.
    #[inline]
    pub(super) fn put_verbs(&mut self, v: Box<Verbs>) {
        self.get();
        // SAFETY: this handle holds the lock (`get`); see `Shared`.
        unsafe { *self.shared.verbs.get() = Some(v) };
        self.verbs_out = false;
    }

    /// Reads the PE's verbs state in its cell (`None` when checked out or
    /// absent), taking the lock for the read when this handle does not
    /// hold it (spinning while another context does).
    pub(super) fn peek_verbs<R>(&self, f: impl FnOnce(Option<&Verbs>) -> R) -> R {
        if self.held.is_some() {
            // SAFETY: this handle holds the lock; `&self` keeps `take_verbs`
            // and `put_verbs` (which need `&mut self`) out meanwhile.
            return f(unsafe { (*self.shared.verbs.get()).as_deref() });
        }
        let mut spins = 0u32;
        let entry = loop {
            // Acquire: the last holder's writes to the cell are visible.
            if let Some(e) = self.shared.lock.try_enter() {
                break e;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        };
        // SAFETY: the lock is held (`entry`) until the `leave` below.
        let r = f(unsafe { (*self.shared.verbs.get()).as_deref() });
        self.shared.lock.leave(entry);
        r
    }

    /// Whether this handle holds the driver now (taken in this call).
    #[inline]
    pub(super) fn held(&self) -> bool {
        self.held.is_some()
    }

    /// Whether a `put_signal` fits one frame, without the driver.
    #[inline]
    pub(super) fn signal_fit(&self) -> SignalFit {
        self.signal_fit
    }

    /// The driver's longest get, in bytes.
    #[inline]
    pub(super) fn max_get_len(&self) -> u32 {
        self.max_get_len
    }

    /// Lets the progress thread also poll a verbs driver's receive side
    /// (once; later calls are ignored).
    #[cfg_attr(
        not(feature = "verbs"),
        expect(dead_code, reason = "the verbs glue calls it")
    )]
    pub(super) fn set_verbs_recv(&self, r: RecvSide) {
        let _ = self.shared.verbs_recv.set(r);
    }

    /// Lets the progress thread also poll the receive side of a verbs QP
    /// set this PE answers (`key` names it for [`Tcp::drop_set_recv`]).
    #[cfg_attr(
        not(feature = "verbs"),
        expect(dead_code, reason = "the verbs glue calls it")
    )]
    pub(super) fn add_set_recv(&self, key: u64, r: RecvSide) {
        let mut v = self
            .shared
            .set_recvs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.retain(|(k, _)| *k != key);
        v.push((key, r));
        self.shared.has_set_recvs.store(true, Ordering::Release);
    }

    /// The set `key` closed: the progress thread stops polling it.
    #[cfg_attr(
        not(feature = "verbs"),
        expect(dead_code, reason = "the verbs glue calls it")
    )]
    pub(super) fn drop_set_recv(&self, key: u64) {
        let mut v = self
            .shared
            .set_recvs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.retain(|(k, _)| *k != key);
        self.shared
            .has_set_recvs
            .store(!v.is_empty(), Ordering::Release);
    }

    /// Lets the progress thread also publish the stats segment's shared
    /// part (once; later calls are ignored).
    pub(super) fn set_publisher(&self, p: super::statseg::Publisher) {
        let _ = self.shared.publisher.set(std::sync::Mutex::new(p));
    }

    /// The progress thread's slot.
    fn worker(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.shared
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a progress thread runs.
    pub(super) fn has_thread(&self) -> bool {
        self.worker().is_some()
    }

    /// Bursts the progress thread ran so far.
    pub(super) fn thread_bursts(&self) -> u64 {
        self.shared.bursts.load(Ordering::Relaxed)
    }

    /// Stops and joins the progress thread (within one tick). The driver is
    /// the application's alone afterwards.
    pub(super) fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let h = self.worker().take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

/// The TCP driver held for one step ([`Tcp::enter`]); given back on drop.
pub(super) struct Entry<'a>(&'a mut Tcp);

impl core::ops::Deref for Entry<'_> {
    type Target = SocketDriver;

    #[inline]
    fn deref(&self) -> &SocketDriver {
        // SAFETY: the handle holds the lock (taken in `Tcp::enter`) until
        // this guard drops, and the guard borrows the handle mutably, so no
        // other access through it overlaps; see `Shared`.
        unsafe { &*self.0.shared.driver.get() }
    }
}

impl core::ops::DerefMut for Entry<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut SocketDriver {
        self.0.get()
    }
}

impl Drop for Entry<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        self.leave();
        if self.sub.is_some() {
            // Everything submitted goes out before the ring does (a stalled
            // one was taken back by the context's drop, `ring_sync`).
            if self.pending {
                self.wait_ring();
                if self.ring_timeout.is_some() {
                    // The thread did not take them within the op timeout:
                    // issue them here rather than drop them with the ring.
                    self.drain_here();
                }
            }
            if let Some(s) = self.sub.take() {
                self.rings().retain(|r| !Arc::ptr_eq(r, s.ring()));
            }
        }
        if self.owner {
            // The thread must be gone before the driver (and the heap it
            // writes, owned by the PE's segment) is dropped.
            self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver() -> SocketDriver {
        SocketDriver::with_owned_heap(switchyard_socket::TcpConfig::default(), 1 << 16)
            .expect("a driver")
    }

    #[test]
    fn a_dedicated_thread_hands_the_driver_to_a_context_that_waits_for_it() {
        let mut t = Tcp::new(driver());
        t.start(ThreadMode::Dedicated, Instant::now(), None, 0)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.thread_bursts() == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(t.thread_bursts() > 0, "the dedicated thread never ran");
        // Back-to-back entries, as a context's locked operations make them:
        // each is served, none is left counted as waiting.
        let entries = t.shared.lock.entries();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut done = 0;
        while done < 2_000 && Instant::now() < deadline {
            let _ = t.get();
            t.leave();
            done += 1;
        }
        assert_eq!(done, 2_000, "entries starved past the deadline");
        assert!(t.shared.lock.entries() >= entries + 2_000);
        assert_eq!(t.shared.waiting.load(Ordering::Relaxed), 0);
        // Once the context is out, the thread runs again (the hand-over
        // ends within its grace window).
        let before = t.thread_bursts();
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.thread_bursts() == before && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(t.thread_bursts() > before, "no burst after the entries");
        t.stop();
    }

    #[test]
    fn the_application_and_the_thread_take_turns() {
        let mut t = Tcp::new(driver());
        t.start(
            ThreadMode::Adaptive {
                tick: Duration::from_millis(1),
            },
            Instant::now(),
            None,
            0,
        )
        .unwrap();
        assert!(t.has_thread());
        // Held: the thread cannot run a burst.
        let _ = t.get();
        let before = t.thread_bursts();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            t.thread_bursts(),
            before,
            "a burst ran while the application held the driver"
        );
        // Left: it runs at its tick.
        t.leave();
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.thread_bursts() == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            t.thread_bursts() > before,
            "no burst while the application was out"
        );
        // Entries are counted in the lock word; after leave only the
        // thread's bursts hold it (each ends within its BURST steps).
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.shared.lock.is_held() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!t.shared.lock.is_held(), "the lock stayed held after leave");
        let entries = t.shared.lock.entries();
        assert!(entries >= 2, "two entries counted, got {entries}");
        let _ = t.get();
        t.stop();
        assert!(!t.has_thread());
    }
}
