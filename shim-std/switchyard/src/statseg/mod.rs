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
//! | bytes | what |
//! | --- | --- |
//! | 0..128 | header ([`Header`]), by word: 0 magic [`MAGIC`]; 1 version (low half), rank (high); 2 job id; 3 pid, n_pes; 4 start time (ns since the epoch); 5 transports, buckets per histogram; 6 tick unit; 7 the ready word ([`OBJECT_READY`](switchyard_shm::OBJECT_READY), stored last); 8 publishes |
//! | 128..256 | the PE block: [`PeWord`] |
//! | 256..256+128·T | a wide block per transport ([`WideWord`]): the driver-wide counters (TCP's on `tcp0`) |
//! | 4096.. | a peer block per (peer, transport), peer-major ([`PeerWord`]) |
//! | after, page-aligned | a histogram per (op, transport), op-major ([`HIST_OPS`]; [`HIST_WORDS`] words each) |
//!
//! `T` is [`N_TRANSPORTS`] (shm, verbs, tcp0..tcp3). Every block starts with
//! a sequence word; a counter block is [`BLOCK_WORDS`] words.
//!
//! # Consistency: one seqlock per block
//!
//! Each block has one writer, the PE's context thread. It makes the
//! sequence word odd (Relaxed store, then a Release fence), stores the
//! block's words (Relaxed load + store each: no read-modify-write), and
//! makes the sequence even again (Release store). A reader loads the
//! sequence (Acquire), retries while odd, copies the words (Relaxed), then
//! an Acquire fence and a reload of the sequence: equal means the copy is
//! one state of the block. On x86-64 the writer's cost is plain stores;
//! every word is also individually atomic, so a reader that gives up
//! retrying (a writer killed mid-update) still sees whole counters.
//! Blocks are not consistent with each other (no global stop). One
//! exception, for the per-operation cost: a peer block's ops and bytes
//! words are stored outside its seqlock ([`StatsSegment::op`]), so a
//! snapshot may count an operation before its bytes.
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

use std::{io, path::PathBuf};

pub use read::{Job, PeerRow, Reader, Snapshot, find_jobs, transport_name};
use switchyard_core::sync::atomic::{AtomicU64, Ordering, fence};
pub use text::{HistRow, prometheus, summary, ticks_to_ns};

/// The magic word at offset 0.
pub const MAGIC: u64 = switchyard_shm::STATS_MAGIC;
/// The layout version this build writes and reads.
pub const VERSION: u32 = 1;
/// Transports with counters: shm, verbs, tcp0..tcp3 (the context's ids).
pub const N_TRANSPORTS: usize = crate::context::N_TRANSPORTS as usize;
/// Words of a counter block (the sequence word first).
pub const BLOCK_WORDS: usize = 16;
/// The operations with a latency histogram, in this order.
pub const HIST_OPS: [&str; 3] = ["put", "get", "atomic"];
/// Buckets of a histogram.
pub const HIST_BUCKETS: usize = 16 + HIST_GROUPS * 16;
/// Powers of two above 16 the buckets cover (up to 2^40 ticks).
const HIST_GROUPS: usize = 36;
/// Words of a histogram block: sequence, count, sum, max, buckets.
pub const HIST_WORDS: usize = 4 + HIST_BUCKETS;
const PAGE: usize = 4096;
const HEADER_WORDS: usize = 16;
const PE_OFF: usize = HEADER_WORDS;
const WIDE_OFF: usize = PE_OFF + BLOCK_WORDS;
const PEER_OFF: usize = PAGE / 8;
/// The header word holding the ready word (its low half).
const READY_WORD: usize = switchyard_shm::OBJECT_READY_OFFSET / 8;
const _: () = assert!(switchyard_shm::OBJECT_READY_OFFSET == 56);
/// The header word counting publishes.
const PUBLISHES_WORD: usize = 8;
const _: () = assert!(WIDE_OFF + N_TRANSPORTS * BLOCK_WORDS <= PEER_OFF);

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
    };
}

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
    }
}

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

/// State bit: the transport is healthy toward the peer.
pub const STATE_HEALTHY: u64 = 1;
/// State bit: the transport's load bit toward the peer is set.
pub const STATE_LOADED: u64 = 2;
/// State bit: the first healthy candidate of an 8-byte put to the peer.
pub const STATE_ROUTE: u64 = 4;
/// State bit: the peer is dead.
pub const STATE_DEAD: u64 = 8;

/// The histogram bucket of `v`.
#[inline]
pub const fn bucket(v: u64) -> usize {
    if v < 16 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize;
    if e >= 4 + HIST_GROUPS {
        return HIST_BUCKETS - 1;
    }
    let sub = ((v >> (e - 4)) & 15) as usize;
    16 + (e - 4) * 16 + sub
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

/// Bytes of the segment of a job of `n_pes`.
pub(crate) fn layout_len(n_pes: u32) -> (usize, usize) {
    let peer_words = n_pes as usize * N_TRANSPORTS * BLOCK_WORDS;
    let hist_off = (PEER_OFF + peer_words).div_ceil(PAGE / 8) * (PAGE / 8);
    let words = hist_off + HIST_OPS.len() * N_TRANSPORTS * HIST_WORDS;
    (hist_off, (words * 8).div_ceil(PAGE) * PAGE)
}

/// The writer's handle on its own stats segment: created at init, unlinked
/// on drop. Every method is a few Relaxed stores into the mapping.
pub struct StatsSegment {
    map: sys::Map,
    path: PathBuf,
    n_pes: u32,
    hist_off: usize,
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
    ///
    /// # Errors
    ///
    /// The system call that failed (`/dev/shm` full, not writable).
    pub fn create(job_id: u64, rank: u32, n_pes: u32) -> io::Result<StatsSegment> {
        let path = path(job_id, rank);
        let (hist_off, len) = layout_len(n_pes);
        let map = sys::Map::create(&path, len)?;
        let seg = StatsSegment {
            map,
            path,
            n_pes,
            hist_off,
        };
        let w = seg.map.words();
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
        // The ready word last (the heap object's READY at byte 56): a reader
        // or the stale cleanup seeing it sees the header.
        // SYNC POINT with the Acquire load in `read::Reader::open`.
        w[READY_WORD].store(u64::from(switchyard_shm::OBJECT_READY), Ordering::Release);
        Ok(seg)
    }

    /// Where the object is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    #[inline(always)]
    fn peer_block(&self, t: usize, pe: u32) -> Option<&[AtomicU64]> {
        if pe >= self.n_pes || t >= N_TRANSPORTS {
            return None;
        }
        let at = PEER_OFF + (pe as usize * N_TRANSPORTS + t) * BLOCK_WORDS;
        self.map.words().get(at..at + BLOCK_WORDS)
    }

    /// One operation of `bytes` to `pe` over transport `t`: ops and bytes.
    /// The fast path: two plain single-writer words, outside the block's
    /// sequence word (each is atomic on its own; a snapshot may show an
    /// operation's count a moment before its bytes), so that the per-put
    /// cost is two compares, two loads and two stores; the block's other
    /// words change rarely and keep the seqlock.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub fn op(&self, t: usize, pe: u32, bytes: u64) {
        if pe < self.n_pes && t < N_TRANSPORTS {
            let at = PEER_OFF + (pe as usize * N_TRANSPORTS + t) * BLOCK_WORDS;
            debug_assert!(at + BLOCK_WORDS <= self.map.len());
            // SAFETY: `create` mapped `layout_len(n_pes)` bytes, which hold
            // the `n_pes * N_TRANSPORTS` peer blocks of `BLOCK_WORDS` words
            // from `PEER_OFF` (before `hist_off`): with `pe < n_pes` and
            // `t < N_TRANSPORTS` both words are inside the live mapping
            // `self.map` owns, and every access to it is atomic.
            let (ops, b) = unsafe {
                let w = self.map.base().add(at);
                (
                    &*w.add(PeerWord::Ops as usize),
                    &*w.add(PeerWord::Bytes as usize),
                )
            };
            add(ops, 1);
            add(b, bytes);
        }
    }

    /// Adds 1 to one counter of (`t`, `pe`).
    #[inline]
    pub fn bump(&self, t: usize, pe: u32, word: PeerWord) {
        if let Some(b) = self.peer_block(t, pe) {
            write_block(b, |b| add(&b[word as usize], 1));
        }
    }

    /// Sets the state bits of (`t`, `pe`) (a published word).
    pub fn set_state(&self, t: usize, pe: u32, bits: u64) {
        if let Some(b) = self.peer_block(t, pe)
            && b[PeerWord::State as usize].load(Ordering::Relaxed) != bits
        {
            write_block(b, |b| {
                b[PeerWord::State as usize].store(bits, Ordering::Relaxed)
            });
        }
    }

    /// Publishes the PE block (`values[i]` is word `PeWord::ALL[i]`).
    pub fn set_pe(&self, values: &[u64; 15]) {
        let w = self.map.words();
        publish(&w[PE_OFF..PE_OFF + BLOCK_WORDS], values);
    }

    /// Publishes transport `t`'s wide block (`values[i]` is word
    /// `WideWord::ALL[i]`).
    pub fn set_wide(&self, t: usize, values: &[u64; 11]) {
        if t < N_TRANSPORTS {
            let at = WIDE_OFF + t * BLOCK_WORDS;
            publish(&self.map.words()[at..at + BLOCK_WORDS], values);
        }
    }

    /// Counts one publish in the header (readers see the state's age).
    pub fn published(&self) {
        add(&self.map.words()[PUBLISHES_WORD], 1);
    }

    /// One sampled latency of `ticks` for operation `op` (an index of
    /// [`HIST_OPS`]) over transport `t`.
    #[inline]
    pub fn latency(&self, op: usize, t: usize, ticks: u64) {
        if op >= HIST_OPS.len() || t >= N_TRANSPORTS {
            return;
        }
        let at = self.hist_off + (op * N_TRANSPORTS + t) * HIST_WORDS;
        let Some(h) = self.map.words().get(at..at + HIST_WORDS) else {
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

impl Drop for StatsSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
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
