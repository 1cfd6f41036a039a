//! The stats segment's system calls: create or open the object, map it.
#![allow(unsafe_code)]

use std::{
    fs::{File, OpenOptions},
    io,
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::Path,
    ptr::NonNull,
};

use switchyard_core::sync::atomic::AtomicU64;

/// A shared mapping of a whole object, as words; unmapped on drop.
pub(super) struct Map {
    base: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is shared memory owned by this value, accessed only
// through atomics; moving or sharing it between threads shares nothing else.
unsafe impl Send for Map {}
// SAFETY: as above: every access is an atomic load or store.
unsafe impl Sync for Map {}

impl Map {
    /// Creates `path` (mode 0600, exclusive, after removing a leftover of
    /// the same name), sized `len` bytes (zero-filled), and maps it
    /// read-write, populated.
    pub(super) fn create(path: &Path, len: usize) -> io::Result<Map> {
        let _ = std::fs::remove_file(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let r = file
            .set_len(len as u64)
            .and_then(|()| map(&file, len, true));
        if r.is_err() {
            let _ = std::fs::remove_file(path);
        }
        r
    }

    /// Opens `path` read-only and maps all of it, when it is at least
    /// `min` bytes long.
    pub(super) fn open(path: &Path, min: usize) -> io::Result<Map> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "object too large"))?;
        if len < min.max(8) || !len.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{len} bytes, not a stats segment"),
            ));
        }
        map(&file, len, false)
    }

    /// Words mapped.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.words
    }

    /// The mapping's words.
    #[inline(always)]
    pub(super) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is a live mapping of `words` 8-byte words (mmap
        // returns page-aligned memory), accessed only atomically, and it
        // lives as long as `self`.
        unsafe { core::slice::from_raw_parts(self.base.as_ptr(), self.words) }
    }
}

fn map(file: &File, len: usize, write: bool) -> io::Result<Map> {
    let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
    // SAFETY: a fresh mapping chosen by the kernel (addr null) of a file we
    // hold open; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            prot,
            // Not populated: the writer faults in the pages it uses when
            // it takes them (`touch`), not the whole (mostly hole) object.
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let base = NonNull::new(p.cast::<AtomicU64>())
        .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
    Ok(Map {
        base,
        words: len / 8,
    })
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: `base` and the length are what mmap returned, and no borrow
        // of `words()` outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.words * 8);
        }
    }
}
