//! Selective signaling and send-queue accounting.
//!
//! Only every k-th work request asks for a completion
//! (`IBV_SEND_SIGNALED`); the completion of a signaled WR means it *and every
//! WR posted before it on that QP* are done, so their SQ slots come back
//! together. Unsignaled WRs never produce a completion, so the queue must
//! never fill with only unsignaled WRs: [`SendQueue::reserve`] signals the WR
//! that takes the last free slot (and every k-th one, and every one the
//! caller must hear about: reads and atomics). Slots are freed only by
//! [`SendQueue::complete`] for a signaled WR.
//!
//! [`CqCredits`] bounds the signaled WRs in flight over all QPs by the CQ
//! depth, so the shared CQ can never overrun (an overrun is a fatal
//! `IBV_EVENT_CQ_ERR`).

/// Accounting of one QP's send queue. WRs are numbered from 0 in post order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendQueue {
    depth: u32,
    every: u32,
    /// WRs posted so far (the next WR's number).
    posted: u64,
    /// WRs known complete (every WR numbered below this).
    completed: u64,
    /// Unsignaled WRs posted since the last signaled one.
    run: u32,
    /// Number of the last signaled WR posted, if any is outstanding.
    last_signaled: Option<u64>,
}

/// A slot reserved by [`SendQueue::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The WR's number (`wr_id` carries it).
    pub index: u64,
    /// Whether to post it with `IBV_SEND_SIGNALED`.
    pub signaled: bool,
}

/// The send queue has no free slot: poll the CQ and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqFull;

/// A completion that does not fit the accounting (a stale or corrupt
/// `wr_id`): ignored by the caller and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadCompletion {
    /// Not an outstanding WR.
    NotOutstanding {
        /// The WR number.
        index: u64,
    },
}

impl SendQueue {
    /// An empty queue of `depth` slots signaling every `every`-th WR.
    /// `depth` is at least 1 and `every` in 1..=depth (clamped).
    pub fn new(depth: u32, every: u32) -> SendQueue {
        let depth = depth.max(1);
        SendQueue {
            depth,
            every: every.clamp(1, depth),
            posted: 0,
            completed: 0,
            run: 0,
            last_signaled: None,
        }
    }

    /// Free slots.
    pub fn free(&self) -> u32 {
        self.depth - self.outstanding() as u32
    }

    /// WRs posted and not yet known complete.
    pub fn outstanding(&self) -> u64 {
        self.posted - self.completed
    }

    /// WRs posted so far.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Whether outstanding WRs end in an unsignaled run, so no completion
    /// will ever report them: a quiet must post a signaled marker.
    pub fn tail_unsignaled(&self) -> bool {
        self.run > 0
    }

    /// Reserves the next slot; `must_signal` for WRs whose completion the
    /// caller waits for (reads, atomics, quiet markers).
    ///
    /// # Errors
    ///
    /// [`SqFull`] when every slot is taken.
    pub fn reserve(&mut self, must_signal: bool) -> Result<Slot, SqFull> {
        if self.free() == 0 {
            return Err(SqFull);
        }
        let index = self.posted;
        let signaled = must_signal || self.run + 1 >= self.every || self.free() == 1;
        self.posted += 1;
        if signaled {
            self.run = 0;
            self.last_signaled = Some(index);
        } else {
            self.run += 1;
        }
        Ok(Slot { index, signaled })
    }

    /// Gives back the slot of the last [`SendQueue::reserve`] when the post
    /// itself failed (nothing reached the device).
    pub fn unreserve(&mut self, slot: Slot, prev_run: u32, prev_last: Option<u64>) {
        if self.posted == slot.index + 1 {
            self.posted -= 1;
            self.run = prev_run;
            self.last_signaled = prev_last;
        }
    }

    /// State to restore with [`SendQueue::unreserve`].
    pub fn checkpoint(&self) -> (u32, Option<u64>) {
        (self.run, self.last_signaled)
    }

    /// Resolves the low 32 bits of a WR number carried in a `wr_id` to the
    /// full number, if it is outstanding.
    pub fn resolve(&self, low: u32) -> Option<u64> {
        let base = self.completed;
        let off = low.wrapping_sub(base as u32);
        (u64::from(off) < self.outstanding()).then(|| base + u64::from(off))
    }

    /// A signaled WR completed: it and every WR before it are done. Returns
    /// how many slots came back.
    ///
    /// # Errors
    ///
    /// [`BadCompletion`] when `index` is not outstanding.
    pub fn complete(&mut self, index: u64) -> Result<u64, BadCompletion> {
        if index < self.completed || index >= self.posted {
            return Err(BadCompletion::NotOutstanding { index });
        }
        let freed = index + 1 - self.completed;
        self.completed = index + 1;
        if self.completed == self.posted {
            self.run = 0;
        }
        if self.last_signaled.is_some_and(|l| l < self.completed) {
            self.last_signaled = None;
        }
        Ok(freed)
    }

    /// Forgets everything outstanding (the QP was reset: every WR is flushed
    /// and its fate handled by the caller). Numbering continues.
    pub fn reset(&mut self) {
        self.completed = self.posted;
        self.run = 0;
        self.last_signaled = None;
    }
}

/// Budget of signaled WRs in flight over every QP sharing one CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqCredits {
    cap: u32,
    used: u32,
}

impl CqCredits {
    /// A budget of `cap` completions (the CQ depth).
    pub const fn new(cap: u32) -> CqCredits {
        CqCredits { cap, used: 0 }
    }

    /// Takes one credit; `false` when the CQ could overrun.
    pub fn take(&mut self) -> bool {
        if self.used < self.cap {
            self.used += 1;
            true
        } else {
            false
        }
    }

    /// Returns `n` credits (completions polled).
    pub fn give(&mut self, n: u32) {
        self.used = self.used.saturating_sub(n);
    }

    /// Credits free.
    pub const fn available(&self) -> u64 {
        (self.cap - self.used) as u64
    }

    /// Credits in use.
    pub const fn used(&self) -> u32 {
        self.used
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn every_kth_is_signaled_and_the_last_slot_too() {
        let mut q = SendQueue::new(8, 4);
        let sig: Vec<bool> = (0..8).map(|_| q.reserve(false).unwrap().signaled).collect();
        assert_eq!(sig, [false, false, false, true, false, false, false, true]);
        assert_eq!(q.reserve(false), Err(SqFull));
        assert_eq!(q.complete(3), Ok(4));
        assert_eq!(q.free(), 4);
        assert_eq!(
            q.complete(3),
            Err(BadCompletion::NotOutstanding { index: 3 })
        );
        assert_eq!(q.complete(7), Ok(4));
        assert_eq!(q.free(), 8);
        assert!(!q.tail_unsignaled());
        // A must-signal WR restarts the run; an unsignaled tail is visible.
        assert!(!q.reserve(false).unwrap().signaled);
        assert!(q.tail_unsignaled());
        assert!(q.reserve(true).unwrap().signaled);
        assert!(!q.tail_unsignaled());
        assert_eq!(q.resolve(9), Some(9));
        assert_eq!(q.resolve(10), None);
        assert_eq!(q.resolve(7), None);
    }

    #[test]
    fn the_last_free_slot_is_always_signaled() {
        let mut q = SendQueue::new(4, 4);
        let s: Vec<bool> = (0..4).map(|_| q.reserve(false).unwrap().signaled).collect();
        assert_eq!(s, [false, false, false, true]);
        let mut q = SendQueue::new(5, 3);
        let s: Vec<bool> = (0..5).map(|_| q.reserve(false).unwrap().signaled).collect();
        assert_eq!(s, [false, false, true, false, true]);
    }

    #[test]
    fn unreserve_and_reset() {
        let mut q = SendQueue::new(4, 2);
        let (run, last) = q.checkpoint();
        let s = q.reserve(false).unwrap();
        q.unreserve(s, run, last);
        assert_eq!((q.posted(), q.free()), (0, 4));
        q.reserve(false).unwrap();
        q.reserve(false).unwrap();
        q.reset();
        assert_eq!((q.posted(), q.free(), q.outstanding()), (2, 4, 0));
        assert_eq!(q.reserve(false).unwrap().index, 2);
    }

    #[test]
    fn cq_credits() {
        let mut c = CqCredits::new(2);
        assert!(c.take() && c.take());
        assert!(!c.take());
        assert_eq!(c.available(), 0);
        c.give(5);
        assert_eq!((c.used(), c.available()), (0, 2));
    }

    proptest! {
        /// Random posts and completions (completions only for signaled WRs,
        /// in order, as a CQ delivers them): the queue never holds more than
        /// its depth, whenever it is full a signaled WR is outstanding (so
        /// it cannot deadlock), and completing the last signaled WR frees
        /// every slot up to it.
        #[test]
        fn accounting_holds(depth in 1u32..64, every in 1u32..64, ops in proptest::collection::vec((any::<bool>(), any::<bool>()), 1..400)) {
            let mut q = SendQueue::new(depth, every);
            let mut signaled: std::collections::VecDeque<u64> = Default::default();
            let mut run = 0u32;
            for (post, must) in ops {
                if post {
                    match q.reserve(must) {
                        Ok(s) => {
                            if s.signaled { signaled.push_back(s.index); run = 0; } else { run += 1; }
                            prop_assert!(run < every.clamp(1, depth), "k-th WR signaled");
                        }
                        Err(SqFull) => {
                            prop_assert_eq!(q.free(), 0);
                            prop_assert!(!signaled.is_empty(), "a full queue has a signaled WR in flight");
                        }
                    }
                } else if let Some(i) = signaled.pop_front() {
                    let before = q.outstanding();
                    let freed = q.complete(i).unwrap();
                    prop_assert_eq!(q.outstanding(), before - freed);
                    prop_assert_eq!(q.outstanding(), q.posted() - (i + 1));
                }
                prop_assert!(q.outstanding() <= u64::from(depth));
            }
        }
    }
}
