//! The row layout: how many words a class row and the link bits take
//! ([`class_words`], [`link_words`], [`Footprint`]), the [`Shape`] of a
//! topology, the memory it lives in ([`TopologyMem`], `TopologyBox`) and its
//! checks ([`LayoutError`]); and the 2-bit class codes inside a row.

use core::fmt;

use super::versioned::{ReaderSlot, TopologyControl};
use crate::{
    class::{MAX_TRANSPORTS, PathClass},
    pad::CachePadded,
    sync::atomic::{AtomicUsize, Ordering},
};

// The class row and the link words are bit sets written by hand (shifts and
// masks on `crate::sync` atomics), not `bitvec`:
// * Views over the shared words are ruled out by loom: bitvec's atomic
//   storage (`BitSlice<AtomicUsize>`) exists for `core`'s atomics only, so
//   under `--cfg loom`, where the words are loom's atomics, there is no view of
//   them, and the models in tests/loom.rs must see every access. It is also the
//   slowest reader:
//   `select/bitvec_atomic/4096` took 2.2-2.7x the time of
//   `select/shift_twin/4096` in the same runs.
// * Views over a loaded word (`BitArray::new(w)`) are loom-safe but not
//   faster. Against `select/shift_twin` (the core's shifts in a bench-local
//   select) in the same runs, a select reading the 2-bit class code with
//   `BitField::load_le` took 1.6-2.1x at 4096 PEs and 1.1-1.8x at 1M
//   (`select/bitvec`), reading it as two single bits 0.7-1.2x
//   (`select/bitvec_bits`: 5 instructions more than one shift and mask).
//   Building a row word took 2.9-4.4x with `BitField::store_le`
//   (`topology/fill/bitvec/4096` vs `topology/fill/hand/4096`) and 1.2-1.4x
//   with single-bit sets (`topology/fill/bitvec_bits/4096`).
pub(super) const WORD_BITS: usize = usize::BITS as usize;
/// Peers per class-row word (2 bits each).
pub const PEERS_PER_WORD: usize = WORD_BITS / 2;
/// Every peer unreachable: all row codes 3.
pub(super) const ALL_UNREACHABLE: usize = usize::MAX;

/// Words of one class row for `n_pes` peers.
pub const fn class_words(n_pes: u32) -> usize {
    (n_pes as usize).div_ceil(PEERS_PER_WORD)
}

/// Words of the link bits (health, plus load when `load_hints`) for `n_pes` peers
/// and `n_transports` transports.
pub const fn link_words(n_pes: u32, n_transports: u8, load_hints: bool) -> usize {
    let groups = (n_pes as usize).div_ceil(WORD_BITS);
    let stride = n_transports as usize * if load_hints { 2 } else { 1 };
    groups * stride
}

/// What a topology costs in memory, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// One class row (one version).
    pub class_row: usize,
    /// Health bits for all transports.
    pub health: usize,
    /// Load bits for all transports (0 without load hints).
    pub load: usize,
    /// Reader announcement lines.
    pub readers: usize,
}

impl Footprint {
    /// The footprint of a job of `n_pes` with `n_transports` and `readers` reader slots.
    pub const fn of(n_pes: u32, n_transports: u8, load_hints: bool, readers: usize) -> Footprint {
        let word = core::mem::size_of::<usize>();
        let health = link_words(n_pes, n_transports, false) * word;
        Footprint {
            class_row: class_words(n_pes) * word,
            health,
            load: if load_hints { health } else { 0 },
            readers: readers * core::mem::size_of::<CachePadded<ReaderSlotPlaceholder>>(),
        }
    }

    /// One row: one class row plus health and load bits.
    pub const fn row(&self) -> usize {
        self.class_row + self.health + self.load
    }

    /// Everything a PE holds: two class slots, health and load bits, readers.
    pub const fn total(&self) -> usize {
        2 * self.class_row + self.health + self.load + self.readers
    }
}

// `size_of` of loom atomics is not the real one; the footprint is about real
// builds. A reader slot is well under a cache line, so it pads to one either way.
type ReaderSlotPlaceholder = [usize; 2];

/// The memory a topology lives in wrong-sized for the job it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// `n_pes` is zero.
    NoPes,
    /// The row owner `me` is not below `n_pes`.
    MeOutOfRange {
        /// The row owner.
        me: u32,
        /// The job size.
        n_pes: u32,
    },
    /// `n_transports` is zero or above [`MAX_TRANSPORTS`].
    Transports(u8),
    /// A slice has the wrong number of words.
    WrongSize {
        /// Which slice.
        what: &'static str,
        /// Words it must have.
        expected: usize,
        /// Words it has.
        got: usize,
    },
    /// No reader slots.
    NoReaders,
    /// More than [`MAX_READERS`] reader slots.
    TooManyReaders(usize),
    /// The memory already holds a published topology.
    AlreadyInitialized,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoPes => f.write_str("a job needs at least one PE"),
            Self::MeOutOfRange { me, n_pes } => {
                write!(f, "PE {me} is out of range for a job of {n_pes} PEs")
            }
            Self::Transports(n) => {
                write!(
                    f,
                    "{n} transports configured, expected 1..={MAX_TRANSPORTS}"
                )
            }
            Self::WrongSize {
                what,
                expected,
                got,
            } => {
                write!(f, "{what} has {got} words, expected {expected}")
            }
            Self::NoReaders => f.write_str("at least one reader slot is needed"),
            Self::TooManyReaders(n) => {
                write!(f, "{n} reader slots, at most {MAX_READERS} are supported")
            }
            Self::AlreadyInitialized => f.write_str("the memory already holds a topology"),
        }
    }
}

impl core::error::Error for LayoutError {}

/// Most reader slots a topology may have: a reader's index is the lane of the
/// context ids its selector issues (8 bits).
pub const MAX_READERS: usize = 256;

/// The memory of one PE's topology, borrowed from whoever owns it (a `static`, a
/// shared mapping, or `TopologyBox` with the `alloc` feature).
// Slices, not `heapless` collections: their lengths follow the job size, known
// only at run time, and the memory may be a shared mapping laid out by the
// caller; a `heapless::Vec` fixes its capacity at compile time and owns its
// storage inline.
#[derive(Debug, Clone, Copy)]
pub struct TopologyMem<'a> {
    /// Control words.
    pub control: &'a TopologyControl,
    /// The two class-row slots, [`class_words`] each.
    pub slots: [&'a [AtomicUsize]; 2],
    /// Health (and load) bits, [`link_words`].
    pub links: &'a [AtomicUsize],
    /// One line per reader (selector) that may read concurrently, at most
    /// [`MAX_READERS`].
    pub readers: &'a [CachePadded<ReaderSlot>],
}

/// Shape of a topology: who owns the row, job size, transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The PE whose row this is.
    pub me: u32,
    /// PEs in the job.
    pub n_pes: u32,
    /// Transports with health bits (ids `0..n_transports`).
    pub n_transports: u8,
    /// Whether load bits are kept.
    pub load_hints: bool,
}

pub(super) fn validate(mem: &TopologyMem<'_>, s: &Shape) -> Result<(), LayoutError> {
    if s.n_pes == 0 {
        return Err(LayoutError::NoPes);
    }
    if s.me >= s.n_pes {
        return Err(LayoutError::MeOutOfRange {
            me: s.me,
            n_pes: s.n_pes,
        });
    }
    if s.n_transports == 0 || s.n_transports as usize > MAX_TRANSPORTS {
        return Err(LayoutError::Transports(s.n_transports));
    }
    let cw = class_words(s.n_pes);
    for (what, slot) in [
        ("class slot 0", mem.slots[0]),
        ("class slot 1", mem.slots[1]),
    ] {
        if slot.len() != cw {
            return Err(LayoutError::WrongSize {
                what,
                expected: cw,
                got: slot.len(),
            });
        }
    }
    let lw = link_words(s.n_pes, s.n_transports, s.load_hints);
    if mem.links.len() != lw {
        return Err(LayoutError::WrongSize {
            what: "link bits",
            expected: lw,
            got: mem.links.len(),
        });
    }
    if mem.readers.is_empty() {
        return Err(LayoutError::NoReaders);
    }
    if mem.readers.len() > MAX_READERS {
        return Err(LayoutError::TooManyReaders(mem.readers.len()));
    }
    Ok(())
}

pub(super) fn fill_row(
    row: &[AtomicUsize],
    n_pes: u32,
    class_of: &mut impl FnMut(u32) -> PathClass,
) {
    for (wi, w) in row.iter().enumerate() {
        let mut word = ALL_UNREACHABLE;
        for lane in 0..PEERS_PER_WORD {
            let peer = wi * PEERS_PER_WORD + lane;
            if peer >= n_pes as usize {
                break;
            }
            let code = class_of(peer as u32).row_code();
            word &= !(3 << (lane * 2));
            word |= code << (lane * 2);
        }
        w.store(word, Ordering::Relaxed);
    }
}

#[inline]
pub(super) fn row_code(row: &[AtomicUsize], peer: u32) -> usize {
    let p = peer as usize;
    (row[p / PEERS_PER_WORD].load(Ordering::Relaxed) >> ((p % PEERS_PER_WORD) * 2)) & 3
}

/// Owned storage for a [`Topology`](super::Topology) (feature `alloc`): allocates once, at set-up.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct TopologyBox {
    pub(super) control: alloc::boxed::Box<TopologyControl>,
    pub(super) slots: [alloc::boxed::Box<[AtomicUsize]>; 2],
    pub(super) links: alloc::boxed::Box<[AtomicUsize]>,
    pub(super) readers: alloc::boxed::Box<[CachePadded<ReaderSlot>]>,
}

#[cfg(feature = "alloc")]
impl TopologyBox {
    /// Allocates storage for `shape` with `readers` reader slots.
    pub fn new(shape: Shape, readers: usize) -> Self {
        use alloc::{boxed::Box, vec::Vec};
        let words = |n: usize| -> Box<[AtomicUsize]> {
            (0..n)
                .map(|_| AtomicUsize::new(ALL_UNREACHABLE))
                .collect::<Vec<_>>()
                .into_boxed_slice()
        };
        let cw = class_words(shape.n_pes);
        TopologyBox {
            control: Box::new(TopologyControl::new()),
            slots: [words(cw), words(cw)],
            links: words(link_words(
                shape.n_pes,
                shape.n_transports,
                shape.load_hints,
            )),
            readers: (0..readers)
                .map(|_| CachePadded::new(ReaderSlot::new()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        }
    }

    /// The storage as borrowed slices.
    pub fn mem(&self) -> TopologyMem<'_> {
        TopologyMem {
            control: &self.control,
            slots: [&self.slots[0], &self.slots[1]],
            links: &self.links,
            readers: &self.readers,
        }
    }
}
