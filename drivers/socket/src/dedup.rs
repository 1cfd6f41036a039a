//! Receiver-side deduplication by sequence number.
//!
//! Sequences start at 1 per (source PE → this PE) and are shared by every rail.
//! [`DedupWindow`] remembers which were applied: everything up to `base`
//! (contiguous), plus a bit set of the [`WINDOW`] sequences after it (frames
//! may arrive out of order across connections and rails), sequence `s` at bit
//! `s % WINDOW`. Fixed size (512 bytes), no allocation.
//!
//! The bit set is a `bitvec` `BitArray`: the `dedup/*` benches
//! (`benches/benches/collections.rs`) time it beside the hand-written
//! `[u64; 64]` with shifts it replaced, and found it as fast (bitvec/hand
//! 0.92 to 1.00 over check + mark in order, out of order and on duplicates,
//! in runs that alternate the two). Public for those benches; the driver is
//! its only user.

use bitvec::{array::BitArray, order::Lsb0};

/// How far past the contiguous base a sequence may be (also the most frames a
/// sender keeps outstanding per peer).
pub const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;

/// What the window says about one incoming sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not applied yet: apply, then [`DedupWindow::mark`].
    New,
    /// Already applied.
    Duplicate,
    /// Too far ahead (or zero): the sender broke the window, a protocol error.
    OutOfWindow,
}

/// Applied-sequence tracking for one source PE (module docs).
#[derive(Debug, Clone)]
pub struct DedupWindow {
    base: u64,
    /// Bit `s % WINDOW`: sequence `s` (in `base + 1..=base + WINDOW`) applied.
    bits: BitArray<[u64; WORDS], Lsb0>,
}

impl Default for DedupWindow {
    fn default() -> Self {
        DedupWindow::new()
    }
}

impl DedupWindow {
    /// Nothing applied yet.
    pub const fn new() -> DedupWindow {
        DedupWindow {
            base: 0,
            bits: BitArray::ZERO,
        }
    }

    /// Every sequence up to this one is applied (the cumulative ack).
    #[inline]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The bit of `seq` (always below `WINDOW`).
    #[inline]
    fn bit(seq: u64) -> usize {
        (seq % WINDOW) as usize
    }

    /// Classifies `seq`.
    #[inline]
    pub fn check(&self, seq: u64) -> Seen {
        if seq == 0 || seq > self.base.saturating_add(WINDOW) {
            return Seen::OutOfWindow;
        }
        if seq <= self.base {
            return Seen::Duplicate;
        }
        if self.bits[Self::bit(seq)] {
            Seen::Duplicate
        } else {
            Seen::New
        }
    }

    /// Records `seq` (which [`DedupWindow::check`] called new) as applied and
    /// advances the base over the contiguous run, clearing its bits for the
    /// next lap. Marking a sequence that is not new is a caller's bug
    /// (checked in debug builds only).
    #[inline]
    pub fn mark(&mut self, seq: u64) {
        debug_assert_eq!(self.check(seq), Seen::New);
        self.bits.set(Self::bit(seq), true);
        loop {
            let next = Self::bit(self.base + 1);
            if !self.bits[next] {
                break;
            }
            self.bits.set(next, false);
            self.base += 1;
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn in_order_and_duplicates() {
        let mut d = DedupWindow::new();
        assert_eq!(d.check(0), Seen::OutOfWindow);
        for s in 1..=10_000 {
            assert_eq!(d.check(s), Seen::New);
            d.mark(s);
            assert_eq!(d.check(s), Seen::Duplicate);
        }
        assert_eq!(d.base(), 10_000);
        assert_eq!(d.check(10_000 + WINDOW), Seen::New);
        assert_eq!(d.check(10_001 + WINDOW), Seen::OutOfWindow);
    }

    #[test]
    fn out_of_order_within_window() {
        let mut d = DedupWindow::new();
        // Apply 2..=WINDOW first (1 is late), then 1: base jumps.
        for s in (2..=WINDOW).rev() {
            assert_eq!(d.check(s), Seen::New, "{s}");
            d.mark(s);
        }
        assert_eq!(d.base(), 0);
        assert_eq!(d.check(WINDOW), Seen::Duplicate);
        assert_eq!(d.check(WINDOW + 1), Seen::OutOfWindow);
        d.mark(1);
        assert_eq!(d.base(), WINDOW);
        // The bitmap was cleared as the base moved: the next lap is new.
        for s in WINDOW + 1..=2 * WINDOW {
            assert_eq!(d.check(s), Seen::New, "{s}");
        }
    }

    #[test]
    fn random_model() {
        use std::collections::BTreeSet;
        let mut d = DedupWindow::new();
        let mut applied = BTreeSet::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (d.base() as i64 + 1 + (x % (WINDOW + 8)) as i64 - 4).max(0) as u64;
            let want = if s == 0 || s > d.base() + WINDOW {
                Seen::OutOfWindow
            } else if applied.contains(&s) || s <= d.base() {
                Seen::Duplicate
            } else {
                Seen::New
            };
            assert_eq!(d.check(s), want, "seq {s} base {}", d.base());
            if want == Seen::New {
                d.mark(s);
                applied.insert(s);
            }
        }
    }
}
