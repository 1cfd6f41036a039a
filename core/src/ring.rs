//! A bounded single-producer single-consumer ring that also works between
//! processes in shared memory.
//!
//! `#[repr(C)]`, indices rather than pointers, power-of-two capacity `N`, head
//! and tail on their own cache lines ([`CachePadded`]), and each side keeps a
//! cached copy of the other side's index so that the shared line is touched only
//! when the cached one says the ring looks full (producer) or empty (consumer).
//! Indices run freely and wrap; `index & (N - 1)` is the slot.
//!
//! In one process, [`Ring::split`] hands out a [`Producer`] and a [`Consumer`]
//! (`Send`, not `Sync`) and freezes the ring while they live. Between processes,
//! each side attaches its own handle to the ring in the mapping with the
//! `unsafe` [`Ring::producer`] / [`Ring::consumer`].
//!
//! Elements are `Copy` plain data: nothing is dropped. Every slot is
//! initialised (zeroed) when the ring is made, by [`Ring::new`] or
//! [`Ring::init_in_place`], and the shared-memory attach functions require
//! `T: zerocopy::FromBytes` (valid for every bit pattern): a broken or hostile
//! peer process can then make us read wrong values, never an invalid `T`, and
//! the index clamps keep every access inside the ring.
#![allow(unsafe_code)]

use core::{cell::Cell, fmt, mem::MaybeUninit};

use zerocopy::FromBytes;

use crate::{
    pad::CachePadded,
    sync::{
        UnsafeCell,
        atomic::{AtomicUsize, Ordering},
    },
};

/// `push` on a full ring: the value comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// The ring is full.
    Full(T),
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) => v,
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ring is full")
    }
}

impl<T: fmt::Debug> core::error::Error for PushError<T> {}

/// `pop` on an empty ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopError {
    /// The ring is empty.
    Empty,
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ring is empty")
    }
}

impl core::error::Error for PopError {}

/// The ring itself: place it in a `static`, a `Box`, or shared memory.
// Not `heapless::spsc::Queue`: it takes its atomics from `core` (or
// `portable-atomic`), so the loom models of this ring in tests/loom.rs could
// not see them; its head and tail share a cache line, neither side caches the
// other's index, and it has no `#[repr(C)]` layout for `SharedRing` to map
// into another process.
#[repr(C)]
pub struct Ring<T, const N: usize> {
    /// Next index to read; written by the consumer only.
    head: CachePadded<AtomicUsize>,
    /// Next index to write; written by the producer only.
    tail: CachePadded<AtomicUsize>,
    slots: [UnsafeCell<MaybeUninit<T>>; N],
}

// SAFETY: the ring hands each slot to exactly one side at a time (the producer
// owns `tail..head+N`, the consumer `head..tail`), and the index hand-over is
// Release/Acquire; `T: Send` is all that crosses threads.
unsafe impl<T: Send, const N: usize> Sync for Ring<T, N> {}
// SAFETY: as above; the ring owns its `T`s.
unsafe impl<T: Send, const N: usize> Send for Ring<T, N> {}

impl<T, const N: usize> fmt::Debug for Ring<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &N)
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("tail", &self.tail.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T: Copy, const N: usize> Ring<T, N> {
    const MASK: usize = {
        assert!(N.is_power_of_two(), "ring capacity must be a power of two");
        N - 1
    };

    /// An empty ring with zeroed slots. `const`, so it can live in a `static`.
    /// A large ring built this way passes through the stack; put big ones in a
    /// `static`, or build them in place with [`init_in_place`](Self::init_in_place).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        let _ = Self::MASK;
        Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots: [const { UnsafeCell::new(MaybeUninit::zeroed()) }; N],
        }
    }

    /// An empty ring.
    #[cfg(loom)]
    pub fn new() -> Self {
        let _ = Self::MASK;
        Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots: core::array::from_fn(|_| UnsafeCell::new(MaybeUninit::zeroed())),
        }
    }

    /// Makes an empty ring in place, in memory that may hold anything (a fresh
    /// shared-memory mapping): zeroes all of it (indices and slots) and returns it.
    ///
    /// # Safety
    /// `this` must be valid for writes of `Self`, aligned, and not accessed by
    /// anyone else until this returns; it must stay valid for `'a`.
    #[cfg(not(loom))]
    pub unsafe fn init_in_place<'a>(this: *mut Self) -> &'a Self {
        let _ = Self::MASK;
        // SAFETY: the caller guarantees `this` is valid, aligned and exclusive.
        // All-zero bytes are a valid `Ring`: indices 0, and slots are
        // `MaybeUninit`, here initialised to zero bytes.
        unsafe {
            core::ptr::write_bytes(this, 0, 1);
            &*this
        }
    }

    /// Capacity.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Elements in the ring now (a snapshot; exact only while neither side runs).
    pub fn len(&self) -> usize {
        // Head first: it only grows toward the tail, so a later tail can only
        // make the difference larger, never report an almost empty ring as full.
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(N)
    }

    /// Whether the ring is empty now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Splits the ring into its two ends; the ring cannot be used otherwise while
    /// they live.
    pub fn split(&mut self) -> (Producer<'_, T, N>, Consumer<'_, T, N>) {
        let ring: &Self = self;
        // `&mut self` proves no other handle exists, and exactly one producer
        // and one consumer are made here, both in this process.
        (ring.make_producer(), ring.make_consumer())
    }

    fn make_producer(&self) -> Producer<'_, T, N> {
        Producer {
            ring: self,
            tail: self.tail.load(Ordering::Relaxed),
            cached_head: Cell::new(self.head.load(Ordering::Acquire)),
        }
    }

    fn make_consumer(&self) -> Consumer<'_, T, N> {
        Consumer {
            ring: self,
            head: self.head.load(Ordering::Relaxed),
            cached_tail: Cell::new(self.tail.load(Ordering::Acquire)),
        }
    }

    #[inline]
    fn slot(&self, index: usize) -> &UnsafeCell<MaybeUninit<T>> {
        let i = index & Self::MASK;
        debug_assert!(i < N);
        &self.slots[i]
    }

    /// The slots as one run of `T`s, for the bulk copies of `push_slice` and
    /// `pop_slice`: a pointer to slot 0 whose provenance covers every slot.
    /// Loom's cells track each access, so under loom those copy slot by slot.
    #[cfg(not(loom))]
    #[inline]
    fn slots_ptr(&self) -> *mut T {
        // `sync::UnsafeCell` and `MaybeUninit` are `repr(transparent)`, so the
        // array is laid out as `[T; N]`; `raw_get` is the sanctioned way from a
        // shared reference to a cell to a pointer that may write its contents.
        core::cell::UnsafeCell::raw_get(
            self.slots
                .as_ptr()
                .cast::<core::cell::UnsafeCell<MaybeUninit<T>>>(),
        )
        .cast::<T>()
    }

    /// Where a run of `n` slots from index `at` lies: `(first slot, length
    /// before the wrap)`; the rest, `n - length`, starts at slot 0.
    #[cfg(not(loom))]
    #[inline]
    fn run(at: usize, n: usize) -> (usize, usize) {
        let start = at & Self::MASK;
        debug_assert!(start < N && n <= N);
        (start, n.min(N - start))
    }
}

impl<T: Copy + FromBytes, const N: usize> Ring<T, N> {
    /// Attaches the producing end (one process of a shared-memory pair).
    ///
    /// # Safety
    /// At most one producer may exist for this ring at a time, in any process,
    /// and the memory must stay mapped while it lives. The ring must have been
    /// made by [`new`](Self::new) or [`init_in_place`](Self::init_in_place). A
    /// peer that breaks the protocol (writes indices or slots it does not own)
    /// races with us: we may then read torn or stale values, which `FromBytes`
    /// makes merely wrong, never invalid; indices are clamped to the ring.
    pub unsafe fn producer(&self) -> Producer<'_, T, N> {
        self.make_producer()
    }

    /// Attaches the consuming end.
    ///
    /// # Safety
    /// As for [`producer`](Self::producer), with "consumer".
    pub unsafe fn consumer(&self) -> Consumer<'_, T, N> {
        self.make_consumer()
    }
}

#[cfg(not(loom))]
impl<T: Copy, const N: usize> Default for Ring<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The producing end.
pub struct Producer<'a, T, const N: usize> {
    ring: &'a Ring<T, N>,
    /// Our own tail (the shared one is only ever written by us).
    tail: usize,
    /// Last head we read from the shared line.
    cached_head: Cell<usize>,
}

impl<T, const N: usize> fmt::Debug for Producer<'_, T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("tail", &self.tail)
            .finish()
    }
}

impl<T: Copy, const N: usize> Producer<'_, T, N> {
    /// Free slots. Refreshes the cached head only when the cache says fewer than
    /// `want` are free.
    #[inline]
    fn free(&self, want: usize) -> usize {
        let free = N.saturating_sub(self.tail.wrapping_sub(self.cached_head.get()));
        if free >= want {
            return free;
        }
        // SYNC POINT with the Release store of `head` in `Consumer::pop*`: slots
        // below the new head have been read and may be overwritten.
        self.cached_head.set(self.ring.head.load(Ordering::Acquire));
        // A head past our tail can only come from a broken peer: treat as full.
        N.saturating_sub(self.tail.wrapping_sub(self.cached_head.get()))
    }

    /// Free slots now.
    pub fn slots(&self) -> usize {
        self.free(N)
    }

    /// Asks for the line of the slot `ahead` pushes from now in a writable
    /// state (x86_64 `prefetchw`; nothing elsewhere, under Miri or loom), so
    /// that the push then does not wait for it. A hint: it changes no
    /// state, and the slot may still be the consumer's.
    ///
    /// Worth it when the consumer evicts the lines it read
    /// ([`Consumer::pop_evict`]): the line is then in no cache and the
    /// prefetch fetches it early. Without that it is in this core's cache
    /// (shared), where a prefetch does nothing.
    #[inline(always)]
    pub fn prefetch(&self, ahead: usize) {
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        {
            let p = self
                .ring
                .slot(self.tail.wrapping_add(ahead))
                .with_mut(|p| p.cast::<i8>().cast_const());
            // SAFETY: a prefetch (3DNow!/SSE `prefetchw`, a no-op on a CPU
            // without it) only moves a line between caches, never changes
            // memory; `p` points into the slot array.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_ET0 }>(p) };
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
        let _ = ahead;
    }

    /// Pushes one value, or hands it back when the ring is full.
    ///
    /// # Errors
    /// [`PushError::Full`] with the value.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), PushError<T>> {
        if self.free(1) == 0 {
            return Err(PushError::Full(value));
        }
        // SAFETY: slot `tail` is free (below `head + N`), so the consumer does not
        // read it until we publish `tail + 1` below.
        self.ring
            .slot(self.tail)
            .with_mut(|p| unsafe { (*p).write(value) });
        self.tail = self.tail.wrapping_add(1);
        // SYNC POINT with the Acquire load of `tail` in `Consumer::available`.
        self.ring.tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Pushes all of `src` with one index publish, or nothing when fewer
    /// slots are free: the consumer sees none of them or all.
    ///
    /// # Errors
    /// [`PushError::Full`] with `src`, nothing pushed.
    #[inline]
    pub fn push_all<'s>(&mut self, src: &'s [T]) -> Result<(), PushError<&'s [T]>> {
        if self.free(src.len()) < src.len() {
            return Err(PushError::Full(src));
        }
        let n = self.push_slice(src);
        debug_assert_eq!(n, src.len());
        Ok(())
    }

    /// Pushes as many values of `src` as fit, with one index publish; returns how
    /// many were pushed.
    #[inline]
    pub fn push_slice(&mut self, src: &[T]) -> usize {
        let n = src.len().min(self.free(src.len()));
        if n == 0 {
            return 0;
        }
        #[cfg(not(loom))]
        {
            let (start, first) = Ring::<T, N>::run(self.tail, n);
            let base = self.ring.slots_ptr();
            // SAFETY: the `n` slots from `tail` are free (checked above) and not
            // visible to the consumer before the publish below; they are slots
            // `start..start + first` and `0..n - first` of the array `base`
            // points into (`first <= N - start`, `n <= N`), and `src` is another
            // allocation. `T: Copy`: a bitwise copy is a copy.
            unsafe {
                core::ptr::copy_nonoverlapping(src.as_ptr(), base.add(start), first);
                core::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, n - first);
            }
        }
        #[cfg(loom)]
        for (k, v) in src[..n].iter().enumerate() {
            let i = self.tail.wrapping_add(k);
            // SAFETY: the `n` slots from `tail` are free (checked above) and not
            // visible to the consumer before the publish below.
            self.ring.slot(i).with_mut(|p| unsafe { (*p).write(*v) });
        }
        self.tail = self.tail.wrapping_add(n);
        // SYNC POINT with the Acquire load of `tail` in `Consumer::available`.
        self.ring.tail.store(self.tail, Ordering::Release);
        n
    }
}

/// The consuming end.
pub struct Consumer<'a, T, const N: usize> {
    ring: &'a Ring<T, N>,
    /// Our own head.
    head: usize,
    /// Last tail we read from the shared line.
    cached_tail: Cell<usize>,
}

impl<T, const N: usize> fmt::Debug for Consumer<'_, T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("head", &self.head)
            .finish()
    }
}

impl<T: Copy, const N: usize> Consumer<'_, T, N> {
    /// Readable elements, refreshing the cached tail only when the cache says
    /// fewer than `want` are there. Never more than `N`, even if a broken peer
    /// in shared memory wrote a wild tail.
    #[inline]
    fn available(&self, want: usize) -> usize {
        let avail = self.cached_tail.get().wrapping_sub(self.head);
        if avail >= want && avail <= N {
            return avail;
        }
        // SYNC POINT with the Release store of `tail` in `Producer::push*`: slots
        // below the new tail are fully written.
        self.cached_tail.set(self.ring.tail.load(Ordering::Acquire));
        self.cached_tail.get().wrapping_sub(self.head).min(N)
    }

    /// Elements ready now.
    pub fn slots(&self) -> usize {
        self.available(N)
    }

    /// A copy of the oldest element, without removing it.
    #[inline]
    pub fn peek(&self) -> Option<T> {
        if self.available(1) == 0 {
            return None;
        }
        // SAFETY: every slot is initialised (zeroed at creation); slot `head` was
        // published by the producer, which does not overwrite it before we
        // advance `head` (a peer breaking that protocol can only give us a wrong
        // value of a `FromBytes` type, see `Ring::consumer`).
        Some(
            self.ring
                .slot(self.head)
                .with(|p| unsafe { (*p).assume_init() }),
        )
    }

    /// A copy of the element `i` places after the oldest (`peek_at(0)` is
    /// [`peek`](Self::peek)), without removing anything; `None` when fewer
    /// than `i + 1` are ready.
    #[inline]
    pub fn peek_at(&self, i: usize) -> Option<T> {
        if self.available(i.saturating_add(1)) <= i {
            return None;
        }
        // SAFETY: as in `peek`: slot `head + i` is below the published tail
        // (`available` is at most `N`, so `i < N`).
        Some(
            self.ring
                .slot(self.head.wrapping_add(i))
                .with(|p| unsafe { (*p).assume_init() }),
        )
    }

    /// Removes the oldest element.
    ///
    /// # Errors
    /// [`PopError::Empty`].
    #[inline]
    pub fn pop(&mut self) -> Result<T, PopError> {
        if self.available(1) == 0 {
            return Err(PopError::Empty);
        }
        // SAFETY: as in `peek`.
        let v = self
            .ring
            .slot(self.head)
            .with(|p| unsafe { (*p).assume_init() });
        self.head = self.head.wrapping_add(1);
        // SYNC POINT with the Acquire load of `head` in `Producer::free`.
        self.ring.head.store(self.head, Ordering::Release);
        Ok(v)
    }

    /// Removes the oldest element, as [`pop`](Self::pop), first evicting from
    /// every cache the cache lines that its slot completes (x86_64 `clflush`;
    /// nothing on other targets, under Miri or loom).
    ///
    /// For a consumer on another core than the producer: the producer's next
    /// write to a line this consumer read still finds it shared with this
    /// core's cache and must invalidate that copy before the write completes,
    /// a cache-to-cache round trip on the producer's path (stores commit in
    /// order, so each push waits for it; a `prefetchw` does not help, the
    /// line being present in the producer's own cache). A line evicted here
    /// is in no cache: the producer's write misses, and its prefetches
    /// ([`Producer::prefetch`]) fetch the next lines ahead. The consumer
    /// pays the eviction (a write-back of the line). Measured by the
    /// `ring_xcore` and `context_tcp` benches (switchyard-benches).
    ///
    /// # Errors
    /// [`PopError::Empty`].
    #[inline]
    pub fn pop_evict(&mut self) -> Result<T, PopError> {
        if self.available(1) == 0 {
            return Err(PopError::Empty);
        }
        // SAFETY: as in `peek`.
        let v = self
            .ring
            .slot(self.head)
            .with(|p| unsafe { (*p).assume_init() });
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        self.evict(self.head);
        self.head = self.head.wrapping_add(1);
        // SYNC POINT with the Acquire load of `head` in `Producer::free`.
        self.ring.head.store(self.head, Ordering::Release);
        Ok(v)
    }

    /// Flushes the lines of slot `index` whose end lies within the slot: the
    /// lines it completes (all of a slot of 64 bytes or more; one line in
    /// every `64 / size` slots for smaller ones).
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    #[inline]
    fn evict(&self, index: usize) {
        const LINE: usize = 64;
        let size = core::mem::size_of::<T>();
        let start = self.ring.slot(index).with(|p| p as usize);
        let end = start + size;
        let mut line = start & !(LINE - 1);
        while line + LINE <= end {
            // SAFETY: `clflush` (SSE2, in every x86_64 CPU) only changes where
            // a line is cached, never its contents or coherence; `line` lies
            // in the ring's slot array (it starts at or before the slot, which
            // it overlaps, and ends within it), so the address is mapped.
            unsafe { core::arch::x86_64::_mm_clflush(line as *const u8) };
            line += LINE;
        }
    }

    /// Pops up to `dst.len()` elements into `dst` with one index publish; returns
    /// how many.
    #[inline]
    pub fn pop_slice(&mut self, dst: &mut [T]) -> usize {
        let n = dst.len().min(self.available(dst.len()));
        if n == 0 {
            return 0;
        }
        #[cfg(not(loom))]
        {
            let (start, first) = Ring::<T, N>::run(self.head, n);
            let base = self.ring.slots_ptr();
            // SAFETY: the `n` slots from `head` are published (checked above) and
            // initialised (every slot is, from construction); they are slots
            // `start..start + first` and `0..n - first` of the array `base`
            // points into, and `dst` is another allocation of at least `n`.
            unsafe {
                core::ptr::copy_nonoverlapping(base.add(start), dst.as_mut_ptr(), first);
                core::ptr::copy_nonoverlapping(base, dst.as_mut_ptr().add(first), n - first);
            }
        }
        #[cfg(loom)]
        for (k, d) in dst[..n].iter_mut().enumerate() {
            let i = self.head.wrapping_add(k);
            // SAFETY: the `n` slots from `head` are published (checked above).
            *d = self.ring.slot(i).with(|p| unsafe { (*p).assume_init() });
        }
        self.head = self.head.wrapping_add(n);
        // SYNC POINT with the Acquire load of `head` in `Producer::free`.
        self.ring.head.store(self.head, Ordering::Release);
        n
    }
}

#[cfg(all(test, not(loom)))]
mod test {
    extern crate std;
    use std::{boxed::Box, collections::VecDeque, thread, vec::Vec};

    use super::*;

    /// Slices pushed and popped at every offset, across the wrap, against a
    /// `VecDeque` model: the bulk copies of `push_slice`/`pop_slice` split a
    /// run at the end of the slot array.
    #[test]
    fn slices_across_the_wrap_match_a_model() {
        const STEPS: usize = if cfg!(miri) { 300 } else { 20_000 };
        let mut ring = Ring::<u32, 8>::new();
        let (mut p, mut c) = ring.split();
        let mut model = VecDeque::new();
        let mut rng = 0x2545_f491_u32;
        let mut next = 0u32;
        for _ in 0..STEPS {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            let len = (rng % 11) as usize;
            if rng & (1 << 20) == 0 {
                let src: Vec<u32> = (next..next + len as u32).collect();
                let n = p.push_slice(&src);
                assert_eq!(n, len.min(8 - model.len()));
                model.extend(&src[..n]);
                next += n as u32;
            } else {
                let mut dst = [u32::MAX; 10];
                let n = c.pop_slice(&mut dst[..len]);
                assert_eq!(n, len.min(model.len()));
                for d in &dst[..n] {
                    assert_eq!(Some(*d), model.pop_front());
                }
            }
            assert_eq!(p.slots(), 8 - model.len());
            assert_eq!(c.slots(), model.len());
        }
    }

    #[test]
    fn full_hands_value_back_and_order_is_fifo() {
        let mut ring = Ring::<u32, 4>::new();
        let (mut p, mut c) = ring.split();
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(99), Err(PushError::Full(99)));
        assert_eq!(p.slots(), 0);
        assert_eq!(c.peek(), Some(0));
        assert_eq!(c.pop(), Ok(0));
        p.push(4).unwrap();
        let mut out = [0; 8];
        assert_eq!(c.pop_slice(&mut out), 4);
        assert_eq!(&out[..4], &[1, 2, 3, 4]);
        assert_eq!(c.pop(), Err(PopError::Empty));
        assert_eq!(p.push_slice(&[7, 8, 9, 10, 11, 12]), 4);
        assert_eq!(c.slots(), 4);
    }

    #[test]
    fn two_threads_deliver_everything_in_order() {
        const COUNT: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let mut ring = Box::new(Ring::<u64, 64>::new());
        let (mut p, mut c) = ring.split();
        thread::scope(|s| {
            s.spawn(move || {
                let mut i = 0;
                let mut batch = Vec::new();
                while i < COUNT {
                    batch.clear();
                    batch.extend(i..(i + 7).min(COUNT));
                    let n = p.push_slice(&batch);
                    i += n as u64;
                    if n == 0 {
                        thread::yield_now();
                    }
                }
            });
            let mut expect = 0;
            let mut buf = [0u64; 16];
            while expect < COUNT {
                let n = c.pop_slice(&mut buf);
                for v in &buf[..n] {
                    assert_eq!(*v, expect);
                    expect += 1;
                }
                if n == 0 {
                    thread::yield_now();
                }
            }
        });
        assert!(ring.is_empty());
    }

    /// `pop_evict` and `prefetch` are `pop` and nothing, as far as the
    /// contents go: every element comes out once, in order, across many
    /// wraps, for elements of a whole line and of a quarter line (evicted
    /// once in four pops).
    #[test]
    fn pop_evict_and_prefetch_keep_the_order() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[repr(C, align(64))]
        struct Line([u64; 8]);
        const STEPS: u64 = if cfg!(miri) { 100 } else { 10_000 };
        let mut big = Box::new(Ring::<Line, 8>::new());
        let mut small = Box::new(Ring::<[u32; 4], 16>::new());
        let (mut p, mut c) = big.split();
        let (mut ps, mut cs) = small.split();
        let mut out = 0;
        for i in 0..STEPS {
            p.prefetch(3);
            ps.prefetch(5);
            p.push(Line([i; 8])).unwrap();
            ps.push([i as u32; 4]).unwrap();
            if i % 3 != 0 {
                assert_eq!(c.pop_evict(), Ok(Line([out; 8])));
                assert_eq!(cs.pop_evict(), Ok([out as u32; 4]));
                out += 1;
            }
            if p.slots() == 0 {
                while out <= i {
                    assert_eq!(c.pop_evict(), Ok(Line([out; 8])));
                    assert_eq!(cs.pop(), Ok([out as u32; 4]));
                    out += 1;
                }
            }
        }
        while out < STEPS {
            assert_eq!(c.pop_evict(), Ok(Line([out; 8])));
            assert_eq!(cs.pop_evict(), Ok([out as u32; 4]));
            out += 1;
        }
        assert_eq!(c.pop_evict(), Err(PopError::Empty));
        assert_eq!(cs.pop_evict(), Err(PopError::Empty));
    }

    #[test]
    fn init_in_place_over_garbage() {
        let mut mem = Box::new(core::mem::MaybeUninit::<Ring<u64, 8>>::uninit());
        // SAFETY: fill the storage with garbage bytes to model a dirty mapping.
        unsafe {
            core::ptr::write_bytes(
                mem.as_mut_ptr().cast::<u8>(),
                0xA5,
                core::mem::size_of::<Ring<u64, 8>>(),
            )
        };
        // SAFETY: the box is valid, aligned and ours alone.
        let ring = unsafe { Ring::init_in_place(mem.as_mut_ptr()) };
        assert!(ring.is_empty());
        // SAFETY: one producer and one consumer in this test.
        let (mut p, mut c) = unsafe { (ring.producer(), ring.consumer()) };
        p.push(5).unwrap();
        assert_eq!(c.pop(), Ok(5));
    }

    #[test]
    fn wild_tail_from_broken_peer_is_clamped() {
        let ring = Ring::<u64, 8>::new();
        ring.tail.store(1_000_000, Ordering::Relaxed);
        // SAFETY: single consumer.
        let c = unsafe { ring.consumer() };
        assert!(c.slots() <= 8);
    }
}
