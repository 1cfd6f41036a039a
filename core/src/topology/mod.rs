//! A PE's topology row, its health and load bits, and the versioned (double
//! buffered) class rows.
//!
//! # Layout
//!
//! * **Class row**: 2 bits per peer ([`PathClass::row_code`](crate::class::PathClass::row_code)), `usize::BITS / 2`
//!   peers per word. A lookup is one load, a shift and a mask. The row owner's own
//!   index reads as [`PathClass::Local`](crate::class::PathClass::Local).
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
//!
//! # Modules
//!
//! The submodules are private; everything public is re-exported here.
//!
//! | module | what |
//! |---|---|
//! | `layout` | words per row, [`Footprint`], [`Shape`], the memory ([`TopologyMem`], `TopologyBox`), [`LayoutError`] |
//! | `row` | the [`Topology`] handle: health and load bits ([`LinkState`]), the flattened row a select reads |
//! | `versioned` | laying a topology out ([`Topology::new`]) and its versions: [`TopologyControl`], readers and their announced versions ([`Reader`], [`Pinned`]), the writer ([`TopologyWriter`], [`Update`], [`Override`]), [`UpdateError`] |

mod layout;
mod row;
mod versioned;

#[cfg(feature = "alloc")]
pub use self::layout::TopologyBox;
pub use self::{
    layout::{
        Footprint, LayoutError, MAX_READERS, PEERS_PER_WORD, Shape, TopologyMem, class_words,
        link_words,
    },
    row::{LinkState, Topology},
    versioned::{
        Override, Pinned, Reader, ReaderSlot, TopologyControl, TopologyWriter, Update, UpdateError,
    },
};
pub(crate) use self::{
    row::{LinkAt, RowView},
    versioned::READER_IDLE,
};

#[cfg(all(test, feature = "alloc", not(loom)))]
mod test;
