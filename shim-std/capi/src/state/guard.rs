//! Who is inside the library: one thread at a time, checked on every entry,
//! without an atomic read-modify-write on the common path.
//!
//! A locked instruction (the swap of a lock) costs 20 to 100 ns on some
//! machines, more than the operation it would guard. So the thread that
//! called `shmem_init` *owns* the library: its entries raise its own flag
//! ([`INSIDE`]) and check that it still owns the library, plain stores and
//! loads. Every other entry takes the lock ([`LOCKED`], a swap). The first
//! time another thread enters, it ends the ownership for good: under the
//! lock it clears [`OWNER`], makes every thread of the process run a full
//! memory barrier (`membarrier(2)`, private expedited), then reads the
//! owner's flag. Raised means the owner is inside right now: reported like
//! any overlap. From then on every entry takes the lock, as a program with
//! several threads calling in needs anyway.
//!
//! This is an asymmetric Dekker handshake: the owner stores its flag then
//! loads [`OWNER`]; the other thread stores [`OWNER`] then loads the flag;
//! the barrier the other thread pays for orders the owner's store before
//! its load as a fence on the owner's side would. Either the owner sees
//! itself revoked (and takes the lock, where the overlap is caught) or the
//! other thread sees the flag. Without `membarrier` (a kernel before 4.14, a
//! seccomp filter, not Linux) nobody owns the library and every entry takes
//! the lock.
//!
//! The owner entering again while inside (a signal handler calling in) is
//! caught too: its flag is still raised.
//!
//! Under `SHMEM_THREAD_MULTIPLE` ([`allow_waiting`]) nobody owns the library
//! and a thread that finds the lock taken waits for it (spinning briefly,
//! then yielding) instead of reporting an overlap: calls from several
//! threads are serialized. The thread holding the lock is recorded
//! ([`HOLDER`]), so entering again from inside is still caught.

// The shim has no compiler fence; this one orders nothing in the CPU.
use core::sync::atomic::compiler_fence;

use switchyard_core::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// Held while the library is in use; dropping it leaves the library.
pub(super) enum Held {
    /// Entered as the owner (its flag raised).
    Owner,
    /// Entered under the lock.
    Locked,
}

/// Why an entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Overlap {
    /// Another thread is inside.
    OtherThread,
    /// This thread is inside already (a signal handler, a callback).
    Reentered,
}

/// The lock every entry but the owner's takes.
static LOCKED: AtomicBool = AtomicBool::new(false);
/// The owning thread (`pthread_self`), 0 when none: before `shmem_init`,
/// without `membarrier`, or for good once another thread entered.
static OWNER: AtomicUsize = AtomicUsize::new(0);
/// Raised while the owner is inside. Only the owner writes it.
static INSIDE: AtomicBool = AtomicBool::new(false);
/// Raised under `SHMEM_THREAD_MULTIPLE`: a taken lock is waited for.
static WAIT: AtomicBool = AtomicBool::new(false);
/// The thread holding [`LOCKED`] (0 when none). Only compared with the
/// caller's own identity, which it equals only when written by the caller.
static HOLDER: AtomicUsize = AtomicUsize::new(0);

/// This thread's identity: its `pthread_t`, never 0 for a live thread.
#[inline]
fn me() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

/// Enters the library.
#[inline]
pub(super) fn enter() -> Result<Held, Overlap> {
    let me = me();
    if OWNER.load(Ordering::Relaxed) == me && !INSIDE.load(Ordering::Relaxed) {
        INSIDE.store(true, Ordering::Relaxed);
        // SYNC POINT with the membarrier in `revoke`: the flag is stored
        // before OWNER is loaded again. The compiler keeps that order here;
        // the barrier `revoke` makes every thread run keeps it in the CPU.
        compiler_fence(Ordering::SeqCst);
        if OWNER.load(Ordering::Relaxed) == me {
            return Ok(Held::Owner);
        }
        // Revoked meanwhile: take the lock like everyone else.
        // SYNC POINT with the Acquire load of INSIDE in `enter_locked`.
        INSIDE.store(false, Ordering::Release);
    }
    enter_locked(me)
}

#[inline(never)]
fn enter_locked(me: usize) -> Result<Held, Overlap> {
    // SYNC POINT with the Release store of LOCKED in `Held::drop`.
    if LOCKED.swap(true, Ordering::Acquire) {
        if !WAIT.load(Ordering::Relaxed) {
            return Err(Overlap::OtherThread);
        }
        if HOLDER.load(Ordering::Relaxed) == me {
            return Err(Overlap::Reentered);
        }
        wait_for_lock();
    }
    HOLDER.store(me, Ordering::Relaxed);
    let refused = match OWNER.load(Ordering::Relaxed) {
        0 => None,
        // OWNER only ever changes from the owner to 0, so the owner's own
        // entry found its flag raised: it is inside already.
        owner if owner == me => Some(Overlap::Reentered),
        _ => {
            revoke();
            // SYNC POINT with the Release stores of INSIDE (`Held::drop`,
            // `enter`): the owner's last use of the context happens before
            // this thread's.
            INSIDE
                .load(Ordering::Acquire)
                .then_some(Overlap::OtherThread)
        }
    };
    match refused {
        None => Ok(Held::Locked),
        Some(e) => {
            // Whoever is inside keeps the library (the caller reports the
            // overlap).
            drop(Held::Locked);
            Err(e)
        }
    }
}

/// Takes [`LOCKED`] once the thread inside leaves (`SHMEM_THREAD_MULTIPLE`):
/// spins a little, then yields the CPU between tries.
#[cold]
#[inline(never)]
fn wait_for_lock() {
    let mut tries = 0u32;
    // SYNC POINT with the Release store of LOCKED in `Held::drop`.
    while LOCKED.swap(true, Ordering::Acquire) {
        tries += 1;
        if tries < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Switches to `SHMEM_THREAD_MULTIPLE`: from now on nobody owns the library
/// and every entry takes the lock, waiting for it when it is taken. Called
/// by `shmem_init_thread` on the thread that initialized the library, which
/// is not inside.
pub(super) fn allow_waiting() {
    OWNER.store(0, Ordering::Relaxed);
    WAIT.store(true, Ordering::Relaxed);
    // The threads the program starts after this see both stores (thread
    // creation orders them); no other thread may call in before.
    fence(Ordering::SeqCst);
}

/// Whether `SHMEM_THREAD_MULTIPLE` was granted ([`allow_waiting`]).
pub(super) fn waiting_allowed() -> bool {
    WAIT.load(Ordering::Relaxed)
}

/// Ends the ownership for good and makes sure the owner has either seen
/// that or published its flag.
#[cold]
fn revoke() {
    OWNER.store(0, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    if !barrier_all_threads() {
        // Registered in `own`, so this cannot fail; if it did, the owner's
        // flag could not be trusted.
        super::fatal(
            "switchyard",
            format_args!(
                "membarrier failed after it was registered: {}",
                std::io::Error::last_os_error()
            ),
        );
    }
    fence(Ordering::SeqCst);
}

/// Makes the calling thread (inside, under the lock: `shmem_init`) the owner,
/// when the kernel provides what [`revoke`] needs.
pub(super) fn own() {
    if register_barrier() {
        OWNER.store(me(), Ordering::Relaxed);
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        match self {
            // SYNC POINT with the Acquire load of INSIDE in `enter_locked`.
            Held::Owner => INSIDE.store(false, Ordering::Release),
            Held::Locked => {
                HOLDER.store(0, Ordering::Relaxed);
                // SYNC POINT with the Acquire swaps of LOCKED in
                // `enter_locked` and `wait_for_lock`.
                LOCKED.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes no pointers; an unknown command fails with
    // EINVAL and does nothing.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_int,
            0 as libc::c_int,
        ) == 0
    }
}

#[cfg(target_os = "linux")]
fn register_barrier() -> bool {
    membarrier(libc::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
}

#[cfg(target_os = "linux")]
fn barrier_all_threads() -> bool {
    membarrier(libc::MEMBARRIER_CMD_PRIVATE_EXPEDITED)
}

#[cfg(not(target_os = "linux"))]
fn register_barrier() -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn barrier_all_threads() -> bool {
    false
}

#[cfg(test)]
mod test {
    use super::*;

    fn enter_from_another_thread() -> Result<(), Overlap> {
        std::thread::spawn(|| enter().map(drop)).join().unwrap()
    }

    // The only test that enters: the guard is process-wide.
    #[test]
    fn one_thread_at_a_time_owner_first_then_the_lock() {
        own();
        let owned = OWNER.load(Ordering::Relaxed) == me();
        let held = enter().unwrap();
        assert_eq!(matches!(held, Held::Owner), owned);
        // Without membarrier nobody owns the library: the lock refuses.
        let again = if owned {
            Overlap::Reentered
        } else {
            Overlap::OtherThread
        };
        assert_eq!(enter().map(drop), Err(again));
        assert_eq!(enter_from_another_thread(), Err(Overlap::OtherThread));
        assert_eq!(OWNER.load(Ordering::Relaxed), 0, "ownership ended for good");
        drop(held);

        // From now on everyone takes the lock, the first owner too.
        let held = enter().unwrap();
        assert!(matches!(held, Held::Locked));
        assert_eq!(enter_from_another_thread(), Err(Overlap::OtherThread));
        drop(held);
        assert_eq!(enter_from_another_thread(), Ok(()));
        assert!(matches!(enter().unwrap(), Held::Locked));
    }
}
