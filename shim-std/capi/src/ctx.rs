//! Communication contexts: `shmem_ctx_create` and `shmem_ctx_destroy`.
//!
//! One [`Context`](switchyard::context::Context) serves the whole PE, so
//! every communication context shares its ordering and completion (stronger
//! than the spec asks: a quiet on one context completes them all). The
//! `shmem_ctx_*` RMA, AMO, signal, fence and quiet forms are inline in
//! `shmem.h` and forward to the plain calls; this module only hands out
//! distinct handles and checks them when destroyed.

use core::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::state;

/// `SHMEM_CTX_INVALID`.
pub const CTX_INVALID: usize = 0;
/// `SHMEM_CTX_DEFAULT`.
pub const CTX_DEFAULT: usize = 1;

/// The next handle `shmem_ctx_create` gives.
static NEXT: AtomicUsize = AtomicUsize::new(CTX_DEFAULT + 1);

/// `shmem_ctx_create`: stores a new context handle in `*ctx` and returns 0
/// (the options are hints; every context is as capable as the default one).
///
/// # Safety
///
/// `ctx` points to a writable `shmem_ctx_t` (NULL ends the job).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_create(_options: c_long, ctx: *mut *mut c_void) -> c_int {
    const CALL: &str = "shmem_ctx_create";
    state::with(CALL, |_| {});
    if ctx.is_null() {
        state::fatal(CALL, format_args!("ctx is NULL"));
    }
    let h = NEXT.fetch_add(1, Ordering::Relaxed);
    // SAFETY: non-null, writable (caller). The handle is an opaque token,
    // never dereferenced.
    unsafe { ctx.write(core::ptr::without_provenance_mut(h)) };
    0
}

/// `shmem_ctx_destroy`: completes the PE's outstanding operations (a quiet)
/// and retires the handle. `SHMEM_CTX_INVALID` does nothing; the default
/// context and handles never created end the job.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    const CALL: &str = "shmem_ctx_destroy";
    let h = ctx as usize;
    if h == CTX_INVALID {
        return;
    }
    state::with(CALL, |c| {
        if h == CTX_DEFAULT || h >= NEXT.load(Ordering::Relaxed) {
            state::fatal(
                CALL,
                format_args!("ctx = {ctx:p} is not a context from shmem_ctx_create"),
            );
        }
        state::ok(CALL, c.quiet());
    })
}
