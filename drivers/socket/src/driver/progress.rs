//! The progress loop: [`SocketDriver::progress`] takes one step over the
//! listeners (accepting, every [`ACCEPT_EVERY`] at most), the pending
//! handshakes and every rail of every live peer ([`service_rail`]: connect,
//! read and apply, write, failure detection, heartbeats), then sends the acks
//! owed and gives up on peers down too long. Every [`SLOW_EVERY`]-th step is
//! a full (slow) pass; the steps between only read and write the data
//! connections of Up rails. Parking ([`SocketDriver::wait`], [`Parker`])
//! waits on the driver's epoll instance.

use std::{ops::ControlFlow, time::Duration};

use switchyard_core::{
    transport::{Instant, LinkState, PollResult},
    wire::FrameOp,
};

use super::{
    Ctx, SocketDriver,
    connection::{Down, Peer, Phase, conn_failed, connect_step, peer_dead, rail_down, rail_up},
    receive::read_conn,
    recovery::send_acks,
    send::{fields, flush_conn, flush_rail_control},
};
use crate::{Result, SocketError, sys};

/// Progress steps between two slow passes (accepting, handshakes,
/// connecting, control connections, timers); the steps between only read and
/// write the data connections, so a busy-poller pays one `recv` per data
/// connection per idle step.
pub(super) const SLOW_EVERY: u32 = 16;
/// Longest wait between looks at the listeners (new and re-made connections).
const ACCEPT_EVERY: Duration = Duration::from_micros(200);
/// After a failed `accept` (out of descriptors): how long the listeners
/// stay out of the epoll set before the next try. The connection waits in
/// the listener's queue meanwhile; its PE's attempt lasts far longer.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

impl SocketDriver {
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
            self.ctx.last_slow = self.ctx.now;
            // Listeners rarely have anything: look at most every
            // ACCEPT_EVERY (a refused `accept` is a system call on the
            // waiting path), but at once again after one arrived.
            if self.ctx.now >= self.ctx.next_accept {
                if self.ctx.accept_paused {
                    self.resume_accepting();
                }
                let got = self.accept();
                busy |= got;
                let wait = if self.ctx.accept_paused {
                    ACCEPT_PAUSE.as_nanos() as u64
                } else if got {
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

    /// Whether the timers (heartbeats, failure detection, reconnects, which
    /// only the slow pass runs) last ran half a heartbeat interval or more
    /// before `now`. An application that stays in the library without
    /// waiting (a stream of sends, each taking the driver) makes no progress
    /// steps and keeps the progress thread out: its idle rails would send no
    /// heartbeats, and its peers would take them for down. Such a caller
    /// runs [`SocketDriver::run_timers`] when this says so.
    #[inline]
    pub fn timers_due(&self, now: Instant) -> bool {
        now.nanos.saturating_sub(self.ctx.last_slow.nanos)
            >= self.ctx.cfg.heartbeat_interval.as_nanos() as u64 / 2
    }

    /// One full (slow) progress pass at `now`: see
    /// [`SocketDriver::timers_due`].
    pub fn run_timers(&mut self, now: Instant) -> PollResult {
        self.woke();
        self.progress(now)
    }

    /// Parks until a socket is readable or `timeout` passed (adaptive
    /// progress: spin a while, then park here).
    pub fn wait(&mut self, timeout: Duration) {
        self.ctx.epoll.wait(epoll_ms(timeout));
        self.woke();
    }

    /// Says that a parked waiter woke (a [`Parker`] of this driver, or a
    /// timeout): whatever woke it may be on a control connection (an ack, a
    /// peer's request for one) or a listener, which only the full (slow)
    /// pass reads, so the next progress step is one.
    pub fn woke(&mut self) {
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

/// One progress step on rail `r` toward `p`.
fn service_rail(ctx: &mut Ctx, p: &mut Peer, r: usize, slow: bool) -> bool {
    // A rail without the peer's address is idle unless the peer connected
    // it (connect-on-first-use: a peer this PE only accepts from).
    if p.rails[r].addr.is_none() && p.rails[r].state != LinkState::Up {
        return false;
    }
    // Between slow passes an idle or connecting rail has nothing to do.
    if !slow && (p.rails[r].connecting || p.rails[r].state != LinkState::Up) {
        return false;
    }
    let mut busy = match connect_step(ctx, p, r) {
        ControlFlow::Continue(busy) => busy,
        ControlFlow::Break(()) => return true,
    };
    // Read every open connection (the control connection, 0, only in the
    // slow pass: acks, credits and heartbeats are not latency-critical,
    // except the ack this PE asked for, which a quiet or a fence waits on).
    let mut down = None;
    let control = slow || p.st.ack_requested;
    for c in usize::from(!control)..p.rails[r].conns.len() {
        let Peer { rails, st } = &mut *p;
        let rl = &mut rails[r];
        let conn = &mut rl.conns[c];
        if !matches!(
            conn.phase,
            Phase::Up | Phase::HelloSent | Phase::ChallengeWait
        ) {
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
        conn_failed(ctx, p, r, why);
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
        conn_failed(ctx, p, r, why);
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

/// Parks a thread until a [`SocketDriver`] has input: see
/// [`SocketDriver::parker`]. Owns its own descriptor of the driver's epoll
/// instance, so it stays valid (and simply never wakes for input) after the
/// driver is closed.
#[derive(Debug)]
pub struct Parker(sys::Epoll);

impl Parker {
    /// Waits until the driver has input or `timeout` passed; returns whether
    /// it has input. Input stays pending until the driver progresses (level
    /// triggered), so a caller that cannot progress now should not park again
    /// at once.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.0.wait(epoll_ms(timeout))
    }
}

/// `timeout` in whole milliseconds for `epoll_wait`, rounded up.
fn epoll_ms(timeout: Duration) -> i32 {
    timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}
