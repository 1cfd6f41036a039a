//! Connection state: per peer, one [`RailLink`] per rail, each with a
//! control connection and the data connections ([`Conn`]), and the state
//! machine that drives them:
//!
//! * the lower rank connects ([`start_connect`], [`connect_step`]: TCP
//!   connect, then the challenge, its `Hello`, then the answer); the higher
//!   rank accepts, challenges, and identifies the connection by its
//!   authenticated `Hello` ([`SocketDriver::accept`],
//!   [`SocketDriver::handshakes`], [`install`]), refusing strangers
//!   (the handshake is [`crate::handshake`]'s); with connect-on-first-use
//!   ([`SocketDriver::set_connect_on_first_use`]) the side that needs the
//!   peer first connects ([`SocketDriver::connect_on_first_use`]), a peer
//!   never declared is accepted once authenticated, and crossed connects
//!   keep the lower rank's ([`crossed`], [`install`]); handshake slots
//!   come from two budgets, strangers' and declared peers' (`accept::slot_for`),
//!   and a rail completes only with connections of the peer's latest
//!   attempt ([`install`]);
//! * a rail is Up once every connection is ([`rail_up`]) and Down on a
//!   failure, a malformed frame, silence or the peer's `Close`
//!   ([`rail_down`]); its frames move on ([`super::recovery`]);
//! * the active side (the lower rank, or with connect-on-first-use the
//!   side whose connection is in use: `PeerState::active`) reconnects
//!   after a backoff delay (exponential, full
//!   jitter: [`Backoff`]); a peer down on every rail past `give_up`, or
//!   refusing twice after it had been connected, is dead ([`peer_dead`]).

use std::{
    net::{SocketAddr, TcpStream},
    ops::ControlFlow,
    os::fd::AsRawFd,
    time::Duration,
};

use switchyard_core::{
    credit::{CreditGranter, CreditWindow},
    transport::{Instant, LinkState},
    wire::HEADER_LEN,
};

use super::{
    ATOMIC_CACHE, CONTROL_PAYLOAD, Ctx, SocketDriver,
    progress::SLOW_EVERY,
    recovery::{self, RAMP_START},
    send::{OutBuf, Resume, flush_conn, kick},
};
use crate::{
    Event, MAX_DATA_CONNECTIONS, MAX_RAILS, PeerRailStats, Result, SocketError,
    backoff::Backoff,
    decode::StreamDecoder,
    dedup::DedupWindow,
    handshake::{FEATURE_COMPACT, FEATURE_COMPACT_ACK, Hello, NONCE_LEN, Role},
    replay::ReplayRing,
    sys,
};

/// Send buffer of a control connection.
const CONTROL_OUT: usize = 16 * 1024;
/// Connections per rail, at most: the control one and the data ones.
const MAX_CONNS: usize = 1 + MAX_DATA_CONNECTIONS as usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Closed,
    /// Active side: TCP connect in progress.
    Connecting,
    /// Active side: connected, waiting for the challenge.
    ChallengeWait,
    /// Active side: our Hello is out, waiting for the answer.
    HelloSent,
    /// Handshake done.
    Up,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) sock: Option<TcpStream>,
    pub(super) phase: Phase,
    pub(super) dec: StreamDecoder,
    pub(super) out: OutBuf,
    /// Next sequence the send scan looks at.
    pub(super) cursor: u64,
    /// A frame partly written: (sequence, bytes written).
    pub(super) partial: Option<(u64, usize)>,
    /// What the peer's Hello said (applied, granted).
    pub(super) hello: Option<(u64, u64)>,
    /// The progress step of the last `send::kick` that wrote here.
    pub(super) kick_step: u32,
    /// Ring frames queued here since the last write attempt.
    pub(super) queued: u16,
    /// Active side: the nonce of our Hello, which the answer must prove.
    pub(super) nonce: [u8; NONCE_LEN],
}

impl Conn {
    pub(super) fn new(data: bool, max_payload: u32) -> Conn {
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
            kick_step: u32::MAX,
            queued: 0,
            nonce: [0; NONCE_LEN],
        }
    }
}

/// One rail toward one peer.
#[derive(Debug)]
pub(super) struct RailLink {
    pub(super) addr: Option<SocketAddr>,
    pub(super) state: LinkState,
    /// The control connection, then the data connections.
    pub(super) conns: heapless::Vec<Conn, MAX_CONNS>,
    pub(super) last_rx: Instant,
    pub(super) last_tx: Instant,
    pub(super) backoff: Backoff,
    pub(super) next_attempt: Option<Instant>,
    pub(super) connecting: bool,
    pub(super) deadline: Instant,
    pub(super) ever_up: bool,
}

/// Per-peer state outside the rails.
#[derive(Debug)]
pub(super) struct PeerState {
    pub(super) pe: u32,
    pub(super) heap_len: u64,
    // Send side.
    pub(super) ring: ReplayRing,
    pub(super) credit: CreditWindow,
    pub(super) acked: u64,
    pub(super) crc_count: u32,
    pub(super) fence_seq: u64,
    pub(super) fence_flag: bool,
    pub(super) ack_requested: bool,
    /// In-flight frame limit while ramping up after a recovery (`u64::MAX`:
    /// none).
    pub(super) ramp: u64,
    pub(super) resume: Option<Resume>,
    /// The peer decodes compact frames of small puts (its `Hello` said so,
    /// and this driver's `compact_puts` is on).
    pub(super) compact: bool,
    /// Its compact frames may carry `ACK_NOW` too (its `Hello` offered
    /// [`FEATURE_COMPACT_ACK`]).
    pub(super) compact_ack: bool,
    // Receive side.
    pub(super) dedup: DedupWindow,
    pub(super) granter: CreditGranter,
    pub(super) atomic_cache: Box<[(u64, u64)]>,
    pub(super) rx_frames: u32,
    pub(super) rx_bytes: u64,
    pub(super) ack_sent: u64,
    /// When the oldest frame received and not acked arrived.
    pub(super) unacked_since: Option<Instant>,
    pub(super) ack_now: bool,
    pub(super) grant_sent: u64,
    // Liveness.
    pub(super) dead: bool,
    pub(super) dead_unreported: bool,
    pub(super) down_since: Option<Instant>,
    pub(super) refused_streak: u8,
    pub(super) closed_by_peer: bool,
    /// This side (re)connects the rails to the peer after a failure: the
    /// lower rank, or with connect-on-first-use
    /// ([`SocketDriver::set_connect_on_first_use`]) the side that
    /// connected first (cleared when it yields to the peer's crossing
    /// connect, see [`SocketDriver::handshakes`]).
    pub(super) active: bool,
    /// Replays, duplicates dropped and bad frames, per rail (plain adds
    /// where the driver-wide counters are counted).
    pub(super) counts: [PeerRailStats; MAX_RAILS],
}

#[derive(Debug)]
pub(super) struct Peer {
    /// One per rail of this driver.
    pub(super) rails: heapless::Vec<RailLink, MAX_RAILS>,
    pub(super) st: PeerState,
}

impl Peer {
    pub(super) fn any_up(&self) -> Option<usize> {
        self.rails.iter().position(|r| r.state == LinkState::Up)
    }
}

/// A connection accepted and not yet identified.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) sock: Option<TcpStream>,
    pub(super) addr: Option<SocketAddr>,
    pub(super) rail: usize,
    pub(super) dec: StreamDecoder,
    pub(super) deadline: Instant,
    /// The nonce of the challenge sent on it.
    pub(super) nonce: [u8; NONCE_LEN],
    /// It came from a lower-ranked peer's address on its rail.
    pub(super) known: bool,
}

/// Why a rail goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Down {
    /// Connection error, end of stream, or silence.
    Failure,
    /// A malformed frame.
    BadFrame,
    /// The peer closed in order.
    Closed,
}

impl SocketDriver {
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
        if pe < self.ctx.me || self.ctx.lazy {
            // Where its connects come from (they bind its own rail address).
            for (known, a) in self.known_sources.iter_mut().zip(addrs) {
                if let Err(at) = known.binary_search(&a.ip()) {
                    known.insert(at, a.ip());
                }
            }
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
        // At most MAX_RAILS rails and MAX_CONNS connections (`cfg.check()`):
        // the pushes fit.
        let mut rail_links = heapless::Vec::new();
        for r in 0..rails {
            let mut conns = heapless::Vec::new();
            for c in 0..self.ctx.n_conns() {
                let _ = conns.push(Conn::new(
                    c > 0,
                    cfg.max_frame_payload.max(self.max_get_len()),
                ));
            }
            let seed =
                self.ctx.seed ^ (u64::from(pe) << 8 | r as u64).wrapping_mul(0xA24B_AED4_963E_E407);
            let _ = rail_links.push(RailLink {
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
            compact: false,
            compact_ack: false,
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
            active: self.ctx.me < pe,
            counts: [PeerRailStats::default(); MAX_RAILS],
        };
        self.peers[pe as usize] = Some(Box::new(Peer {
            rails: rail_links,
            st,
        }));
        Ok(())
    }

    /// Starts connecting rail `rail` to `peer` (the lower rank connects; the
    /// higher one waits for it; with connect-on-first-use, this side
    /// connects whatever the ranks, and becomes the one that reconnects).
    /// Non-blocking.
    pub(crate) fn connect_rail(&mut self, rail: usize, peer: u32) -> Result<()> {
        if peer == self.ctx.me {
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        if p.st.down_since.is_none() && p.any_up().is_none() {
            p.st.down_since = Some(ctx.now);
        }
        if (ctx.me < peer || ctx.lazy)
            && rail < p.rails.len()
            && p.rails[rail].addr.is_some()
            && p.rails[rail].state != LinkState::Up
            && !p.rails[rail].connecting
        {
            p.st.active = true;
            start_connect(ctx, p, rail);
        }
        Ok(())
    }

    /// Connect-on-first-use (`cards = lazy`): `pe`'s listening addresses
    /// (per rail, as [`SocketDriver::set_peer`]) just became known, at
    /// this PE's first operation toward it; declares the peer (the heap
    /// size is this PE's until its `Hello` says) and starts connecting
    /// every rail to it, whatever the ranks. A peer already known (it
    /// connected to this PE first) keeps its state: the addresses are
    /// recorded, and no connect starts while a rail to it is up or being
    /// accepted. The operation waits for [`Event::Link`] Up. Cold path
    /// (allocates the peer's buffers).
    ///
    /// # Errors
    /// As [`SocketDriver::set_peer`]; [`SocketError::PeerDead`].
    pub fn connect_on_first_use(&mut self, pe: u32, addrs: &[SocketAddr]) -> Result<()> {
        let known = self.knows_peer(pe);
        let heap_len = self.ctx.heap.len();
        let heap_len = self.heap_len(pe).filter(|_| known).unwrap_or(heap_len);
        self.set_peer(pe, addrs, heap_len)?;
        if known && self.peer_state(pe) == LinkState::Up {
            return Ok(());
        }
        self.ctx.stats.first_use_connects += 1;
        for r in 0..self.rails() {
            self.connect_rail(r, pe)?;
        }
        Ok(())
    }

    /// Whether `pe` is declared here ([`SocketDriver::set_peer`], or with
    /// connect-on-first-use, accepted from it).
    pub fn knows_peer(&self, pe: u32) -> bool {
        self.peers.get(pe as usize).is_some_and(Option::is_some)
    }

    /// How many peers this driver holds state for (declared, or accepted
    /// with connect-on-first-use): what its memory for peers is
    /// proportional to.
    pub fn peer_count(&self) -> usize {
        self.peers.iter().filter(|p| p.is_some()).count()
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
}

/// Connect-on-first-use: whether a connection accepted from `p` on `rail`
/// crosses this PE's own connect, which wins. Both sides may connect at
/// once (each needed the other first); the lower rank's connection is the
/// one kept: this PE, when it is the lower rank, drops the peer's while
/// its own attempt is in progress, or while its own connection is up (a
/// peer that started connecting before it accepted ours, whose `Hello`
/// arrives late). The higher rank yields instead ([`install`]).
pub(super) fn crossed(ctx: &Ctx, p: &Peer, rail: usize) -> bool {
    let rl = &p.rails[rail];
    ctx.me < p.st.pe && (rl.connecting || (rl.state == LinkState::Up && p.st.active))
}

pub(super) fn close_conn(c: &mut Conn) {
    c.sock = None;
    c.phase = Phase::Closed;
    c.dec.reset();
    c.out.clear();
    c.partial = None;
    c.hello = None;
    c.cursor = 0;
}

/// Opens every connection of `rail` toward `p` (active side).
fn start_connect(ctx: &mut Ctx, p: &mut Peer, rail: usize) {
    let rl = &mut p.rails[rail];
    let Some(addr) = rl.addr else { return };
    let from = ctx.cfg.listen[rail];
    rl.connecting = true;
    rl.next_attempt = None;
    // An attempt lasts the handshake deadline, but never more than a third
    // of `give_up`: a peer unreachable for a moment (its SYN dropped by a
    // full accept queue, its connection closed here for overload) gets at
    // least three attempts before it is given up on.
    rl.deadline = ctx.later(ctx.handshake_timeout.min(ctx.cfg.give_up / 3));
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

/// The active side's connect on `r`, one step: a connection whose TCP
/// connect finished sends its `Hello`; an attempt that failed or passed its
/// deadline is closed and retried later; a Down rail whose backoff delay is
/// over starts a new attempt. `Break` when the rail changed state (its step
/// is over), else `Continue` with whether anything happened.
pub(super) fn connect_step(ctx: &mut Ctx, p: &mut Peer, r: usize) -> ControlFlow<(), bool> {
    let mut busy = false;
    if p.rails[r].connecting {
        let mut failed = None;
        for c in 0..p.rails[r].conns.len() {
            let conn = &mut p.rails[r].conns[c];
            if conn.phase != Phase::Connecting {
                continue;
            }
            let Some(s) = &conn.sock else { continue };
            match sys::connect_result(s) {
                Ok(true) => {
                    // Our Hello answers the accepting side's challenge.
                    busy = true;
                    conn.phase = Phase::ChallengeWait;
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
            return ControlFlow::Break(());
        }
    } else if p.rails[r].state == LinkState::Down
        && let Some(at) = p.rails[r].next_attempt
        && ctx.now >= at
    {
        start_connect(ctx, p, r);
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(busy)
}

/// A connection of `r` failed for `why`: while connecting, the attempt
/// failed (a malformed frame counted); once up, the rail is down.
pub(super) fn conn_failed(ctx: &mut Ctx, p: &mut Peer, r: usize, why: Down) {
    if p.rails[r].connecting {
        if why == Down::BadFrame {
            ctx.stats.bad_frames += 1;
            p.st.counts[r].bad_frames += 1;
        }
        attempt_failed(ctx, p, r, false);
    } else {
        rail_down(ctx, p, r, why);
    }
}

/// Installs an accepted, authenticated connection (passive side), whose
/// challenge carried `challenge`: the answer proves the key over the
/// connecting side's nonce.
pub(super) fn install(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    h: Hello,
    sock: TcpStream,
    challenge: [u8; NONCE_LEN],
) {
    let c = h.conn as usize;
    if p.rails[rail].connecting {
        // Connect-on-first-use: the lower-ranked peer connected while this
        // PE was connecting to it; its connection wins (`crossed`), this
        // PE's attempt ends, and the peer is the one that reconnects.
        let rl = &mut p.rails[rail];
        for c in &mut rl.conns {
            close_conn(c);
        }
        rl.connecting = false;
        rl.next_attempt = None;
        p.st.active = false;
        ctx.stats.crossed += 1;
    }
    if ctx.lazy {
        // The peer connected, so it reconnects (it keeps that role unless
        // it yields to a connection of this PE's, which would make this PE
        // the active side again).
        p.st.active = false;
    }
    if p.rails[rail].state == LinkState::Up {
        // The active side reconnected: it saw this rail fail.
        rail_down(ctx, p, rail, Down::Failure);
    }
    p.st.closed_by_peer = false;
    let reply = ctx.hello(&p.st, rail, c, challenge).seal(
        &ctx.cfg.key,
        Role::Accept,
        ctx.cfg.job_id,
        &h.nonce,
    );
    let rl = &mut p.rails[rail];
    let conn = &mut rl.conns[c];
    close_conn(conn);
    conn.sock = Some(sock);
    conn.phase = Phase::Up;
    conn.hello = Some((h.applied, h.granted));
    accept_hello(ctx, &mut p.st, conn, &h);
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
        // The rail's other connections may be left from an earlier attempt
        // of the peer's that failed part-way (one of its connections was
        // closed here for overload, or timed out): the peer closed them
        // before trying again, so this one is of a newer attempt, whose
        // other connections are still to come. Bringing the rail up with
        // the old ones would have the newer ones' arrival taken for a
        // reconnect (the rail down, and up again with the next leftover,
        // for ever). The peer's end is seen here, its FIN having left
        // before the newer attempt's first packet. This one too may be such
        // a leftover, its `Hello` read after the peer closed it.
        for other in &mut rl.conns {
            if other
                .sock
                .as_ref()
                .is_none_or(|s| sys::hung_up(s.as_raw_fd()))
            {
                close_conn(other);
                ctx.stats.stale_conns += 1;
            }
        }
    }
    if rl.conns.iter().all(|c| c.phase == Phase::Up) {
        rail_up(ctx, p, rail);
    } else {
        let Peer { rails, st } = p;
        let _ = flush_conn(ctx, st, &mut rails[rail].conns[c], rail, c, false);
    }
}

/// What a connection learns from the peer's `Hello` `h` about compact
/// frames: its decoder takes them when this driver offered them, and small
/// puts to the peer use them when the peer offered them.
pub(super) fn accept_hello(ctx: &Ctx, st: &mut PeerState, conn: &mut Conn, h: &Hello) {
    conn.dec
        .accept_compact(ctx.cfg.compact_puts.then_some((st.pe, ctx.me)));
    st.compact = ctx.cfg.compact_puts && h.features & FEATURE_COMPACT != 0;
    st.compact_ack = st.compact && h.features & FEATURE_COMPACT_ACK != 0;
}

/// All connections of `rail` are up: the rail is Up, and what waits for it
/// goes out.
pub(super) fn rail_up(ctx: &mut Ctx, p: &mut Peer, rail: usize) {
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
    let ups: [bool; MAX_RAILS] =
        core::array::from_fn(|r| p.rails.get(r).is_some_and(|l| l.state == LinkState::Up));
    recovery::take_over(&mut p.st, rail, ups, applied, granted);
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
pub(super) fn rail_down(ctx: &mut Ctx, p: &mut Peer, rail: usize, why: Down) {
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
        p.st.counts[rail].bad_frames += 1;
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
    let target = recovery::fail_over(ctx, p, rail);
    let st = &mut p.st;
    if target.is_none() && st.down_since.is_none() {
        st.down_since = Some(ctx.now);
    }
    if st.active && !st.closed_by_peer && p.rails[rail].addr.is_some() {
        let rl = &mut p.rails[rail];
        let d = rl.backoff.next_delay();
        rl.next_attempt = Some(ctx.later(d));
        ctx.stats.reconnects += 1;
    }
    if let Some(t) = target {
        kick(ctx, p, t, true);
    }
}

/// Gives up on `p`: everything toward it fails.
pub(super) fn peer_dead(ctx: &mut Ctx, p: &mut Peer) {
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
