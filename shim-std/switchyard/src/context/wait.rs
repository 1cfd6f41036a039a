//! Waiting: `wait_until` on a local word, the dissemination barrier, and the
//! one wait step every blocking call makes ([`Context::step`]: progress,
//! dead-peer check, deadline, spin or park).
//!
//! What bounds a wait ([`Limit`]): a wait on local memory (`wait_until`,
//! the multi-word waits) or on live peers (a barrier) lasts as long as the
//! application takes, and ends with [`Error::PeerDead`] when a PE it depends
//! on dies; the op timeout bounds only what depends on a peer answering (a
//! get's reply, a quiet, a send window), which a dead or unreachable peer
//! never does; `wait_until_for` takes the caller's deadline.

use std::time::{Duration, Instant};

use switchyard_core::transport::AtomicWidth;

use super::{AtomicInt, Context, Error, Result, Sym};

/// Spins of a wait's fast path (a load and a pause instruction each, no clock,
/// no progress) before the bounded slow path starts.
const FAST_SPINS: u32 = 256;
/// Barrier flag words (one per dissemination round: enough for 2^32 PEs).
const BARRIER_ROUNDS: u64 = 32;
/// Yields between the spins and the first park of an adaptive wait.
const YIELDS: u32 = 64;

/// How waits (quiet, blocking gets, `wait_until`, barriers) use the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Spin on the core (pinned, dedicated cores).
    Busy,
    /// Spin `spin` rounds, then yield 64 times, then park (sleep, or wait on
    /// the sockets with TCP peers) in short steps (1, 2, 4, 8 µs, then
    /// 16 µs, with a 2 µs timer slack) for some 10 ms, then in 100 µs steps.
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
    pub(super) fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
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

impl Context {
    /// Waits until element `at` of this PE's own copy of `sym` compares to
    /// `value` as `cmp` says, and returns it.
    ///
    /// The word is local memory: the wait lasts as long as the application
    /// takes to set it (no op timeout: a quiet market is not an error). It
    /// ends early with [`Error::PeerDead`] when a PE dies meanwhile (within
    /// the drivers' detection window). [`Context::wait_until_for`] takes a
    /// deadline, [`Context::test`] does not wait.
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`], [`Error::OutOfBounds`].
    pub fn wait_until<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
    ) -> Result<T> {
        self.call().wait_until_in(sym, at, cmp, value, Limit::Peers)
    }

    /// [`Context::wait_until`] with a deadline: fails with
    /// [`Error::Timeout`] once `timeout` has passed without the comparison
    /// holding.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], [`Error::PeerDead`], [`Error::OutOfBounds`].
    pub fn wait_until_for<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
        timeout: Duration,
    ) -> Result<T> {
        self.call()
            .wait_until_in(sym, at, cmp, value, Limit::For(timeout))
    }

    /// Whether element `at` of this PE's own copy of `sym` compares to
    /// `value` as `cmp` says, after one progress step (so data arriving over
    /// TCP is applied). Never waits.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`], [`Error::ForeignHandle`].
    pub fn test<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
    ) -> Result<bool> {
        let off = self.check(sym, at, 1)?;
        self.call().poll_once();
        let v = T::from_bits(self.load_local(off, T::WIDTH)?);
        Ok(cmp.holds(v, value))
    }

    fn wait_until_in<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        cmp: Cmp,
        value: T,
        limit: Limit,
    ) -> Result<T> {
        let off = self.check(sym, at, 1)?;
        let mut seen = value;
        self.wait_on("wait_until", Watch::Any, limit, |c| {
            seen = T::from_bits(c.load_local(off, T::WIDTH)?);
            Ok(cmp.holds(seen, value))
        })?;
        Ok(seen)
    }

    /// Waits until `ready` holds: first a tight spin (a call of `ready` and
    /// a pause instruction each, no clock, no progress; none with TCP peers,
    /// whose frames need progress), then the bounded steps of
    /// [`Context::step`] until `limit`. A wait that fails (a PE died, the
    /// deadline passed) looks once more: the peer may have set the word and
    /// exited since the last look.
    pub(super) fn wait_on(
        &mut self,
        what: &'static str,
        watch: Watch,
        limit: Limit,
        mut ready: impl FnMut(&mut Context) -> Result<bool>,
    ) -> Result<()> {
        let fast = if self.tcp.is_some() { 0 } else { FAST_SPINS };
        for _ in 0..fast {
            if ready(self)? {
                return Ok(());
            }
            core::hint::spin_loop();
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if ready(self)? {
                return Ok(());
            }
            if let Err(e) = self.step(&mut spins, start, what, watch, limit) {
                return if ready(self)? { Ok(()) } else { Err(e) };
            }
        }
    }

    /// An Acquire load of the own heap word at `off` (checked by the caller).
    #[inline]
    pub(super) fn load_local(&self, off: u64, w: AtomicWidth) -> Result<u64> {
        Ok(self.shm.load_acquire(off, w)?)
    }

    /// Waits until every PE has called `barrier_all` (after a `quiet` of
    /// this context: the earlier operations of every PE's barrier context
    /// are complete everywhere; other threads' contexts quiet themselves).
    /// A dissemination
    /// barrier: ⌈log2 n⌉ rounds, each a flag put to one PE and a wait on one
    /// local flag, over whatever transport reaches that PE.
    ///
    /// A barrier waits as long as the PEs take to arrive while they are
    /// alive (no op timeout); it fails when the PE it waits on dies.
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`] naming the PE, [`Error::Timeout`] when the quiet
    /// before it or a flag put cannot complete toward a dead or unreachable
    /// peer.
    pub fn barrier_all(&mut self) -> Result<()> {
        self.call().barrier_all_in()
    }

    fn barrier_all_in(&mut self) -> Result<()> {
        self.quiet()?;
        // PE-level: one barrier of the PE's contexts at a time.
        let pe = std::sync::Arc::clone(&self.pe);
        let mut held = pe.barrier();
        *held += 1;
        let epoch = *held;
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
            self.wait_on("barrier", Watch::Peer(from), Limit::Peers, |c| {
                Ok(c.load_local(flag, AtomicWidth::W64)? >= epoch)
            })?;
            dist = dist.saturating_mul(2);
            round += 1;
            debug_assert!(round <= BARRIER_ROUNDS);
        }
        self.stats.barriers += 1;
        // A PE often sits outside the library after a barrier (between a
        // job's phases): what `switchyard stat` reads is current then too,
        // not only at the next timed publish of a progress step.
        self.sx_publish();
        Ok(())
    }

    /// One step of a wait bounded by the op timeout (what depends on a peer
    /// answering: a get's reply, a send window, quiet): see [`Context::step`].
    pub(super) fn pause(
        &mut self,
        spins: &mut u32,
        start: Instant,
        what: &'static str,
        watch: Watch,
    ) -> Result<()> {
        self.step(spins, start, what, watch, Limit::OpTimeout)
    }

    /// One step of a wait: progress, dead-peer check, deadline (`limit`),
    /// then spin or park as the progress mode says.
    pub(super) fn step(
        &mut self,
        spins: &mut u32,
        start: Instant,
        what: &'static str,
        watch: Watch,
        limit: Limit,
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
            // A step's driver use that waited past the op timeout for the
            // submission ring to drain: the wait ends with it.
            if let Some(e) = self.ring_timed_out() {
                return Err(e);
            }
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
            let bound = match limit {
                Limit::Peers => None,
                Limit::OpTimeout => Some(self.op_timeout),
                Limit::For(d) => Some(d),
            };
            if let Some(bound) = bound {
                let waited = start.elapsed();
                if waited > bound {
                    return Err(Error::Timeout { what, waited, pe });
                }
            }
        }
        match self.progress {
            Progress::Busy => core::hint::spin_loop(),
            Progress::Adaptive { spin } => {
                if *spins < spin {
                    core::hint::spin_loop();
                } else if *spins < spin.saturating_add(YIELDS) {
                    std::thread::yield_now();
                } else {
                    let over = park_time(*spins - spin - YIELDS);
                    tight_timers();
                    match self.tcp.as_mut() {
                        // Parks on the sockets: a frame wakes it at once
                        // (unless another context waits for the driver).
                        Some(t) if !t.contended() => t.get().wait(over),
                        _ => std::thread::sleep(over),
                    }
                }
            }
        }
        // Between steps the TCP driver is free for the PE's other contexts
        // (and its progress thread): a wait never keeps them out.
        self.verbs_back();
        if let Some(t) = self.tcp.as_mut() {
            t.leave();
        }
        Ok(())
    }
}

/// Parks at each step length of an adaptive wait's short ladder (1, 2, 4,
/// 8, then 16 µs).
const PARK_RUNG: u32 = 8;
/// The short ladder's longest park (µs).
const PARK_SHORT_US: u64 = 16;
/// Parks before the steps lengthen to [`PARK_LONG_US`]: some 10 ms of short
/// parks (a flag every millisecond is seen within ~10 µs; a wait that lasts
/// longer costs fewer wake-ups).
const PARK_SHORT_STEPS: u32 = 512;
/// The long parks (µs).
const PARK_LONG_US: u64 = 100;
/// Timer slack of a thread that parks in a wait (ns): the kernel's default
/// (50 µs) would turn every short park into a 50 µs one.
const PARK_SLACK_NS: u64 = 2_000;

/// The length of the `k`th park of an adaptive wait (0-based): no clock,
/// a function of the step count only.
fn park_time(k: u32) -> Duration {
    let us = if k < PARK_SHORT_STEPS {
        (1u64 << (k / PARK_RUNG).min(4)).min(PARK_SHORT_US)
    } else {
        PARK_LONG_US
    };
    Duration::from_micros(us)
}

thread_local! {
    /// Whether this thread's timer slack was set to [`PARK_SLACK_NS`].
    static TIGHT: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Sets the calling thread's timer slack to [`PARK_SLACK_NS`] the first time
/// it parks in a wait (timer slack is per thread; later parks cost nothing
/// more). The thread's other timed sleeps become as precise.
fn tight_timers() {
    TIGHT.with(|t| {
        if !t.get() {
            t.set(true);
            crate::sys::set_timer_slack(PARK_SLACK_NS);
        }
    });
}

/// How long a wait may last besides the death of the PEs it watches.
#[derive(Debug, Clone, Copy)]
pub(super) enum Limit {
    /// As long as the application takes: a wait on local memory or on live
    /// peers (`wait_until`, barriers).
    Peers,
    /// The op timeout: a wait on a peer's answer (a get's reply, quiet).
    OpTimeout,
    /// The caller's deadline (`wait_until_for`).
    For(Duration),
}

/// Whose death ends a wait early.
#[derive(Debug, Clone, Copy)]
pub(super) enum Watch {
    /// The PE the wait depends on.
    Peer(u32),
    /// Any PE (a local flag anyone may set).
    Any,
    /// None beyond what the drivers report (quiet).
    Drivers,
}
