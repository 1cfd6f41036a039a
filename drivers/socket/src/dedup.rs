//! Receiver-side deduplication by sequence number.
//!
//! Sequences start at 1 per (source PE → this PE) and are shared by every rail.
//! [`DedupWindow`] remembers which were applied: everything up to `base`
//! (contiguous), plus a bitmap of the [`WINDOW`] sequences after it (frames
//! may arrive out of order across connections and rails). Fixed size, no
//! allocation.
//!
//! Public for the benches (`benches/benches/collections.rs` times it beside
//! a `bitvec` version); the driver is its only user.

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
    bits: [u64; WORDS],
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
            bits: [0; WORDS],
        }
    }

    /// Every sequence up to this one is applied (the cumulative ack).
    #[inline]
    pub fn base(&self) -> u64 {
        self.base
    }

    #[inline]
    fn bit(seq: u64) -> (usize, u64) {
        let i = (seq % WINDOW) as usize;
        (i / 64, 1u64 << (i % 64))
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
        let (w, m) = Self::bit(seq);
        if self.bits[w] & m != 0 {
            Seen::Duplicate
        } else {
            Seen::New
        }
    }

    /// Records `seq` (which [`DedupWindow::check`] called new) as applied and
    /// advances the base over the contiguous run. Marking a sequence that is
    /// not new is a caller's bug (checked in debug builds only).
    #[inline]
    pub fn mark(&mut self, seq: u64) {
        debug_assert_eq!(self.check(seq), Seen::New);
        let (w, m) = Self::bit(seq);
        self.bits[w] |= m;
        loop {
            let (w, m) = Self::bit(self.base + 1);
            if self.bits[w] & m == 0 {
                break;
            }
            self.bits[w] &= !m;
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
