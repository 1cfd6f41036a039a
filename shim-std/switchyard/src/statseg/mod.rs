//! The stats segment: a small POSIX shared-memory object per PE holding its
//! counters and latency histograms, readable from outside the job
//! (`switchyard stat`, the launcher's `/metrics`) while the job runs.
//!
//! # The object
//!
//! `/dev/shm/switchyard-<job id, 16 hex digits>-stats-<rank>`, mode 0600,
//! created by the PE at init (when `stats = on`, the default) and unlinked
//! when its context drops, like the heap's object; it carries the heap
//! object's name prefix, so the launcher's end-of-job cleanup and the
//! stale-object cleanup of dead jobs
//! ([`remove_stale`](switchyard_shm::remove_stale), which knows this
//! header) remove it too. All words are little-endian `u64` (the header's
//! first 60 bytes are laid out like the heap object's control block: magic,
//! pid at 24, the ready word at 56).
//!
//! # Layout (version [`VERSION`])
//!
//! | words | what |
//! | --- | --- |
//! | 0..16 | header ([`Header`]): 0 magic [`MAGIC`]; 1 version (low half), rank (high); 2 job id; 3 pid, n_pes; 4 start time (ns since the epoch); 5 transports, buckets per histogram; 6 tick unit; 7 the ready word ([`OBJECT_READY`](switchyard_shm::OBJECT_READY), stored last); 8 publishes; 9 the slots ever taken (a bitmap); 10 [`SLOTS`]; 11 [`CHANNELS`] |
//! | 16..16+16·T | a wide block per transport: the driver-wide counters ([`WideWord`]; TCP's on `tcp0`; verbs' are [`VerbsWord`]s) |
//! | 512.. | a shared block per (peer, transport), peer-major, [`SHARED_WORDS`] words (one cache line; [`SharedWord`]): 0 sequence; 1 the state word ([`STATE_HEALTHY`], [`STATE_LOADED`], [`STATE_ROUTE`], [`STATE_DEAD`]); 2 replays, 3 dedup drops, 4 CRC failures (the socket driver's, per peer and rail, on `tcp<rail>`) |
//! | after, page-aligned | the channel table: [`CHANNELS`] entries of [`CHANNEL_WORDS`] words (one cache line), one per live channel end of the PE: 0 the id (0 free; else the role ([`ChannelRole`]) in the low byte, the channel number above); 1 the peer (the other end's PE; a publisher's: its subscribers' count); 2 capacity (low half), message size (high); 3 flags ([`CHANNEL_DIRECT`], [`CHANNEL_DROP`]); 4..8 the counters ([`ChannelCounter`]) |
//! | after, page-aligned | [`SLOTS`] context slots, each whole pages: its PE block ([`PE_WORDS`] words: the sequence, then the [`PeWord`]s, the rest zero), a peer block per (peer, transport), peer-major ([`PeerWord`]), then the dense shared-memory row: [`SHM_ROW_WORDS`] words per peer (the shm leg's ops, and its bytes beyond 8 per op, wrapping: its bytes are 8 ops + that word; readers add both to the (peer, shm) block's), then (page-aligned) a histogram per (op, transport), op-major ([`HIST_OPS`]; [`HIST_WORDS`] words each) |
//!
//! `T` is [`N_TRANSPORTS`] (shm, verbs, tcp0..tcp3). Every block starts with
//! a sequence word; a counter block is [`BLOCK_WORDS`] words. A slot's
//! pages are allocated when a context first takes it, so the object is
//! mostly a hole; readers look only at the slots the bitmap names and sum
//! them.
//!
//! # Consistency: one writer per block, one seqlock per block
//!
//! Each context of the PE counts in its own slot ([`StatsSlot`]): its data
//! path writes only there, so no word has two writers and no counter needs
//! a read-modify-write. The shared part (the shared (peer, transport)
//! blocks, wide blocks, the publish count) is written by one publisher at a
//! time: the PE's first
//! context, or the progress thread, which take turns on the TCP driver's
//! entry lock (without TCP there is no progress thread).
//!
//! A block's writer makes its sequence word odd (Relaxed store, then a
//! Release fence), stores the block's words (Relaxed load + store each: no
//! read-modify-write), and makes the sequence even again (Release store).
//! A reader loads the sequence (Acquire), retries while odd, copies the
//! words (Relaxed), then an Acquire fence and a reload of the sequence:
//! equal means the copy is one state of the block. On x86-64 the writer's
//! cost is plain stores; every word is also individually atomic, so a
//! reader that gives up retrying (a writer killed mid-update) still sees
//! whole counters. Blocks are not consistent with each other (no global
//! stop), nor are the slots a reader sums. One exception, for the
//! per-operation cost: a peer block's ops and bytes words, and the dense
//! shm row's, are stored outside any seqlock ([`StatsSlot::op`],
//! `ShmCounts::op`), so a snapshot may count an operation before its
//! bytes. A shared block's state word is stored
//! whole, outside its seqlock; its counters are published under it.
//!
//! # Channels
//!
//! Each end of a [channel](crate::channel) on this PE (an SPSC producer or
//! consumer, a broadcast publisher or subscriber) takes an entry of the
//! channel table when it is made ([`StatsSegment::channel`], under a lock)
//! and frees it when it drops (its id word back to 0; a reader stops
//! showing it). The channel number counts the channels made on the PE,
//! bystanders included: creation is collective and in the same order on
//! every PE, so the number names the same channel on every PE. The end is
//! its entry's one writer ([`ChannelEntry`]): each counter change is one
//! Relaxed store of its own count, with no read-modify-write, fence or lock.
//! Taking an entry writes its words, then (Release) its id; a reader loads
//! the id (Acquire), copies the words, and after an Acquire fence reloads
//! the id: unchanged means the copy is of that end (each counter whole;
//! the counters are not consistent with each other). With every entry
//! taken, or `stats = off`, an end has no entry and works as before.
//!
//! # Latencies
//!
//! The histograms count the operations the route trace samples (the trace
//! mode, `trace`: a sampled operation reads the trace clock at its start
//! and at its end; `trace = off` leaves them empty), end to end, in ticks of
//! [`sys::ticks`](crate::sys::ticks) ([`Header`] says which unit). Buckets
//! are log-linear, HDR style: values below 16 have one bucket each; above,
//! each power of two is cut into 16 equal buckets (at most 6.25% wide),
//! up to 2^40 ticks; larger values land in the last bucket.

mod read;
mod sys;
mod text;

use std::{
    io,
    path::PathBuf,
    sync::{Arc, PoisonError},
};

pub use chan::{
    CHANNEL_DIRECT, CHANNEL_DROP, CHANNEL_WORDS, CHANNELS, ChannelCounter, ChannelEntry,
    ChannelInfo, ChannelRole, ChannelRow,
};
pub use read::{Job, PeerRow, Reader, Snapshot, find_jobs, transport_name};
use switchyard_core::sync::atomic::{AtomicU64, Ordering, fence};
pub use text::{HistRow, peer_counter_names, prometheus, summary, ticks_to_ns};

/// The magic word at offset 0.
pub const MAGIC: u64 = switchyard_shm::STATS_MAGIC;
/// The layout version this build writes and reads.
pub const VERSION: u32 = 6;
/// Transports with counters: shm, verbs, tcp0..tcp3 (the context's ids).
pub const N_TRANSPORTS: usize = crate::context::N_TRANSPORTS as usize;
/// Words of a counter block (the sequence word first).
pub const BLOCK_WORDS: usize = 16;
/// Words of a slot's PE block ([`PeWord`]; the sequence word first): two
/// counter blocks' worth, so that [`Stats`](crate::context::Stats) can
/// grow without another layout (version 5's was one block, full).
pub const PE_WORDS: usize = 2 * BLOCK_WORDS;
/// The counters of a PE block ([`PeWord::ALL`]): what
/// [`StatsSlot::set_pe`] publishes.
pub const PE_COUNTERS: usize = PeWord::ALL.len();
const _: () = assert!(PE_COUNTERS < PE_WORDS, "the PE block is full");
/// The operations with a latency histogram, in this order.
pub const HIST_OPS: [&str; 3] = ["put", "get", "atomic"];
/// Buckets of a histogram.
pub const HIST_BUCKETS: usize = 16 + HIST_GROUPS * 16;
/// Powers of two above 16 the buckets cover (up to 2^40 ticks).
const HIST_GROUPS: usize = 36;
/// Words of a histogram block: sequence, count, sum, max, buckets.
pub const HIST_WORDS: usize = 4 + HIST_BUCKETS;
/// Context slots of a segment (one per live context of the PE).
pub const SLOTS: usize = crate::context::MAX_CONTEXTS;
const _: () = assert!(SLOTS <= 64, "the slot bitmaps are one word");
const PAGE: usize = 4096;
const HEADER_WORDS: usize = 16;
const WIDE_OFF: usize = HEADER_WORDS;
/// The shared blocks: one per (peer, transport), from the second page.
const STATE_OFF: usize = PAGE / 8;
/// Words of a shared (peer, transport) block ([`SharedWord`]; the
/// sequence word first).
pub const SHARED_WORDS: usize = 8;
/// A slot's peer blocks, after its PE block.
const SLOT_PEER_REL: usize = PE_WORDS;
/// Words of a slot's dense shared-memory row per peer: ops, and the bytes
/// beyond 8 per op (wrapping; the bytes are `8 ops + that`), outside any
/// seqlock: the shm leg's count.
pub const SHM_ROW_WORDS: usize = 2;
/// The header word holding the ready word (its low half).
const READY_WORD: usize = switchyard_shm::OBJECT_READY_OFFSET / 8;
const _: () = assert!(switchyard_shm::OBJECT_READY_OFFSET == 56);
/// The header word counting publishes.
const PUBLISHES_WORD: usize = 8;
/// The header word naming the slots ever taken (bit `k`: slot `k`).
const SLOTS_USED_WORD: usize = 9;
/// The header word holding [`SLOTS`].
const SLOTS_WORD: usize = 10;
/// The header word holding [`CHANNELS`].
const CHANNELS_WORD: usize = 11;
const _: () = assert!(WIDE_OFF + N_TRANSPORTS * BLOCK_WORDS <= STATE_OFF);

/// The header's words (index = word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Header {
    /// Layout version ([`VERSION`]).
    pub version: u32,
    /// The PE.
    pub rank: u32,
    /// The job id.
    pub job_id: u64,
    /// The PE's process.
    pub pid: u32,
    /// PEs in the job.
    pub n_pes: u32,
    /// When the PE created the segment, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Units of the histograms: 0 the x86-64 TSC (convert with the
    /// reader's [`sys::ticks_per_second`](crate::sys::ticks_per_second), same
    /// node, same counter), 1 nanoseconds.
    pub tick_unit: u32,
    /// Transports ([`N_TRANSPORTS`]).
    pub n_transports: u32,
    /// Buckets per histogram ([`HIST_BUCKETS`]).
    pub hist_buckets: u32,
    /// Times the slow-path state (health, load, routes, driver counters)
    /// was published.
    pub publishes: u64,
}

macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $i:expr => $n:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub enum $name { $($(#[$vm])* $v = $i,)* }
        impl $name {
            /// Every word, in order.
            pub const ALL: &[$name] = &[$($name::$v,)*];
            /// Its name in `stat --json` and the Prometheus metric.
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $n,)* }
            }
        }
        // `ALL` is in word order with no gap: a block published by position
        // (`values[i]` into word `ALL[0] + i`) and read by word agree.
        const _: () = {
            let mut i = 0;
            while i < $name::ALL.len() {
                assert!(
                    $name::ALL[i] as usize == $name::ALL[0] as usize + i,
                    concat!(stringify!($name), "'s words are not dense and in order"),
                );
                i += 1;
            }
        };
    };
}

mod chan;

words! {
    /// Words of a peer block: counters of one (peer, transport).
    PeerWord {
        /// Operations issued (once each, whatever their attempts).
        Ops = 1 => "ops",
        /// Their payload bytes.
        Bytes = 2 => "bytes",
        /// Attempts that found the send window full and waited.
        Retries = 3 => "retries",
        /// Operations selected again elsewhere after this transport failed.
        Reroutes = 4 => "reroutes",
        /// Link failures of this transport toward the peer (health bit cleared).
        Failovers = 5 => "failovers",
        /// Operations that took this transport as a downgrade.
        Downgrades = 6 => "downgrades",
        /// Link-state transitions the driver reported.
        LinkTransitions = 7 => "link_transitions",
        /// Failed operations (the driver's error).
        Errors = 8 => "errors",
        /// State bits, published: [`STATE_HEALTHY`], [`STATE_LOADED`],
        /// [`STATE_ROUTE`], [`STATE_DEAD`].
        State = 9 => "state",
    }
}

words! {
    /// Words of a shared (peer, transport) block, written by the PE's one
    /// publisher (not by the contexts): the state bits and the driver's
    /// counters of the pair (the socket driver's, per peer and rail).
    SharedWord {
        /// State bits: [`STATE_HEALTHY`], [`STATE_LOADED`],
        /// [`STATE_ROUTE`], [`STATE_DEAD`] (stored whole, outside the
        /// block's seqlock).
        State = 1 => "state",
        /// Frames sent again to the peer on this transport after a failure
        /// (reconnect or failover).
        Replays = 2 => "replays",
        /// Frames from the peer received again on this transport and dropped.
        DedupDrops = 3 => "dedup_drops",
        /// Connections to the peer on this transport cut for a malformed
        /// frame (CRC or header check).
        CrcFailures = 4 => "crc_failures",
    }
}
const _: () = assert!((SharedWord::CrcFailures as usize) < SHARED_WORDS);

words! {
    /// Words of the PE block (mirrors [`Stats`](crate::context::Stats), published).
    PeWord {
        /// Barriers completed.
        Barriers = 1 => "barriers",
        /// Link transitions.
        LinkTransitions = 2 => "link_transitions",
        /// Links lost.
        LinksLost = 3 => "links_lost",
        /// Peers found dead.
        DeadPeers = 4 => "dead_peers",
        /// Reroutes after a failure.
        Reroutes = 5 => "reroutes",
        /// Verbs links that failed.
        VerbsFailovers = 6 => "verbs_failovers",
        /// Operations replayed over TCP after a verbs failure.
        VerbsReplays = 7 => "verbs_replays",
        /// Atomics run by the target's CPU instead of the NIC.
        CpuAtomics = 8 => "cpu_atomics",
        /// Cross-transport ordering waits.
        OrderingWaits = 9 => "ordering_waits",
        /// Load bits set or cleared.
        LoadTransitions = 10 => "load_transitions",
        /// Operations routed around a loaded transport.
        LoadYields = 11 => "load_yields",
        /// Progress-thread bursts.
        ProgressBursts = 12 => "progress_bursts",
        /// Downgrades, all classes.
        Downgrades = 13 => "downgrades",
        /// Link-state records sent.
        LinkRecordsSent = 14 => "link_records_sent",
        /// Link-state records applied.
        LinkRecordsApplied = 15 => "link_records_applied",
        /// Verbs operations posted on the context's own QP sets.
        VerbsSetOps = 16 => "verbs_set_ops",
        /// Openings of the context's QP sets refused.
        VerbsSetsRefused = 17 => "verbs_sets_refused",
    }
}
const _: () = assert!(PeWord::ALL[0] as usize == 1, "word 0 is the sequence");

words! {
    /// Words of a wide block: one driver's own counters (published; TCP's
    /// are the socket driver's, all rails, on `tcp0`).
    WideWord {
        /// Frames or work requests sent.
        FramesSent = 1 => "frames_sent",
        /// Frames received.
        FramesReceived = 2 => "frames_received",
        /// Bytes sent.
        BytesSent = 3 => "bytes_sent",
        /// Bytes received.
        BytesReceived = 4 => "bytes_received",
        /// Frames or operations replayed after a failure.
        Replays = 5 => "replays",
        /// Duplicate frames dropped.
        DedupDrops = 6 => "dedup_drops",
        /// Connections refused (handshakes).
        Refused = 7 => "refused_connections",
        /// Connections cut for a malformed frame (CRC or header check).
        CrcFailures = 8 => "crc_failures",
        /// Reconnect attempts.
        Reconnects = 9 => "reconnects",
        /// Failovers inside the driver (a rail's frames moved to another).
        Failovers = 10 => "failovers",
        /// Writes that found the socket buffer full.
        WouldBlock = 11 => "would_block",
    }
}

words! {
    /// Words of the verbs transport's wide block: the verbs driver's own
    /// counters (the PE's driver, shared by its contexts; published by the
    /// PE's first context, as the rest of the shared part).
    VerbsWord {
        /// Work requests posted.
        WorkRequests = 1 => "work_requests",
        /// Doorbells (post calls; a batch of work requests is one).
        Doorbells = 2 => "doorbells",
        /// Successful completions polled.
        Completions = 3 => "completions",
        /// Completions with an error status.
        CompletionErrors = 4 => "completion_errors",
        /// Calls that found the send queue, CQ credits or staging full.
        WouldBlock = 5 => "would_block",
        /// Operations that waited for a fence.
        FenceWaits = 6 => "fence_waits",
        /// Emulated atomics' compare-swaps retried after a lost race.
        CasRetries = 7 => "cas_retries",
        /// Operations offered for replay over TCP after a failure.
        Replays = 8 => "replays",
        /// Atomics failed with an unknown outcome.
        OutcomeUnknown = 9 => "outcome_unknown",
        /// Peers whose queue pairs went to Error.
        PeerFailures = 10 => "peer_failures",
        /// Queue-pair rebuilds done.
        Rebuilds = 11 => "rebuilds",
        /// Receipts of the peers' puts that landed here.
        Receipts = 12 => "receipts",
        /// Receive requests re-posted to the shared receive queue.
        RecvReposts = 13 => "recv_reposts",
        /// Puts in doubt given up without receipts (reported lost).
        ReceiptsAbandoned = 14 => "receipts_abandoned",
        /// Failures after which this side withheld its receipts.
        ReceiptsWithheld = 15 => "receipts_withheld",
    }
}

const _: () = assert!(WideWord::ALL[0] as usize == 1 && VerbsWord::ALL[0] as usize == 1);
const _: () = assert!(WideWord::ALL.len() < BLOCK_WORDS && VerbsWord::ALL.len() < BLOCK_WORDS);

/// The transport index of verbs, whose wide block holds [`VerbsWord`]s.
pub const VERBS_INDEX: usize = 1;

/// The names of transport `t`'s wide block words, in order.
pub fn wide_names(t: usize) -> Vec<&'static str> {
    if t == VERBS_INDEX {
        VerbsWord::ALL.iter().map(|w| w.name()).collect()
    } else {
        WideWord::ALL.iter().map(|w| w.name()).collect()
    }
}

/// State bit: the transport is healthy toward the peer.
pub const STATE_HEALTHY: u64 = 1;
/// State bit: the transport's load bit toward the peer is set.
pub const STATE_LOADED: u64 = 2;
/// State bit: the first healthy candidate of an 8-byte put to the peer.
pub const STATE_ROUTE: u64 = 4;
/// State bit: the peer is dead.
pub const STATE_DEAD: u64 = 8;

/// The histogram bucket of `v`, without a branch: values from 2^40 on are
/// clamped to the last bucket's (a conditional move); for `g`, the top bit
/// of `v` less 4 (0 below 32), the bucket is `16 g + (v >> g)`, where `v >>
/// g` is `v` below 32 (one bucket per value below 16) and else 16 plus the
/// value's next 4 bits.
#[inline]
pub const fn bucket(v: u64) -> usize {
    const MAX: u64 = (1 << (4 + HIST_GROUPS)) - 1;
    let v = if v < MAX { v } else { MAX };
    let g = 59 - (v | 16).leading_zeros() as usize;
    g * 16 + (v >> g) as usize
}

/// The smallest value of bucket `i` (values `bucket_low(i)..bucket_low(i + 1)`).
pub const fn bucket_low(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let g = (i - 16) / 16;
    let sub = ((i - 16) % 16) as u64;
    (16 + sub) << g
}

/// Object path of `rank`'s stats segment in `job_id`.
pub fn path(job_id: u64, rank: u32) -> PathBuf {
    std::path::Path::new(switchyard_shm::SHM_DIR).join(format!(
        "{}stats-{rank}",
        switchyard_shm::object_prefix(job_id)
    ))
}

/// Where things are in the segment of a job of `n_pes` (word offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    n_pes: u32,
    /// The channel table.
    chan_off: usize,
    /// The first slot.
    slots_off: usize,
    /// Words from one slot to the next (whole pages).
    stride: usize,
    /// The dense shm row, from a slot's start (after the peer blocks).
    shm_rel: usize,
    /// The histograms, from a slot's start (page-aligned).
    hist_rel: usize,
    /// Bytes of the object.
    len: usize,
}

impl Layout {
    pub(crate) fn new(n_pes: u32) -> Layout {
        let page = PAGE / 8;
        let pairs = n_pes as usize * N_TRANSPORTS;
        let chan_off = (STATE_OFF + pairs * SHARED_WORDS).div_ceil(page) * page;
        let slots_off = (chan_off + CHANNELS * CHANNEL_WORDS).div_ceil(page) * page;
        let shm_rel = SLOT_PEER_REL + pairs * BLOCK_WORDS;
        let hist_rel = (shm_rel + n_pes as usize * SHM_ROW_WORDS).div_ceil(page) * page;
        let stride = (hist_rel + HIST_OPS.len() * N_TRANSPORTS * HIST_WORDS).div_ceil(page) * page;
        Layout {
            n_pes,
            chan_off,
            slots_off,
            stride,
            shm_rel,
            hist_rel,
            len: (slots_off + SLOTS * stride) * 8,
        }
    }

    /// Slot `k`'s first word.
    pub(crate) fn slot(&self, k: usize) -> usize {
        self.slots_off + k * self.stride
    }

    /// Channel entry `k`'s first word.
    pub(crate) fn channel(&self, k: usize) -> usize {
        self.chan_off + k * CHANNEL_WORDS
    }

    /// The peer block of (`pe`, `t`), from a slot's start.
    pub(crate) fn peer_rel(pe: u32, t: usize) -> usize {
        SLOT_PEER_REL + (pe as usize * N_TRANSPORTS + t) * BLOCK_WORDS
    }

    /// The dense shm row of `pe`, from a slot's start.
    pub(crate) fn shm_row_rel(&self, pe: u32) -> usize {
        self.shm_rel + pe as usize * SHM_ROW_WORDS
    }

    /// The histogram of (`op`, `t`), from a slot's start.
    pub(crate) fn hist_rel(&self, op: usize, t: usize) -> usize {
        self.hist_rel + (op * N_TRANSPORTS + t) * HIST_WORDS
    }

    /// The shared block of (`pe`, `t`).
    pub(crate) fn shared(pe: u32, t: usize) -> usize {
        STATE_OFF + (pe as usize * N_TRANSPORTS + t) * SHARED_WORDS
    }
}

/// A PE's stats segment, shared by its contexts (each counts in its own
/// [`StatsSlot`]): created at init, unlinked when the last handle drops.
/// The shared part (the shared (peer, transport) blocks, the wide blocks,
/// the publish count) has one writer at a time: the PE's first context, or its progress
/// thread, which take turns on the TCP driver's entry lock.
pub struct StatsSegment {
    map: sys::Map,
    path: PathBuf,
    layout: Layout,
    /// The slots in use (bit `k`: slot `k`).
    slots: std::sync::Mutex<u64>,
    /// The channel table's entries in use and the next channel number.
    chans: std::sync::Mutex<chan::Table>,
}

impl std::fmt::Debug for StatsSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsSegment")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StatsSegment {
    /// Creates `rank`'s segment of `job_id` (mode 0600, exclusive; an
    /// object left by an earlier process of this rank and job is replaced).
    /// Its slots' pages are allocated when a context takes the slot
    /// ([`StatsSegment::slot`]), so the object's size is mostly a hole.
    ///
    /// # Errors
    ///
    /// The system call that failed (`/dev/shm` full, not writable).
    pub fn create(job_id: u64, rank: u32, n_pes: u32) -> io::Result<Arc<StatsSegment>> {
        let path = path(job_id, rank);
        let layout = Layout::new(n_pes);
        let map = sys::Map::create(&path, layout.len)?;
        let seg = StatsSegment {
            map,
            path,
            layout,
            slots: std::sync::Mutex::new(0),
            chans: std::sync::Mutex::default(),
        };
        let w = seg.map.words();
        // The header page, the shared blocks and the channel table:
        // allocated now, not on the data path.
        touch(&w[..layout.slots_off]);
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let tick_unit = u64::from(cfg!(not(target_arch = "x86_64")));
        let pid = u64::from(std::process::id());
        let head = [
            MAGIC,
            u64::from(VERSION) | u64::from(rank) << 32,
            job_id,
            pid | u64::from(n_pes) << 32,
            start,
            N_TRANSPORTS as u64 | (HIST_BUCKETS as u64) << 32,
            tick_unit,
        ];
        for (i, v) in head.iter().enumerate() {
            w[i].store(*v, Ordering::Relaxed);
        }
        w[SLOTS_WORD].store(SLOTS as u64, Ordering::Relaxed);
        w[CHANNELS_WORD].store(CHANNELS as u64, Ordering::Relaxed);
        // The ready word last (the heap object's READY at byte 56): a reader
        // or the stale cleanup seeing it sees the header.
        // SYNC POINT with the Acquire load in `read::Reader::open`.
        w[READY_WORD].store(u64::from(switchyard_shm::OBJECT_READY), Ordering::Release);
        Ok(Arc::new(seg))
    }

    /// Where the object is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The lowest free slot, for one context (its pages allocated now), or
    /// `None` when all [`SLOTS`] are taken. A slot freed by a dropped
    /// context keeps its counts: the next context adds to them.
    pub fn slot(self: &Arc<Self>) -> Option<StatsSlot> {
        let mut used = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (!*used).trailing_zeros() as usize;
        if k >= SLOTS {
            return None;
        }
        *used |= 1 << k;
        let base = self.layout.slot(k);
        let w = self.map.words();
        touch(&w[base..base + self.layout.stride]);
        let ever = &w[SLOTS_USED_WORD];
        // Under `slots`: one writer at a time. Readers sum the slots named
        // here.
        // SYNC POINT with the Acquire load of the word in `read::Reader::snapshot`.
        ever.store(ever.load(Ordering::Relaxed) | 1 << k, Ordering::Release);
        // The slot's peer blocks are inside the mapping: `base` is a slot's
        // start, and a slot's `stride` words hold them.
        debug_assert!(base + self.layout.shm_row_rel(self.layout.n_pes) <= w.len());
        Some(StatsSlot {
            seg: Arc::clone(self),
            index: k,
            base,
            peers: w[base + SLOT_PEER_REL..].as_ptr(),
            shm_row: w[base + self.layout.shm_rel..].as_ptr(),
            n_pes: self.layout.n_pes,
        })
    }

    /// The shared block of (`t`, `pe`), when both are in range.
    fn shared(&self, t: usize, pe: u32) -> Option<&[AtomicU64]> {
        if pe < self.layout.n_pes && t < N_TRANSPORTS {
            let at = Layout::shared(pe, t);
            self.map.words().get(at..at + SHARED_WORDS)
        } else {
            None
        }
    }

    /// Sets the state bits of (`t`, `pe`): one word, stored whole; one
    /// publisher at a time.
    pub fn set_state(&self, t: usize, pe: u32, bits: u64) {
        if let Some(b) = self.shared(t, pe) {
            let w = &b[SharedWord::State as usize];
            if w.load(Ordering::Relaxed) != bits {
                w.store(bits, Ordering::Relaxed);
            }
        }
    }

    /// The state bits of (`t`, `pe`) as last set (0 out of range).
    pub fn state(&self, t: usize, pe: u32) -> u64 {
        self.shared(t, pe)
            .map_or(0, |b| b[SharedWord::State as usize].load(Ordering::Relaxed))
    }

    /// Publishes the driver's counters of (`t`, `pe`): `[replays, dedup
    /// drops, CRC failures]` ([`SharedWord`]), under the block's seqlock
    /// (nothing is written when they have not changed); one publisher at a
    /// time.
    pub fn set_peer_counts(&self, t: usize, pe: u32, values: [u64; 3]) {
        let Some(b) = self.shared(t, pe) else { return };
        let first = SharedWord::Replays as usize;
        let same = b[first..first + 3]
            .iter()
            .zip(values)
            .all(|(w, v)| w.load(Ordering::Relaxed) == v);
        if !same {
            write_block(b, |b| {
                for (w, v) in b[first..first + 3].iter().zip(values) {
                    w.store(v, Ordering::Relaxed);
                }
            });
        }
    }

    /// Publishes transport `t`'s wide block (`values[i]` is word
    /// `WideWord::ALL[i]`); one publisher at a time (see the type's docs).
    pub fn set_wide(&self, t: usize, values: &[u64]) {
        if t < N_TRANSPORTS {
            let at = WIDE_OFF + t * BLOCK_WORDS;
            publish(&self.map.words()[at..at + BLOCK_WORDS], values);
        }
    }

    /// Counts one publish in the header (readers see the state's age); one
    /// publisher at a time.
    pub fn published(&self) {
        add(&self.map.words()[PUBLISHES_WORD], 1);
    }
}

impl Drop for StatsSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes each page of `words` once (the value it holds), so the kernel
/// allocates them now rather than on the data path.
fn touch(words: &[AtomicU64]) {
    for w in words.iter().step_by(PAGE / 8) {
        w.store(w.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// One context's part of the segment: its PE block, peer blocks and
/// histograms, which only it writes (readers sum the slots). Every method
/// is a few Relaxed loads and stores into the mapping. Dropping it frees
/// the slot for the PE's next context.
pub struct StatsSlot {
    seg: Arc<StatsSegment>,
    index: usize,
    /// The slot's first word.
    base: usize,
    /// The slot's first peer block, in the mapping `seg` keeps alive (so
    /// that [`StatsSlot::op`] reaches its words in one step).
    peers: *const AtomicU64,
    /// The slot's dense shm row (PE 0's words), in the same mapping.
    shm_row: *const AtomicU64,
    /// PEs in the job: the peer blocks' rows.
    n_pes: u32,
}

// SAFETY: `peers` and `shm_row` point into the shared mapping that `seg` owns and keeps
// mapped; every access through it is an atomic load or store, as through
// the mapping itself (`sys::Map` is `Send` and `Sync` for the same reason).
#[allow(unsafe_code)]
unsafe impl Send for StatsSlot {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for StatsSlot {}

impl std::fmt::Debug for StatsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsSlot")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl StatsSlot {
    /// The segment.
    pub fn segment(&self) -> &Arc<StatsSegment> {
        &self.seg
    }

    /// The slot's number (0 for the PE's first context).
    pub fn index(&self) -> usize {
        self.index
    }

    #[inline(always)]
    fn peer_block(&self, t: usize, pe: u32) -> Option<&[AtomicU64]> {
        if pe >= self.seg.layout.n_pes || t >= N_TRANSPORTS {
            return None;
        }
        let at = self.base + Layout::peer_rel(pe, t);
        self.seg.map.words().get(at..at + BLOCK_WORDS)
    }

    /// One operation of `bytes` to `pe` over transport `t`: ops and bytes.
    /// The fast path: two plain single-writer words, outside the block's
    /// sequence word (each is atomic on its own; a snapshot may show an
    /// operation's count a moment before its bytes), so that the per-put
    /// cost is two compares and two adds to memory (a Relaxed load and
    /// store that the compiler folds into one `add` on x86-64; the shm leg
    /// uses `ShmCounts` and the slot's dense shm row, one compare); the
    /// block's other words change rarely and keep the seqlock.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub fn op(&self, t: usize, pe: u32, bytes: u64) {
        if pe < self.n_pes && t < N_TRANSPORTS {
            let at = (pe as usize * N_TRANSPORTS + t) * BLOCK_WORDS;
            debug_assert!(self.base + SLOT_PEER_REL + at + BLOCK_WORDS <= self.seg.map.len());
            // SAFETY: `create` mapped `layout.len` bytes, which hold
            // `SLOTS` slots of `n_pes * N_TRANSPORTS` peer blocks of
            // `BLOCK_WORDS` words each; `peers` is this slot's first peer
            // block: with `pe < n_pes` and `t < N_TRANSPORTS`, both words
            // are inside the live mapping `self.seg` owns, and every
            // access to it is atomic.
            let (ops, b) = unsafe {
                let w = self.peers.add(at);
                (
                    &*w.add(PeerWord::Ops as usize),
                    &*w.add(PeerWord::Bytes as usize),
                )
            };
            add(ops, 1);
            add(b, bytes);
        }
    }

    /// The slot's dense shm row, for the shm leg's count
    /// ([`ShmCounts::op`]).
    pub(crate) fn shm_counts(&self) -> ShmCounts {
        ShmCounts {
            row0: self.shm_row,
            rows: self.n_pes,
        }
    }

    /// The operations this slot counted per transport, over all peers
    /// (what [`StatsSlot::op`] and the shm leg (`ShmCounts::op`) added since the
    /// segment was made, by this context and the slot's earlier ones).
    pub fn ops_by_transport(&self) -> [u64; N_TRANSPORTS] {
        let mut ops = [0u64; N_TRANSPORTS];
        let w = self.seg.map.words();
        for pe in 0..self.n_pes {
            for (t, o) in ops.iter_mut().enumerate() {
                if let Some(b) = self.peer_block(t, pe) {
                    *o = o.wrapping_add(b[PeerWord::Ops as usize].load(Ordering::Relaxed));
                }
            }
            let row = self.base + self.seg.layout.shm_row_rel(pe);
            ops[0] = ops[0].wrapping_add(shm_row(&w[row..row + SHM_ROW_WORDS])[0]);
        }
        ops
    }

    /// Adds 1 to one counter of (`t`, `pe`).
    #[inline]
    pub fn bump(&self, t: usize, pe: u32, word: PeerWord) {
        if let Some(b) = self.peer_block(t, pe) {
            write_block(b, |b| add(&b[word as usize], 1));
        }
    }

    /// The PE block's counters as last published (`[i]` is word
    /// `PeWord::ALL[i]`): what an earlier context of this slot left, for
    /// the next to add to (the slot is this handle's alone).
    pub fn pe_counts(&self) -> [u64; PE_COUNTERS] {
        let w = self.seg.map.words();
        let b = &w[self.base + 1..self.base + 1 + PE_COUNTERS];
        std::array::from_fn(|i| b[i].load(Ordering::Relaxed))
    }

    /// Publishes this context's PE block (`values[i]` is word
    /// `PeWord::ALL[i]`).
    pub fn set_pe(&self, values: &[u64; PE_COUNTERS]) {
        let w = self.seg.map.words();
        publish(&w[self.base..self.base + PE_WORDS], values);
    }

    /// One sampled latency of `ticks` for operation `op` (an index of
    /// [`HIST_OPS`]) over transport `t`.
    #[inline]
    pub fn latency(&self, op: usize, t: usize, ticks: u64) {
        if op >= HIST_OPS.len() || t >= N_TRANSPORTS {
            return;
        }
        let at = self.base + self.seg.layout.hist_rel(op, t);
        let Some(h) = self.seg.map.words().get(at..at + HIST_WORDS) else {
            return;
        };
        write_block(h, |h| {
            add(&h[1], 1);
            add(&h[2], ticks);
            if h[3].load(Ordering::Relaxed) < ticks {
                h[3].store(ticks, Ordering::Relaxed);
            }
            add(&h[4 + bucket(ticks)], 1);
        });
    }
}

/// A slot's dense shared-memory row, where the shm leg counts: per peer
/// [`SHM_ROW_WORDS`] adjacent words (ops; the bytes beyond 8 per op,
/// wrapping), so that a peer's words are one shift from the row's start;
/// one compare (the peer against the rows, 0 without a slot, so that the
/// same compare tells whether there is a slot) and one add to memory for
/// an 8-byte operation (a length known at compile time folds its compare
/// with 8), a compare and a second add for other lengths. Readers add a peer's row to its (peer, shm) peer
/// block, where the generic loop counts (a downgraded shm route). Only
/// valid while the slot it came from ([`StatsSlot::shm_counts`]) lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShmCounts {
    /// The slot's dense shm row (PE 0's words).
    row0: *const AtomicU64,
    /// PEs in the job; 0 for none (no slot).
    rows: u32,
}

impl Default for ShmCounts {
    fn default() -> ShmCounts {
        ShmCounts {
            row0: std::ptr::null(),
            rows: 0,
        }
    }
}

// SAFETY: `row0` points into a slot's shared mapping (or is null with no
// rows); every access through it is an atomic load or store, as through
// `StatsSlot::peers`.
#[allow(unsafe_code)]
unsafe impl Send for ShmCounts {}

impl ShmCounts {
    /// One operation of `bytes` to `pe` over shared memory, counted when
    /// `pe` has a row: `false` (nothing counted) without a slot (or for a
    /// `pe` out of range).
    ///
    /// # Safety
    ///
    /// The slot these came from still lives (its mapping is kept).
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn op(&self, pe: u32, bytes: u64) -> bool {
        if pe >= self.rows {
            return false;
        }
        let at = pe as usize * SHM_ROW_WORDS;
        // SAFETY: with rows, `row0` is a live slot's dense shm row (the
        // caller's contract): `rows * SHM_ROW_WORDS` words inside the
        // mapping (`Layout::new` puts them before the slot's histograms),
        // so with `pe < rows` both words are in it, and every access is
        // atomic.
        let (ops, extra) = unsafe {
            let w = self.row0.add(at);
            (&*w, &*w.add(1))
        };
        add(ops, 1);
        if bytes != 8 {
            add(extra, bytes.wrapping_sub(8));
        }
        true
    }
}

impl Drop for StatsSlot {
    fn drop(&mut self) {
        let mut used = self
            .seg
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *used &= !(1 << self.index);
    }
}

/// A peer's dense shm row as `[ops, bytes]` (Relaxed loads; each word
/// whole, the two not consistent with each other: the bytes may lack, or
/// count 8 for, an operation whose other word was not seen).
pub(crate) fn shm_row(row: &[AtomicU64]) -> [u64; 2] {
    let ops = row[0].load(Ordering::Relaxed);
    let extra = row[1].load(Ordering::Relaxed);
    [ops, ops.wrapping_mul(8).wrapping_add(extra)]
}

/// A single writer's add: a Relaxed load and a Relaxed store (no RMW).
#[inline(always)]
fn add(w: &AtomicU64, v: u64) {
    w.store(w.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// Runs `f` on `block` between the two sequence stores of its seqlock.
#[inline(always)]
fn write_block(block: &[AtomicU64], f: impl FnOnce(&[AtomicU64])) {
    let s = block[0].load(Ordering::Relaxed);
    block[0].store(s.wrapping_add(1), Ordering::Relaxed);
    // The odd sequence is visible before any of the block's new words.
    // SYNC POINT with the Acquire fence in `read::read_block`.
    fence(Ordering::Release);
    f(block);
    // SYNC POINT with the Acquire load of the sequence in `read::read_block`.
    block[0].store(s.wrapping_add(2), Ordering::Release);
}

fn publish(block: &[AtomicU64], values: &[u64]) {
    write_block(block, |b| {
        for (w, v) in b[1..].iter().zip(values) {
            w.store(*v, Ordering::Relaxed);
        }
    });
}

#[cfg(test)]
mod test;
