//! A QP set's link at either end: its failure, the receipts handshake,
//! its rebuild, as `link.rs` does for the PE's shared driver, per set and
//! with the set's own records ([`Record::SetLink`](super::Record::SetLink)).
//!
//! A set is a driver of its own toward one peer ([`VerbsDriver::open_set`]),
//! with its own generations, receipts and replays; [`SetState`] is what
//! [`PeerV`](super::PeerV) is for the PE's driver. Both ends run the same
//! state: the opener (a context's own set, `sets.rs`) posts on it, so only
//! it holds puts in doubt, replays them over TCP and reports its losses;
//! the answerer (the PE's) moves its QPs to the error state when told,
//! collects its receipts and answers them, and both rebuild to the same
//! generation and exchange their RTS.

use switchyard_core::topology::LinkState;
use switchyard_verbs::{Event, VerbsDriver, VerbsError, card::MAX_QPS};

use super::{ASK_AGAIN_NS, BACKOFF_RESET_NS, MAX_BACKOFF_NS, MIN_BACKOFF_NS, SetLink};

/// One QP set's link, at either end.
#[derive(Debug, Clone)]
pub(super) struct SetState {
    /// The generation our QPs are at RTS for.
    pub(super) generation: u32,
    /// The set's driver reports its link Up.
    local_up: bool,
    /// The generation the peer says its end is at RTS for.
    pub(super) peer_rts: Option<u32>,
    /// A rebuild to do, and not before `rebuild_at` (ns, context clock).
    rebuild_to: Option<u32>,
    rebuild_at: u64,
    backoff: u64,
    last_fail: u64,
    /// In-doubt puts wait for the peer's receipts, until `hold_until`.
    pub(super) hold: bool,
    hold_until: u64,
    /// When to ask again ([`SetLink::Failed`]) while holding.
    ask_at: u64,
    ask_every: u64,
    /// When to send our `Rts` again while rebuilt and the peer's has not
    /// come (a control record the TCP driver could not queue is not sent
    /// again by it), and the delay after that.
    rts_at: u64,
    rts_every: u64,
    /// A repeat of the peer's `Rts` was answered with ours in this
    /// generation (once: two ends both up never answer each other for
    /// ever).
    rts_answered: bool,
    /// Receipts received so far for `applied_gen`, per data QP.
    applied: [Option<u64>; MAX_QPS],
    applied_gen: u32,
    /// The failure whose receipts of the peer's puts this end withheld.
    withheld: Option<u32>,
    /// Replays may be waiting in the set's driver.
    pub(super) drain_due: bool,
    /// The device failed: the set is never usable again.
    fatal: bool,
    /// In-doubt puts given up on and not yet reported (the opener's next
    /// `quiet` reports them).
    pub(super) lost: u64,
    /// Failures of the set's link.
    pub(super) failovers: u64,
    /// Operations replayed over TCP.
    pub(super) replays: u64,
}

impl SetState {
    /// A set just opened (its QPs not connected yet).
    pub(super) fn new() -> SetState {
        SetState {
            generation: 0,
            local_up: false,
            peer_rts: None,
            rebuild_to: None,
            rebuild_at: 0,
            backoff: MIN_BACKOFF_NS,
            last_fail: 0,
            hold: false,
            hold_until: 0,
            ask_at: 0,
            ask_every: ASK_AGAIN_NS,
            rts_at: 0,
            rts_every: ASK_AGAIN_NS,
            rts_answered: false,
            applied: [None; MAX_QPS],
            applied_gen: 0,
            withheld: None,
            drain_due: false,
            fatal: false,
            lost: 0,
            failovers: 0,
            replays: 0,
        }
    }

    /// Whether the set can take operations: Up at both ends for the same
    /// generation, nothing in doubt, waiting for replay or to rebuild.
    pub(super) fn usable(&self) -> bool {
        !self.fatal
            && self.local_up
            && self.peer_rts == Some(self.generation)
            && !self.hold
            && !self.drain_due
            && self.rebuild_to.is_none()
    }

    /// The generation the current failure rebuilds to.
    fn failing_to(&self) -> u32 {
        self.rebuild_to.unwrap_or(self.generation + 1)
    }

    /// One step (after the set's `progress`): its events, the receipts'
    /// deadline (asking again meanwhile), a rebuild that is due. `out`
    /// gets the records to send the peer, `warn` the warnings.
    pub(super) fn step(
        &mut self,
        drv: &mut VerbsDriver,
        peer: u32,
        now: u64,
        hold_ns: u64,
        out: &mut Vec<SetLink>,
        warn: &mut Vec<String>,
    ) {
        self.events(drv, peer, now, hold_ns, out, warn);
        if self.hold {
            if now > self.hold_until {
                self.abandon(drv, peer, "timed out", warn);
            } else if now >= self.ask_at {
                // No (complete) answer yet: ask again.
                self.ask_every = (self.ask_every * 2).min(MAX_BACKOFF_NS);
                self.ask_at = now + self.ask_every;
                out.push(SetLink::Failed {
                    generation: self.failing_to(),
                });
            }
        }
        if self.generation > 0
            && self.rebuild_to.is_none()
            && self.peer_rts != Some(self.generation)
            && now >= self.rts_at
        {
            // Rebuilt, the peer's RTS not here: ours may have been lost
            // (the peer answers a repeat with its own).
            self.rts_every = (self.rts_every * 2).min(MAX_BACKOFF_NS);
            self.rts_at = now + self.rts_every;
            out.push(SetLink::Rts {
                generation: self.generation,
            });
        }
        if let Some(g) = self.rebuild_to
            && now >= self.rebuild_at
            && !self.fatal
        {
            match drv.rebuild(peer, g) {
                // Rebuilt (an event), or nothing left to do.
                Ok(()) | Err(VerbsError::Plan { .. }) => self.rebuild_to = None,
                // Replays or receipts still waiting: the next step.
                Err(VerbsError::PeerDown { .. }) => self.drain_due = true,
                Err(_) => {
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF_NS);
                    self.rebuild_at = now + self.backoff;
                }
            }
        }
        self.events(drv, peer, now, hold_ns, out, warn);
    }

    /// Applies every queued event of the set's driver.
    pub(super) fn events(
        &mut self,
        drv: &mut VerbsDriver,
        peer: u32,
        now: u64,
        hold_ns: u64,
        out: &mut Vec<SetLink>,
        warn: &mut Vec<String>,
    ) {
        while let Some(ev) = drv.poll_event() {
            self.event(drv, peer, ev, now, hold_ns, out, warn);
        }
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the set's driver, its peer, the clock and the two outputs"
    )]
    fn event(
        &mut self,
        drv: &mut VerbsDriver,
        peer: u32,
        ev: Event,
        now: u64,
        hold_ns: u64,
        out: &mut Vec<SetLink>,
        warn: &mut Vec<String>,
    ) {
        match ev {
            Event::Link { state, .. } => {
                if state == LinkState::Up {
                    self.local_up = true;
                    return;
                }
                self.local_up = false;
                self.drain_due = true;
                self.failovers += 1;
                if !self.hold && drv.awaits_receipts(peer) {
                    // Puts in doubt: ask the peer which landed (the
                    // Failed record at RebuildNeeded) and hold the
                    // context's newer operations to it.
                    self.hold = true;
                    self.hold_until = now + hold_ns;
                    self.ask_every = ASK_AGAIN_NS;
                    self.ask_at = now + ASK_AGAIN_NS;
                    self.applied = [None; MAX_QPS];
                }
                if now.saturating_sub(self.last_fail) > BACKOFF_RESET_NS {
                    self.backoff = MIN_BACKOFF_NS;
                } else {
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF_NS);
                }
                self.last_fail = now;
            }
            Event::RebuildNeeded { generation, .. } => {
                self.rebuild_to = Some(self.rebuild_to.map_or(generation, |g| g.max(generation)));
                self.rebuild_at = now + self.backoff;
                self.drain_due = true;
                // The peer's end was not reset by our failure: tell it.
                out.push(SetLink::Failed { generation });
            }
            Event::Rebuilt { generation, .. } => {
                self.generation = generation;
                self.rts_every = ASK_AGAIN_NS;
                self.rts_at = now + ASK_AGAIN_NS;
                self.rts_answered = false;
                if self.peer_rts == Some(generation) {
                    let _ = drv.peer_rebuilt(peer, generation);
                }
                out.push(SetLink::Rts { generation });
            }
            Event::DeviceFatal => {
                self.fatal = true;
                self.local_up = false;
                self.drain_due = true;
            }
            Event::Receipts {
                generation,
                applied,
                ..
            } => push_receipts(out, generation, applied.as_slice(), applied.n),
            Event::ReceiptsWithheld {
                generation, reason, ..
            } => {
                self.withheld = Some(generation);
                warn.push(format!(
                    "verbs receipts of PE {peer}'s puts on a QP set withheld for generation {generation} ({reason}): PE {peer} is told and reports them lost"
                ));
                out.push(SetLink::Withheld { generation });
            }
            Event::PortDown { .. } | Event::PortActive { .. } => {}
        }
    }

    /// Applies the peer's record for this set. Returns whether it was bad
    /// (receipts that do not fit; counted by the caller). The driver's
    /// events it causes are applied by the caller's next
    /// [`SetState::events`].
    pub(super) fn record(
        &mut self,
        drv: &mut VerbsDriver,
        peer: u32,
        link: SetLink,
        out: &mut Vec<SetLink>,
        warn: &mut Vec<String>,
    ) -> bool {
        match link {
            SetLink::Rts { generation } => {
                if generation > 0
                    && generation == self.generation
                    && self.peer_rts == Some(generation)
                    && self.local_up
                {
                    // A repeat: the peer may not have ours (answered once).
                    if !self.rts_answered {
                        self.rts_answered = true;
                        out.push(SetLink::Rts { generation });
                    }
                    return false;
                }
                self.peer_rts = Some(generation);
                if generation > 0 && generation == self.generation {
                    let _ = drv.peer_rebuilt(peer, generation);
                }
            }
            SetLink::Failed { generation } => {
                // Only a generation beyond ours: older news is not a new
                // failure.
                if generation > self.generation {
                    let _ = drv.peer_failed(peer);
                    self.rebuild_to =
                        Some(self.rebuild_to.map_or(generation, |g| g.max(generation)));
                }
                // The peer asks which of its puts landed: answer now when
                // collected, else when the driver reports them.
                if let Some((g, r)) = drv.receipts(peer) {
                    push_receipts(out, g, r.as_slice(), r.n);
                } else if self.withheld == Some(generation) {
                    out.push(SetLink::Withheld { generation });
                }
            }
            SetLink::Withheld { generation } => {
                if self.hold && self.failing_to() == generation {
                    self.abandon(drv, peer, "it cannot tell which landed", warn);
                }
            }
            SetLink::Applied {
                generation,
                qp,
                of,
                seq,
            } => {
                if !self.hold {
                    return false; // nothing waits for it
                }
                if self.applied_gen != generation {
                    self.applied = [None; MAX_QPS];
                    self.applied_gen = generation;
                }
                self.applied[usize::from(qp - 1)] = Some(seq);
                let of = usize::from(of);
                if self.applied[..of].iter().any(Option::is_none) {
                    return false;
                }
                let mut got = [0u64; MAX_QPS];
                for (g, a) in got.iter_mut().zip(&self.applied[..of]) {
                    *g = a.unwrap_or(0);
                }
                match drv.settle_receipts(peer, generation, &got[..of]) {
                    Ok(_) => {
                        self.hold = false;
                        self.drain_due = true;
                    }
                    Err(e) => {
                        // Keep holding: the deadline reports them lost.
                        self.applied = [None; MAX_QPS];
                        warn.push(format!(
                            "PE {peer} sent verbs receipts for a QP set that do not fit: {e}"
                        ));
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Gives up on the peer's receipts: the in-doubt puts are counted lost
    /// (reported by the opener's next `quiet`), never replayed blindly.
    pub(super) fn abandon(
        &mut self,
        drv: &mut VerbsDriver,
        peer: u32,
        why: &str,
        warn: &mut Vec<String>,
    ) {
        if !self.hold {
            return;
        }
        self.hold = false;
        let lost = drv.abandon_receipts(peer);
        self.lost += lost;
        self.drain_due = true;
        warn.push(format!(
            "PE {peer} sent no verbs receipts for a QP set ({why}): {lost} puts in doubt reported lost"
        ));
    }
}

/// One [`SetLink::Applied`] per data QP.
fn push_receipts(out: &mut Vec<SetLink>, generation: u32, seqs: &[u64], of: u8) {
    for (i, &seq) in seqs.iter().enumerate() {
        out.push(SetLink::Applied {
            generation,
            qp: i as u8 + 1,
            of,
            seq,
        });
    }
}
