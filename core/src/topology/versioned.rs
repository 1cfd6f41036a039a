//! The versioned double buffer of class rows: the control words
//! ([`TopologyControl`]), the readers, each announcing on its own line the
//! version it entered ([`ReaderSlot`], [`Reader`], [`Pinned`]), and the
//! single writer that edits the other slot and publishes it with one store
//! ([`TopologyWriter`], [`Update`]).

use core::fmt;

use super::{
    layout::{LayoutError, PEERS_PER_WORD, Shape, TopologyMem, fill_row, row_code, validate},
    row::{RowView, Topology},
};
use crate::{
    class::{InterSwitch, Locality, PathClass, class_between},
    pad::CachePadded,
    sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence},
};

/// Reader announcement: slot not claimed by any selector.
const READER_FREE: usize = 0;
/// Reader announcement: claimed, not inside a read.
pub(crate) const READER_IDLE: usize = 1;
// Pinned readers store the `current` word they entered with, which is always >= 2
// because versions start at 1.

/// Shared control words of a versioned topology.
#[derive(Debug)]
pub struct TopologyControl {
    /// `(version << 1) | slot` of the published class row.
    pub(super) current: CachePadded<AtomicUsize>,
    /// Set while a [`TopologyWriter`] exists.
    pub(super) writer: AtomicBool,
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

    /// The published version.
    pub fn version(&self) -> u32 {
        (self.mem.control.current.load(Ordering::Acquire) >> 1) as u32
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
    /// [`MAX_READERS`](super::MAX_READERS)).
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

    /// The published `current` word: one Acquire load. A caller that keeps
    /// the view of the version its sticky pin holds
    /// ([`Selector::select_sticky`](crate::route::Selector::select_sticky))
    /// compares it with [`held`](Self::held) and re-pins only when they
    /// differ.
    #[inline(always)]
    pub(crate) fn published(&self) -> usize {
        // SYNC POINT with the Release store in `Update::publish`: the row of the
        // version loaded here is completely written.
        self.topo.mem.control.current.load(Ordering::Acquire)
    }

    /// The `current` word a sticky pin holds announced, or `READER_IDLE`
    /// (never a published word).
    #[inline(always)]
    pub(crate) fn held(&self) -> usize {
        self.held
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
        self.reader.topo.row_view(self.current)
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
    /// Gives `peer`, whose class is `from` in both slots, the class `to` in
    /// place: no new version, so no reader holds it up, whatever version
    /// a reader (a sticky pin of an idle context included) holds. Each
    /// slot's word changes with one atomic store by this, the only
    /// writer, so a reader sees `from` or `to` for `peer`, never a torn
    /// word, and every other peer as it was. Meant for a class a peer
    /// gains once, from `Unreachable` (which no selector memoizes, so its
    /// next select of `peer` reads `to`): an off-node peer located at its
    /// first use. A [`try_update`](Self::try_update) later copies it like
    /// any class. `false`, nothing written, when `peer` is out of range,
    /// is the owner, or does not have `from` in both slots.
    pub fn set_class_in_place(&mut self, peer: u32, from: PathClass, to: PathClass) -> bool {
        let s = self.topo.shape;
        if peer >= s.n_pes || peer == s.me {
            return false;
        }
        let slots = self.topo.mem.slots;
        if slots
            .iter()
            .any(|slot| row_code(slot, peer) != from.row_code())
        {
            return false;
        }
        let p = peer as usize;
        let shift = (p % PEERS_PER_WORD) * 2;
        for slot in slots {
            let w = &slot[p / PEERS_PER_WORD];
            let v = w.load(Ordering::Relaxed);
            // SYNC POINT with the Acquire loads a caller's own lock gives
            // another thread that learns of the change (e.g. the PE's
            // lazy-card mutex): its next read of the word sees `to`.
            w.store(
                (v & !(3 << shift)) | (to.row_code() << shift),
                Ordering::Release,
            );
        }
        true
    }

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
