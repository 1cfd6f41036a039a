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
//! Every PE's control block holds a heartbeat counter that its own
//! [`ShmTransport::progress`] bumps, at most every millisecond, as it looks
//! at one peer's (round robin). A counter that moved since the last look
//! proves the peer alive with no system call (a spinning waiter makes none);
//! one that stood still (the peer computes outside the library, or died) is
//! checked with the kernel at most every 10 ms: a pidfd of the peer polled
//! with a zero timeout (`kill(pid, 0)` where pidfds are not available). A
//! dead peer turns to [`LinkState::Error`] and every later operation toward
//! it fails with [`ShmError::PeerDead`], so waits fail instead of hanging,
//! within some 10 ms plus one round of the peers.
//!
//! The libc calls live in one `sys` module; raw-pointer copies and atomics on
//! the mappings in this file and `segment.rs`, each with its `SAFETY` comment.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod error;
mod legs;
mod probe;
mod segment;
mod sys;
pub mod trace_object;

use std::path::{Path, PathBuf};

pub use error::{Result, ShmError};
pub use legs::ShmLegs;
use legs::Window;
pub use probe::{human_bytes, probe};
pub use segment::{
    Alias, HEAP_ALIGN, HUGE_DIR, HUGE_PAGE, HugePages, LAYOUT_VERSION, Mapped, OBJECT_READY,
    OBJECT_READY_OFFSET, SHM_DIR, STATS_MAGIC, Segment, SegmentConfig, global_exit_path,
    heap_align, meminfo, object_name, object_prefix, remove_job_objects, remove_stale,
};
/// The path-class encoding this driver speaks.
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::{
    route::ContextId,
    sync::atomic::{AtomicU32, AtomicU64, Ordering, fence},
    transport::{
        AtomicOp, AtomicWidth, Instant, LinkState, PollResult, Ticket, Transport, heap_rmw_u32,
        heap_rmw_u64,
    },
};
/// Whether a process exists (what the stale-object cleanup asks of a creator).
pub use sys::process_alive;

/// Whether this driver is implemented in this build.
pub const IMPLEMENTED: bool = true;

/// How often (in ns of the caller's clock) progress beats this PE's
/// heartbeat and looks at one peer's.
const LIVENESS_PERIOD_NS: u64 = 1_000_000;
/// How often, at most, the kernel is asked whether a peer whose heartbeat
/// stood still is alive (ns of the caller's clock): the detection window of
/// a dead peer is this plus one round of [`LIVENESS_PERIOD_NS`] per peer.
const KERNEL_CHECK_NS: u64 = 10_000_000;

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
    legs: ShmLegs,
    next_check: u64,
    cursor: u32,
    /// Per PE, how this PE watches its life (heartbeat seen, pidfd).
    lives: Box<[Life]>,
}

/// How this PE watches one mapped peer's life: its heartbeat counter first
/// (a counter that moved since the last look proves it alive, no system
/// call), the kernel only when the counter stood still, at most every
/// [`KERNEL_CHECK_NS`].
#[derive(Debug, Default)]
struct Life {
    /// The peer's heartbeat counter at the last look.
    beat: u64,
    /// When (caller's clock, ns) the kernel was last asked.
    asked: u64,
    /// A pidfd of the peer's process, once opened.
    pidfd: Option<std::os::fd::OwnedFd>,
    /// `pidfd_open` was tried (where it failed: `kill(pid, 0)`).
    tried: bool,
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
        let legs = ShmLegs { me, windows };
        Ok(ShmTransport {
            job_id,
            me,
            own,
            peers: (0..n_pes).map(|_| Peer::Unknown).collect(),
            legs,
            next_check: 0,
            cursor: 0,
            lives: (0..n_pes).map(|_| Life::default()).collect(),
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
        self.legs.set(pe, w);
    }

    /// The leg of a small put: copies `src` to `offset` of `pe`'s heap when
    /// `pe` is mapped and alive and the range is in bounds, and says so.
    /// `false`: nothing was written; [`Transport::put`] gives the typed
    /// error (or handles what the leg does not).
    #[inline(always)]
    pub fn put_leg(&mut self, pe: u32, offset: u64, src: &[u8]) -> bool {
        self.legs.put_leg(pe, offset, src)
    }

    /// The leg of a blocking get: copies `dst.len()` bytes at `offset` of
    /// `pe`'s heap into `dst` at once, no ticket. `false`: nothing was read;
    /// [`Transport::get_start`] gives the typed error.
    #[inline(always)]
    pub fn get_leg(&mut self, pe: u32, offset: u64, dst: &mut [u8]) -> bool {
        self.legs.get_leg(pe, offset, dst)
    }

    /// The leg of an atomic: applies `op` at `offset` of `pe`'s heap at once
    /// and returns the old value, no ticket. `None`: nothing was applied
    /// (not mapped, out of bounds or misaligned); [`Transport::atomic_start`]
    /// gives the typed error.
    #[inline(always)]
    pub fn atomic_leg(&mut self, pe: u32, offset: u64, op: AtomicOp) -> Option<u64> {
        self.legs.atomic_leg(pe, offset, op)
    }

    /// A copy of the leg table as it is now, for another thread: its puts,
    /// gets and atomics through the same mappings, without this transport
    /// (each thread of a PE its own copy, no lock, no shared line written).
    /// The copy does not follow later changes: a peer found dead here stays
    /// mapped in it (its mapping stays alive, see below), one connected
    /// later is not in it (the copy declines it, and the caller goes through
    /// this transport).
    ///
    /// # Safety
    ///
    /// The mappings the copy points into must outlive its use: the caller
    /// keeps this transport alive, and neither calls
    /// [`set_address`](Self::set_address) nor [`Transport::close`] on it
    /// (nor drops it), while the copy or a clone of it is used.
    pub unsafe fn legs(&self) -> ShmLegs {
        self.legs.clone()
    }

    /// `pe`'s leg window (the empty one when `pe` is out of range).
    #[inline(always)]
    fn window(&self, pe: u32) -> Window {
        self.legs.window(pe)
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
    pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
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
        // The own window always holds the own heap: `None` is out of bounds.
        self.legs
            .load_acquire(offset, width)
            .ok_or(ShmError::OutOfBounds {
                pe: self.me,
                offset,
                len: w,
                heap_len: self.own.mapped().heap_len(),
            })
    }

    /// Beats this PE's own heartbeat and looks at one mapped peer (round
    /// robin): alive when its heartbeat moved since the last look; else,
    /// at most every [`KERNEL_CHECK_NS`], the kernel is asked (a pidfd
    /// polled with a zero timeout, `kill(pid, 0)` where pidfds are not
    /// available). True when a peer was found dead.
    fn check_liveness(&mut self, now: u64) -> bool {
        self.own.mapped().beat();
        let n = self.n_pes();
        for _ in 0..n {
            self.cursor = (self.cursor + 1) % n;
            let pe = self.cursor;
            if let Peer::Mapped(m) = &self.peers[pe as usize] {
                let life = &mut self.lives[pe as usize];
                let beat = m.heartbeat();
                if beat != life.beat || now.saturating_sub(life.asked) < KERNEL_CHECK_NS {
                    life.beat = beat;
                    return false;
                }
                life.asked = now;
                if !life.tried {
                    life.tried = true;
                    life.pidfd = sys::pidfd_open(m.pid()).ok();
                }
                let alive = match &life.pidfd {
                    Some(fd) => !sys::pidfd_exited(fd),
                    None => sys::process_alive(m.pid()),
                };
                if !alive {
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
    pub(crate) unsafe fn rmw(p: *mut u8, op: &AtomicOp) -> u64 {
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
    pub(crate) unsafe fn load_into(src: *const u8, dst: &mut [u8]) {
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
        if self.check_liveness(now.nanos) {
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
