//! A shared memory mapping and a second process working on it: what the
//! shared-memory rate baselines (`raw-store`, `raw-load`, `raw-atomic`) run
//! on, so that, as in a `put-rate` between two PEs, the target memory is
//! another process's as well as this one's.
//!
//! [`SharedMap`] is an anonymous `MAP_SHARED` mapping (shmem pages, as a
//! PE's heap in `/dev/shm` is), zero-filled: a few control words, each on a
//! cache line of its own, then a data area. [`with_peer`] forks a child
//! that runs a closure on it (the target's role) while the calling thread
//! runs another (the timing side), then reaps the child.
//!
//! The child is a fork of a multi-threaded process: it must not allocate,
//! lock, print or panic (another thread may have held the allocator's lock
//! at the fork). Its closure only touches the mapping, spins and reads the
//! clock, and the child leaves with `_exit`.
#![allow(unsafe_code)]

use std::{
    hint::black_box,
    io,
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// Bytes between the control words (a cache line each, so polling one does
/// not steal another's line).
const LINE: usize = 64;

/// Control words at the start of every mapping.
pub(super) const CONTROL_WORDS: usize = 4;

/// Where the data area starts: after the control lines, page-aligned is not
/// needed, a line is.
const DATA_AT: usize = CONTROL_WORDS * LINE;

/// How long either side waits for the other without progress.
pub(super) const STALL: Duration = Duration::from_secs(20);

/// An anonymous shared mapping: [`CONTROL_WORDS`] atomic control words, then
/// `data_len` bytes of data, all zero at first. Shared with a child forked
/// by [`with_peer`].
#[derive(Debug)]
pub(super) struct SharedMap {
    base: NonNull<u8>,
    len: usize,
    data_len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the control words
// are accessed only as atomics, the data area only through the unsafe copies
// whose callers exclude concurrent access.
unsafe impl Send for SharedMap {}
// SAFETY: as for Send: shared access is atomic (control words) or excluded
// by the copies' contracts (data).
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps the control words and `data_len` data bytes.
    ///
    /// # Errors
    ///
    /// `mmap`'s error.
    pub(super) fn new(data_len: usize) -> io::Result<SharedMap> {
        let len = DATA_AT + data_len.max(1).next_multiple_of(LINE);
        // SAFETY: a new anonymous mapping at an address the kernel picks;
        // no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap: null"))?;
        Ok(SharedMap {
            base,
            len,
            data_len,
        })
    }

    /// Control word `i` (below [`CONTROL_WORDS`]), on a line of its own.
    pub(super) fn word(&self, i: usize) -> &AtomicU64 {
        let i = i.min(CONTROL_WORDS - 1);
        // SAFETY: `i * LINE + 8 <= DATA_AT <= len`: inside the mapping, 8-aligned
        // (the mapping is page-aligned), live as long as `self`, and only ever
        // accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(i * LINE).cast()) }
    }

    /// Data word `i` as an atomic (the data area is 64-byte aligned), or the
    /// last word (which may run past `data_len` into the area's padding)
    /// when `i` is past the end.
    pub(super) fn data_word(&self, i: usize) -> &AtomicU64 {
        let i = i.min(self.data_len.max(1).div_ceil(8) - 1);
        // SAFETY: `DATA_AT + 8 * i + 8 <= len` (the data area is `data_len`
        // rounded up to whole lines); 8-aligned; live as long as `self`. A word used this way is
        // only accessed atomically while the other process may touch it.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(DATA_AT + 8 * i).cast()) }
    }

    /// Copies `src` to the start of the data area (plain stores, as a
    /// `memcpy` into a peer's mapping is). Copies at most `data_len` bytes.
    ///
    /// # Safety
    ///
    /// No other thread or process accesses those bytes meanwhile.
    #[inline]
    pub(super) unsafe fn copy_in(&self, src: &[u8]) {
        let n = src.len().min(self.data_len);
        // Opaque to the optimiser, so that a loop of copies to the same
        // place stays a loop of copies (as calls into a library are).
        let base = black_box(self.base.as_ptr());
        // SAFETY: `n` bytes from DATA_AT are in the mapping; `src` is a
        // caller's buffer, which cannot overlap the mapping; nothing else
        // accesses them meanwhile (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(DATA_AT), n) };
    }

    /// Copies the start of the data area into `dst` (plain loads). Copies at
    /// most `data_len` bytes.
    ///
    /// # Safety
    ///
    /// No other thread or process writes those bytes meanwhile.
    #[inline]
    pub(super) unsafe fn copy_out(&self, dst: &mut [u8]) {
        let n = dst.len().min(self.data_len);
        let base = black_box(self.base.as_ptr());
        // SAFETY: as in `copy_in`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(base.add(DATA_AT), dst.as_mut_ptr(), n) };
        black_box(dst);
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no reference
        // into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Runs `peer` in a child process forked from the calling thread, pinned to
/// `cpu` (the target's role, PE 1's), and `me` on the calling thread; then
/// reaps the child. Returns `me`'s result and the child's exit status (what
/// `peer` returned; 255 when it did not end normally).
///
/// `peer` runs in a fork of a multi-threaded process: it must not allocate,
/// lock, print or panic, and must end by itself (bounded by [`STALL`]
/// without progress) whatever `me` does.
///
/// # Errors
///
/// `fork` or `waitpid` failing.
pub(super) fn with_peer<P, M, R>(cpu: usize, peer: P, me: M) -> io::Result<(R, u8)>
where
    P: FnOnce() -> u8,
    M: FnOnce() -> R,
{
    // SAFETY: the child runs only `peer` (which, by this function's
    // contract, neither allocates nor locks nor panics), a pinning system
    // call, and `_exit`, so it never touches state another thread held at
    // the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let _ = switchyard::sys::pin_current_thread(cpu);
        let code = peer();
        // SAFETY: ends the child without running the parent's atexit
        // handlers or destructors (which it shares by the fork).
        unsafe { libc::_exit(i32::from(code)) };
    }
    let r = me();
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let w = unsafe { libc::waitpid(pid, &mut status, 0) };
        if w == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else {
        255
    };
    Ok((r, code))
}

/// Control word a forked baseline's other process sets once it is ready
/// ([`forked`]).
pub(super) const READY: usize = 0;
/// Control word the timing side sets when it gives up ([`forked`]).
pub(super) const ABORT: usize = 2;

/// Runs a baseline on a fresh [`SharedMap`] of `data_len` bytes: forks the
/// other process running `peer` (pinned to `cpus.1`; it stores 1 in
/// [`READY`] once set up), waits for it, and runs `me` on a thread pinned
/// to `cpus.0`, setting [`ABORT`] when `me` fails. Returns `me`'s result
/// and the other process's exit status; `peer` follows [`with_peer`]'s
/// rules (no allocation, no panic).
///
/// # Errors
///
/// The mapping, the fork or the timing thread failing, as text.
pub(super) fn forked<P, M, R>(
    data_len: usize,
    cpus: (usize, usize),
    peer: P,
    me: M,
) -> Result<(Result<R, String>, u8), String>
where
    P: FnOnce(&SharedMap) -> u8 + Send + 'static,
    M: FnOnce(&SharedMap) -> Result<R, String> + Send + 'static,
    R: Send + 'static,
{
    let run = move || {
        let _ = switchyard::sys::pin_current_thread(cpus.0);
        let map = SharedMap::new(data_len).map_err(|e| format!("mmap: {e}"))?;
        with_peer(
            cpus.1,
            || peer(&map),
            || {
                let r = if spin_until(map.word(READY), 1, map.word(ABORT)) {
                    me(&map)
                } else {
                    Err("the other process did not start".into())
                };
                if r.is_err() {
                    map.word(ABORT).store(1, Ordering::Relaxed);
                }
                r
            },
        )
        .map_err(|e| format!("fork: {e}"))
    };
    std::thread::spawn(run)
        .join()
        .unwrap_or_else(|_| Err("the timing thread panicked".into()))
}

/// Spins until `w` holds at least `v` (Acquire), yielding the CPU every
/// 4096 spins. Gives up (`false`) when `abort` becomes non-zero, or after
/// [`STALL`] without `w` changing. Allocation-free, so a forked child may
/// call it.
pub(super) fn spin_until(w: &AtomicU64, v: u64, abort: &AtomicU64) -> bool {
    let mut spins = 0u32;
    let mut last = u64::MAX;
    let mut since: Option<Instant> = None;
    loop {
        // SYNC POINT with the Release stores of the awaited word by the
        // other side (the round counter of `raw-store`, the ready and done
        // words of the rate baselines).
        let now_v = w.load(Ordering::Acquire);
        if now_v >= v {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            if abort.load(Ordering::Relaxed) != 0 {
                return false;
            }
            let now = Instant::now();
            match since {
                Some(t) if now_v == last => {
                    if now.saturating_duration_since(t) > STALL {
                        return false;
                    }
                }
                _ => {
                    since = Some(now);
                    last = now_v;
                }
            }
            // The waiting side gives way now and then: where the host has
            // fewer free cores than threads, the side it waits for runs.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}
