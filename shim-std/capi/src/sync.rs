//! Point-to-point synchronization: `shmem_TYPENAME_wait_until` and its
//! `_all`/`_any`/`_some` (and `_vector`) forms, `shmem_TYPENAME_test*`, and
//! the deprecated `shmem_TYPENAME_wait`, on the spec's point-to-point types.
//!
//! A wait polls the PE's own copy of the variable with Acquire loads,
//! making progress between polls (TCP peers' puts are applied by it). It
//! lasts as long as the application takes while the PEs are alive (the op
//! timeout, `SWITCHYARD_OP_TIMEOUT`, does not bound it); a PE dying
//! meanwhile ends the job naming the call instead of hanging it. Every
//! wait, on one variable or on a set, goes through `state::wait`: under
//! `SHMEM_THREAD_MULTIPLE` it leaves the library between short runs of
//! polls, so the PE's other threads get in meanwhile (one of them may be
//! the one to satisfy it). A test makes one progress step and one check.
//!
//! `shmem_test_any` and `shmem_wait_until_any` are fair: each scans from
//! after the index the thread's last such call returned for the same
//! `ivars` array (`ANY_CURSOR`), not always from 0.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{
    AtomicI16, AtomicI32, AtomicI64, AtomicIsize, AtomicU16, AtomicU32, AtomicU64, AtomicUsize,
    Ordering,
};

use switchyard::context::Plain;

use crate::{cbuf, state};

/// `SHMEM_CMP_EQ` (also `_SHMEM_CMP_EQ`).
pub const SHMEM_CMP_EQ: c_int = 0;
/// `SHMEM_CMP_NE`.
pub const SHMEM_CMP_NE: c_int = 1;
/// `SHMEM_CMP_GT`.
pub const SHMEM_CMP_GT: c_int = 2;
/// `SHMEM_CMP_GE`.
pub const SHMEM_CMP_GE: c_int = 3;
/// `SHMEM_CMP_LT`.
pub const SHMEM_CMP_LT: c_int = 4;
/// `SHMEM_CMP_LE`.
pub const SHMEM_CMP_LE: c_int = 5;

/// A comparison, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cmp(c_int);

impl Cmp {
    /// The `cmp` argument of `call`, or the end of the job.
    pub(crate) fn new(call: &'static str, cmp: c_int) -> Cmp {
        if (SHMEM_CMP_EQ..=SHMEM_CMP_LE).contains(&cmp) {
            Cmp(cmp)
        } else {
            state::fatal(
                call,
                format_args!("cmp = {cmp} is not one of SHMEM_CMP_EQ/NE/GT/GE/LT/LE (0..=5)"),
            )
        }
    }

    #[inline]
    pub(crate) fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self.0 {
            SHMEM_CMP_EQ => a == b,
            SHMEM_CMP_NE => a != b,
            SHMEM_CMP_GT => a > b,
            SHMEM_CMP_GE => a >= b,
            SHMEM_CMP_LT => a < b,
            _ => a <= b,
        }
    }
}

/// A point-to-point type: read from the PE's own symmetric memory with an
/// Acquire load (peers write it at any time).
pub trait Word: Plain + PartialOrd {
    /// Loads `*p`.
    ///
    /// # Safety
    ///
    /// `p` is aligned and points into memory that stays mapped (checked
    /// symmetric by `state::sym`).
    unsafe fn load(p: *const Self) -> Self;
}

macro_rules! word {
    ($($t:ty => $a:ty),*) => {$(
        impl Word for $t {
            #[inline]
            unsafe fn load(p: *const $t) -> $t {
                // SYNC POINT with the Release fences and stores of the writers
                // (drivers' puts and atomics): what they published is seen.
                // SAFETY: aligned, valid, only accessed atomically or by
                // copies while peers may write it (caller).
                unsafe { <$a>::from_ptr(p.cast_mut()) }.load(Ordering::Acquire)
            }
        }
    )*};
}
word!(i16 => AtomicI16, u16 => AtomicU16, i32 => AtomicI32, u32 => AtomicU32,
      i64 => AtomicI64, u64 => AtomicU64, isize => AtomicIsize, usize => AtomicUsize);

/// The values compared against: one for all, or one per element.
#[derive(Clone, Copy)]
enum Values<'a, T> {
    One(T),
    Each(&'a [T]),
}

impl<T: Copy> Values<'_, T> {
    #[inline]
    fn at(&self, i: usize) -> T {
        match self {
            Values::One(v) => *v,
            Values::Each(v) => v[i],
        }
    }
}

thread_local! {
    /// The fairness cursor of `shmem_test_any` and `shmem_wait_until_any`
    /// (and their `_vector` forms): the `ivars` address and the index this
    /// thread's last such call returned for it. A call on the same array
    /// scans from the next index on (wrapping), so a caller that loops until
    /// every index has fired sees each, not the lowest satisfied index
    /// again and again; a call on another array starts at 0 and takes the
    /// cursor over (one array per thread is remembered).
    static ANY_CURSOR: core::cell::Cell<(usize, usize)> =
        const { core::cell::Cell::new((0, usize::MAX)) };
}

/// The checked arguments of a multi-variable wait or test.
struct Set<'a, T> {
    ivars: *const T,
    n: usize,
    status: Option<&'a [c_int]>,
    cmp: Cmp,
    values: Values<'a, T>,
}

impl<T: Word> Set<'_, T> {
    fn included(&self, i: usize) -> bool {
        self.status.is_none_or(|s| s[i] == 0)
    }

    fn any_included(&self) -> bool {
        (0..self.n).any(|i| self.included(i))
    }

    /// Whether element `i` satisfies its comparison.
    fn holds(&self, i: usize) -> bool {
        // SAFETY: `ivars` was checked for `n` elements; `i < n`.
        let v = unsafe { T::load(self.ivars.add(i)) };
        self.cmp.holds(v, self.values.at(i))
    }

    fn all(&self) -> bool {
        (0..self.n).all(|i| !self.included(i) || self.holds(i))
    }

    /// An included element that satisfies its comparison, scanning from
    /// after the index this thread's last `_any` call returned for the same
    /// `ivars` array (see [`ANY_CURSOR`]); remembers the one it returns.
    fn next_any(&self) -> Option<usize> {
        let key = self.ivars as usize;
        let (k, last) = ANY_CURSOR.get();
        let start = if k == key && last < self.n {
            last + 1
        } else {
            0
        };
        let found = (0..self.n)
            .map(|j| (start + j) % self.n)
            .find(|&i| self.included(i) && self.holds(i))?;
        ANY_CURSOR.set((key, found));
        Some(found)
    }

    /// Writes the satisfying indices to `out`; returns how many.
    fn some(&self, out: &mut [usize]) -> usize {
        let mut k = 0;
        for i in 0..self.n {
            if self.included(i) && self.holds(i) {
                out[k] = i;
                k += 1;
            }
        }
        k
    }
}

/// Checks the arguments of a multi-variable wait or test (ending the job
/// naming `call` when one is wrong); the set they make.
///
/// # Safety
///
/// `status` (when not NULL) and `values` (when not NULL) point to `n`
/// readable elements that stay so for `'a`.
unsafe fn set_of<'a, T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> Set<'a, T> {
    state::with(call, |ctx| {
        let cmp = Cmp::new(call, cmp);
        state::sym::<T>(ctx, call, "ivars", ivars.cast::<c_void>(), n);
        let status = if status.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { cbuf::src(call, "status", status, n) })
        };
        let values = if values.is_null() {
            Values::One(value)
        } else {
            // SAFETY: the caller's contract.
            Values::Each(unsafe { cbuf::src(call, "cmp_values", values, n) })
        };
        Set {
            ivars,
            n,
            status,
            cmp,
            values,
        }
    })
}

/// `wait_until` on one variable; returns the value that satisfied it.
/// (Through [`state::wait`], so under `SHMEM_THREAD_MULTIPLE` the other
/// threads of the PE get in while it waits.)
pub(crate) fn wait_until<T: Word>(call: &'static str, ivar: *const T, cmp: c_int, value: T) -> T {
    let cmp = state::with(call, |ctx| {
        let cmp = Cmp::new(call, cmp);
        state::sym::<T>(ctx, call, "ivar", ivar.cast::<c_void>(), 1);
        cmp
    });
    state::wait(call, |_| {
        // SAFETY: checked symmetric and aligned above.
        let seen = unsafe { T::load(ivar) };
        Ok(cmp.holds(seen, value).then_some(seen))
    })
}

fn test<T: Word>(call: &'static str, ivar: *const T, cmp: c_int, value: T) -> c_int {
    state::with(call, |ctx| {
        let cmp = Cmp::new(call, cmp);
        state::sym::<T>(ctx, call, "ivar", ivar.cast::<c_void>(), 1);
        ctx.progress();
        // SAFETY: checked symmetric and aligned above.
        c_int::from(cmp.holds(unsafe { T::load(ivar) }, value))
    })
}

// The set waits poll through `state::wait`, as `wait_until` does: the
// arguments are checked in one entry, then under `SHMEM_THREAD_MULTIPLE`
// the wait is a series of short entries with the library left in between
// (another thread of the PE may be the one to satisfy it).

/// # Safety
///
/// As [`set_of`].
unsafe fn wait_all<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) {
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    state::wait(call, |_| Ok(s.all().then_some(())));
}

/// # Safety
///
/// As [`set_of`].
unsafe fn wait_any<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> usize {
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    if !s.any_included() {
        return usize::MAX;
    }
    state::wait(call, |_| Ok(s.next_any()))
}

/// # Safety
///
/// As [`set_of`]; `indices` points to `n` writable elements.
#[allow(clippy::too_many_arguments)]
unsafe fn wait_some<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    indices: *mut usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> usize {
    // SAFETY: the caller's contract.
    let out = unsafe { cbuf::dst(call, "indices", indices, n) };
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    state::with(call, |ctx| {
        state::check_private(ctx, call, "indices", out.as_ptr(), n);
    });
    if !s.any_included() {
        return 0;
    }
    state::wait(call, |_| {
        let k = s.some(out);
        Ok((k > 0).then_some(k))
    })
}

/// # Safety
///
/// As [`set_of`].
unsafe fn test_all<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> c_int {
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    state::with(call, |ctx| {
        ctx.progress();
        c_int::from(s.all())
    })
}

/// # Safety
///
/// As [`set_of`].
unsafe fn test_any<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> usize {
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    state::with(call, |ctx| {
        ctx.progress();
        s.next_any().unwrap_or(usize::MAX)
    })
}

/// # Safety
///
/// As [`set_of`]; `indices` points to `n` writable elements.
#[allow(clippy::too_many_arguments)]
unsafe fn test_some<T: Word>(
    call: &'static str,
    ivars: *const T,
    n: usize,
    indices: *mut usize,
    status: *const c_int,
    cmp: c_int,
    value: T,
    values: *const T,
) -> usize {
    // SAFETY: the caller's contract.
    let out = unsafe { cbuf::dst(call, "indices", indices, n) };
    // SAFETY: the caller's contract.
    let s = unsafe { set_of(call, ivars, n, status, cmp, value, values) };
    state::with(call, |ctx| {
        state::check_private(ctx, call, "indices", out.as_ptr(), n);
        ctx.progress();
        s.some(out)
    })
}

macro_rules! p2p {
    ($($t:ty: $wait_until:ident $wait_all:ident $wait_any:ident $wait_some:ident
        $wait_all_v:ident $wait_any_v:ident $wait_some_v:ident
        $test:ident $test_all:ident $test_any:ident $test_some:ident
        $test_all_v:ident $test_any_v:ident $test_some_v:ident;)*) => {$(
        #[doc = concat!("`", stringify!($wait_until), "`: waits until `*ivar` compares to `cmp_value` as `cmp` says.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $wait_until(ivar: *mut $t, cmp: c_int, cmp_value: $t) {
            wait_until(stringify!($wait_until), ivar.cast_const(), cmp, cmp_value);
        }

        #[doc = concat!("`", stringify!($wait_all), "`: waits until every included element satisfies the comparison.")]
        ///
        /// # Safety
        ///
        /// `status` is NULL or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_all(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) {
            // SAFETY: the caller's contract.
            unsafe { wait_all(stringify!($wait_all), ivars.cast_const(), nelems, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($wait_any), "`: waits until some included element satisfies it; returns its index (`SIZE_MAX` when none is included).")]
        ///
        /// # Safety
        ///
        /// `status` is NULL or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_any(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) -> usize {
            // SAFETY: the caller's contract.
            unsafe { wait_any(stringify!($wait_any), ivars.cast_const(), nelems, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($wait_some), "`: waits until at least one included element satisfies it; writes their indices, returns how many.")]
        ///
        /// # Safety
        ///
        /// `indices` points to `nelems` writable `size_t`s; `status` is NULL
        /// or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_some(
            ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) -> usize {
            // SAFETY: the caller's contract.
            unsafe { wait_some(stringify!($wait_some), ivars.cast_const(), nelems, indices, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($wait_all_v), "`: as `wait_until_all`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// `cmp_values` points to `nelems` readable elements; `status` is NULL
        /// or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_all_v(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) {
            let call = stringify!($wait_all_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { wait_all(call, ivars.cast_const(), nelems, status, cmp, <$t>::default(), v) }
        }

        #[doc = concat!("`", stringify!($wait_any_v), "`: as `wait_until_any`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// As the `_all_vector` form.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_any_v(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) -> usize {
            let call = stringify!($wait_any_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { wait_any(call, ivars.cast_const(), nelems, status, cmp, <$t>::default(), v) }
        }

        #[doc = concat!("`", stringify!($wait_some_v), "`: as `wait_until_some`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// As the `_all_vector` form; `indices` points to `nelems` writable
        /// `size_t`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $wait_some_v(
            ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) -> usize {
            let call = stringify!($wait_some_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { wait_some(call, ivars.cast_const(), nelems, indices, status, cmp, <$t>::default(), v) }
        }

        #[doc = concat!("`", stringify!($test), "`: 1 when `*ivar` compares to `cmp_value` as `cmp` says, else 0.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $test(ivar: *mut $t, cmp: c_int, cmp_value: $t) -> c_int {
            test(stringify!($test), ivar.cast_const(), cmp, cmp_value)
        }

        #[doc = concat!("`", stringify!($test_all), "`: 1 when every included element satisfies the comparison.")]
        ///
        /// # Safety
        ///
        /// `status` is NULL or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_all(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) -> c_int {
            // SAFETY: the caller's contract.
            unsafe { test_all(stringify!($test_all), ivars.cast_const(), nelems, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($test_any), "`: the index of an included element that satisfies it, else `SIZE_MAX`.")]
        ///
        /// # Safety
        ///
        /// `status` is NULL or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_any(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) -> usize {
            // SAFETY: the caller's contract.
            unsafe { test_any(stringify!($test_any), ivars.cast_const(), nelems, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($test_some), "`: writes the indices of the included elements that satisfy it; returns how many.")]
        ///
        /// # Safety
        ///
        /// `indices` points to `nelems` writable `size_t`s; `status` is NULL
        /// or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_some(
            ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, cmp_value: $t,
        ) -> usize {
            // SAFETY: the caller's contract.
            unsafe { test_some(stringify!($test_some), ivars.cast_const(), nelems, indices, status, cmp, cmp_value, core::ptr::null()) }
        }

        #[doc = concat!("`", stringify!($test_all_v), "`: as `test_all`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// `cmp_values` points to `nelems` readable elements; `status` is NULL
        /// or points to `nelems` readable `int`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_all_v(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) -> c_int {
            let call = stringify!($test_all_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { test_all(call, ivars.cast_const(), nelems, status, cmp, <$t>::default(), v) }
        }

        #[doc = concat!("`", stringify!($test_any_v), "`: as `test_any`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// As the `_all_vector` form.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_any_v(
            ivars: *mut $t, nelems: usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) -> usize {
            let call = stringify!($test_any_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { test_any(call, ivars.cast_const(), nelems, status, cmp, <$t>::default(), v) }
        }

        #[doc = concat!("`", stringify!($test_some_v), "`: as `test_some`, one comparison value per element.")]
        ///
        /// # Safety
        ///
        /// As the `_all_vector` form; `indices` points to `nelems` writable
        /// `size_t`s.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $test_some_v(
            ivars: *mut $t, nelems: usize, indices: *mut usize, status: *const c_int, cmp: c_int, cmp_values: *const $t,
        ) -> usize {
            let call = stringify!($test_some_v);
            // SAFETY: the caller's contract.
            let v = unsafe { cbuf::src(call, "cmp_values", cmp_values, nelems) }.as_ptr();
            // SAFETY: the caller's contract.
            unsafe { test_some(call, ivars.cast_const(), nelems, indices, status, cmp, <$t>::default(), v) }
        }
    )*};
}

/// The deprecated `shmem_TYPENAME_wait(ivar, cmp_value)`: waits until
/// `*ivar != cmp_value`.
macro_rules! p2p_old {
    ($($t:ty: $name:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` (deprecated): waits until `*ivar != cmp_value`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(ivar: *mut $t, cmp_value: $t) {
            wait_until(stringify!($name), ivar.cast_const(), SHMEM_CMP_NE, cmp_value);
        }
    )*};
}

// The spec's point-to-point synchronization types.
p2p! {
    i16: shmem_short_wait_until shmem_short_wait_until_all shmem_short_wait_until_any shmem_short_wait_until_some
        shmem_short_wait_until_all_vector shmem_short_wait_until_any_vector shmem_short_wait_until_some_vector
        shmem_short_test shmem_short_test_all shmem_short_test_any shmem_short_test_some
        shmem_short_test_all_vector shmem_short_test_any_vector shmem_short_test_some_vector;
    i32: shmem_int_wait_until shmem_int_wait_until_all shmem_int_wait_until_any shmem_int_wait_until_some
        shmem_int_wait_until_all_vector shmem_int_wait_until_any_vector shmem_int_wait_until_some_vector
        shmem_int_test shmem_int_test_all shmem_int_test_any shmem_int_test_some
        shmem_int_test_all_vector shmem_int_test_any_vector shmem_int_test_some_vector;
    i64: shmem_long_wait_until shmem_long_wait_until_all shmem_long_wait_until_any shmem_long_wait_until_some
        shmem_long_wait_until_all_vector shmem_long_wait_until_any_vector shmem_long_wait_until_some_vector
        shmem_long_test shmem_long_test_all shmem_long_test_any shmem_long_test_some
        shmem_long_test_all_vector shmem_long_test_any_vector shmem_long_test_some_vector;
    i64: shmem_longlong_wait_until shmem_longlong_wait_until_all shmem_longlong_wait_until_any shmem_longlong_wait_until_some
        shmem_longlong_wait_until_all_vector shmem_longlong_wait_until_any_vector shmem_longlong_wait_until_some_vector
        shmem_longlong_test shmem_longlong_test_all shmem_longlong_test_any shmem_longlong_test_some
        shmem_longlong_test_all_vector shmem_longlong_test_any_vector shmem_longlong_test_some_vector;
    u16: shmem_ushort_wait_until shmem_ushort_wait_until_all shmem_ushort_wait_until_any shmem_ushort_wait_until_some
        shmem_ushort_wait_until_all_vector shmem_ushort_wait_until_any_vector shmem_ushort_wait_until_some_vector
        shmem_ushort_test shmem_ushort_test_all shmem_ushort_test_any shmem_ushort_test_some
        shmem_ushort_test_all_vector shmem_ushort_test_any_vector shmem_ushort_test_some_vector;
    u32: shmem_uint_wait_until shmem_uint_wait_until_all shmem_uint_wait_until_any shmem_uint_wait_until_some
        shmem_uint_wait_until_all_vector shmem_uint_wait_until_any_vector shmem_uint_wait_until_some_vector
        shmem_uint_test shmem_uint_test_all shmem_uint_test_any shmem_uint_test_some
        shmem_uint_test_all_vector shmem_uint_test_any_vector shmem_uint_test_some_vector;
    u64: shmem_ulong_wait_until shmem_ulong_wait_until_all shmem_ulong_wait_until_any shmem_ulong_wait_until_some
        shmem_ulong_wait_until_all_vector shmem_ulong_wait_until_any_vector shmem_ulong_wait_until_some_vector
        shmem_ulong_test shmem_ulong_test_all shmem_ulong_test_any shmem_ulong_test_some
        shmem_ulong_test_all_vector shmem_ulong_test_any_vector shmem_ulong_test_some_vector;
    u64: shmem_ulonglong_wait_until shmem_ulonglong_wait_until_all shmem_ulonglong_wait_until_any shmem_ulonglong_wait_until_some
        shmem_ulonglong_wait_until_all_vector shmem_ulonglong_wait_until_any_vector shmem_ulonglong_wait_until_some_vector
        shmem_ulonglong_test shmem_ulonglong_test_all shmem_ulonglong_test_any shmem_ulonglong_test_some
        shmem_ulonglong_test_all_vector shmem_ulonglong_test_any_vector shmem_ulonglong_test_some_vector;
    i32: shmem_int32_wait_until shmem_int32_wait_until_all shmem_int32_wait_until_any shmem_int32_wait_until_some
        shmem_int32_wait_until_all_vector shmem_int32_wait_until_any_vector shmem_int32_wait_until_some_vector
        shmem_int32_test shmem_int32_test_all shmem_int32_test_any shmem_int32_test_some
        shmem_int32_test_all_vector shmem_int32_test_any_vector shmem_int32_test_some_vector;
    i64: shmem_int64_wait_until shmem_int64_wait_until_all shmem_int64_wait_until_any shmem_int64_wait_until_some
        shmem_int64_wait_until_all_vector shmem_int64_wait_until_any_vector shmem_int64_wait_until_some_vector
        shmem_int64_test shmem_int64_test_all shmem_int64_test_any shmem_int64_test_some
        shmem_int64_test_all_vector shmem_int64_test_any_vector shmem_int64_test_some_vector;
    u32: shmem_uint32_wait_until shmem_uint32_wait_until_all shmem_uint32_wait_until_any shmem_uint32_wait_until_some
        shmem_uint32_wait_until_all_vector shmem_uint32_wait_until_any_vector shmem_uint32_wait_until_some_vector
        shmem_uint32_test shmem_uint32_test_all shmem_uint32_test_any shmem_uint32_test_some
        shmem_uint32_test_all_vector shmem_uint32_test_any_vector shmem_uint32_test_some_vector;
    u64: shmem_uint64_wait_until shmem_uint64_wait_until_all shmem_uint64_wait_until_any shmem_uint64_wait_until_some
        shmem_uint64_wait_until_all_vector shmem_uint64_wait_until_any_vector shmem_uint64_wait_until_some_vector
        shmem_uint64_test shmem_uint64_test_all shmem_uint64_test_any shmem_uint64_test_some
        shmem_uint64_test_all_vector shmem_uint64_test_any_vector shmem_uint64_test_some_vector;
    usize: shmem_size_wait_until shmem_size_wait_until_all shmem_size_wait_until_any shmem_size_wait_until_some
        shmem_size_wait_until_all_vector shmem_size_wait_until_any_vector shmem_size_wait_until_some_vector
        shmem_size_test shmem_size_test_all shmem_size_test_any shmem_size_test_some
        shmem_size_test_all_vector shmem_size_test_any_vector shmem_size_test_some_vector;
    isize: shmem_ptrdiff_wait_until shmem_ptrdiff_wait_until_all shmem_ptrdiff_wait_until_any shmem_ptrdiff_wait_until_some
        shmem_ptrdiff_wait_until_all_vector shmem_ptrdiff_wait_until_any_vector shmem_ptrdiff_wait_until_some_vector
        shmem_ptrdiff_test shmem_ptrdiff_test_all shmem_ptrdiff_test_any shmem_ptrdiff_test_some
        shmem_ptrdiff_test_all_vector shmem_ptrdiff_test_any_vector shmem_ptrdiff_test_some_vector;
}

p2p_old! {
    i16: shmem_short_wait;
    i32: shmem_int_wait;
    i64: shmem_long_wait;
    i64: shmem_longlong_wait;
    i64: shmem_wait;
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn comparisons() {
        let c = |k| Cmp::new("test", k);
        assert!(c(SHMEM_CMP_EQ).holds(3, 3) && !c(SHMEM_CMP_EQ).holds(3, 4));
        assert!(c(SHMEM_CMP_NE).holds(3, 4) && !c(SHMEM_CMP_NE).holds(4, 4));
        assert!(c(SHMEM_CMP_GT).holds(5, 4) && !c(SHMEM_CMP_GT).holds(4, 4));
        assert!(c(SHMEM_CMP_GE).holds(4, 4) && !c(SHMEM_CMP_GE).holds(3, 4));
        assert!(c(SHMEM_CMP_LT).holds(-1i16, 0) && !c(SHMEM_CMP_LT).holds(0i16, 0));
        assert!(c(SHMEM_CMP_LE).holds(0u64, 0) && !c(SHMEM_CMP_LE).holds(1u64, 0));
    }

    #[test]
    fn sets_honour_the_status_mask() {
        let words = [0u32, 5, 0, 7];
        let status = [0, 0, 1, 1];
        let s = Set {
            ivars: words.as_ptr(),
            n: 4,
            status: Some(&status),
            cmp: Cmp(SHMEM_CMP_NE),
            values: Values::One(0),
        };
        assert!(!s.all(), "element 0 is included and zero");
        assert_eq!(s.next_any(), Some(1));
        let mut out = [usize::MAX; 4];
        assert_eq!(s.some(&mut out), 1);
        assert_eq!(out[0], 1);
        let want = [0u32, 5, 9, 9];
        let v = Set {
            values: Values::Each(&want),
            cmp: Cmp(SHMEM_CMP_EQ),
            ..s
        };
        assert!(v.all(), "masked elements do not count");
        let none = Set {
            status: Some(&[1, 1, 1, 1]),
            ..v
        };
        assert!(none.all() && !none.any_included() && none.next_any().is_none());
    }

    #[test]
    fn any_scans_on_from_the_index_it_last_returned() {
        let words = [1u64, 1, 0, 1];
        let s = Set {
            ivars: words.as_ptr(),
            n: 4,
            status: None,
            cmp: Cmp(SHMEM_CMP_NE),
            values: Values::One(0),
        };
        let got: Vec<_> = (0..5).map(|_| s.next_any()).collect();
        assert_eq!(got, [Some(0), Some(1), Some(3), Some(0), Some(1)]);
        // Another array starts at 0 and takes the cursor over.
        let other = [0u64, 1];
        let o = Set {
            ivars: other.as_ptr(),
            n: 2,
            ..s
        };
        assert_eq!((o.next_any(), o.next_any()), (Some(1), Some(1)));
        assert_eq!(s.next_any(), Some(0));
    }
}
