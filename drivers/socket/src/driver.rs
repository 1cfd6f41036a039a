//! The driver: connections, handshakes, the send and receive paths, failure
//! detection, failover, reconnect and replay. See the crate docs.

use std::{
    collections::VecDeque,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    time::Duration,
};

use switchyard_core::{
    crc::{crc32c, crc32c_append},
    credit::{CreditGranter, CreditWindow},
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, Instant, LinkState, PollResult, Ticket},
    wire::{
        ATOMIC_PAYLOAD, AtomicKind, Frame, FrameOp, HEADER_LEN, HeaderFields, encode, flags, seal,
    },
};

use crate::{
    CrcPolicy, Event, MAX_RAILS, RefuseReason, Result, SocketError, SocketStats, TcpConfig,
    backoff::Backoff,
    decode::StreamDecoder,
    dedup::{DedupWindow, Seen},
    handshake::Hello,
    heap::Heap,
    replay::{Entry, Full, Payload, ReplayRing},
    sys,
};

/// Handshakes in progress on the accepting side, at most.
const MAX_PENDING: usize = 32;
/// Queued events, at most (the oldest is dropped when full).
const EVENT_CAP: usize = 1024;
/// Outstanding `get_start`/`get_into_heap` operations, at most.
const GET_SLOTS: usize = 256;
/// Outstanding fetching atomics, at most.
const ATOMIC_SLOTS: usize = 256;
/// Recent atomic results kept per source PE, to answer replays.
const ATOMIC_CACHE: usize = 1024;
/// Largest payload on a control connection or in a handshake.
const CONTROL_PAYLOAD: u32 = 256;
/// Send buffer of a control connection.
const CONTROL_OUT: usize = 16 * 1024;
/// Frames a peer may have in flight right after it recovered (no rail up,
/// then one reconnected); the limit doubles with each ack until it no longer
/// binds, so a recovered link is not hit with a whole window at once.
const RAMP_START: u64 = 16;
/// Standalone ack after this many frames received and not acked.
const ACK_FRAMES: u32 = 64;
/// Standalone ack once the oldest frame received and not acked is this old
/// (frames going back carry the ack for free meanwhile: a ping-pong never
/// needs a standalone one; `quiet` and `fence` ask for an immediate ack).
const ACK_DELAY: Duration = Duration::from_micros(200);
/// Progress steps between two slow passes (accepting, handshakes,
/// connecting, control connections, timers); the steps between only read and
/// write the data connections, so a busy-poller pays one `recv` per data
/// connection per idle step.
const SLOW_EVERY: u32 = 16;
/// Longest wait between looks at the listeners (new and re-made connections).
const ACCEPT_EVERY: Duration = Duration::from_micros(200);
/// Bytes read per connection per progress step, at most.
const READ_BUDGET: usize = 1 << 20;
/// Ticket slot bits for the index (the generation is above).
const SLOT_BITS: u32 = 16;
/// The ticket slot of operations that need no table entry.
const NO_SLOT: u32 = u32::MAX;

/// Header fields with the usual defaults.
#[allow(clippy::too_many_arguments)]
fn fields(
    op: FrameOp,
    flags: u8,
    aux: u8,
    src: u32,
    dst: u32,
    seq: u64,
    ack: u64,
    context: u64,
    offset: u64,
    span: u32,
) -> HeaderFields {
    HeaderFields {
        op: op as u8,
        flags,
        aux,
        src_pe: src,
        dst_pe: dst,
        seq,
        ack,
        context,
        topo_version: 0,
        offset,
        span,
    }
}

/// Recomputes the CRC of a 64-byte header (and of `payload` when the header
/// says `PAYLOAD_CRC`) after a header field changed.
fn reseal(hdr: &mut [u8], payload: &[u8]) {
    let mut crc = crc32c(&hdr[..60]);
    crc = crc32c_append(crc, &[0; 4]);
    if hdr[4] & flags::PAYLOAD_CRC != 0 {
        crc = crc32c_append(crc, payload);
    }
    hdr[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes waiting to be written on one connection (control frames, replies),
/// in a fixed buffer.
#[derive(Debug)]
struct OutBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl OutBuf {
    fn new(cap: usize) -> OutBuf {
        OutBuf {
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn advance(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.clear();
        }
    }

    /// `n` writable bytes at the end, or `None` when they do not fit.
    fn reserve(&mut self, n: usize) -> Option<&mut [u8]> {
        if self.buf.len() - self.end < n && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < n {
            return None;
        }
        let end = self.end;
        Some(&mut self.buf[end..end + n])
    }

    fn commit(&mut self, n: usize) {
        self.end += n;
    }

    /// Appends a whole frame; `false` when it does not fit.
    fn frame(&mut self, f: &HeaderFields, payload: &[u8], crc: bool) -> bool {
        let n = HEADER_LEN + payload.len();
        let Some(b) = self.reserve(n) else {
            return false;
        };
        if encode(b, f, payload, crc).is_err() {
            return false;
        }
        self.commit(n);
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    /// Active side: TCP connect in progress.
    Connecting,
    /// Active side: our Hello is out, waiting for the answer.
    HelloSent,
    /// Handshake done.
    Up,
}

#[derive(Debug)]
struct Conn {
    sock: Option<TcpStream>,
    phase: Phase,
    dec: StreamDecoder,
    out: OutBuf,
    /// Next sequence the send scan looks at.
    cursor: u64,
    /// A frame partly written: (sequence, bytes written).
    partial: Option<(u64, usize)>,
    /// What the peer's Hello said (applied, granted).
    hello: Option<(u64, u64)>,
}

impl Conn {
    fn new(data: bool, max_payload: u32) -> Conn {
        let dec_payload = if data { max_payload } else { CONTROL_PAYLOAD };
        let out = if data {
            HEADER_LEN + max_payload as usize + CONTROL_OUT
        } else {
            CONTROL_OUT
        };
        Conn {
            sock: None,
            phase: Phase::Closed,
            dec: StreamDecoder::new(dec_payload),
            out: OutBuf::new(out),
            cursor: 0,
            partial: None,
            hello: None,
        }
    }
}

/// One rail toward one peer.
#[derive(Debug)]
struct RailLink {
    addr: Option<SocketAddr>,
    state: LinkState,
    conns: Vec<Conn>,
    last_rx: Instant,
    last_tx: Instant,
    backoff: Backoff,
    next_attempt: Option<Instant>,
    connecting: bool,
    deadline: Instant,
    ever_up: bool,
}

/// Per-peer state outside the rails.
#[derive(Debug)]
struct PeerState {
    pe: u32,
    heap_len: u64,
    // Send side.
    ring: ReplayRing,
    credit: CreditWindow,
    acked: u64,
    crc_count: u32,
    fence_seq: u64,
    fence_flag: bool,
    ack_requested: bool,
    /// In-flight frame limit while ramping up after a recovery (`u64::MAX`:
    /// none).
    ramp: u64,
    resume: Option<Resume>,
    // Receive side.
    dedup: DedupWindow,
    granter: CreditGranter,
    atomic_cache: Box<[(u64, u64)]>,
    rx_frames: u32,
    rx_bytes: u64,
    ack_sent: u64,
    /// When the oldest frame received and not acked arrived.
    unacked_since: Option<Instant>,
    ack_now: bool,
    grant_sent: u64,
    // Liveness.
    dead: bool,
    dead_unreported: bool,
    down_since: Option<Instant>,
    refused_streak: u8,
    closed_by_peer: bool,
}

/// A multi-frame put that stopped half way on a full window, so that the
/// retry of the same call continues where it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resume {
    rail: usize,
    offset: u64,
    src: usize,
    len: u64,
    from_heap: bool,
    done: u64,
}

#[derive(Debug)]
struct Peer {
    rails: Vec<RailLink>,
    st: PeerState,
}

impl Peer {
    fn any_up(&self) -> Option<usize> {
        self.rails.iter().position(|r| r.state == LinkState::Up)
    }
}

/// A connection accepted and not yet identified.
#[derive(Debug)]
struct Pending {
    sock: Option<TcpStream>,
    addr: Option<SocketAddr>,
    rail: usize,
    dec: StreamDecoder,
    deadline: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Pending,
    Done,
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct GetSlot {
    gen_: u16,
    state: SlotState,
    peer: u32,
    at: usize,
    len: u32,
    into_heap: Option<u64>,
    order: u64,
}

/// Outstanding gets and the arena holding their replies.
#[derive(Debug)]
struct Gets {
    slots: Vec<GetSlot>,
    arena: Box<[u8]>,
    head: usize,
    tail: usize,
    live: usize,
    order: u64,
}

impl Gets {
    fn new(arena: usize) -> Gets {
        Gets {
            slots: vec![
                GetSlot {
                    gen_: 0,
                    state: SlotState::Free,
                    peer: 0,
                    at: 0,
                    len: 0,
                    into_heap: None,
                    order: 0,
                };
                GET_SLOTS
            ],
            arena: vec![0u8; arena].into_boxed_slice(),
            head: 0,
            tail: 0,
            live: 0,
            order: 0,
        }
    }

    /// Where `n` arena bytes go (same scheme as the replay ring).
    fn place(&self, n: usize) -> Option<usize> {
        let cap = self.arena.len();
        if n > cap {
            return None;
        }
        if self.live == 0 {
            return Some(0);
        }
        if self.head > self.tail {
            if cap - self.head >= n {
                Some(self.head)
            } else if self.tail >= n {
                Some(0)
            } else {
                None
            }
        } else if self.head < self.tail {
            (self.tail - self.head >= n).then_some(self.head)
        } else {
            None
        }
    }

    /// Takes a slot (and `len` arena bytes unless the reply goes to the heap).
    fn take(&mut self, peer: u32, len: u32, into_heap: Option<u64>) -> Option<u32> {
        let idx = self.slots.iter().position(|s| s.state == SlotState::Free)?;
        let mut at = 0;
        if into_heap.is_none() {
            at = self.place(len as usize)?;
            if self.live == 0 {
                self.tail = at;
            }
            self.head = at + len as usize;
            self.live += 1;
        }
        self.order += 1;
        let s = &mut self.slots[idx];
        s.gen_ = s.gen_.wrapping_add(1);
        s.state = SlotState::Pending;
        s.peer = peer;
        s.at = at;
        s.len = len;
        s.into_heap = into_heap;
        s.order = self.order;
        Some(idx as u32 | u32::from(s.gen_) << SLOT_BITS)
    }

    fn find(&self, slot: u32) -> Option<usize> {
        let idx = (slot & ((1 << SLOT_BITS) - 1)) as usize;
        let s = self.slots.get(idx)?;
        (s.gen_ == (slot >> SLOT_BITS) as u16 && s.state != SlotState::Free).then_some(idx)
    }

    fn free(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        let had_arena = s.into_heap.is_none();
        s.state = SlotState::Free;
        if had_arena {
            self.live -= 1;
            if self.live == 0 {
                self.head = 0;
                self.tail = 0;
            } else {
                // The oldest live arena allocation starts the used region.
                let mut best: Option<(u64, usize)> = None;
                for s in &self.slots {
                    if s.state != SlotState::Free
                        && s.into_heap.is_none()
                        && best.is_none_or(|b| s.order < b.0)
                    {
                        best = Some((s.order, s.at));
                    }
                }
                if let Some((_, at)) = best {
                    self.tail = at;
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct AtomicSlot {
    gen_: u16,
    state: SlotState,
    peer: u32,
    value: u64,
}

/// Everything but the peers and the listeners, so that helpers can borrow
/// it next to one peer.
#[derive(Debug)]
struct Ctx {
    cfg: TcpConfig,
    me: u32,
    heap: Heap,
    stats: SocketStats,
    events: VecDeque<Event>,
    gets: Gets,
    atomics: Vec<AtomicSlot>,
    epoll: sys::Epoll,
    now: Instant,
    /// When the slow pass next looks at the listeners.
    next_accept: Instant,
    /// Progress steps taken (the slow pass runs every [`SLOW_EVERY`]).
    steps: u32,
    closed: bool,
    seed: u64,
    handshake_timeout: Duration,
}

impl Ctx {
    fn event(&mut self, e: Event) {
        if self.events.len() == EVENT_CAP {
            self.events.pop_front();
        }
        self.events.push_back(e);
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

    fn hello(&self, st: &PeerState, rail: usize, conn: usize) -> Hello {
        Hello {
            cookie: self.cfg.cookie,
            job_id: self.cfg.job_id,
            src: self.me,
            dst: st.pe,
            rail: rail as u8,
            conn: conn as u8,
            n_conns: self.n_conns() as u8,
            applied: st.dedup.base(),
            granted: st.granter.granted(),
            heap_len: self.heap.len(),
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

/// What handling one incoming frame asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Done,
    /// No room for the reply yet: keep the frame, stop reading.
    Stall,
    /// Malformed or a protocol violation: cut the connection.
    Cut,
    /// The peer closes in order.
    Close,
}

/// Why a rail goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Down {
    /// Connection error, end of stream, or silence.
    Failure,
    /// A malformed frame.
    BadFrame,
    /// The peer closed in order.
    Closed,
}

/// The TCP transport of one PE (crate docs).
#[derive(Debug)]
pub struct SocketDriver {
    ctx: Ctx,
    listeners: Vec<Option<TcpListener>>,
    local: Vec<SocketAddr>,
    peers: Vec<Option<Box<Peer>>>,
    pending: Vec<Pending>,
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
        let mut listeners = Vec::new();
        let mut local = Vec::new();
        for (rail, &ip) in cfg.listen.iter().enumerate() {
            let l = TcpListener::bind(SocketAddr::new(ip, cfg.listen_port))
                .and_then(|l| l.set_nonblocking(true).map(|_| l))
                .and_then(|l| l.local_addr().map(|a| (l, a)))
                .map_err(|source| SocketError::Listen {
                    rail,
                    addr: ip,
                    source,
                })?;
            epoll
                .add(l.0.as_raw_fd())
                .map_err(|source| SocketError::Epoll { source })?;
            local.push(l.1);
            listeners.push(Some(l.0));
        }
        let seed = u64::from(std::process::id()) << 32
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
            ^ u64::from(cfg.me).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let pending = (0..MAX_PENDING)
            .map(|_| Pending {
                sock: None,
                addr: None,
                rail: 0,
                dec: StreamDecoder::new(CONTROL_PAYLOAD),
                deadline: Instant::default(),
            })
            .collect();
        let handshake_timeout = (cfg.detection_window * 5).max(Duration::from_secs(1));
        let ctx = Ctx {
            me: cfg.me,
            heap,
            stats: SocketStats::default(),
            events: VecDeque::with_capacity(EVENT_CAP),
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
            steps: 0,
            closed: false,
            seed,
            handshake_timeout,
            cfg,
        };
        let n = ctx.cfg.n_pes as usize;
        Ok(SocketDriver {
            peers: (0..n).map(|_| None).collect(),
            ctx,
            listeners,
            local,
            pending,
        })
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

    /// Sets the job cookie every handshake carries and checks. The listeners
    /// exist from [`SocketDriver::new`] (their addresses go in the bootstrap
    /// cards), but the cookie is known only after the card exchange: call
    /// this before [`SocketDriver::connect_all`]. Handshakes made before it
    /// used the old cookie.
    pub fn set_cookie(&mut self, cookie: [u8; 16]) {
        self.ctx.cfg.cookie = cookie;
    }

    /// Declares `pe`'s listening address per rail (same rail order; fewer
    /// addresses = the missing rails are absent toward it) and its heap size,
    /// and allocates everything the data path to it needs. Calling it again
    /// updates the addresses.
    ///
    /// # Errors
    /// [`SocketError::InvalidPe`], [`SocketError::PeerAddrs`].
    pub fn set_peer(&mut self, pe: u32, addrs: &[SocketAddr], heap_len: u64) -> Result<()> {
        if pe >= self.ctx.cfg.n_pes || pe == self.ctx.me {
            return Err(SocketError::InvalidPe {
                peer: pe,
                n_pes: self.ctx.cfg.n_pes,
            });
        }
        if addrs.len() > MAX_RAILS {
            return Err(SocketError::PeerAddrs {
                peer: pe,
                count: addrs.len(),
                max: MAX_RAILS,
            });
        }
        let rails = self.rails();
        if let Some(p) = &mut self.peers[pe as usize] {
            for (r, rl) in p.rails.iter_mut().enumerate() {
                rl.addr = addrs.get(r).copied();
            }
            p.st.heap_len = heap_len;
            return Ok(());
        }
        let cfg = &self.ctx.cfg;
        let window = u64::from(cfg.window);
        let mut rail_links = Vec::with_capacity(rails);
        for r in 0..rails {
            let conns = (0..self.ctx.n_conns())
                .map(|c| Conn::new(c > 0, cfg.max_frame_payload.max(self.max_get_len())))
                .collect();
            let seed =
                self.ctx.seed ^ (u64::from(pe) << 8 | r as u64).wrapping_mul(0xA24B_AED4_963E_E407);
            rail_links.push(RailLink {
                addr: addrs.get(r).copied(),
                state: LinkState::Down,
                conns,
                last_rx: Instant::default(),
                last_tx: Instant::default(),
                backoff: Backoff::new(cfg.reconnect_base, cfg.reconnect_cap, seed),
                next_attempt: None,
                connecting: false,
                deadline: Instant::default(),
                ever_up: false,
            });
        }
        let st = PeerState {
            pe,
            heap_len,
            ring: ReplayRing::new(cfg.window as usize),
            credit: CreditWindow::new(window),
            acked: 0,
            crc_count: 0,
            fence_seq: 0,
            fence_flag: false,
            ack_requested: false,
            ramp: u64::MAX,
            resume: None,
            dedup: DedupWindow::new(),
            granter: CreditGranter::new(window, window / 4),
            atomic_cache: vec![(0u64, 0u64); ATOMIC_CACHE].into_boxed_slice(),
            rx_frames: 0,
            rx_bytes: 0,
            ack_sent: 0,
            unacked_since: None,
            ack_now: false,
            grant_sent: window,
            dead: false,
            dead_unreported: false,
            down_since: None,
            refused_streak: 0,
            closed_by_peer: false,
        };
        self.peers[pe as usize] = Some(Box::new(Peer {
            rails: rail_links,
            st,
        }));
        Ok(())
    }

    /// Starts connecting rail `rail` to `peer` (the lower rank connects; the
    /// higher one waits for it). Non-blocking.
    pub(crate) fn connect_rail(&mut self, rail: usize, peer: u32) -> Result<()> {
        if peer == self.ctx.me {
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        if p.st.down_since.is_none() && p.any_up().is_none() {
            p.st.down_since = Some(ctx.now);
        }
        if ctx.me < peer
            && rail < p.rails.len()
            && p.rails[rail].addr.is_some()
            && p.rails[rail].state != LinkState::Up
            && !p.rails[rail].connecting
        {
            start_connect(ctx, p, rail);
        }
        Ok(())
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

    /// Connects every rail to every listed peer (this PE excluded) and runs
    /// [`SocketDriver::progress`] until all are Up, or `timeout` (measured
    /// with the system clock from `now`). Both sides of each pair must call it
    /// (or otherwise run progress).
    ///
    /// # Errors
    /// [`SocketError::PeerUnknown`] for a peer without addresses,
    /// [`SocketError::PeerDead`], [`SocketError::ConnectTimeout`] naming the
    /// (PE, rail) pairs still down.
    pub fn connect_all(
        &mut self,
        peers: impl Iterator<Item = u32>,
        now: Instant,
        timeout: Duration,
    ) -> Result<()> {
        let list: Vec<u32> = peers.filter(|&p| p != self.ctx.me).collect();
        self.ctx.now = self.ctx.now.max(now);
        let start = self.ctx.now;
        let t0 = std::time::Instant::now();
        for &p in &list {
            for r in 0..self.rails() {
                self.connect_rail(r, p)?;
            }
        }
        loop {
            let el = t0.elapsed();
            // Connecting is all slow-pass work: make every step a full pass.
            self.ctx.steps = SLOW_EVERY - 1;
            self.progress(Instant::from_nanos(start.nanos + el.as_nanos() as u64));
            let mut missing = Vec::new();
            for &p in &list {
                let peer = self.peer_mut(p)?;
                if peer.st.closed_by_peer {
                    // It connected, and has already closed in an orderly
                    // way: nothing left to wait for.
                    continue;
                }
                for (r, rl) in peer.rails.iter().enumerate() {
                    if rl.addr.is_some() && rl.state != LinkState::Up {
                        missing.push((p, r));
                    }
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            if el > timeout {
                return Err(SocketError::ConnectTimeout { timeout, missing });
            }
            self.ctx.epoll.wait(1);
        }
    }

    /// Parks until a socket is readable or `timeout` passed (adaptive
    /// progress: spin a while, then park here).
    pub fn wait(&mut self, timeout: Duration) {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        self.ctx.epoll.wait(ms);
        // Whatever woke us may be on a control connection or a listener:
        // the next progress step is a full (slow) pass.
        self.ctx.steps = SLOW_EVERY - 1;
    }

    /// A handle that parks another thread until this driver has input (a
    /// frame, a connection, a hang-up), without touching the driver: for a
    /// progress thread that then takes the driver to progress it.
    ///
    /// # Errors
    ///
    /// When the epoll descriptor cannot be duplicated (descriptor limit).
    pub fn parker(&self) -> Result<Parker> {
        self.ctx
            .epoll
            .try_clone()
            .map(Parker)
            .map_err(|source| SocketError::Epoll { source })
    }

    /// The next queued transition, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.ctx.events.pop_front()
    }

    /// The counters.
    pub fn stats(&self) -> SocketStats {
        self.ctx.stats
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

    /// Whether every operation on every rail is complete at its target (acked,
    /// and answered for gets into the heap). Runs one progress step; when
    /// frames are unacked it asks each such peer once for an immediate ack.
    ///
    /// # Errors
    /// [`SocketError::PeerDead`] once for a peer given up on while it had
    /// operations pending (they were dropped); [`SocketError::Closed`].
    pub fn quiet_poll(&mut self) -> Result<bool> {
        if self.ctx.closed {
            return Err(SocketError::Closed { peer: None });
        }
        for p in self.peers.iter_mut().flatten() {
            if p.st.dead_unreported {
                p.st.dead_unreported = false;
                return Err(SocketError::PeerDead { peer: p.st.pe });
            }
        }
        let now = self.ctx.now;
        self.progress(now);
        let mut all = true;
        let ctx = &mut self.ctx;
        for p in self.peers.iter_mut().flatten() {
            if p.st.ring.is_empty() || p.st.dead {
                continue;
            }
            all = false;
            if !p.st.ack_requested {
                request_ack(ctx, p);
            }
        }
        Ok(all)
    }

    /// Orders: for each peer, later heap-touching frames apply after every
    /// earlier one. A frame that would travel on another connection than some
    /// earlier unacknowledged frame waits (`WouldBlock`) for the acks.
    ///
    /// # Errors
    /// [`SocketError::Closed`].
    pub fn fence(&mut self) -> Result<()> {
        if self.ctx.closed {
            return Err(SocketError::Closed { peer: None });
        }
        for p in self.peers.iter_mut().flatten() {
            let last = p.st.ring.next_seq() - 1;
            if last > p.st.acked {
                p.st.fence_seq = last;
            }
            p.st.fence_flag = true;
        }
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

    /// Sends every ack owed now, without waiting for the ack delay: before
    /// this PE stops making progress for a while (the end of a job), so that
    /// peers waiting in `quiet` for what it applied are not left waiting.
    pub fn flush_acks(&mut self) {
        for p in self.peers.iter_mut().flatten() {
            if !p.st.dead && p.st.dedup.base() > p.st.ack_sent {
                p.st.ack_now = true;
                send_acks(&mut self.ctx, p);
            }
        }
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

    /// One step on every rail: accept, handshake, read and apply frames,
    /// serve gets and atomics, send acks, credits and heartbeats, detect
    /// failures, reconnect. `now` never goes backwards (an older one is
    /// ignored).
    pub fn progress(&mut self, now: Instant) -> PollResult {
        if self.ctx.closed {
            return PollResult::Idle;
        }
        self.ctx.now = self.ctx.now.max(now);
        self.ctx.steps = self.ctx.steps.wrapping_add(1);
        let slow = self.ctx.steps.is_multiple_of(SLOW_EVERY);
        let mut busy = false;
        if slow {
            // Listeners rarely have anything: look at most every
            // ACCEPT_EVERY (a refused `accept` is a system call on the
            // waiting path), but at once again after one arrived.
            if self.ctx.now >= self.ctx.next_accept {
                let got = self.accept();
                busy |= got;
                let wait = if got {
                    0
                } else {
                    ACCEPT_EVERY.as_nanos() as u64
                };
                self.ctx.next_accept = Instant::from_nanos(self.ctx.now.nanos.saturating_add(wait));
            }
            busy |= self.handshakes();
        }
        for p in self.peers.iter_mut().flatten() {
            if p.st.dead {
                continue;
            }
            busy |= service_peer(&mut self.ctx, p, slow);
        }
        if busy {
            PollResult::Busy
        } else {
            PollResult::Idle
        }
    }

    fn accept(&mut self) -> bool {
        let mut busy = false;
        for (rail, l) in self.listeners.iter().enumerate() {
            let Some(l) = l else { continue };
            while let Ok((s, addr)) = l.accept() {
                busy = true;
                if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
                    continue;
                }
                let Some(slot) = self.pending.iter_mut().find(|p| p.sock.is_none()) else {
                    self.ctx.stats.refused += 1;
                    self.ctx.event(Event::Refused {
                        addr,
                        why: RefuseReason::Overload,
                    });
                    continue;
                };
                let _ = self.ctx.epoll.add(s.as_raw_fd());
                slot.sock = Some(s);
                slot.addr = Some(addr);
                slot.rail = rail;
                slot.dec.reset();
                slot.deadline = self.ctx.later(self.ctx.handshake_timeout);
            }
        }
        busy
    }

    /// Reads the `Hello` of accepted connections and installs them.
    fn handshakes(&mut self) -> bool {
        let mut busy = false;
        for i in 0..self.pending.len() {
            let pd = &mut self.pending[i];
            let Some(s) = &pd.sock else { continue };
            let addr = pd
                .addr
                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            let fd = s.as_raw_fd();
            let mut eof = false;
            loop {
                let spare = pd.dec.spare();
                if spare.is_empty() {
                    break;
                }
                match sys::recv(fd, spare) {
                    Ok(Some(0)) | Err(_) => {
                        eof = true;
                        break;
                    }
                    Ok(Some(n)) => {
                        self.ctx.stats.bytes_received += n as u64;
                        pd.dec.commit(n);
                    }
                    Ok(None) => break,
                }
            }
            let hello = match pd.dec.peek() {
                Ok(Some(f)) if f.op() == Some(FrameOp::Hello) => match Hello::decode(f.payload()) {
                    Some(h) => Ok(Some(h)),
                    None => Err(RefuseReason::Garbage),
                },
                Ok(Some(_)) | Err(_) => Err(RefuseReason::Garbage),
                Ok(None) if eof => Err(RefuseReason::Garbage),
                Ok(None) if self.ctx.now > pd.deadline => Err(RefuseReason::Timeout),
                Ok(None) => Ok(None),
            };
            let rail = pd.rail;
            let h = match hello {
                Ok(None) => continue,
                Ok(Some(h)) => h,
                Err(why) => {
                    busy = true;
                    pd.sock = None;
                    self.refuse(addr, why);
                    continue;
                }
            };
            busy = true;
            let ctx = &self.ctx;
            let why = if h.cookie != ctx.cfg.cookie {
                Some(RefuseReason::BadCookie)
            } else if h.job_id != ctx.cfg.job_id {
                Some(RefuseReason::BadJob)
            } else if h.dst != ctx.me || h.src >= ctx.me {
                Some(RefuseReason::BadPe)
            } else if h.rail as usize != rail
                || h.conn as usize >= ctx.n_conns()
                || h.n_conns as usize != ctx.n_conns()
            {
                Some(RefuseReason::BadRail)
            } else {
                match self.peers[h.src as usize].as_deref() {
                    None => Some(RefuseReason::NotConfigured),
                    Some(p) if p.st.dead || p.rails[rail].addr.is_none() => {
                        Some(RefuseReason::BadPe)
                    }
                    Some(_) => None,
                }
            };
            let sock = self.pending[i].sock.take();
            if let Some(why) = why {
                self.refuse(addr, why);
                continue;
            }
            let (Some(sock), Some(p)) = (sock, self.peers[h.src as usize].as_deref_mut()) else {
                continue;
            };
            install(&mut self.ctx, p, rail, h, sock);
        }
        busy
    }

    fn refuse(&mut self, addr: SocketAddr, why: RefuseReason) {
        self.ctx.stats.refused += 1;
        self.ctx.event(Event::Refused { addr, why });
    }

    // ---- the data path ------------------------------------------------

    /// Checks the target and the range; `Ok(false)` for this PE itself.
    fn target(&mut self, rail: usize, peer: u32, offset: u64, len: u64) -> Result<bool> {
        assert!(rail < self.rails(), "rail {rail} of {}", self.rails());
        if self.ctx.closed {
            return Err(SocketError::Closed { peer: Some(peer) });
        }
        let heap_len = if peer == self.ctx.me {
            self.ctx.heap.len()
        } else {
            self.peer_mut(peer)?.st.heap_len
        };
        if offset.checked_add(len).is_none_or(|e| e > heap_len) {
            return Err(SocketError::OutOfBounds {
                peer,
                offset,
                len,
                heap_len,
            });
        }
        if peer == self.ctx.me {
            return Ok(false);
        }
        let p = self.peer_mut(peer)?;
        if p.rails[rail].state != LinkState::Up {
            return Err(SocketError::RailDown { peer, rail });
        }
        Ok(true)
    }

    fn local_range(&self, local_offset: u64, len: u32) -> Result<()> {
        let heap_len = self.ctx.heap.len();
        if local_offset
            .checked_add(u64::from(len))
            .is_none_or(|e| e > heap_len)
        {
            return Err(SocketError::OutOfBounds {
                peer: self.ctx.me,
                offset: local_offset,
                len: u64::from(len),
                heap_len,
            });
        }
        Ok(())
    }

    /// `put` on rail `rail`.
    pub(crate) fn put(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        src: &[u8],
        cx: ContextId,
    ) -> Result<()> {
        if !self.target(rail, peer, offset, src.len() as u64)? {
            self.ctx.heap.write(offset, src);
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        put_frames(ctx, p, rail, offset, Source::Copy(src), cx)
    }

    /// `put_from_heap` on rail `rail`.
    pub(crate) fn put_from_heap(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<()> {
        self.local_range(local_offset, len)?;
        if !self.target(rail, peer, offset, u64::from(len))? {
            self.ctx
                .heap
                .copy_within(local_offset, offset, len as usize);
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        put_frames(ctx, p, rail, offset, Source::Heap(local_offset, len), cx)
    }

    /// `get_into_heap` on rail `rail`.
    pub(crate) fn get_into_heap(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<()> {
        self.local_range(local_offset, len)?;
        let max = self.max_get_len();
        if !self.target(rail, peer, offset, u64::from(len))? {
            self.ctx
                .heap
                .copy_within(offset, local_offset, len as usize);
            return Ok(());
        }
        if len == 0 {
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        // Split into gets of at most `max` bytes within one block each, all
        // or nothing.
        let n = {
            let (mut n, mut at, end) = (0u64, offset, offset + u64::from(len));
            while at < end {
                at += ctx.chunk_at(at, end - at, u64::from(max));
                n += 1;
            }
            n
        };
        if p.st.ring.len() + n > crate::dedup::WINDOW || free_get_slots(ctx) < n as usize {
            return Err(SocketError::WouldBlock {
                peer,
                what: "get table",
            });
        }
        check_fence(ctx, p, rail, offset, u64::from(len))?;
        let mut done = 0u32;
        while done < len {
            let chunk = ctx.chunk_at(
                offset + u64::from(done),
                u64::from(len - done),
                u64::from(max),
            ) as u32;
            let Some(slot) = ctx
                .gets
                .take(peer, chunk, Some(local_offset + u64::from(done)))
            else {
                return Err(SocketError::WouldBlock {
                    peer,
                    what: "get table",
                });
            };
            if let Err(e) = get_frame(ctx, p, rail, offset + u64::from(done), chunk, slot, cx) {
                if let Some(i) = ctx.gets.find(slot) {
                    ctx.gets.free(i);
                }
                return Err(e);
            }
            done += chunk;
        }
        kick(ctx, p, rail);
        Ok(())
    }

    /// `get_start` on rail `rail`.
    pub(crate) fn get_start(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<Ticket> {
        let max = self.max_get_len();
        if len > max {
            return Err(SocketError::TooLong { peer, len, max });
        }
        let me = self.ctx.me;
        let local = !self.target(rail, peer, offset, u64::from(len))?;
        let Some(slot) = self.ctx.gets.take(peer, len, None) else {
            return Err(SocketError::WouldBlock {
                peer,
                what: "get arena",
            });
        };
        let ticket = Ticket {
            peer,
            offset,
            len,
            slot,
            atomic: None,
            context: cx,
        };
        let idx = self.ctx.gets.find(slot).unwrap_or(0);
        if local || peer == me {
            let s = self.ctx.gets.slots[idx];
            let (heap, arena) = (&self.ctx.heap, &mut self.ctx.gets.arena);
            heap.read(offset, &mut arena[s.at..s.at + len as usize]);
            self.ctx.gets.slots[idx].state = SlotState::Done;
            return Ok(ticket);
        }
        let (ctx, p) = match self.split(peer) {
            Ok(x) => x,
            Err(e) => {
                self.ctx.gets.free(idx);
                return Err(e);
            }
        };
        let r = check_fence(ctx, p, rail, offset, u64::from(len))
            .and_then(|_| check_straddle(ctx, p, rail, offset, len))
            .and_then(|_| get_frame(ctx, p, rail, offset, len, slot, cx));
        if let Err(e) = r {
            ctx.gets.free(idx);
            return Err(e);
        }
        kick(ctx, p, rail);
        Ok(ticket)
    }

    /// `get_poll`.
    pub(crate) fn get_poll(&mut self, t: &Ticket, dst: &mut [u8]) -> Result<bool> {
        let Some(idx) = self.ctx.gets.find(t.slot) else {
            return Err(SocketError::StaleTicket {
                peer: t.peer,
                slot: t.slot,
            });
        };
        if self.ctx.gets.slots[idx].state == SlotState::Pending {
            let now = self.ctx.now;
            self.progress(now);
        }
        let s = self.ctx.gets.slots[idx];
        match s.state {
            SlotState::Done => {
                let n = (s.len as usize).min(dst.len());
                dst[..n].copy_from_slice(&self.ctx.gets.arena[s.at..s.at + n]);
                self.ctx.gets.free(idx);
                Ok(true)
            }
            SlotState::Failed => {
                self.ctx.gets.free(idx);
                Err(if self.ctx.closed {
                    SocketError::Closed { peer: Some(t.peer) }
                } else {
                    SocketError::PeerDead { peer: t.peer }
                })
            }
            _ => Ok(false),
        }
    }

    /// `atomic_start` on rail `rail`.
    pub(crate) fn atomic_start(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        cx: ContextId,
    ) -> Result<Ticket> {
        let w = op.width.bytes() as u64;
        let local = !self.target(rail, peer, offset, w)?;
        if !offset.is_multiple_of(w) {
            return Err(SocketError::Misaligned {
                peer,
                offset,
                align: w,
            });
        }
        let mut ticket = Ticket {
            peer,
            offset,
            len: w as u32,
            slot: NO_SLOT,
            atomic: Some(op),
            context: cx,
        };
        let slot = if op.is_fetching() {
            let Some(idx) = self
                .ctx
                .atomics
                .iter()
                .position(|s| s.state == SlotState::Free)
            else {
                return Err(SocketError::WouldBlock {
                    peer,
                    what: "atomic table",
                });
            };
            let s = &mut self.ctx.atomics[idx];
            s.gen_ = s.gen_.wrapping_add(1);
            s.state = SlotState::Pending;
            s.peer = peer;
            Some(idx)
        } else {
            None
        };
        if let Some(idx) = slot {
            ticket.slot = idx as u32 | u32::from(self.ctx.atomics[idx].gen_) << SLOT_BITS;
        }
        if local {
            let old = self.ctx.heap.atomic(offset, &op);
            if let Some(idx) = slot {
                self.ctx.atomics[idx].value = op.width.truncate(old);
                self.ctx.atomics[idx].state = SlotState::Done;
            }
            return Ok(ticket);
        }
        let r = self.split(peer).and_then(|(ctx, p)| {
            check_fence(ctx, p, rail, offset, op.width.bytes() as u64)?;
            atomic_frame(ctx, p, rail, offset, &op, ticket.slot, cx)?;
            kick(ctx, p, rail);
            Ok(())
        });
        if let Err(e) = r {
            if let Some(idx) = slot {
                self.ctx.atomics[idx].state = SlotState::Free;
            }
            return Err(e);
        }
        Ok(ticket)
    }

    /// `atomic_poll`.
    pub(crate) fn atomic_poll(&mut self, t: &Ticket) -> Result<Option<u64>> {
        if t.slot == NO_SLOT {
            return Ok(Some(0));
        }
        let idx = (t.slot & ((1 << SLOT_BITS) - 1)) as usize;
        let live =
            self.ctx.atomics.get(idx).is_some_and(|s| {
                s.gen_ == (t.slot >> SLOT_BITS) as u16 && s.state != SlotState::Free
            });
        if !live {
            return Err(SocketError::StaleTicket {
                peer: t.peer,
                slot: t.slot,
            });
        }
        if self.ctx.atomics[idx].state == SlotState::Pending {
            let now = self.ctx.now;
            self.progress(now);
        }
        let s = self.ctx.atomics[idx];
        match s.state {
            SlotState::Done => {
                self.ctx.atomics[idx].state = SlotState::Free;
                Ok(Some(s.value))
            }
            SlotState::Failed => {
                self.ctx.atomics[idx].state = SlotState::Free;
                Err(if self.ctx.closed {
                    SocketError::Closed { peer: Some(t.peer) }
                } else {
                    SocketError::PeerDead { peer: t.peer }
                })
            }
            _ => Ok(None),
        }
    }
}

fn free_get_slots(ctx: &Ctx) -> usize {
    ctx.gets
        .slots
        .iter()
        .filter(|s| s.state == SlotState::Free)
        .count()
}

/// Where a put's payload comes from.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Copy(&'a [u8]),
    Heap(u64, u32),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Copy(s) => s.len() as u64,
            Source::Heap(_, l) => u64::from(*l),
        }
    }
}

/// Applies the fence rule to the next heap-touching frame toward `p` on
/// `rail` (payload `span` picks its connection).
fn check_fence(ctx: &mut Ctx, p: &mut Peer, rail: usize, offset: u64, len: u64) -> Result<()> {
    let st = &mut p.st;
    if st.fence_seq == 0 || st.fence_seq <= st.acked {
        st.fence_seq = 0;
        return Ok(());
    }
    // Earlier frames still unacked: fine only if every one of them travels on
    // the one connection every frame of this operation takes (one TCP stream
    // keeps the order).
    let conn = ctx.conn_for(offset);
    let one_conn = ctx.cfg.data_connections == 1
        || len == 0
        || offset / ctx.block() == (offset + len - 1) / ctx.block();
    let mut same = one_conn;
    let mut s = st.ring.tail_seq().max(st.acked + 1);
    while same && s <= st.fence_seq {
        if let Some(e) = st.ring.get(s)
            && !e.acked
            && (usize::from(e.rail) != rail || e.conn != conn)
        {
            same = false;
        }
        s += 1;
    }
    if same {
        return Ok(());
    }
    if !st.ack_requested {
        request_ack(ctx, p);
    }
    Err(SocketError::WouldBlock {
        peer: p.st.pe,
        what: "fence",
    })
}

/// A get frame straddling two placement blocks travels on the first block's
/// connection: it waits (`WouldBlock`, an ack requested) until no earlier
/// frame on the second block's connection is unacked, so it never reads
/// around a put issued before it.
fn check_straddle(ctx: &mut Ctx, p: &mut Peer, rail: usize, offset: u64, len: u32) -> Result<()> {
    if ctx.cfg.data_connections == 1 || len == 0 {
        return Ok(());
    }
    let last = offset + u64::from(len) - 1;
    let (first, second) = (ctx.conn_for(offset), ctx.conn_for(last));
    if first == second {
        return Ok(());
    }
    let st = &p.st;
    let pending = (st.ring.tail_seq().max(st.acked + 1)..st.ring.next_seq()).any(|s| {
        st.ring
            .get(s)
            .is_some_and(|e| !e.acked && usize::from(e.rail) == rail && e.conn == second)
    });
    if !pending {
        return Ok(());
    }
    if !p.st.ack_requested {
        request_ack(ctx, p);
    }
    Err(SocketError::WouldBlock {
        peer: p.st.pe,
        what: "earlier puts on another connection",
    })
}

fn put_frames(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    src: Source<'_>,
    cx: ContextId,
) -> Result<()> {
    let len = src.len();
    if len == 0 {
        return Ok(());
    }
    let max = u64::from(ctx.cfg.max_frame_payload);
    let key = Resume {
        rail,
        offset,
        src: match src {
            Source::Copy(s) => s.as_ptr() as usize,
            Source::Heap(o, _) => o as usize,
        },
        len,
        from_heap: matches!(src, Source::Heap(..)),
        done: 0,
    };
    let mut done = match p.st.resume {
        Some(r) if Resume { done: 0, ..r } == key => r.done,
        _ => 0,
    };
    if done == 0 {
        check_fence(ctx, p, rail, offset, len)?;
    }
    while done < len {
        let chunk = ctx.chunk_at(offset + done, len - done, max);
        let payload = match src {
            Source::Copy(s) => Source::Copy(&s[done as usize..(done + chunk) as usize]),
            Source::Heap(o, _) => Source::Heap(o + done, chunk as u32),
        };
        if push_frame(
            ctx,
            p,
            rail,
            FrameOp::Put,
            0,
            offset + done,
            chunk as u32,
            payload,
            NO_SLOT,
            false,
            cx,
        )
        .is_err()
        {
            p.st.resume = Some(Resume { done, ..key });
            kick(ctx, p, rail);
            return Err(SocketError::WouldBlock {
                peer: p.st.pe,
                what: "send window",
            });
        }
        done += chunk;
    }
    p.st.resume = None;
    kick(ctx, p, rail);
    Ok(())
}

fn get_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    len: u32,
    slot: u32,
    cx: ContextId,
) -> Result<()> {
    push_frame(
        ctx,
        p,
        rail,
        FrameOp::Get,
        0,
        offset,
        len,
        Source::Copy(&[]),
        slot,
        true,
        cx,
    )
    .map(|_| ())
    .map_err(|_| SocketError::WouldBlock {
        peer: p.st.pe,
        what: "send window",
    })
}

fn atomic_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    op: &AtomicOp,
    slot: u32,
    cx: ContextId,
) -> Result<()> {
    let mut payload = [0u8; ATOMIC_PAYLOAD as usize];
    payload[..8].copy_from_slice(&op.operand.to_le_bytes());
    payload[8..].copy_from_slice(&op.compare.to_le_bytes());
    push_frame(
        ctx,
        p,
        rail,
        FrameOp::Atomic,
        op.kind as u8,
        offset,
        op.width.bytes() as u32,
        Source::Copy(&payload),
        slot,
        op.is_fetching(),
        cx,
    )
    .map(|_| ())
    .map_err(|_| SocketError::WouldBlock {
        peer: p.st.pe,
        what: "send window",
    })
}

/// Appends one sequenced frame to `p`'s replay ring, assigned to `rail`.
#[allow(clippy::too_many_arguments)]
fn push_frame(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    op: FrameOp,
    aux: u8,
    offset: u64,
    span: u32,
    payload: Source<'_>,
    slot: u32,
    awaiting_reply: bool,
    cx: ContextId,
) -> core::result::Result<u64, Full> {
    let plen = payload.len() as u32;
    let credit = HEADER_LEN as u32 + plen;
    if p.st.ring.next_seq().saturating_sub(p.st.acked + 1) >= p.st.ramp {
        ctx.stats.ramp_waits += 1;
        return Err(Full);
    }
    if p.st.credit.available() < u64::from(credit) {
        return Err(Full);
    }
    let crc = plen > 0 && ctx.want_crc(&mut p.st, plen);
    let mut flags_ = 0;
    if p.st.fence_flag {
        flags_ |= flags::FENCE;
    }
    let conn = ctx.conn_for(offset);
    let base = p.st.dedup.base();
    let f = fields(
        op, flags_, aux, ctx.me, p.st.pe, 0, base, cx.seq, offset, span,
    );
    // The frame carries the ack: no standalone one is owed for what it covers.
    if base >= p.st.ack_sent {
        p.st.ack_sent = base;
        p.st.unacked_since = None;
    }
    let stored = HEADER_LEN
        + if let Source::Copy(s) = payload {
            s.len()
        } else {
            0
        };
    let entry = Entry {
        payload: match payload {
            Source::Heap(o, l) => Payload::Heap { offset: o, len: l },
            Source::Copy(_) => Payload::InRing,
        },
        rail: rail as u8,
        conn,
        awaiting_reply,
        slot,
        credit,
        op: op as u8,
        ..Entry::default()
    };
    let heap = &ctx.heap;
    let seq = p.st.ring.push(stored, entry, |buf, seq| {
        let f = HeaderFields { seq, ..f };
        match payload {
            Source::Copy(s) => {
                buf[HEADER_LEN..HEADER_LEN + s.len()].copy_from_slice(s);
                let _ = seal(buf, &f, s.len(), crc);
            }
            Source::Heap(o, l) => {
                let _ = seal(buf, &f, 0, false);
                buf[44..48].copy_from_slice(&l.to_le_bytes());
                if crc {
                    buf[4] |= flags::PAYLOAD_CRC;
                }
                reseal(&mut buf[..HEADER_LEN], heap.slice(o, l as usize));
            }
        }
    })?;
    // Cannot fail: checked above.
    let _ = p.st.credit.try_consume(u64::from(credit));
    p.st.fence_flag = false;
    Ok(seq)
}

/// Tries to write what is queued on `rail` toward `p` right away.
fn kick(ctx: &mut Ctx, p: &mut Peer, rail: usize) {
    if p.rails[rail].state != LinkState::Up {
        return;
    }
    let Peer { rails, st } = p;
    let rl = &mut rails[rail];
    let mut failed = false;
    for c in 1..rl.conns.len() {
        match flush_conn(ctx, st, &mut rl.conns[c], rail, c, true) {
            Ok(true) => rl.last_tx = ctx.now,
            Ok(false) => {}
            Err(()) => failed = true,
        }
    }
    if failed {
        rail_down(ctx, p, rail, Down::Failure);
    }
}

/// Sends a heartbeat asking for an immediate ack, on the first Up rail.
fn request_ack(ctx: &mut Ctx, p: &mut Peer) {
    let Some(r) = p.any_up() else { return };
    let f = fields(
        FrameOp::Heartbeat,
        flags::ACK_NOW,
        0,
        ctx.me,
        p.st.pe,
        0,
        p.st.dedup.base(),
        0,
        0,
        0,
    );
    if p.rails[r].conns[0].out.frame(&f, &[], true) {
        p.st.ack_requested = true;
        ctx.stats.heartbeats_sent += 1;
        flush_rail_control(ctx, p, r);
    }
}

fn flush_rail_control(ctx: &mut Ctx, p: &mut Peer, r: usize) {
    let Peer { rails, st } = p;
    let rl = &mut rails[r];
    match flush_conn(ctx, st, &mut rl.conns[0], r, 0, false) {
        Ok(true) => rl.last_tx = ctx.now,
        Ok(false) => {}
        Err(()) => rail_down(ctx, p, r, Down::Failure),
    }
}

fn close_conn(c: &mut Conn) {
    c.sock = None;
    c.phase = Phase::Closed;
    c.dec.reset();
    c.out.clear();
    c.partial = None;
    c.hello = None;
    c.cursor = 0;
}

/// Writes what `conn` has queued: a partly written frame, then its out
/// buffer, then (with `data`) the replay-ring frames assigned to it.
/// `Ok(true)` when bytes went out; `Err` when the connection failed.
fn flush_conn(
    ctx: &mut Ctx,
    st: &mut PeerState,
    conn: &mut Conn,
    rail: usize,
    c: usize,
    data: bool,
) -> core::result::Result<bool, ()> {
    let Some(sock) = &conn.sock else {
        return Ok(false);
    };
    let fd = sock.as_raw_fd();
    let mut wrote = false;
    loop {
        if let Some((seq, done)) = conn.partial {
            let Some(e) = st.ring.get(seq).copied() else {
                conn.partial = None;
                continue;
            };
            let stored = st.ring.bytes(&e);
            let heap_part: &[u8] = match e.payload {
                Payload::Heap { offset, len } => ctx.heap.slice(offset, len as usize),
                Payload::InRing => &[],
            };
            let total = stored.len() + heap_part.len();
            let r = if done < stored.len() {
                sys::send2(fd, &stored[done..], heap_part)
            } else {
                sys::send2(fd, &[], &heap_part[done - stored.len()..])
            };
            let n = r.map_err(|_| ())?;
            if n == 0 {
                ctx.stats.would_block += 1;
                return Ok(wrote);
            }
            wrote = true;
            ctx.stats.bytes_sent += n as u64;
            if done == 0
                && let Some(e) = st.ring.get_mut(seq)
            {
                // From its first byte on the wire, a later send is a replay.
                e.ever_sent = true;
            }
            if done + n < total {
                conn.partial = Some((seq, done + n));
                continue;
            }
            conn.partial = None;
            ctx.stats.frames_sent += 1;
            if let Some(e) = st.ring.get_mut(seq) {
                e.pinned = false;
                e.sent = true;
                e.ever_sent = true;
            }
            st.ring.release();
            continue;
        }
        if !conn.out.is_empty() {
            let n = sys::send2(fd, conn.out.pending(), &[]).map_err(|_| ())?;
            if n == 0 {
                ctx.stats.would_block += 1;
                return Ok(wrote);
            }
            wrote = true;
            ctx.stats.bytes_sent += n as u64;
            conn.out.advance(n);
            if !conn.out.is_empty() {
                continue;
            }
        }
        if !data || conn.phase != Phase::Up {
            return Ok(wrote);
        }
        // The next ring frame for this connection.
        conn.cursor = conn.cursor.max(st.ring.tail_seq());
        let mut found = None;
        while conn.cursor < st.ring.next_seq() {
            let s = conn.cursor;
            if let Some(e) = st.ring.get(s)
                && !e.sent
                && (!e.acked || e.awaiting_reply)
                && usize::from(e.rail) == rail
                && usize::from(e.conn) == c
            {
                found = Some(s);
                break;
            }
            conn.cursor += 1;
        }
        let Some(seq) = found else {
            return Ok(wrote);
        };
        conn.cursor += 1;
        // A frame written before (on a failed connection) goes out marked
        // as a replay, its header re-sealed.
        let e = *st.ring.get(seq).unwrap_or(&Entry::default());
        if e.ever_sent {
            ctx.stats.replayed += 1;
            let heap = &ctx.heap;
            let b = st.ring.bytes_mut(e.at, e.stored);
            if b[4] & flags::REPLAY == 0 {
                b[4] |= flags::REPLAY;
                let (hdr, rest) = b.split_at_mut(HEADER_LEN);
                let payload = match e.payload {
                    Payload::Heap { offset, len } => heap.slice(offset, len as usize),
                    Payload::InRing => &rest[..],
                };
                reseal(hdr, payload);
            }
        }
        if let Some(e) = st.ring.get_mut(seq) {
            e.pinned = true;
        }
        conn.partial = Some((seq, 0));
    }
}

/// Opens every connection of `rail` toward `p` (active side).
fn start_connect(ctx: &mut Ctx, p: &mut Peer, rail: usize) {
    let rl = &mut p.rails[rail];
    let Some(addr) = rl.addr else { return };
    let from = ctx.cfg.listen[rail];
    rl.connecting = true;
    rl.next_attempt = None;
    rl.deadline = ctx.later(ctx.handshake_timeout);
    let mut refused = None;
    for c in &mut rl.conns {
        close_conn(c);
        match sys::connect_nonblocking(from, &addr) {
            Ok(s) => {
                let _ = ctx.epoll.add(s.as_raw_fd());
                c.sock = Some(s);
                c.phase = Phase::Connecting;
            }
            Err(e) => {
                refused = Some(e.kind() == std::io::ErrorKind::ConnectionRefused);
                break;
            }
        }
    }
    if let Some(refused) = refused {
        attempt_failed(ctx, p, rail, refused);
    }
}

/// A connect attempt failed: close it, and retry later (or give up on a peer
/// whose host refuses twice after it was connected).
fn attempt_failed(ctx: &mut Ctx, p: &mut Peer, rail: usize, refused: bool) {
    let rl = &mut p.rails[rail];
    for c in &mut rl.conns {
        close_conn(c);
    }
    rl.connecting = false;
    if refused && rl.ever_up {
        p.st.refused_streak = p.st.refused_streak.saturating_add(1);
        if p.st.refused_streak >= 2 {
            peer_dead(ctx, p);
            return;
        }
    }
    let d = rl.backoff.next_delay();
    rl.next_attempt = Some(ctx.later(d));
}

/// Installs an accepted, validated connection (passive side).
fn install(ctx: &mut Ctx, p: &mut Peer, rail: usize, h: Hello, sock: TcpStream) {
    let c = h.conn as usize;
    if p.rails[rail].state == LinkState::Up {
        // The active side reconnected: it saw this rail fail.
        rail_down(ctx, p, rail, Down::Failure);
    }
    p.st.closed_by_peer = false;
    let reply = ctx.hello(&p.st, rail, c);
    let rl = &mut p.rails[rail];
    let conn = &mut rl.conns[c];
    close_conn(conn);
    conn.sock = Some(sock);
    conn.phase = Phase::Up;
    conn.hello = Some((h.applied, h.granted));
    let f = reply.frame();
    if let Some(b) = conn.out.reserve(f.len()) {
        b.copy_from_slice(&f);
        conn.out.commit(f.len());
    }
    p.st.heap_len = if h.heap_len > 0 {
        h.heap_len
    } else {
        p.st.heap_len
    };
    if rl.conns.iter().all(|c| c.phase == Phase::Up) {
        rail_up(ctx, p, rail);
    } else {
        let Peer { rails, st } = p;
        let _ = flush_conn(ctx, st, &mut rails[rail].conns[c], rail, c, false);
    }
}

/// All connections of `rail` are up: the rail is Up, and what waits for it
/// goes out.
fn rail_up(ctx: &mut Ctx, p: &mut Peer, rail: usize) {
    // A recovery: the peer had been reachable, and no rail to it is up now.
    if p.rails.iter().any(|l| l.ever_up) && p.any_up().is_none() {
        p.st.ramp = RAMP_START;
    }
    let mut applied = 0;
    let mut granted = 0;
    {
        let rl = &mut p.rails[rail];
        for c in &rl.conns {
            if let Some((a, g)) = c.hello {
                applied = applied.max(a);
                granted = granted.max(g);
            }
        }
        rl.state = LinkState::Up;
        rl.connecting = false;
        rl.next_attempt = None;
        rl.last_rx = ctx.now;
        rl.last_tx = ctx.now;
        rl.backoff.reset();
        rl.ever_up = true;
        let tail = p.st.ring.tail_seq();
        for c in &mut rl.conns {
            c.cursor = tail;
        }
    }
    let st = &mut p.st;
    st.refused_streak = 0;
    st.down_since = None;
    ctx.event(Event::Link {
        rail: rail as u8,
        peer: st.pe,
        state: LinkState::Up,
    });
    on_ack(st, applied);
    st.credit.on_grant(granted);
    // Frames stranded on rails that are not up move here.
    let ups: [bool; MAX_RAILS] =
        core::array::from_fn(|r| p.rails.get(r).is_some_and(|l| l.state == LinkState::Up));
    let mut s = st.ring.tail_seq();
    while s < st.ring.next_seq() {
        if let Some(e) = st.ring.get_mut(s)
            && (!e.acked || e.awaiting_reply)
            && !ups[usize::from(e.rail)]
        {
            // Same data connection index on the new rail: the order per
            // block is kept.
            e.rail = rail as u8;
            e.sent = false;
        }
        s += 1;
    }
    st.ack_requested = false;
    // Flush the Hello replies and whatever is queued.
    let Peer { rails, st } = p;
    let mut failed = false;
    for c in 0..rails[rail].conns.len() {
        if flush_conn(ctx, st, &mut rails[rail].conns[c], rail, c, c > 0).is_err() {
            failed = true;
        }
    }
    if failed {
        rail_down(ctx, p, rail, Down::Failure);
    }
}

/// `rail` toward `p` failed (or closed): close it, move its unacked frames
/// to another Up rail or keep them for the reconnect, and schedule that.
fn rail_down(ctx: &mut Ctx, p: &mut Peer, rail: usize, why: Down) {
    let was_up = p.rails[rail].state == LinkState::Up;
    {
        let rl = &mut p.rails[rail];
        for c in &mut rl.conns {
            if let Some((seq, _)) = c.partial
                && let Some(e) = p.st.ring.get_mut(seq)
            {
                e.pinned = false;
            }
            close_conn(c);
        }
        rl.state = LinkState::Down;
        rl.connecting = false;
    }
    p.st.ring.release();
    if why == Down::BadFrame {
        ctx.stats.bad_frames += 1;
    }
    if why == Down::Closed {
        p.st.closed_by_peer = true;
    }
    if was_up {
        ctx.event(Event::Link {
            rail: rail as u8,
            peer: p.st.pe,
            state: LinkState::Down,
        });
    }
    let target = p.any_up();
    let st = &mut p.st;
    let mut moved = 0u64;
    let mut s = st.ring.tail_seq();
    while s < st.ring.next_seq() {
        if let Some(e) = st.ring.get_mut(s)
            && usize::from(e.rail) == rail
            && (!e.acked || e.awaiting_reply)
        {
            e.sent = false;
            if let Some(t) = target {
                e.rail = t as u8;
                moved += 1;
            }
        }
        s += 1;
    }
    if let Some(t) = target {
        let tail = st.ring.tail_seq();
        for c in &mut p.rails[t].conns {
            c.cursor = c.cursor.min(tail);
        }
        if moved > 0 {
            ctx.stats.rail_failovers += 1;
        }
    } else if st.down_since.is_none() {
        st.down_since = Some(ctx.now);
    }
    st.ack_requested = false;
    st.ack_sent = 0;
    st.grant_sent = 0;
    if ctx.me < st.pe && !st.closed_by_peer && p.rails[rail].addr.is_some() {
        let rl = &mut p.rails[rail];
        let d = rl.backoff.next_delay();
        rl.next_attempt = Some(ctx.later(d));
        ctx.stats.reconnects += 1;
    }
    if let Some(t) = target {
        kick(ctx, p, t);
    }
}

/// Gives up on `p`: everything toward it fails.
fn peer_dead(ctx: &mut Ctx, p: &mut Peer) {
    if p.st.dead {
        return;
    }
    for r in 0..p.rails.len() {
        if p.rails[r].state == LinkState::Up {
            ctx.event(Event::Link {
                rail: r as u8,
                peer: p.st.pe,
                state: LinkState::Error,
            });
        }
        let rl = &mut p.rails[r];
        for c in &mut rl.conns {
            close_conn(c);
        }
        rl.state = LinkState::Down;
        rl.connecting = false;
        rl.next_attempt = None;
    }
    p.st.dead = true;
    p.st.dead_unreported = !p.st.ring.is_empty();
    p.st.ring.clear();
    p.st.resume = None;
    ctx.fail_ops_of(p.st.pe);
    ctx.event(Event::PeerDead { peer: p.st.pe });
}

fn on_ack(st: &mut PeerState, ack: u64) {
    if ack > st.acked && ack < st.ring.next_seq() {
        st.ring.ack(ack);
        st.acked = ack;
        if st.ramp != u64::MAX {
            st.ramp = st.ramp.saturating_mul(2);
            if st.ramp >= crate::dedup::WINDOW {
                st.ramp = u64::MAX;
            }
        }
        if st.ring.is_empty() {
            st.ack_requested = false;
        }
    }
}

/// One progress step toward one peer.
fn service_peer(ctx: &mut Ctx, p: &mut Peer, slow: bool) -> bool {
    let mut busy = false;
    for r in 0..p.rails.len() {
        busy |= service_rail(ctx, p, r, slow);
        if p.st.dead {
            return true;
        }
    }
    busy |= send_acks(ctx, p);
    // Give up on a peer down on every rail for too long.
    if p.any_up().is_none()
        && let Some(since) = p.st.down_since
        && ctx.since(since) > ctx.cfg.give_up
    {
        peer_dead(ctx, p);
        busy = true;
    }
    busy
}

fn service_rail(ctx: &mut Ctx, p: &mut Peer, r: usize, slow: bool) -> bool {
    if p.rails[r].addr.is_none() {
        return false;
    }
    // Between slow passes an idle or connecting rail has nothing to do.
    if !slow && (p.rails[r].connecting || p.rails[r].state != LinkState::Up) {
        return false;
    }
    let mut busy = false;
    // Active side: finish connecting.
    if p.rails[r].connecting {
        let mut failed = None;
        for c in 0..p.rails[r].conns.len() {
            let hello = ctx.hello(&p.st, r, c);
            let conn = &mut p.rails[r].conns[c];
            if conn.phase != Phase::Connecting {
                continue;
            }
            let Some(s) = &conn.sock else { continue };
            match sys::connect_result(s) {
                Ok(true) => {
                    busy = true;
                    let f = hello.frame();
                    if let Some(b) = conn.out.reserve(f.len()) {
                        b.copy_from_slice(&f);
                        conn.out.commit(f.len());
                    }
                    conn.phase = Phase::HelloSent;
                }
                Ok(false) => {}
                Err(e) => {
                    failed = Some(e.kind() == std::io::ErrorKind::ConnectionRefused);
                    break;
                }
            }
        }
        if failed.is_none() && ctx.now > p.rails[r].deadline {
            failed = Some(false);
        }
        if let Some(refused) = failed {
            attempt_failed(ctx, p, r, refused);
            return true;
        }
    } else if p.rails[r].state == LinkState::Down
        && let Some(at) = p.rails[r].next_attempt
        && ctx.now >= at
    {
        start_connect(ctx, p, r);
        return true;
    }
    // Read every open connection (the control connection, 0, only in the
    // slow pass: acks, credits and heartbeats are not latency-critical).
    let mut down = None;
    for c in usize::from(!slow)..p.rails[r].conns.len() {
        let Peer { rails, st } = &mut *p;
        let rl = &mut rails[r];
        let conn = &mut rl.conns[c];
        if !matches!(conn.phase, Phase::Up | Phase::HelloSent) {
            continue;
        }
        match read_conn(ctx, st, conn, r, c) {
            Ok((b, got)) => {
                busy |= b;
                if got {
                    rl.last_rx = ctx.now;
                }
            }
            Err(why) => {
                down = Some(why);
                break;
            }
        }
    }
    if let Some(why) = down {
        if p.rails[r].connecting {
            if why == Down::BadFrame {
                ctx.stats.bad_frames += 1;
            }
            attempt_failed(ctx, p, r, false);
        } else {
            rail_down(ctx, p, r, why);
        }
        return true;
    }
    // Active side: handshake complete on every connection?
    if p.rails[r].connecting && p.rails[r].conns.iter().all(|c| c.phase == Phase::Up) {
        rail_up(ctx, p, r);
        busy = true;
    }
    // Write.
    let up = p.rails[r].state == LinkState::Up;
    {
        let Peer { rails, st } = &mut *p;
        let rl = &mut rails[r];
        for c in 0..rl.conns.len() {
            match flush_conn(ctx, st, &mut rl.conns[c], r, c, up && c > 0) {
                Ok(true) => {
                    busy = true;
                    rl.last_tx = ctx.now;
                }
                Ok(false) => {}
                Err(()) => down = Some(Down::Failure),
            }
        }
    }
    if let Some(why) = down {
        if p.rails[r].connecting {
            attempt_failed(ctx, p, r, false);
        } else {
            rail_down(ctx, p, r, why);
        }
        return true;
    }
    if !up || !slow {
        return busy;
    }
    // Failure detection.
    if ctx.since(p.rails[r].last_rx) > ctx.cfg.detection_window {
        rail_down(ctx, p, r, Down::Failure);
        return true;
    }
    // Heartbeat when the rail was quiet.
    if ctx.since(p.rails[r].last_tx) >= ctx.cfg.heartbeat_interval {
        let f = fields(
            FrameOp::Heartbeat,
            0,
            0,
            ctx.me,
            p.st.pe,
            0,
            p.st.dedup.base(),
            0,
            0,
            0,
        );
        if p.rails[r].conns[0].out.frame(&f, &[], true) {
            ctx.stats.heartbeats_sent += 1;
            flush_rail_control(ctx, p, r);
            p.rails[r].last_tx = ctx.now;
        }
        busy = true;
    }
    busy
}

/// Sends a standalone ack (and a credit grant) when something was received
/// and not acked, or the peer asked.
fn send_acks(ctx: &mut Ctx, p: &mut Peer) -> bool {
    let up = p.any_up();
    let st = &mut p.st;
    let base = st.dedup.base();
    let grant = st.granter.granted();
    let due = st.unacked_since.is_some_and(|t| ctx.since(t) >= ACK_DELAY);
    let want_ack = st.ack_now || (base > st.ack_sent && due);
    let want_grant = grant != st.grant_sent;
    if !want_ack && !want_grant {
        return false;
    }
    let Some(r) = up else { return false };
    let (me, pe) = (ctx.me, st.pe);
    let out = &mut p.rails[r].conns[0].out;
    if want_grant {
        let f = fields(FrameOp::Credit, 0, 0, me, pe, 0, base, 0, 0, 0);
        if !out.frame(&f, &grant.to_le_bytes(), true) {
            return false;
        }
        st.grant_sent = grant;
    } else {
        let f = fields(FrameOp::Ack, 0, 0, me, pe, 0, base, 0, 0, 0);
        if !out.frame(&f, &[], true) {
            return false;
        }
    }
    st.ack_sent = base;
    st.unacked_since = None;
    st.ack_now = false;
    st.rx_frames = 0;
    st.rx_bytes = 0;
    flush_rail_control(ctx, p, r);
    true
}

/// Reads what `conn` has and handles its whole frames. `Ok((busy, got
/// bytes))`, or why the connection must go.
fn read_conn(
    ctx: &mut Ctx,
    st: &mut PeerState,
    conn: &mut Conn,
    rail: usize,
    c: usize,
) -> core::result::Result<(bool, bool), Down> {
    let Some(sock) = &conn.sock else {
        return Ok((false, false));
    };
    let fd = sock.as_raw_fd();
    let mut busy = false;
    let mut got = false;
    let mut budget = READ_BUDGET;
    // A short read emptied the socket: after its frames, return instead of
    // asking the kernel again (that `recv` would almost always say EAGAIN,
    // and cost a system call between the frame and the waiting caller).
    let mut drained = false;
    loop {
        loop {
            let f = match conn.dec.peek() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return Err(Down::BadFrame),
            };
            ctx.stats.frames_received += 1;
            if conn.phase == Phase::HelloSent {
                let ok = f.op() == Some(FrameOp::Hello)
                    && Hello::decode(f.payload()).is_some_and(|h| {
                        h.cookie == ctx.cfg.cookie
                            && h.job_id == ctx.cfg.job_id
                            && h.src == st.pe
                            && h.dst == ctx.me
                            && usize::from(h.rail) == rail
                            && usize::from(h.conn) == c
                    });
                if !ok {
                    return Err(Down::BadFrame);
                }
                if let Some(h) = Hello::decode(f.payload()) {
                    conn.hello = Some((h.applied, h.granted));
                    if h.heap_len > 0 {
                        st.heap_len = h.heap_len;
                    }
                }
                conn.phase = Phase::Up;
                conn.dec.consume();
                busy = true;
                continue;
            }
            match handle_frame(ctx, st, &mut conn.out, &f) {
                Verdict::Done => {
                    conn.dec.consume();
                    busy = true;
                }
                Verdict::Stall => return Ok((busy, got)),
                Verdict::Cut => return Err(Down::BadFrame),
                Verdict::Close => return Err(Down::Closed),
            }
        }
        if budget == 0 || drained {
            break;
        }
        let spare = conn.dec.spare();
        if spare.is_empty() {
            break;
        }
        let room = spare.len();
        match sys::recv(fd, spare) {
            Ok(Some(0)) | Err(_) => return Err(Down::Failure),
            Ok(Some(n)) => {
                conn.dec.commit(n);
                ctx.stats.bytes_received += n as u64;
                budget = budget.saturating_sub(n);
                got = true;
                drained = n < room;
            }
            Ok(None) => break,
        }
    }
    Ok((busy, got))
}

/// Applies one checked frame from the peer of `st`.
fn handle_frame(ctx: &mut Ctx, st: &mut PeerState, out: &mut OutBuf, f: &Frame<&[u8]>) -> Verdict {
    let h = f.header();
    let Some(op) = f.op() else {
        return Verdict::Cut;
    };
    if h.src_pe.get() != st.pe || h.dst_pe.get() != ctx.me {
        return Verdict::Cut;
    }
    on_ack(st, h.ack.get());
    let fl = h.flags;
    match op {
        FrameOp::Put | FrameOp::Get | FrameOp::Atomic => {}
        FrameOp::GetReply => {
            let seq = h.seq.get();
            let Some(e) = st.ring.get_mut(seq) else {
                return Verdict::Done;
            };
            if !e.awaiting_reply || e.op != FrameOp::Get as u8 {
                return Verdict::Done;
            }
            let Some(idx) = ctx.gets.find(e.slot) else {
                e.awaiting_reply = false;
                st.ring.release();
                return Verdict::Done;
            };
            let s = ctx.gets.slots[idx];
            let data = f.payload();
            if data.len() != s.len as usize {
                return Verdict::Cut;
            }
            if s.state == SlotState::Pending {
                match s.into_heap {
                    Some(at) => {
                        ctx.heap.write(at, data);
                        ctx.gets.free(idx);
                    }
                    None => {
                        ctx.gets.arena[s.at..s.at + data.len()].copy_from_slice(data);
                        ctx.gets.slots[idx].state = SlotState::Done;
                    }
                }
            }
            e.awaiting_reply = false;
            st.ring.release();
            return Verdict::Done;
        }
        FrameOp::AtomicReply => {
            let seq = h.seq.get();
            let Some(e) = st.ring.get_mut(seq) else {
                return Verdict::Done;
            };
            if !e.awaiting_reply || e.op != FrameOp::Atomic as u8 {
                return Verdict::Done;
            }
            let idx = (e.slot & ((1 << SLOT_BITS) - 1)) as usize;
            let v = u64::from_le_bytes(f.payload().try_into().unwrap_or([0; 8]));
            if let Some(s) = ctx.atomics.get_mut(idx)
                && s.gen_ == (e.slot >> SLOT_BITS) as u16
                && s.state == SlotState::Pending
            {
                s.value = v;
                s.state = SlotState::Done;
            }
            e.awaiting_reply = false;
            st.ring.release();
            return Verdict::Done;
        }
        FrameOp::Ack => return Verdict::Done,
        FrameOp::Credit => {
            let g = u64::from_le_bytes(f.payload().try_into().unwrap_or([0; 8]));
            st.credit.on_grant(g);
            return Verdict::Done;
        }
        FrameOp::Heartbeat => {
            if fl & flags::ACK_NOW != 0 {
                st.ack_now = true;
            }
            return Verdict::Done;
        }
        FrameOp::LinkState => {
            let Ok(record) = <[u8; 32]>::try_from(f.payload()) else {
                return Verdict::Cut;
            };
            ctx.event(Event::LinkState {
                from: st.pe,
                record,
            });
            return Verdict::Done;
        }
        FrameOp::Close => return Verdict::Close,
        FrameOp::Hello => return Verdict::Cut,
    }
    // A sequenced, heap-touching frame.
    let seq = h.seq.get();
    let Ok(range) = f.check_heap(ctx.heap.len()) else {
        return Verdict::Cut;
    };
    let seen = st.dedup.check(seq);
    if seen == Seen::OutOfWindow {
        return Verdict::Cut;
    }
    let (me, pe) = (ctx.me, st.pe);
    let reply_fields = |op: FrameOp, span: u32| {
        fields(
            op,
            0,
            0,
            me,
            pe,
            seq,
            st.dedup.base(),
            h.context.get(),
            0,
            span,
        )
    };
    match op {
        FrameOp::Put => {
            if seen == Seen::Duplicate {
                ctx.stats.duplicates_dropped += 1;
                return Verdict::Done;
            }
            ctx.heap.write(range.start, f.payload());
        }
        FrameOp::Get => {
            // Answered again when replayed: reads are idempotent.
            let len = h.span.get();
            let total = HEADER_LEN + len as usize;
            let rf = fields(
                FrameOp::GetReply,
                0,
                0,
                me,
                pe,
                seq,
                st.dedup.base(),
                h.context.get(),
                0,
                len,
            );
            let crc = ctx.want_crc(st, len);
            let Some(b) = out.reserve(total) else {
                return Verdict::Stall;
            };
            ctx.heap.read(range.start, &mut b[HEADER_LEN..]);
            let _ = seal(b, &rf, len as usize, crc);
            out.commit(total);
            if seen == Seen::Duplicate {
                return Verdict::Done;
            }
        }
        FrameOp::Atomic => {
            let kind = AtomicKind::from_u8(h.aux).unwrap_or(AtomicKind::Fetch);
            let p = f.payload();
            let op = AtomicOp {
                kind,
                width: if h.span.get() == 8 {
                    AtomicWidth::W64
                } else {
                    AtomicWidth::W32
                },
                operand: u64::from_le_bytes(p[..8].try_into().unwrap_or([0; 8])),
                compare: u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8])),
            };
            let fetching = op.is_fetching();
            let slot = (seq % ATOMIC_CACHE as u64) as usize;
            if seen == Seen::Duplicate {
                let (s, v) = st.atomic_cache[slot];
                if fetching && s == seq {
                    let rf = reply_fields(FrameOp::AtomicReply, 0);
                    if !out.frame(&rf, &v.to_le_bytes(), true) {
                        return Verdict::Stall;
                    }
                } else {
                    ctx.stats.duplicates_dropped += 1;
                }
                return Verdict::Done;
            }
            if fetching && out.reserve(HEADER_LEN + 8).is_none() {
                return Verdict::Stall;
            }
            let old = op.width.truncate(ctx.heap.atomic(range.start, &op));
            if fetching {
                st.atomic_cache[slot] = (seq, old);
                let rf = reply_fields(FrameOp::AtomicReply, 0);
                let _ = out.frame(&rf, &old.to_le_bytes(), true);
            }
        }
        _ => return Verdict::Cut,
    }
    st.dedup.mark(seq);
    let bytes = (HEADER_LEN + f.payload().len()) as u64;
    if st.granter.on_receive(bytes).is_err() {
        return Verdict::Cut;
    }
    let _ = st.granter.on_release(bytes);
    st.rx_frames += 1;
    st.rx_bytes += bytes;
    if st.unacked_since.is_none() {
        st.unacked_since = Some(ctx.now);
    }
    if fl & flags::ACK_NOW != 0 {
        st.ack_now = true;
    }
    if st.rx_frames >= ACK_FRAMES || st.rx_bytes >= u64::from(ctx.cfg.window) / 4 {
        // Piggybacked on the next reply or sent by this step's ack pass.
        st.ack_now = true;
    }
    Verdict::Done
}

/// Parks a thread until a [`SocketDriver`] has input: see
/// [`SocketDriver::parker`]. Owns its own descriptor of the driver's epoll
/// instance, so it stays valid (and simply never wakes for input) after the
/// driver is closed.
#[derive(Debug)]
pub struct Parker(crate::sys::Epoll);

impl Parker {
    /// Waits until the driver has input or `timeout` passed; returns whether
    /// it has input. Input stays pending until the driver progresses (level
    /// triggered), so a caller that cannot progress now should not park again
    /// at once.
    pub fn wait(&self, timeout: Duration) -> bool {
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        self.0.wait(ms)
    }
}
