//! OS calls of the library: thread pinning and the trace clock.
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

/// A cheap monotonic tick count for trace records: the CPU's time-stamp
/// counter on x86-64 (a few ns, no system call), nanoseconds since the first
/// call elsewhere.
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
