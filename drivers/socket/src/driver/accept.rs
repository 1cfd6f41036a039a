//! The accepting side of the connections: the listeners
//! ([`SocketDriver::accept`], taken out of the epoll set for a while when
//! out of descriptors), the handshakes of accepted connections until their
//! authenticated `Hello` names the peer and rail
//! ([`SocketDriver::handshakes`], then `connection::install`), and the two
//! budgets of handshake slots, strangers' and declared peers' ([`slot_for`]).
//! The connecting side and the rails' state machine are in
//! [`super::connection`].

use std::{
    net::{SocketAddr, TcpListener},
    os::fd::AsRawFd,
};

use switchyard_core::wire::FrameOp;

use super::{
    Ctx, HELLO_GRACE, MAX_PENDING, SocketDriver,
    connection::{Pending, crossed, install},
};
use crate::{
    Event, RefuseReason,
    handshake::{Hello, Role, challenge_frame},
    sys,
};

impl SocketDriver {
    /// Takes every listener out of the epoll set (after a failed `accept`:
    /// [`SocketDriver::accept`]) until [`SocketDriver::resume_accepting`].
    fn pause_accepting(&mut self) {
        if self.ctx.accept_paused {
            return;
        }
        self.ctx.accept_paused = true;
        for l in self.listeners.iter().flatten() {
            self.ctx.epoll.remove(l.as_raw_fd());
        }
    }

    /// Puts the listeners back in the epoll set after a pause. A listener
    /// that cannot be put back (no descriptor for the epoll's own
    /// bookkeeping) is still looked at by the slow pass, every
    /// `ACCEPT_EVERY`; only parked waiters miss its wake-up.
    pub(super) fn resume_accepting(&mut self) {
        self.ctx.accept_paused = false;
        for l in self.listeners.iter().flatten() {
            let _ = self.ctx.epoll.add(l.as_raw_fd());
        }
    }

    pub(super) fn accept(&mut self) -> bool {
        let mut busy = false;
        let mut drained = false;
        for rail in 0..self.listeners.len() {
            loop {
                let (s, addr) = match self.listeners[rail].as_ref().map(TcpListener::accept) {
                    Some(Ok(c)) => c,
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Some(Err(_)) => {
                        // Out of descriptors (EMFILE, ENFILE) or memory:
                        // the connection waits in the queue, and its PE
                        // retries when its attempt times out. The
                        // listeners leave the epoll set for a while, else
                        // a parked waiter would wake at once, for ever.
                        self.ctx.stats.accept_failures += 1;
                        self.pause_accepting();
                        break;
                    }
                    None => break,
                };
                busy = true;
                if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
                    continue;
                }
                let known = self
                    .known_sources
                    .get(rail)
                    .is_some_and(|k| k.binary_search(&addr.ip()).is_ok());
                if !drained && !has_room(&self.pending, known) {
                    // Before a handshake is closed to make room: the
                    // `Hello`s that arrived are verified (and their
                    // connections installed, or refused), once per pass.
                    drained = true;
                    self.handshakes();
                }
                let Some(slot) = slot_for(&mut self.pending, &mut self.ctx, known, addr) else {
                    continue;
                };
                // The challenge first: a fresh socket's buffer takes it whole.
                let nonce = self.ctx.nonces.next();
                let challenge = challenge_frame(&nonce);
                if !matches!(sys::send_one(s.as_raw_fd(), &challenge), Ok(n) if n == challenge.len())
                {
                    continue;
                }
                let slot = &mut self.pending[slot];
                slot.nonce = nonce;
                slot.known = known;
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
    pub(super) fn handshakes(&mut self) -> bool {
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
            let challenge = self.pending[i].nonce;
            let lazy = ctx.lazy;
            // Eagerly the lower rank connects; with connect-on-first-use
            // either may, from an address not announced to this PE.
            let why = if !h.is_authentic(&ctx.cfg.key, Role::Connect, ctx.cfg.job_id, &challenge) {
                Some(RefuseReason::Unauthenticated)
            } else if h.dst != ctx.me
                || h.src == ctx.me
                || h.src >= ctx.cfg.n_pes
                || (!lazy && h.src >= ctx.me)
            {
                Some(RefuseReason::BadPe)
            } else if h.rail as usize != rail
                || h.conn as usize >= ctx.n_conns()
                || h.n_conns as usize != ctx.n_conns()
            {
                Some(RefuseReason::BadRail)
            } else {
                match self.peers[h.src as usize].as_deref() {
                    None if lazy => None,
                    None => Some(RefuseReason::NotConfigured),
                    Some(p) if p.st.dead || (!lazy && p.rails[rail].addr.is_none()) => {
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
            if lazy {
                if let Some(p) = self.peers[h.src as usize].as_deref()
                    && crossed(&self.ctx, p, rail)
                {
                    // Both sides connected at once: the lower rank's
                    // connection wins, this one is dropped (not a refusal:
                    // the peer yields when ours reaches it).
                    self.ctx.stats.crossed += 1;
                    continue;
                }
                if !self.knows_peer(h.src) {
                    // A peer whose card this PE never fetched: it is
                    // known from now on by this connection alone.
                    let heap_len = if h.heap_len > 0 {
                        h.heap_len
                    } else {
                        self.ctx.heap.len()
                    };
                    if self.set_peer(h.src, &[], heap_len).is_err() {
                        continue;
                    }
                }
            }
            let (Some(sock), Some(p)) = (sock, self.peers[h.src as usize].as_deref_mut()) else {
                continue;
            };
            install(&mut self.ctx, p, rail, h, sock, challenge);
        }
        busy
    }

    fn refuse(&mut self, addr: SocketAddr, why: RefuseReason) {
        count_refusal(&mut self.ctx, addr, why);
    }
}

/// Whether a connection from a `known` source (or a stranger) finds a
/// free handshake slot within its budget ([`slot_for`]).
fn has_room(pending: &[Pending], known: bool) -> bool {
    let strangers = pending
        .iter()
        .filter(|p| p.sock.is_some() && !p.known)
        .count();
    pending.iter().any(|p| p.sock.is_none()) && (known || strangers < MAX_PENDING)
}

/// A handshake slot for a connection accepted from `addr`, `known` when
/// that is a lower-ranked peer's address on the rail (or, with
/// connect-on-first-use, any declared peer's). Two budgets:
///
/// * strangers hold at most [`MAX_PENDING`] slots. With its budget spent,
///   a stranger closes the oldest stranger's handshake that has had
///   [`HELLO_GRACE`] to answer its challenge; while every one is
///   younger, the newcomer is closed instead. A crowd of real strangers
///   (PEs connecting on first use at once, more than the budget) is thus
///   admitted a budget at a time, each answering within the grace, rather
///   than its newest connections closing the older ones before their
///   answers are read, the closed ones retrying and closing the next (a
///   churn that grows with the crowd). An idle flood holds a slot at most
///   the grace, so a stranger retrying with backoff gets one;
/// * a known source takes any free slot, else closes the oldest known
///   source's handshake (a peer answers its challenge at once). A flood
///   from other hosts thus never closes a peer's reconnect, nor keeps it
///   from a slot (a flood from a peer's own address, as from loopback
///   when all PEs share it, competes with it, oldest closed first).
///
/// The caller has read the `Hello`s that arrived first (`accept`): no
/// handshake whose answer is here is closed. `None`: no slot (the new
/// connection is refused). Closed connections count as overload, the
/// closed handshakes in [`crate::SocketStats::handshakes_evicted`], the
/// newcomers closed in [`crate::SocketStats::handshakes_turned_away`].
fn slot_for(
    pending: &mut [Pending],
    ctx: &mut Ctx,
    known: bool,
    addr: SocketAddr,
) -> Option<usize> {
    if has_room(pending, known) {
        return pending.iter().position(|p| p.sock.is_none());
    }
    // A stranger's handshake is closed only once its grace is over: it was
    // accepted `HELLO_GRACE` ago or earlier, its deadline (acceptance plus
    // the handshake timeout) is `fresh` or earlier.
    let keep = ctx.handshake_timeout.saturating_sub(HELLO_GRACE);
    let fresh = ctx.now.nanos.saturating_add(keep.as_nanos() as u64);
    let oldest = pending
        .iter()
        .enumerate()
        .filter(|(_, p)| p.sock.is_some() && p.known == known)
        .filter(|(_, p)| known || p.deadline.nanos <= fresh)
        .min_by_key(|(_, p)| p.deadline.nanos)
        .map(|(i, _)| i);
    let Some(i) = oldest else {
        ctx.stats.handshakes_turned_away += 1;
        count_refusal(ctx, addr, RefuseReason::Overload);
        return None;
    };
    let pd = &mut pending[i];
    pd.sock = None;
    ctx.stats.handshakes_evicted += 1;
    if let Some(old) = pd.addr.take() {
        count_refusal(ctx, old, RefuseReason::Overload);
    }
    Some(i)
}

/// Counts a refused connection, by reason, and reports it.
fn count_refusal(ctx: &mut Ctx, addr: SocketAddr, why: RefuseReason) {
    ctx.stats.refused += 1;
    ctx.stats.refused_by[why.index()] += 1;
    ctx.event(Event::Refused { addr, why });
}
