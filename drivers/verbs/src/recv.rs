//! The target side of the receipts: the shared receive queue (SRQ), its
//! receive CQ and the highest receipt seen per (peer, data QP), in one
//! object that a second thread may poll too ([`RecvSide`]).
//!
//! Every put a peer makes to this PE is an RDMA WRITE with immediate that
//! consumes one receive WQE of the SRQ and leaves one receive completion
//! (the responder QP's number and the immediate, the put's receipt). The
//! SRQ must be re-posted at least once per `srq_depth` puts, or the senders
//! see RNR NAKs and wait. The driver's `progress` polls it; so can the
//! shim's progress thread while the application computes outside the
//! library ([`RecvSide::poll`]), through a clone of the handle
//! ([`crate::VerbsDriver::recv_side`]).
//!
//! **Exclusion.** The state sits behind a one-word try-lock
//! ([`switchyard_core::lock::TryLock`], loom-checked there): whoever takes
//! it polls one batch and gives it back; the other side skips its poll
//! (never waits) when it finds it taken, except the driver's few cold
//! paths that need the state exactly (collecting receipts after a failure,
//! a rebuild, close), which spin for at most the other side's one batch.
//! Nothing allocates after construction.
#![allow(unsafe_code)]

use std::{cell::UnsafeCell, sync::Arc};

use switchyard_core::{
    lock::{TryLock, TryLockGuard},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    transport::PollResult,
};

use crate::sys::{self, POLL_BATCH, RECV_BATCH};

/// The receive side of one driver; clones share it.
#[derive(Clone)]
pub struct RecvSide {
    inner: Arc<Shared>,
}

impl core::fmt::Debug for RecvSide {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvSide")
            .field("receipts", &self.receipts())
            .field("reposts", &self.reposts())
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// Held by whoever uses `state`.
    busy: TryLock,
    /// A poll or re-post failed: the device is unusable.
    failed: AtomicBool,
    receipts: AtomicU64,
    reposts: AtomicU64,
    state: UnsafeCell<State>,
}

// SAFETY: `state` is only accessed by the holder of `busy` (taken with
// Acquire, given back with Release when its guard drops), so accesses never
// overlap and each holder sees the previous one's
// writes; everything in `State` is `Send` (the verbs objects are used by
// one thread at a time, which libibverbs allows).
unsafe impl Sync for Shared {}
// SAFETY: as above; `State` is `Send`.
unsafe impl Send for Shared {}

struct State {
    /// `None` once released (the driver closed): polls find nothing.
    srq: Option<sys::Srq>,
    cqes: Box<[sys::Cqe]>,
    /// Receive WQEs consumed and not re-posted yet.
    owed: u32,
    /// Re-post once this many are owed.
    batch: u32,
    /// Receive WQEs of the SRQ (also the receive CQ's entries).
    depth: u32,
    /// QPN → index into `seen`, open addressing (QPN 0: empty).
    table: Box<[(u32, u32)]>,
    /// Highest receipt seen per (peer, data QP) (index from the driver).
    seen: Box<[u64]>,
}

/// The state, held until dropped.
struct Guard<'a> {
    shared: &'a Shared,
    /// Gives `busy` back on drop.
    _held: TryLockGuard<'a>,
}

impl Guard<'_> {
    fn state(&mut self) -> &mut State {
        // SAFETY: this guard holds `busy` (see `Shared`), and `&mut self`
        // keeps the borrow unique.
        unsafe { &mut *self.shared.state.get() }
    }
}

/// Slot of a QPN in a table of `len` (a power of two) entries.
const fn qpn_slot(qpn: u32, len: usize) -> usize {
    (qpn.wrapping_mul(0x9E37_79B1) as usize) & (len - 1)
}

/// Builds the QPN table of `(qpn, value)` pairs (QPNs non-zero, distinct),
/// with room for `cap` entries (at least `entries.len()`) at most half full.
pub(crate) fn qpn_table(entries: &[(u32, u32)], cap: usize) -> Box<[(u32, u32)]> {
    let len = (cap.max(entries.len()) * 2).next_power_of_two().max(2);
    let mut t = vec![(0u32, 0u32); len].into_boxed_slice();
    for &(qpn, v) in entries {
        qpn_insert(&mut t, qpn, v);
    }
    t
}

/// Adds `(qpn, value)` to a table from [`qpn_table`] (`qpn` non-zero);
/// `false` when that would leave it more than half full (nothing added),
/// or when `qpn` is 0. A QPN already there gets the new value.
pub(crate) fn qpn_insert(t: &mut [(u32, u32)], qpn: u32, v: u32) -> bool {
    let len = t.len();
    if qpn == 0 || len == 0 {
        return false;
    }
    let used = t.iter().filter(|e| e.0 != 0).count();
    let mut i = qpn_slot(qpn, len);
    loop {
        debug_assert!(i < len);
        match t[i].0 {
            0 if (used + 1) * 2 > len => return false,
            0 => break,
            q if q == qpn => break,
            _ => i = (i + 1) & (len - 1),
        }
    }
    t[i] = (qpn, v);
    true
}

/// The value of `qpn` in a table from [`qpn_table`] (at most half full, so
/// a probe ends at an empty slot): O(1) expected, no allocation.
pub(crate) fn qpn_lookup(t: &[(u32, u32)], qpn: u32) -> Option<u32> {
    if qpn == 0 {
        return None;
    }
    let mut i = qpn_slot(qpn, t.len());
    loop {
        debug_assert!(i < t.len());
        match t[i] {
            (0, _) => return None,
            (q, v) if q == qpn => return Some(v),
            _ => i = (i + 1) & (t.len() - 1),
        }
    }
}

impl RecvSide {
    /// Wraps a fully posted SRQ of `depth` WQEs; `qpns` maps each data QP's
    /// number to its index in a table of `n_seen` receipts (one per data
    /// QP the driver may ever have: more are added by
    /// [`RecvSide::add_qpns`] up to `n_seen`).
    pub(crate) fn new(srq: sys::Srq, depth: u32, qpns: &[(u32, u32)], n_seen: usize) -> RecvSide {
        RecvSide {
            inner: Arc::new(Shared {
                busy: TryLock::new(),
                failed: AtomicBool::new(false),
                receipts: AtomicU64::new(0),
                reposts: AtomicU64::new(0),
                state: UnsafeCell::new(State {
                    srq: Some(srq),
                    cqes: vec![sys::Cqe::default(); POLL_BATCH].into_boxed_slice(),
                    owed: 0,
                    batch: (depth / 4).clamp(1, RECV_BATCH as u32),
                    depth,
                    table: qpn_table(qpns, n_seen),
                    seen: vec![0; n_seen].into_boxed_slice(),
                }),
            }),
        }
    }

    fn try_take(&self) -> Option<Guard<'_>> {
        // Acquire: the previous holder's writes to `state` are visible.
        let held = self.inner.busy.try_lock()?;
        Some(Guard {
            shared: &self.inner,
            _held: held,
        })
    }

    /// Takes the state, spinning while the other side polls (one batch).
    fn take(&self) -> Guard<'_> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_take() {
                return g;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Polls one batch of receipts and re-posts receives once a batch is
    /// owed. `Busy` when it reaped something; `Idle` when nothing came, or
    /// when the other side is polling now (never waits). For the shim's
    /// progress thread, while the application is outside the library.
    pub fn poll(&self) -> PollResult {
        let Some(mut g) = self.try_take() else {
            return PollResult::Idle;
        };
        if self.poll_held(&mut g) > 0 {
            PollResult::Busy
        } else {
            PollResult::Idle
        }
    }

    /// Polls one batch; returns the completions reaped.
    fn poll_held(&self, g: &mut Guard<'_>) -> usize {
        let shared = g.shared;
        let st = g.state();
        let Some(srq) = st.srq.as_mut() else {
            return 0;
        };
        let n = match srq.cq.poll(&mut st.cqes) {
            Ok(n) => n,
            Err(_) => {
                shared.failed.store(true, Ordering::Relaxed);
                return 0;
            }
        };
        let mut got = 0u64;
        for i in 0..n {
            let c = st.cqes[i];
            st.owed += 1;
            if !c.ok {
                continue; // consumed, nothing landed
            }
            let Some(at) = qpn_lookup(&st.table, c.qp_num) else {
                continue;
            };
            let Some(seen) = st.seen.get_mut(at as usize) else {
                continue;
            };
            // Receipts arrive in order, one per put: the low 32 bits
            // extend against the last one seen.
            let delta = c.imm.wrapping_sub(*seen as u32);
            if delta != 0 && delta < 1 << 31 {
                *seen += u64::from(delta);
                got += 1;
            }
        }
        while st.owed >= st.batch {
            let k = st.owed.min(RECV_BATCH as u32);
            if srq.post(k as usize).is_err() {
                shared.failed.store(true, Ordering::Relaxed);
                break;
            }
            st.owed -= k;
            shared.reposts.fetch_add(u64::from(k), Ordering::Relaxed);
        }
        if got > 0 {
            shared.receipts.fetch_add(got, Ordering::Relaxed);
        }
        n
    }

    /// Polls until the receive CQ is empty, or until as many completions
    /// as it holds were taken (other peers may keep it busy forever: it
    /// holds at most `depth` entries and is polled in order, so whatever
    /// was in it when the drain began is taken by then). Returns the
    /// completions taken: at most `depth + POLL_BATCH - 1`.
    fn drain_held(&self, g: &mut Guard<'_>) -> usize {
        let bound = g.state().depth as usize;
        let mut taken = 0usize;
        while taken < bound {
            let n = self.poll_held(g);
            if n == 0 {
                break;
            }
            taken += n;
        }
        taken
    }

    /// Takes every completion queued now (waiting for the other side's
    /// batch first; bounded: [`RecvSide::drain_held`]), then reads
    /// receipts `range` into `out`. After `LAST_WQE_REACHED` of a QP, all
    /// its receive completions are queued, so they are all counted.
    pub(crate) fn drain_and_read(&self, range: core::ops::Range<usize>, out: &mut [u64]) -> usize {
        let mut g = self.take();
        let taken = self.drain_held(&mut g);
        let st = g.state();
        for (o, s) in out.iter_mut().zip(st.seen.get(range).unwrap_or(&[])) {
            *o = *s;
        }
        taken
    }

    /// Sets receipts `range` back to 0 (a rebuild: they count from 1
    /// again), after taking every completion queued now (bounded): a
    /// completion of the old generation polled after the reset would
    /// count against the new one (receipts too high, new ones ignored).
    pub(crate) fn reset(&self, range: core::ops::Range<usize>) {
        let mut g = self.take();
        self.drain_held(&mut g);
        if let Some(s) = g.state().seen.get_mut(range) {
            s.fill(0);
        }
    }

    /// Runs `f` on the SRQ (to create a QP on it: a peer added after
    /// creation); `None` once released. Control path: waits for the other
    /// side's batch.
    pub(crate) fn with_srq<R>(&self, f: impl FnOnce(&sys::Srq) -> R) -> Option<R> {
        let mut g = self.take();
        g.state().srq.as_ref().map(f)
    }

    /// Adds data QPs `(qpn, index into the receipts)` (a peer added after
    /// creation: [`crate::VerbsDriver::add_peer`]), their receipts at 0.
    /// `false` when one does not fit (an index past the table sized at
    /// creation, or a full QPN table): none is added then.
    pub(crate) fn add_qpns(&self, qpns: &[(u32, u32)]) -> bool {
        let mut g = self.take();
        let st = g.state();
        if qpns
            .iter()
            .any(|&(q, i)| q == 0 || i as usize >= st.seen.len())
        {
            return false;
        }
        let used = st.table.iter().filter(|e| e.0 != 0).count();
        if (used + qpns.len()) * 2 > st.table.len() {
            return false;
        }
        for &(q, i) in qpns {
            qpn_insert(&mut st.table, q, i);
            st.seen[i as usize] = 0;
        }
        true
    }

    /// Whether a poll or a re-post failed (the device is unusable).
    pub(crate) fn failed(&self) -> bool {
        self.inner.failed.load(Ordering::Relaxed)
    }

    /// Receipts seen so far.
    pub fn receipts(&self) -> u64 {
        self.inner.receipts.load(Ordering::Relaxed)
    }

    /// Receive WQEs re-posted so far.
    pub fn reposts(&self) -> u64 {
        self.inner.reposts.load(Ordering::Relaxed)
    }

    /// Takes the SRQ out (the driver closes: its QPs are gone, its PD and
    /// context go next); later polls find nothing.
    pub(crate) fn release(&self) -> Option<sys::Srq> {
        let mut g = self.take();
        g.state().srq.take()
    }
}
