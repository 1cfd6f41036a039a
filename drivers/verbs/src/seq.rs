//! Exactly-once settlement of operations by sequence number.
//!
//! Every put, get and atomic the driver issues toward a peer takes the next
//! sequence number of that peer. An operation is *settled* once: completed
//! by the device, handed to the fallback transport for replay, or failed back
//! to the caller. When a QP fails, the same operation can be seen again (a
//! flush completion after it was handed over, a second error on another QP of
//! the peer, an async event after the completion error); [`SettleWindow`]
//! makes the second sighting a no-op, so nothing is replayed or reported
//! twice. Fixed size, no allocation (like the TCP driver's dedup window).

/// How far past the oldest unsettled sequence a sequence may be (also the
/// most operations the driver keeps in flight per peer).
pub const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;

/// What [`SettleWindow::settle`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// First settlement: act on it.
    New,
    /// Already settled: ignore.
    Duplicate,
    /// Zero, or too far ahead of the window: a driver bug or a corrupt id.
    OutOfWindow,
}

/// Settled-sequence tracking for one peer (sequences start at 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleWindow {
    /// Every sequence up to and including `base` is settled.
    base: u64,
    /// Bit `i`: sequence `base + 1 + i` is settled.
    bits: [u64; WORDS],
}

impl Default for SettleWindow {
    fn default() -> Self {
        SettleWindow::new()
    }
}

impl SettleWindow {
    /// Nothing settled yet.
    pub const fn new() -> SettleWindow {
        SettleWindow {
            base: 0,
            bits: [0; WORDS],
        }
    }

    /// Every sequence up to this one is settled.
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// Whether a new sequence `seq` may be issued (it is within the window).
    pub const fn can_issue(&self, seq: u64) -> bool {
        seq > self.base && seq - self.base <= WINDOW
    }

    /// Whether `seq` is settled.
    pub fn is_settled(&self, seq: u64) -> bool {
        if seq <= self.base {
            return seq != 0;
        }
        let i = seq - self.base - 1;
        i < WINDOW && self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Settles `seq` if it was not.
    pub fn settle(&mut self, seq: u64) -> Settle {
        if seq == 0 || seq > self.base + WINDOW {
            return Settle::OutOfWindow;
        }
        if seq <= self.base {
            return Settle::Duplicate;
        }
        let i = seq - self.base - 1;
        let (w, b) = ((i / 64) as usize, i % 64);
        if self.bits[w] & (1 << b) != 0 {
            return Settle::Duplicate;
        }
        self.bits[w] |= 1 << b;
        // Advance the base over the settled prefix.
        let mut shift = 0u64;
        while shift < WINDOW && self.bits[(shift / 64) as usize] & (1 << (shift % 64)) != 0 {
            shift += 1;
        }
        if shift > 0 {
            self.shift(shift);
        }
        Settle::New
    }

    fn shift(&mut self, n: u64) {
        self.base += n;
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        for i in 0..WORDS {
            let lo = self.bits.get(i + words).copied().unwrap_or(0);
            let hi = self.bits.get(i + words + 1).copied().unwrap_or(0);
            self.bits[i] = if bits == 0 {
                lo
            } else {
                (lo >> bits) | (hi << (64 - bits))
            };
        }
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn settles_once() {
        let mut w = SettleWindow::new();
        assert_eq!(w.settle(0), Settle::OutOfWindow);
        assert_eq!(w.settle(2), Settle::New);
        assert_eq!(w.base(), 0);
        assert_eq!(w.settle(2), Settle::Duplicate);
        assert_eq!(w.settle(1), Settle::New);
        assert_eq!(w.base(), 2);
        assert_eq!(w.settle(1), Settle::Duplicate);
        assert!(w.is_settled(2) && !w.is_settled(3) && !w.is_settled(0));
        assert_eq!(w.settle(2 + WINDOW + 1), Settle::OutOfWindow);
        assert!(w.can_issue(2 + WINDOW) && !w.can_issue(3 + WINDOW));
        assert_eq!(w.settle(2 + WINDOW), Settle::New);
    }

    proptest! {
        /// Against a set model: each sequence is New exactly once, whatever
        /// the order and repetitions.
        #[test]
        fn matches_a_set(seqs in proptest::collection::vec(1u64..300, 0..600)) {
            let mut w = SettleWindow::new();
            let mut seen = std::collections::HashSet::new();
            for s in seqs {
                let r = w.settle(s);
                let expect = if seen.insert(s) { Settle::New } else { Settle::Duplicate };
                prop_assert_eq!(r, expect);
                prop_assert!(w.is_settled(s));
            }
            let mut b = 0;
            while seen.contains(&(b + 1)) { b += 1; }
            prop_assert_eq!(w.base(), b);
        }
    }
}
