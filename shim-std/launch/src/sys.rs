//! The launcher's system calls: the only unsafe code of the launcher.
#![allow(unsafe_code)]

use std::{
    io, mem,
    os::unix::process::CommandExt,
    process::Command,
    ptr,
    sync::{
        Mutex,
        PoisonError,
        // Real atomics, not the loom shim: they are touched by a signal
        // handler, which loom does not model.
        atomic::{AtomicU32, Ordering},
    },
};

use libc::c_int;

/// A negative return value as `io::Error::last_os_error()`.
fn cvt(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The CPUs this process may run on, in increasing order.
pub(super) fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and we pass its exact size.
    cvt(unsafe { libc::sched_getaffinity(0, mem::size_of_val(&set), &mut set) })?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, the number of bits in `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Sets up what runs in the child between fork and exec: SIGKILL when the
/// launcher dies, with `cpu` pinning to that CPU, and with `netns` entering
/// that network namespace. `netns` must stay open until `cmd` has been
/// spawned.
pub(super) fn configure_child(
    cmd: &mut Command,
    cpu: Option<usize>,
    netns: Option<&std::fs::File>,
) {
    let netns_fd = netns.map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: getpid has no preconditions.
    let launcher = unsafe { libc::getpid() };
    let set = cpu.filter(|&c| c < libc::CPU_SETSIZE as usize).map(|c| {
        // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
        // SAFETY: `c` < CPU_SETSIZE, the number of bits in `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
        set
    });
    let hook = move || -> io::Result<()> {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointers.
        cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) })?;
        // The launcher may have died before the prctl: then nobody would
        // send the signal, so fail the spawn instead (without allocating).
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != launcher {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(set) = &set {
            // SAFETY: `set` is a valid cpu_set_t of the size we pass.
            cvt(unsafe { libc::sched_setaffinity(0, mem::size_of_val(set), set) })?;
        }
        if let Some(fd) = netns_fd {
            // SAFETY: `fd` is a namespace file the parent keeps open until
            // spawn returns, so it is open in this forked copy; setns takes
            // no pointers.
            cvt(unsafe { libc::setns(fd, libc::CLONE_NEWNET) })?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It calls only
    // async-signal-safe system calls (prctl, getppid, sched_setaffinity,
    // setns), takes no lock, does not allocate, and reads only its own
    // copies of `launcher`, `set` and `netns_fd`.
    unsafe { cmd.pre_exec(hook) };
}

/// Sends `sig` to process group `pgid`; Ok(false) if the group is gone.
pub(super) fn kill_group(pgid: u32, sig: c_int) -> io::Result<bool> {
    let pgid = libc::pid_t::try_from(pgid)
        .ok()
        // 0 would be our own group, 1 (as -1) every process we may signal.
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill takes no pointers; -pgid (pgid > 1) names exactly that
    // process group.
    match cvt(unsafe { libc::kill(-pgid, sig) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The signals the launcher catches and forwards.
const FORWARDED: [c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// The last signal caught.
static LAST_SIGNAL: AtomicU32 = AtomicU32::new(0);
/// How many signals were caught, ever.
static SIGNAL_COUNT: AtomicU32 = AtomicU32::new(0);

/// The handlers in place while any [`SignalWatch`] lives.
struct Installed {
    watchers: usize,
    /// The handlers to restore, by [`FORWARDED`] index; `None` where the
    /// signal was ignored and is left so.
    old: [Option<libc::sigaction>; 2],
}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

extern "C" fn on_signal(sig: c_int) {
    LAST_SIGNAL.store(sig.unsigned_abs(), Ordering::Relaxed);
    // SYNC POINT with the Acquire load in `SignalWatch::poll`: makes the
    // LAST_SIGNAL store above visible there.
    SIGNAL_COUNT.fetch_add(1, Ordering::Release);
}

/// Catches SIGINT and SIGTERM (unless they are ignored) while it lives;
/// several may live at once (jobs launched from several threads), and each
/// sees every signal.
pub(super) struct SignalWatch {
    seen: u32,
}

impl SignalWatch {
    pub(super) fn install() -> io::Result<SignalWatch> {
        let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = SIGNAL_COUNT.load(Ordering::Acquire);
        if let Some(i) = installed.as_mut() {
            i.watchers += 1;
            return Ok(SignalWatch { seen });
        }
        let mut old = [None; 2];
        for (slot, &sig) in old.iter_mut().zip(&FORWARDED) {
            if let Err(e) = install_one(sig, slot) {
                restore(&old);
                return Err(e);
            }
        }
        *installed = Some(Installed { watchers: 1, old });
        Ok(SignalWatch { seen })
    }

    /// The signal caught since the last call, if any (the last one when
    /// several were).
    pub(super) fn poll(&mut self) -> Option<c_int> {
        // SYNC POINT with the Release fetch_add in `on_signal`.
        let count = SIGNAL_COUNT.load(Ordering::Acquire);
        if count == self.seen {
            return None;
        }
        self.seen = count;
        c_int::try_from(LAST_SIGNAL.load(Ordering::Relaxed)).ok()
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = installed.as_mut() {
            i.watchers -= 1;
            if i.watchers == 0 {
                restore(&i.old);
                *installed = None;
            }
        }
    }
}

/// Installs `on_signal` for `sig` unless it is ignored; stores the old action.
fn install_one(sig: c_int, old: &mut Option<libc::sigaction>) -> io::Result<()> {
    // SAFETY: sigaction is plain data; all zeros is SIG_DFL, no flags, empty mask.
    let mut current: libc::sigaction = unsafe { mem::zeroed() };
    // SAFETY: a null new action only queries; `current` is writable.
    cvt(unsafe { libc::sigaction(sig, ptr::null(), &mut current) })?;
    if current.sa_sigaction == libc::SIG_IGN {
        return Ok(());
    }
    // SAFETY: as above.
    let mut action: libc::sigaction = unsafe { mem::zeroed() };
    action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid, writable sigset_t.
    cvt(unsafe { libc::sigemptyset(&mut action.sa_mask) })?;
    // SAFETY: `action` is fully initialised and its handler only touches
    // atomics (async-signal-safe); `current` receives the old action.
    cvt(unsafe { libc::sigaction(sig, &action, &mut current) })?;
    *old = Some(current);
    Ok(())
}

fn restore(old: &[Option<libc::sigaction>; 2]) {
    for (old, &sig) in old.iter().zip(&FORWARDED) {
        if let Some(old) = old {
            // SAFETY: `old` is an action the kernel gave us; no old action wanted.
            unsafe { libc::sigaction(sig, old, ptr::null_mut()) };
        }
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
