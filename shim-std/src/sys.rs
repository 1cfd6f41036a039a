//! OS calls of the shim outside the launcher: thread pinning.
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

/// Moves the calling thread into the network namespace of `ns` (an open
/// `/var/run/netns/NAME` or `/proc/PID/ns/net`). Other threads keep theirs.
///
/// # Errors
///
/// The kernel refuses: not a network namespace file (`EINVAL`), or no
/// `CAP_SYS_ADMIN` (`EPERM`).
pub fn enter_net_namespace(ns: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns takes a file descriptor, valid while `ns` is borrowed, and
    // a flag; no pointers.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The effective user id of this process (0 for root).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
