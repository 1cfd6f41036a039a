//! The trace object: a PE's route trace rings in a job-scoped shared-memory
//! object, so that a reader outside the job (`switchyard trace JOB`) can copy
//! them while the job runs, and the same layout in a file (a dump) that
//! outlives the job.
//!
//! Layout (little-endian, every offset from the start of the object):
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | magic `b"SWYTRCE1"` (u64) | like the heap's control block, so stale cleanup reads the creator's pid |
//! | 8 | version (u32) | [`TRACE_VERSION`] |
//! | 12 | PE (u32) | |
//! | 16 | job id (u64) | |
//! | 24 | creator pid (u32) | |
//! | 28 | PEs in the job (u32) | |
//! | 32 | record bytes (u32) | [`RECORD_BYTES`] |
//! | 36 | capacity (u32) | records per ring, a power of two |
//! | 40 | rings (u32) | [`SECTIONS`] |
//! | 44 | flags (u32) | [`TraceMeta::DUMP`]: a copy written to a file |
//! | 48 | ticks per second (u64) | rate of the record timestamps |
//! | 56 | ready (u32) | written last (Release) by the creator |
//! | 64 | anchor ticks (u64) | a clock reading taken at creation ... |
//! | 72 | anchor wall clock (u64) | ... and the wall clock then, ns since the Unix epoch |
//! | 80 | ring stride (u64) | bytes from one ring to the next |
//! | 128 | ring 0, ring 1 | each a [`TraceRingSlice`] of `capacity` slots ([`shared_layout`]) |
//!
//! Ring [`INITIATOR`] holds the routing decisions of the PE's context; ring
//! [`TARGET`] the frames the PE applied for its peers (written by the TCP
//! driver, which may run on the progress thread: each ring has one writer).
//! A reader copies records with [`TraceRingSlice::read`], whose stamps let it
//! skip a record being overwritten.

use std::{
    fs::{self, File, OpenOptions},
    io::{Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use switchyard_core::{
    sync::atomic::{AtomicU32, Ordering},
    trace::{RECORD_BYTES, TraceRecord, TraceRingSlice, TraceWriter, shared_layout},
};

use crate::{
    SHM_DIR, ShmError,
    segment::{READY, READY_OFFSET, object_prefix},
    sys::{self, Mmap},
};

/// `b"SWYTRCE1"` little-endian: the first word of a trace object or dump.
pub const TRACE_MAGIC: u64 = u64::from_le_bytes(*b"SWYTRCE1");
/// Layout version of the trace object.
pub const TRACE_VERSION: u32 = 1;
/// Bytes before the first ring.
pub const TRACE_HEADER: usize = 128;
/// Rings in an object: [`INITIATOR`] and [`TARGET`].
pub const SECTIONS: usize = 2;
/// The ring of the PE's own routing decisions.
pub const INITIATOR: usize = 0;
/// The ring of the frames the PE applied for its peers.
pub const TARGET: usize = 1;
/// Largest capacity an object accepts (records per ring): the core's
/// largest ring, 2^30.
pub const MAX_TRACE_CAPACITY: usize = 1 << 30;

/// Path of the trace object of `pe` in `job_id` (in [`SHM_DIR`], named with
/// [`object_prefix`], so it goes with the job's other objects).
pub fn trace_object_path(job_id: u64, pe: u32) -> PathBuf {
    Path::new(SHM_DIR).join(format!("{}trace-{pe}", object_prefix(job_id)))
}

/// What a trace object's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceMeta {
    /// The PE whose rings these are.
    pub pe: u32,
    /// PEs in the job.
    pub n_pes: u32,
    /// The job id (0 outside a launched job).
    pub job_id: u64,
    /// The creator's process id.
    pub pid: u32,
    /// Records per ring (a power of two).
    pub capacity: u32,
    /// [`TraceMeta::DUMP`] or 0.
    pub flags: u32,
    /// Ticks of the record timestamps per second.
    pub ticks_per_second: u64,
    /// A timestamp taken at creation ...
    pub anchor_ticks: u64,
    /// ... and the wall clock at that moment, in ns since the Unix epoch.
    pub anchor_unix_ns: u64,
}

impl TraceMeta {
    /// Flag: the object is a dump (a copy in a file), not a live ring.
    pub const DUMP: u32 = 1;

    /// Nanoseconds since the Unix epoch of timestamp `ticks`, through the
    /// anchor (timestamps before it come out earlier than it).
    pub fn unix_nanos(&self, ticks: u64) -> i128 {
        let rate = i128::from(self.ticks_per_second.max(1));
        let d = i128::from(ticks) - i128::from(self.anchor_ticks);
        i128::from(self.anchor_unix_ns) + d * 1_000_000_000 / rate
    }
}

/// Where the bytes are.
#[derive(Debug)]
enum Storage {
    Mapped(Mmap),
    /// Outside a job: the same layout in process memory (`u64`s for the
    /// alignment; in cells, as the rings' writers change them through
    /// shared references).
    Heap(Box<[std::cell::UnsafeCell<u64>]>),
}

/// A trace object: its header and [`SECTIONS`] rings, mapped (a live object
/// or a dump file) or in process memory.
#[derive(Debug)]
pub struct TraceObject {
    storage: Storage,
    meta: TraceMeta,
    stride: usize,
    /// The shared-memory object, when this process created it.
    path: Option<PathBuf>,
}

// SAFETY: after creation the header words are fixed, and the rings' words
// change only through the core's trace ring (atomic loads and stores, one
// writer per ring, claimed atomically by `writer`) and the ready word (an
// atomic): storage in a shared mapping or in cells may be written through
// shared references, so sharing a `&TraceObject` between threads is sound.
// (`Mmap` is `Send`; the cells own their memory.)
unsafe impl Sync for TraceObject {}

/// Bytes of one ring of `capacity` records, rounded up to 64, and of a
/// whole object; `None` when out of range.
fn sizes(capacity: usize) -> Option<(usize, usize)> {
    if !capacity.is_power_of_two() || capacity > MAX_TRACE_CAPACITY {
        return None;
    }
    let stride = shared_layout(capacity)?
        .size()
        .checked_next_multiple_of(64)?;
    Some((stride, TRACE_HEADER + SECTIONS * stride))
}

fn bad(path: &Path, why: impl Into<String>) -> ShmError {
    ShmError::BadObject {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

impl TraceObject {
    /// Creates the trace object of `meta.pe` in `meta.job_id` (0600,
    /// `O_EXCL`) at [`trace_object_path`], its rings empty. The caller
    /// removes it ([`TraceObject::remove`]); so does stale cleanup once the
    /// creator is gone.
    ///
    /// # Errors
    ///
    /// [`ShmError::BadObject`] for a capacity that is not a power of two or is
    /// above [`MAX_TRACE_CAPACITY`]; [`ShmError::Create`] or
    /// [`ShmError::Map`] from the OS.
    pub fn create(meta: &TraceMeta) -> Result<TraceObject, ShmError> {
        Self::create_at(&trace_object_path(meta.job_id, meta.pe), meta)
    }

    /// [`TraceObject::create`] at `path`.
    ///
    /// # Errors
    ///
    /// As [`TraceObject::create`].
    pub fn create_at(path: &Path, meta: &TraceMeta) -> Result<TraceObject, ShmError> {
        let (stride, total) = sizes(meta.capacity as usize)
            .ok_or_else(|| bad(path, format!("trace capacity {}", meta.capacity)))?;
        let create = |source| ShmError::Create {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(create)?;
        let made = (|| {
            file.set_len(total as u64).map_err(create)?;
            Mmap::map(&file, total, false).map_err(|source| ShmError::Map {
                path: path.to_path_buf(),
                len: total,
                source,
            })
        })();
        let map = made.inspect_err(|_| {
            let _ = fs::remove_file(path);
        })?;
        let obj = TraceObject {
            storage: Storage::Mapped(map),
            meta: *meta,
            stride,
            path: Some(path.to_path_buf()),
        };
        obj.write_header();
        Ok(obj)
    }

    /// The same layout in process memory (no file): the rings of a context
    /// outside a launched job.
    ///
    /// # Errors
    ///
    /// [`ShmError::BadObject`] for a capacity that is not a power of two or is
    /// above [`MAX_TRACE_CAPACITY`].
    pub fn in_memory(meta: &TraceMeta) -> Result<TraceObject, ShmError> {
        let (stride, total) = sizes(meta.capacity as usize)
            .ok_or_else(|| bad(Path::new(""), format!("trace capacity {}", meta.capacity)))?;
        let obj = TraceObject {
            storage: Storage::Heap(
                (0..total / 8)
                    .map(|_| std::cell::UnsafeCell::new(0))
                    .collect(),
            ),
            meta: *meta,
            stride,
            path: None,
        };
        obj.write_header();
        Ok(obj)
    }

    /// Opens a trace object or a dump file at `path` for reading.
    ///
    /// # Errors
    ///
    /// [`ShmError::Attach`] when it cannot be opened or mapped;
    /// [`ShmError::BadObject`] when it is not a trace object of this
    /// version, or its length does not match its header.
    pub fn open(path: &Path) -> Result<TraceObject, ShmError> {
        let attach = |source| ShmError::Attach {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(attach)?;
        let mut h = [0u8; TRACE_HEADER];
        file.read_exact(&mut h)
            .map_err(|_| bad(path, "shorter than a trace header"))?;
        let (meta, stride) = parse_header(&h).map_err(|why| bad(path, why))?;
        let total = TRACE_HEADER + SECTIONS * stride;
        let len = file.metadata().map_err(attach)?.len();
        if len != total as u64 {
            return Err(bad(path, format!("{len} bytes, its header says {total}")));
        }
        let map = Mmap::map(&file, total, false).map_err(attach)?;
        Ok(TraceObject {
            storage: Storage::Mapped(map),
            meta,
            stride,
            path: None,
        })
    }

    fn base(&self) -> *mut u8 {
        match &self.storage {
            Storage::Mapped(m) => m.as_ptr(),
            Storage::Heap(b) => std::cell::UnsafeCell::raw_get(b.as_ptr()).cast::<u8>(),
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the storage holds `TRACE_HEADER + SECTIONS * stride`
        // initialised bytes that live as long as `self`. Other writers only
        // change them through atomics; this view is copied to a file or
        // parsed as a header, whose words stay fixed after creation.
        unsafe { std::slice::from_raw_parts(self.base(), TRACE_HEADER + SECTIONS * self.stride) }
    }

    fn ready(&self) -> &AtomicU32 {
        // SAFETY: READY_OFFSET (56) is 4-aligned inside the header of a live
        // storage (8-aligned) borrowed for the returned lifetime; the word is
        // only ever accessed atomically once the object is shared.
        unsafe { AtomicU32::from_ptr(self.base().add(READY_OFFSET).cast::<u32>()) }
    }

    fn write_header(&self) {
        let m = &self.meta;
        let mut h = [0u8; TRACE_HEADER];
        h[0..8].copy_from_slice(&TRACE_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&TRACE_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&m.pe.to_le_bytes());
        h[16..24].copy_from_slice(&m.job_id.to_le_bytes());
        h[24..28].copy_from_slice(&m.pid.to_le_bytes());
        h[28..32].copy_from_slice(&m.n_pes.to_le_bytes());
        h[32..36].copy_from_slice(&(RECORD_BYTES as u32).to_le_bytes());
        h[36..40].copy_from_slice(&m.capacity.to_le_bytes());
        h[40..44].copy_from_slice(&(SECTIONS as u32).to_le_bytes());
        h[44..48].copy_from_slice(&m.flags.to_le_bytes());
        h[48..56].copy_from_slice(&m.ticks_per_second.to_le_bytes());
        h[64..72].copy_from_slice(&m.anchor_ticks.to_le_bytes());
        h[72..80].copy_from_slice(&m.anchor_unix_ns.to_le_bytes());
        h[80..88].copy_from_slice(&(self.stride as u64).to_le_bytes());
        let ready_at = READY_OFFSET..READY_OFFSET + 4;
        // SAFETY: the header's bytes outside the ready word, in storage this
        // process created and no other has seen complete yet (readers check
        // `ready` first); the ready word is written atomically below.
        unsafe {
            let base = self.base();
            std::ptr::copy_nonoverlapping(h.as_ptr(), base, ready_at.start);
            std::ptr::copy_nonoverlapping(
                h.as_ptr().add(ready_at.end),
                base.add(ready_at.end),
                TRACE_HEADER - ready_at.end,
            );
        }
        // SYNC POINT with the Acquire load of `ready` in stale cleanup
        // (`read_control_block` reads the file after it).
        self.ready().store(READY, Ordering::Release);
    }

    /// What the header says.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// The shared-memory object this process created, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Ring `section` ([`INITIATOR`] or [`TARGET`]; anything else is the
    /// last one).
    pub fn ring(&self, section: usize) -> &TraceRingSlice {
        let at = TRACE_HEADER + section.min(SECTIONS - 1) * self.stride;
        let p = std::ptr::slice_from_raw_parts(
            // SAFETY: `at` plus the ring's layout size is inside the storage.
            unsafe { self.base().add(at) }.cast::<switchyard_core::trace::TraceSlot>(),
            self.meta.capacity as usize,
        ) as *const TraceRingSlice;
        // SAFETY: the ring's bytes, `shared_layout(capacity)` of them at a
        // 64-aligned offset of 8-aligned storage, are all-zero (an empty
        // ring) or a ring of this capacity written by its single writer
        // through atomics; they live as long as `self`.
        unsafe { &*p }
    }

    /// Claims the single writer of ring `section`, or `None` while another
    /// exists.
    pub fn writer(&self, section: usize) -> Option<TraceWriter<'_>> {
        self.ring(section).writer()
    }

    /// The newest `last` records of ring `section`, oldest first (records
    /// being overwritten while copied are skipped).
    pub fn snapshot(&self, section: usize, last: usize) -> Vec<TraceRecord> {
        let ring = self.ring(section);
        let mut out = vec![TraceRecord::default(); last.min(ring.capacity())];
        let n = ring.snapshot(&mut out);
        out.truncate(n);
        out
    }

    /// Writes the newest `last` records of each ring to a new file at
    /// `path` (0600; it must not exist), in the object's own layout with
    /// [`TraceMeta::DUMP`] set: [`TraceObject::open`] reads it back.
    ///
    /// # Errors
    ///
    /// [`ShmError::Create`] when the file cannot be created or written.
    pub fn dump(&self, path: &Path, last: usize) -> Result<(), ShmError> {
        let meta = TraceMeta {
            flags: self.meta.flags | TraceMeta::DUMP,
            ..self.meta
        };
        let copy = TraceObject::in_memory(&meta)?;
        for section in 0..SECTIONS {
            if let Some(mut w) = copy.writer(section) {
                for r in self.snapshot(section, last) {
                    w.record(&r);
                }
            }
        }
        let create = |source| ShmError::Create {
            path: path.to_path_buf(),
            source,
        };
        // Written whole under a temporary name beside it, then linked to
        // `path`: a process killed while it writes (a launcher stopping
        // the job's other ranks) leaves no half dump under a `.sytrace`
        // name, and the link, like `create_new`, refuses a second dump of
        // one name.
        let mut part = path.as_os_str().to_owned();
        part.push(format!(".{}.part", std::process::id()));
        let part = std::path::PathBuf::from(part);
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&part)
            .and_then(|mut f| {
                f.write_all(copy.bytes())?;
                f.sync_all()
            })
            .and_then(|()| fs::hard_link(&part, path));
        let _ = fs::remove_file(&part);
        written.map_err(create)
    }

    /// Removes the shared-memory object this process created (readers that
    /// mapped it keep their mapping). Idempotent.
    pub fn remove(&self) {
        if let Some(p) = &self.path {
            let _ = fs::remove_file(p);
        }
    }
}

/// Checks a header and returns what it says and the ring stride.
fn parse_header(h: &[u8; TRACE_HEADER]) -> Result<(TraceMeta, usize), String> {
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let u64_at = |o: usize| u32_at(o) as u64 | (u32_at(o + 4) as u64) << 32;
    if u64_at(0) != TRACE_MAGIC {
        return Err("not a switchyard trace object (bad magic)".into());
    }
    if u32_at(8) != TRACE_VERSION {
        return Err(format!(
            "trace layout version {}, this build reads {TRACE_VERSION}",
            u32_at(8)
        ));
    }
    if u32_at(READY_OFFSET) != READY {
        return Err("not ready (its creator has not finished it)".into());
    }
    if u32_at(32) as usize != RECORD_BYTES || u32_at(40) as usize != SECTIONS {
        return Err(format!(
            "{}-byte records in {} rings, this build reads {RECORD_BYTES} in {SECTIONS}",
            u32_at(32),
            u32_at(40)
        ));
    }
    let capacity = u32_at(36);
    let (stride, _) =
        sizes(capacity as usize).ok_or_else(|| format!("trace capacity {capacity}"))?;
    if u64_at(80) != stride as u64 {
        return Err(format!("ring stride {}, expected {stride}", u64_at(80)));
    }
    Ok((
        TraceMeta {
            pe: u32_at(12),
            n_pes: u32_at(28),
            job_id: u64_at(16),
            pid: u32_at(24),
            capacity,
            flags: u32_at(44),
            ticks_per_second: u64_at(48),
            anchor_ticks: u64_at(64),
            anchor_unix_ns: u64_at(72),
        },
        stride,
    ))
}

/// This process's id (for [`TraceMeta::pid`]).
pub fn own_pid() -> u32 {
    sys::pid()
}

/// The trace objects on this node (in [`SHM_DIR`]) as (job id, PE, path),
/// sorted; only those of `job_id` when given.
pub fn trace_objects(job_id: Option<u64>) -> Vec<(u64, u32, PathBuf)> {
    let mut out: Vec<(u64, u32, PathBuf)> = fs::read_dir(SHM_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let rest = name.to_str()?.strip_prefix("switchyard-")?;
            let (job, pe) = rest.split_once("-trace-")?;
            let job = u64::from_str_radix(job, 16).ok()?;
            let pe = pe.parse().ok()?;
            job_id.is_none_or(|j| j == job).then(|| (job, pe, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Environment variable naming a job's directory ([`job_dir`]).
pub const JOB_DIR_ENV: &str = "SWITCHYARD_JOB_DIR";

/// The directory where the PEs of `job_id` leave their trace dumps:
/// `$SWITCHYARD_JOB_DIR` when set, else `switchyard-<job id, 16 hex
/// digits>` in the temporary directory (`$TMPDIR`, else `/tmp`). The launcher
/// and every PE compute the same path.
pub fn job_dir(job_id: u64) -> PathBuf {
    match std::env::var_os(JOB_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join(format!("switchyard-{job_id:016x}")),
    }
}

/// [`job_dir`], created 0700 when missing (by whichever PE or launcher comes
/// first).
///
/// # Errors
///
/// As [`ensure_dir`].
pub fn ensure_job_dir(job_id: u64) -> std::io::Result<PathBuf> {
    let d = job_dir(job_id);
    ensure_dir(&d).map(|()| d)
}

/// Creates the directory `d` (0700) when missing.
///
/// # Errors
///
/// When it cannot be created, or exists but is not a directory of this user.
pub fn ensure_dir(d: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match fs::DirBuilder::new().mode(0o700).create(d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = fs::symlink_metadata(d)?;
            if m.is_dir() && m.uid() == sys::uid() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "{} exists and is not a directory of this user",
                    d.display()
                )))
            }
        }
        Err(e) => Err(e),
    }
}

/// The trace dumps (`*.sytrace`) in `dir`, sorted.
pub fn dumps_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == DUMP_EXT))
        .collect();
    out.sort();
    out
}

/// File extension of a trace dump.
pub const DUMP_EXT: &str = "sytrace";

/// Whether `path` starts like a trace object (its magic), without mapping
/// it.
pub fn is_trace_file(path: &Path) -> bool {
    let mut m = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut m))
        .is_ok_and(|()| u64::from_le_bytes(m) == TRACE_MAGIC)
}

#[cfg(test)]
mod test;
