//! The single row a PE reads: the [`Topology`] handle, the health and load
//! bits per (transport, peer) flipped in place ([`LinkState`]), and the
//! flattened view a select reads. Laying a topology out, its versions, its
//! readers and its writer are in `versioned`.

use super::layout::{Shape, TopologyMem, WORD_BITS, row_code};
use crate::{
    class::TransportId,
    sync::atomic::{AtomicUsize, Ordering},
};

/// Link state of one (transport, peer), as drivers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Connected and usable.
    Up,
    /// Not connected (not yet, or closed in an orderly way).
    Down,
    /// Failed: the driver saw an error and is recovering.
    Error,
}

impl LinkState {
    /// Whether this state makes the health bit set.
    #[inline]
    pub const fn is_usable(self) -> bool {
        matches!(self, LinkState::Up)
    }
}

/// A PE's versioned topology: class rows, health and load bits.
///
/// A cheap `Copy` handle over [`TopologyMem`]; share it between threads freely.
#[derive(Debug, Clone, Copy)]
pub struct Topology<'a> {
    pub(super) mem: TopologyMem<'a>,
    pub(super) shape: Shape,
    pub(super) stride: usize,
}

impl<'a> Topology<'a> {
    /// The shape this topology was laid out with.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    #[inline]
    fn link_bit(&self, t: TransportId, peer: u32, load: bool) -> Option<(&'a AtomicUsize, usize)> {
        if peer >= self.shape.n_pes || t.index() >= self.shape.n_transports as usize {
            return None;
        }
        if load && !self.shape.load_hints {
            return None;
        }
        let p = peer as usize;
        let word = (p / WORD_BITS) * self.stride
            + t.index()
            + if load {
                self.shape.n_transports as usize
            } else {
                0
            };
        Some((&self.mem.links[word], 1usize << (p % WORD_BITS)))
    }

    // One `fetch_or`/`fetch_and` through `crate::sync`, not bitvec's
    // `BitSlice<AtomicUsize>::set_aliased`: loom cannot see bitvec's atomics
    // (see the note in `layout`), and `set_aliased` does not return the
    // previous bit, which `apply_link_state` needs from the same
    // read-modify-write. Speed does not decide it: `topology/health_flip/bitvec`
    // took 0.87-1.12x the time of `topology/health_flip/atomic_rmw` in the same
    // runs (both one locked instruction per flip).
    /// Sets or clears the health bit of (`t`, `peer`) with one atomic
    /// read-modify-write and returns the previous value (`None` when `t` or `peer`
    /// is out of range). No version swap: selects on every thread see it as soon
    /// as the cache line reaches them (at once on this thread; on others by the
    /// next select after any synchronisation with this one).
    #[inline]
    pub fn set_health(&self, t: TransportId, peer: u32, up: bool) -> Option<bool> {
        let (w, bit) = self.link_bit(t, peer, false)?;
        let prev = if up {
            w.fetch_or(bit, Ordering::Relaxed)
        } else {
            w.fetch_and(!bit, Ordering::Relaxed)
        };
        Some(prev & bit != 0)
    }

    /// Applies a driver's link state to the health bit and says whether it was a
    /// transition (the only thing worth broadcasting): `Some(true)` when the bit
    /// changed, `Some(false)` when it did not, `None` when out of range.
    #[inline]
    pub fn apply_link_state(&self, t: TransportId, peer: u32, state: LinkState) -> Option<bool> {
        let up = state.is_usable();
        self.set_health(t, peer, up).map(|prev| prev != up)
    }

    /// Whether (`t`, `peer`) is usable now.
    #[inline]
    pub fn is_healthy(&self, t: TransportId, peer: u32) -> bool {
        self.link_bit(t, peer, false)
            .is_some_and(|(w, bit)| w.load(Ordering::Relaxed) & bit != 0)
    }

    /// Sets the load hint of (`t`, `peer`): whether that transport's queue toward
    /// the peer is over its watermark (see
    /// [`LoadWatermark::exceeded`](crate::route::LoadWatermark::exceeded)). Reads
    /// first and writes only on change, so a driver can call it on every progress
    /// step without bouncing the cache line. Returns the previous value, `None`
    /// when out of range or when load hints are off.
    #[inline]
    pub fn set_overloaded(&self, t: TransportId, peer: u32, over: bool) -> Option<bool> {
        let (w, bit) = self.link_bit(t, peer, true)?;
        if (w.load(Ordering::Relaxed) & bit != 0) == over {
            // Already so: no write to the shared line.
            return Some(over);
        }
        // The read-modify-write's own old value: of two threads flipping
        // the bit the same way at once, exactly one sees it flip.
        let old = if over {
            w.fetch_or(bit, Ordering::Relaxed)
        } else {
            w.fetch_and(!bit, Ordering::Relaxed)
        };
        Some(old & bit != 0)
    }

    /// Whether (`t`, `peer`) is over its load watermark.
    #[inline]
    pub fn is_overloaded(&self, t: TransportId, peer: u32) -> bool {
        self.link_bit(t, peer, true)
            .is_some_and(|(w, bit)| w.load(Ordering::Relaxed) & bit != 0)
    }

    /// The flattened view of the version whose `current` word is `current`
    /// (its class slot is `current & 1`). Only a reader announced in that
    /// version may read through it.
    #[inline]
    pub(crate) fn row_view(&self, current: usize) -> RowView<'a> {
        RowView {
            row: self.mem.slots[current & 1],
            links: self.mem.links,
            stride: self.stride,
            n_transports: self.shape.n_transports as usize,
            load_hints: self.shape.load_hints,
            me: self.shape.me,
            n_pes: self.shape.n_pes,
        }
    }
}

/// A pinned version's data with every indirection resolved, so that a select
/// reads the class word and the link words straight away.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowView<'a> {
    pub(super) row: &'a [AtomicUsize],
    pub(super) links: &'a [AtomicUsize],
    pub(super) stride: usize,
    pub(super) n_transports: usize,
    pub(super) load_hints: bool,
    pub(crate) me: u32,
    pub(crate) n_pes: u32,
}

impl RowView<'_> {
    /// The class of `peer` as a
    /// [`PathClass::index`](crate::class::PathClass::index) (0 `Local` … 4
    /// `Unreachable`), without branching on the row content; `None` when
    /// `peer` is out of range.
    #[inline(always)]
    pub(crate) fn class_index(&self, peer: u32) -> Option<usize> {
        if peer >= self.n_pes {
            return None;
        }
        let code = row_code(self.row, peer) + 1;
        Some(if peer == self.me { 0 } else { code })
    }

    /// `peer`'s transports as two masks (bit `t` for transport `t`): usable now
    /// (health bit set) and over the load watermark (0 without load hints).
    /// `peer` must be in range.
    #[inline(always)]
    pub(crate) fn link_masks(&self, peer: u32) -> (usize, usize) {
        let p = peer as usize;
        let start = (p / WORD_BITS) * self.stride;
        let bit = p % WORD_BITS;
        let n = self.n_transports;
        let Some(words) = self.links.get(start..start + self.stride) else {
            return (0, 0);
        };
        let healthy = gather(&words[..n], bit);
        let over = if self.load_hints {
            gather(&words[n..], bit)
        } else {
            0
        };
        (healthy, over)
    }

    /// Whether transport index `t` is usable toward `peer` now: its health
    /// bit set and (with load hints) its load bit clear. Two loads; `false`
    /// for a `t` outside the job's transports. `peer` must be in range.
    #[inline(always)]
    pub(crate) fn usable(&self, peer: u32, t: usize) -> bool {
        let p = peer as usize;
        let start = (p / WORD_BITS) * self.stride;
        let bit = p % WORD_BITS;
        if t >= self.n_transports {
            return false;
        }
        let Some(h) = self.links.get(start + t) else {
            return false;
        };
        let healthy = h.load(Ordering::Relaxed) >> bit & 1 != 0;
        if !self.load_hints {
            return healthy;
        }
        let over = self
            .links
            .get(start + self.n_transports + t)
            .is_some_and(|o| o.load(Ordering::Relaxed) >> bit & 1 != 0);
        healthy && !over
    }
}

/// Where the bits of one (transport, peer) are in the link words: the
/// index of its health word, that of its load word ([`LinkAt::NO_WORD`]
/// without load hints), and the peer's bit in both. Made by
/// [`RowView::link_at`]; the link words are the same in every version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkAt {
    health: usize,
    over: usize,
    bit: u32,
}

impl LinkAt {
    /// The index of no word (reads as a clear bit).
    const NO_WORD: usize = usize::MAX;

    /// Points nowhere: never usable.
    pub(crate) const NONE: LinkAt = LinkAt {
        health: LinkAt::NO_WORD,
        over: LinkAt::NO_WORD,
        bit: 0,
    };
}

impl RowView<'_> {
    /// Where transport index `t`'s bits toward `peer` are, `None` when
    /// either is out of range.
    #[inline]
    pub(crate) fn link_at(&self, peer: u32, t: usize) -> Option<LinkAt> {
        if peer >= self.n_pes || t >= self.n_transports {
            return None;
        }
        let p = peer as usize;
        let start = (p / WORD_BITS) * self.stride;
        let health = start + t;
        let over = if self.load_hints {
            start + self.n_transports + t
        } else {
            LinkAt::NO_WORD
        };
        (health < self.links.len() && (over == LinkAt::NO_WORD || over < self.links.len()))
            .then_some(LinkAt {
                health,
                over,
                bit: (p % WORD_BITS) as u32,
            })
    }

    /// [`RowView::usable`] of the transport and peer `at` locates: its
    /// health bit set and its load bit clear (two loads at most, no index
    /// arithmetic).
    #[inline(always)]
    pub(crate) fn usable_at(&self, at: &LinkAt) -> bool {
        let bit = |i: usize| {
            self.links
                .get(i)
                .is_some_and(|w| w.load(Ordering::Relaxed) >> at.bit & 1 != 0)
        };
        bit(at.health) && !bit(at.over)
    }
}

/// Bit `bit` of each word, as a mask (bit `i` from word `i`). Unrolled for the
/// usual transport counts; the match is on a per-job constant, so it predicts
/// perfectly.
// A shift, not a bitvec `BitArray` view of the loaded word: the view compiles
// to the same single `bt` instruction (no gain, `select/bitvec_bits` reads
// health this way), and the writers of these bits must stay hand-written
// atomics (`Topology::set_health`), so the layout keeps one notation.
#[inline(always)]
fn gather(words: &[AtomicUsize], bit: usize) -> usize {
    let b = |w: &AtomicUsize, i: usize| ((w.load(Ordering::Relaxed) >> bit) & 1) << i;
    match words {
        [a] => b(a, 0),
        [a, c] => b(a, 0) | b(c, 1),
        [a, c, d] => b(a, 0) | b(c, 1) | b(d, 2),
        [a, c, d, e] => b(a, 0) | b(c, 1) | b(d, 2) | b(e, 3),
        // Shared memory, verbs and up to four TCP rails (the library's
        // six): unrolled too, a loop costs twice as many instructions.
        [a, c, d, e, f] => b(a, 0) | b(c, 1) | b(d, 2) | b(e, 3) | b(f, 4),
        [a, c, d, e, f, g] => b(a, 0) | b(c, 1) | b(d, 2) | b(e, 3) | b(f, 4) | b(g, 5),
        _ => words.iter().enumerate().fold(0, |m, (i, w)| m | b(w, i)),
    }
}
