//! A staging ring: contiguous byte ranges handed out in order and given
//! back in order (as the send queue completes), never overlapping a range
//! the device may still read.
//!
//! Positions are monotonic byte counters; the ring offset of a position is
//! `pos % len`. A range never wraps: when it would, it starts at the next
//! lap and the bytes skipped count as used until the range is released.

/// One staging ring (per QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageRing {
    len: u64,
    head: u64,
    tail: u64,
}

impl StageRing {
    /// An empty ring of `len` bytes (at least 1).
    pub const fn new(len: u64) -> StageRing {
        StageRing {
            len: if len == 0 { 1 } else { len },
            head: 0,
            tail: 0,
        }
    }

    /// Ring size.
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing is in use.
    pub const fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// Position after the last range handed out.
    pub const fn head(&self) -> u64 {
        self.head
    }

    /// Where `n` bytes would go if the head were at `head` (for a dry run
    /// over several ranges): `(start, end)` positions, or `None` when they
    /// do not fit now (or ever: `n` over the ring size).
    pub fn fit(&self, head: u64, n: u64) -> Option<(u64, u64)> {
        if n > self.len {
            return None;
        }
        let pos = head % self.len;
        let start = if pos + n > self.len {
            head + (self.len - pos)
        } else {
            head
        };
        (start + n - self.tail <= self.len).then_some((start, start + n))
    }

    /// Takes `n` bytes: their start position, or `None` when they do not fit.
    pub fn alloc(&mut self, n: u64) -> Option<u64> {
        let (start, end) = self.fit(self.head, n)?;
        self.head = end;
        Some(start)
    }

    /// Takes the range a [`StageRing::fit`] on the current head returned,
    /// up to position `end` (a no-op for an `end` not past the head).
    pub fn commit(&mut self, end: u64) {
        if end > self.head && end - self.tail <= self.len {
            self.head = end;
        }
    }

    /// Ring offset of a position.
    pub const fn offset(&self, pos: u64) -> u64 {
        pos % self.len
    }

    /// Gives back everything before position `end` (in order; never past
    /// the head).
    pub fn release_to(&mut self, end: u64) {
        self.tail = self.tail.max(end.min(self.head));
    }

    /// Gives back everything.
    pub fn release_all(&mut self) {
        self.tail = self.head;
    }

    /// Empty, from position 0 again.
    pub fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
    }
}

#[cfg(test)]
mod test {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn wraps_to_the_next_lap() {
        let mut r = StageRing::new(100);
        assert_eq!(r.alloc(60), Some(0));
        assert_eq!(r.alloc(30), Some(60));
        // 20 would cross the end: it starts at the next lap, which is full.
        assert_eq!(r.alloc(20), None);
        r.release_to(60);
        assert_eq!(r.alloc(20), Some(100));
        assert_eq!(r.offset(100), 0);
        assert_eq!(r.alloc(101), None, "larger than the ring");
        let (start, end) = r.fit(r.head(), 10).unwrap();
        assert_eq!(start, 120);
        r.commit(end);
        assert_eq!(r.head(), 130);
        r.commit(5);
        assert_eq!(r.head(), 130, "never backwards");
        r.release_all();
        assert!(r.is_empty());
        r.reset();
        assert_eq!((r.head(), r.len()), (0, 100));
    }

    proptest! {
        /// Random allocations, released in order: every live range is
        /// contiguous inside the ring and no two live ranges overlap.
        #[test]
        fn live_ranges_never_overlap(len in 1u64..512, ops in proptest::collection::vec((any::<bool>(), 1u64..200), 1..300)) {
            let mut r = StageRing::new(len);
            let mut live: VecDeque<(u64, u64)> = VecDeque::new();
            for (alloc, n) in ops {
                if alloc {
                    if let Some(start) = r.alloc(n) {
                        let off = r.offset(start);
                        prop_assert!(off + n <= len, "contiguous");
                        for &(s, e) in &live {
                            let (o, oe) = (r.offset(s), r.offset(s) + (e - s));
                            prop_assert!(off + n <= o || oe <= off, "overlap {:?} {:?}", (off, off + n), (o, oe));
                        }
                        live.push_back((start, start + n));
                    }
                } else if let Some((_, end)) = live.pop_front() {
                    r.release_to(end);
                }
            }
        }
    }
}
