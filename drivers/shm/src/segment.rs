//! One PE's shared-memory object: a control block, then the symmetric heap.
//!
//! ```text
//! offset 0            control block (magic, version, job id, PE, pid, heap
//!                     offset and length; `ready` written last; then the
//!                     creator's heartbeat counter)
//! offset heap_offset  the symmetric heap (page aligned: 4 KiB, or 2 MiB on
//!                     huge pages)
//! ```
//!
//! Objects are files under `/dev/shm` (what `shm_open` uses on Linux) or, for
//! huge pages, under a hugetlbfs mount, named `switchyard-<job id, 16 hex>-<PE>`
//! and created with mode 0600 and `O_EXCL`. The creator unlinks its object when
//! the [`Segment`] drops; a crashed job's objects are removed by the launcher
//! and, failing that, by [`remove_stale`] in a later job.
#![allow(unsafe_code)]

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Read},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use switchyard_core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{
    ShmError,
    sys::{self, Mmap},
};

/// `b"SWYDSHM1"` little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"SWYDSHM1");
/// Layout version of the control block.
pub const LAYOUT_VERSION: u32 = 1;
/// Value of `ready` once the creator finished.
pub(crate) const READY: u32 = 0x5EAD_7001;
/// The ready word of a job's objects (a `u32` at [`OBJECT_READY_OFFSET`], as
/// in the heap's control block), public for the other objects of a job that
/// use the same header.
pub const OBJECT_READY: u32 = READY;
/// Magic of a PE's stats segment (the library's `statseg`): its first 56
/// bytes are laid out like the control block (magic, pid at byte 24,
/// [`OBJECT_READY`] at [`OBJECT_READY_OFFSET`]), so [`remove_stale`] removes
/// it with its dead job.
pub const STATS_MAGIC: u64 = u64::from_le_bytes(*b"SWYDSTA1");
/// Bytes before the heap on normal pages.
const PAGE: u64 = 4096;
/// Huge page size used for the heap.
pub const HUGE_PAGE: u64 = 2 << 20;
/// Every PE's own heap starts at an address that is a multiple of this
/// (its mapping is placed so), so heap offsets aligned to it, or to any
/// smaller power of two, are aligned addresses on every PE. The start is
/// in fact aligned to the heap size rounded up to a power of two when that
/// is larger ([`heap_align`]).
pub const HEAP_ALIGN: u64 = HUGE_PAGE;

/// The alignment of every PE's heap start for a heap of `heap_size` bytes:
/// [`HEAP_ALIGN`], or `heap_size` rounded up to a power of two when larger,
/// so that an offset aligned to any power of two up to the heap size is an
/// aligned address on every PE (the mapping reserves that much more address
/// space, never memory).
pub fn heap_align(heap_size: u64) -> u64 {
    heap_size
        .checked_next_power_of_two()
        .map_or(HEAP_ALIGN, |a| a.max(HEAP_ALIGN))
}
/// Where POSIX shared-memory objects live on Linux.
pub const SHM_DIR: &str = "/dev/shm";
/// Where huge-page objects live, when mounted.
pub const HUGE_DIR: &str = "/dev/hugepages";
/// Objects of dead jobs younger than this are left alone if their control
/// block is not written yet (the creator may be mid-way).
const STALE_GRACE: Duration = Duration::from_secs(60);

/// The control block at offset 0 of every object. Written by the creator
/// before `ready`; read by peers after an Acquire load of `ready` sees
/// [`READY`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ControlBlock {
    magic: u64,
    version: u32,
    pe: u32,
    job_id: u64,
    pid: u32,
    n_pes: u32,
    heap_offset: u64,
    heap_len: u64,
    uid: u32,
    // `ready: AtomicU32` follows at READY_OFFSET, then the creator's
    // heartbeat (`AtomicU64`) at HEARTBEAT_OFFSET.
}

pub(crate) const READY_OFFSET: usize = core::mem::size_of::<ControlBlock>();
/// Where the ready word of a job's object is (byte 56).
pub const OBJECT_READY_OFFSET: usize = READY_OFFSET;
static_assertions::const_assert!(READY_OFFSET.is_multiple_of(4));
static_assertions::const_assert!((READY_OFFSET + 4) as u64 <= PAGE);
/// The creator's heartbeat counter: bumped by its progress path, read by
/// same-node peers (a counter that moves needs no system call to prove the
/// creator alive). Zero until the first beat, in the page's zeroed tail, so
/// a peer of an older layout reads a counter that never moves (it is then
/// asked about through the kernel, as before).
const HEARTBEAT_OFFSET: usize = (READY_OFFSET + 4).next_multiple_of(8);
static_assertions::const_assert!((HEARTBEAT_OFFSET + 8) as u64 <= PAGE);

/// Object name prefix of a job (the launcher removes `<dir>/<prefix>*`).
pub fn object_prefix(job_id: u64) -> String {
    format!("switchyard-{job_id:016x}-")
}

/// Deletes every object of job `job_id` in `dir` ([`SHM_DIR`], or
/// [`HUGE_DIR`] for huge-page heaps): every entry whose name starts with
/// [`object_prefix`]. Returns how many it deleted. A missing `dir` holds
/// nothing. What the launcher runs when a job ends, and `shmem_global_exit`
/// under a resource manager (srun, mpirun), which removes no objects
/// itself. Mappings of a deleted object stay valid in the processes that
/// hold them.
///
/// # Errors
///
/// Listing `dir` or deleting an entry failed (an entry that vanished
/// meanwhile is not an error).
pub fn remove_job_objects(dir: &Path, job_id: u64) -> io::Result<usize> {
    let prefix = object_prefix(job_id);
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(prefix.as_bytes())
        {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Where `shmem_global_exit` leaves its marker for the launcher: a file of the
/// job in [`SHM_DIR`] (named with [`object_prefix`], so it is removed with the
/// job's objects) holding `RANK STATUS`. The first PE to create it decides the
/// job's exit status.
pub fn global_exit_path(job_id: u64) -> std::path::PathBuf {
    std::path::Path::new(SHM_DIR).join(format!("{}global-exit", object_prefix(job_id)))
}

/// Object name of `pe` in `job_id`.
pub fn object_name(job_id: u64, pe: u32) -> String {
    format!("{}{pe}", object_prefix(job_id))
}

/// Whether to put the heap on huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// Use them when a hugetlbfs mount has enough free pages, silently not
    /// otherwise.
    Auto,
    /// Use them; when impossible, fall back to normal pages with a warning.
    On,
    /// Never.
    Off,
}

/// What to create.
#[derive(Debug, Clone)]
pub struct SegmentConfig {
    /// The job id (in the object name and the control block).
    pub job_id: u64,
    /// This PE.
    pub pe: u32,
    /// Job size.
    pub n_pes: u32,
    /// Heap size in bytes (rounded up to the page size).
    pub heap_size: u64,
    /// Huge pages policy.
    pub huge_pages: HugePages,
    /// NUMA node to place the heap on (the pinned core's), if known.
    pub numa_node: Option<u32>,
    /// Directory for normal objects (default [`SHM_DIR`]; tests may use
    /// another tmpfs directory).
    pub dir: PathBuf,
    /// Pre-fault the pages at creation (default on).
    pub populate: bool,
    /// Memory of this process to move into the object, after the heap (for
    /// global and static variables that must be symmetric). Forces normal
    /// pages.
    pub alias: Option<Alias>,
}

/// A page-aligned range of this process's own read-write memory (typically
/// the executable's `.data` and `.bss`) that [`Segment::create`] moves into the
/// shared object: its contents are copied to the object, right after the heap,
/// and the range is then mapped from the object (`MAP_FIXED`). The variables
/// keep their addresses and values, and become reachable through the object,
/// at [`Segment::alias_offset`] of the heap, by every transport (same-node
/// peers map the object; TCP and verbs targets write the heap mapping). Both
/// mappings are the same physical pages, so hardware atomics through either
/// are atomic against each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    addr: usize,
    len: usize,
}

impl Alias {
    /// # Safety
    ///
    /// `addr..addr+len` is read-write memory mapped in this process that
    /// nothing else maps or unmaps while the segment is created, and that no
    /// other thread reads or writes during [`Segment::create`] (writes made
    /// between the copy and the remap would be lost). It stays mapped from the
    /// object for the rest of the process's life, even after the segment is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`ShmError::BadAlias`] when the range is empty or not page aligned.
    pub unsafe fn new(addr: usize, len: usize) -> Result<Alias, ShmError> {
        let page = PAGE as usize;
        if len == 0 || !addr.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(ShmError::BadAlias { addr, len });
        }
        Ok(Alias { addr, len })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes (a multiple of the page size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: aliases are at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl SegmentConfig {
    /// A config with the defaults: `/dev/shm`, no huge pages, populate.
    pub fn new(job_id: u64, pe: u32, n_pes: u32, heap_size: u64) -> SegmentConfig {
        SegmentConfig {
            job_id,
            pe,
            n_pes,
            heap_size,
            huge_pages: HugePages::Off,
            numa_node: None,
            dir: PathBuf::from(SHM_DIR),
            populate: true,
            alias: None,
        }
    }
}

/// A mapped object: ours or a peer's.
#[derive(Debug)]
pub struct Mapped {
    map: Mmap,
    heap_offset: u64,
    heap_len: u64,
    pid: u32,
    path: PathBuf,
}

impl Mapped {
    /// Start of the heap.
    #[inline]
    pub fn heap_ptr(&self) -> *mut u8 {
        // SAFETY: `heap_offset + heap_len <= map.len()` was checked when the
        // object was created or attached, so the offset stays in the mapping.
        unsafe { self.map.as_ptr().add(self.heap_offset as usize) }
    }

    /// Heap length in bytes.
    #[inline]
    pub fn heap_len(&self) -> u64 {
        self.heap_len
    }

    /// The creating process.
    #[inline]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The object's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The creator's heartbeat counter (see [`Mapped::beat`]).
    #[inline]
    pub fn heartbeat(&self) -> u64 {
        heartbeat_word(&self.map).load(Ordering::Relaxed)
    }

    /// Bumps the heartbeat counter: called by the creator only (its own
    /// mapping), so a load and a store, no locked instruction.
    #[inline]
    pub fn beat(&self) {
        let h = heartbeat_word(&self.map);
        h.store(h.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// This PE's own object: created here, unlinked on drop.
#[derive(Debug)]
pub struct Segment {
    mapped: Mapped,
    huge: bool,
    alias_offset: Option<u64>,
    warnings: Vec<String>,
}

impl Segment {
    /// Creates and maps this PE's object, writes the control block, and
    /// publishes it (`ready`, Release) last.
    ///
    /// # Errors
    ///
    /// [`ShmError::Create`] when the object exists already (another job with
    /// the same id) or cannot be created or sized; [`ShmError::Map`] when it
    /// cannot be mapped (often: `/dev/shm` is too small for the heap).
    pub fn create(cfg: &SegmentConfig) -> Result<Segment, ShmError> {
        let mut warnings = Vec::new();
        let name = object_name(cfg.job_id, cfg.pe);
        if cfg.heap_size == 0 {
            return Err(ShmError::BadHeapSize { size: 0 });
        }
        let huge_dir = match cfg.huge_pages {
            HugePages::Off => None,
            want if cfg.alias.is_some() => {
                if want == HugePages::On {
                    warnings.push(
                        "huge pages requested, but symmetric global variables need normal \
                         pages; the heap uses normal pages"
                            .into(),
                    );
                }
                None
            }
            want => match huge_pages_usable(cfg.heap_size) {
                Ok(dir) => Some(dir),
                Err(why) => {
                    if want == HugePages::On {
                        warnings.push(format!(
                            "huge pages requested but unavailable ({why}); the heap uses normal pages"
                        ));
                    }
                    None
                }
            },
        };
        let (dir, page) = match &huge_dir {
            Some(d) => (d.clone(), HUGE_PAGE),
            None => (cfg.dir.clone(), PAGE),
        };
        let own_heap = round_up(cfg.heap_size, page).ok_or(ShmError::BadHeapSize {
            size: cfg.heap_size,
        })?;
        let heap_len = own_heap
            .checked_add(cfg.alias.map_or(0, |a| a.len as u64))
            .ok_or(ShmError::BadHeapSize {
                size: cfg.heap_size,
            })?;
        let heap_offset = page;
        let total = heap_offset
            .checked_add(heap_len)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or(ShmError::BadHeapSize {
                size: cfg.heap_size,
            })?;
        let path = dir.join(&name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| ShmError::Create {
                path: path.clone(),
                source,
            })?;
        // From here on, remove the file if anything fails.
        let guard = UnlinkGuard(Some(path.clone()));
        file.set_len(total as u64)
            .map_err(|source| ShmError::Create {
                path: path.clone(),
                source,
            })?;
        reserve(&file, &dir, total as u64)?;
        // Populate after mbind, so the pages land on the right node.
        let map = Mmap::map_aligned(
            &file,
            total,
            false,
            heap_align(own_heap) as usize,
            (heap_offset % heap_align(own_heap)) as usize,
        )
        .map_err(|source| ShmError::Map {
            path: path.clone(),
            len: total,
            source,
        })?;
        if let Some(node) = cfg.numa_node
            && let Err(e) = sys::mbind_preferred(&map, node)
        {
            warnings.push(format!("cannot place the heap on NUMA node {node}: {e}"));
        }
        if cfg.populate {
            prefault(&map, page).map_err(|source| ShmError::Map {
                path: path.clone(),
                len: total,
                source,
            })?;
        }
        let alias_offset = match cfg.alias {
            None => None,
            Some(a) => {
                let at = heap_offset + own_heap;
                // SAFETY: `at + a.len <= total` (heap_len includes the alias);
                // the source is the caller's readable range (the `Alias`
                // contract), distinct from this fresh mapping.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        a.addr as *const u8,
                        map.as_ptr().add(at as usize),
                        a.len,
                    );
                }
                // SAFETY: page aligned (checked by `Alias::new`; `at` is a sum
                // of pages), contents copied above, no other thread touches the
                // range meanwhile (the `Alias` contract).
                unsafe { sys::map_fixed_shared(&file, at, a.addr as *mut u8, a.len) }.map_err(
                    |source| ShmError::Map {
                        path: path.clone(),
                        len: a.len,
                        source,
                    },
                )?;
                Some(own_heap)
            }
        };
        let cb = ControlBlock {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            pe: cfg.pe,
            job_id: cfg.job_id,
            pid: sys::pid(),
            n_pes: cfg.n_pes,
            heap_offset,
            heap_len,
            uid: sys::uid(),
        };
        // SAFETY: the mapping is at least one page, page aligned, and nobody
        // reads the control block before `ready` below is set.
        unsafe { map.as_ptr().cast::<ControlBlock>().write(cb) };
        // SYNC POINT with the Acquire load of `ready` in `Segment::attach`: the
        // control block written above is visible to an attacher that sees READY.
        ready_flag(&map).store(READY, Ordering::Release);
        let mut guard = guard;
        guard.0 = None;
        Ok(Segment {
            mapped: Mapped {
                map,
                heap_offset,
                heap_len,
                pid: sys::pid(),
                path,
            },
            huge: huge_dir.is_some(),
            alias_offset,
            warnings,
        })
    }

    /// Maps a peer's object at `path` and checks its control block against
    /// what the bootstrap said (job, PE).
    ///
    /// # Errors
    ///
    /// [`ShmError::Attach`] when it cannot be opened or mapped,
    /// [`ShmError::BadObject`] when its control block is wrong.
    pub fn attach(path: &Path, job_id: u64, pe: u32) -> Result<Mapped, ShmError> {
        let bad = |why: String| ShmError::BadObject {
            path: path.to_path_buf(),
            why,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| ShmError::Attach {
                path: path.to_path_buf(),
                source,
            })?;
        let meta = file.metadata().map_err(|source| ShmError::Attach {
            path: path.to_path_buf(),
            source,
        })?;
        let len =
            usize::try_from(meta.len()).map_err(|_| bad("larger than the address space".into()))?;
        if (len as u64) < 2 * PAGE {
            return Err(bad(format!(
                "{len} bytes, smaller than a control block and a heap"
            )));
        }
        let map = Mmap::map(&file, len, true).map_err(|source| ShmError::Attach {
            path: path.to_path_buf(),
            source,
        })?;
        // SYNC POINT with the Release store of `ready` in `Segment::create`.
        let ready = ready_flag(&map).load(Ordering::Acquire);
        if ready != READY {
            return Err(bad("its creator has not finished it (not ready)".into()));
        }
        // SAFETY: the mapping is at least two pages, page aligned, and the
        // creator wrote the block before publishing READY (seen above).
        let cb = unsafe { map.as_ptr().cast::<ControlBlock>().read() };
        if cb.magic != MAGIC {
            return Err(bad("bad magic: not a switchyard object".into()));
        }
        if cb.version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {} (this build speaks {LAYOUT_VERSION})",
                cb.version
            )));
        }
        if cb.job_id != job_id {
            return Err(bad(format!(
                "job {:016x}, expected {job_id:016x}",
                cb.job_id
            )));
        }
        if cb.pe != pe {
            return Err(bad(format!("belongs to PE {}, expected PE {pe}", cb.pe)));
        }
        let end = cb.heap_offset.checked_add(cb.heap_len);
        if cb.heap_offset < PAGE || end.is_none_or(|e| e > len as u64) {
            return Err(bad(format!(
                "heap [{}, +{}) does not fit the {len}-byte object",
                cb.heap_offset, cb.heap_len
            )));
        }
        Ok(Mapped {
            map,
            heap_offset: cb.heap_offset,
            heap_len: cb.heap_len,
            pid: cb.pid,
            path: path.to_path_buf(),
        })
    }

    /// The mapping.
    pub fn mapped(&self) -> &Mapped {
        &self.mapped
    }

    /// The object's path (what peers attach to; goes in the bootstrap card).
    pub fn path(&self) -> &Path {
        &self.mapped.path
    }

    /// Where the [`Alias`] starts in the heap (its symmetric offset), when
    /// one was given.
    pub fn alias_offset(&self) -> Option<u64> {
        self.alias_offset
    }

    /// Whether the heap is on huge pages.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// Warnings from creation (huge pages or NUMA placement that fell back).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Peers keep their mappings; only the name goes.
        let _ = fs::remove_file(&self.mapped.path);
    }
}

struct UnlinkGuard(Option<PathBuf>);

impl Drop for UnlinkGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

fn heartbeat_word(map: &Mmap) -> &AtomicU64 {
    // SAFETY: HEARTBEAT_OFFSET is 8-aligned inside the first (page-aligned)
    // page of a live mapping borrowed for the returned lifetime; the word is
    // only ever accessed atomically.
    unsafe { AtomicU64::from_ptr(map.as_ptr().add(HEARTBEAT_OFFSET).cast::<u64>()) }
}

fn ready_flag(map: &Mmap) -> &AtomicU32 {
    // SAFETY: READY_OFFSET is 4-aligned inside the first (page-aligned) page of
    // a live mapping borrowed for the returned lifetime; the word is only ever
    // accessed atomically.
    unsafe { AtomicU32::from_ptr(map.as_ptr().add(READY_OFFSET).cast::<u32>()) }
}

fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_add(to - 1).map(|x| x / to * to)
}

/// Makes sure the filesystem of `dir` holds the `need` bytes of `file`
/// before anything touches the mapping: a tmpfs that runs out while pages are
/// faulted in kills the process with `SIGBUS`. `posix_fallocate` reserves
/// the blocks (tmpfs and hugetlbfs support it); where a filesystem does not,
/// the free space `statvfs` reports must cover the object.
fn reserve(file: &File, dir: &Path, need: u64) -> Result<(), ShmError> {
    let no_space = || ShmError::NoSpace {
        dir: dir.to_path_buf(),
        need,
        free: sys::statvfs(dir).map_or(0, |(_, free)| free),
    };
    match sys::fallocate(file, need) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Err(no_space()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
            ) =>
        {
            match sys::statvfs(dir) {
                Ok((_, free)) if free < need => Err(no_space()),
                _ => Ok(()),
            }
        }
        Err(source) => Err(ShmError::Create {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Touches every page once (writes a zero) so page faults happen at init.
fn prefault(map: &Mmap, page: u64) -> io::Result<()> {
    let mut off = 0usize;
    while off < map.len() {
        // SAFETY: `off < len` inside our own fresh mapping; nobody else uses it
        // yet (the object is not published).
        unsafe { map.as_ptr().add(off).write_volatile(0) };
        off += page as usize;
    }
    Ok(())
}

/// The hugetlbfs directory to use, or why none can be.
fn huge_pages_usable(heap: u64) -> Result<PathBuf, String> {
    let mounts = fs::read_to_string("/proc/mounts").map_err(|e| format!("/proc/mounts: {e}"))?;
    let dir = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, mnt, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "hugetlbfs").then(|| PathBuf::from(mnt))
        })
        .find(|p| p == Path::new(HUGE_DIR))
        .or_else(|| {
            mounts.lines().find_map(|l| {
                let mut f = l.split_whitespace();
                let (_d, mnt, t) = (f.next()?, f.next()?, f.next()?);
                (t == "hugetlbfs").then(|| PathBuf::from(mnt))
            })
        })
        .ok_or_else(|| "no hugetlbfs is mounted".to_string())?;
    let free = meminfo("HugePages_Free").ok_or("no HugePages_Free in /proc/meminfo")?;
    let need = round_up(heap, HUGE_PAGE).unwrap_or(u64::MAX) / HUGE_PAGE + 1;
    if free < need {
        return Err(format!("{free} free 2 MiB pages, {need} needed"));
    }
    Ok(dir)
}

/// A number from /proc/meminfo (`key:  value [kB]`).
pub fn meminfo(key: &str) -> Option<u64> {
    let mut s = String::new();
    File::open("/proc/meminfo")
        .ok()?
        .read_to_string(&mut s)
        .ok()?;
    s.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Removes the objects of dead switchyard jobs from `dir`: those whose control
/// block names a creator process that no longer exists (and that belong to
/// this user), and unfinished ones older than a minute. Objects of `keep_job`
/// are never touched. Returns the paths removed.
pub fn remove_stale(dir: &Path, keep_job: Option<u64>) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return removed;
    };
    let keep = keep_job.map(object_prefix);
    let me = sys::uid();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("switchyard-") || keep.as_deref().is_some_and(|k| name.starts_with(k))
        {
            continue;
        }
        let path = e.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() || meta.uid() != me {
            continue;
        }
        let stale = match read_control_block(&path) {
            // A stats segment's and a trace object's headers start like a
            // control block.
            Some(cb)
                if cb.magic == MAGIC
                    || cb.magic == STATS_MAGIC
                    || cb.magic == crate::trace_object::TRACE_MAGIC =>
            {
                !sys::process_alive(cb.pid)
            }
            _ => meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .is_some_and(|age| age > STALE_GRACE),
        };
        if stale && fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

fn read_control_block(path: &Path) -> Option<ControlBlock> {
    let mut buf = [0u8; READY_OFFSET + 4];
    File::open(path).ok()?.read_exact(&mut buf).ok()?;
    let ready = u32::from_le_bytes(buf[READY_OFFSET..].try_into().ok()?);
    if ready != READY {
        return None;
    }
    let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().unwrap_or_default());
    let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().unwrap_or_default());
    Some(ControlBlock {
        magic: u64_at(0),
        version: u32_at(8),
        pe: u32_at(12),
        job_id: u64_at(16),
        pid: u32_at(24),
        n_pes: u32_at(28),
        heap_offset: u64_at(32),
        heap_len: u64_at(40),
        uid: u32_at(48),
    })
}
