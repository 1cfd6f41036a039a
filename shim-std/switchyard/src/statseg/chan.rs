//! The stats segment's channel table (see the [module docs](super)): an
//! entry per live channel end of the PE, taken when the end is made,
//! written by the end alone, freed when it drops.

use std::sync::{Arc, PoisonError};

use switchyard_core::sync::atomic::{AtomicU64, Ordering, fence};

use super::StatsSegment;

/// Entries of the channel table.
pub const CHANNELS: usize = 128;
/// Words of an entry (one cache line).
pub const CHANNEL_WORDS: usize = 8;
const _: () = assert!(CHANNELS <= 128, "the entry bitmap is one u128");
/// Entry word: the id (0 free; the role in the low byte, the channel
/// number above).
const ID: usize = 0;
/// Entry word: the peer (a publisher's: its subscribers' count).
const PEER: usize = 1;
/// Entry word: capacity (low half), message size (high half).
const SHAPE: usize = 2;
/// Entry word: flags.
const FLAGS: usize = 3;
/// Flag: the end's messages go through same-node memory only (an SPSC
/// producer writing the consumer's ring, a subscriber reading the
/// publisher's ring, or on another node its node lead's ring, a publisher
/// with every subscriber on its node, a consumer whose producer writes its
/// ring directly).
pub const CHANNEL_DIRECT: u64 = 1;
/// Flag: a broadcast stream under [`SlowSubscriber::Drop`](crate::channel::SlowSubscriber::Drop).
pub const CHANNEL_DROP: u64 = 2;

words! {
    /// The counters of a channel entry (its words 4 to 7), as the end's
    /// [`ChannelStats`](crate::channel::ChannelStats) has them.
    ChannelCounter {
        /// Messages sent (producer, publisher).
        Sent = 4 => "sent",
        /// Messages received (consumer, subscriber).
        Received = 5 => "received",
        /// Sends that found the ring full.
        Full = 6 => "full",
        /// Messages a subscriber lost (broadcast under `Drop`).
        Lost = 7 => "lost",
    }
}

/// Which end of which kind of channel an entry is (its id's low byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ChannelRole {
    /// The producer of an SPSC channel.
    Producer = 1,
    /// The consumer of an SPSC channel.
    Consumer = 2,
    /// The publisher of a broadcast stream.
    Publisher = 3,
    /// A subscriber of a broadcast stream.
    Subscriber = 4,
}

impl ChannelRole {
    /// The channel kind: `spsc` or `broadcast`.
    pub const fn kind(self) -> &'static str {
        match self {
            ChannelRole::Producer | ChannelRole::Consumer => "spsc",
            ChannelRole::Publisher | ChannelRole::Subscriber => "broadcast",
        }
    }

    /// The end: `producer`, `consumer`, `publisher` or `subscriber`.
    pub const fn name(self) -> &'static str {
        match self {
            ChannelRole::Producer => "producer",
            ChannelRole::Consumer => "consumer",
            ChannelRole::Publisher => "publisher",
            ChannelRole::Subscriber => "subscriber",
        }
    }

    fn from_code(c: u64) -> Option<ChannelRole> {
        Some(match c {
            1 => ChannelRole::Producer,
            2 => ChannelRole::Consumer,
            3 => ChannelRole::Publisher,
            4 => ChannelRole::Subscriber,
            _ => return None,
        })
    }
}

/// What an entry says of its end, besides the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The end.
    pub role: ChannelRole,
    /// The other end's PE; a publisher's subscribers' count.
    pub peer: u32,
    /// Slots of the ring.
    pub capacity: u32,
    /// Bytes of a message.
    pub message_size: u32,
    /// [`CHANNEL_DIRECT`] and [`CHANNEL_DROP`] bits.
    pub flags: u64,
}

/// The channel table's entries in use (bit `k`: entry `k`) and the number
/// of the PE's next channel.
#[derive(Debug, Default)]
pub(super) struct Table {
    used: u128,
    next: u64,
}

impl StatsSegment {
    /// Numbers the PE's next channel and, for an end of it (`end`: every
    /// PE calls this once per channel made, ends and bystanders, in the
    /// order of the collective creations, so the numbers agree), takes the
    /// lowest free entry of the channel table for it. `None` for a
    /// bystander or when every entry is taken: the end then keeps its
    /// counters in its own memory only.
    pub fn channel(self: &Arc<Self>, end: Option<ChannelInfo>) -> Option<ChannelEntry> {
        let mut t = self.chans.lock().unwrap_or_else(PoisonError::into_inner);
        let number = t.next;
        t.next += 1;
        let end = end?;
        let k = (!t.used).trailing_zeros() as usize;
        if k >= CHANNELS {
            return None;
        }
        t.used |= 1 << k;
        let at = self.layout.channel(k);
        let e = &self.map.words()[at..at + CHANNEL_WORDS];
        // The entry's id is 0 (stored when it was freed, under this lock).
        // SYNC POINT with the Acquire fence in `read_channel`: a reader
        // that copied any of the words below sees, on its re-check, an id
        // other than the one it started from.
        fence(Ordering::Release);
        e[PEER].store(u64::from(end.peer), Ordering::Relaxed);
        e[SHAPE].store(
            u64::from(end.capacity) | u64::from(end.message_size) << 32,
            Ordering::Relaxed,
        );
        e[FLAGS].store(end.flags, Ordering::Relaxed);
        for w in &e[ChannelCounter::Sent as usize..] {
            w.store(0, Ordering::Relaxed);
        }
        // SYNC POINT with the Acquire load of the id in `read_channel`.
        e[ID].store(end.role as u64 | number << 8, Ordering::Release);
        Some(ChannelEntry {
            seg: Arc::clone(self),
            index: k,
            at,
        })
    }
}

/// One channel end's entry of the channel table, which only it writes;
/// dropping it frees the entry.
pub struct ChannelEntry {
    seg: Arc<StatsSegment>,
    index: usize,
    /// The entry's first word.
    at: usize,
}

impl std::fmt::Debug for ChannelEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelEntry")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl ChannelEntry {
    /// The entry's index in the table.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Stores `v` as the counter `c`: one Relaxed store (the end is the
    /// entry's one writer and keeps the count itself).
    #[inline(always)]
    pub fn set(&self, c: ChannelCounter, v: u64) {
        if let Some(w) = self.seg.map.words().get(self.at + c as usize) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

impl Drop for ChannelEntry {
    fn drop(&mut self) {
        let mut t = self
            .seg
            .chans
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Under the lock: the next taker's Release fence orders this store
        // before its words (see `StatsSegment::channel`).
        self.seg.map.words()[self.at + ID].store(0, Ordering::Relaxed);
        t.used &= !(1 << self.index);
    }
}

/// One channel end of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelRow {
    /// The channel's number (the same on every PE).
    pub channel: u64,
    /// `spsc` or `broadcast`.
    pub kind: String,
    /// `producer`, `consumer`, `publisher` or `subscriber`.
    pub role: String,
    /// The other end's PE; for a publisher, its subscribers' count.
    pub peer: u32,
    /// Slots of the ring.
    pub capacity: u32,
    /// Bytes of a message.
    pub message_size: u32,
    /// Whether the end works through same-node memory only
    /// ([`CHANNEL_DIRECT`]).
    pub direct: bool,
    /// Whether the stream drops for slow subscribers ([`CHANNEL_DROP`]).
    pub drop: bool,
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// Sends that found the ring full.
    pub full: u64,
    /// Messages lost (a subscriber under `Drop`).
    pub lost: u64,
}

impl ChannelRow {
    /// Counter `c`.
    pub fn counter(&self, c: ChannelCounter) -> u64 {
        match c {
            ChannelCounter::Sent => self.sent,
            ChannelCounter::Received => self.received,
            ChannelCounter::Full => self.full,
            ChannelCounter::Lost => self.lost,
        }
    }
}

/// Tries of an entry that keeps changing under the reader (freed and taken
/// again) before it is left out.
const TRIES: u32 = 16;

/// The end in the entry `e`, or `None` when it is free (or changed
/// [`TRIES`] times while being read).
pub(super) fn read_channel(e: &[AtomicU64]) -> Option<ChannelRow> {
    for _ in 0..TRIES {
        // SYNC POINT with the Release store of the id in
        // `StatsSegment::channel`.
        let id = e[ID].load(Ordering::Acquire);
        if id == 0 {
            return None;
        }
        let mut v = [0u64; CHANNEL_WORDS];
        for (o, w) in v.iter_mut().zip(e).skip(1) {
            *o = w.load(Ordering::Relaxed);
        }
        // SYNC POINT with the Release fence in `StatsSegment::channel`.
        fence(Ordering::Acquire);
        if e[ID].load(Ordering::Relaxed) != id {
            continue;
        }
        let role = ChannelRole::from_code(id & 0xff)?;
        return Some(ChannelRow {
            channel: id >> 8,
            kind: role.kind().into(),
            role: role.name().into(),
            peer: v[PEER] as u32,
            capacity: v[SHAPE] as u32,
            message_size: (v[SHAPE] >> 32) as u32,
            direct: v[FLAGS] & CHANNEL_DIRECT != 0,
            drop: v[FLAGS] & CHANNEL_DROP != 0,
            sent: v[ChannelCounter::Sent as usize],
            received: v[ChannelCounter::Received as usize],
            full: v[ChannelCounter::Full as usize],
            lost: v[ChannelCounter::Lost as usize],
        });
    }
    None
}
