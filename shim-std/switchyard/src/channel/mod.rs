//! Typed channels over the symmetric heap: [`Spsc`], one producer PE to one
//! consumer PE, [`Broadcast`], one publisher PE to several subscriber PEs
//! (its protocol and slow-subscriber policies are described on
//! [`Broadcast`]), and [`Select`], a wait over several
//! receiving ends.
//!
//! # Creating one
//!
//! [`Context::spsc`] is collective (every PE calls it, in the same order as
//! its other collective calls): it allocates a small header block and the
//! ring, checks that the producer and the consumer agree on the message
//! type's layout and the capacity, and hands the producer PE a
//! [`Producer`], the consumer PE a [`Consumer`], every other PE nothing.
//! The blocks stay allocated for the life of the job.
//!
//! ```no_run
//! use switchyard::{channel::Spsc, context::Context};
//!
//! let mut ctx = Context::from_env()?;
//! match ctx.spsc::<[u64; 4]>(0, 1, 1024)? {
//!     Spsc::Producer(mut tx) => {
//!         for i in 0..1000u64 {
//!             tx.send(&mut ctx, [i, 0, 0, 0])?;
//!         }
//!     }
//!     Spsc::Consumer(mut rx) => {
//!         for i in 0..1000u64 {
//!             assert_eq!(rx.recv(&mut ctx)?[0], i);
//!         }
//!     }
//!     Spsc::Bystander => {}
//! }
//! # Ok::<(), switchyard::context::Error>(())
//! ```
//!
//! # Layout and protocol
//!
//! The ring lives in the consumer's heap: `capacity` (a power of two) slots
//! of `stride` bytes, `stride` being `8 + size_of::<T>()` rounded up to 64:
//! a message of up to 56 bytes and its sequence word are one cache line.
//! The slot of index `i` (`i` counts every message ever sent) holds `i + 1`
//! in its sequence word once the message is in it. The consumer keeps its
//! next index `head` to itself and publishes it in its header (a Release
//! store per `recv`, or one per batch of `recv_into`, on a line the
//! producer reads only when its cached copy says the ring is full). The producer keeps `tail` and a cached limit
//! (`head + capacity` as last read).
//!
//! * **Same node** (the route to the consumer is shared memory): the producer
//!   writes the message straight into the consumer's slot through its
//!   mapping of the consumer's heap, then the sequence word (Release); the
//!   consumer polls its own memory (Acquire). No system call, no lock, no
//!   allocation; only Acquire and Release.
//! * **Across nodes** (TCP, verbs: whatever the route gives): the message is
//!   a put into the slot followed by a signal setting its sequence word
//!   ([`Context::put_signal`]: over TCP one frame carrying both, the target
//!   writing the data before the signal; on verbs the put, a fence, an
//!   atomic set), and the
//!   consumer sends credits back as atomic sets of a word in the producer's
//!   header, every quarter of the ring. Order, and nothing lost or doubled
//!   over a reconnect or failover, come from the drivers' replay and
//!   dedup. The consumer polls the same sequence words, making progress
//!   while it waits.
//!
//! Waits ([`Producer::send`] for credit, [`Consumer::recv`], [`Select::wait`])
//! follow the library's rules: no timeout while the peer lives, the
//! context's progress mode (busy or adaptive), [`Error::PeerDead`] when the
//! peer dies, after what had already arrived was received.
//!
//! # Counters
//!
//! Each end counts what it did ([`ChannelStats`]: sent, received, full
//! events, lost); read them with [`Producer::stats`], [`Consumer::stats`],
//! [`Publisher::stats`] and [`Subscriber::stats`]. With the PE's stats
//! segment (`stats = on`) each end also mirrors them into its entry of the
//! segment's channel table ([`statseg`](crate::statseg#channels)), with
//! the channel's number (the same on every PE: the channels made so far),
//! role and peer, for `switchyard stat` and `/metrics` to read: one plain
//! store per change. An end made when all
//! [`CHANNELS`](crate::statseg::CHANNELS) entries are taken has no entry;
//! an end's entry is freed when it drops.

mod broadcast;
mod select;
mod slots;
mod spsc;

pub use broadcast::{Broadcast, Publisher, SlowSubscriber, Subscriber};
pub use select::{Ready, Select};
pub use spsc::{Consumer, Producer, TrySendError};

#[cfg(doc)]
use crate::context::Error;
use crate::{
    context::{Context, Pe, Plain, Result, Sym},
    statseg::{ChannelCounter, ChannelEntry, ChannelInfo, ChannelRole},
};

/// Why a channel could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The capacity is not a power of two between 1 and 2^31.
    #[error("channel capacity {capacity} is not a power of two between 1 and 2^31")]
    Capacity {
        /// The capacity asked for.
        capacity: usize,
    },
    /// The message type is larger than a channel carries (4 GiB).
    #[error("channel messages of {size} bytes are too large")]
    MessageSize {
        /// The type's size.
        size: usize,
    },
    /// A PE number outside the job.
    #[error("channel end PE {pe} is outside the job of {n_pes} PEs")]
    NoSuchPe {
        /// The PE.
        pe: u32,
        /// PEs in the job.
        n_pes: u32,
    },
    /// The producer and the consumer are the same PE, or a broadcast's
    /// publisher is among its subscribers (a channel joins distinct PEs; one
    /// PE's threads share memory already).
    #[error("channel producer and consumer are both PE {pe}")]
    SamePe {
        /// The PE.
        pe: u32,
    },
    /// The producer and the consumer disagree on the message layout or the
    /// capacity (different types, or different builds).
    #[error(
        "channel ends disagree: the producer has {producer_size}-byte messages and {producer_capacity} slots, the consumer {consumer_size}-byte messages and {consumer_capacity} slots"
    )]
    Mismatch {
        /// Message size on the producer.
        producer_size: u32,
        /// Capacity on the producer.
        producer_capacity: u64,
        /// Message size on the consumer.
        consumer_size: u32,
        /// Capacity on the consumer.
        consumer_capacity: u64,
    },
    /// A broadcast stream with no subscriber.
    #[error("a broadcast stream needs at least one subscriber")]
    NoSubscribers,
    /// A PE listed twice among a broadcast stream's subscribers.
    #[error("broadcast subscriber PE {pe} is listed twice")]
    Repeated {
        /// The PE.
        pe: u32,
    },
    /// The ring's memory is not where it should be (a heap smaller than
    /// the block, or a peer's mapping that went away).
    #[error("channel ring at heap offset {offset} is not mapped on PE {pe}")]
    Unmapped {
        /// The PE whose heap it is.
        pe: u32,
        /// The ring's heap offset.
        offset: u64,
    },
}

/// A channel end's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Messages sent (producer).
    pub sent: u64,
    /// Messages received (consumer).
    pub received: u64,
    /// Sends that found the ring full (a failed `try_send`, or a `send`
    /// that had to wait for credit).
    pub full: u64,
    /// Messages a subscriber lost (broadcast; 0 for SPSC).
    pub lost: u64,
}

/// An end's counters, and its entry of the stats segment's channel table
/// (when it has one), where each change is mirrored with one store.
#[derive(Debug, Default)]
struct Counters {
    now: ChannelStats,
    entry: Option<ChannelEntry>,
}

impl Counters {
    fn new(entry: Option<ChannelEntry>) -> Counters {
        Counters {
            now: ChannelStats::default(),
            entry,
        }
    }

    #[inline(always)]
    fn mirror(&self, c: ChannelCounter, v: u64) {
        if let Some(e) = &self.entry {
            e.set(c, v);
        }
    }

    #[inline(always)]
    fn sent(&mut self, n: u64) {
        self.now.sent += n;
        self.mirror(ChannelCounter::Sent, self.now.sent);
    }

    #[inline(always)]
    fn received(&mut self) {
        self.now.received += 1;
        self.mirror(ChannelCounter::Received, self.now.received);
    }

    #[inline(always)]
    fn full(&mut self) {
        self.now.full += 1;
        self.mirror(ChannelCounter::Full, self.now.full);
    }

    #[inline(always)]
    fn lost(&mut self, n: u64) {
        self.now.lost += n;
        self.mirror(ChannelCounter::Lost, self.now.lost);
    }
}

/// What [`Context::spsc`] hands each PE.
#[derive(Debug)]
pub enum Spsc<T> {
    /// The producer PE's end.
    Producer(Producer<T>),
    /// The consumer PE's end.
    Consumer(Consumer<T>),
    /// A PE that is neither end.
    Bystander,
}

impl<T> Spsc<T> {
    /// The producer's end, if this is it.
    pub fn producer(self) -> Option<Producer<T>> {
        match self {
            Spsc::Producer(p) => Some(p),
            _ => None,
        }
    }

    /// The consumer's end, if this is it.
    pub fn consumer(self) -> Option<Consumer<T>> {
        match self {
            Spsc::Consumer(c) => Some(c),
            _ => None,
        }
    }
}

/// Header block of a channel, on every PE: three 128-byte lines (two lines
/// apart from the adjacent-line prefetch of the other).
const HDR_BYTES: u64 = 384;
/// Header word: the layout word (every PE).
const HDR_LAYOUT: usize = 0;
/// Header word: the producer's path, [`PATH_DIRECT`] or [`PATH_ROUTED`].
const HDR_PATH: usize = 1;
/// Header word: the consumer's published head (the consumer's header).
const HDR_HEAD: usize = 16;
/// Header word: credit, the consumer's head as last sent to a producer on
/// another node (the producer's header).
const HDR_CREDIT: usize = 32;
/// The producer writes through its mapping of the consumer's heap.
const PATH_DIRECT: u64 = 1;
/// The producer puts through the route.
const PATH_ROUTED: u64 = 2;
/// Tag of a layout word (its top 16 bits), so an unwritten word (0) differs
/// from every layout.
const LAYOUT_TAG: u64 = 0x5343 << 48;

/// The layout word of messages of `T` in a ring of `capacity` slots:
/// capacity's log2 (bits 40-47), `T`'s size (bits 0-31), the tag above.
fn layout_word<T>(capacity: usize) -> core::result::Result<u64, ChannelError> {
    if !capacity.is_power_of_two() || capacity > 1 << 31 {
        return Err(ChannelError::Capacity { capacity });
    }
    let size = core::mem::size_of::<T>();
    let size32 = u32::try_from(size).map_err(|_| ChannelError::MessageSize { size })?;
    Ok(LAYOUT_TAG | u64::from(capacity.trailing_zeros()) << 40 | u64::from(size32))
}

/// A layout word's message size and capacity.
fn layout_of(word: u64) -> (u32, u64) {
    (word as u32, 1u64 << ((word >> 40) & 0x3f))
}

/// The slot stride for messages of `size` bytes.
fn stride_of(size: u32) -> u64 {
    (slots::SEQ_BYTES as u64 + u64::from(size)).next_multiple_of(64)
}

/// Spins of a channel's wait on same-node memory before the library's wait
/// (a load and a pause instruction each: some microseconds).
const SPINS: u32 = 4096;

/// Spins until `ready` holds, at most [`SPINS`] times; whether it did.
#[inline]
fn spin(mut ready: impl FnMut() -> bool) -> bool {
    for _ in 0..SPINS {
        if ready() {
            return true;
        }
        switchyard_core::sync::spin_hint();
    }
    false
}

/// Credits back to a sender on another node: the receiver's cursor, set
/// into a word of the sender's header every `every` messages.
#[derive(Debug)]
struct Credit {
    /// The sender's word.
    sym: Sym<u64>,
    /// The cursor last sent.
    sent: u64,
    /// Send when the cursor is this far past the last sent.
    every: u64,
}

impl Credit {
    /// Credit into the word at heap offset `off` for a ring of `capacity`
    /// slots (every quarter of it).
    fn new(ctx: &Context, off: u64, capacity: u64) -> Result<Credit> {
        Ok(Credit {
            sym: ctx.sym_at(off, 1)?,
            sent: 0,
            every: (capacity / 4).max(1),
        })
    }

    /// Sends `head` to `pe` when it is far enough past the last sent.
    #[inline]
    fn give(&mut self, ctx: &mut Context, head: u64, pe: u32) -> Result<()> {
        if head - self.sent >= self.every {
            ctx.set(&self.sym, 0, head, pe)?;
            self.sent = head;
        }
        Ok(())
    }
}

/// `Ok` when `ctx` is of the PE whose handles carry `owner`.
fn check_owner(ctx: &Context, owner: u64) -> Result<()> {
    if ctx.owner_id() == owner {
        Ok(())
    } else {
        Err(crate::context::Error::ForeignHandle)
    }
}

/// What a receiving end lends [`recv_batch`].
trait Receiving<T> {
    /// Waits for the next message (the end's `recv`).
    fn wait_one(&mut self, ctx: &mut Context) -> Result<T>;
    /// The next message if it has arrived (no progress, no credit).
    fn take_one(&mut self) -> Option<T>;
    /// Sends credit back if it is due.
    fn credit(&mut self, ctx: &mut Context) -> Result<()>;
}

/// A receiving end's `recv_into`: waits for one message, then takes as many
/// as have arrived, up to `out.len()`; then credit.
fn recv_batch<T, E: Receiving<T>>(end: &mut E, ctx: &mut Context, out: &mut [T]) -> Result<usize> {
    let Some((first, rest)) = out.split_first_mut() else {
        return Ok(0);
    };
    *first = end.wait_one(ctx)?;
    let mut n = 1;
    for slot in rest {
        match end.take_one() {
            Some(v) => *slot = v,
            None => break,
        }
        n += 1;
    }
    end.credit(ctx)?;
    Ok(n)
}

/// What the producer and the consumer ends are made from.
struct Made {
    /// The header block's words.
    hdr: Sym<u64>,
    /// The ring block's offset.
    ring: u64,
    capacity: u64,
    stride: u64,
    /// The producer writes through the mapping.
    direct: bool,
    pe: Pe,
    /// This end's entry of the stats segment's channel table.
    sx: Option<ChannelEntry>,
}

impl Context {
    /// Collectively makes a single-producer single-consumer channel of `T`
    /// from PE `producer` to PE `consumer` with `capacity` slots (a power of
    /// two). Every PE calls it with the same arguments, in the same order as
    /// its other collective calls; the producer gets
    /// [`Spsc::Producer`], the consumer [`Spsc::Consumer`], the others
    /// [`Spsc::Bystander`]. See the [module docs](crate::channel).
    ///
    /// # Errors
    ///
    /// [`Error::Channel`] with [`ChannelError::Capacity`],
    /// [`ChannelError::SamePe`], [`ChannelError::NoSuchPe`],
    /// [`ChannelError::Mismatch`] (on every PE, when the two ends' `T` or
    /// capacity differ); [`Error::OutOfMemory`] when the heap cannot hold the
    /// ring; barrier and transport errors.
    pub fn spsc<T: Plain>(
        &mut self,
        producer: u32,
        consumer: u32,
        capacity: usize,
    ) -> Result<Spsc<T>> {
        let mine = layout_word::<T>(capacity)?;
        let n_pes = self.n_pes();
        for pe in [producer, consumer] {
            if pe >= n_pes {
                return Err(ChannelError::NoSuchPe { pe, n_pes }.into());
            }
        }
        if producer == consumer {
            return Err(ChannelError::SamePe { pe: producer }.into());
        }
        let me = self.my_pe();
        let mut made = self.make(me, producer, consumer, mine)?;
        let end = if me == producer {
            Some((ChannelRole::Producer, consumer))
        } else if me == consumer {
            Some((ChannelRole::Consumer, producer))
        } else {
            None
        };
        made.sx = self.sx_channel(end.map(|(role, peer)| ChannelInfo {
            role,
            peer,
            capacity: made.capacity as u32,
            message_size: core::mem::size_of::<T>() as u32,
            flags: if made.direct {
                crate::statseg::CHANNEL_DIRECT
            } else {
                0
            },
        }));
        Ok(if me == producer {
            Spsc::Producer(Producer::new(self, made, consumer)?)
        } else if me == consumer {
            Spsc::Consumer(Consumer::new(self, made, producer)?)
        } else {
            Spsc::Bystander
        })
    }

    /// The collective part of [`Context::spsc`]: the header block, the
    /// layout check, the ring block.
    fn make(&mut self, me: u32, producer: u32, consumer: u32, mine: u64) -> Result<Made> {
        let hdr_off = self.alloc_bytes(HDR_BYTES, 64)?;
        let hdr = self.sym_at::<u64>(hdr_off, (HDR_BYTES / 8) as usize)?;
        let direct = me == producer && self.shm_to(consumer);
        let path = if direct { PATH_DIRECT } else { PATH_ROUTED };
        self.put(&hdr, HDR_LAYOUT, &[mine, path], me)?;
        self.barrier_all()?;
        let mut p = [0u64; 2];
        let mut c = [0u64; 1];
        self.get(&hdr, HDR_LAYOUT, &mut p, producer)?;
        self.get(&hdr, HDR_LAYOUT, &mut c, consumer)?;
        if p[0] != c[0] {
            self.free_bytes(hdr_off)?;
            let ((producer_size, producer_capacity), (consumer_size, consumer_capacity)) =
                (layout_of(p[0]), layout_of(c[0]));
            return Err(ChannelError::Mismatch {
                producer_size,
                producer_capacity,
                consumer_size,
                consumer_capacity,
            }
            .into());
        }
        // Sized from the producer's word, the same on every PE (a bystander
        // with another `T` still allocates what the ends do).
        let (size, capacity) = layout_of(p[0]);
        let stride = stride_of(size);
        let ring = match self.alloc_bytes(capacity * stride, 64) {
            Ok(r) => r,
            Err(e) => {
                self.free_bytes(hdr_off)?;
                return Err(e);
            }
        };
        Ok(Made {
            hdr,
            ring,
            capacity,
            stride,
            direct: p[HDR_PATH] == PATH_DIRECT,
            pe: self.pe(),
            sx: None,
        })
    }

    /// Whether this PE reaches `pe` over shared memory and has its heap
    /// mapped (a producer then writes the consumer's slots itself).
    fn shm_to(&mut self, pe: u32) -> bool {
        let stride = 64;
        self.peer_heap(pe).is_some()
            && self
                .route(pe, stride, switchyard_core::route::Op::Put)
                .is_ok_and(|r| r.transport == crate::context::SHM)
    }
}
