//! The few allocated blocks the C API looked up last, so that checking a
//! range against its block costs a handful of compares instead of a search
//! of the allocator's tree (`Context::block_of`, O(log blocks)).
//!
//! Allocating never changes an existing block, freeing does: `shmem_free`
//! and `shmem_realloc` forget them all ([`Blocks::forget`]).

use core::cell::Cell;

/// How many blocks are remembered (a put to one block and a flag in
/// another, a source and a destination, a pSync and a work array).
const WAYS: usize = 4;

/// A slot holding no block: no range lies inside it.
const EMPTY: (u64, u64) = (u64::MAX, 0);

/// Recently used blocks as `(start, end)` heap offsets, replaced in turn.
pub(super) struct Blocks {
    ways: [Cell<(u64, u64)>; WAYS],
    next: Cell<usize>,
    /// The way that held the last range found: looked at first (a stream
    /// of puts to one block costs one compare pair).
    last: Cell<usize>,
}

impl Blocks {
    /// No block remembered.
    pub(super) const fn new() -> Blocks {
        Blocks {
            ways: [const { Cell::new(EMPTY) }; WAYS],
            next: Cell::new(0),
            last: Cell::new(0),
        }
    }

    /// Whether the bytes `off..end` lie inside one remembered block.
    #[inline(always)]
    pub(super) fn holds(&self, off: u64, end: u64) -> bool {
        let inside = |w: usize| {
            let (s, e) = self.ways[w % WAYS].get();
            (s <= off) & (end <= e)
        };
        inside(self.last.get()) || self.holds_other(off, end)
    }

    /// [`holds`](Self::holds) past the last way found: the rest, in order,
    /// remembering the way that holds the range.
    #[inline(never)]
    fn holds_other(&self, off: u64, end: u64) -> bool {
        let found = self.ways.iter().position(|w| {
            let (s, e) = w.get();
            s <= off && end <= e
        });
        if let Some(w) = found {
            self.last.set(w);
        }
        found.is_some()
    }

    /// Remembers the block of `len` bytes at `start`, in place of the
    /// oldest one.
    pub(super) fn remember(&self, start: u64, len: u64) {
        let i = self.next.get();
        self.ways[i].set((start, start.saturating_add(len)));
        self.next.set((i + 1) % WAYS);
    }

    /// Forgets every block (one was freed).
    pub(super) fn forget(&self) {
        for w in &self.ways {
            w.set(EMPTY);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn holds_only_ranges_inside_one_remembered_block() {
        let b = Blocks::new();
        assert!(!b.holds(0, 0), "an empty cache holds nothing");
        assert!(!b.holds(u64::MAX, u64::MAX));
        b.remember(4096, 128);
        assert!(b.holds(4096, 4096 + 128));
        assert!(b.holds(4100, 4108));
        assert!(b.holds(4096 + 128, 4096 + 128), "an empty range at the end");
        assert!(!b.holds(4096 + 64, 4096 + 129), "runs past the end");
        assert!(!b.holds(4095, 4100), "starts before it");
        b.remember(8192, 64);
        assert!(!b.holds(4096, 8192 + 64), "across two blocks");
        b.forget();
        assert!(!b.holds(4100, 4108));
    }

    #[test]
    fn the_oldest_block_goes_first() {
        let b = Blocks::new();
        for i in 0..=WAYS as u64 {
            b.remember(4096 + i * 64, 64);
        }
        assert!(!b.holds(4096, 4100), "the first one was replaced");
        for i in 1..=WAYS as u64 {
            assert!(b.holds(4096 + i * 64, 4096 + i * 64 + 64));
        }
    }
}
