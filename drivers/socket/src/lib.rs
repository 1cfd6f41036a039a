//! # switchyard-socket: the TCP transport of switchyard
//!
//! One [`SocketDriver`] per PE moves puts, gets and atomics to other PEs' symmetric
//! heaps over TCP, on 1 to [`MAX_RAILS`] *rails* (one local address each, e.g.
//! two NICs). It implements the core transport contract per rail through
//! [`Rail`] (`driver.rail(r)`), so the shim can fall back from one rail to
//! another exactly as it falls back from one transport to another.
//!
//! ## Connections and frames
//!
//! Per peer pair and rail: one control connection and
//! [`TcpConfig::data_connections`] data connections, non-blocking, `TCP_NODELAY`.
//! The lower rank connects, the higher accepts; each connection starts with a
//! challenge-response handshake in which both sides prove the job's key
//! ([`TcpConfig::key`], [`handshake`]); a connection without the proof is
//! refused and counted ([`Event::Refused`]). With connect-on-first-use
//! ([`SocketDriver::set_connect_on_first_use`], for jobs whose PEs fetch a
//! peer's card only when they first need it) either side connects, at its
//! first operation toward the peer ([`SocketDriver::connect_on_first_use`]),
//! and reconnects after a failure; the other accepts a peer it never
//! declared once the handshake proved the key; when both connect at once
//! the lower rank's connection is kept. Such a "stranger" (its address was
//! never announced here) takes a handshake slot from a budget of 32 that
//! declared peers' reconnects never share, so a crowd of strangers or a
//! flood cannot starve failover; a crowd larger than the budget is
//! admitted a budget at a time (a stranger's handshake is closed for a
//! newer one only after 20 ms to answer, else the newer one is turned away
//! and retries after its backoff delay), and 200 PEs connecting to one at
//! once all get through (`tests/strangers.rs`). Every frame is the core
//! wire format ([`switchyard_core::wire`]): a checked 64-byte header,
//! CRC32C always over the header and over the payload per [`CrcPolicy`];
//! except small puts (1 to 255 bytes) to a peer whose `Hello` offered it
//! ([`TcpConfig::compact_puts`]): a 40-byte [`compact`] header, CRC32C over
//! header and payload, the same sequence, ack and replay rules. The
//! receiving side is [`decode::StreamDecoder`], which never panics on bad
//! input (fuzzed).
//!
//! ## Exactly once, across failures
//!
//! Put, get and atomic frames to a peer take sequence numbers from one space
//! shared by all rails. The sender keeps each frame in a fixed replay buffer of
//! [`TcpConfig::window`] bytes until the peer acknowledges it (gets and fetching
//! atomics until answered); the receiver deduplicates by sequence (a window of
//! 4096 frames) and answers a replayed fetching atomic from a cache, so every
//! operation is applied exactly once. A full buffer is `WouldBlock`: a slow
//! target pushes back and memory never grows.
//!
//! A rail that received nothing for [`TcpConfig::detection_window`] (heartbeats
//! keep idle rails alive) or whose connection failed is *Down* for that peer:
//! its unacknowledged frames move to another Up rail at once, or wait for the
//! reconnect (exponential backoff with full jitter) and are replayed. A peer
//! Down on every rail for [`TcpConfig::give_up`], or refusing connections
//! twice after having been connected, is dead ([`Event::PeerDead`]): its
//! pending operations fail once, naming it, and new ones fail at once.
//!
//! ## Load
//!
//! [`SocketDriver::backlog`] reports, per (peer, rail), the frames not yet
//! complete at the peer (unacknowledged, or waiting for their reply) and
//! their bytes, to compare with [`SocketDriver::backlog_capacity`] (e.g.
//! against the load watermark, [`Backlog::exceeds`]). It reads counters the
//! replay ring keeps as frames are queued, acknowledged, answered and moved
//! between rails: O(1), no allocation.
//!
//! ## Allocation and time
//!
//! Buffers are sized at [`SocketDriver::set_peer`]; nothing on the data path
//! (`put`, `get_*`, `atomic_*`, `progress`, `quiet_poll`) allocates, locks or
//! formats. Time comes from the `now` arguments only (the driver reads the
//! clock only to seed jitter and inside [`SocketDriver::connect_all`]).
//!
//! ## Busy polling
//!
//! The driver sets no `SO_BUSY_POLL`: its sockets are non-blocking and a
//! busy-polling caller already spins in user space on `recv`. On loopback
//! the option measured nothing (`cargo run --release -p switchyard-socket
//! --example pingpong 20000 50`: a raw 64-byte ping-pong with
//! `SO_BUSY_POLL` 50 µs and `SO_PREFER_BUSY_POLL`, one-way p50 5.88 to 6.23
//! µs, against 5.33 to 5.85 µs without, three runs): loopback traffic has
//! no NIC queue (NAPI id) for the kernel to poll. Raising it above
//! `net.core.busy_read` also needs `CAP_NET_ADMIN` (`EPERM`).
//!
//! ## Modules
//!
//! The driver, `driver`, holds [`SocketDriver`] (construction, peers,
//! accessors, close) and one submodule per concern:
//!
//! | module | what it is |
//! | --- | --- |
//! | `driver::operations` | the initiator's calls: put, get, atomic, on one rail |
//! | `driver::tickets` | the tables of outstanding gets and atomics (tickets) |
//! | `driver::send` | wire out: frames sealed into the replay ring, then written |
//! | `driver::receive` | wire in: sockets read and decoded, frames applied at the target |
//! | `driver::recovery` | acks, `quiet`, fence rules, failover and replay |
//! | `driver::connection` | per peer and rail: connect, handshake, Up/Down, reconnect, give-up |
//! | `driver::progress` | the progress loop: listeners, rails, timers, heartbeats, parking |
//!
//! Beside it: `rail` ([`Rail`], [`SingleRail`]: the core transport
//! contract per rail), `replay` (the sender's replay ring, one per peer),
//! [`dedup`] (the receiver's window of applied sequences), [`decode`] (frames
//! out of a byte stream), [`handshake`] (the `Hello` payload), `backoff`
//! (reconnect delays), `heap` (the local heap: copies and atomics), `sys`
//! (every libc call), `probe` ([`probe()`]: the network interfaces).
//!
//! ## The path of a put
//!
//! 1. `driver.rail(r).put(pe, offset, src, cx)`: [`Rail`] calls the
//!    driver's `put` (`driver::operations`), which checks the range and that
//!    rail `r` is Up toward `pe` (a put to this PE is a copy in its own heap).
//! 2. `send::put_frames` applies the fence rule (`recovery::check_fence`)
//!    and cuts the put at placement blocks of
//!    [`TcpConfig::max_frame_payload`] bytes; `send::push_frame` seals each
//!    piece (header, CRC, payload) into `pe`'s replay ring under the next
//!    sequence, on rail `r` and the data connection of its block, if the
//!    credit window and the ramp allow; else the put is `WouldBlock` and its
//!    retry continues where it stopped.
//! 3. `send::kick` writes what the ring holds for the rail's data
//!    connections (`send::flush_conn`): the frames waiting on a connection
//!    are gathered into one `send`/`sendmsg` (up to 32 frames per write, a
//!    payload from the heap without a copy). The first small put after a
//!    progress step is written at once; the small puts queued behind it
//!    before the next progress step (a send is in flight) wait for that step
//!    or until 32 are queued, and go out together; puts of 4 KiB or more,
//!    the first put after a fence, gets and atomics are written at once
//!    (with what queued before them). What the socket does not take
//!    goes out in later progress steps ([`SocketStats::writes`] counts the
//!    writes).
//! 4. At the target, [`SocketDriver::progress`] (`driver::progress`) reads
//!    the connection (`receive::read_conn`) into its
//!    [`StreamDecoder`](decode::StreamDecoder), which hands out checked
//!    frames; `receive::handle_frame` drops a sequence already applied
//!    (`dedup`), writes the payload into the heap, and owes an ack.
//! 5. The ack comes back on the next frame toward the initiator, or alone
//!    (`recovery::send_acks`, in a progress step once 64 frames or a quarter
//!    of the window wait for it, or the oldest waited 200 µs, or at once when
//!    the initiator asks); the initiator's `recovery::on_ack` releases the
//!    ring up to it, and [`SocketDriver::quiet_poll`] is true once every ring
//!    is empty. To ask, `quiet_poll` marks the last frame still queued
//!    toward the peer `ACK_NOW` before its progress step writes it
//!    (`send::flag_last_for_ack`; a compact frame only to a peer whose
//!    `Hello` offered [`handshake::FEATURE_COMPACT_ACK`]): the target acks
//!    in the step that applies it, a replayed copy too, and the quiet sends
//!    no message of its own ([`SocketStats::acks_flagged`]). Only when every
//!    frame is written already, or earlier unacked frames travel on another
//!    connection, does it send a separate request, a heartbeat marked
//!    `ACK_NOW` on the control connection ([`SocketStats::ack_requests`]).
//! 6. Should rail `r` fail first, `connection::rail_down` hands its unacked
//!    frames to another Up rail (`recovery::fail_over`) or keeps them for the
//!    reconnect; they are sent again marked as replays, and step 4 drops
//!    those already applied.
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use switchyard_core::{route::ContextId, transport::{Instant, Transport}};
//! use switchyard_socket::{SocketDriver, TcpConfig};
//!
//! let cfg = |me| TcpConfig { me, n_pes: 2, listen: vec!["127.0.0.1".parse().unwrap()], ..TcpConfig::default() };
//! let mut a = SocketDriver::with_owned_heap(cfg(0), 1 << 20)?;
//! let mut b = SocketDriver::with_owned_heap(cfg(1), 1 << 20)?;
//! let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
//! a.set_peer(1, &lb, 1 << 20)?;
//! b.set_peer(0, &la, 1 << 20)?;
//! let t = std::thread::spawn(move || {
//!     b.connect_all([0].into_iter(), Instant::default(), Duration::from_secs(5)).unwrap();
//!     b
//! });
//! a.connect_all([1].into_iter(), Instant::default(), Duration::from_secs(5))?;
//! a.rail(0).put(1, 0, b"hello", ContextId { pe: 0, seq: 1 })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! MSRV: the workspace's `rust-version`.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::unnecessary_safety_comment)]

mod backoff;
pub mod compact;
pub mod decode;
pub mod dedup;
mod driver;
pub mod handshake;
mod heap;
mod probe;
mod rail;
mod replay;
mod sys;

use std::{
    io,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

pub use driver::{Parker, SignalFit, SocketDriver};
pub use handshake::JobKey;
pub use probe::{UNAVAILABLE_REASON, probe};
pub use rail::{Rail, SingleRail};
/// The path-class encoding this driver speaks (re-exported for its future cards).
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
pub use switchyard_core::transport::LinkState;
use switchyard_core::{
    route::LoadWatermark,
    transport::{ErrorKind, TransportError},
};

/// Whether this driver is implemented in this build (it is).
pub const IMPLEMENTED: bool = true;

/// Most rails (local addresses) one driver uses.
pub const MAX_RAILS: usize = 4;

/// Most data connections per peer per rail ([`TcpConfig::data_connections`]).
pub const MAX_DATA_CONNECTIONS: u8 = 8;

/// When frames carry a CRC over their payload (headers are always checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrcPolicy {
    /// Every payload is covered (the default).
    #[default]
    Always,
    /// Payloads of at least `bulk_threshold` bytes are covered only on every
    /// `every`-th such frame; smaller payloads always.
    Sample {
        /// Size from which sampling applies.
        bulk_threshold: u32,
        /// One bulk frame in this many is covered (1 = all).
        every: u32,
    },
}

/// Configuration of a [`SocketDriver`]. Every PE of a job must use the same
/// `job_id`, `key`, `data_connections` and `max_frame_payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// The job's id, covered by the handshake's proofs (never sent).
    pub job_id: u64,
    /// The job's key (derived from the job secret): every handshake proves
    /// it, and connections without the proof are refused and counted.
    pub key: JobKey,
    /// This PE.
    pub me: u32,
    /// PEs in the job.
    pub n_pes: u32,
    /// One local address per rail (rail index = position), 1 to [`MAX_RAILS`].
    pub listen: Vec<IpAddr>,
    /// Port to listen on (every rail); 0 = ephemeral.
    pub listen_port: u16,
    /// Data connections per peer per rail, 1 to [`MAX_DATA_CONNECTIONS`] (plus
    /// one control connection).
    pub data_connections: u8,
    /// Per-peer send window in bytes: replay capacity and initial credit.
    pub window: u32,
    /// Larger puts are split into frames of at most this many payload bytes.
    /// Default 48 KiB: on loopback, frames just over 64 KiB (the segment
    /// size) halved the throughput, and 32 to 48 KiB gave the most
    /// (`cargo run --release -p switchyard-socket --example bandwidth 1024 FRAME_KIB`:
    /// 16 KiB 3.2 GB/s, 32 KiB 4.9, 48 KiB 5.1, 64 KiB 1.8 to 2.2, 256 KiB 3.9,
    /// against 5.4 GB/s for a raw stream).
    pub max_frame_payload: u32,
    /// Bytes of the arena holding get replies until `get_poll`.
    pub get_buffer: u32,
    /// Payload CRC policy.
    pub crc: CrcPolicy,
    /// Small puts (1 to 255 bytes, copied) travel with a 40-byte compact
    /// header instead of the 64-byte one ([`compact`]) to peers that decode
    /// it (their `Hello` says so, [`handshake::FEATURE_COMPACT`]); this PE
    /// decodes them, and says so, only when this is on. Default on.
    pub compact_puts: bool,
    /// A heartbeat goes on a rail's control connection when nothing was sent
    /// on that rail for this long.
    pub heartbeat_interval: Duration,
    /// Nothing received on a rail's connections to a peer for this long: that
    /// rail is Down for that peer.
    pub detection_window: Duration,
    /// First reconnect delay ceiling (exponential backoff, full jitter).
    pub reconnect_base: Duration,
    /// Largest reconnect delay ceiling.
    pub reconnect_cap: Duration,
    /// A peer Down on every rail this long is dead.
    pub give_up: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            job_id: 0,
            key: JobKey::default(),
            me: 0,
            n_pes: 1,
            listen: vec![IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)],
            listen_port: 0,
            data_connections: 1,
            window: 4 << 20,
            max_frame_payload: 48 << 10,
            get_buffer: 8 << 20,
            crc: CrcPolicy::Always,
            compact_puts: true,
            heartbeat_interval: Duration::from_millis(50),
            detection_window: Duration::from_millis(200),
            reconnect_base: Duration::from_millis(5),
            reconnect_cap: Duration::from_millis(500),
            give_up: Duration::from_secs(5),
        }
    }
}

impl TcpConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// [`SocketError::Config`] naming the first bad field, its value and what
    /// was expected.
    pub fn check(&self) -> Result<()> {
        let bad = |field: &'static str, value: String, expected: &'static str| {
            Err(SocketError::Config {
                field,
                value,
                expected,
            })
        };
        if self.n_pes == 0 || self.me >= self.n_pes {
            return bad(
                "me",
                format!("{} (n_pes {})", self.me, self.n_pes),
                "me < n_pes",
            );
        }
        if self.listen.is_empty() || self.listen.len() > MAX_RAILS {
            return bad(
                "listen",
                format!("{} addresses", self.listen.len()),
                "1 to 4 addresses (one per rail)",
            );
        }
        if !(1..=MAX_DATA_CONNECTIONS).contains(&self.data_connections) {
            return bad(
                "data_connections",
                self.data_connections.to_string(),
                "1 to 8",
            );
        }
        if self.max_frame_payload == 0
            || self.max_frame_payload > switchyard_core::wire::MAX_PAYLOAD
        {
            return bad(
                "max_frame_payload",
                self.max_frame_payload.to_string(),
                "1 to 16 MiB",
            );
        }
        let frame = u64::from(self.max_frame_payload) + 64;
        if u64::from(self.window) < 2 * frame {
            return bad(
                "window",
                self.window.to_string(),
                "at least two largest frames (2 * (max_frame_payload + 64))",
            );
        }
        if self.get_buffer == 0 {
            return bad("get_buffer", "0".into(), "more than 0 bytes");
        }
        if let CrcPolicy::Sample { every: 0, .. } = self.crc {
            return bad("crc", "Sample { every: 0 }".into(), "every >= 1");
        }
        for (field, d) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("detection_window", self.detection_window),
            ("reconnect_base", self.reconnect_base),
            ("reconnect_cap", self.reconnect_cap),
            ("give_up", self.give_up),
        ] {
            if d.is_zero() {
                return bad(field, "0".into(), "a non-zero duration");
            }
        }
        if self.heartbeat_interval >= self.detection_window {
            return bad(
                "heartbeat_interval",
                format!("{:?}", self.heartbeat_interval),
                "less than detection_window",
            );
        }
        if self.reconnect_cap < self.reconnect_base {
            return bad(
                "reconnect_cap",
                format!("{:?}", self.reconnect_cap),
                "at least reconnect_base",
            );
        }
        Ok(())
    }
}

/// Why an incoming (or outgoing) connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefuseReason {
    /// The `Hello` does not prove the job's key: another job, or a
    /// stranger.
    Unauthenticated,
    /// The source or destination PE is wrong for this pair.
    BadPe,
    /// The rail or connection index is out of range.
    BadRail,
    /// The source PE has no addresses here yet (`set_peer` not called).
    NotConfigured,
    /// The first bytes were not a valid `Hello` frame.
    Garbage,
    /// No `Hello` within the handshake deadline.
    Timeout,
    /// Too many handshakes in progress: the oldest unauthenticated one of
    /// the same budget (strangers, or a peer's address) was closed to make
    /// room for a new connection, or the new one was closed.
    Overload,
}

impl RefuseReason {
    /// Every reason, in [`RefuseReason::index`] order
    /// ([`SocketStats::refused_by`]).
    pub const ALL: [RefuseReason; 7] = [
        RefuseReason::Unauthenticated,
        RefuseReason::BadPe,
        RefuseReason::BadRail,
        RefuseReason::NotConfigured,
        RefuseReason::Garbage,
        RefuseReason::Timeout,
        RefuseReason::Overload,
    ];

    /// Its place in [`RefuseReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Its name in reports and metrics: `unauthenticated`, `bad_pe`,
    /// `bad_rail`, `not_configured`, `garbage`, `timeout`, `overload`.
    pub const fn name(self) -> &'static str {
        match self {
            RefuseReason::Unauthenticated => "unauthenticated",
            RefuseReason::BadPe => "bad_pe",
            RefuseReason::BadRail => "bad_rail",
            RefuseReason::NotConfigured => "not_configured",
            RefuseReason::Garbage => "garbage",
            RefuseReason::Timeout => "timeout",
            RefuseReason::Overload => "overload",
        }
    }
}

/// A transition the driver reports once ([`SocketDriver::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A rail to a peer changed state.
    Link {
        /// The rail.
        rail: u8,
        /// The peer.
        peer: u32,
        /// Its new state.
        state: LinkState,
    },
    /// A peer was given up on.
    PeerDead {
        /// The peer.
        peer: u32,
    },
    /// A link-state record from a peer ([`SocketDriver::send_link_state`]).
    LinkState {
        /// The sending PE.
        from: u32,
        /// Its record (defined by the shim).
        record: [u8; 32],
    },
    /// A connection was refused.
    Refused {
        /// The remote address.
        addr: SocketAddr,
        /// Why.
        why: RefuseReason,
    },
}

/// Counters of one driver ([`SocketDriver::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketStats {
    /// Frames fully written.
    pub frames_sent: u64,
    /// Frames received and checked.
    pub frames_received: u64,
    /// Bytes written.
    pub bytes_sent: u64,
    /// Write system calls that sent bytes: frames queued behind a send go
    /// out gathered, many per write (`frames_sent / writes`).
    pub writes: u64,
    /// Bytes read.
    pub bytes_received: u64,
    /// Frames sent again after a failure (reconnect or failover).
    pub replayed: u64,
    /// Frames received again and dropped (already applied).
    pub duplicates_dropped: u64,
    /// Handshakes refused (bad cookie, job, PE, garbage, timeout).
    pub refused: u64,
    /// Of those, by reason ([`RefuseReason::index`]); they sum to
    /// `refused`.
    pub refused_by: [u64; RefuseReason::ALL.len()],
    /// Connections cut for a malformed frame.
    pub bad_frames: u64,
    /// Reconnect attempts started after a rail went down.
    pub reconnects: u64,
    /// Times a failed rail's frames moved to another rail.
    pub rail_failovers: u64,
    /// Heartbeats sent (with the ack requests among them).
    pub heartbeats_sent: u64,
    /// Requests for an immediate ack sent on their own (a heartbeat marked
    /// `ACK_NOW` on the control connection: a `quiet` that found every
    /// frame written already, a fence waiting for acks).
    pub ack_requests: u64,
    /// Frames a `quiet` marked `ACK_NOW` before writing them, asking the
    /// target for its ack without a message of its own.
    pub acks_flagged: u64,
    /// Writes that found a socket buffer full.
    pub would_block: u64,
    /// New frames held back by the ramp after a peer recovered (its in-flight
    /// limit starts small and doubles with each ack).
    pub ramp_waits: u64,
    /// Connect-on-first-use: connections that crossed one of this PE's
    /// own toward the same peer and rail (both sides connected at once),
    /// dropped here (this PE is the lower rank) or yielded to (the higher).
    pub crossed: u64,
    /// Connect-on-first-use: peers this PE started connecting to at its
    /// first operation toward them ([`SocketDriver::connect_on_first_use`]).
    pub first_use_connects: u64,
    /// Accepting side: connections left from a peer's earlier connect
    /// attempt that failed part-way (another of its connections was closed
    /// for overload, or timed out), found closed by the peer when a newer
    /// attempt's connection arrived, and dropped rather than counted
    /// toward the rail's set.
    pub stale_conns: u64,
    /// Accepting side, handshake budget spent: handshakes closed to make
    /// room for a newer connection (a stranger's only after it had
    /// 20 ms to answer its challenge); counted in
    /// [`RefuseReason::Overload`] too.
    pub handshakes_evicted: u64,
    /// Accepting side: new strangers closed at once because every
    /// stranger's handshake slot was taken by one still within its time to
    /// answer; counted in [`RefuseReason::Overload`] too. Such a PE
    /// retries after its backoff delay.
    pub handshakes_turned_away: u64,
    /// `accept` calls on a listener that failed other than for want of a
    /// connection: out of file descriptors (`EMFILE`: each peer holds one
    /// per connection, 2 per rail by default, so a PE with the common
    /// 1,024 limit serves about 500 peers on one rail), or of memory. The
    /// connection stays queued, and its PE retries after its attempt's
    /// deadline.
    pub accept_failures: u64,
}

/// Counters of one (peer, rail) ([`SocketDriver::peer_stats`]): the part of
/// [`SocketStats`]' replays, duplicates and bad frames that one rail's
/// connections to one peer saw. A frame cut before the handshake named
/// its peer (an accepted connection still pending) counts only in
/// [`SocketStats::bad_frames`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerRailStats {
    /// Frames sent again on this rail after a failure (reconnect or
    /// failover; [`SocketStats::replayed`]).
    pub replayed: u64,
    /// Frames received again on this rail and dropped
    /// ([`SocketStats::duplicates_dropped`]).
    pub duplicates_dropped: u64,
    /// Connections of this rail cut for a malformed frame (CRC or header
    /// check; [`SocketStats::bad_frames`]).
    pub bad_frames: u64,
}

/// What one rail holds toward one peer and has not completed
/// ([`SocketDriver::backlog`]): the load a rail reports for the load
/// watermark, against [`SocketDriver::backlog_capacity`].
///
/// Counted: the put, get and atomic frames sequenced toward the peer and
/// assigned to the rail that are not yet acknowledged by it, or
/// acknowledged but still waiting for their reply (gets, fetching atomics).
/// A frame counts from the call that queued it (written to the socket or
/// not) until that moment. Not counted: acks, heartbeats, credit grants,
/// link-state records, and the bytes a get's reply will bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Frames.
    pub frames: u32,
    /// Their credit: each frame's 64-byte header plus the payload it
    /// carries (put data, atomic operands; a get carries none).
    pub bytes: u64,
}

impl Backlog {
    /// Whether `self` is over `watermark` of `capacity` in frames or in
    /// bytes ([`LoadWatermark::exceeded`]; bytes past `u32::MAX` count as
    /// `u32::MAX`).
    #[inline]
    pub fn exceeds(self, watermark: LoadWatermark, capacity: Backlog) -> bool {
        let clamp = |b: u64| u32::try_from(b).unwrap_or(u32::MAX);
        watermark.exceeded(self.frames, capacity.frames)
            || watermark.exceeded(clamp(self.bytes), clamp(capacity.bytes))
    }
}

/// Errors of the TCP transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// A configuration field is invalid.
    #[error("tcp config {field} = {value}: expected {expected}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Binding or listening on a rail's address failed.
    #[error("cannot listen on rail {rail} at {addr}: {source}")]
    Listen {
        /// The rail.
        rail: usize,
        /// Its address.
        addr: IpAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Creating (or duplicating) the epoll instance failed.
    #[error("cannot create the epoll instance: {source}")]
    Epoll {
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Mapping an owned heap failed.
    #[error("cannot map an owned heap of {len} bytes: {source}")]
    HeapMap {
        /// Bytes asked for.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The heap pointer is not 8-byte aligned.
    #[error("heap at {addr:#x} is not 8-byte aligned")]
    HeapAlign {
        /// Its address.
        addr: usize,
    },
    /// The PE is not a peer of this job (or is this PE where a peer is needed).
    #[error("PE {peer} is not a peer in this job of {n_pes} PEs")]
    InvalidPe {
        /// The PE.
        peer: u32,
        /// PEs in the job.
        n_pes: u32,
    },
    /// No addresses are known for the PE yet.
    #[error("PE {peer} has no addresses yet (set_peer was not called)")]
    PeerUnknown {
        /// The PE.
        peer: u32,
    },
    /// More peer addresses than rails.
    #[error("PE {peer}: {count} addresses given, at most {max} rails")]
    PeerAddrs {
        /// The PE.
        peer: u32,
        /// Addresses given.
        count: usize,
        /// Rail limit.
        max: usize,
    },
    /// A queue toward the peer is full: make progress and retry.
    #[error("{what} toward PE {peer} is full or waiting: make progress and retry")]
    WouldBlock {
        /// The PE.
        peer: u32,
        /// Which queue.
        what: &'static str,
    },
    /// The rail is down toward the peer (another rail or transport may work).
    #[error("rail {rail} to PE {peer} is down")]
    RailDown {
        /// The PE.
        peer: u32,
        /// The rail.
        rail: usize,
    },
    /// The peer was given up on; its operations were dropped.
    #[error("PE {peer} is dead (down on every rail past the give-up time, or its process is gone)")]
    PeerDead {
        /// The PE.
        peer: u32,
    },
    /// A range outside a heap.
    #[error("{len} bytes at offset {offset} are outside PE {peer}'s heap of {heap_len} bytes")]
    OutOfBounds {
        /// The PE whose heap it is.
        peer: u32,
        /// The offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// That heap's size.
        heap_len: u64,
    },
    /// An atomic at an unaligned offset.
    #[error("atomic at offset {offset} of PE {peer} is not {align}-byte aligned")]
    Misaligned {
        /// The PE.
        peer: u32,
        /// The offset.
        offset: u64,
        /// Alignment needed.
        align: u64,
    },
    /// A get longer than [`SocketDriver::max_get_len`].
    #[error("get of {len} bytes from PE {peer} exceeds the largest of {max}")]
    TooLong {
        /// The PE.
        peer: u32,
        /// Bytes asked for.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A ticket that is not (or no longer) live.
    #[error("ticket slot {slot:#x} for PE {peer} is not live")]
    StaleTicket {
        /// The PE.
        peer: u32,
        /// The slot.
        slot: u32,
    },
    /// `connect_all` ran out of time.
    #[error("not connected within {timeout:?}; missing (PE, rail): {missing:?}")]
    ConnectTimeout {
        /// The limit.
        timeout: Duration,
        /// What did not come up.
        missing: Vec<(u32, usize)>,
    },
    /// The driver was closed.
    #[error("the TCP driver is closed")]
    Closed {
        /// The PE the call was for.
        peer: Option<u32>,
    },
}

/// Results of this crate.
pub type Result<T> = core::result::Result<T, SocketError>;

impl TransportError for SocketError {
    fn kind(&self) -> ErrorKind {
        match self {
            SocketError::Config { .. }
            | SocketError::Listen { .. }
            | SocketError::Epoll { .. }
            | SocketError::HeapMap { .. }
            | SocketError::HeapAlign { .. }
            | SocketError::StaleTicket { .. }
            | SocketError::Closed { .. } => ErrorKind::Fatal,
            SocketError::InvalidPe { .. }
            | SocketError::PeerUnknown { .. }
            | SocketError::PeerAddrs { .. } => ErrorKind::InvalidPe,
            SocketError::WouldBlock { .. } => ErrorKind::WouldBlock,
            SocketError::RailDown { .. }
            | SocketError::PeerDead { .. }
            | SocketError::ConnectTimeout { .. } => ErrorKind::PeerDown,
            SocketError::OutOfBounds { .. } => ErrorKind::OutOfBounds,
            SocketError::Misaligned { .. } => ErrorKind::Misaligned,
            SocketError::TooLong { .. } => ErrorKind::Unsupported,
        }
    }

    fn peer(&self) -> Option<u32> {
        match self {
            SocketError::InvalidPe { peer, .. }
            | SocketError::PeerUnknown { peer }
            | SocketError::PeerAddrs { peer, .. }
            | SocketError::WouldBlock { peer, .. }
            | SocketError::RailDown { peer, .. }
            | SocketError::PeerDead { peer }
            | SocketError::OutOfBounds { peer, .. }
            | SocketError::Misaligned { peer, .. }
            | SocketError::TooLong { peer, .. }
            | SocketError::StaleTicket { peer, .. } => Some(*peer),
            SocketError::ConnectTimeout { missing, .. } => missing.first().map(|m| m.0),
            SocketError::Closed { peer } => *peer,
            _ => None,
        }
    }
}
