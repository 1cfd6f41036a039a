//! Atomic memory operations, `shmem_TYPENAME_atomic_*` (and their `_nbi`
//! forms) for the spec's standard, extended and bitwise AMO types, plus the
//! deprecated `cswap`/`fadd`/`finc`/`swap`/`add`/`inc`/`fetch`/`set` names.
//!
//! Every C type travels as the context's 32- or 64-bit atomic integer of
//! the same size ([`Amo`]): `float` and `double` by their bits. The `_nbi`
//! forms complete before they return.

use core::ffi::c_int;

use switchyard::context::{AtomicInt, Bitwise, Context, Result, Sym};

use crate::{cbuf, state};

/// A C type an AMO operates on, and the atomic integer that carries it.
pub trait Amo: Copy + 'static {
    /// The carrier: same size and alignment.
    type A: AtomicInt;
    /// To the carrier.
    fn to(self) -> Self::A;
    /// From the carrier.
    fn from(a: Self::A) -> Self;
}

macro_rules! amo_int {
    ($($t:ty => $a:ty),*) => {$(
        impl Amo for $t {
            type A = $a;
            #[inline]
            fn to(self) -> $a {
                self as $a
            }
            #[inline]
            fn from(a: $a) -> $t {
                a as $t
            }
        }
    )*};
}
amo_int!(i32 => i32, i64 => i64, u32 => u32, u64 => u64, usize => u64, isize => i64);

impl Amo for f32 {
    type A = u32;
    fn to(self) -> u32 {
        self.to_bits()
    }
    fn from(a: u32) -> f32 {
        f32::from_bits(a)
    }
}

impl Amo for f64 {
    type A = u64;
    fn to(self) -> u64 {
        self.to_bits()
    }
    fn from(a: u64) -> f64 {
        f64::from_bits(a)
    }
}

/// Runs `f` on the checked handle of the symmetric `p` (argument `arg`) and
/// the checked `pe`.
#[inline]
fn on<T: Amo, R>(
    call: &'static str,
    arg: &'static str,
    p: *const T,
    pe: c_int,
    f: impl FnOnce(&mut Context, &Sym<T::A>, u32) -> Result<R>,
) -> R {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        let s = state::sym::<T::A>(ctx, call, arg, p.cast(), 1);
        state::ok(call, f(ctx, &s, pe))
    })
}

fn one<A: AtomicInt>() -> A {
    A::from_bits(1)
}

#[inline]
pub(crate) fn fetch<T: Amo>(call: &'static str, source: *const T, pe: c_int) -> T {
    T::from(on(call, "source", source, pe, |c, s, pe| c.fetch(s, 0, pe)))
}

#[inline]
pub(crate) fn set<T: Amo>(call: &'static str, dest: *mut T, value: T, pe: c_int) {
    on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.set(s, 0, value.to(), pe)
    })
}

#[inline]
pub(crate) fn swap<T: Amo>(call: &'static str, dest: *mut T, value: T, pe: c_int) -> T {
    T::from(on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.swap(s, 0, value.to(), pe)
    }))
}

#[inline]
pub(crate) fn compare_swap<T: Amo>(
    call: &'static str,
    dest: *mut T,
    cond: T,
    value: T,
    pe: c_int,
) -> T {
    T::from(on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.compare_swap(s, 0, cond.to(), value.to(), pe)
    }))
}

#[inline]
pub(crate) fn fetch_add<T: Amo>(call: &'static str, dest: *mut T, value: T, pe: c_int) -> T {
    T::from(on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.fetch_add(s, 0, value.to(), pe)
    }))
}

#[inline]
pub(crate) fn add<T: Amo>(call: &'static str, dest: *mut T, value: T, pe: c_int) {
    on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.add(s, 0, value.to(), pe)
    })
}

#[inline]
pub(crate) fn fetch_inc<T: Amo>(call: &'static str, dest: *mut T, pe: c_int) -> T {
    T::from(on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.fetch_add(s, 0, one(), pe)
    }))
}

#[inline]
pub(crate) fn inc<T: Amo>(call: &'static str, dest: *mut T, pe: c_int) {
    on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.add(s, 0, one(), pe)
    })
}

#[inline]
fn fetch_bitwise<T: Amo>(call: &'static str, dest: *mut T, op: Bitwise, value: T, pe: c_int) -> T {
    T::from(on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.fetch_bitwise(s, 0, op, value.to(), pe)
    }))
}

#[inline]
fn bitwise<T: Amo>(call: &'static str, dest: *mut T, op: Bitwise, value: T, pe: c_int) {
    on(call, "dest", dest.cast_const(), pe, |c, s, pe| {
        c.bitwise(s, 0, op, value.to(), pe)
    })
}

/// Checks the `fetch` argument of an `_nbi` AMO before the operation runs
/// (an operation done and its old value undeliverable would be half a call):
/// what [`crate::cbuf`] checks, and, in the symmetric heap, that it lies in
/// an allocated block.
fn check_fetch<T>(call: &'static str, fetch: *mut T) {
    state::with(call, |ctx| {
        cbuf::check(call, "fetch", fetch.cast_const(), 1);
        state::check_private(ctx, call, "fetch", fetch.cast_const(), 1);
    });
}

/// Stores `v` in the caller's private `fetch` (argument of an `_nbi` AMO).
///
/// # Safety
///
/// `fetch` points to a writable `T`.
#[inline]
unsafe fn deliver<T: Copy>(call: &'static str, fetch: *mut T, v: T) {
    // SAFETY: the caller's contract.
    unsafe { cbuf::dst(call, "fetch", fetch, 1)[0] = v };
}

/// fetch, set, swap (+ `_nbi`): the extended AMO types.
macro_rules! amo_ext {
    ($($t:ty: $fetch:ident $set:ident $swap:ident $fetch_nbi:ident $swap_nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($fetch), "`: atomically reads `source` on `pe`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $fetch(source: *const $t, pe: c_int) -> $t {
            fetch(stringify!($fetch), source, pe)
        }

        #[doc = concat!("`", stringify!($set), "`: atomically stores `value` at `dest` on `pe`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $set(dest: *mut $t, value: $t, pe: c_int) {
            set(stringify!($set), dest, value, pe)
        }

        #[doc = concat!("`", stringify!($swap), "`: atomically stores `value`, returns the old value.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $swap(dest: *mut $t, value: $t, pe: c_int) -> $t {
            swap(stringify!($swap), dest, value, pe)
        }

        #[doc = concat!("`", stringify!($fetch_nbi), "`: as the fetch, the value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fetch_nbi(fetch_: *mut $t, source: *const $t, pe: c_int) {
            check_fetch(stringify!($fetch_nbi), fetch_);
            let v = fetch(stringify!($fetch_nbi), source, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($fetch_nbi), fetch_, v) }
        }

        #[doc = concat!("`", stringify!($swap_nbi), "`: as the swap, the old value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $swap_nbi(fetch_: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            check_fetch(stringify!($swap_nbi), fetch_);
            let v = swap(stringify!($swap_nbi), dest, value, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($swap_nbi), fetch_, v) }
        }
    )*};
}

/// compare_swap, fetch_inc, inc, fetch_add, add (+ `_nbi`): the standard
/// AMO types.
macro_rules! amo_std {
    ($($t:ty: $cswap:ident $finc:ident $inc:ident $fadd:ident $add:ident
        $cswap_nbi:ident $finc_nbi:ident $fadd_nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($cswap), "`: stores `value` if `dest` on `pe` equals `cond`; returns the old value.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $cswap(dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
            compare_swap(stringify!($cswap), dest, cond, value, pe)
        }

        #[doc = concat!("`", stringify!($finc), "`: atomically adds 1, returns the old value.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $finc(dest: *mut $t, pe: c_int) -> $t {
            fetch_inc(stringify!($finc), dest, pe)
        }

        #[doc = concat!("`", stringify!($inc), "`: atomically adds 1, complete at `pe` after a quiet.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $inc(dest: *mut $t, pe: c_int) {
            inc(stringify!($inc), dest, pe)
        }

        #[doc = concat!("`", stringify!($fadd), "`: atomically adds `value`, returns the old value.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $fadd(dest: *mut $t, value: $t, pe: c_int) -> $t {
            fetch_add(stringify!($fadd), dest, value, pe)
        }

        #[doc = concat!("`", stringify!($add), "`: atomically adds `value`, complete at `pe` after a quiet.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $add(dest: *mut $t, value: $t, pe: c_int) {
            add(stringify!($add), dest, value, pe)
        }

        #[doc = concat!("`", stringify!($cswap_nbi), "`: as the compare-swap, the old value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cswap_nbi(fetch_: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
            check_fetch(stringify!($cswap_nbi), fetch_);
            let v = compare_swap(stringify!($cswap_nbi), dest, cond, value, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($cswap_nbi), fetch_, v) }
        }

        #[doc = concat!("`", stringify!($finc_nbi), "`: as the fetch-inc, the old value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $finc_nbi(fetch_: *mut $t, dest: *mut $t, pe: c_int) {
            check_fetch(stringify!($finc_nbi), fetch_);
            let v = fetch_inc(stringify!($finc_nbi), dest, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($finc_nbi), fetch_, v) }
        }

        #[doc = concat!("`", stringify!($fadd_nbi), "`: as the fetch-add, the old value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fadd_nbi(fetch_: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            check_fetch(stringify!($fadd_nbi), fetch_);
            let v = fetch_add(stringify!($fadd_nbi), dest, value, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($fadd_nbi), fetch_, v) }
        }
    )*};
}

/// fetch_and/or/xor, and/or/xor (+ fetching `_nbi`): the bitwise AMO types.
macro_rules! amo_bit {
    ($($t:ty: $($fop:ident $op:ident $fop_nbi:ident = $kind:ident),*;)*) => {$($(
        #[doc = concat!("`", stringify!($fop), "`: atomic bitwise ", stringify!($kind), ", returns the old value.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $fop(dest: *mut $t, value: $t, pe: c_int) -> $t {
            fetch_bitwise(stringify!($fop), dest, Bitwise::$kind, value, pe)
        }

        #[doc = concat!("`", stringify!($op), "`: atomic bitwise ", stringify!($kind), ", complete at `pe` after a quiet.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $op(dest: *mut $t, value: $t, pe: c_int) {
            bitwise(stringify!($op), dest, Bitwise::$kind, value, pe);
        }

        #[doc = concat!("`", stringify!($fop_nbi), "`: as the fetching form, the old value to `*fetch`.")]
        ///
        /// # Safety
        ///
        /// `fetch` points to a writable element.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fop_nbi(fetch_: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            check_fetch(stringify!($fop_nbi), fetch_);
            let v = fetch_bitwise(stringify!($fop_nbi), dest, Bitwise::$kind, value, pe);
            // SAFETY: the caller's contract.
            unsafe { deliver(stringify!($fop_nbi), fetch_, v) }
        }
    )*)*};
}

/// The deprecated pre-1.4 names, one plain forwarder each.
macro_rules! amo_old {
    ($($name:ident($($arg:ident: $at:ty),*) $(-> $r:ty)? = $f:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` (deprecated).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $at),*) $(-> $r)? {
            $f(stringify!($name), $($arg),*)
        }
    )*};
}

// The spec's extended AMO types (standard ones, float, double).
amo_ext! {
    i32: shmem_int_atomic_fetch shmem_int_atomic_set shmem_int_atomic_swap shmem_int_atomic_fetch_nbi shmem_int_atomic_swap_nbi;
    i64: shmem_long_atomic_fetch shmem_long_atomic_set shmem_long_atomic_swap shmem_long_atomic_fetch_nbi shmem_long_atomic_swap_nbi;
    i64: shmem_longlong_atomic_fetch shmem_longlong_atomic_set shmem_longlong_atomic_swap shmem_longlong_atomic_fetch_nbi shmem_longlong_atomic_swap_nbi;
    u32: shmem_uint_atomic_fetch shmem_uint_atomic_set shmem_uint_atomic_swap shmem_uint_atomic_fetch_nbi shmem_uint_atomic_swap_nbi;
    u64: shmem_ulong_atomic_fetch shmem_ulong_atomic_set shmem_ulong_atomic_swap shmem_ulong_atomic_fetch_nbi shmem_ulong_atomic_swap_nbi;
    u64: shmem_ulonglong_atomic_fetch shmem_ulonglong_atomic_set shmem_ulonglong_atomic_swap shmem_ulonglong_atomic_fetch_nbi shmem_ulonglong_atomic_swap_nbi;
    i32: shmem_int32_atomic_fetch shmem_int32_atomic_set shmem_int32_atomic_swap shmem_int32_atomic_fetch_nbi shmem_int32_atomic_swap_nbi;
    i64: shmem_int64_atomic_fetch shmem_int64_atomic_set shmem_int64_atomic_swap shmem_int64_atomic_fetch_nbi shmem_int64_atomic_swap_nbi;
    u32: shmem_uint32_atomic_fetch shmem_uint32_atomic_set shmem_uint32_atomic_swap shmem_uint32_atomic_fetch_nbi shmem_uint32_atomic_swap_nbi;
    u64: shmem_uint64_atomic_fetch shmem_uint64_atomic_set shmem_uint64_atomic_swap shmem_uint64_atomic_fetch_nbi shmem_uint64_atomic_swap_nbi;
    usize: shmem_size_atomic_fetch shmem_size_atomic_set shmem_size_atomic_swap shmem_size_atomic_fetch_nbi shmem_size_atomic_swap_nbi;
    isize: shmem_ptrdiff_atomic_fetch shmem_ptrdiff_atomic_set shmem_ptrdiff_atomic_swap shmem_ptrdiff_atomic_fetch_nbi shmem_ptrdiff_atomic_swap_nbi;
    f32: shmem_float_atomic_fetch shmem_float_atomic_set shmem_float_atomic_swap shmem_float_atomic_fetch_nbi shmem_float_atomic_swap_nbi;
    f64: shmem_double_atomic_fetch shmem_double_atomic_set shmem_double_atomic_swap shmem_double_atomic_fetch_nbi shmem_double_atomic_swap_nbi;
}

// The spec's standard AMO types.
amo_std! {
    i32: shmem_int_atomic_compare_swap shmem_int_atomic_fetch_inc shmem_int_atomic_inc shmem_int_atomic_fetch_add shmem_int_atomic_add
        shmem_int_atomic_compare_swap_nbi shmem_int_atomic_fetch_inc_nbi shmem_int_atomic_fetch_add_nbi;
    i64: shmem_long_atomic_compare_swap shmem_long_atomic_fetch_inc shmem_long_atomic_inc shmem_long_atomic_fetch_add shmem_long_atomic_add
        shmem_long_atomic_compare_swap_nbi shmem_long_atomic_fetch_inc_nbi shmem_long_atomic_fetch_add_nbi;
    i64: shmem_longlong_atomic_compare_swap shmem_longlong_atomic_fetch_inc shmem_longlong_atomic_inc shmem_longlong_atomic_fetch_add shmem_longlong_atomic_add
        shmem_longlong_atomic_compare_swap_nbi shmem_longlong_atomic_fetch_inc_nbi shmem_longlong_atomic_fetch_add_nbi;
    u32: shmem_uint_atomic_compare_swap shmem_uint_atomic_fetch_inc shmem_uint_atomic_inc shmem_uint_atomic_fetch_add shmem_uint_atomic_add
        shmem_uint_atomic_compare_swap_nbi shmem_uint_atomic_fetch_inc_nbi shmem_uint_atomic_fetch_add_nbi;
    u64: shmem_ulong_atomic_compare_swap shmem_ulong_atomic_fetch_inc shmem_ulong_atomic_inc shmem_ulong_atomic_fetch_add shmem_ulong_atomic_add
        shmem_ulong_atomic_compare_swap_nbi shmem_ulong_atomic_fetch_inc_nbi shmem_ulong_atomic_fetch_add_nbi;
    u64: shmem_ulonglong_atomic_compare_swap shmem_ulonglong_atomic_fetch_inc shmem_ulonglong_atomic_inc shmem_ulonglong_atomic_fetch_add shmem_ulonglong_atomic_add
        shmem_ulonglong_atomic_compare_swap_nbi shmem_ulonglong_atomic_fetch_inc_nbi shmem_ulonglong_atomic_fetch_add_nbi;
    i32: shmem_int32_atomic_compare_swap shmem_int32_atomic_fetch_inc shmem_int32_atomic_inc shmem_int32_atomic_fetch_add shmem_int32_atomic_add
        shmem_int32_atomic_compare_swap_nbi shmem_int32_atomic_fetch_inc_nbi shmem_int32_atomic_fetch_add_nbi;
    i64: shmem_int64_atomic_compare_swap shmem_int64_atomic_fetch_inc shmem_int64_atomic_inc shmem_int64_atomic_fetch_add shmem_int64_atomic_add
        shmem_int64_atomic_compare_swap_nbi shmem_int64_atomic_fetch_inc_nbi shmem_int64_atomic_fetch_add_nbi;
    u32: shmem_uint32_atomic_compare_swap shmem_uint32_atomic_fetch_inc shmem_uint32_atomic_inc shmem_uint32_atomic_fetch_add shmem_uint32_atomic_add
        shmem_uint32_atomic_compare_swap_nbi shmem_uint32_atomic_fetch_inc_nbi shmem_uint32_atomic_fetch_add_nbi;
    u64: shmem_uint64_atomic_compare_swap shmem_uint64_atomic_fetch_inc shmem_uint64_atomic_inc shmem_uint64_atomic_fetch_add shmem_uint64_atomic_add
        shmem_uint64_atomic_compare_swap_nbi shmem_uint64_atomic_fetch_inc_nbi shmem_uint64_atomic_fetch_add_nbi;
    usize: shmem_size_atomic_compare_swap shmem_size_atomic_fetch_inc shmem_size_atomic_inc shmem_size_atomic_fetch_add shmem_size_atomic_add
        shmem_size_atomic_compare_swap_nbi shmem_size_atomic_fetch_inc_nbi shmem_size_atomic_fetch_add_nbi;
    isize: shmem_ptrdiff_atomic_compare_swap shmem_ptrdiff_atomic_fetch_inc shmem_ptrdiff_atomic_inc shmem_ptrdiff_atomic_fetch_add shmem_ptrdiff_atomic_add
        shmem_ptrdiff_atomic_compare_swap_nbi shmem_ptrdiff_atomic_fetch_inc_nbi shmem_ptrdiff_atomic_fetch_add_nbi;
}

// The spec's bitwise AMO types.
amo_bit! {
    u32: shmem_uint_atomic_fetch_and shmem_uint_atomic_and shmem_uint_atomic_fetch_and_nbi = And,
        shmem_uint_atomic_fetch_or shmem_uint_atomic_or shmem_uint_atomic_fetch_or_nbi = Or,
        shmem_uint_atomic_fetch_xor shmem_uint_atomic_xor shmem_uint_atomic_fetch_xor_nbi = Xor;
    u64: shmem_ulong_atomic_fetch_and shmem_ulong_atomic_and shmem_ulong_atomic_fetch_and_nbi = And,
        shmem_ulong_atomic_fetch_or shmem_ulong_atomic_or shmem_ulong_atomic_fetch_or_nbi = Or,
        shmem_ulong_atomic_fetch_xor shmem_ulong_atomic_xor shmem_ulong_atomic_fetch_xor_nbi = Xor;
    u64: shmem_ulonglong_atomic_fetch_and shmem_ulonglong_atomic_and shmem_ulonglong_atomic_fetch_and_nbi = And,
        shmem_ulonglong_atomic_fetch_or shmem_ulonglong_atomic_or shmem_ulonglong_atomic_fetch_or_nbi = Or,
        shmem_ulonglong_atomic_fetch_xor shmem_ulonglong_atomic_xor shmem_ulonglong_atomic_fetch_xor_nbi = Xor;
    i32: shmem_int32_atomic_fetch_and shmem_int32_atomic_and shmem_int32_atomic_fetch_and_nbi = And,
        shmem_int32_atomic_fetch_or shmem_int32_atomic_or shmem_int32_atomic_fetch_or_nbi = Or,
        shmem_int32_atomic_fetch_xor shmem_int32_atomic_xor shmem_int32_atomic_fetch_xor_nbi = Xor;
    i64: shmem_int64_atomic_fetch_and shmem_int64_atomic_and shmem_int64_atomic_fetch_and_nbi = And,
        shmem_int64_atomic_fetch_or shmem_int64_atomic_or shmem_int64_atomic_fetch_or_nbi = Or,
        shmem_int64_atomic_fetch_xor shmem_int64_atomic_xor shmem_int64_atomic_fetch_xor_nbi = Xor;
    u32: shmem_uint32_atomic_fetch_and shmem_uint32_atomic_and shmem_uint32_atomic_fetch_and_nbi = And,
        shmem_uint32_atomic_fetch_or shmem_uint32_atomic_or shmem_uint32_atomic_fetch_or_nbi = Or,
        shmem_uint32_atomic_fetch_xor shmem_uint32_atomic_xor shmem_uint32_atomic_fetch_xor_nbi = Xor;
    u64: shmem_uint64_atomic_fetch_and shmem_uint64_atomic_and shmem_uint64_atomic_fetch_and_nbi = And,
        shmem_uint64_atomic_fetch_or shmem_uint64_atomic_or shmem_uint64_atomic_fetch_or_nbi = Or,
        shmem_uint64_atomic_fetch_xor shmem_uint64_atomic_xor shmem_uint64_atomic_fetch_xor_nbi = Xor;
}

// Deprecated names (OpenSHMEM 1.3 and earlier).
amo_old! {
    shmem_int_cswap(dest: *mut i32, cond: i32, value: i32, pe: c_int) -> i32 = compare_swap;
    shmem_int_fadd(dest: *mut i32, value: i32, pe: c_int) -> i32 = fetch_add;
    shmem_int_finc(dest: *mut i32, pe: c_int) -> i32 = fetch_inc;
    shmem_int_add(dest: *mut i32, value: i32, pe: c_int) = add;
    shmem_int_inc(dest: *mut i32, pe: c_int) = inc;
    shmem_long_cswap(dest: *mut i64, cond: i64, value: i64, pe: c_int) -> i64 = compare_swap;
    shmem_long_fadd(dest: *mut i64, value: i64, pe: c_int) -> i64 = fetch_add;
    shmem_long_finc(dest: *mut i64, pe: c_int) -> i64 = fetch_inc;
    shmem_long_add(dest: *mut i64, value: i64, pe: c_int) = add;
    shmem_long_inc(dest: *mut i64, pe: c_int) = inc;
    shmem_longlong_cswap(dest: *mut i64, cond: i64, value: i64, pe: c_int) -> i64 = compare_swap;
    shmem_longlong_fadd(dest: *mut i64, value: i64, pe: c_int) -> i64 = fetch_add;
    shmem_longlong_finc(dest: *mut i64, pe: c_int) -> i64 = fetch_inc;
    shmem_longlong_add(dest: *mut i64, value: i64, pe: c_int) = add;
    shmem_longlong_inc(dest: *mut i64, pe: c_int) = inc;
    shmem_int_swap(dest: *mut i32, value: i32, pe: c_int) -> i32 = swap;
    shmem_int_fetch(source: *const i32, pe: c_int) -> i32 = fetch;
    shmem_int_set(dest: *mut i32, value: i32, pe: c_int) = set;
    shmem_long_swap(dest: *mut i64, value: i64, pe: c_int) -> i64 = swap;
    shmem_long_fetch(source: *const i64, pe: c_int) -> i64 = fetch;
    shmem_long_set(dest: *mut i64, value: i64, pe: c_int) = set;
    shmem_longlong_swap(dest: *mut i64, value: i64, pe: c_int) -> i64 = swap;
    shmem_longlong_fetch(source: *const i64, pe: c_int) -> i64 = fetch;
    shmem_longlong_set(dest: *mut i64, value: i64, pe: c_int) = set;
    shmem_float_swap(dest: *mut f32, value: f32, pe: c_int) -> f32 = swap;
    shmem_float_fetch(source: *const f32, pe: c_int) -> f32 = fetch;
    shmem_float_set(dest: *mut f32, value: f32, pe: c_int) = set;
    shmem_double_swap(dest: *mut f64, value: f64, pe: c_int) -> f64 = swap;
    shmem_double_fetch(source: *const f64, pe: c_int) -> f64 = fetch;
    shmem_double_set(dest: *mut f64, value: f64, pe: c_int) = set;
    shmem_swap(dest: *mut i64, value: i64, pe: c_int) -> i64 = swap;
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn carriers_keep_every_bit() {
        assert_eq!(<f64 as Amo>::from((-2.5f64).to()), -2.5);
        assert_eq!(
            <f32 as Amo>::from(f32::MIN_POSITIVE.to()),
            f32::MIN_POSITIVE
        );
        assert!(<f64 as Amo>::from(f64::NAN.to()).is_nan());
        assert_eq!(<usize as Amo>::from(usize::MAX.to()), usize::MAX);
        assert_eq!(<isize as Amo>::from((-7isize).to()), -7);
        assert_eq!(u64::MAX.to(), u64::MAX);
        assert_eq!(one::<i32>(), 1);
    }
}
