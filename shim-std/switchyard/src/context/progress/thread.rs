//! The progress thread's side of [`Tcp`](super::Tcp): where it runs
//! ([`place`]), its loop per mode ([`run`]), a burst of progress steps on
//! the driver when no context holds it ([`burst`]), and, under
//! `dedicated`, giving the driver to a context waiting for it
//! ([`hand_over`]).

use std::time::{Duration, Instant};

use switchyard_core::transport::{Instant as CoreInstant, PollResult};
use switchyard_socket::Parker;

use super::{BUSY_CHECK, Ordering, Placed, Shared, ThreadMode};

/// The first back-off while the application is inside the library.
const MIN_BACKOFF: Duration = Duration::from_micros(50);
/// Progress steps per burst while steps find work (bounds how long the
/// application can wait to enter).
const BURST: u32 = 32;

/// Pins the calling thread to `cpu` (when given) and says where it is.
pub(super) fn place(cpu: Option<u32>) -> Placed {
    let tid = crate::sys::thread_id();
    let pin_error = cpu.and_then(|c| {
        crate::sys::pin_current_thread(c as usize)
            .err()
            .map(|e| format!("cannot pin the progress thread to CPU {c}: {e}"))
    });
    Placed {
        tid,
        cpu: cpu.filter(|_| pin_error.is_none()),
        pin_error,
    }
}

pub(super) fn run(shared: &Shared, parker: &Parker, mode: ThreadMode, clock: Instant) {
    let tick = match mode {
        ThreadMode::Busy | ThreadMode::Dedicated => BUSY_CHECK,
        ThreadMode::Adaptive { tick } => tick,
    };
    let mut backoff = MIN_BACKOFF;
    while !shared.stop.load(Ordering::Acquire) {
        match mode {
            ThreadMode::Dedicated => {
                // No pause, no sleep: the CPU is the thread's.
                if !burst(shared, clock, false) {
                    core::hint::spin_loop();
                } else if shared.waiting.load(Ordering::Relaxed) > 0 {
                    hand_over(shared);
                }
                continue;
            }
            ThreadMode::Busy => {
                let t = Instant::now();
                while t.elapsed() < BUSY_CHECK {
                    for _ in 0..64 {
                        core::hint::spin_loop();
                    }
                }
            }
            ThreadMode::Adaptive { tick } => {
                parker.wait(tick);
            }
        }
        if burst(shared, clock, mode != ThreadMode::Busy) {
            backoff = MIN_BACKOFF;
        } else {
            // The application is inside and progresses itself; input it has
            // not read yet would wake the park at once, so sleep instead.
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(tick.max(MIN_BACKOFF));
        }
    }
}

/// The longest a `dedicated` thread stays off the driver after a burst for
/// contexts taking it ([`hand_over`]): past it, the thread runs its next
/// burst however busy they are, so what they submit through their rings,
/// and what arrives, waits at most this long.
const HAND_OVER: Duration = Duration::from_micros(50);
/// How long a `dedicated` thread that handed the driver over stays off it
/// after a context's last entry ([`hand_over`]): a context issuing one
/// locked operation after another (gets, atomics, large puts) enters again
/// within it and finds the lock free.
const HAND_OVER_GRACE: Duration = Duration::from_micros(5);

/// After a burst of a `dedicated` thread, with a context spinning to take
/// the driver: stays off it while a context waits for it or entered it
/// within the last [`HAND_OVER_GRACE`], for at most [`HAND_OVER`].
/// Without it the thread, which takes the lock again at once, wins nearly
/// every race for it: a context's get, fence or large put waited for many
/// bursts (a median of 6-10 µs per 8-byte put on the locked path, and
/// hundreds of µs in the tail, on two cores).
#[cold]
#[inline(never)]
fn hand_over(shared: &Shared) {
    let start = Instant::now();
    let mut entries = shared.lock.entries();
    let mut last_entry = start;
    let mut spins = 0u32;
    loop {
        core::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(16) {
            continue;
        }
        let now = Instant::now();
        let e = shared.lock.entries();
        if e != entries {
            entries = e;
            last_entry = now;
        }
        let idle = shared.waiting.load(Ordering::Relaxed) == 0
            && !shared.lock.is_held()
            && now.duration_since(last_entry) > HAND_OVER_GRACE;
        if idle || now.duration_since(start) > HAND_OVER {
            return;
        }
    }
}

/// Takes the driver when the application is outside the library and runs up
/// to [`BURST`] progress steps (fewer when a step finds nothing to do), the
/// first a full pass when `woke` (after a park).
/// Returns false when the application holds it.
fn burst(shared: &Shared, clock: Instant, woke: bool) -> bool {
    // Acquire: the application's writes to the driver are visible.
    let Some(taken) = shared.lock.try_take() else {
        return false;
    };
    #[cfg(test)]
    if shared.paused.load(Ordering::SeqCst) {
        return false;
    }
    // SAFETY: the lock is ours until `taken` is dropped below; see `Shared`.
    let d = unsafe { &mut *shared.driver.get() };
    if woke {
        // A park ended: what woke it may be on a control connection (a
        // peer's quiet asking for an ack), which only a full pass reads;
        // without this the first step finds the data connections empty, the
        // burst ends, the level-triggered park returns at once, and so on
        // until the periodic full pass.
        d.woke();
    }
    // The contexts' submissions first, so this burst's steps send them.
    if shared.dedicated.load(Ordering::Relaxed)
        && let Ok(rings) = shared.rings.try_lock()
    {
        for r in rings.iter() {
            r.drain(d);
        }
    }
    for _ in 0..BURST {
        let now = CoreInstant::from_nanos(clock.elapsed().as_nanos() as u64);
        // A context spinning for the driver ends the burst early.
        if d.progress(now) == PollResult::Idle || shared.waiting.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    if let Some(r) = shared.verbs_recv.get() {
        for _ in 0..BURST {
            if r.poll() == PollResult::Idle {
                break;
            }
        }
    }
    // The QP sets this PE answers: each its own receive queue.
    if shared.has_set_recvs.load(Ordering::Acquire)
        && let Ok(sets) = shared.set_recvs.try_lock()
    {
        for r in sets.iter().map(|(_, r)| r) {
            for _ in 0..BURST {
                if r.poll() == PollResult::Idle {
                    break;
                }
            }
        }
    }
    if let Some(p) = shared.publisher.get() {
        let now = clock.elapsed().as_nanos() as u64;
        p.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tick(now, d);
    }
    shared.bursts.fetch_add(1, Ordering::Relaxed);
    // Release: publishes the driver's state to the application's next entry.
    drop(taken);
    true
}
