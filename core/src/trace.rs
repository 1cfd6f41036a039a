//! The route trace ring: fixed-size binary records of routing decisions,
//! overwriting the oldest, written by one writer without formatting and read by
//! any number of snapshot readers.
//!
//! Each slot is a small seqlock: the writer marks the slot odd, writes the
//! record's words, and marks it with the record's even stamp; a reader copies
//! the words between two stamp reads and keeps the copy only if both match the
//! record it wanted. Words are `AtomicU32` (no `AtomicU64` needed, so it builds
//! for 32-bit targets) and reads never block the writer. No fence on either
//! side: the writer's word stores are Release and the reader's word loads
//! Acquire, so a word from a newer record brings that record's odd stamp with
//! it (on x86-64 every one of them is a plain `mov`; a record is ten stores
//! and the head's).
//!
//! Two owners of the same ring: [`TraceRing`], whose capacity is a const
//! generic and whose storage is inline (`const fn new`, so it can be a
//! `static`), and, with the `alloc` feature, `TraceRingBox`, whose capacity
//! is chosen at run time and whose slots are allocated once, at set-up. Both
//! hand out the same [`TraceWriter`]; recording never allocates.

use core::fmt;

use crate::{
    class::PathClass,
    sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
};

/// One routing decision, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceRecord {
    /// Context id sequence of the decision.
    pub seq: u64,
    /// Source PE.
    pub src: u32,
    /// Destination PE.
    pub dst: u32,
    /// Message length in bytes.
    pub len: u32,
    /// Path class ([`PathClass::to_wire`]).
    pub class: u8,
    /// Transport id index, or [`TraceRecord::NO_TRANSPORT`] for a failed select.
    pub transport: u8,
    /// Operation code (caller-defined; e.g. [`FrameOp`](crate::wire::FrameOp) as u8).
    pub op: u8,
    /// Flags: [`TraceRecord::DOWNGRADED`], [`TraceRecord::ERROR`],
    /// [`TraceRecord::CPU_ATOMIC`], [`TraceRecord::ORDERED`],
    /// [`TraceRecord::LOAD`].
    pub flags: u8,
    /// Timestamp supplied by the caller (the core has no clock).
    pub timestamp: u64,
}

impl TraceRecord {
    /// The decision was a fallback or load yield.
    pub const DOWNGRADED: u8 = 1;
    /// The decision failed (no route).
    pub const ERROR: u8 = 2;
    /// An atomic that left RDMA out because the NIC's atomics are not
    /// atomic with respect to the CPU's (the atomicity policy, not a
    /// failure or a downgrade).
    pub const CPU_ATOMIC: u8 = 4;
    /// The operation first waited for this PE's earlier operations to the
    /// same peer over another transport to complete (cross-transport
    /// ordering: a fence, or a read that must see earlier writes).
    pub const ORDERED: u8 = 8;
    /// A load yield: a transport before the one taken was healthy but over
    /// its load watermark toward the peer (the route policy's rule 4;
    /// [`DOWNGRADED`](TraceRecord::DOWNGRADED) is set too).
    pub const LOAD: u8 = 16;
    /// The frame was a retry: a replay after a reconnect (at the target: a
    /// duplicate the receiver recognised by its sequence).
    pub const RETRIED: u8 = 32;
    /// The operation left a transport that had failed toward the peer for
    /// another one (a verbs failover to TCP).
    pub const FAILOVER: u8 = 64;
    /// `transport` value of a failed decision.
    pub const NO_TRANSPORT: u8 = 0xFF;
    /// `class` value of a record whose writer does not know the path class
    /// (the target side of an operation).
    pub const NO_CLASS: u8 = 0xFF;

    /// The path class, if the byte is valid.
    pub fn path_class(&self) -> Option<PathClass> {
        PathClass::from_wire(self.class, crate::class::CLASS_ENCODING_VERSION).ok()
    }

    fn to_words(self) -> [u32; WORDS] {
        [
            self.seq as u32,
            (self.seq >> 32) as u32,
            self.src,
            self.dst,
            self.len,
            u32::from_le_bytes([self.class, self.transport, self.op, self.flags]),
            self.timestamp as u32,
            (self.timestamp >> 32) as u32,
        ]
    }

    fn from_words(w: [u32; WORDS]) -> Self {
        let [class, transport, op, flags] = w[5].to_le_bytes();
        TraceRecord {
            seq: w[0] as u64 | (w[1] as u64) << 32,
            src: w[2],
            dst: w[3],
            len: w[4],
            class,
            transport,
            op,
            flags,
            timestamp: w[6] as u64 | (w[7] as u64) << 32,
        }
    }
}

const WORDS: usize = 8;

/// Bytes one record takes in a ring: one [`TraceSlot`].
pub const RECORD_BYTES: usize = core::mem::size_of::<TraceSlot>();

/// One record's place in a ring: a stamp and the record's words. Only rings
/// make and read them.
pub struct TraceSlot {
    stamp: AtomicU32,
    words: [AtomicU32; WORDS],
}

impl TraceSlot {
    #[cfg(not(loom))]
    const fn new() -> Self {
        TraceSlot {
            stamp: AtomicU32::new(0),
            words: [const { AtomicU32::new(0) }; WORDS],
        }
    }
    #[cfg(loom)]
    fn new() -> Self {
        TraceSlot {
            stamp: AtomicU32::new(0),
            words: core::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

/// Stamp of record `n` once written (never 0, never odd). Wraps after 2^31
/// records; a reader would need to sleep through exactly that many writes to one
/// slot to be fooled.
#[inline]
fn done_stamp(n: usize) -> u32 {
    ((n as u32) << 1).wrapping_add(2) & !1
}

/// A ring's parts, borrowed from the ring: what its writer holds.
/// `slots.len()` is a power of two.
#[derive(Clone, Copy)]
struct Ring<'a> {
    slots: &'a [TraceSlot],
    /// Records written so far.
    head: &'a AtomicUsize,
    /// Whether a writer exists.
    writer: &'a AtomicBool,
}

/// A trace ring over its slots `S`: `[TraceSlot; N]` inline ([`TraceRing`]) or,
/// with the `alloc` feature, a boxed slice whose length is chosen at run time
/// (`TraceRingBox`). The capacity is a power of two; the methods are the same
/// for both, and none of them allocates.
// Not `heapless::HistoryBuf`, which keeps the newest records the same way but
// writes through `&mut self` into plain memory: here snapshot readers on other
// threads copy records while the writer records, through `crate::sync` atomics
// that the loom model `trace_snapshots_are_never_torn` (tests/loom.rs) checks.
//
// `repr(C)`, so that a ring can live in memory shared with other processes
// (a shared-memory object mapped by a reader outside the job): its layout is
// [`shared_layout`] for any capacity, the same in every process of a build.
#[repr(C)]
pub struct TraceRingIn<S: ?Sized> {
    /// Records written so far.
    head: AtomicUsize,
    writer: AtomicBool,
    slots: S,
}

/// A trace ring of `N` records (`N` a power of two), its storage inline.
pub type TraceRing<const N: usize> = TraceRingIn<[TraceSlot; N]>;

/// A trace ring over a slice of slots: the type of a ring placed in memory
/// the caller provides (a shared mapping), whose capacity is its slice's
/// length.
pub type TraceRingSlice = TraceRingIn<[TraceSlot]>;

/// Memory layout of a [`TraceRingSlice`] of `capacity` slots (`repr(C)`:
/// the head, the writer flag, then the slots), or `None` when it would not
/// fit the address space. All-zero bytes of this layout are an empty ring.
/// A caller that places a ring there turns a pointer to its first byte
/// into a `*const TraceRingSlice` with `ptr::slice_from_raw_parts(p,
/// capacity) as *const TraceRingSlice`.
pub fn shared_layout(capacity: usize) -> Option<core::alloc::Layout> {
    use core::alloc::Layout;
    let (l, _) = Layout::new::<AtomicUsize>()
        .extend(Layout::new::<AtomicBool>())
        .ok()?;
    let (l, _) = l.extend(Layout::array::<TraceSlot>(capacity).ok()?).ok()?;
    Some(l.pad_to_align())
}

impl<S: AsRef<[TraceSlot]> + ?Sized> fmt::Debug for TraceRingIn<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceRing")
            .field("capacity", &self.capacity())
            .field("written", &self.head.load(Ordering::Relaxed))
            .finish()
    }
}

impl<S: AsRef<[TraceSlot]> + ?Sized> TraceRingIn<S> {
    fn ring(&self) -> Ring<'_> {
        Ring {
            slots: self.slots.as_ref(),
            head: &self.head,
            writer: &self.writer,
        }
    }

    /// Records kept.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// Claims the single writer, or `None` while another exists.
    pub fn writer(&self) -> Option<TraceWriter<'_>> {
        self.writer
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TraceWriter {
                ring: self.ring(),
                mask: self.capacity() - 1,
                next: self.head.load(Ordering::Relaxed),
            })
    }

    /// Records written since creation (including overwritten ones).
    pub fn written(&self) -> usize {
        self.head.load(Ordering::Acquire)
    }

    /// Copies the newest records (up to `out.len()` and the capacity) into
    /// `out`, oldest first, and returns how many. Records overwritten while
    /// being copied are skipped, never returned torn.
    pub fn snapshot(&self, out: &mut [TraceRecord]) -> usize {
        // SYNC POINT with the Release store of `head` in `TraceWriter::record`.
        let head = self.head.load(Ordering::Acquire);
        let want = out.len().min(self.capacity()).min(head);
        let mut got = 0;
        for n in head - want..head {
            if let Some(r) = self.read(n) {
                out[got] = r;
                got += 1;
            }
        }
        got
    }

    /// Record number `n`, if it is still in the ring and not being overwritten.
    pub fn read(&self, n: usize) -> Option<TraceRecord> {
        let slots = self.slots.as_ref();
        // SYNC POINT with the Release store of `head` in `TraceWriter::record`.
        let head = self.head.load(Ordering::Acquire);
        if n >= head || head - n > slots.len() {
            return None; // not written yet, or overwritten
        }
        let slot = &slots[n & (slots.len() - 1)];
        let want = done_stamp(n);
        // SYNC POINT with the Release store of the stamp in `TraceWriter::record`.
        if slot.stamp.load(Ordering::Acquire) != want {
            return None;
        }
        let mut words = [0u32; WORDS];
        for (d, s) in words.iter_mut().zip(&slot.words) {
            // SYNC POINT with the Release word stores in `TraceWriter::record`:
            // a word from a newer record brings that record's odd stamp along,
            // so the stamp below shows it.
            *d = s.load(Ordering::Acquire);
        }
        if slot.stamp.load(Ordering::Relaxed) != want {
            return None;
        }
        Some(TraceRecord::from_words(words))
    }
}

impl<const N: usize> TraceRingIn<[TraceSlot; N]> {
    const MASK: usize = {
        assert!(
            N.is_power_of_two(),
            "trace ring capacity must be a power of two"
        );
        N - 1
    };

    /// An empty ring; `const`, so it can be a `static`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        let _ = Self::MASK;
        TraceRingIn {
            slots: [const { TraceSlot::new() }; N],
            head: AtomicUsize::new(0),
            writer: AtomicBool::new(false),
        }
    }

    /// An empty ring.
    #[cfg(loom)]
    pub fn new() -> Self {
        let _ = Self::MASK;
        TraceRingIn {
            slots: core::array::from_fn(|_| TraceSlot::new()),
            head: AtomicUsize::new(0),
            writer: AtomicBool::new(false),
        }
    }
}

#[cfg(not(loom))]
impl<const N: usize> Default for TraceRingIn<[TraceSlot; N]> {
    fn default() -> Self {
        Self::new()
    }
}

/// [`TraceRingBox::new`] was asked for a capacity it cannot have.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityError {
    /// Not a power of two (zero is not one).
    NotPowerOfTwo(usize),
    /// Above [`TraceRingBox::MAX_CAPACITY`].
    TooLarge(usize),
}

#[cfg(feature = "alloc")]
impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPowerOfTwo(n) => {
                write!(f, "trace ring capacity {n} is not a power of two")
            }
            Self::TooLarge(n) => write!(
                f,
                "trace ring capacity {n} is above {}",
                TraceRingBox::MAX_CAPACITY
            ),
        }
    }
}

#[cfg(feature = "alloc")]
impl core::error::Error for CapacityError {}

/// A trace ring whose capacity is chosen at run time (a power of two up to
/// [`TraceRingBox::MAX_CAPACITY`]), its slots allocated once by
/// [`TraceRingBox::new`] ([`RECORD_BYTES`] each). Otherwise a [`TraceRing`]:
/// the same writer, snapshots and reads, none of which allocates.
#[cfg(feature = "alloc")]
pub type TraceRingBox = TraceRingIn<alloc::boxed::Box<[TraceSlot]>>;

#[cfg(feature = "alloc")]
impl TraceRingIn<alloc::boxed::Box<[TraceSlot]>> {
    /// Largest capacity, 2^30 records: a record's stamp tells it from the
    /// records before and after it in its slot while the capacity is below
    /// 2^31.
    pub const MAX_CAPACITY: usize = 1 << 30;

    /// An empty ring of `capacity` records, allocated here.
    ///
    /// # Errors
    ///
    /// [`CapacityError`] when `capacity` is not a power of two or is above
    /// [`TraceRingBox::MAX_CAPACITY`]; nothing is allocated then.
    pub fn new(capacity: usize) -> Result<Self, CapacityError> {
        if !capacity.is_power_of_two() {
            return Err(CapacityError::NotPowerOfTwo(capacity));
        }
        if capacity > Self::MAX_CAPACITY {
            return Err(CapacityError::TooLarge(capacity));
        }
        Ok(TraceRingIn {
            slots: (0..capacity).map(|_| TraceSlot::new()).collect(),
            head: AtomicUsize::new(0),
            writer: AtomicBool::new(false),
        })
    }
}

/// The single writer of a trace ring ([`TraceRingIn::writer`]).
pub struct TraceWriter<'a> {
    ring: Ring<'a>,
    /// The capacity less one.
    mask: usize,
    next: usize,
}

impl fmt::Debug for TraceWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("next", &self.next)
            .finish()
    }
}

impl TraceWriter<'_> {
    /// Appends a record, overwriting the oldest when full. No allocation, no
    /// formatting, no waiting.
    #[inline]
    pub fn record(&mut self, rec: &TraceRecord) {
        let n = self.next;
        let slot = &self.ring.slots[n & self.mask];
        slot.stamp.store(done_stamp(n) | 1, Ordering::Relaxed);
        for (d, s) in slot.words.iter().zip(rec.to_words()) {
            // SYNC POINT with the Acquire word loads in `TraceRingIn::read`: a
            // reader that sees this word also sees the odd stamp before it.
            // Release stores, no fence: plain stores on x86-64.
            d.store(s, Ordering::Release);
        }
        // SYNC POINT with the Acquire stamp load in `TraceRingIn::read`.
        slot.stamp.store(done_stamp(n), Ordering::Release);
        self.next = n.wrapping_add(1);
        // SYNC POINT with the Acquire load of `head` in `TraceRingIn::snapshot`.
        self.ring.head.store(self.next, Ordering::Release);
    }
}

impl Drop for TraceWriter<'_> {
    fn drop(&mut self) {
        self.ring.writer.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod test {
    extern crate std;
    use std::{boxed::Box, thread};

    use super::*;

    fn rec(i: u64) -> TraceRecord {
        TraceRecord {
            seq: i,
            src: 1,
            dst: i as u32,
            len: (i * 3) as u32,
            class: PathClass::Near.to_wire(),
            transport: 2,
            op: 1,
            flags: 0,
            timestamp: i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    #[test]
    fn overwrites_oldest_and_snapshots_in_order() {
        let ring = TraceRing::<8>::new();
        let mut w = ring.writer().unwrap();
        assert!(ring.writer().is_none());
        for i in 0..20 {
            w.record(&rec(i));
        }
        let mut out = [TraceRecord::default(); 16];
        let n = ring.snapshot(&mut out);
        assert_eq!(n, 8);
        for (k, r) in out[..n].iter().enumerate() {
            assert_eq!(*r, rec(12 + k as u64));
        }
        assert_eq!(ring.read(3), None, "overwritten");
        assert_eq!(ring.read(19), Some(rec(19)));
        assert_eq!(ring.read(20), None, "not written yet");
        assert_eq!(ring.read(0x7fff_ffff), None, "far future");
        assert_eq!(ring.read(19 + (1 << 31)), None, "stamp alias of record 19");
        assert_eq!(out[0].path_class(), Some(PathClass::Near));
    }

    /// `shared_layout` is the layout the compiler gives the ring.
    #[test]
    fn the_shared_layout_is_the_rings() {
        let l = shared_layout(8).unwrap();
        assert_eq!(l.size(), core::mem::size_of::<TraceRing<8>>());
        assert_eq!(l.align(), core::mem::align_of::<TraceRing<8>>());
        let l = shared_layout(4096).unwrap();
        assert_eq!(l.size(), core::mem::size_of::<TraceRing<4096>>());
        assert!(shared_layout(usize::MAX / 8).is_none());
    }

    #[test]
    fn concurrent_snapshots_never_torn() {
        let ring = Box::new(TraceRing::<16>::new());
        const COUNT: u64 = if cfg!(miri) { 300 } else { 200_000 };
        thread::scope(|s| {
            let r = &*ring;
            s.spawn(move || {
                let mut w = r.writer().unwrap();
                for i in 0..COUNT {
                    w.record(&rec(i));
                }
            });
            let mut out = [TraceRecord::default(); 16];
            while (r.written() as u64) < COUNT {
                let n = r.snapshot(&mut out);
                for x in &out[..n] {
                    assert_eq!(*x, rec(x.seq), "torn record");
                }
            }
        });
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn a_boxed_ring_keeps_the_newest_capacity_records() {
        let caps: &[usize] = if cfg!(miri) {
            &[1, 2, 64]
        } else {
            &[1, 2, 64, 4096]
        };
        for &cap in caps {
            let ring = TraceRingBox::new(cap).unwrap();
            assert_eq!(ring.capacity(), cap);
            let mut w = ring.writer().unwrap();
            assert!(ring.writer().is_none(), "one writer");
            let total = 3 * cap as u64 + 5;
            for i in 0..total {
                w.record(&rec(i));
            }
            assert_eq!(ring.written() as u64, total);
            let mut out = std::vec![TraceRecord::default(); 2 * cap];
            let n = ring.snapshot(&mut out);
            assert_eq!(n, cap);
            for (k, r) in out[..n].iter().enumerate() {
                assert_eq!(*r, rec(total - cap as u64 + k as u64));
            }
            assert_eq!(ring.read(total as usize - cap - 1), None, "overwritten");
            assert_eq!(ring.read(total as usize), None, "not written yet");
            drop(w);
            assert!(ring.writer().is_some(), "the writer is free again");
        }
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn a_boxed_ring_refuses_impossible_capacities() {
        for cap in [0usize, 3, 48, 4097] {
            assert_eq!(
                TraceRingBox::new(cap).err(),
                Some(CapacityError::NotPowerOfTwo(cap))
            );
        }
        let big = TraceRingBox::MAX_CAPACITY * 2;
        assert_eq!(
            TraceRingBox::new(big).err(),
            Some(CapacityError::TooLarge(big))
        );
        assert_eq!(
            std::format!("{}", CapacityError::NotPowerOfTwo(48)),
            "trace ring capacity 48 is not a power of two"
        );
    }
}
