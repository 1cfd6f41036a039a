//! Atomic operations on symmetric integers: fetch-add, compare-swap, swap,
//! fetch, add and set, each routed like a get (fetching) or a put. The
//! non-fetching ones (add, set, and the bitwise ops of
//! [`Context::bitwise`](super::Context::bitwise)) wait for no reply: they are
//! complete at the target after [`Context::quiet`](super::Context::quiet).

use switchyard_core::{
    route::Op,
    transport::{AtomicOp, AtomicWidth, Transport},
    wire::{AtomicKind, FrameOp},
};

use super::{Context, Plain, Result, Sym, route::Selected};

/// Integer types with atomic operations: `u32`, `u64`, `i32`, `i64`.
pub trait AtomicInt: Plain + PartialOrd + sealed::Sealed {
    /// Operand width.
    const WIDTH: AtomicWidth;
    /// The value's bits, zero-extended to 64.
    fn to_bits(self) -> u64;
    /// The value from the low bits.
    fn from_bits(b: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

macro_rules! atomic_int {
    ($t:ty, $w:expr, $u:ty) => {
        impl AtomicInt for $t {
            const WIDTH: AtomicWidth = $w;
            #[inline]
            fn to_bits(self) -> u64 {
                u64::from(self as $u)
            }
            #[inline]
            fn from_bits(b: u64) -> Self {
                b as $u as $t
            }
        }
    };
}
atomic_int!(u32, AtomicWidth::W32, u32);
atomic_int!(i32, AtomicWidth::W32, u32);
atomic_int!(u64, AtomicWidth::W64, u64);
atomic_int!(i64, AtomicWidth::W64, u64);

impl Context {
    /// The atomic `kind` on element `at` of `pe`'s copy of `sym`. With
    /// `fetch` false (and for `Set`) it returns 0 once issued, complete at
    /// `pe` after a quiet ([`AtomicOp::fetch`]); otherwise the old value.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        kind: AtomicKind,
        operand: T,
        compare: T,
        fetch: bool,
        pe: u32,
    ) -> Result<T> {
        let off = self.check(sym, at, 1)?;
        let op = AtomicOp {
            kind,
            width: T::WIDTH,
            operand: operand.to_bits(),
            compare: compare.to_bits(),
            fetch,
        };
        let rop = if op.is_fetching() {
            Op::FetchingAtomic
        } else {
            Op::Atomic
        };
        let len = T::WIDTH.bytes() as u64;
        // The route decision; on shared memory the shm leg applies the
        // atomic at once, no ticket.
        let sel = self.select(pe, len, rop, FrameOp::Atomic);
        if let Ok(route) = &sel
            && self.leg_open(pe, route)
            && let Some(old) = self.shm.atomic_leg(pe, off, op)
        {
            self.leg_done(pe, len, FrameOp::Atomic, route);
            // A non-fetching one answers 0, as the generic loop's poll.
            return Ok(T::from_bits(if op.is_fetching() { old } else { 0 }));
        }
        // A non-fetching one to a TCP rail under a `dedicated` progress
        // thread: one push on this context's submission ring.
        if !op.is_fetching()
            && let Ok(route) = &sel
            && self.ring_atomic(pe, off, op, route)
        {
            return Ok(T::from_bits(0));
        }
        self.atomic_slow(sel, pe, off, op).map(T::from_bits)
    }

    /// The rest of an atomic the shm leg did not take: the generic loop
    /// from selection `sel`. Cold and not generic (the value as its 64
    /// bits), as [`Context::put_slow`].
    #[cold]
    #[inline(never)]
    pub(super) fn atomic_slow(
        &mut self,
        sel: Selected,
        pe: u32,
        off: u64,
        op: AtomicOp,
    ) -> Result<u64> {
        let rop = if op.is_fetching() {
            Op::FetchingAtomic
        } else {
            Op::Atomic
        };
        let len = op.width.bytes() as u64;
        self.routed_wait(
            Some(sel),
            pe,
            len,
            rop,
            FrameOp::Atomic,
            "an atomic",
            |d, r| d.atomic_start(pe, off, op, r.context),
            |d, t| {
                if op.is_fetching() {
                    d.atomic_poll(t)
                } else {
                    // Complete by quiet, like a put.
                    Ok(Some(0))
                }
            },
        )
    }

    /// Atomically adds `value` to element `at` of `pe`'s copy of `sym` and
    /// returns the old value.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    #[inline]
    pub fn fetch_add<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        value: T,
        pe: u32,
    ) -> Result<T> {
        self.atomic(sym, at, AtomicKind::FetchAdd, value, value, true, pe)
    }

    /// Atomically stores `new` if the element equals `expected`; returns the
    /// old value (equal to `expected` when it stored).
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn compare_swap<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        expected: T,
        new: T,
        pe: u32,
    ) -> Result<T> {
        self.atomic(sym, at, AtomicKind::CompareSwap, new, expected, true, pe)
    }

    /// Atomically stores `value`, returning the old value.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn swap<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<T> {
        self.atomic(sym, at, AtomicKind::Swap, value, value, true, pe)
    }

    /// Atomically reads the element.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn fetch<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, pe: u32) -> Result<T> {
        let z = T::from_bits(0);
        self.atomic(sym, at, AtomicKind::Fetch, z, z, true, pe)
    }

    /// Atomically adds `value` to element `at` of `pe`'s copy of `sym`
    /// (OpenSHMEM's `shmem_atomic_add`; complete at `pe` after
    /// [`Context::quiet`]). It waits for no reply: over TCP or RDMA it
    /// returns once issued, like a put, and a [`Context::fence`] orders it
    /// with this context's later puts and non-fetching atomics to `pe`.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn add<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<()> {
        self.atomic(sym, at, AtomicKind::FetchAdd, value, value, false, pe)
            .map(|_| ())
    }

    /// Atomically stores `value` (complete at `pe` after [`Context::quiet`]).
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn set<T: AtomicInt>(&mut self, sym: &Sym<T>, at: usize, value: T, pe: u32) -> Result<()> {
        self.atomic(sym, at, AtomicKind::Set, value, value, false, pe)
            .map(|_| ())
    }
}
