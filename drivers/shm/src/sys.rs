//! Every libc call of the driver, behind small safe wrappers (docs/ARCHITECTURE.md, "Code rules").
#![allow(unsafe_code)]

use std::{
    fs::File,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr::NonNull,
};

/// Turns a libc return value of `-1` into `io::Error::last_os_error()`.
fn cvt<T: PartialEq + From<i8>>(r: T) -> io::Result<T> {
    if r == T::from(-1) {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A shared mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to
// another thread moves nothing but the pointer. Access goes through raw-pointer
// copies and atomics whose safety the callers document.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `file` read-write and shared. `populate` pre-faults
    /// the pages so the first touch is not on the data path.
    pub(crate) fn map(file: &File, len: usize, populate: bool) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a fresh mapping chosen by the kernel (addr null) of a file we
        // hold open; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mmap { base, len })
    }

    /// As [`Mmap::map`], at an address `a` with `(a + skew) % align == 0`
    /// (`align` a power of two, `skew < align`): address space for `len +
    /// align` bytes is reserved, the file is mapped over the right part of
    /// it, and the rest is released.
    pub(crate) fn map_aligned(
        file: &File,
        len: usize,
        populate: bool,
        align: usize,
        skew: usize,
    ) -> io::Result<Mmap> {
        if len == 0 || !align.is_power_of_two() || skew >= align {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad aligned mapping",
            ));
        }
        let reserve = len
            .checked_add(align)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: a fresh inaccessible anonymous mapping chosen by the kernel
        // (addr null); no existing memory is affected.
        let r = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                reserve,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = r as usize;
        // `start + skew` rounded up stays below `start + align + skew`, so
        // `a .. a + len` lies inside the reservation.
        let a = (start + skew).next_multiple_of(align) - skew;
        let flags =
            libc::MAP_SHARED | libc::MAP_FIXED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: `a .. a + len` is inside the reservation made above, which
        // nothing else uses; MAP_FIXED replaces exactly those pages.
        let p = unsafe {
            libc::mmap(
                a as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        let mapped = if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        };
        // Release the reservation around the mapping (all of it on failure).
        let (head, tail) = match mapped {
            Ok(()) => ((start, a - start), (a + len, start + reserve - (a + len))),
            Err(_) => ((start, reserve), (0, 0)),
        };
        for (at, n) in [head, tail] {
            if n > 0 {
                // SAFETY: a part of the reservation made above that holds no
                // mapping anyone uses.
                unsafe { libc::munmap(at as *mut libc::c_void, n) };
            }
        }
        mapped?;
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mmap { base, len })
    }

    /// Start of the mapping.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned and nothing
        // borrowed from the mapping outlives `self` (callers hold raw pointers
        // only while they hold the `Mmap`).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// Replaces the pages `addr..addr+len` of this process with a shared mapping
/// of `file` from `file_off` (`MAP_FIXED`), so the memory at those addresses
/// becomes the file's pages.
///
/// # Safety
///
/// `addr` and `file_off` are page aligned, `len` is a multiple of the page
/// size, the range is mapped read-write memory this process owns whose
/// contents the caller has already copied into the file, and no other thread
/// accesses it during the call (its old pages are discarded).
pub(crate) unsafe fn map_fixed_shared(
    file: &File,
    file_off: u64,
    addr: *mut u8,
    len: usize,
) -> io::Result<()> {
    let off = libc::off_t::try_from(file_off)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
    // SAFETY: the caller guarantees the range is ours, aligned and unused
    // meanwhile; MAP_FIXED replaces exactly those pages.
    let p = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            file.as_raw_fd(),
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if p.cast::<u8>() != addr {
        return Err(io::Error::other("MAP_FIXED mapped at another address"));
    }
    Ok(())
}

/// Whether process `pid` exists (it may belong to another user: EPERM also
/// means alive).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission; no signal is
    // delivered.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A pidfd of process `pid` (Linux 5.3 and later): readable once the
/// process has exited, whoever its parent is, and never another process's
/// (no pid reuse).
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags (0) and returns a new file
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process of pidfd `fd` has exited (a poll with a zero
/// timeout: never blocks).
pub(crate) fn pidfd_exited(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
}

/// This process's id.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// This process's real user id.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid cannot fail and has no preconditions.
    unsafe { libc::getuid() }
}

/// Asks the kernel to place the pages of `[addr, addr+len)` on NUMA `node`
/// (preferred, not strict: allocation still succeeds when the node is full).
pub(crate) fn mbind_preferred(map: &Mmap, node: u32) -> io::Result<()> {
    const MPOL_PREFERRED: libc::c_long = 1;
    let bits = usize::BITS;
    if node >= 64 * bits {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NUMA node out of range",
        ));
    }
    let mut mask = [0usize; 64];
    mask[(node / bits) as usize] |= 1 << (node % bits);
    // SAFETY: the range is our own mapping; `mask` outlives the call and its
    // bit count (maxnode) matches its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.as_ptr(),
            map.len(),
            MPOL_PREFERRED,
            mask.as_ptr(),
            (mask.len() as libc::c_ulong) * libc::c_ulong::from(bits),
            0 as libc::c_uint,
        )
    };
    cvt(r).map(|_| ())
}

/// Reserves the blocks of `file`'s first `len` bytes (`posix_fallocate`), so a
/// tmpfs or hugetlbfs that cannot hold them says so now, with `ENOSPC`,
/// instead of killing the process with `SIGBUS` at the first touch of a page
/// it has no room for. `EOPNOTSUPP`/`EINVAL` (a filesystem without
/// fallocate) come back as errors for the caller to tell apart.
pub(crate) fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length past off_t"))?;
    // SAFETY: a file descriptor valid while `file` is borrowed, and two plain
    // integers; no pointers.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    // posix_fallocate returns the error number instead of setting errno.
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// (total, available) bytes of the filesystem holding `dir`.
pub(crate) fn statvfs(dir: &std::path::Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
    let mut st = core::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid C string and `st` points to writable storage of
    // the right type, which statvfs fills on success.
    let r = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    cvt(r)?;
    // SAFETY: statvfs returned 0, so it initialized `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
    let (frsize, blocks, avail) = (
        u64::from(st.f_frsize),
        u64::from(st.f_blocks),
        u64::from(st.f_bavail),
    );
    Ok((blocks * frsize, avail * frsize))
}
