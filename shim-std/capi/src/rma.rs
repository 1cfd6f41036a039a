//! RMA: typed `put`/`get`/`p`/`g`/`iput`/`iget` and their `_nbi` forms for
//! every standard RMA type, `putmem`/`getmem`, and the sized
//! `put8..put128`/`get8..get128` forms.
//!
//! The `_nbi` forms are non-blocking when both sides are symmetric (a put
//! from symmetric memory, a get into it): the transfer is issued heap to
//! heap and is complete after `shmem_quiet` (over TCP the frames go out
//! while the caller goes on). With a private buffer on the local side they
//! complete before they return, which the spec also allows.

use core::ffi::{
    c_char, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong, c_ulonglong,
    c_ushort, c_void,
};

use switchyard::context::{Context, Plain};

use crate::{cbuf, state};

/// C's `long double` as stored (16 bytes, 16-aligned on x86_64 and aarch64
/// Linux). Only moved as bytes: the header implements `shmem_longdouble_p`
/// and `_g` inline over `shmem_putmem`/`shmem_getmem`, because a `long
/// double` passed by value has no Rust ABI equivalent.
pub type LongDouble = u128;

/// 128-bit elements of `shmem_put128`/`shmem_get128` (8-byte aligned).
pub type Bits128 = [u64; 2];

/// Writes `n` elements from the private `source` to `dest` on `pe`.
///
/// # Safety
///
/// `source` points to `n` readable elements.
#[inline]
pub(crate) unsafe fn put<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    n: usize,
    pe: c_int,
) {
    // `state::enter`, not `state::with`: the body runs in this frame (the
    // closure's own frame was a tenth of an 8-byte put's instructions).
    let mut inside = state::enter(call);
    let ctx = inside.ctx();
    let pe = state::pe(ctx, call, pe);
    if n == 0 {
        // Nothing moves: no pointer is looked at.
        return;
    }
    let d = state::sym::<T>(ctx, call, "dest", dest.cast_const().cast(), n);
    cbuf::check(call, "source", source, n);
    // SAFETY: `dest` checked symmetric, `source` checked and readable
    // (the caller's contract), both for `n`.
    if unsafe { moved_in_place(ctx, pe, dest, source, n) } {
        return;
    }
    // SAFETY: `source` checked above (non-null, aligned, `n` elements
    // in the address space; `n > 0`) and readable (the caller's
    // contract).
    let s = unsafe { core::slice::from_raw_parts(source, n) };
    state::ok(call, ctx.put(&d, 0, s, pe));
}

/// Reads `n` elements of `source` on `pe` into the private `dest`.
///
/// # Safety
///
/// `dest` points to `n` writable elements.
#[inline]
pub(crate) unsafe fn get<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    n: usize,
    pe: c_int,
) {
    // As in `put`: the body in this frame.
    let mut inside = state::enter(call);
    let ctx = inside.ctx();
    let pe = state::pe(ctx, call, pe);
    if n == 0 {
        // Nothing moves: no pointer is looked at.
        return;
    }
    let s = state::sym::<T>(ctx, call, "source", source.cast(), n);
    cbuf::check(call, "dest", dest.cast_const(), n);
    state::check_private(ctx, call, "dest", dest.cast_const(), n);
    // SAFETY: `source` checked symmetric, `dest` checked and writable
    // (the caller's contract), both for `n`.
    if unsafe { moved_in_place(ctx, pe, dest, source, n) } {
        return;
    }
    // SAFETY: the caller's contract for `dest`.
    let d = unsafe { cbuf::dst(call, "dest", dest, n) };
    state::ok(call, ctx.get(&s, 0, d, pe));
}

/// A non-blocking put: heap to heap when `source` is symmetric too,
/// otherwise as [`put`].
///
/// # Safety
///
/// `source` points to `n` readable elements that do not change until the
/// next quiet.
#[inline]
pub(crate) unsafe fn put_nbi<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    n: usize,
    pe: c_int,
) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        if n == 0 {
            // Nothing moves: no pointer is looked at.
            return;
        }
        let d = state::sym::<T>(ctx, call, "dest", dest.cast_const().cast(), n);
        match state::try_sym::<T>(ctx, source.cast(), n) {
            // SAFETY: both checked symmetric for `n` elements.
            Ok(_) if unsafe { moved_in_place(ctx, pe, dest, source, n) } => {}
            Ok(s) if n > 0 && fits_u32::<T>(n) => {
                state::ok(call, ctx.put_nbi(&d, 0, &s, 0, n, pe));
            }
            _ => {
                cbuf::check(call, "source", source, n);
                // SAFETY: `dest` checked symmetric, `source` checked and
                // readable (the caller's contract), both for `n`.
                if unsafe { moved_in_place(ctx, pe, dest, source, n) } {
                    return;
                }
                // SAFETY: the caller's contract for `source`.
                let s = unsafe { cbuf::src(call, "source", source, n) };
                state::ok(call, ctx.put(&d, 0, s, pe));
            }
        }
    })
}

/// A non-blocking get: heap to heap when `dest` is symmetric too (the data
/// is there after the next quiet), otherwise as [`get`].
///
/// # Safety
///
/// `dest` points to `n` writable elements.
#[inline]
pub(crate) unsafe fn get_nbi<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    n: usize,
    pe: c_int,
) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        if n == 0 {
            // Nothing moves: no pointer is looked at.
            return;
        }
        let s = state::sym::<T>(ctx, call, "source", source.cast(), n);
        state::check_private(ctx, call, "dest", dest.cast_const(), n);
        match state::try_sym::<T>(ctx, dest.cast_const().cast(), n) {
            // SAFETY: both checked symmetric for `n` elements.
            Ok(_) if unsafe { moved_in_place(ctx, pe, dest, source, n) } => {}
            Ok(d) if n > 0 && fits_u32::<T>(n) => {
                state::ok(call, ctx.get_nbi(&d, 0, &s, 0, n, pe));
            }
            _ => {
                cbuf::check(call, "dest", dest.cast_const(), n);
                // SAFETY: `source` checked symmetric, `dest` checked and
                // writable (the caller's contract), both for `n`.
                if unsafe { moved_in_place(ctx, pe, dest, source, n) } {
                    return;
                }
                // SAFETY: the caller's contract for `dest`.
                let d = unsafe { cbuf::dst(call, "dest", dest, n) };
                state::ok(call, ctx.get(&s, 0, d, pe));
            }
        }
    })
}

/// A transfer from this PE to itself whose two ranges overlap: done here
/// with `memmove` semantics (the drivers copy without overlap) and true;
/// false for anything else, which then takes the normal path.
///
/// # Safety
///
/// `dst` is valid for writing and `src` for reading `n` elements (checked
/// by the caller), in this process.
#[inline]
pub(crate) unsafe fn moved_in_place<T>(
    ctx: &Context,
    pe: u32,
    dst: *mut T,
    src: *const T,
    n: usize,
) -> bool {
    if pe != ctx.my_pe() || n == 0 {
        return false;
    }
    // No overflow: both ranges were checked to fit the address space.
    let bytes = n * core::mem::size_of::<T>();
    let (d, s) = (dst as usize, src as usize);
    if d < s + bytes && s < d + bytes {
        // SAFETY: both ranges valid for `n` elements (caller); `copy`
        // allows the overlap.
        unsafe { core::ptr::copy(src, dst, n) };
        return true;
    }
    false
}

/// A strided transfer from this PE to itself whose two spans overlap: every
/// source element is read before any destination element is written (the
/// element-by-element path would read elements it already overwrote, through
/// a slice the writes alias), and true; false for anything else, which then
/// takes the normal path. Spans are `(pointer, elements spanned, stride)`.
///
/// # Safety
///
/// `dst` is valid for writing its span and `src` for reading its span
/// (checked by the caller), in this process; `n` elements fit both spans.
unsafe fn strided_in_place<T: Copy>(
    ctx: &Context,
    pe: u32,
    (dst, dn, dst_stride): (*mut T, usize, isize),
    (src, sn, src_stride): (*const T, usize, isize),
    n: usize,
) -> bool {
    if pe != ctx.my_pe() || n == 0 {
        return false;
    }
    let size = core::mem::size_of::<T>();
    // No overflow: both spans were checked to fit the address space.
    let (d, s) = (dst as usize, src as usize);
    if !(d < s + sn * size && s < d + dn * size) {
        return false;
    }
    let (ds, ss) = (dst_stride as usize, src_stride as usize);
    // SAFETY: element `i * ss < sn` of the source span (caller).
    let copy: Vec<T> = (0..n).map(|i| unsafe { src.add(i * ss).read() }).collect();
    for (i, v) in copy.into_iter().enumerate() {
        // SAFETY: element `i * ds < dn` of the destination span (caller).
        unsafe { dst.add(i * ds).write(v) };
    }
    true
}

/// Whether `n` elements of `T` are one heap-to-heap transfer (at most
/// `u32::MAX` bytes).
fn fits_u32<T>(n: usize) -> bool {
    n.checked_mul(core::mem::size_of::<T>())
        .is_some_and(|b| u32::try_from(b).is_ok())
}

#[inline]
fn p<T: Plain>(call: &'static str, dest: *mut T, value: T, pe: c_int) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        let d = state::sym::<T>(ctx, call, "dest", dest.cast_const().cast(), 1);
        state::ok(call, ctx.put(&d, 0, core::slice::from_ref(&value), pe));
    })
}

#[inline]
fn g<T: Plain>(call: &'static str, source: *const T, pe: c_int) -> T {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        let s = state::sym::<T>(ctx, call, "source", source.cast(), 1);
        let mut v = T::new_zeroed();
        state::ok(call, ctx.get(&s, 0, core::slice::from_mut(&mut v), pe));
        v
    })
}

/// Elements spanned by `n` elements `stride` apart, or the end of the job.
fn span(call: &'static str, arg: &'static str, stride: isize, n: usize) -> usize {
    if stride < 1 {
        state::fatal(
            call,
            format_args!("{arg} = {stride}: a stride must be at least 1"),
        );
    }
    match (n - 1)
        .checked_mul(stride as usize)
        .and_then(|s| s.checked_add(1))
    {
        Some(s) => s,
        None => state::fatal(
            call,
            format_args!("{arg} = {stride} with {n} elements is out of range"),
        ),
    }
}

/// Strided put: element `i` of `source` (every `sst`-th) to element `i *
/// dst` of `dest` on `pe`.
///
/// # Safety
///
/// `source` points to `(n - 1) * sst + 1` readable elements.
unsafe fn iput<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    pe: c_int,
) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        if n == 0 {
            return;
        }
        let (dn, sn) = (span(call, "dst", dst, n), span(call, "sst", sst, n));
        let d = state::sym::<T>(ctx, call, "dest", dest.cast_const().cast(), dn);
        cbuf::check(call, "source", source, sn);
        // SAFETY: `dest` checked symmetric for `dn` elements, `source`
        // checked and readable for `sn` (the caller's contract).
        if unsafe { strided_in_place(ctx, pe, (dest, dn, dst), (source, sn, sst), n) } {
            return;
        }
        // SAFETY: the caller's contract for `source`.
        let s = unsafe { cbuf::src(call, "source", source, sn) };
        for i in 0..n {
            let at = i * sst as usize;
            state::ok(call, ctx.put(&d, i * dst as usize, &s[at..=at], pe));
        }
    })
}

/// Strided get: element `i * sst` of `source` on `pe` to element `i * dst`
/// of `dest`.
///
/// # Safety
///
/// `dest` points to `(n - 1) * dst + 1` writable elements.
unsafe fn iget<T: Plain>(
    call: &'static str,
    dest: *mut T,
    source: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    pe: c_int,
) {
    state::with(call, |ctx| {
        let pe = state::pe(ctx, call, pe);
        if n == 0 {
            return;
        }
        let (dn, sn) = (span(call, "dst", dst, n), span(call, "sst", sst, n));
        let s = state::sym::<T>(ctx, call, "source", source.cast(), sn);
        cbuf::check(call, "dest", dest.cast_const(), dn);
        state::check_private(ctx, call, "dest", dest.cast_const(), dn);
        // SAFETY: `source` checked symmetric for `sn` elements, `dest`
        // checked and writable for `dn` (the caller's contract).
        if unsafe { strided_in_place(ctx, pe, (dest, dn, dst), (source, sn, sst), n) } {
            return;
        }
        // SAFETY: the caller's contract for `dest`.
        let d = unsafe { cbuf::dst(call, "dest", dest, dn) };
        for i in 0..n {
            let at = i * dst as usize;
            state::ok(call, ctx.get(&s, i * sst as usize, &mut d[at..=at], pe));
        }
    })
}

/// Typed put/get/iput/iget and `_nbi` forms (pointer arguments only).
macro_rules! rma_ptr {
    ($($t:ty: $put:ident $get:ident $iput:ident $iget:ident $put_nbi:ident $get_nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($put), "`: `nelems` elements from `source` to `dest` on `pe`.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $put(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { put(stringify!($put), dest, source, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($get), "`: `nelems` elements of `source` on `pe` into `dest`.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `nelems` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $get(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { get(stringify!($get), dest, source, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($iput), "`: strided put.")]
        ///
        /// # Safety
        ///
        /// `source` points to `(nelems - 1) * sst + 1` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $iput(
            dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { iput(stringify!($iput), dest, source, dst, sst, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($iget), "`: strided get.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `(nelems - 1) * dst + 1` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $iget(
            dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { iget(stringify!($iget), dest, source, dst, sst, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($put_nbi), "`: non-blocking put, complete after `shmem_quiet`.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements, unchanged until
        /// the next quiet.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $put_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { put_nbi(stringify!($put_nbi), dest, source, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($get_nbi), "`: non-blocking get, complete after `shmem_quiet`.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `nelems` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $get_nbi(dest: *mut $t, source: *const $t, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { get_nbi(stringify!($get_nbi), dest, source, nelems, pe) }
        }
    )*};
}

/// Typed single-element `p`/`g`.
macro_rules! rma_value {
    ($($t:ty: $p:ident $g:ident;)*) => {$(
        #[doc = concat!("`", stringify!($p), "`: stores `value` at `dest` on `pe`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $p(dest: *mut $t, value: $t, pe: c_int) {
            p(stringify!($p), dest, value, pe)
        }

        #[doc = concat!("`", stringify!($g), "`: the value at `source` on `pe`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $g(source: *const $t, pe: c_int) -> $t {
            g(stringify!($g), source, pe)
        }
    )*};
}

// The spec's table of standard RMA types, one line per type.
rma_ptr! {
    f32: shmem_float_put shmem_float_get shmem_float_iput shmem_float_iget shmem_float_put_nbi shmem_float_get_nbi;
    f64: shmem_double_put shmem_double_get shmem_double_iput shmem_double_iget shmem_double_put_nbi shmem_double_get_nbi;
    LongDouble: shmem_longdouble_put shmem_longdouble_get shmem_longdouble_iput shmem_longdouble_iget shmem_longdouble_put_nbi shmem_longdouble_get_nbi;
    c_char: shmem_char_put shmem_char_get shmem_char_iput shmem_char_iget shmem_char_put_nbi shmem_char_get_nbi;
    c_schar: shmem_schar_put shmem_schar_get shmem_schar_iput shmem_schar_iget shmem_schar_put_nbi shmem_schar_get_nbi;
    c_short: shmem_short_put shmem_short_get shmem_short_iput shmem_short_iget shmem_short_put_nbi shmem_short_get_nbi;
    c_int: shmem_int_put shmem_int_get shmem_int_iput shmem_int_iget shmem_int_put_nbi shmem_int_get_nbi;
    c_long: shmem_long_put shmem_long_get shmem_long_iput shmem_long_iget shmem_long_put_nbi shmem_long_get_nbi;
    c_longlong: shmem_longlong_put shmem_longlong_get shmem_longlong_iput shmem_longlong_iget shmem_longlong_put_nbi shmem_longlong_get_nbi;
    c_uchar: shmem_uchar_put shmem_uchar_get shmem_uchar_iput shmem_uchar_iget shmem_uchar_put_nbi shmem_uchar_get_nbi;
    c_ushort: shmem_ushort_put shmem_ushort_get shmem_ushort_iput shmem_ushort_iget shmem_ushort_put_nbi shmem_ushort_get_nbi;
    c_uint: shmem_uint_put shmem_uint_get shmem_uint_iput shmem_uint_iget shmem_uint_put_nbi shmem_uint_get_nbi;
    c_ulong: shmem_ulong_put shmem_ulong_get shmem_ulong_iput shmem_ulong_iget shmem_ulong_put_nbi shmem_ulong_get_nbi;
    c_ulonglong: shmem_ulonglong_put shmem_ulonglong_get shmem_ulonglong_iput shmem_ulonglong_iget shmem_ulonglong_put_nbi shmem_ulonglong_get_nbi;
    i8: shmem_int8_put shmem_int8_get shmem_int8_iput shmem_int8_iget shmem_int8_put_nbi shmem_int8_get_nbi;
    i16: shmem_int16_put shmem_int16_get shmem_int16_iput shmem_int16_iget shmem_int16_put_nbi shmem_int16_get_nbi;
    i32: shmem_int32_put shmem_int32_get shmem_int32_iput shmem_int32_iget shmem_int32_put_nbi shmem_int32_get_nbi;
    i64: shmem_int64_put shmem_int64_get shmem_int64_iput shmem_int64_iget shmem_int64_put_nbi shmem_int64_get_nbi;
    u8: shmem_uint8_put shmem_uint8_get shmem_uint8_iput shmem_uint8_iget shmem_uint8_put_nbi shmem_uint8_get_nbi;
    u16: shmem_uint16_put shmem_uint16_get shmem_uint16_iput shmem_uint16_iget shmem_uint16_put_nbi shmem_uint16_get_nbi;
    u32: shmem_uint32_put shmem_uint32_get shmem_uint32_iput shmem_uint32_iget shmem_uint32_put_nbi shmem_uint32_get_nbi;
    u64: shmem_uint64_put shmem_uint64_get shmem_uint64_iput shmem_uint64_iget shmem_uint64_put_nbi shmem_uint64_get_nbi;
    usize: shmem_size_put shmem_size_get shmem_size_iput shmem_size_iget shmem_size_put_nbi shmem_size_get_nbi;
    isize: shmem_ptrdiff_put shmem_ptrdiff_get shmem_ptrdiff_iput shmem_ptrdiff_iget shmem_ptrdiff_put_nbi shmem_ptrdiff_get_nbi;
}

// `long double` p/g are inline in shmem.h (see `LongDouble`).
rma_value! {
    f32: shmem_float_p shmem_float_g;
    f64: shmem_double_p shmem_double_g;
    c_char: shmem_char_p shmem_char_g;
    c_schar: shmem_schar_p shmem_schar_g;
    c_short: shmem_short_p shmem_short_g;
    c_int: shmem_int_p shmem_int_g;
    c_long: shmem_long_p shmem_long_g;
    c_longlong: shmem_longlong_p shmem_longlong_g;
    c_uchar: shmem_uchar_p shmem_uchar_g;
    c_ushort: shmem_ushort_p shmem_ushort_g;
    c_uint: shmem_uint_p shmem_uint_g;
    c_ulong: shmem_ulong_p shmem_ulong_g;
    c_ulonglong: shmem_ulonglong_p shmem_ulonglong_g;
    i8: shmem_int8_p shmem_int8_g;
    i16: shmem_int16_p shmem_int16_g;
    i32: shmem_int32_p shmem_int32_g;
    i64: shmem_int64_p shmem_int64_g;
    u8: shmem_uint8_p shmem_uint8_g;
    u16: shmem_uint16_p shmem_uint16_g;
    u32: shmem_uint32_p shmem_uint32_g;
    u64: shmem_uint64_p shmem_uint64_g;
    usize: shmem_size_p shmem_size_g;
    isize: shmem_ptrdiff_p shmem_ptrdiff_g;
}

/// Untyped (`void *`) put/get of sized elements.
macro_rules! rma_void {
    ($($t:ty: $put:ident $get:ident $iput:ident $iget:ident $put_nbi:ident $get_nbi:ident;)*) => {$(
        #[doc = concat!("`", stringify!($put), "`: `nelems` elements from `source` to `dest` on `pe`.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $put(dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { put::<$t>(stringify!($put), dest.cast(), source.cast(), nelems, pe) }
        }

        #[doc = concat!("`", stringify!($get), "`: `nelems` elements of `source` on `pe` into `dest`.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `nelems` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $get(dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { get::<$t>(stringify!($get), dest.cast(), source.cast(), nelems, pe) }
        }

        #[doc = concat!("`", stringify!($iput), "`: strided put.")]
        ///
        /// # Safety
        ///
        /// `source` points to `(nelems - 1) * sst + 1` readable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $iput(
            dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { iput::<$t>(stringify!($iput), dest.cast(), source.cast(), dst, sst, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($iget), "`: strided get.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `(nelems - 1) * dst + 1` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $iget(
            dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int,
        ) {
            // SAFETY: the caller's contract.
            unsafe { iget::<$t>(stringify!($iget), dest.cast(), source.cast(), dst, sst, nelems, pe) }
        }

        #[doc = concat!("`", stringify!($put_nbi), "`: non-blocking put, complete after `shmem_quiet`.")]
        ///
        /// # Safety
        ///
        /// `source` points to `nelems` readable elements, unchanged until
        /// the next quiet.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $put_nbi(dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { put_nbi::<$t>(stringify!($put_nbi), dest.cast(), source.cast(), nelems, pe) }
        }

        #[doc = concat!("`", stringify!($get_nbi), "`: non-blocking get, complete after `shmem_quiet`.")]
        ///
        /// # Safety
        ///
        /// `dest` points to `nelems` writable elements.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $get_nbi(dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's contract.
            unsafe { get_nbi::<$t>(stringify!($get_nbi), dest.cast(), source.cast(), nelems, pe) }
        }
    )*};
}

rma_void! {
    u8: shmem_put8 shmem_get8 shmem_iput8 shmem_iget8 shmem_put8_nbi shmem_get8_nbi;
    u16: shmem_put16 shmem_get16 shmem_iput16 shmem_iget16 shmem_put16_nbi shmem_get16_nbi;
    u32: shmem_put32 shmem_get32 shmem_iput32 shmem_iget32 shmem_put32_nbi shmem_get32_nbi;
    u64: shmem_put64 shmem_get64 shmem_iput64 shmem_iget64 shmem_put64_nbi shmem_get64_nbi;
    Bits128: shmem_put128 shmem_get128 shmem_iput128 shmem_iget128 shmem_put128_nbi shmem_get128_nbi;
}

/// `shmem_putmem`: `nelems` bytes from `source` to `dest` on `pe`.
///
/// # Safety
///
/// `source` points to `nelems` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_putmem(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    // SAFETY: the caller's contract.
    unsafe { put::<u8>("shmem_putmem", dest.cast(), source.cast(), nelems, pe) }
}

/// `shmem_getmem`: `nelems` bytes of `source` on `pe` into `dest`.
///
/// # Safety
///
/// `dest` points to `nelems` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_getmem(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    // SAFETY: the caller's contract.
    unsafe { get::<u8>("shmem_getmem", dest.cast(), source.cast(), nelems, pe) }
}

/// `shmem_putmem_nbi`: as [`shmem_putmem`], complete after `shmem_quiet`.
///
/// # Safety
///
/// `source` points to `nelems` readable bytes, unchanged until the next
/// quiet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_putmem_nbi(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    // SAFETY: the caller's contract.
    unsafe { put_nbi::<u8>("shmem_putmem_nbi", dest.cast(), source.cast(), nelems, pe) }
}

/// `shmem_getmem_nbi`: as [`shmem_getmem`], complete after `shmem_quiet`.
///
/// # Safety
///
/// `dest` points to `nelems` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_getmem_nbi(
    dest: *mut c_void,
    source: *const c_void,
    nelems: usize,
    pe: c_int,
) {
    // SAFETY: the caller's contract.
    unsafe { get_nbi::<u8>("shmem_getmem_nbi", dest.cast(), source.cast(), nelems, pe) }
}
