//! OS calls of the library: thread pinning and affinity, timer slack and the
//! trace clock.
#![allow(unsafe_code)]

use std::io;

/// Pins the calling thread to `cpu`.
///
/// # Errors
///
/// When `cpu` is out of range or the kernel refuses (not in the allowed set).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    if cpu >= 8 * core::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU index out of range",
        ));
    }
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the
    // size passed.
    let r = unsafe { libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set) };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The CPUs thread `tid` may run on (its affinity mask); `tid` 0 is the
/// calling thread.
///
/// # Errors
///
/// When the kernel refuses (no such thread).
pub fn affinity(tid: i32) -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(tid, core::mem::size_of_val(&set), &mut set) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, the number of bits in `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|cpu| cpu as u32)
        .collect())
}

/// The calling thread's kernel id (what `/proc/self/task/<tid>` names).
pub fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Sets the calling thread's timer slack (how late the kernel may fire its
/// timed sleeps, to batch wake-ups) to `ns`. Best effort: a kernel that
/// refuses leaves the slack as it was.
pub(crate) fn set_timer_slack(ns: u64) {
    let ns = libc::c_ulong::try_from(ns).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches only
    // the calling thread's settings.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
}

/// The trace clock: a cheap monotonic tick count for trace records, read
/// without a system call.
///
/// Units: on x86-64 the CPU's time-stamp counter (constant rate on every
/// CPU of the last decade; [`ticks_per_second`] measures it); elsewhere
/// nanoseconds since the first call. [`ticks_to_nanos`] converts either.
/// Cost: about 7 ns on bare metal, some 50 ns on a virtual machine that
/// traps the TSC, which is why only the decisions a trace records read it.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions and is present on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// Ticks of [`ticks`] per second: 10^9 where ticks are nanoseconds; on
/// x86-64 measured once, at the first call, against the monotonic clock
/// over 20 ms (that first call sleeps that long; later ones return at
/// once). Good to a few parts in 10^4.
pub fn ticks_per_second() -> u64 {
    static RATE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1_000_000_000;
        }
        let (t0, c0) = (std::time::Instant::now(), ticks());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (c1, ns) = (ticks(), t0.elapsed().as_nanos().max(1));
        let rate = u128::from(c1.wrapping_sub(c0)) * 1_000_000_000 / ns;
        u64::try_from(rate).unwrap_or(u64::MAX).max(1)
    })
}

/// `ticks` of [`ticks`] (a difference of two readings, or one reading) in
/// nanoseconds, at the rate [`ticks_per_second`] measured.
pub fn ticks_to_nanos(ticks: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_second());
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod test {
    use std::time::{Duration, Instant};

    use super::{ticks, ticks_per_second, ticks_to_nanos};

    /// Ticks converted to nanoseconds measure what the monotonic clock
    /// measures around them (bounds, never a timing: a slow, loaded
    /// machine only lengthens both).
    #[test]
    fn ticks_convert_to_the_nanoseconds_they_span() {
        assert!(ticks_per_second() > 0);
        let (t0, c0) = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_millis(30));
        let c1 = ticks();
        let outer = t0.elapsed();
        let got = ticks_to_nanos(c1 - c0);
        assert!(c1 > c0, "monotonic");
        // Within 1% plus a millisecond of the clock read around them.
        let outer = outer.as_nanos() as u64;
        assert!(got <= outer + outer / 100 + 1_000_000, "{got} > {outer}");
        assert!(got * 100 >= 30_000_000 * 99, "{got} < 30 ms");
        assert_eq!(ticks_to_nanos(0), 0);
    }
}
