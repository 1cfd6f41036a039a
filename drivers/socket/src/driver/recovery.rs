//! Replay and recovery: what makes every operation apply exactly once
//! across failures, and what waits for that.
//!
//! * Acks: every frame toward a peer carries the highest sequence applied in
//!   order from it (`dedup.base()`); [`on_ack`] releases the replay ring up
//!   to there, widens the post-recovery ramp, and so drives `quiet_poll`
//!   (done when every ring is empty). Standalone acks and credit grants
//!   ([`send_acks`]) go when frames were received and not acked for
//!   [`ACK_DELAY`] or [`ACK_FRAMES`], or at once when the peer asked: a
//!   frame marked `ACK_NOW` (`quiet` marks the last frame it writes,
//!   [`flag_last_for_ack`]), or a request of its own ([`request_ack`]:
//!   `quiet` with every frame written already, `fence`).
//! * Ordering: the fence rule ([`check_fence`]) and the straddle rule
//!   ([`check_straddle`]) hold a frame back until the frames it must follow
//!   on another connection are acked.
//! * Replay: a rail that goes down hands its unacked frames (and those still
//!   waiting for a reply) to a rail that is up ([`fail_over`]); a rail that
//!   comes up takes the frames stranded on rails that are not
//!   ([`take_over`]), after the peer's `Hello` said what it already applied.
//!   The send path marks a frame written before as a replay; the receiver
//!   drops it by sequence ([`DedupWindow`](crate::dedup::DedupWindow)), or
//!   answers it again (gets; fetching atomics from a cache).

use std::time::Duration;

use switchyard_core::wire::{FrameOp, flags};

use super::{
    Ctx, SocketDriver,
    connection::{Peer, PeerState},
    send::{fields, flag_last_for_ack, flush_rail_control},
};
use crate::{MAX_RAILS, Result, SocketError};

/// Frames a peer may have in flight right after it recovered (no rail up,
/// then one reconnected); the limit doubles with each ack until it no longer
/// binds, so a recovered link is not hit with a whole window at once.
pub(super) const RAMP_START: u64 = 16;
/// Standalone ack after this many frames received and not acked.
pub(super) const ACK_FRAMES: u32 = 64;
/// Standalone ack once the oldest frame received and not acked is this old
/// (frames going back carry the ack for free meanwhile: a ping-pong never
/// needs a standalone one; `quiet` and `fence` ask for an immediate ack).
const ACK_DELAY: Duration = Duration::from_micros(200);

impl SocketDriver {
    /// Whether every operation on every rail is complete at its target (acked,
    /// and answered for gets into the heap). Runs one progress step; when
    /// frames are unacked it asks each such peer once for an immediate ack:
    /// by marking the last frame it is about to write `ACK_NOW`, or, when
    /// every frame is written already (or the mark cannot be used), with a
    /// separate request on the control connection.
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
        // Frames queued and not written yet: the last one asks for the ack
        // (`ACK_NOW`), so this step's write carries the request.
        for p in self.peers.iter_mut().flatten() {
            if !p.st.ring.is_empty()
                && !p.st.dead
                && !p.st.ack_requested
                && flag_last_for_ack(&self.ctx, p)
            {
                p.st.ack_requested = true;
                self.ctx.stats.acks_flagged += 1;
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
}

/// Applies the fence rule to the next heap-touching frame toward `p` on
/// `rail` (payload `span` picks its connection).
pub(super) fn check_fence(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    len: u64,
) -> Result<()> {
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
            && !e.acked()
            && (usize::from(e.rail()) != rail || e.conn != conn)
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
pub(super) fn check_straddle(
    ctx: &mut Ctx,
    p: &mut Peer,
    rail: usize,
    offset: u64,
    len: u32,
) -> Result<()> {
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
            .is_some_and(|e| !e.acked() && usize::from(e.rail()) == rail && e.conn == second)
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

/// Sends a heartbeat asking for an immediate ack, on the first Up rail.
pub(super) fn request_ack(ctx: &mut Ctx, p: &mut Peer) {
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
        ctx.stats.ack_requests += 1;
        flush_rail_control(ctx, p, r);
    }
}

pub(super) fn on_ack(st: &mut PeerState, ack: u64) {
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

/// Sends a standalone ack (and a credit grant) when something was received
/// and not acked, or the peer asked.
pub(super) fn send_acks(ctx: &mut Ctx, p: &mut Peer) -> bool {
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

/// `rail` came up with the peer's `Hello`s saying what it applied and
/// granted (`ups`: which rails are up now, `rail` among them): release what
/// it applied, take its credit, and move here the frames stranded on rails
/// that are not up, to be sent again.
pub(super) fn take_over(
    st: &mut PeerState,
    rail: usize,
    ups: [bool; MAX_RAILS],
    applied: u64,
    granted: u64,
) {
    on_ack(st, applied);
    st.credit.on_grant(granted);
    // Frames stranded on rails that are not up move here.
    let mut s = st.ring.tail_seq();
    while s < st.ring.next_seq() {
        if let Some(e) = st.ring.get(s)
            && e.outstanding()
            && !ups[usize::from(e.rail())]
        {
            // Same data connection index on the new rail: the order per
            // block is kept.
            st.ring.reassign(s, rail as u8);
        }
        s += 1;
    }
    st.ack_requested = false;
}

/// `rail` toward `p` went down: its frames not yet acked (or still awaiting
/// a reply) are to be sent again, on the first rail still up (a failover)
/// or, with none, on whichever rail comes up first. Acks and grants are owed
/// again in full. Returns the rail that took the frames over.
pub(super) fn fail_over(ctx: &mut Ctx, p: &mut Peer, rail: usize) -> Option<usize> {
    let target = p.any_up();
    let st = &mut p.st;
    let mut moved = 0u64;
    let mut s = st.ring.tail_seq();
    while s < st.ring.next_seq() {
        if let Some(e) = st.ring.get_mut(s)
            && usize::from(e.rail()) == rail
            && e.outstanding()
        {
            e.sent = false;
            if let Some(t) = target {
                st.ring.reassign(s, t as u8);
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
    }
    st.ack_requested = false;
    st.ack_sent = 0;
    st.grant_sent = 0;
    target
}
