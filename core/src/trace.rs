//! The route trace ring: fixed-size binary records of routing decisions,
//! overwriting the oldest, written by one writer without formatting and read by
//! any number of snapshot readers.
//!
//! Each slot is a small seqlock: the writer marks the slot odd, writes the
//! record's words, and marks it with the record's even stamp; a reader copies
//! the words between two stamp reads and keeps the copy only if both match the
//! record it wanted. Words are `AtomicU32` (no `AtomicU64` needed, so it builds
//! for 32-bit targets) and reads never block the writer.

use core::fmt;

use crate::{
    class::PathClass,
    sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence},
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
    /// [`TraceRecord::CPU_ATOMIC`], [`TraceRecord::ORDERED`].
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
    /// `transport` value of a failed decision.
    pub const NO_TRANSPORT: u8 = 0xFF;

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

struct Slot {
    stamp: AtomicU32,
    words: [AtomicU32; WORDS],
}

impl Slot {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Slot {
            stamp: AtomicU32::new(0),
            words: [const { AtomicU32::new(0) }; WORDS],
        }
    }
    #[cfg(loom)]
    fn new() -> Self {
        Slot {
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

/// A trace ring of `N` records (`N` a power of two).
// Not `heapless::HistoryBuf`, which keeps the newest `N` the same way but
// writes through `&mut self` into plain memory: here snapshot readers on other
// threads copy records while the writer records, through `crate::sync` atomics
// that the loom model `trace_snapshots_are_never_torn` (tests/loom.rs) checks.
pub struct TraceRing<const N: usize> {
    slots: [Slot; N],
    /// Records written so far.
    head: AtomicUsize,
    writer: AtomicBool,
}

impl<const N: usize> fmt::Debug for TraceRing<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceRing")
            .field("capacity", &N)
            .field("written", &self.head.load(Ordering::Relaxed))
            .finish()
    }
}

impl<const N: usize> TraceRing<N> {
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
        TraceRing {
            slots: [const { Slot::new() }; N],
            head: AtomicUsize::new(0),
            writer: AtomicBool::new(false),
        }
    }

    /// An empty ring.
    #[cfg(loom)]
    pub fn new() -> Self {
        let _ = Self::MASK;
        TraceRing {
            slots: core::array::from_fn(|_| Slot::new()),
            head: AtomicUsize::new(0),
            writer: AtomicBool::new(false),
        }
    }

    /// Claims the single writer, or `None` while another exists.
    pub fn writer(&self) -> Option<TraceWriter<'_, N>> {
        self.writer
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TraceWriter {
                ring: self,
                next: self.head.load(Ordering::Relaxed),
            })
    }

    /// Records written since creation (including overwritten ones).
    pub fn written(&self) -> usize {
        self.head.load(Ordering::Acquire)
    }

    /// Copies the newest records (up to `out.len()` and `N`) into `out`, oldest
    /// first, and returns how many. Records overwritten while being copied are
    /// skipped, never returned torn.
    pub fn snapshot(&self, out: &mut [TraceRecord]) -> usize {
        // SYNC POINT with the Release store of `head` in `TraceWriter::record`.
        let head = self.head.load(Ordering::Acquire);
        let want = out.len().min(N).min(head);
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
        // SYNC POINT with the Release store of `head` in `TraceWriter::record`.
        let head = self.head.load(Ordering::Acquire);
        if n >= head || head - n > N {
            return None; // not written yet, or overwritten
        }
        let slot = &self.slots[n & Self::MASK];
        let want = done_stamp(n);
        // SYNC POINT with the Release store of the stamp in `TraceWriter::record`.
        if slot.stamp.load(Ordering::Acquire) != want {
            return None;
        }
        let mut words = [0u32; WORDS];
        for (d, s) in words.iter_mut().zip(&slot.words) {
            *d = s.load(Ordering::Relaxed);
        }
        // SYNC POINT with the Release fence in `TraceWriter::record`: if any word
        // read above came from a newer write, the stamp below shows it.
        fence(Ordering::Acquire);
        if slot.stamp.load(Ordering::Relaxed) != want {
            return None;
        }
        Some(TraceRecord::from_words(words))
    }
}

#[cfg(not(loom))]
impl<const N: usize> Default for TraceRing<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The single writer of a [`TraceRing`].
pub struct TraceWriter<'a, const N: usize> {
    ring: &'a TraceRing<N>,
    next: usize,
}

impl<const N: usize> fmt::Debug for TraceWriter<'_, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("next", &self.next)
            .finish()
    }
}

impl<const N: usize> TraceWriter<'_, N> {
    /// Appends a record, overwriting the oldest when full. No allocation, no
    /// formatting, no waiting.
    #[inline]
    pub fn record(&mut self, rec: &TraceRecord) {
        let n = self.next;
        let slot = &self.ring.slots[n & TraceRing::<N>::MASK];
        slot.stamp.store(done_stamp(n) | 1, Ordering::Relaxed);
        // SYNC POINT with the Acquire fence in `TraceRing::read`: the odd stamp is
        // visible before any of the new words.
        fence(Ordering::Release);
        for (d, s) in slot.words.iter().zip(rec.to_words()) {
            d.store(s, Ordering::Relaxed);
        }
        // SYNC POINT with the Acquire stamp load in `TraceRing::read`.
        slot.stamp.store(done_stamp(n), Ordering::Release);
        self.next = n.wrapping_add(1);
        // SYNC POINT with the Acquire load of `head` in `TraceRing::snapshot`.
        self.ring.head.store(self.next, Ordering::Release);
    }
}

impl<const N: usize> Drop for TraceWriter<'_, N> {
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
}
