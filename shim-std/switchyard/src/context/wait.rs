//! Waiting: `wait_until` on a local word, the dissemination barrier, and the
//! one bounded wait step every blocking call makes ([`Context::pause`]:
//! progress, dead-peer check, deadline, spin or park).

use std::time::{Duration, Instant};

use switchyard_core::transport::AtomicWidth;

use super::{AtomicInt, Context, Error, Result, Sym};

/// Spins of a wait's fast path (a load and a pause instruction each, no clock,
/// no progress) before the bounded slow path starts.
const FAST_SPINS: u32 = 256;
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

impl Context {
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

    /// One step of a bounded wait: progress, dead-peer check, deadline, then
    /// spin or park as the progress mode says.
    pub(super) fn pause(
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
        if let Some(t) = self.tcp.as_mut() {
            t.leave();
        }
        Ok(())
    }
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
