//! Two one-word locks for state that two threads take turns on, the state
//! kept outside them (the lock is a pure flag; whoever holds it may touch
//! the state, and the holder's `unsafe` says so).
//!
//! * [`EntryLock`]: the hand-off between an application thread and a helper
//!   thread (switchyard's progress thread). Bit 0 of the word says the lock
//!   is held; the bits above count the application's entries (wrapping).
//!   The application enters lazily and leaves with one store; the helper
//!   takes the lock only when it is free, for a bounded time, and puts the
//!   word back as it found it. So an application entry always changes the
//!   word, and a helper that read the word before an entry cannot take the
//!   lock with that reading even if the application has left again: it
//!   defers to an application that is active.
//! * [`TryLock`]: a try-lock on a flag, for two sides that each skip their
//!   turn when the other holds it (the verbs driver's receive side, polled by
//!   the application and by the progress thread).
//!
//! Both take with `Acquire` and give back with `Release`, so each holder
//! sees everything the previous holder wrote to the guarded state. The
//! invariants (mutual exclusion, the entry count, the helper leaving the
//! word as it found it) are checked by the loom models in `tests/loom.rs`.
//! Neither lock waits: callers loop on the `try_` methods with the waiting
//! policy they need (spin, then yield).

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bit 0 of an [`EntryLock`] word: held.
const HELD: usize = 1;
/// One application entry: the count goes up by one (bit 1) and bit 0 is set.
const ENTER: usize = 0b11;

/// The lock word between an application thread and a helper thread (see
/// the [module docs](self)): [`try_enter`](Self::try_enter) and
/// [`leave`](Self::leave) for the application,
/// [`try_take`](Self::try_take) for the helper.
///
/// Meant for one application thread and one helper: two threads entering
/// as the application exclude each other too, but then the entry count no
/// longer tells whose entries it counts.
#[derive(Debug)]
pub struct EntryLock {
    word: AtomicUsize,
}

/// Proof that the application holds an [`EntryLock`]: give it back to
/// [`EntryLock::leave`] of the same lock.
#[derive(Debug)]
#[must_use = "an entry holds the lock until it is given to `leave`"]
pub struct Entered {
    /// The word as the entry set it.
    word: usize,
}

/// The helper's hold on an [`EntryLock`]; dropping it gives the lock back,
/// with the word as the helper found it.
#[derive(Debug)]
#[must_use = "dropping it gives the lock back at once"]
pub struct Taken<'a> {
    lock: &'a EntryLock,
    /// The word before the helper took the lock.
    found: usize,
}

impl EntryLock {
    /// A free lock with no entries counted. `const`, so it can live in a
    /// `static`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        EntryLock {
            word: AtomicUsize::new(0),
        }
    }

    /// A free lock with no entries counted.
    #[cfg(loom)]
    pub fn new() -> Self {
        EntryLock {
            word: AtomicUsize::new(0),
        }
    }

    /// The application's entry: takes the lock and counts one entry when the
    /// lock is free; `None` when the helper holds it (or, rarely, on a
    /// spurious failure): try again.
    #[inline]
    pub fn try_enter(&self) -> Option<Entered> {
        let v = self.word.load(Ordering::Relaxed);
        if v & HELD != 0 {
            return None;
        }
        let mine = v.wrapping_add(ENTER);
        // SYNC POINT with the Release stores in `leave` and in `Taken::drop`:
        // the previous holder's writes to the guarded state are visible.
        self.word
            .compare_exchange_weak(v, mine, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Entered { word: mine })
    }

    /// Gives the application's entry back (the count stays, bit 0 clears).
    #[inline]
    pub fn leave(&self, entry: Entered) {
        debug_assert_eq!(
            self.word.load(Ordering::Relaxed),
            entry.word,
            "the word changed while the application held the lock (or the entry is another lock's)"
        );
        // SYNC POINT with the Acquire compare-exchanges of `try_enter` and
        // `try_take`: publishes this holder's writes.
        self.word.store(entry.word & !HELD, Ordering::Release);
    }

    /// The helper's turn: takes the lock when it is free, leaving the entry
    /// count alone; `None` when the application holds it, or entered since
    /// this call read the word.
    #[inline]
    pub fn try_take(&self) -> Option<Taken<'_>> {
        let found = self.word.load(Ordering::Relaxed);
        if found & HELD != 0 {
            return None;
        }
        // SYNC POINT with the Release stores in `leave` and in `Taken::drop`.
        self.word
            .compare_exchange(found, found | HELD, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Taken { lock: self, found })
    }

    /// Whether someone holds the lock now (a snapshot).
    pub fn is_held(&self) -> bool {
        self.word.load(Ordering::Relaxed) & HELD != 0
    }

    /// The application's entries so far (wrapping at `usize::MAX >> 1`; a
    /// snapshot).
    pub fn entries(&self) -> usize {
        self.word.load(Ordering::Relaxed) >> 1
    }
}

impl Default for EntryLock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Taken<'_> {
    #[inline]
    fn drop(&mut self) {
        debug_assert_eq!(
            self.lock.word.load(Ordering::Relaxed),
            self.found | HELD,
            "the word changed while the helper held the lock"
        );
        // SYNC POINT with the Acquire compare-exchanges of `try_enter` and
        // `try_take`: publishes the helper's writes, the word as it was.
        self.lock.word.store(self.found, Ordering::Release);
    }
}

/// A try-lock on one flag (see the [module docs](self)).
#[derive(Debug)]
pub struct TryLock {
    busy: AtomicBool,
}

/// A hold on a [`TryLock`]; dropping it gives the lock back.
#[derive(Debug)]
#[must_use = "dropping it gives the lock back at once"]
pub struct TryLockGuard<'a> {
    lock: &'a TryLock,
}

impl TryLock {
    /// A free lock. `const`, so it can live in a `static`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        TryLock {
            busy: AtomicBool::new(false),
        }
    }

    /// A free lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        TryLock {
            busy: AtomicBool::new(false),
        }
    }

    /// Takes the lock, or `None` when someone holds it.
    ///
    /// A compare-exchange rather than a swap: a failed attempt stores
    /// nothing, and loom checks it exactly
    /// (loom 0.7 lets a plain store slip between the read and the write of a
    /// `swap`, tokio-rs/loom#254, and would report a lock left taken).
    #[inline]
    pub fn try_lock(&self) -> Option<TryLockGuard<'_>> {
        // SYNC POINT with the Release store in `TryLockGuard::drop`.
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TryLockGuard { lock: self })
    }

    /// Whether someone holds the lock now (a snapshot).
    pub fn is_locked(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }
}

impl Default for TryLock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TryLockGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SYNC POINT with the Acquire compare-exchange in `TryLock::try_lock`.
        self.lock.busy.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod test {
    use super::*;

    /// Enters, retrying spurious failures (miri makes many).
    fn enter(l: &EntryLock) -> Entered {
        loop {
            if let Some(e) = l.try_enter() {
                return e;
            }
        }
    }

    #[test]
    fn entries_are_counted_and_exclude_the_helper() {
        let l = EntryLock::new();
        assert_eq!((l.entries(), l.is_held()), (0, false));
        let e = enter(&l);
        assert!(l.is_held());
        assert!(l.try_take().is_none(), "the helper took an entered lock");
        assert!(l.try_enter().is_none(), "a second entry while held");
        l.leave(e);
        assert_eq!((l.entries(), l.is_held()), (1, false));
        for _ in 0..3 {
            let e = enter(&l);
            l.leave(e);
        }
        assert_eq!(l.entries(), 4);
    }

    #[test]
    fn the_helper_excludes_the_application_and_leaves_the_count() {
        let l = EntryLock::default();
        let e = enter(&l);
        l.leave(e);
        let t = l.try_take().expect("free");
        assert!(l.is_held());
        assert!(
            l.try_enter().is_none(),
            "the application entered a taken lock"
        );
        assert!(l.try_take().is_none(), "taken twice");
        drop(t);
        assert_eq!((l.entries(), l.is_held()), (1, false));
    }

    #[test]
    fn the_count_wraps() {
        let l = EntryLock {
            word: AtomicUsize::new(usize::MAX & !HELD),
        };
        let e = enter(&l);
        l.leave(e);
        assert_eq!((l.entries(), l.is_held()), (0, false));
    }

    #[test]
    fn a_try_lock_is_taken_once_until_dropped() {
        let l = TryLock::new();
        let g = l.try_lock().expect("free");
        assert!(l.is_locked());
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(!l.is_locked());
        assert!(l.try_lock().is_some());
        assert!(!l.is_locked(), "the temporary guard gave it back");
    }

    #[cfg(feature = "std")]
    #[test]
    fn two_threads_never_hold_either_lock_together() {
        use std::thread;

        use crate::sync::atomic::AtomicU32;
        const ROUNDS: u32 = if cfg!(miri) { 50 } else { 20_000 };
        let (entry, try_lock) = (EntryLock::new(), TryLock::new());
        // Holders of each lock now: a second one fails.
        let inside = [AtomicU32::new(0), AtomicU32::new(0)];
        let hold = |k: usize| {
            assert_eq!(inside[k].fetch_add(1, Ordering::SeqCst), 0, "two holders");
            inside[k].fetch_sub(1, Ordering::SeqCst);
        };
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    let e = enter(&entry);
                    hold(0);
                    entry.leave(e);
                    if let Some(_g) = try_lock.try_lock() {
                        hold(1);
                    }
                }
            });
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    if let Some(_t) = entry.try_take() {
                        hold(0);
                    }
                    if let Some(_g) = try_lock.try_lock() {
                        hold(1);
                    }
                }
            });
        });
        assert_eq!(entry.entries(), ROUNDS as usize);
        assert!(!entry.is_held() && !try_lock.is_locked());
    }
}
