//! Distributed locks: `shmem_set_lock`, `shmem_test_lock`,
//! `shmem_clear_lock`.
//!
//! A ticket lock in the symmetric `long` lock word's copy on PE 0 (its home):
//! the high 32 bits are the next ticket, the low 32 bits the ticket now
//! served. A zeroed word is an unlocked lock (as the spec requires). Taking
//! the lock is one fetch-add on the home PE, then polls of the word there
//! until its ticket is served (FIFO, so no PE starves), bounded by the op
//! timeout; releasing it is a quiet (the holder's writes are complete
//! first) and a compare-swap that advances the served half only.

use core::ffi::{c_int, c_long, c_void};

use switchyard::context::{Context, Sym};

use crate::state;

/// The PE whose copy of a lock word holds the lock.
const HOME: u32 = 0;
/// One ticket, in the high half.
const TICKET: u64 = 1 << 32;

fn word(ctx: &Context, call: &'static str, lock: *mut c_long) -> Sym<u64> {
    state::sym::<u64>(ctx, call, "lock", lock.cast_const().cast::<c_void>(), 1)
}

const fn next(v: u64) -> u32 {
    (v >> 32) as u32
}

const fn served(v: u64) -> u32 {
    v as u32
}

/// `shmem_set_lock`: waits for the lock, then holds it (under
/// `SHMEM_THREAD_MULTIPLE` leaving the library between polls, see
/// [`state::wait`]).
///
/// # Safety
///
/// `lock` is a symmetric `long` used only as a lock (checked symmetric).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_set_lock(lock: *mut c_long) {
    const CALL: &str = "shmem_set_lock";
    let (w, mine) = state::with(CALL, |ctx| {
        let w = word(ctx, CALL, lock);
        let mine = next(state::ok(CALL, ctx.fetch_add(&w, 0, TICKET, HOME)));
        (w, mine)
    });
    state::wait(CALL, |c| {
        Ok((served(c.fetch(&w, 0, HOME)?) == mine).then_some(()))
    });
}

/// `shmem_test_lock`: takes the lock and returns 0 if it is free, else
/// returns 1 at once.
///
/// # Safety
///
/// As [`shmem_set_lock`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    const CALL: &str = "shmem_test_lock";
    state::with(CALL, |ctx| {
        let w = word(ctx, CALL, lock);
        let v = state::ok(CALL, ctx.fetch(&w, 0, HOME));
        if next(v) != served(v) {
            return 1;
        }
        let old = state::ok(
            CALL,
            ctx.compare_swap(&w, 0, v, v.wrapping_add(TICKET), HOME),
        );
        c_int::from(old != v)
    })
}

/// `shmem_clear_lock`: completes this PE's earlier writes, then releases the
/// lock to the next waiter.
///
/// # Safety
///
/// As [`shmem_set_lock`]; the caller holds the lock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    const CALL: &str = "shmem_clear_lock";
    state::with(CALL, |ctx| {
        let w = word(ctx, CALL, lock);
        state::ok(CALL, ctx.quiet());
        let mut v = state::ok(CALL, ctx.fetch(&w, 0, HOME));
        if next(v) == served(v) {
            state::fatal(CALL, format_args!("lock = {lock:p} is not held"));
        }
        // Only the holder moves the served half; other PEs may take tickets
        // meanwhile, so retry until the word did not change under us.
        loop {
            let new = (v & !u64::from(u32::MAX)) | u64::from(served(v).wrapping_add(1));
            let old = state::ok(CALL, ctx.compare_swap(&w, 0, v, new, HOME));
            if old == v {
                break;
            }
            v = old;
        }
    })
}
