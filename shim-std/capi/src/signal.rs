//! Signals: `shmem_TYPENAME_put_signal` (and `_nbi`) for every standard RMA
//! type, the sized and `putmem` forms, `shmem_signal_fetch` and
//! `shmem_signal_wait_until`.
//!
//! A put with signal is the put, a fence, then the signal update (an atomic
//! set or add of the 64-bit signal word on the same PE): a PE that sees the
//! signal sees the data. Every argument is checked before anything is
//! written.

use core::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort, c_void,
};

use switchyard::context::Plain;

use crate::{
    cbuf,
    rma::{self, Bits128, LongDouble},
    state, sync,
};

/// `SHMEM_SIGNAL_SET`: the signal word becomes the signal value.
pub const SHMEM_SIGNAL_SET: c_int = 0;
/// `SHMEM_SIGNAL_ADD`: the signal value is added to the signal word.
pub const SHMEM_SIGNAL_ADD: c_int = 1;

/// # Safety
///
/// `source` points to `n` readable elements.
#[allow(clippy::too_many_arguments)]
unsafe fn put_signal<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    n: usize,
    sig_addr: *mut u64,
    signal: u64,
    sig_op: c_int,
    pe: c_int,
) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        let sig = state::sym::<u64>(ctx, call, "sig_addr", sig_addr.cast_const().cast(), 1);
        if sig_op != SHMEM_SIGNAL_SET && sig_op != SHMEM_SIGNAL_ADD {
            state::fatal(
                call,
                format_args!(
                    "sig_op = {sig_op} is neither SHMEM_SIGNAL_SET (0) nor SHMEM_SIGNAL_ADD (1)"
                ),
            );
        }
        // No data (`nelems` 0): `dest` and `source` are not looked at; the
        // signal is still updated.
        if n > 0 {
            let d = state::sym::<T>(ctx, call, "dest", dest.cast_const().cast(), n);
            cbuf::check(call, "source", source, n);
            // A put to this PE whose ranges overlap copies like memmove, as
            // `shmem_put` does (the drivers copy without overlap).
            // SAFETY: `dest` checked symmetric, `source` checked and readable
            // (the caller's contract), both for `n`.
            if !unsafe { rma::moved_in_place(ctx, pe, dest, source, n) } {
                // SAFETY: the caller's contract.
                let s = unsafe { cbuf::src(call, "source", source, n) };
                state::ok(call, ctx.put(&d, 0, s, pe));
            }
            state::ok(call, ctx.fence());
        }
        if sig_op == SHMEM_SIGNAL_SET {
            state::ok(call, ctx.set(&sig, 0, signal, pe));
        } else {
            state::ok(call, ctx.add(&sig, 0, signal, pe));
        }
    })
}

macro_rules! put_signal {
    ($($t:ty: $name:ident $nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: puts `nelems` elements to `dest` on `pe`, then updates `*sig_addr` there.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { put_signal(stringify!($name), dest, source, nelems, sig_addr, signal, sig_op, pe) }
        }

        #[doc = concat!("`", stringify!($nbi), "`: as the blocking form (complete on return).")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $nbi(
            dest: *mut $t, source: *const $t, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { put_signal(stringify!($nbi), dest, source, nelems, sig_addr, signal, sig_op, pe) }
        }
    )*};
}

/// Sized and `putmem` forms (`void *` in C; the element type here only
/// sets the size and alignment checked).
macro_rules! put_signal_void {
    ($($t:ty: $name:ident $nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: puts `nelems` elements to `dest` on `pe`, then updates `*sig_addr` there.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { put_signal::<$t>(stringify!($name), dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe) }
        }

        #[doc = concat!("`", stringify!($nbi), "`: as the blocking form (complete on return).")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $nbi(
            dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { put_signal::<$t>(stringify!($nbi), dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe) }
        }
    )*};
}

put_signal_void! {
    u8: shmem_put8_signal shmem_put8_signal_nbi;
    u16: shmem_put16_signal shmem_put16_signal_nbi;
    u32: shmem_put32_signal shmem_put32_signal_nbi;
    u64: shmem_put64_signal shmem_put64_signal_nbi;
    Bits128: shmem_put128_signal shmem_put128_signal_nbi;
    u8: shmem_putmem_signal shmem_putmem_signal_nbi;
}

/// `shmem_signal_fetch`: the value of this PE's signal word.
///
/// # Safety
///
/// None beyond C's: `sig_addr` is checked symmetric and aligned before it is
/// read (a bad one ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_signal_fetch(sig_addr: *const u64) -> u64 {
    const CALL: &str = "shmem_signal_fetch";
    state::with(CALL, |ctx| {
        state::sym::<u64>(ctx, CALL, "sig_addr", sig_addr.cast::<c_void>(), 1);
        // SAFETY: checked symmetric and aligned.
        unsafe { <u64 as sync::Word>::load(sig_addr) }
    })
}

/// `shmem_signal_wait_until`: waits until this PE's signal word compares to
/// `cmp_value` as `cmp` says; returns its value then.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_signal_wait_until(sig_addr: *mut u64, cmp: c_int, cmp_value: u64) -> u64 {
    sync::wait_until(
        "shmem_signal_wait_until",
        sig_addr.cast_const(),
        cmp,
        cmp_value,
    )
}

// The spec's standard RMA types.
put_signal! {
    f32: shmem_float_put_signal shmem_float_put_signal_nbi;
    f64: shmem_double_put_signal shmem_double_put_signal_nbi;
    LongDouble: shmem_longdouble_put_signal shmem_longdouble_put_signal_nbi;
    c_char: shmem_char_put_signal shmem_char_put_signal_nbi;
    c_schar: shmem_schar_put_signal shmem_schar_put_signal_nbi;
    c_short: shmem_short_put_signal shmem_short_put_signal_nbi;
    c_int: shmem_int_put_signal shmem_int_put_signal_nbi;
    c_long: shmem_long_put_signal shmem_long_put_signal_nbi;
    c_longlong: shmem_longlong_put_signal shmem_longlong_put_signal_nbi;
    c_uchar: shmem_uchar_put_signal shmem_uchar_put_signal_nbi;
    c_ushort: shmem_ushort_put_signal shmem_ushort_put_signal_nbi;
    c_uint: shmem_uint_put_signal shmem_uint_put_signal_nbi;
    c_ulong: shmem_ulong_put_signal shmem_ulong_put_signal_nbi;
    c_ulonglong: shmem_ulonglong_put_signal shmem_ulonglong_put_signal_nbi;
    i8: shmem_int8_put_signal shmem_int8_put_signal_nbi;
    i16: shmem_int16_put_signal shmem_int16_put_signal_nbi;
    i32: shmem_int32_put_signal shmem_int32_put_signal_nbi;
    i64: shmem_int64_put_signal shmem_int64_put_signal_nbi;
    u8: shmem_uint8_put_signal shmem_uint8_put_signal_nbi;
    u16: shmem_uint16_put_signal shmem_uint16_put_signal_nbi;
    u32: shmem_uint32_put_signal shmem_uint32_put_signal_nbi;
    u64: shmem_uint64_put_signal shmem_uint64_put_signal_nbi;
    usize: shmem_size_put_signal shmem_size_put_signal_nbi;
    isize: shmem_ptrdiff_put_signal shmem_ptrdiff_put_signal_nbi;
}
