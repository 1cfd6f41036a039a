//! Private (non-symmetric) C buffers: the source of a put, the destination of
//! a get. Their memory is the caller's; what can be checked is checked (null
//! with a non-zero count, alignment, a size that overflows), and a failed
//! check ends the job naming the call and the argument.

use core::ffi::c_void;

use crate::state::fatal;

#[cold]
#[inline(never)]
fn bad(
    call: &'static str,
    arg: &'static str,
    p: *const c_void,
    n: usize,
    size: usize,
    align: usize,
) -> ! {
    if p.is_null() {
        fatal(call, format_args!("{arg} is NULL with {n} elements"))
    } else if !(p as usize).is_multiple_of(align) {
        fatal(
            call,
            format_args!("{arg} = {p:p} is not aligned for a {size}-byte element"),
        )
    } else {
        fatal(
            call,
            format_args!("{arg} = {p:p}: {n} elements of {size} bytes is out of range"),
        )
    }
}

/// Checks what can be checked of `n` elements at `p` (see the module doc);
/// a failure ends the job. Zero elements pass whatever `p` is.
#[inline]
pub fn check<T>(call: &'static str, arg: &'static str, p: *const T, n: usize) {
    if n == 0 {
        return;
    }
    let (size, align) = (core::mem::size_of::<T>(), core::mem::align_of::<T>());
    let fits = n
        .checked_mul(size)
        .is_some_and(|b| b <= isize::MAX as usize && (p as usize).checked_add(b).is_some());
    if p.is_null() || !(p as usize).is_multiple_of(align) || !fits {
        bad(call, arg, p.cast(), n, size, align);
    }
}

/// The caller's `n` elements at `p`, to read.
///
/// # Safety
///
/// When `n > 0`, `p` points to `n` readable elements of `T` (the C caller's
/// contract for a source buffer) that nothing writes during the call.
#[inline]
pub unsafe fn src<'a, T>(call: &'static str, arg: &'static str, p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    check(call, arg, p, n);
    // SAFETY: non-null, aligned, size in range (checked); readable for `n`
    // elements (caller).
    unsafe { core::slice::from_raw_parts(p, n) }
}

/// The caller's `n` elements at `p`, to write.
///
/// # Safety
///
/// When `n > 0`, `p` points to `n` writable elements of `T` that nothing else
/// accesses during the call.
#[inline]
pub unsafe fn dst<'a, T>(
    call: &'static str,
    arg: &'static str,
    p: *mut T,
    n: usize,
) -> &'a mut [T] {
    if n == 0 {
        return &mut [];
    }
    check(call, arg, p.cast_const(), n);
    // SAFETY: non-null, aligned, size in range (checked); writable and
    // exclusively ours for `n` elements (caller).
    unsafe { core::slice::from_raw_parts_mut(p, n) }
}
