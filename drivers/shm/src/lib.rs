//! # switchyard-shm: the POSIX shared-memory transport of switchyard
//!
//! Every PE creates one shared-memory object holding a control block and its
//! symmetric heap ([`Segment`]); PEs on the same node map each other's objects
//! ([`Segment::attach`]) and then:
//!
//! * **put** is a copy into the peer's mapping, **get** a copy out of it;
//! * **atomics** are the CPU's atomic instructions on the mapping (`lock xadd`,
//!   `lock cmpxchg` on x86-64), so they are atomic with respect to every other
//!   PE's atomics on the same word, whatever transport issued them locally;
//! * **fence** is a Release fence and **quiet** a SeqCst fence: once a store
//!   instruction has executed, the coherent cache makes it visible to every
//!   other core, so completion at the target is the local store's completion.
//!
//! Bounds are checked on every operation against the heap length the target
//! wrote in its own control block: an out-of-bounds operation fails with
//! [`ShmError::OutOfBounds`] and writes nothing.
//!
//! ## Memory ordering, at each sync point
//!
//! * Data written by puts, then a flag written by a put after `quiet` (or
//!   `fence`): the fence orders the data stores before the flag store; the
//!   target's Acquire load of the flag (`wait_until`) then sees the data. Puts
//!   of exactly 4 or 8 aligned bytes are single atomic stores, so a flag is
//!   never torn.
//! * Atomics are `AcqRel` (fetching) or `Release` (set): an atomic after puts
//!   publishes them, like a flag.
//! * A get is a plain copy preceded by an Acquire fence, so it sees everything
//!   published to this PE before it.
//!
//! ## Liveness
//!
//! [`ShmTransport::progress`] checks, at most every millisecond, whether the
//! creator of one peer object still exists (round robin, `kill(pid, 0)`); a
//! dead peer turns to [`LinkState::Error`] and every later operation toward it
//! fails with [`ShmError::PeerDead`], so waits fail instead of hanging.
//!
//! The libc calls live in one `sys` module; raw-pointer copies and atomics on
//! the mappings in this file and `segment.rs`, each with its `SAFETY` comment.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod segment;
mod sys;

use std::{
    io,
    path::{Path, PathBuf},
};

pub use segment::{
    Alias, HEAP_ALIGN, HUGE_DIR, HUGE_PAGE, HugePages, LAYOUT_VERSION, Mapped, SHM_DIR, Segment,
    SegmentConfig, global_exit_path, meminfo, object_name, object_prefix, remove_stale,
};
/// The path-class encoding this driver speaks.
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::{
    route::ContextId,
    sync::atomic::{AtomicU32, AtomicU64, Ordering, fence},
    transport::{
        AtomicOp, AtomicWidth, DeviceInfo, ErrorKind, Instant, LinkState, PollResult, ProbeReport,
        Ticket, Transport, TransportError, heap_rmw_u32, heap_rmw_u64,
    },
};

/// Whether this driver is implemented in this build.
pub const IMPLEMENTED: bool = true;

/// Errors of the shared-memory transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// The heap size is zero or too large for this machine's address space.
    #[error("heap size {size} is not usable (zero, or too large to map)")]
    BadHeapSize {
        /// The size asked for.
        size: u64,
    },
    /// Creating or sizing the own object failed.
    #[error("cannot create shared-memory object {}: {source}", path.display())]
    Create {
        /// The object.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The filesystem of the heap (`/dev/shm`, or the hugetlbfs) cannot hold
    /// it: refused before mapping, instead of a `SIGBUS` at the first page
    /// the filesystem has no room for.
    #[error(
        "the symmetric heap needs {need} bytes in {} but only {free} are free there: \
         lower the heap size (SWITCHYARD_HEAP_SIZE, or SHMEM_SYMMETRIC_SIZE in C programs) \
         or make {} larger",
        dir.display(),
        dir.display()
    )]
    NoSpace {
        /// The filesystem's directory.
        dir: PathBuf,
        /// Bytes the object needs (heap, control page, aliased globals).
        need: u64,
        /// Bytes free there before we asked, as `statvfs` reports them.
        free: u64,
    },
    /// Mapping the own object failed (often: the tmpfs is too small).
    #[error("cannot map {len} bytes of {}: {source}", path.display())]
    Map {
        /// The object.
        path: PathBuf,
        /// Bytes asked for.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Opening or mapping a peer's object failed.
    #[error("cannot attach shared-memory object {}: {source}", path.display())]
    Attach {
        /// The object.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A peer's object is not what the bootstrap announced.
    #[error("shared-memory object {} is not usable: {why}", path.display())]
    BadObject {
        /// The object.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A memory range to alias into the object is empty or not page aligned.
    #[error("cannot alias {len} bytes at {addr:#x} into shared memory: empty or not page aligned")]
    BadAlias {
        /// Start address.
        addr: usize,
        /// Length.
        len: usize,
    },
    /// The PE is outside the job.
    #[error("PE {pe} is not part of this job ({n_pes} PEs)")]
    InvalidPe {
        /// The PE.
        pe: u32,
        /// Job size.
        n_pes: u32,
    },
    /// No object address is known for the peer (not on this node).
    #[error("PE {pe} is not reachable over shared memory (no object announced)")]
    NoAddress {
        /// The PE.
        pe: u32,
    },
    /// The peer is not connected yet.
    #[error("PE {pe} is not connected over shared memory")]
    NotConnected {
        /// The PE.
        pe: u32,
    },
    /// The peer's process is gone.
    #[error("PE {pe} (pid {pid}) is dead")]
    PeerDead {
        /// The PE.
        pe: u32,
        /// Its process.
        pid: u32,
    },
    /// The range is outside the heap; nothing was written or read.
    #[error("[{offset}, +{len}) is outside PE {pe}'s {heap_len}-byte heap")]
    OutOfBounds {
        /// The PE whose heap.
        pe: u32,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The heap's length.
        heap_len: u64,
    },
    /// The address is not aligned for an atomic of this width.
    #[error("offset {offset} of PE {pe} is not {align}-byte aligned for an atomic")]
    Misaligned {
        /// The PE.
        pe: u32,
        /// Offset asked for.
        offset: u64,
        /// Alignment required.
        align: u64,
    },
    /// The destination buffer of a get does not match the ticket.
    #[error("get buffer of {got} bytes for a {want}-byte get")]
    BufferLength {
        /// The ticket's length.
        want: u32,
        /// The buffer's.
        got: usize,
    },
}

impl TransportError for ShmError {
    fn kind(&self) -> ErrorKind {
        match self {
            ShmError::OutOfBounds { .. } | ShmError::BufferLength { .. } => ErrorKind::OutOfBounds,
            ShmError::Misaligned { .. } => ErrorKind::Misaligned,
            ShmError::InvalidPe { .. } | ShmError::NoAddress { .. } => ErrorKind::InvalidPe,
            ShmError::PeerDead { .. } | ShmError::NotConnected { .. } => ErrorKind::PeerDown,
            ShmError::BadHeapSize { .. }
            | ShmError::NoSpace { .. }
            | ShmError::Create { .. }
            | ShmError::Map { .. }
            | ShmError::Attach { .. }
            | ShmError::BadObject { .. }
            | ShmError::BadAlias { .. } => ErrorKind::Fatal,
        }
    }

    fn peer(&self) -> Option<u32> {
        match self {
            ShmError::InvalidPe { pe, .. }
            | ShmError::NoAddress { pe }
            | ShmError::NotConnected { pe }
            | ShmError::PeerDead { pe, .. }
            | ShmError::OutOfBounds { pe, .. }
            | ShmError::Misaligned { pe, .. } => Some(*pe),
            _ => None,
        }
    }
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ShmError>;

/// How often (in ns of the caller's clock) progress checks one peer's process.
const LIVENESS_PERIOD_NS: u64 = 1_000_000;

#[derive(Debug)]
enum Peer {
    /// Not on this node, or not announced.
    Unknown,
    /// Announced, not mapped yet.
    Named(PathBuf),
    /// Mapped.
    Mapped(Mapped),
    /// Mapped, then found dead.
    Dead(Mapped),
}

/// One entry of the leg table: the heap of a live mapping (base and length),
/// or `len == 0` when the peer is not mapped (unknown, named, dead, closed).
#[derive(Debug, Clone, Copy)]
struct Window {
    base: *mut u8,
    len: u64,
}

// SAFETY: a copy of a pointer into a mapping that the same `ShmTransport`
// owns (its `Mmap`s are `Send`); it is dereferenced only through that
// transport, under the same rules as the mapping itself.
unsafe impl Send for Window {}

impl Window {
    const NONE: Window = Window {
        base: core::ptr::null_mut(),
        len: 0,
    };

    fn of(m: &Mapped) -> Window {
        Window {
            base: m.heap_ptr(),
            len: m.heap_len(),
        }
    }

    /// `[offset, offset+len)` when it lies in this heap: one compare pair,
    /// no search. An unmapped peer's window (`len == 0`) holds nothing, so
    /// it always answers `None`.
    #[inline(always)]
    fn at(self, offset: u64, len: u64) -> Option<*mut u8> {
        if offset < self.len && len <= self.len - offset {
            // SAFETY: `offset < self.len`, and `self` describes the heap of a
            // live mapping owned by the transport, so the pointer stays in it.
            Some(unsafe { self.base.add(offset as usize) })
        } else {
            None
        }
    }
}

/// The shared-memory transport of one PE: its own [`Segment`] and the
/// mappings of its same-node peers.
#[derive(Debug)]
pub struct ShmTransport {
    job_id: u64,
    me: u32,
    own: Segment,
    peers: Box<[Peer]>,
    /// Per PE, the heap of its live mapping (own one at `me`): what the
    /// leg (`put_leg`, `get_leg`, `atomic_leg`) and `range` use, kept in
    /// step with `peers` by `sync_window` on every change of a slot
    /// (attach, declared dead, renamed, closed).
    windows: Box<[Window]>,
    next_check: u64,
    cursor: u32,
}

impl ShmTransport {
    /// Wraps this PE's own segment for a job of `n_pes`.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidPe`] when `me >= n_pes`.
    pub fn new(own: Segment, job_id: u64, me: u32, n_pes: u32) -> Result<ShmTransport> {
        if me >= n_pes {
            return Err(ShmError::InvalidPe { pe: me, n_pes });
        }
        let mut windows: Box<[Window]> = (0..n_pes).map(|_| Window::NONE).collect();
        windows[me as usize] = Window::of(own.mapped());
        Ok(ShmTransport {
            job_id,
            me,
            own,
            peers: (0..n_pes).map(|_| Peer::Unknown).collect(),
            windows,
            next_check: 0,
            cursor: 0,
        })
    }

    /// Brings `pe`'s leg window in step with its slot (call after every
    /// change of `peers[pe]`).
    fn sync_window(&mut self, pe: u32) {
        let w = match self.peers.get(pe as usize) {
            _ if pe == self.me => Window::of(self.own.mapped()),
            Some(Peer::Mapped(m)) => Window::of(m),
            _ => Window::NONE,
        };
        if let Some(slot) = self.windows.get_mut(pe as usize) {
            *slot = w;
        }
    }

    /// The leg of a small put: copies `src` to `offset` of `pe`'s heap when
    /// `pe` is mapped and alive and the range is in bounds, and says so.
    /// `false`: nothing was written; [`Transport::put`] gives the typed
    /// error (or handles what the leg does not).
    #[inline(always)]
    pub fn put_leg(&mut self, pe: u32, offset: u64, src: &[u8]) -> bool {
        let Some(dst) = self.window(pe).at(offset, src.len() as u64) else {
            return false;
        };
        // SAFETY: `dst` is valid for `src.len()` bytes (checked by `at`);
        // `src` is a caller's buffer, which cannot overlap a heap: the heaps
        // are only reachable through raw pointers.
        unsafe { Self::copy(src.as_ptr(), dst, src.len()) };
        true
    }

    /// The leg of a blocking get: copies `dst.len()` bytes at `offset` of
    /// `pe`'s heap into `dst` at once, no ticket. `false`: nothing was read;
    /// [`Transport::get_start`] gives the typed error.
    #[inline(always)]
    pub fn get_leg(&mut self, pe: u32, offset: u64, dst: &mut [u8]) -> bool {
        let Some(src) = self.window(pe).at(offset, dst.len() as u64) else {
            return false;
        };
        // SAFETY: `src` is valid for `dst.len()` bytes (checked by `at`) in a
        // live mapping.
        unsafe { Self::load_into(src, dst) };
        true
    }

    /// The leg of an atomic: applies `op` at `offset` of `pe`'s heap at once
    /// and returns the old value, no ticket. `None`: nothing was applied
    /// (not mapped, out of bounds or misaligned); [`Transport::atomic_start`]
    /// gives the typed error.
    #[inline(always)]
    pub fn atomic_leg(&mut self, pe: u32, offset: u64, op: AtomicOp) -> Option<u64> {
        let w = op.width.bytes() as u64;
        if !offset.is_multiple_of(w) {
            return None;
        }
        let p = self.window(pe).at(offset, w)?;
        // SAFETY: `p` is in bounds (checked by `at`) and aligned (the heap is
        // page aligned, the offset checked) in a live mapping.
        Some(unsafe { Self::rmw(p, &op) })
    }

    /// `pe`'s leg window (the empty one when `pe` is out of range).
    #[inline(always)]
    fn window(&self, pe: u32) -> Window {
        self.windows
            .get(pe as usize)
            .copied()
            .unwrap_or(Window::NONE)
    }

    /// Records where `pe`'s object is (from its bootstrap card).
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidPe`].
    pub fn set_address(&mut self, pe: u32, path: &Path) -> Result<()> {
        let slot = self.slot(pe)?;
        *slot = Peer::Named(path.to_path_buf());
        self.sync_window(pe);
        Ok(())
    }

    /// This PE's segment.
    pub fn segment(&self) -> &Segment {
        &self.own
    }

    /// Start of this PE's own heap. Use with care: other PEs write to it at any
    /// time; access it only through raw-pointer copies and atomics.
    pub fn local_heap(&self) -> (*mut u8, u64) {
        let m = self.own.mapped();
        (m.heap_ptr(), m.heap_len())
    }

    /// The heap mapping of a connected same-node peer (or this PE's own):
    /// base and length; `None` when `pe` is not mapped. Other PEs write it at
    /// any time; access it only through raw-pointer copies and atomics.
    pub fn peer_heap(&self, pe: u32) -> Option<(*mut u8, u64)> {
        self.mapping(pe).ok().map(|m| (m.heap_ptr(), m.heap_len()))
    }

    fn n_pes(&self) -> u32 {
        self.peers.len() as u32
    }

    fn slot(&mut self, pe: u32) -> Result<&mut Peer> {
        let n_pes = self.n_pes();
        self.peers
            .get_mut(pe as usize)
            .ok_or(ShmError::InvalidPe { pe, n_pes })
    }

    /// The mapping of `pe` (own one for `me`), checked for liveness.
    #[inline]
    fn mapping(&self, pe: u32) -> Result<&Mapped> {
        if pe == self.me {
            return Ok(self.own.mapped());
        }
        match self.peers.get(pe as usize) {
            Some(Peer::Mapped(m)) => Ok(m),
            Some(Peer::Dead(m)) => Err(ShmError::PeerDead { pe, pid: m.pid() }),
            Some(Peer::Named(_)) => Err(ShmError::NotConnected { pe }),
            Some(Peer::Unknown) => Err(ShmError::NoAddress { pe }),
            None => Err(ShmError::InvalidPe {
                pe,
                n_pes: self.n_pes(),
            }),
        }
    }

    /// Pointer to `[offset, offset+len)` of `pe`'s heap, bounds checked.
    #[inline]
    fn range(&self, pe: u32, offset: u64, len: u64) -> Result<*mut u8> {
        if let Some(p) = self.window(pe).at(offset, len) {
            return Ok(p);
        }
        self.range_slow(pe, offset, len)
    }

    /// [`ShmTransport::range`] through the slot: the typed error, or an
    /// empty range at the end of a heap.
    #[cold]
    #[inline(never)]
    fn range_slow(&self, pe: u32, offset: u64, len: u64) -> Result<*mut u8> {
        let m = self.mapping(pe)?;
        let heap_len = m.heap_len();
        match offset.checked_add(len) {
            Some(end) if end <= heap_len => {
                // SAFETY: `offset + len <= heap_len`, so the pointer stays inside
                // the heap of a live mapping.
                Ok(unsafe { m.heap_ptr().add(offset as usize) })
            }
            _ => Err(ShmError::OutOfBounds {
                pe,
                offset,
                len,
                heap_len,
            }),
        }
    }

    /// Copies `len` bytes from `src` to `dst`, as single atomic stores when the
    /// copy is one aligned word (so a flag is never torn).
    ///
    /// # Safety
    ///
    /// Both ranges are valid for `len` bytes (in live mappings or buffers) and
    /// do not overlap.
    #[inline]
    unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
        if len == 8 && (dst as usize).is_multiple_of(8) {
            // SAFETY: 8 valid bytes at `src` (caller); unaligned read allowed.
            let v = unsafe { src.cast::<u64>().read_unaligned() };
            // SAFETY: `dst` is 8-aligned and valid for 8 bytes (caller) in a
            // mapping that outlives this call.
            unsafe { AtomicU64::from_ptr(dst.cast()) }.store(v, Ordering::Relaxed);
        } else if len == 4 && (dst as usize).is_multiple_of(4) {
            // SAFETY: as above, for 4 bytes.
            let v = unsafe { src.cast::<u32>().read_unaligned() };
            // SAFETY: as above, for 4 bytes.
            unsafe { AtomicU32::from_ptr(dst.cast()) }.store(v, Ordering::Relaxed);
        } else {
            // SAFETY: valid, non-overlapping ranges (caller).
            unsafe { core::ptr::copy_nonoverlapping(src, dst, len) };
        }
    }

    /// An Acquire load of the word at `offset` of this PE's own heap: what
    /// `wait_until` polls. Other PEs' puts of exactly 4 or 8 aligned bytes and
    /// their atomics are single atomic stores, so the word is never torn.
    ///
    /// # Errors
    ///
    /// [`ShmError::OutOfBounds`], [`ShmError::Misaligned`].
    #[inline]
    pub fn load_acquire(&self, offset: u64, width: AtomicWidth) -> Result<u64> {
        let w = width.bytes() as u64;
        if !offset.is_multiple_of(w) {
            return Err(ShmError::Misaligned {
                pe: self.me,
                offset,
                align: w,
            });
        }
        let p = self.range(self.me, offset, w)?;
        // SYNC POINT with the Release fences and stores of the writers (`fence`,
        // `quiet_poll`, atomics): what they published before is seen after.
        Ok(match width {
            // SAFETY: in bounds (checked by `range`) and aligned (the heap is page
            // aligned, the offset checked) in the own mapping, which `self` keeps
            // alive; other PEs touch it only with atomics or copies.
            AtomicWidth::W64 => unsafe { AtomicU64::from_ptr(p.cast()) }.load(Ordering::Acquire),
            AtomicWidth::W32 => {
                // SAFETY: as above, for 4 bytes.
                let a = unsafe { AtomicU32::from_ptr(p.cast()) };
                u64::from(a.load(Ordering::Acquire))
            }
        })
    }

    fn check_liveness(&mut self) -> bool {
        let n = self.n_pes();
        for _ in 0..n {
            self.cursor = (self.cursor + 1) % n;
            let pe = self.cursor;
            if let Peer::Mapped(m) = &self.peers[pe as usize] {
                if !sys::process_alive(m.pid()) {
                    let old = core::mem::replace(&mut self.peers[pe as usize], Peer::Unknown);
                    if let Peer::Mapped(m) = old {
                        self.peers[pe as usize] = Peer::Dead(m);
                    }
                    self.sync_window(pe);
                    return true;
                }
                return false;
            }
        }
        false
    }

    fn atomic_now(&mut self, pe: u32, offset: u64, op: AtomicOp) -> Result<u64> {
        let w = op.width.bytes() as u64;
        if !offset.is_multiple_of(w) {
            return Err(ShmError::Misaligned {
                pe,
                offset,
                align: w,
            });
        }
        let p = self.range(pe, offset, w)?;
        // SAFETY: in bounds (checked by `range`), aligned (the heap is page
        // aligned, the offset checked).
        Ok(unsafe { Self::rmw(p, &op) })
    }

    /// Applies `op` to the word at `p`; returns the old value.
    ///
    /// # Safety
    ///
    /// `p` is aligned to and valid for `op.width` bytes in a live mapping.
    #[inline(always)]
    unsafe fn rmw(p: *mut u8, op: &AtomicOp) -> u64 {
        match op.width {
            AtomicWidth::W64 => {
                // SAFETY: `p` is 8-aligned and in bounds (caller) of a live
                // mapping; other PEs touch the word only with atomics or
                // copies.
                let a = unsafe { AtomicU64::from_ptr(p.cast()) };
                heap_rmw_u64(a, op)
            }
            AtomicWidth::W32 => {
                // SAFETY: as above, 4-aligned and 4 bytes in bounds.
                let a = unsafe { AtomicU32::from_ptr(p.cast()) };
                heap_rmw_u32(a, op)
            }
        }
    }

    /// Copies `dst.len()` bytes from `src` into `dst`, after an Acquire
    /// fence; one aligned word is a single load.
    ///
    /// # Safety
    ///
    /// `src` is valid for `dst.len()` bytes in a live mapping.
    #[inline(always)]
    unsafe fn load_into(src: *const u8, dst: &mut [u8]) {
        // SYNC POINT with the Release fences/atomics of the writers: what was
        // published to this PE before is seen by the copy.
        fence(Ordering::Acquire);
        if dst.len() == 8 && (src as usize).is_multiple_of(8) {
            // One aligned word: a single load (never torn, and no call to
            // `memcpy` for a length it cannot see).
            // SAFETY: `src` is 8-aligned and valid for 8 bytes (caller) in a
            // live mapping; other PEs touch it only with atomics or copies.
            let v = unsafe { AtomicU64::from_ptr(src.cast_mut().cast()) }.load(Ordering::Relaxed);
            dst.copy_from_slice(&v.to_ne_bytes());
            return;
        }
        // SAFETY: `src` valid for `dst.len()` bytes (caller), `dst` a caller
        // buffer of that length that cannot overlap a heap.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    }
}

// SYNC POINT (all of them): `heap_rmw_u64`/`heap_rmw_u32` in the core's
// transport module document the orderings (AcqRel; Release `Set`; Acquire
// `Fetch`).

impl Transport for ShmTransport {
    type Error = ShmError;

    fn name(&self) -> &'static str {
        "shm"
    }

    fn connect(&mut self, pe: u32) -> Result<()> {
        if pe == self.me {
            return Ok(());
        }
        let job = self.job_id;
        let slot = self.slot(pe)?;
        match slot {
            Peer::Mapped(_) => Ok(()),
            Peer::Dead(m) => Err(ShmError::PeerDead { pe, pid: m.pid() }),
            Peer::Unknown => Err(ShmError::NoAddress { pe }),
            Peer::Named(path) => {
                let m = Segment::attach(path, job, pe)?;
                *slot = Peer::Mapped(m);
                self.sync_window(pe);
                Ok(())
            }
        }
    }

    fn state(&self, pe: u32) -> LinkState {
        match self.mapping(pe) {
            Ok(_) => LinkState::Up,
            Err(ShmError::PeerDead { .. }) => LinkState::Error,
            Err(_) => LinkState::Down,
        }
    }

    fn heap_len(&self, pe: u32) -> Option<u64> {
        self.mapping(pe).ok().map(Mapped::heap_len)
    }

    #[inline]
    fn put(&mut self, pe: u32, offset: u64, src: &[u8], _ctx: ContextId) -> Result<()> {
        let dst = self.range(pe, offset, src.len() as u64)?;
        // SAFETY: `dst` is valid for `src.len()` bytes (checked by `range`);
        // `src` is a caller's buffer, which cannot overlap a heap: the heaps are
        // only reachable through raw pointers.
        unsafe { Self::copy(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    fn put_from_heap(
        &mut self,
        pe: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        _ctx: ContextId,
    ) -> Result<()> {
        let me = self.me;
        let src = self.range(me, local_offset, u64::from(len))?;
        let dst = self.range(pe, offset, u64::from(len))?;
        if pe == me {
            // SAFETY: both in bounds of the own heap; `copy` handles overlap.
            unsafe { core::ptr::copy(src, dst, len as usize) };
        } else {
            // SAFETY: in bounds of two different mappings (checked above).
            unsafe { Self::copy(src, dst, len as usize) };
        }
        Ok(())
    }

    fn get_start(&mut self, pe: u32, offset: u64, len: u32, ctx: ContextId) -> Result<Ticket> {
        self.range(pe, offset, u64::from(len))?;
        Ok(Ticket {
            peer: pe,
            offset,
            len,
            slot: 0,
            atomic: None,
            context: ctx,
        })
    }

    #[inline]
    fn get_poll(&mut self, t: &Ticket, dst: &mut [u8]) -> Result<bool> {
        if dst.len() != t.len as usize {
            return Err(ShmError::BufferLength {
                want: t.len,
                got: dst.len(),
            });
        }
        let src = self.range(t.peer, t.offset, u64::from(t.len))?;
        // SAFETY: `src` valid for `len` bytes (checked by `range`) in a live
        // mapping; `dst` has that length.
        unsafe { Self::load_into(src, dst) };
        Ok(true)
    }

    fn get_into_heap(
        &mut self,
        pe: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<()> {
        fence(Ordering::Acquire);
        let me = self.me;
        let src = self.range(pe, offset, u64::from(len))?;
        let dst = self.range(me, local_offset, u64::from(len))?;
        let _ = ctx;
        // SAFETY: both ranges in bounds (checked); `copy` allows overlap when
        // `pe == me`.
        unsafe { core::ptr::copy(src, dst, len as usize) };
        Ok(())
    }

    fn atomic_start(
        &mut self,
        pe: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket> {
        // Shared memory completes at once; the old value rides in the ticket.
        let old = self.atomic_now(pe, offset, op)?;
        Ok(Ticket {
            peer: pe,
            offset,
            len: op.width.bytes() as u32,
            slot: 0,
            atomic: Some(AtomicOp { compare: old, ..op }),
            context: ctx,
        })
    }

    #[inline]
    fn atomic_poll(&mut self, t: &Ticket) -> Result<Option<u64>> {
        Ok(t.atomic.map(|op| op.compare))
    }

    #[inline]
    fn fence(&mut self) -> Result<()> {
        // SYNC POINT with the Acquire loads of the targets (`wait_until`, get):
        // stores before the fence are visible before stores after it.
        fence(Ordering::Release);
        Ok(())
    }

    #[inline]
    fn quiet_poll(&mut self) -> Result<bool> {
        // Every store has executed; SeqCst orders them before anything later,
        // including loads (which a Release fence would not).
        fence(Ordering::SeqCst);
        Ok(true)
    }

    fn progress(&mut self, now: Instant) -> PollResult {
        if now.nanos < self.next_check {
            return PollResult::Idle;
        }
        self.next_check = now.nanos.saturating_add(LIVENESS_PERIOD_NS);
        if self.check_liveness() {
            PollResult::Busy
        } else {
            PollResult::Idle
        }
    }

    fn close(&mut self) -> Result<()> {
        for p in self.peers.iter_mut() {
            *p = Peer::Unknown;
        }
        for pe in 0..self.n_pes() {
            self.sync_window(pe);
        }
        Ok(())
    }
}

/// What this machine offers for shared memory: `/dev/shm`, which must be a
/// writable tmpfs (checked in `/proc/self/mounts`, then by creating and
/// removing one empty file), with its size and free space; and the huge pages,
/// with the hugetlbfs they are used through.
///
/// The probe file is named `.switchyard-probe-*`: a dot file, which
/// [`remove_stale`] never looks at, and it is removed at once.
pub fn probe() -> ProbeReport {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    probe_in(Path::new(SHM_DIR), mounts.as_deref(), &meminfo)
}

/// [`probe`] with the shared-memory directory at `dir`, the text of
/// `/proc/self/mounts` (`None` when unreadable: the file system is then not
/// checked) and that of `/proc/meminfo`.
fn probe_in(dir: &Path, mounts: Option<&str>, meminfo: &str) -> ProbeReport {
    let mut devices = Vec::new();
    let why_not = match check_shm_dir(dir, mounts) {
        Ok(detail) => {
            devices.push(DeviceInfo {
                name: dir.display().to_string(),
                detail,
            });
            None
        }
        Err((why, detail)) => {
            if let Some(detail) = detail {
                devices.push(DeviceInfo {
                    name: dir.display().to_string(),
                    detail,
                });
            }
            Some(why)
        }
    };
    devices.extend(huge_pages_device(mounts, meminfo));
    ProbeReport {
        name: "shm",
        available: why_not.is_none(),
        why_not,
        devices,
    }
}

/// The detail of a usable shared-memory directory (`tmpfs, writable, 23.5 GiB
/// free of 23.5 GiB`), or why it is not usable with, when it exists, what it is.
fn check_shm_dir(
    dir: &Path,
    mounts: Option<&str>,
) -> std::result::Result<String, (String, Option<String>)> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err((format!("{shown} is not a directory"), None)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err((
                format!("{shown} does not exist (POSIX shared memory needs a tmpfs there)"),
                None,
            ));
        }
        Err(e) => return Err((format!("{shown} cannot be read: {e}"), None)),
    }
    let mut detail = String::new();
    match mounts {
        Some(mounts) => {
            let Some(m) = mount_of(dir, mounts) else {
                return Err((format!("no mount holds {shown} in /proc/self/mounts"), None));
            };
            if m.fstype != "tmpfs" {
                let why = if m.at == dir {
                    format!("{shown} is a {} file system, not a tmpfs", m.fstype)
                } else {
                    format!(
                        "{shown} is on a {} file system (mounted at {}), not a tmpfs",
                        m.fstype,
                        m.at.display()
                    )
                };
                return Err((why, Some(m.fstype.into())));
            }
            if m.opts.split(',').any(|o| o == "ro") {
                return Err((
                    format!("{shown} is mounted read-only"),
                    Some(format!("tmpfs, read-only ({})", m.opts)),
                ));
            }
            detail.push_str("tmpfs, ");
        }
        None => detail.push_str("file system unknown (/proc/self/mounts unreadable), "),
    }
    if let Err(e) = try_write(dir) {
        return Err((
            format!("{shown} is not writable: {e}"),
            Some(format!("{detail}not writable")),
        ));
    }
    detail.push_str("writable, ");
    match sys::statvfs(dir) {
        Ok((total, free)) => {
            detail.push_str(&format!(
                "{} free of {}",
                human_bytes(free),
                human_bytes(total)
            ));
        }
        Err(e) => detail.push_str(&format!("size unknown (statvfs: {e})")),
    }
    Ok(detail)
}

/// One line of `/proc/self/mounts`.
#[derive(Debug, PartialEq, Eq)]
struct Mount<'a> {
    at: PathBuf,
    fstype: &'a str,
    opts: &'a str,
}

/// The lines of `mounts` (`/proc/self/mounts`), with the mount points'
/// octal escapes (`\040` for a space) undone.
fn parse_mounts(mounts: &str) -> impl Iterator<Item = Mount<'_>> {
    mounts.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, at, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        Some(Mount {
            at: PathBuf::from(unescape_mount(at)),
            fstype,
            opts,
        })
    })
}

/// The mount `dir` lives on: the one with the longest mount point holding it,
/// the last listed among equals (it hides those before). `dir` is resolved
/// first, so a symlinked `/dev/shm` finds its real mount.
fn mount_of<'a>(dir: &Path, mounts: &'a str) -> Option<Mount<'a>> {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut best: Option<Mount<'a>> = None;
    for m in parse_mounts(mounts) {
        if real.starts_with(&m.at)
            && best
                .as_ref()
                .is_none_or(|b| m.at.components().count() >= b.at.components().count())
        {
            best = Some(Mount {
                at: if real == m.at {
                    dir.to_path_buf()
                } else {
                    m.at
                },
                ..m
            });
        }
    }
    best
}

/// Undoes the kernel's octal escapes in a mount point (`\040` is a space).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(oct) = b.get(i + 1..i + 4)
            && oct.iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(oct.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The huge pages (from `meminfo`, the text of `/proc/meminfo`) and the
/// hugetlbfs they are used through; `None` when there are neither.
fn huge_pages_device(mounts: Option<&str>, meminfo: &str) -> Option<DeviceInfo> {
    let field = |key: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let total = field("HugePages_Total");
    let free = field("HugePages_Free");
    let page = field("Hugepagesize").and_then(|k| k.checked_mul(1024));
    let hugetlbfs = mounts.and_then(|m| {
        let all: Vec<PathBuf> = parse_mounts(m)
            .filter(|m| m.fstype == "hugetlbfs")
            .map(|m| m.at)
            .collect();
        let preferred = all.iter().find(|p| *p == Path::new(HUGE_DIR));
        preferred.or(all.first()).cloned()
    });
    if hugetlbfs.is_none() && total.unwrap_or(0) == 0 {
        return None;
    }
    let pages = match (free, total) {
        (Some(free), Some(total)) => format!(
            "{free} of {total} {} pages free",
            page.map_or_else(|| "huge".to_string(), human_bytes)
        ),
        _ => "no huge page counts in /proc/meminfo".into(),
    };
    Some(match hugetlbfs {
        Some(at) => DeviceInfo {
            name: at.display().to_string(),
            detail: format!("hugetlbfs, {pages}"),
        },
        None => DeviceInfo {
            name: "hugepages".into(),
            detail: format!("{pages}; no hugetlbfs is mounted, so they are not used"),
        },
    })
}

/// Creates and removes one empty dot file in `dir` (never an existing one).
fn try_write(dir: &Path) -> io::Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for i in 0..8 {
        let path = dir.join(format!(".switchyard-probe-{}-{stamp}-{i}", sys::pid()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                drop(f);
                return std::fs::remove_file(&path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free probe file name")))
}

/// `23.5 GiB`, `2 MiB`, `100 B`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod probe_test {
    use super::*;

    /// A fresh scratch folder, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "switchyard-shm-probe-test-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            // Resolved, as the probe resolves it, for the fake mount tables.
            Scratch(std::fs::canonicalize(&dir).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MEMINFO: &str = "MemTotal:       49367312 kB\nHugePages_Total:       4\n\
                           HugePages_Free:        3\nHugepagesize:       2048 kB\n";

    #[test]
    fn shm_dir_checks() {
        let tmp = Scratch::new("checks");
        let dir = tmp.0.join("shm");
        let line = |fs: &str, opts: &str| format!("x {} {fs} {opts} 0 0\n", dir.display());
        let why = |mounts: Option<&str>| probe_in(&dir, mounts, "").why_not.unwrap();

        assert!(why(None).contains("does not exist"), "{}", why(None));
        std::fs::write(&dir, b"").unwrap();
        assert!(why(None).ends_with("is not a directory"));
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();

        assert!(why(Some("")).starts_with("no mount holds"));
        let r = probe_in(&dir, Some(&line("ext4", "rw")), "");
        assert!(!r.available);
        assert_eq!(
            r.why_not.unwrap(),
            format!("{} is a ext4 file system, not a tmpfs", dir.display())
        );
        assert_eq!(r.devices[0].detail, "ext4");
        // Not a mount point itself: the mount holding it counts.
        let parent = format!("x {} xfs rw 0 0\n", tmp.0.display());
        assert_eq!(
            why(Some(&format!("none / rootfs rw 0 0\n{parent}"))),
            format!(
                "{} is on a xfs file system (mounted at {}), not a tmpfs",
                dir.display(),
                tmp.0.display()
            )
        );
        let r = probe_in(&dir, Some(&line("tmpfs", "ro,relatime")), "");
        assert_eq!(
            r.why_not.unwrap(),
            format!("{} is mounted read-only", dir.display())
        );
        assert_eq!(r.devices[0].detail, "tmpfs, read-only (ro,relatime)");

        // The last mount on the same point hides the earlier ones.
        let mounts = format!(
            "{}{}{}",
            line("ext4", "rw"),
            parent,
            line("tmpfs", "rw,size=1048576k")
        );
        let r = probe_in(&dir, Some(&mounts), MEMINFO);
        assert!(r.available, "{r:?}");
        assert_eq!(r.why_not, None);
        assert_eq!(r.name, "shm");
        assert_eq!(r.devices.len(), 2, "{r:?}");
        assert_eq!(r.devices[0].name, dir.display().to_string());
        assert!(
            r.devices[0].detail.starts_with("tmpfs, writable, ")
                && r.devices[0].detail.contains(" free of "),
            "{}",
            r.devices[0].detail
        );
        // No mount table: the file system is not checked.
        let r = probe_in(&dir, None, "");
        assert!(r.available);
        assert!(
            r.devices[0]
                .detail
                .starts_with("file system unknown (/proc/self/mounts unreadable), writable, ")
        );
        // The probe file is gone.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn huge_pages() {
        assert_eq!(huge_pages_device(Some(""), ""), None);
        assert_eq!(huge_pages_device(None, "HugePages_Total: 0\n"), None);
        let d = huge_pages_device(Some(""), MEMINFO).unwrap();
        assert_eq!(d.name, "hugepages");
        assert_eq!(
            d.detail,
            "3 of 4 2 MiB pages free; no hugetlbfs is mounted, so they are not used"
        );
        let mounts = "hugetlbfs /mnt/huge hugetlbfs rw 0 0\n\
                      hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n";
        let d = huge_pages_device(Some(mounts), MEMINFO).unwrap();
        assert_eq!(d.name, HUGE_DIR);
        assert_eq!(d.detail, "hugetlbfs, 3 of 4 2 MiB pages free");
        let d = huge_pages_device(Some(&mounts[..36]), "").unwrap();
        assert_eq!(d.name, "/mnt/huge");
        assert_eq!(d.detail, "hugetlbfs, no huge page counts in /proc/meminfo");
    }

    #[test]
    fn mount_table() {
        let m: Vec<Mount<'_>> =
            parse_mounts("tmpfs /dev/my\\040shm tmpfs rw 0 0\nshort line\n").collect();
        assert_eq!(
            m,
            [Mount {
                at: PathBuf::from("/dev/my shm"),
                fstype: "tmpfs",
                opts: "rw"
            }]
        );
        assert_eq!(unescape_mount("a\\134b\\011c\\04"), "a\\b\tc\\04");
        let mounts = "/dev/root / ext4 rw 0 0\nproc /proc proc rw 0 0\n";
        let m = mount_of(Path::new("/nonexistent/shm"), mounts).unwrap();
        assert_eq!((m.at.as_path(), m.fstype), (Path::new("/"), "ext4"));
        assert_eq!(mount_of(Path::new("relative"), mounts), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(human_bytes(100), "100 B");
        assert_eq!(human_bytes(2 << 20), "2 MiB");
        assert_eq!(human_bytes(24683656 << 10), "23.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16384 PiB");
    }
}
