//! A PE's topology row, its health and load bits, and the versioned (double
//! buffered) class rows.
//!
//! # Layout
//!
//! * **Class row**: 2 bits per peer ([`PathClass::row_code`]), `usize::BITS / 2`
//!   peers per word. A lookup is one load, a shift and a mask. The row owner's own
//!   index reads as [`PathClass::Local`].
//! * **Link bits**: one *health* bit per (transport, peer), "usable now", and
//!   optionally one *load* bit per (transport, peer), "over its load watermark".
//!   They are grouped per `usize::BITS` peers, and inside a group the words of every
//!   transport sit side by side (`[health t0, …, health tN, load t0, …, load tN]`),
//!   so a route decision reads one class word and one short run of adjacent words.
//!   Health and load are not versioned: flipping one is a single atomic
//!   read-modify-write, seen by the next select on any thread, with no version swap.
//! * **Versioned class rows**: two slots. A writer copies the published slot into
//!   the other one, edits it, and publishes it with one atomic store of
//!   `(version << 1) | slot`. It may start the next update only after every reader
//!   has left the older slot: each reader announces the version it entered on its
//!   own cache line. Readers never wait, never retry and never take a lock; a
//!   writer that finds a reader still on the old slot gets
//!   [`UpdateError::ReadersOnOldVersion`] and tries again later (updates are driven
//!   by link-state transitions and coalesced by the caller).
//!
//! # Memory
//!
//! For 1,000,000 PEs and 3 transports: a class row is 250,000 B, the health bits
//! 375,000 B, the load bits 375,000 B. One row with health and load bits is
//! 1,000,000 B (0.95 MiB); the versioned topology (two class slots) with health bits
//! is 875,000 B (0.83 MiB), with load bits too 1,250,000 B.
//! [`Footprint`] computes these figures for any job.

use core::fmt;

use crate::{
    class::{InterSwitch, Locality, MAX_TRANSPORTS, PathClass, TransportId, class_between},
    pad::CachePadded,
    sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence},
};

const WORD_BITS: usize = usize::BITS as usize;
/// Peers per class-row word (2 bits each).
pub const PEERS_PER_WORD: usize = WORD_BITS / 2;
/// Every peer unreachable: all row codes 3.
const ALL_UNREACHABLE: usize = usize::MAX;

/// Reader announcement: slot not claimed by any selector.
const READER_FREE: usize = 0;
/// Reader announcement: claimed, not inside a read.
const READER_IDLE: usize = 1;
// Pinned readers store the `current` word they entered with, which is always >= 2
// because versions start at 1.

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

/// Shared control words of a versioned topology.
#[derive(Debug)]
pub struct TopologyControl {
    /// `(version << 1) | slot` of the published class row.
    current: CachePadded<AtomicUsize>,
    /// Set while a [`TopologyWriter`] exists.
    writer: AtomicBool,
}

impl TopologyControl {
    /// Fresh control words.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            current: CachePadded::new(AtomicUsize::new(0)),
            writer: AtomicBool::new(false),
        }
    }

    /// Fresh control words.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            current: CachePadded::new(AtomicUsize::new(0)),
            writer: AtomicBool::new(false),
        }
    }
}

impl Default for TopologyControl {
    fn default() -> Self {
        Self::new()
    }
}

/// One reader's line: what it announces to the writer, and the context-id
/// counter of the selector using it, kept across selectors so that a PE never
/// issues the same context id twice.
#[derive(Debug)]
pub struct ReaderSlot {
    /// `READER_FREE`, `READER_IDLE`, or the `current` word the reader entered.
    announce: AtomicUsize,
    /// Next context-id counter, low and high halves (32-bit atomics only, so
    /// the core builds for targets without `AtomicU64`).
    seq_lo: AtomicU32,
    seq_hi: AtomicU32,
}

impl ReaderSlot {
    /// A free slot.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        ReaderSlot {
            announce: AtomicUsize::new(READER_FREE),
            seq_lo: AtomicU32::new(0),
            seq_hi: AtomicU32::new(0),
        }
    }

    /// A free slot.
    #[cfg(loom)]
    pub fn new() -> Self {
        ReaderSlot {
            announce: AtomicUsize::new(READER_FREE),
            seq_lo: AtomicU32::new(0),
            seq_hi: AtomicU32::new(0),
        }
    }
}

impl Default for ReaderSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// Most reader slots a topology may have: a reader's index is the lane of the
/// context ids its selector issues (8 bits).
pub const MAX_READERS: usize = 256;

/// The memory of one PE's topology, borrowed from whoever owns it (a `static`, a
/// shared mapping, or `TopologyBox` with the `alloc` feature).
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

/// A PE's versioned topology: class rows, health and load bits.
///
/// A cheap `Copy` handle over [`TopologyMem`]; share it between threads freely.
#[derive(Debug, Clone, Copy)]
pub struct Topology<'a> {
    mem: TopologyMem<'a>,
    shape: Shape,
    stride: usize,
}

impl<'a> Topology<'a> {
    /// Lays a topology over fresh `mem`: class slot 0 gets `class_of(peer)` for
    /// every peer (the owner's own entry is `Local` whatever it says), every
    /// health and load bit is cleared, and version 1 is published. Once only:
    /// further handles to the same memory are copies of the returned one.
    ///
    /// # Errors
    /// [`LayoutError`] when a slice does not match `shape`, or
    /// [`LayoutError::AlreadyInitialized`] when `mem` already holds a topology
    /// (laying it again would pull it from under its readers).
    pub fn new(
        mem: TopologyMem<'a>,
        shape: Shape,
        mut class_of: impl FnMut(u32) -> PathClass,
    ) -> Result<Self, LayoutError> {
        validate(&mem, &shape)?;
        if mem.control.current.load(Ordering::Acquire) != 0 {
            return Err(LayoutError::AlreadyInitialized);
        }
        let stride = shape.n_transports as usize * if shape.load_hints { 2 } else { 1 };
        let topo = Topology { mem, shape, stride };
        fill_row(mem.slots[0], shape.n_pes, &mut class_of);
        for w in mem.links {
            w.store(0, Ordering::Relaxed);
        }
        for r in mem.readers {
            r.announce.store(READER_FREE, Ordering::Relaxed);
            r.seq_lo.store(0, Ordering::Relaxed);
            r.seq_hi.store(0, Ordering::Relaxed);
        }
        // SYNC POINT with the Acquire loads of `current` in `Selector::pin` and
        // `TopologyWriter::try_update`: the row written above is visible to them.
        mem.control.current.store(1 << 1, Ordering::Release);
        Ok(topo)
    }

    /// The shape this topology was laid out with.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The published version.
    pub fn version(&self) -> u32 {
        (self.mem.control.current.load(Ordering::Acquire) >> 1) as u32
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
        let prev = w.load(Ordering::Relaxed) & bit != 0;
        if prev != over {
            if over {
                w.fetch_or(bit, Ordering::Relaxed);
            } else {
                w.fetch_and(!bit, Ordering::Relaxed);
            }
        }
        Some(prev)
    }

    /// Whether (`t`, `peer`) is over its load watermark.
    #[inline]
    pub fn is_overloaded(&self, t: TransportId, peer: u32) -> bool {
        self.link_bit(t, peer, true)
            .is_some_and(|(w, bit)| w.load(Ordering::Relaxed) & bit != 0)
    }

    /// Claims the single writer, or `None` while another writer exists.
    pub fn writer(&self) -> Option<TopologyWriter<'a>> {
        self.mem
            .control
            .writer
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TopologyWriter { topo: *self })
    }

    /// Claims a free reader slot, or `None` when all are taken.
    pub fn reader(&self) -> Option<Reader<'a>> {
        self.mem.readers.iter().enumerate().find_map(|(i, r)| {
            r.announce
                .compare_exchange(
                    READER_FREE,
                    READER_IDLE,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .ok()
                .map(|_| Reader {
                    topo: *self,
                    index: i,
                    held: READER_IDLE,
                })
        })
    }
}

fn validate(mem: &TopologyMem<'_>, s: &Shape) -> Result<(), LayoutError> {
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

fn fill_row(row: &[AtomicUsize], n_pes: u32, class_of: &mut impl FnMut(u32) -> PathClass) {
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
fn row_code(row: &[AtomicUsize], peer: u32) -> usize {
    let p = peer as usize;
    (row[p / PEERS_PER_WORD].load(Ordering::Relaxed) >> ((p % PEERS_PER_WORD) * 2)) & 3
}

/// A claimed reader slot. Each thread that selects routes holds one (through
/// [`Selector`](crate::route::Selector)); [`pin`](Reader::pin) takes `&mut self`,
/// so one reader is never inside two versions at once.
#[derive(Debug)]
pub struct Reader<'a> {
    topo: Topology<'a>,
    index: usize,
    /// The `current` word a sticky pin left announced, or `READER_IDLE`.
    held: usize,
}

impl<'a> Reader<'a> {
    /// The topology this reader reads.
    #[inline]
    pub fn topology(&self) -> &Topology<'a> {
        &self.topo
    }

    /// This reader's slot index, unique among the live readers (below
    /// [`MAX_READERS`]).
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The context-id counter saved in this slot by the last selector that used it.
    pub fn saved_counter(&self) -> u64 {
        let r = &self.topo.mem.readers[self.index];
        u64::from(r.seq_lo.load(Ordering::Relaxed))
            | u64::from(r.seq_hi.load(Ordering::Relaxed)) << 32
    }

    /// Saves the context-id counter in this slot for the next selector that
    /// claims it (the slot's release and claim order it with that selector).
    pub fn save_counter(&self, counter: u64) {
        let r = &self.topo.mem.readers[self.index];
        r.seq_lo.store(counter as u32, Ordering::Relaxed);
        r.seq_hi.store((counter >> 32) as u32, Ordering::Relaxed);
    }

    /// Enters the published version and *stays* announced in it after the
    /// guard drops, so the next sticky pin of the same version costs one
    /// Acquire load and a compare: no store, no fence. A newer published
    /// version is still seen at the next pin (it re-announces then, with the
    /// full protocol of [`pin`](Self::pin)).
    ///
    /// While held, the writer cannot start an update that would reuse the
    /// held slot ([`TopologyWriter::try_update`] returns
    /// [`UpdateError::ReadersOnOldVersion`] once a second version has been
    /// published): call [`unpin`](Self::unpin) before going idle or before
    /// this thread itself updates the topology.
    #[inline]
    pub fn pin_sticky(&mut self) -> Pinned<'_, 'a> {
        // SYNC POINT with the Release store in `Update::publish`: the row of the
        // version loaded here is completely written.
        let now = self.topo.mem.control.current.load(Ordering::Acquire);
        if now == self.held && now != READER_IDLE {
            // Still announced in `now` since the fenced pin that announced it:
            // the writer's scan sees the announcement and never writes this slot.
            return Pinned {
                reader: self,
                current: now,
                sticky: true,
            };
        }
        let current = self.announce();
        self.held = current;
        Pinned {
            reader: self,
            current,
            sticky: true,
        }
    }

    /// Leaves the version a [`pin_sticky`](Self::pin_sticky) held (no-op when
    /// none is held).
    #[inline]
    pub fn unpin(&mut self) {
        if self.held != READER_IDLE {
            // SYNC POINT with the Acquire fence in `TopologyWriter::try_update`:
            // our reads of the held slot happen before the writer's next writes.
            self.topo.mem.readers[self.index]
                .announce
                .store(READER_IDLE, Ordering::Release);
            self.held = READER_IDLE;
        }
    }

    /// Announces the published version (the Dekker half of the protocol) and
    /// returns the `current` word now announced.
    #[inline]
    fn announce(&self) -> usize {
        let ann = &self.topo.mem.readers[self.index].announce;
        let control = &self.topo.mem.control.current;
        let seen = control.load(Ordering::Relaxed);
        // Release: if the writer's scan reads this announcement, our reads made
        // under the previous pin happen before its writes (a plain store would
        // not continue the release sequence of the IDLE store in `Pinned::drop`).
        ann.store(seen, Ordering::Release);
        // SYNC POINT with the SeqCst fence in `TopologyWriter::try_update`: either
        // the writer's scan sees this announcement, or the load below sees the
        // writer's latest publish (Dekker pattern, both sides fenced).
        fence(Ordering::SeqCst);
        // SYNC POINT with the Release store in `Update::publish`: the row of the
        // version loaded here is completely written.
        let now = control.load(Ordering::Acquire);
        if now != seen {
            // Announce what we actually read so the writer is not held back by an
            // older version than necessary (either value is safe).
            ann.store(now, Ordering::Release);
        }
        now
    }

    /// Enters the published version. Wait-free: one store, one fence, one or two
    /// loads. The returned guard may be held across many lookups; the writer cannot
    /// reuse its slot until the guard is dropped, so hold it for a batch, not
    /// forever.
    #[inline]
    pub fn pin(&mut self) -> Pinned<'_, 'a> {
        // A held sticky announcement is replaced by this one (and dropped to
        // idle with the guard).
        self.held = READER_IDLE;
        let current = self.announce();
        Pinned {
            reader: self,
            current,
            sticky: false,
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.topo.mem.readers[self.index]
            .announce
            .store(READER_FREE, Ordering::Release);
    }
}

/// A reader inside one published version: lookups see that version's row, whole.
#[derive(Debug)]
pub struct Pinned<'r, 'a> {
    reader: &'r Reader<'a>,
    current: usize,
    /// Made by [`Reader::pin_sticky`]: the announcement outlives the guard.
    sticky: bool,
}

impl<'a> Pinned<'_, 'a> {
    /// The version this guard reads.
    #[inline]
    pub fn version(&self) -> u32 {
        (self.current >> 1) as u32
    }

    #[inline]
    pub(crate) fn row(&self) -> &'a [AtomicUsize] {
        self.reader.topo.mem.slots[self.current & 1]
    }

    /// The class of `peer` in this version, `None` when `peer` is out of range.
    #[inline]
    pub fn class(&self, peer: u32) -> Option<PathClass> {
        let s = self.reader.topo.shape;
        if peer >= s.n_pes {
            None
        } else if peer == s.me {
            Some(PathClass::Local)
        } else {
            Some(PathClass::from_row_code(row_code(self.row(), peer)))
        }
    }

    /// The row, link bits and shape of this version, flattened for the hot path.
    #[inline]
    pub(crate) fn view(&self) -> RowView<'a> {
        let t = &self.reader.topo;
        RowView {
            row: self.row(),
            links: t.mem.links,
            stride: t.stride,
            n_transports: t.shape.n_transports as usize,
            load_hints: t.shape.load_hints,
            me: t.shape.me,
            n_pes: t.shape.n_pes,
        }
    }
}

impl Drop for Pinned<'_, '_> {
    #[inline]
    fn drop(&mut self) {
        if self.sticky {
            return;
        }
        let r = self.reader;
        // SYNC POINT with the Acquire fence in `TopologyWriter::try_update`: our
        // reads of the old slot happen before the writer's next writes to it.
        r.topo.mem.readers[r.index]
            .announce
            .store(READER_IDLE, Ordering::Release);
    }
}

/// A pinned version's data with every indirection resolved, so that a select
/// reads the class word and the link words straight away.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowView<'a> {
    row: &'a [AtomicUsize],
    links: &'a [AtomicUsize],
    stride: usize,
    n_transports: usize,
    load_hints: bool,
    pub(crate) me: u32,
    pub(crate) n_pes: u32,
}

impl RowView<'_> {
    /// The class of `peer` as a [`PathClass::index`] (0 `Local` … 4
    /// `Unreachable`), without branching on the row content; `None` when `peer`
    /// is out of range.
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
}

/// Bit `bit` of each word, as a mask (bit `i` from word `i`). Unrolled for the
/// usual transport counts; the match is on a per-job constant, so it predicts
/// perfectly.
#[inline(always)]
fn gather(words: &[AtomicUsize], bit: usize) -> usize {
    let b = |w: &AtomicUsize, i: usize| ((w.load(Ordering::Relaxed) >> bit) & 1) << i;
    match words {
        [a] => b(a, 0),
        [a, c] => b(a, 0) | b(c, 1),
        [a, c, d] => b(a, 0) | b(c, 1) | b(d, 2),
        [a, c, d, e] => b(a, 0) | b(c, 1) | b(d, 2) | b(e, 3),
        _ => words.iter().enumerate().fold(0, |m, (i, w)| m | b(w, i)),
    }
}

/// Why an update cannot start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateError {
    /// A reader is still inside the version before the published one; its slot is
    /// the one the next update must write. Try again later (coalescing whatever
    /// changes arrive meanwhile).
    ReadersOnOldVersion {
        /// The first reader slot found there.
        reader: usize,
    },
}

impl fmt::Display for UpdateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadersOnOldVersion { reader } => {
                write!(
                    f,
                    "reader {reader} is still on the previous topology version"
                )
            }
        }
    }
}

impl core::error::Error for UpdateError {}

/// The single writer of a topology's class rows.
#[derive(Debug)]
pub struct TopologyWriter<'a> {
    topo: Topology<'a>,
}

impl<'a> TopologyWriter<'a> {
    /// Starts an update: checks that no reader is left on the unpublished slot,
    /// then copies the published row into it.
    ///
    /// # Errors
    /// [`UpdateError::ReadersOnOldVersion`] when a reader still reads that slot.
    pub fn try_update(&mut self) -> Result<Update<'_, 'a>, UpdateError> {
        let mem = &self.topo.mem;
        let current = mem.control.current.load(Ordering::Relaxed);
        // SYNC POINT with the SeqCst fence in `Reader::pin` (Dekker pattern): a
        // reader that announced after this fence loads our last publish.
        fence(Ordering::SeqCst);
        for (i, r) in mem.readers.iter().enumerate() {
            let a = r.announce.load(Ordering::Relaxed);
            if a > READER_IDLE && a != current {
                return Err(UpdateError::ReadersOnOldVersion { reader: i });
            }
        }
        // SYNC POINT with the Release stores in `Pinned::drop`: reads made by
        // readers that have left happen before our writes below.
        fence(Ordering::Acquire);
        let from = mem.slots[current & 1];
        let to = mem.slots[(current & 1) ^ 1];
        for (d, s) in to.iter().zip(from) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        Ok(Update {
            writer: self,
            current,
            dirty: false,
        })
    }
}

impl Drop for TopologyWriter<'_> {
    fn drop(&mut self) {
        self.topo.mem.control.writer.store(false, Ordering::Release);
    }
}

/// An update in progress on the unpublished slot; nothing is visible until
/// [`publish`](Self::publish). Dropping it abandons the edits.
#[derive(Debug)]
pub struct Update<'w, 'a> {
    writer: &'w mut TopologyWriter<'a>,
    current: usize,
    dirty: bool,
}

/// An explicit class for one node or one PE, on top of the locality rule
/// (link-state overrides from failure detection, or a topology file's exceptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Override {
    /// Every PE on `node` gets `class` (e.g. `Unreachable` when the link to it is down).
    Node {
        /// Node id.
        node: u32,
        /// Class to force.
        class: PathClass,
    },
    /// PE `pe` gets `class`.
    Pe {
        /// PE index.
        pe: u32,
        /// Class to force.
        class: PathClass,
    },
}

impl<'a> Update<'_, 'a> {
    fn slot(&self) -> &'a [AtomicUsize] {
        self.writer.topo.mem.slots[(self.current & 1) ^ 1]
    }

    /// Sets `peer`'s class. The row owner's own entry cannot change (it is always
    /// `Local`); `false` when `peer` is out of range or is the owner.
    pub fn set_class(&mut self, peer: u32, class: PathClass) -> bool {
        let s = self.writer.topo.shape;
        if peer >= s.n_pes || peer == s.me {
            return false;
        }
        let p = peer as usize;
        let w = &self.slot()[p / PEERS_PER_WORD];
        let shift = (p % PEERS_PER_WORD) * 2;
        let v = w.load(Ordering::Relaxed);
        w.store(
            (v & !(3 << shift)) | (class.row_code() << shift),
            Ordering::Relaxed,
        );
        self.dirty = true;
        true
    }

    /// The class `peer` has in this update so far.
    pub fn class(&self, peer: u32) -> Option<PathClass> {
        let s = self.writer.topo.shape;
        if peer >= s.n_pes {
            None
        } else if peer == s.me {
            Some(PathClass::Local)
        } else {
            Some(PathClass::from_row_code(row_code(self.slot(), peer)))
        }
    }

    /// Rewrites the whole row with `class_of(peer)`.
    pub fn fill(&mut self, mut class_of: impl FnMut(u32) -> PathClass) {
        fill_row(self.slot(), self.writer.topo.shape.n_pes, &mut class_of);
        self.dirty = true;
    }

    /// Rebuilds the row from every PE's locality, then applies `overrides` in
    /// order (a later override wins).
    ///
    /// # Errors
    /// [`LayoutError::WrongSize`] when `localities` does not have one entry per PE.
    pub fn rebuild(
        &mut self,
        localities: &[Locality],
        inter: InterSwitch,
        overrides: &[Override],
    ) -> Result<(), LayoutError> {
        let s = self.writer.topo.shape;
        if localities.len() != s.n_pes as usize {
            return Err(LayoutError::WrongSize {
                what: "localities",
                expected: s.n_pes as usize,
                got: localities.len(),
            });
        }
        let my = localities[s.me as usize];
        self.fill(|peer| {
            let their = localities[peer as usize];
            let mut class = class_between(s.me, my, peer, their, inter);
            for o in overrides {
                match *o {
                    Override::Node { node, class: c } if node == their.node => class = c,
                    Override::Pe { pe, class: c } if pe == peer => class = c,
                    _ => {}
                }
            }
            class
        });
        Ok(())
    }

    /// Publishes the edited row with one atomic store and returns its version.
    /// An update without edits publishes nothing and returns the current version.
    pub fn publish(self) -> u32 {
        if !self.dirty {
            return (self.current >> 1) as u32;
        }
        // Versions count in the word's upper bits and wrap (after 2^31 updates on
        // 32-bit targets); a published word is never 0 or 1, the values that
        // mean "free" and "idle" in a reader's announcement.
        let mut word = (self.current & !1).wrapping_add(2);
        if word < 2 {
            word = 2;
        }
        let next = word | ((self.current & 1) ^ 1);
        // SYNC POINT with the Acquire load in `Reader::pin`.
        self.writer
            .topo
            .mem
            .control
            .current
            .store(next, Ordering::Release);
        (next >> 1) as u32
    }
}

/// Owned storage for a [`Topology`] (feature `alloc`): allocates once, at set-up.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct TopologyBox {
    control: alloc::boxed::Box<TopologyControl>,
    slots: [alloc::boxed::Box<[AtomicUsize]>; 2],
    links: alloc::boxed::Box<[AtomicUsize]>,
    readers: alloc::boxed::Box<[CachePadded<ReaderSlot>]>,
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

#[cfg(all(test, feature = "alloc", not(loom)))]
mod test {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// Ten PEs, one transport, no load bits: enough for the protocol tests.
    fn small_shape() -> Shape {
        Shape {
            me: 0,
            n_pes: 10,
            n_transports: 1,
            load_hints: false,
        }
    }

    fn t(i: u8) -> TransportId {
        TransportId::new(i).unwrap()
    }

    #[test]
    fn lookup_health_and_versions() {
        let shape = Shape {
            me: 1,
            n_pes: 100,
            n_transports: 3,
            load_hints: true,
        };
        let store = TopologyBox::new(shape, 2);
        let topo = Topology::new(store.mem(), shape, |p| {
            PathClass::from_row_code((p % 4) as usize)
        })
        .unwrap();
        let mut r = topo.reader().unwrap();
        {
            let g = r.pin();
            assert_eq!(g.version(), 1);
            assert_eq!(g.class(1), Some(PathClass::Local));
            assert_eq!(g.class(0), Some(PathClass::Shm));
            assert_eq!(g.class(2), Some(PathClass::Routed));
            assert_eq!(g.class(99), Some(PathClass::Unreachable));
            assert_eq!(g.class(100), None);
        }
        assert!(!topo.is_healthy(t(2), 70));
        assert_eq!(topo.apply_link_state(t(2), 70, LinkState::Up), Some(true));
        assert_eq!(topo.apply_link_state(t(2), 70, LinkState::Up), Some(false));
        assert!(topo.is_healthy(t(2), 70));
        assert!(!topo.is_healthy(t(1), 70));
        assert!(!topo.is_healthy(t(2), 71));
        assert_eq!(
            topo.apply_link_state(t(2), 70, LinkState::Error),
            Some(true)
        );
        assert!(!topo.is_healthy(t(2), 70));
        assert_eq!(topo.set_health(t(3), 0, true), None);
        assert_eq!(topo.set_health(t(0), 100, true), None);
        assert_eq!(topo.set_overloaded(t(0), 5, true), Some(false));
        assert!(topo.is_overloaded(t(0), 5));
        assert!(
            !topo.is_healthy(t(0), 5),
            "load bit must not leak into health"
        );

        let mut w = topo.writer().unwrap();
        assert!(topo.writer().is_none(), "single writer");
        let mut u = w.try_update().unwrap();
        assert!(u.set_class(3, PathClass::Near));
        assert!(!u.set_class(1, PathClass::Near), "owner stays local");
        assert_eq!(u.publish(), 2);
        let g = r.pin();
        assert_eq!(g.version(), 2);
        assert_eq!(g.class(3), Some(PathClass::Near));
        assert_eq!(
            g.class(2),
            Some(PathClass::Routed),
            "update copies the old row"
        );
    }

    #[test]
    fn writer_waits_for_readers_on_old_version() {
        let shape = small_shape();
        let store = TopologyBox::new(shape, 2);
        let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
        let mut r = topo.reader().unwrap();
        let mut w = topo.writer().unwrap();
        let g = r.pin(); // on version 1
        let mut u = w.try_update().unwrap(); // writes slot 1: fine
        u.set_class(2, PathClass::Routed);
        assert_eq!(u.publish(), 2);
        // The next update writes slot 0, where the reader still is.
        assert_eq!(
            w.try_update().unwrap_err(),
            UpdateError::ReadersOnOldVersion { reader: 0 }
        );
        assert_eq!(g.class(2), Some(PathClass::Near), "old version stays whole");
        drop(g);
        let mut u = w.try_update().unwrap();
        u.set_class(3, PathClass::Routed);
        assert_eq!(u.publish(), 3);
    }

    #[test]
    fn sticky_pin_holds_its_version_until_unpinned() {
        let shape = small_shape();
        let store = TopologyBox::new(shape, 2);
        let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
        let mut r = topo.reader().unwrap();
        let mut w = topo.writer().unwrap();
        assert_eq!(r.pin_sticky().version(), 1);
        // Guard dropped, announcement kept: version 2 may be written (other
        // slot), version 3 may not (it would reuse the held slot).
        let mut u = w.try_update().unwrap();
        u.set_class(2, PathClass::Routed);
        assert_eq!(u.publish(), 2);
        assert_eq!(
            w.try_update().unwrap_err(),
            UpdateError::ReadersOnOldVersion { reader: 0 }
        );
        // The next sticky pin sees version 2 at once and moves there.
        {
            let g = r.pin_sticky();
            assert_eq!(g.version(), 2);
            assert_eq!(g.class(2), Some(PathClass::Routed));
        }
        let mut u = w.try_update().unwrap();
        u.set_class(3, PathClass::Routed);
        assert_eq!(u.publish(), 3);
        // Held on 3 again; unpin releases it for the writer.
        assert_eq!(r.pin_sticky().version(), 3);
        let mut u = w.try_update().unwrap();
        u.set_class(4, PathClass::Routed);
        assert_eq!(u.publish(), 4);
        assert!(w.try_update().is_err());
        r.unpin();
        assert!(w.try_update().is_ok());
        // A plain pin after a sticky one leaves the reader idle on drop.
        assert_eq!(r.pin_sticky().version(), 4);
        drop(r.pin());
        let mut u = w.try_update().unwrap();
        u.set_class(5, PathClass::Routed);
        assert_eq!(u.publish(), 5);
        assert!(w.try_update().is_ok());
    }

    #[test]
    fn rebuild_from_localities_and_overrides() {
        let loc: Vec<Locality> = (0..8)
            .map(|pe| Locality {
                node: pe / 2,
                switch: pe / 4,
            })
            .collect();
        let shape = Shape {
            me: 0,
            n_pes: 8,
            n_transports: 2,
            load_hints: false,
        };
        let store = TopologyBox::new(shape, 1);
        let topo = Topology::new(store.mem(), shape, |_| PathClass::Unreachable).unwrap();
        let mut w = topo.writer().unwrap();
        let mut u = w.try_update().unwrap();
        u.rebuild(
            &loc,
            InterSwitch::Routed,
            &[Override::Node {
                node: 3,
                class: PathClass::Unreachable,
            }],
        )
        .unwrap();
        u.publish();
        let mut r = topo.reader().unwrap();
        let g = r.pin();
        let got: Vec<_> = (0..8).map(|p| g.class(p).unwrap()).collect();
        use PathClass::*;
        assert_eq!(
            got,
            [
                Local,
                Shm,
                Near,
                Near,
                Routed,
                Routed,
                Unreachable,
                Unreachable
            ]
        );
    }

    #[test]
    fn layout_errors() {
        let shape = small_shape();
        let store = TopologyBox::new(shape, 1);
        let bad = Shape {
            n_pes: 1000,
            ..shape
        };
        assert!(matches!(
            Topology::new(store.mem(), bad, |_| PathClass::Near),
            Err(LayoutError::WrongSize { .. })
        ));
        let bad = Shape { me: 10, ..shape };
        assert_eq!(
            Topology::new(store.mem(), bad, |_| PathClass::Near).unwrap_err(),
            LayoutError::MeOutOfRange { me: 10, n_pes: 10 }
        );
        let bad = Shape {
            n_transports: 9,
            ..shape
        };
        assert_eq!(
            Topology::new(store.mem(), bad, |_| PathClass::Near).unwrap_err(),
            LayoutError::Transports(9)
        );
    }

    #[test]
    fn laying_a_topology_twice_is_refused() {
        let shape = small_shape();
        let store = TopologyBox::new(shape, 1);
        let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
        let mut r = topo.reader().unwrap();
        let g = r.pin();
        assert_eq!(
            Topology::new(store.mem(), shape, |_| PathClass::Unreachable).unwrap_err(),
            LayoutError::AlreadyInitialized
        );
        assert_eq!(
            g.class(3),
            Some(PathClass::Near),
            "the live topology is untouched"
        );
    }

    #[test]
    fn version_wrap_never_publishes_free_or_idle_words() {
        let shape = small_shape();
        let store = TopologyBox::new(shape, 1);
        let topo = Topology::new(store.mem(), shape, |_| PathClass::Near).unwrap();
        // The last version before the counter wraps, in slot 1.
        store.control.current.store(usize::MAX, Ordering::Relaxed);
        let mut w = topo.writer().unwrap();
        let mut u = w.try_update().unwrap();
        u.set_class(2, PathClass::Routed);
        u.publish();
        let word = store.control.current.load(Ordering::Relaxed);
        assert!(
            word > READER_IDLE,
            "published word {word} reads as a free or idle reader"
        );
        assert_eq!(word & 1, 0, "the update went to the other slot");
        let mut r = topo.reader().unwrap();
        assert_eq!(r.pin().class(2), Some(PathClass::Routed));
    }

    #[test]
    fn million_pe_row_fits_in_a_mebibyte() {
        const MIB: usize = 1 << 20;
        let f = Footprint::of(1_000_000, 3, true, 4);
        assert!(
            f.row() <= MIB,
            "row with health and load bits: {} B",
            f.row()
        );
        let f = Footprint::of(1_000_000, 3, false, 4);
        assert!(
            f.total() <= MIB,
            "versioned topology with health bits: {} B",
            f.total()
        );
        // And what is really allocated matches the formula.
        let shape = Shape {
            me: 0,
            n_pes: 1_000_000,
            n_transports: 3,
            load_hints: false,
        };
        let store = TopologyBox::new(shape, 4);
        let m = store.mem();
        let bytes = (m.slots[0].len() + m.slots[1].len() + m.links.len()) * 8
            + core::mem::size_of_val(m.readers);
        assert_eq!(bytes, f.total());
        assert!(bytes <= MIB);
    }
}
