//! A submission ring: a single-producer [`Ring`] whose entries one consumer
//! at a time issues, that stops ("stalls") at an entry that fails, and that
//! the producer then takes back ("hand-back").
//!
//! The std shim gives each context of a `dedicated` progress engine one
//! (`switchyard::context::submit`): the context pushes small puts, the
//! progress thread drains every registered ring into the TCP driver. This
//! module is the protocol between the two, without std, its atomics through
//! [`crate::sync`] so the loom models in `tests/loom.rs` check it.
//!
//! # The state words
//!
//! Two [`AtomicU32`]s, each on a cache line of its own:
//!
//! * `consuming`: someone holds the consumer end (the thread in a drain, or
//!   the producer taking entries back). Taken by compare-exchange
//!   (Acquire), given back by a store (Release): the consumer end's head
//!   index, the stall's error and the stall bit pass from one holder to
//!   the next. Written at every drain, so kept off the line the producer
//!   reads at every push.
//! * `state`: bit 1, *stalled*: the consumer met an error at the head
//!   entry and left it there; nothing more is drained until the producer
//!   took the ring back. Set (Release) after the error is stored, and
//!   cleared, only by a holder of `consuming`. Bits 8 and up: a hint the
//!   consumer publishes for the producer ([`SubmitRing::set_hint`],
//!   [`SubmitRing::hint`]; the shim's load bits), stored only when it
//!   changes. The producer reads this word at every push (the stall bit,
//!   the hint); it is written rarely.
//!
//! # Guarantees
//!
//! # Entries of several slots
//!
//! An entry may take up to [`MAX_SPAN`] consecutive slots: the span
//! function given to [`SubmitRing::with_span`] reads it from the entry's
//! first slot ([`SubmitRing::new`]: one slot each). The producer pushes an
//! entry's slots with one publish (`Producer::push_all`), so the consumer
//! sees all of them or none; a drain issues them together
//! ([`SubmitRing::drain`] hands them to the issue as one slice) and pops
//! them together, and the hand-back returns them together ([`Taken`]).
//!
//! * One consumer end at a time: a drain takes `consuming` only when it is
//!   clear and the ring is not stalled (a compare-exchange, the stall bit
//!   read again under it), and skips the
//!   ring otherwise; a hand-back waits for it (a drain holds it for a
//!   bounded number of issues).
//! * An entry is issued ([`Issue::Done`]) and popped, or left at the head
//!   ([`Issue::Busy`], retried at the next drain; [`Issue::Failed`], the
//!   ring stalls): never popped unissued by a drain.
//! * After a stall, the producer takes back the head with its error, then
//!   every later entry, each exactly once ([`SubmitRing::take_stalled`]),
//!   and the ring resumes when it is empty.
//! * An entry seen taken ([`SubmitRing::is_empty`], Acquire on the ring's
//!   head) was issued: what its issue wrote is visible to the producer.
#![allow(unsafe_code)]

use crate::{
    pad::CachePadded,
    ring::{Consumer, Producer, Ring},
    sync::{
        UnsafeCell,
        atomic::{AtomicU32, Ordering},
        spin_hint,
    },
};

/// `state` bit: the ring stopped at an error.
const STALLED: u32 = 2;
/// The hint's shift in the state word.
const HINT_SHIFT: u32 = 8;
/// The bits below the hint.
const FLAGS: u32 = (1 << HINT_SHIFT) - 1;

/// The most slots one entry may take.
pub const MAX_SPAN: usize = 2;

/// An entry taken back from a stalled ring ([`SubmitRing::take_stalled`]):
/// its slots, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken<T> {
    slots: [T; MAX_SPAN],
    len: usize,
}

impl<T> Taken<T> {
    /// The entry's slots (one to [`MAX_SPAN`]).
    pub fn slots(&self) -> &[T] {
        &self.slots[..self.len]
    }

    /// The entry's first slot.
    pub fn first(&self) -> &T {
        &self.slots[0]
    }
}

/// What issuing one entry did ([`SubmitRing::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issue<E> {
    /// Issued: the entry is popped.
    Done,
    /// Not now (a full send window): left at the head, the drain ends.
    Busy,
    /// Failed: left at the head, the ring stalls with the error.
    Failed(E),
}

/// A single-producer submission ring of `N` entries `T`, stalled by an
/// error `E` (module docs).
pub struct SubmitRing<T, E, const N: usize> {
    ring: Ring<T, N>,
    /// [`STALLED`] and the hint (module docs).
    state: CachePadded<AtomicU32>,
    /// 1 while someone holds the consumer end (module docs).
    consuming: CachePadded<AtomicU32>,
    /// The error the ring stalled at; accessed only by the holder of
    /// `consuming`.
    error: UnsafeCell<Option<E>>,
    /// How many slots the entry starting at a slot takes (module docs).
    span: fn(&T) -> usize,
}

// SAFETY: the ring is shared as `Ring` is (its producer and consumer ends
// are made only through this type's `unsafe` producer and the `consuming`
// bit); `error` is touched only by the holder of `consuming`, taken with
// Acquire and given back with Release, so accesses never overlap and each
// sees the last. `T` and `E` move between threads: `Send`.
unsafe impl<T: Send, E: Send, const N: usize> Sync for SubmitRing<T, E, N> {}

impl<T, E, const N: usize> core::fmt::Debug for SubmitRing<T, E, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SubmitRing")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T: Copy + zerocopy::FromBytes, E, const N: usize> Default for SubmitRing<T, E, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + zerocopy::FromBytes, E, const N: usize> SubmitRing<T, E, N> {
    /// An empty ring, not stalled, hint 0, of entries of one slot each.
    pub fn new() -> Self {
        Self::with_span(|_| 1)
    }

    /// An empty ring whose entries take `span(first slot)` slots each
    /// (clamped to `1..=MAX_SPAN`; module docs).
    pub fn with_span(span: fn(&T) -> usize) -> Self {
        SubmitRing {
            ring: Ring::new(),
            state: CachePadded::new(AtomicU32::new(0)),
            consuming: CachePadded::new(AtomicU32::new(0)),
            error: UnsafeCell::new(None),
            span,
        }
    }

    /// The head entry's slots, when all of them are published (`whole`),
    /// or as many of them as are (never fewer than one: `None` when the
    /// ring is empty).
    #[inline]
    fn peek_entry(&self, c: &Consumer<'_, T, N>, whole: bool) -> Option<Taken<T>> {
        let first = c.peek()?;
        let len = (self.span)(&first).clamp(1, MAX_SPAN);
        let mut t = Taken {
            slots: [T::new_zeroed(); MAX_SPAN],
            len,
        };
        t.slots[0] = first;
        for i in 1..len {
            match c.peek_at(i) {
                Some(s) => t.slots[i] = s,
                None if whole => return None,
                None => {
                    t.len = i;
                    break;
                }
            }
        }
        Some(t)
    }

    /// The producer end.
    ///
    /// # Safety
    /// At most one producer end of this ring exists at a time (as
    /// [`Ring::producer`]).
    pub unsafe fn producer(&self) -> Producer<'_, T, N> {
        // SAFETY: the caller's contract is `Ring::producer`'s.
        unsafe { self.ring.producer() }
    }

    /// Entries pushed and not taken yet.
    #[inline]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether every entry pushed was taken (issued, or taken back).
    /// Acquire: what their issue wrote is visible.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Whether the ring stopped at an error (Acquire: the error and the
    /// consumer's head are visible to a hand-back).
    #[inline]
    pub fn stalled(&self) -> bool {
        self.state.load(Ordering::Acquire) & STALLED != 0
    }

    /// The hint the consumer published last ([`SubmitRing::set_hint`]).
    #[inline]
    pub fn hint(&self) -> u32 {
        self.state.load(Ordering::Relaxed) >> HINT_SHIFT
    }

    /// Publishes `hint` (its low 24 bits) for the producer. One store when
    /// it changed, none otherwise.
    #[inline]
    pub fn set_hint(&self, hint: u32) {
        let s = self.state.load(Ordering::Relaxed);
        if s >> HINT_SHIFT != hint & (u32::MAX >> HINT_SHIFT) {
            // Only the hint bits change (the flags are kept by the update).
            let _ = self
                .state
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some((s & FLAGS) | (hint << HINT_SHIFT))
                });
        }
    }

    /// Takes the consumer end when it is free and, unless `stalled_too`,
    /// the ring is not stalled.
    #[inline]
    fn try_consume(&self, stalled_too: bool) -> Option<Consumer<'_, T, N>> {
        if !stalled_too && self.state.load(Ordering::Relaxed) & STALLED != 0 {
            return None;
        }
        // SYNC POINT with the Release store in `release`.
        self.consuming
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // The stall bit changes only under `consuming`, which this thread
        // now holds after its last holder's Release: this read is current.
        if !stalled_too && self.state.load(Ordering::Relaxed) & STALLED != 0 {
            self.consuming.store(0, Ordering::Release);
            return None;
        }
        // SAFETY: `consuming` is held: this is the one consumer end until
        // `release`, which the callers run before the end is used again.
        Some(unsafe { self.ring.consumer() })
    }

    /// Gives the consumer end back, first clearing the stall bit when
    /// `unstall`.
    #[inline]
    fn release(&self, unstall: bool) {
        if unstall {
            self.state.fetch_and(!STALLED, Ordering::Release);
        }
        // SYNC POINT with the Acquire compare-exchange in `try_consume`.
        self.consuming.store(0, Ordering::Release);
    }

    /// Issues the entries in order with `issue` (given each entry's slots)
    /// until the ring is empty, an entry is [`Issue::Busy`], or one
    /// [`Issue::Failed`] (the ring then stalls with its error). Skips
    /// (returns 0) a stalled ring and one another consumer holds. Returns
    /// how many entries were issued.
    pub fn drain(&self, mut issue: impl FnMut(&[T]) -> Issue<E>) -> usize {
        if self.ring.is_empty() {
            return 0;
        }
        let Some(mut c) = self.try_consume(false) else {
            return 0;
        };
        let mut n = 0;
        while let Some(e) = self.peek_entry(&c, true) {
            match issue(e.slots()) {
                Issue::Done => {
                    for _ in 0..e.len {
                        // Evicting: the producer's next write to the
                        // entry's line then does not wait on this core's
                        // copy.
                        let _ = c.pop_evict();
                    }
                    n += 1;
                }
                Issue::Busy => break,
                Issue::Failed(err) => {
                    // SAFETY: `consuming` is held (`try_consume`).
                    self.error.with_mut(|p| unsafe { *p = Some(err) });
                    // Release: the error and the head are visible to the
                    // producer that sees the flag.
                    self.state.fetch_or(STALLED, Ordering::Release);
                    break;
                }
            }
        }
        self.release(false);
        n
    }

    /// The head entry's first slot, when the ring is not empty and no
    /// other consumer holds it now.
    pub fn head(&self) -> Option<T> {
        let c = self.try_consume(true)?;
        let e = c.peek();
        self.release(false);
        e
    }

    /// Stalls the ring as an entry failing with `err` would (tests; a
    /// ring already consumed waits for its consumer).
    pub fn stall(&self, err: Option<E>) {
        // The end is not used: holding `consuming` is what matters.
        let _ = self.consume_spinning();
        // SAFETY: `consuming` is held (`consume_spinning`).
        self.error.with_mut(|p| unsafe { *p = err });
        self.state.fetch_or(STALLED, Ordering::Release);
        self.release(false);
    }

    /// Takes the consumer end, waiting for a drain that holds it (it ends
    /// within its bounded issues).
    fn consume_spinning(&self) -> Consumer<'_, T, N> {
        loop {
            if let Some(c) = self.try_consume(true) {
                return c;
            }
            spin_hint();
        }
    }

    /// The hand-back, by the producer's side, one entry per call: the head
    /// entry of a stalled ring with the error it met, then (with `None` for
    /// the error) each later entry; `None` when the ring is empty, which
    /// un-stalls it. Each entry is returned once, and never also issued by
    /// a drain (which skips a stalled ring).
    pub fn take_stalled(&self) -> Option<(Taken<T>, Option<E>)> {
        let mut c = self.consume_spinning();
        // The producer (the caller) published each entry whole; an entry
        // cut short (its span misread) is taken as far as it goes, so the
        // ring still empties.
        if let Some(e) = self.peek_entry(&c, false) {
            for _ in 0..e.len {
                let _ = c.pop();
            }
            // SAFETY: `consuming` is held (`consume_spinning`).
            let err = self.error.with_mut(|p| unsafe { (*p).take() });
            self.release(false);
            Some((e, err))
        } else {
            // Release: the head is visible to the next drain.
            self.release(true);
            None
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    type R = SubmitRing<u64, &'static str, 8>;

    fn filled(n: u64) -> R {
        let r = R::new();
        // SAFETY: the one producer end.
        let mut p = unsafe { r.producer() };
        for i in 0..n {
            assert!(p.push(i).is_ok());
        }
        r
    }

    #[test]
    fn a_drain_issues_in_order_and_stops_at_busy() {
        let r = filled(5);
        let mut seen = [0u64; 5];
        let mut k = 0;
        let n = r.drain(|e| {
            if e[0] == 3 {
                return Issue::Busy;
            }
            seen[k] = e[0];
            k += 1;
            Issue::Done
        });
        assert_eq!((n, &seen[..3]), (3, &[0, 1, 2][..]));
        assert_eq!((r.len(), r.head(), r.stalled()), (2, Some(3), false));
    }

    #[test]
    fn a_failure_stalls_and_the_hand_back_takes_each_once() {
        let r = filled(4);
        assert_eq!(
            r.drain(|e| if e[0] == 1 {
                Issue::Failed("no")
            } else {
                Issue::Done
            }),
            1
        );
        assert!(r.stalled());
        // Nothing more is drained while stalled.
        assert_eq!(r.drain(|_| Issue::Done), 0);
        let first =
            |t: Option<(Taken<u64>, Option<&'static str>)>| t.map(|(e, err)| (*e.first(), err));
        assert_eq!(first(r.take_stalled()), Some((1, Some("no"))));
        assert_eq!(first(r.take_stalled()), Some((2, None)));
        assert_eq!(first(r.take_stalled()), Some((3, None)));
        assert!(r.stalled(), "stalled until taken back to empty");
        assert_eq!(r.take_stalled(), None);
        assert!(!r.stalled() && r.is_empty());
    }

    /// Entries of two slots (here: odd values) are issued and taken back
    /// whole, beside entries of one.
    #[test]
    fn entries_of_two_slots_go_together() {
        let r = SubmitRing::<u64, &'static str, 8>::with_span(|v| if v % 2 == 1 { 2 } else { 1 });
        // SAFETY: the one producer end.
        let mut p = unsafe { r.producer() };
        assert!(p.push(0).is_ok());
        assert!(p.push_all(&[1, 100]).is_ok());
        assert!(p.push(2).is_ok());
        assert!(p.push_all(&[3, 300]).is_ok());
        assert!(p.push(4).is_ok());
        let mut seen = [[0u64; 2]; 4];
        let mut k = 0;
        let n = r.drain(|e| {
            if e[0] == 3 {
                return Issue::Failed("no");
            }
            seen[k][..e.len()].copy_from_slice(e);
            k += 1;
            Issue::Done
        });
        assert_eq!(n, 3);
        assert_eq!(seen[..3], [[0, 0], [1, 100], [2, 0]]);
        let (e, err) = r.take_stalled().expect("the failed entry");
        assert_eq!((e.slots(), err), (&[3, 300][..], Some("no")));
        let (e, err) = r.take_stalled().expect("the last entry");
        assert_eq!((e.slots(), err), (&[4][..], None));
        assert!(r.take_stalled().is_none());
        assert!(r.is_empty() && !r.stalled());
        // Two slots do not fit in one: nothing is pushed.
        for i in 0..7 {
            assert!(p.push(i * 2).is_ok());
        }
        assert!(p.push_all(&[5, 500]).is_err());
        assert_eq!(r.len(), 7);
    }

    #[test]
    fn the_hint_keeps_the_flags() {
        let r = filled(2);
        r.stall(None);
        r.set_hint(0x5a);
        assert_eq!(r.hint(), 0x5a);
        assert!(r.stalled());
        r.set_hint(0);
        assert_eq!(r.hint(), 0);
        assert!(r.stalled());
    }
}
