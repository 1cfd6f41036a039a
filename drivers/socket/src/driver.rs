//! The driver: [`SocketDriver`], its construction, its per-PE context
//! ([`Ctx`]) and the calls that are neither the data path nor the progress
//! loop (peers' addresses, accessors, link-state records, close). The rest
//! lives in one submodule per concern:
//!
//! * [`connection`]: the per-peer and per-rail state ([`Peer`],
//!   [`connection::RailLink`], [`connection::Conn`]) and its state machine:
//!   connect (lower rank) or accept (higher rank), or with connect-on-first-use
//!   either side, the `Hello` handshake, Up, Down, reconnect with backoff,
//!   give-up.
//! * [`progress`]: the progress loop: one step over the listeners, the
//!   pending handshakes and every rail of every peer (read, write, timers,
//!   heartbeats, failure detection), and parking.
//! * [`recovery`]: what makes every operation apply exactly once across
//!   failures: acks and their effects (the replay ring releases, the ramp
//!   widens, `quiet` completes), the fence and straddle rules, and moving
//!   unacknowledged frames to a rail that is up, to be replayed there.
//! * [`operations`]: the initiator's calls (`put`, `get_*`, `atomic_*`, on
//!   one rail) and [`tickets`], the tables of outstanding gets and atomics.
//! * [`send`]: the wire out: frames built into the peer's replay ring, and
//!   written from it (and from each connection's out buffer) to the sockets.
//! * [`receive`]: the wire in: reading a connection into its stream decoder,
//!   and the target applying each frame (puts, gets, atomics, replies, acks).

mod accept;
mod connection;
mod operations;
mod progress;
mod receive;
mod recovery;
mod send;
mod tickets;

use std::{
    net::{Shutdown, SocketAddr, TcpListener},
    os::fd::AsRawFd,
    time::Duration,
};

use switchyard_core::{
    trace::TraceWriter,
    transport::{Instant, LinkState},
    wire::FrameOp,
};

use self::{
    connection::{Peer, PeerState, Pending, close_conn},
    send::{fields, flush_rail_control},
    tickets::{ATOMIC_SLOTS, AtomicSlot, Gets, SlotState},
};
pub use self::{operations::SignalFit, progress::Parker};
use crate::{
    Backlog, CrcPolicy, Event, MAX_RAILS, PeerRailStats, Result, SocketError, SocketStats,
    TcpConfig,
    decode::StreamDecoder,
    handshake::{FEATURE_COMPACT, FEATURE_COMPACT_ACK, Hello, NONCE_LEN, Nonces},
    heap::Heap,
    sys,
};

/// Handshakes in progress on the accepting side from strangers (sources
/// that are no configured peer's rail address), at most.
const MAX_PENDING: usize = 32;
/// How long a stranger's accepted connection keeps its handshake slot
/// against newer strangers when their budget ([`MAX_PENDING`]) is spent:
/// time to answer the challenge (a PE answers at its next progress step,
/// within a round trip). Past it, the oldest is closed for a newcomer
/// (`connection.rs`, `slot_for`).
const HELLO_GRACE: Duration = Duration::from_millis(20);
/// Handshake slots only connections from a lower-ranked peer's rail address
/// (where its connects and reconnects come from) may take, beyond what is
/// free of [`MAX_PENDING`]: a flood from other hosts cannot fill them.
const RESERVED_PENDING: usize = 16;
/// Queued events, at most (the oldest is dropped when full).
const EVENT_CAP: usize = 1024;
/// The queued events: fixed capacity (boxed: 1024 events are about 40 KiB).
type Events = Box<heapless::Deque<Event, EVENT_CAP>>;
/// Recent atomic results kept per source PE, to answer replays.
const ATOMIC_CACHE: usize = 1024;
/// Largest payload on a control connection or in a handshake.
const CONTROL_PAYLOAD: u32 = 256;

/// Everything but the peers and the listeners, so that helpers can borrow
/// it next to one peer.
#[derive(Debug)]
struct Ctx {
    cfg: TcpConfig,
    me: u32,
    heap: Heap,
    stats: SocketStats,
    events: Events,
    gets: Gets,
    atomics: Vec<AtomicSlot>,
    epoll: sys::Epoll,
    now: Instant,
    /// When the slow pass next looks at the listeners.
    next_accept: Instant,
    /// An `accept` failed (out of descriptors or memory): the listeners
    /// are out of the epoll set until `next_accept`, so that a parked
    /// waiter is not woken at once, again and again, by a connection it
    /// cannot take (level-triggered readiness). Put back at the next look.
    accept_paused: bool,
    /// Progress steps taken (the slow pass runs every
    /// [`progress::SLOW_EVERY`]).
    steps: u32,
    /// When the last slow pass ran (heartbeats, failure detection,
    /// reconnects): see [`SocketDriver::timers_due`].
    last_slow: Instant,
    closed: bool,
    seed: u64,
    handshake_timeout: Duration,
    /// The handshakes' nonces.
    nonces: Nonces,
    /// Where the frames applied for peers are recorded
    /// ([`SocketDriver::set_trace`]).
    trace: Option<TargetTrace>,
    /// Connect-on-first-use ([`SocketDriver::set_connect_on_first_use`]).
    lazy: bool,
}

/// The target side's trace: a ring's writer, the clock of its timestamps,
/// and which frames it records.
struct TargetTrace {
    writer: TraceWriter<'static>,
    clock: fn() -> u64,
    /// Every applied frame (`true`) or only replays (`false`).
    all: bool,
}

impl core::fmt::Debug for TargetTrace {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TargetTrace")
            .field("writer", &self.writer)
            .field("all", &self.all)
            .finish()
    }
}

impl Ctx {
    fn event(&mut self, e: Event) {
        if self.events.is_full() {
            self.events.pop_front();
        }
        // Cannot fail: there is room now.
        let _ = self.events.push_back(e);
    }

    fn later(&self, d: Duration) -> Instant {
        Instant::from_nanos(self.now.nanos.saturating_add(d.as_nanos() as u64))
    }

    fn since(&self, t: Instant) -> Duration {
        Duration::from_nanos(self.now.nanos.saturating_sub(t.nanos))
    }

    fn n_conns(&self) -> usize {
        1 + self.cfg.data_connections as usize
    }

    fn want_crc(&self, st: &mut PeerState, len: u32) -> bool {
        match self.cfg.crc {
            CrcPolicy::Always => true,
            CrcPolicy::Sample {
                bulk_threshold,
                every,
            } => {
                if len < bulk_threshold {
                    return true;
                }
                st.crc_count = st.crc_count.wrapping_add(1);
                st.crc_count.is_multiple_of(every.max(1))
            }
        }
    }

    /// Our `Hello` toward `st`'s PE on `rail`, connection `conn`, with our
    /// `nonce` (not yet sealed).
    fn hello(&self, st: &PeerState, rail: usize, conn: usize, nonce: [u8; NONCE_LEN]) -> Hello {
        Hello {
            nonce,
            src: self.me,
            dst: st.pe,
            rail: rail as u8,
            conn: conn as u8,
            n_conns: self.n_conns() as u8,
            features: if self.cfg.compact_puts {
                FEATURE_COMPACT | FEATURE_COMPACT_ACK
            } else {
                0
            },
            applied: st.dedup.base(),
            granted: st.granter.granted(),
            heap_len: self.heap.len(),
            ..Hello::default()
        }
    }

    /// Which data connection carries a frame starting at heap `offset`: the
    /// heap is cut into blocks of `max_frame_payload` bytes and block `b`
    /// always travels on data connection `1 + b % data_connections`. Frames
    /// never cross a block (puts and gets are split at block boundaries), so
    /// any two frames touching the same byte share one TCP stream and are
    /// applied in the order they were issued, while different blocks spread
    /// over the connections.
    fn conn_for(&self, offset: u64) -> u8 {
        let n = u64::from(self.cfg.data_connections.max(1));
        1 + ((offset / self.block()) % n) as u8
    }

    /// Bytes per placement block ([`Ctx::conn_for`]).
    fn block(&self) -> u64 {
        u64::from(self.cfg.max_frame_payload.max(1))
    }

    /// The longest frame from heap `offset` on: at most `max` bytes and not
    /// past the end of its block.
    fn chunk_at(&self, offset: u64, left: u64, max: u64) -> u64 {
        let to_block_end = self.block() - offset % self.block();
        left.min(max).min(to_block_end)
    }

    fn fail_ops_of(&mut self, pe: u32) {
        for s in &mut self.gets.slots {
            if s.peer == pe && s.state == SlotState::Pending {
                s.state = SlotState::Failed;
            }
        }
        for s in &mut self.atomics {
            if s.peer == pe && s.state == SlotState::Pending {
                s.state = SlotState::Failed;
            }
        }
    }
}

/// The TCP transport of one PE (crate docs).
#[derive(Debug)]
pub struct SocketDriver {
    ctx: Ctx,
    /// One per rail (taken on close).
    listeners: heapless::Vec<Option<TcpListener>, MAX_RAILS>,
    /// The listening address of each rail.
    local: heapless::Vec<SocketAddr, MAX_RAILS>,
    peers: Vec<Option<Box<Peer>>>,
    /// Slots for accepted connections waiting for their `Hello`: strangers
    /// take at most [`MAX_PENDING`], the rest is kept for the peers' addresses
    /// (`connection.rs`, `accept`).
    pending: [Pending; MAX_PENDING + RESERVED_PENDING],
    /// Per rail, the sorted addresses lower-ranked peers connect from (their
    /// own address on that rail: connects bind it).
    known_sources: heapless::Vec<Vec<std::net::IpAddr>, MAX_RAILS>,
}

impl SocketDriver {
    /// A driver serving `heap` as this PE's symmetric heap, listening on every
    /// rail of `cfg.listen`.
    ///
    /// # Safety
    /// `heap` is valid for reads and writes of `heap_len` bytes for the
    /// driver's lifetime, 8-byte aligned; other threads or processes may access
    /// it concurrently only through atomics or by the SHMEM rules.
    ///
    /// # Errors
    /// [`SocketError::Config`], [`SocketError::HeapAlign`],
    /// [`SocketError::Listen`], [`SocketError::Epoll`].
    #[allow(unsafe_code)]
    pub unsafe fn new(cfg: TcpConfig, heap: *mut u8, heap_len: u64) -> Result<SocketDriver> {
        if !(heap as usize).is_multiple_of(8) {
            return Err(SocketError::HeapAlign {
                addr: heap as usize,
            });
        }
        // SAFETY: the caller's contract is Heap::new's.
        let heap = unsafe { Heap::new(heap, heap_len, None) };
        Self::build(cfg, heap)
    }

    /// A driver with a zeroed, page-aligned heap of `heap_len` bytes that it
    /// owns (tests, tools).
    ///
    /// # Errors
    /// As [`SocketDriver::new`], plus [`SocketError::HeapMap`].
    #[allow(unsafe_code)]
    pub fn with_owned_heap(cfg: TcpConfig, heap_len: u64) -> Result<SocketDriver> {
        let map = sys::AnonMap::new(heap_len as usize).map_err(|source| SocketError::HeapMap {
            len: heap_len,
            source,
        })?;
        let p = map.as_ptr();
        // SAFETY: the mapping is page aligned, `heap_len` bytes, and lives in
        // the heap value as long as the driver.
        let heap = unsafe { Heap::new(p, heap_len, Some(map)) };
        Self::build(cfg, heap)
    }

    fn build(cfg: TcpConfig, heap: Heap) -> Result<SocketDriver> {
        cfg.check()?;
        let epoll = sys::Epoll::new().map_err(|source| SocketError::Epoll { source })?;
        let mut listeners = heapless::Vec::new();
        let mut local = heapless::Vec::new();
        // At most MAX_RAILS addresses (`cfg.check()`): the pushes fit.
        for (rail, &ip) in cfg.listen.iter().enumerate().take(MAX_RAILS) {
            let l = TcpListener::bind(SocketAddr::new(ip, cfg.listen_port))
                .and_then(|l| l.set_nonblocking(true).map(|_| l))
                .and_then(|l| sys::raise_backlog(&l).map(|_| l))
                .and_then(|l| l.local_addr().map(|a| (l, a)))
                .map_err(|source| SocketError::Listen {
                    rail,
                    addr: ip,
                    source,
                })?;
            epoll
                .add(l.0.as_raw_fd())
                .map_err(|source| SocketError::Epoll { source })?;
            let _ = local.push(l.1);
            let _ = listeners.push(Some(l.0));
        }
        let seed = u64::from(std::process::id()) << 32
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
            ^ u64::from(cfg.me).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let pending = core::array::from_fn(|_| Pending {
            sock: None,
            addr: None,
            rail: 0,
            dec: StreamDecoder::new(CONTROL_PAYLOAD),
            deadline: Instant::default(),
            nonce: [0; NONCE_LEN],
            known: false,
        });
        let handshake_timeout = (cfg.detection_window * 5).max(Duration::from_secs(1));
        let ctx = Ctx {
            me: cfg.me,
            heap,
            stats: SocketStats::default(),
            events: Box::new(heapless::Deque::new()),
            gets: Gets::new(cfg.get_buffer as usize),
            atomics: vec![
                AtomicSlot {
                    gen_: 0,
                    state: SlotState::Free,
                    peer: 0,
                    value: 0,
                };
                ATOMIC_SLOTS
            ],
            epoll,
            now: Instant::default(),
            next_accept: Instant::default(),
            accept_paused: false,
            last_slow: Instant::default(),
            steps: 0,
            closed: false,
            seed,
            handshake_timeout,
            nonces: Nonces::new(),
            trace: None,
            lazy: false,
            cfg,
        };
        let n = ctx.cfg.n_pes as usize;
        Ok(SocketDriver {
            peers: (0..n).map(|_| None).collect(),
            ctx,
            listeners,
            known_sources: (0..local.len()).map(|_| Vec::new()).collect(),
            local,
            pending,
        })
    }

    /// Records the puts, gets and atomics this driver applies for its peers
    /// into `writer`'s ring (the target side of the route trace: peer,
    /// length, the initiator's context id, [`TraceRecord::RETRIED`](switchyard_core::trace::TraceRecord::RETRIED) for a
    /// replay), stamped with `clock`: every one when `all`, else only the
    /// replays. Recording is a few plain stores, no allocation.
    pub fn set_trace(&mut self, writer: TraceWriter<'static>, clock: fn() -> u64, all: bool) {
        self.ctx.trace = Some(TargetTrace { writer, clock, all });
    }

    /// Connect-on-first-use (`cards = lazy`: a PE learns a peer's
    /// addresses only when it first needs it). When on, either side of a
    /// pair may connect: the side that needs the peer first connects
    /// ([`SocketDriver::connect_on_first_use`]) and is the one that
    /// reconnects after a failure; a connection from a peer this PE never
    /// declared is accepted once its `Hello` proves the job key, and
    /// declares that peer (without addresses: this PE then only accepts
    /// from it); when both sides connect at once, the lower rank's
    /// connection is kept ([`SocketStats::crossed`]). Off (the default),
    /// every peer is declared up front and the lower rank connects. Set it
    /// on every PE of the job, before the first progress step.
    pub fn set_connect_on_first_use(&mut self, on: bool) {
        self.ctx.lazy = on;
    }

    /// This PE's heap: start and length.
    pub fn local_heap(&self) -> (*mut u8, u64) {
        self.ctx.heap.raw()
    }

    /// The listening address of each rail.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.local.len()
    }

    /// The configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.ctx.cfg
    }

    fn peer_mut(&mut self, peer: u32) -> Result<&mut Peer> {
        self.split(peer).map(|(_, p)| p)
    }

    /// The context and one live peer, borrowed side by side.
    fn split(&mut self, peer: u32) -> Result<(&mut Ctx, &mut Peer)> {
        let ctx = &mut self.ctx;
        if ctx.closed {
            return Err(SocketError::Closed { peer: Some(peer) });
        }
        if peer >= ctx.cfg.n_pes || peer == ctx.me {
            return Err(SocketError::InvalidPe {
                peer,
                n_pes: ctx.cfg.n_pes,
            });
        }
        match self.peers[peer as usize].as_deref_mut() {
            Some(p) if p.st.dead => Err(SocketError::PeerDead { peer }),
            Some(p) => Ok((ctx, p)),
            None => Err(SocketError::PeerUnknown { peer }),
        }
    }

    /// The next queued transition, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.ctx.events.pop_front()
    }

    /// The counters.
    pub fn stats(&self) -> SocketStats {
        self.ctx.stats
    }

    /// The counters of (`pe`, each rail): replays, duplicates dropped and
    /// connections cut for a malformed frame, by rail index (zero for a
    /// peer not declared, this PE, or a rail the driver does not have).
    pub fn peer_stats(&self, pe: u32) -> [PeerRailStats; MAX_RAILS] {
        match self.peers.get(pe as usize).and_then(|p| p.as_deref()) {
            Some(p) => p.st.counts,
            None => [PeerRailStats::default(); MAX_RAILS],
        }
    }

    /// `Up` if any rail to `pe` is up, `Error` once given up on, else `Down`.
    pub fn peer_state(&self, pe: u32) -> LinkState {
        if pe == self.ctx.me && !self.ctx.closed {
            return LinkState::Up;
        }
        match self.peers.get(pe as usize).and_then(|p| p.as_deref()) {
            Some(p) if p.st.dead => LinkState::Error,
            Some(p) if p.any_up().is_some() => LinkState::Up,
            _ => LinkState::Down,
        }
    }

    /// The state of rail `rail` toward `pe`.
    pub(crate) fn rail_state(&self, rail: usize, pe: u32) -> LinkState {
        if pe == self.ctx.me && !self.ctx.closed {
            return LinkState::Up;
        }
        match self.peers.get(pe as usize).and_then(|p| p.as_deref()) {
            Some(p) if p.st.dead => LinkState::Error,
            Some(p) => p.rails.get(rail).map_or(LinkState::Down, |r| r.state),
            None => LinkState::Down,
        }
    }

    /// What rail `rail` holds toward `peer` and has not completed: frames not
    /// yet acknowledged, or acknowledged and still waiting for their reply,
    /// and their bytes ([`Backlog`] says exactly what counts). Frames that
    /// move to another rail (a failover, or a rail coming back taking frames
    /// stranded on rails that are down) move their counts with them; those
    /// of a Down rail with no other rail up stay counted on it until one
    /// comes up. O(1), no allocation: counters kept by the replay ring as it
    /// changes. Zero for this PE, a peer without addresses or given up on,
    /// and a rail out of range.
    ///
    /// Compare with [`SocketDriver::backlog_capacity`], e.g. through
    /// [`Backlog::exceeds`].
    #[inline]
    pub fn backlog(&self, peer: u32, rail: usize) -> Backlog {
        self.peers
            .get(peer as usize)
            .and_then(|p| p.as_deref())
            .map_or(Backlog::default(), |p| p.st.ring.backlog(rail))
    }

    /// What a [`SocketDriver::backlog`] is measured against, the same for
    /// every (peer, rail): `frames`, the most frames a peer may have
    /// outstanding (4096, the receiver's deduplication window); `bytes`,
    /// [`TcpConfig::window`] (the replay ring's bytes and the initial credit
    /// toward each peer). The frames every rail to one peer holds together
    /// never exceed `frames`; their bytes stay within `bytes` but for frames
    /// the peer applied out of order and has not acknowledged yet (their
    /// credit can come back before their ack), and for gets and fetching
    /// atomics acknowledged and still waiting for their reply.
    pub fn backlog_capacity(&self) -> Backlog {
        Backlog {
            frames: crate::dedup::WINDOW as u32,
            bytes: u64::from(self.ctx.cfg.window),
        }
    }

    /// `pe`'s heap size, once known.
    pub fn heap_len(&self, pe: u32) -> Option<u64> {
        if pe == self.ctx.me {
            return Some(self.ctx.heap.len());
        }
        self.peers
            .get(pe as usize)
            .and_then(|p| p.as_deref())
            .map(|p| p.st.heap_len)
    }

    /// The largest `len` `get_start` accepts (larger gets are split by the
    /// caller).
    pub fn max_get_len(&self) -> u32 {
        self.ctx.cfg.max_frame_payload.min(self.ctx.cfg.get_buffer)
    }

    /// Sends a 32-byte link-state record to `peer` over any Up rail (a
    /// `LinkState` control frame; it arrives as [`Event::LinkState`]).
    ///
    /// # Errors
    /// [`SocketError::RailDown`] when no rail is up, `WouldBlock` when the
    /// control queue is full, and the usual peer errors.
    pub fn send_link_state(&mut self, peer: u32, record: [u8; 32]) -> Result<()> {
        let me = self.ctx.me;
        let (ctx, p) = self.split(peer)?;
        let Some(r) = p.any_up() else {
            return Err(SocketError::RailDown { peer, rail: 0 });
        };
        let f = fields(
            FrameOp::LinkState,
            0,
            0,
            me,
            peer,
            0,
            p.st.dedup.base(),
            0,
            0,
            0,
        );
        if !p.rails[r].conns[0].out.frame(&f, &record, true) {
            return Err(SocketError::WouldBlock {
                peer,
                what: "control queue",
            });
        }
        flush_rail_control(ctx, p, r);
        Ok(())
    }

    /// Closes every connection (a `Close` frame first, best effort) and the
    /// listeners. Idempotent. Pending gets and atomics fail.
    ///
    /// # Errors
    /// None today (everything is released regardless).
    pub fn close(&mut self) -> Result<()> {
        if self.ctx.closed {
            return Ok(());
        }
        let me = self.ctx.me;
        for p in self.peers.iter_mut().flatten() {
            for r in 0..p.rails.len() {
                if p.rails[r].state == LinkState::Up {
                    let f = fields(
                        FrameOp::Close,
                        0,
                        0,
                        me,
                        p.st.pe,
                        0,
                        p.st.dedup.base(),
                        0,
                        0,
                        0,
                    );
                    let _ = p.rails[r].conns[0].out.frame(&f, &[], true);
                    flush_rail_control(&mut self.ctx, p, r);
                }
                for c in &mut p.rails[r].conns {
                    close_conn(c);
                }
                p.rails[r].state = LinkState::Down;
                p.rails[r].connecting = false;
            }
            let pe = p.st.pe;
            self.ctx.fail_ops_of(pe);
        }
        for l in &mut self.listeners {
            *l = None;
        }
        for pd in &mut self.pending {
            pd.sock = None;
        }
        self.ctx.closed = true;
        Ok(())
    }

    /// Test hook: shuts down rail `rail`'s sockets to `pe` as a link failure
    /// would (no `Close` frame); the next progress steps on both sides see the
    /// failure.
    #[doc(hidden)]
    pub fn debug_cut(&mut self, pe: u32, rail: usize) {
        if let Some(p) = self
            .peers
            .get_mut(pe as usize)
            .and_then(|p| p.as_deref_mut())
            && let Some(rl) = p.rails.get_mut(rail)
        {
            for c in &mut rl.conns {
                if let Some(s) = &c.sock {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
}
