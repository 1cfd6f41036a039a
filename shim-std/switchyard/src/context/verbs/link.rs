//! The verbs links at run time: the progress step and the driver's events,
//! a link that fails (its health bit, the peer told), the receipts
//! handshake, the replay over TCP, the rebuild, and the health bit set
//! again after a full quiet.

use std::time::Duration;

use switchyard_core::{
    route::ContextId,
    sync::atomic::Ordering,
    topology::LinkState,
    trace::TraceRecord,
    transport::{ErrorKind, Instant as CoreInstant, Transport, TransportError},
    wire::FrameOp,
};
use switchyard_socket::SocketDriver;
use switchyard_verbs::{Event, Receipts, Replay, VerbsDriver, VerbsError, card::MAX_QPS};

use super::{
    ASK_AGAIN_NS, BACKOFF_RESET_NS, MAX_BACKOFF_NS, MIN_BACKOFF_NS, Record, Refusal, pair_card,
};
use crate::context::{Context, Error, Result, TCP, VERBS, progress};

/// Replays one operation over TCP rail 0, making progress while the TCP
/// window is full, for at most `patience`. Returns whether TCP took it.
fn replay_one(
    tcp: &mut SocketDriver,
    r: Replay<'_>,
    me: u32,
    clock: std::time::Instant,
    patience: Duration,
) -> bool {
    let start = std::time::Instant::now();
    loop {
        let mut rail = tcp.rail(0);
        let res = match r {
            Replay::Put {
                peer,
                seq,
                offset,
                bytes,
            } => rail.put(peer, offset, bytes, ContextId { pe: me, seq }),
            Replay::PutFromHeap {
                peer,
                seq,
                offset,
                local_offset,
                len,
            } => rail.put_from_heap(peer, offset, local_offset, len, ContextId { pe: me, seq }),
            Replay::GetIntoHeap {
                peer,
                seq,
                offset,
                local_offset,
                len,
            } => rail.get_into_heap(peer, offset, local_offset, len, ContextId { pe: me, seq }),
            Replay::Atomic {
                peer,
                seq,
                offset,
                op,
            } => rail
                .atomic_start(peer, offset, op, ContextId { pe: me, seq })
                .map(|_| ()),
        };
        match res {
            Ok(()) => return true,
            Err(e) if e.kind() == ErrorKind::WouldBlock && start.elapsed() < patience => {
                let now = CoreInstant::from_nanos(clock.elapsed().as_nanos() as u64);
                tcp.progress(now);
            }
            Err(_) => return false,
        }
    }
}

/// What [`drain_over_tcp`] did.
pub(super) struct Drained {
    /// Operations offered for replay (taken by TCP or lost).
    pub(super) offered: u64,
    /// Operations it did not take (lost).
    pub(super) lost: u64,
    /// The peer of the first lost one.
    pub(super) first_lost: Option<u32>,
}

/// Sends every operation `drv` offers for replay over TCP rail 0, each
/// once, in the order given, then fences TCP when any went (the replays
/// stand for operations issued before anything that follows, and TCP
/// orders its rails only at a fence). `moved` gets the replays' trace
/// records (a failover: the operation left the failed verbs link for
/// TCP). `who`: this PE, the context's clock, the op timeout.
pub(super) fn drain_over_tcp(
    drv: &mut VerbsDriver,
    mut tcp: Option<&mut SocketDriver>,
    who: (u32, std::time::Instant, Duration),
    moved: &mut Vec<TraceRecord>,
) -> Drained {
    let (me, clock, patience) = who;
    let mut d = Drained {
        offered: 0,
        lost: 0,
        first_lost: None,
    };
    let mut n = 0u64;
    drv.drain_replays(|r| {
        n += 1;
        let (peer, seq, len, op) = match r {
            Replay::Put {
                peer, seq, bytes, ..
            } => (peer, seq, bytes.len() as u64, FrameOp::Put),
            Replay::PutFromHeap { peer, seq, len, .. } => (peer, seq, u64::from(len), FrameOp::Put),
            Replay::GetIntoHeap { peer, seq, len, .. } => (peer, seq, u64::from(len), FrameOp::Get),
            Replay::Atomic { peer, seq, .. } => (peer, seq, 8, FrameOp::Atomic),
        };
        let ok = tcp
            .as_deref_mut()
            .is_some_and(|t| replay_one(t, r, me, clock, patience));
        if ok {
            moved.push(TraceRecord {
                seq,
                src: me,
                dst: peer,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                class: TraceRecord::NO_CLASS,
                transport: TCP.index() as u8,
                op: op as u8,
                flags: TraceRecord::FAILOVER | TraceRecord::RETRIED,
                timestamp: 0,
            });
        } else {
            d.lost += 1;
            d.first_lost.get_or_insert(peer);
        }
    });
    if n > d.lost
        && let Some(t) = tcp
    {
        // A later operation may take another rail than the replays'.
        let _ = t.fence();
    }
    d.offered = n;
    d
}

impl Context {
    /// Sets the health bit of every peer whose link is Up at both ends (at
    /// the end of a successful quiet that completed the shared verbs driver
    /// and TCP, `shared`: nothing sent over TCP before can be overtaken by
    /// what goes over verbs from now on); this context's own sets that are
    /// usable again, always (their replays went over TCP, which such a
    /// quiet completed when this context used it).
    pub(in crate::context) fn verbs_raise(&mut self, shared: bool) {
        self.verbs_sets_raise();
        if !shared {
            // Not proven safe for the PE's links: this quiet did not wait
            // for the shared drivers.
            return;
        }
        self.verbs_in();
        let Some(v) = self.verbs.as_mut() else { return };
        if v.fatal || !v.raise_due {
            return;
        }
        v.raise_due = false;
        for p in &mut v.peers {
            if p.wanted && !p.bit && p.local_up && p.peer_rts == Some(p.generation) {
                self.topo.set_health(VERBS, p.pe, true);
                p.bit = true;
            }
        }
    }

    /// One verbs step of `poll_once`: progress the driver, apply its
    /// events, drain replays, start rebuilds that are due.
    pub(in crate::context) fn verbs_poll(&mut self, now: CoreInstant) {
        self.verbs_in();
        let Some(v) = self.verbs.as_mut() else { return };
        v.drv.progress(now);
        self.verbs_sets_step(now);
        self.verbs_events();
        if self.verbs.as_ref().is_some_and(|v| v.holding > 0) {
            self.verbs_hold_deadlines(now.nanos);
        }
        let Some(v) = self.verbs.as_mut() else { return };
        if v.fatal || !v.rebuild_due {
            return;
        }
        let now_ns = now.nanos;
        v.rebuild_due = false;
        for slot in 0..v.peers.len() {
            let p = &mut v.peers[slot];
            let pe = p.pe;
            let Some(g) = p.rebuild_to else { continue };
            if now_ns < p.rebuild_at {
                v.rebuild_due = true;
                continue;
            }
            match v.drv.rebuild(pe, g) {
                // Rebuilt (reported as an event) or nothing left to do
                // (already at that generation, or the link is working).
                Ok(()) => p.rebuild_to = None,
                Err(VerbsError::PeerDown { .. }) => {
                    // Replays still waiting: drained on the next step.
                    v.drain_due = true;
                    v.rebuild_due = true;
                }
                Err(VerbsError::Plan { .. }) => p.rebuild_to = None,
                Err(_) => {
                    p.backoff = (p.backoff * 2).min(MAX_BACKOFF_NS);
                    p.rebuild_at = now_ns + p.backoff;
                    v.rebuild_due = true;
                }
            }
        }
        self.verbs_events();
    }

    /// Gives up on the receipts of every held peer that is dead or did not
    /// answer within the op timeout: its in-doubt puts are reported lost
    /// by the next `quiet` ([`Error::ReplayLost`]),
    /// never replayed blindly nor dropped silently.
    fn verbs_hold_deadlines(&mut self, now: u64) {
        let n = self.verbs.as_ref().map_or(0, |v| v.peers.len());
        for slot in 0..n {
            let Some(v) = self.verbs.as_ref() else { return };
            let p = &v.peers[slot];
            let pe = p.pe;
            if !p.hold {
                continue;
            }
            let (expired, ask) = (now > p.hold_until, now >= p.ask_at);
            let generation = p.rebuild_to.unwrap_or(p.generation + 1);
            if !expired && !self.is_dead(pe) {
                if ask {
                    // No (complete) answer yet: ask again.
                    let Some(v) = self.verbs.as_mut() else { return };
                    let p = &mut v.peers[slot];
                    p.ask_every = (p.ask_every * 2).min(MAX_BACKOFF_NS);
                    p.ask_at = now + p.ask_every;
                    self.verbs_send(pe, Record::Failed { generation });
                }
                continue;
            }
            self.verbs_abandon(pe, if expired { "timed out" } else { "it died" });
        }
        self.verbs_events();
    }

    /// Gives up on `pe`'s receipts (`why` for the warning): its in-doubt
    /// puts are reported lost by the next `quiet`, and operations to it no
    /// longer wait.
    fn verbs_abandon(&mut self, pe: u32, why: &str) {
        let Some(v) = self.verbs.as_mut() else { return };
        let Some(slot) = v.slot(pe) else { return };
        let p = &mut v.peers[slot];
        if !p.hold {
            return;
        }
        p.hold = false;
        v.holding -= 1;
        self.pe.verbs_holding.store(v.holding, Ordering::Release);
        let lost = v.drv.abandon_receipts(pe);
        v.drain_due = true;
        if lost > 0 {
            v.losses.record(slot, lost, self.lane);
        }
        self.warnings.push(format!(
            "PE {pe} sent no verbs receipts ({why}): {lost} puts in doubt reported lost"
        ));
    }

    /// Whether operations to `pe` must wait: its verbs link failed with
    /// puts in doubt, whose receipts have not come (they are replayed, or
    /// known landed, before anything newer goes to `pe`).
    ///
    /// Read without the entry lock while no peer is held (the PE's copy of
    /// the count, `PeInner::verbs_holding`), so the shared-memory leg
    /// takes no lock.
    #[inline]
    pub(in crate::context) fn verbs_holds(&self, pe: u32) -> bool {
        // SYNC POINT with the Release stores of `verbs_holding` in
        // `verbs_event` and `verbs_abandon`: set before the failed link's
        // health bit is cleared.
        self.verbs_set_holds(pe)
            || (self.verbs_pe
                && self.pe.verbs_holding.load(Ordering::Acquire) > 0
                && self.verbs_holds_slow(pe))
    }

    /// Whether the PE's shared verbs state has something for this
    /// context's next quiet though it may have nothing on the shared
    /// driver: a loss to report to it ([`LossBook`](super::LossBook)), or a
    /// link that came (back) up, whose health bit waits for a quiet of both
    /// shared drivers ([`Context::verbs_raise`]). Read without the entry
    /// lock: the state itself when this context has it checked out, else
    /// the copy published when it went back to its cell
    /// (`PeInner::verbs_attention`,
    /// [`Verbs::attention_changed`](super::Verbs::attention_changed)).
    #[inline]
    pub(in crate::context) fn verbs_attention(&self) -> bool {
        if !self.verbs_pe {
            return false;
        }
        let a = match self.verbs.as_deref() {
            Some(v) => v.attention(),
            // SYNC POINT with the Release store in `Context::verbs_back`.
            None => self.pe.verbs_attention.load(Ordering::Acquire),
        };
        a & self.lane != 0
    }

    #[cold]
    #[inline(never)]
    fn verbs_holds_slow(&self, pe: u32) -> bool {
        self.with_verbs(|v| v.peer(pe).is_some_and(|p| p.hold))
            .unwrap_or(false)
    }

    /// Sends `to` our receipts of its puts (one [`Record::Applied`] per
    /// data QP), for the failure that rebuilds to `generation`.
    fn verbs_send_receipts(&mut self, to: u32, generation: u32, applied: &Receipts) {
        let of = applied.n;
        for (i, &seq) in applied.as_slice().iter().enumerate() {
            self.verbs_send(
                to,
                Record::Applied {
                    generation,
                    qp: i as u8 + 1,
                    of,
                    seq,
                },
            );
        }
    }

    /// Applies every queued driver event, then drains replays when a link
    /// failed. Also what an operation that met a verbs error runs before it
    /// is retried elsewhere.
    pub(in crate::context) fn verbs_events(&mut self) {
        self.verbs_in();
        while let Some(ev) = self.verbs.as_mut().and_then(|v| v.drv.poll_event()) {
            self.verbs_event(ev);
        }
        if self.verbs.as_ref().is_some_and(|v| v.drain_due) {
            self.verbs_drain();
        }
    }

    fn verbs_event(&mut self, ev: Event) {
        let now = self.now().nanos;
        if let Event::Link { peer, state } = &ev {
            self.sx_link(VERBS, *peer, *state);
        }
        let Some(v) = self.verbs.as_mut() else { return };
        match ev {
            Event::Link { peer, state } => {
                let Some(slot) = v.slot(peer) else { return };
                let p = &mut v.peers[slot];
                self.stats.link_transitions += 1;
                if state == LinkState::Up {
                    p.local_up = true;
                    v.raise_due = true;
                    return;
                }
                p.local_up = false;
                p.bit = false;
                v.drain_due = true;
                v.failovers += 1;
                if !p.hold && v.drv.awaits_receipts(peer) {
                    // Puts in doubt: ask the peer which landed (the
                    // Failed record below) and hold everything newer.
                    p.hold = true;
                    p.hold_until = now + self.op_timeout.as_nanos() as u64;
                    p.ask_every = ASK_AGAIN_NS;
                    p.ask_at = now + ASK_AGAIN_NS;
                    p.applied = [None; MAX_QPS];
                    v.holding += 1;
                    // Before the health bit clears below (`verbs_holds`).
                    self.pe.verbs_holding.store(v.holding, Ordering::Release);
                }
                self.stats.links_lost += 1;
                if now.saturating_sub(p.last_fail) > BACKOFF_RESET_NS {
                    p.backoff = MIN_BACKOFF_NS;
                } else {
                    p.backoff = (p.backoff * 2).min(MAX_BACKOFF_NS);
                }
                p.last_fail = now;
                // At once: the next select takes TCP.
                self.topo.apply_link_state(VERBS, peer, LinkState::Error);
            }
            Event::RebuildNeeded { peer, generation } => {
                let Some(slot) = v.slot(peer) else { return };
                let p = &mut v.peers[slot];
                p.rebuild_to = Some(p.rebuild_to.map_or(generation, |g| g.max(generation)));
                p.rebuild_at = now + p.backoff;
                v.drain_due = true;
                v.rebuild_due = true;
                // The peer's QPs were not reset by our failure: tell it.
                self.verbs_send(peer, Record::Failed { generation });
            }
            Event::Rebuilt { peer, generation } => {
                let Some(slot) = v.slot(peer) else { return };
                let p = &mut v.peers[slot];
                p.generation = generation;
                let peer_ready = p.peer_rts == Some(generation);
                if peer_ready {
                    let _ = v.drv.peer_rebuilt(peer, generation);
                }
                self.verbs_send(peer, Record::Rts { generation });
            }
            Event::DeviceFatal => {
                v.fatal = true;
                v.drain_due = true;
                for p in &mut v.peers {
                    p.bit = false;
                    self.topo.apply_link_state(VERBS, p.pe, LinkState::Error);
                }
                self.warnings
                    .push("the RDMA device failed: this PE uses TCP from now on".into());
            }
            Event::Receipts {
                peer,
                generation,
                applied,
            } => self.verbs_send_receipts(peer, generation, &applied),
            Event::ReceiptsWithheld {
                peer,
                generation,
                reason,
            } => {
                if let Some(slot) = v.slot(peer) {
                    v.peers[slot].withheld = Some(generation);
                }
                self.warnings.push(format!(
                    "verbs receipts of PE {peer}'s puts withheld for generation {generation} ({reason}): PE {peer} is told and reports its puts in doubt lost"
                ));
                self.verbs_send(peer, Record::Withheld { generation });
            }
            Event::PortDown { .. } | Event::PortActive { .. } => {}
        }
    }

    /// Sends every operation the driver offers for replay over TCP, each
    /// once, in the order given (before any later operation to that peer).
    fn verbs_drain(&mut self) {
        let (me, clock, patience) = (self.me, self.clock, self.op_timeout);
        let Some(v) = self.verbs.as_mut() else { return };
        v.drain_due = false;
        let tcp = self.tcp.as_mut().map(progress::Tcp::get);
        let mut moved = Vec::new();
        let d = drain_over_tcp(&mut v.drv, tcp, (me, clock, patience), &mut moved);
        v.replays += d.offered;
        if let Some(slot) = d.first_lost.and_then(|pe| v.slot(pe)) {
            v.losses.record(slot, d.lost, self.lane);
        }
        self.trace_moved(moved);
    }

    /// Writes the trace records of operations replayed over TCP (with
    /// their peer's class).
    pub(super) fn trace_moved(&mut self, moved: Vec<TraceRecord>) {
        for mut rec in moved {
            rec.class = self
                .sel
                .pin()
                .class(rec.dst)
                .map_or(TraceRecord::NO_CLASS, |c| c.to_wire());
            self.trace_always(rec);
        }
    }

    /// Applies a verbs control record from `from` (a TCP link-state record
    /// with the verbs magic). Bad records are counted and ignored.
    pub(in crate::context) fn verbs_record(&mut self, from: u32, bytes: &[u8; 32]) {
        self.verbs_in();
        let (seed, me) = (self.verbs.as_ref().map_or(0, |v| v.seed), self.me);
        let Some(v) = self.verbs.as_mut() else { return };
        let rec = match Record::decode(bytes) {
            Ok(r) => r,
            Err(e) => {
                v.bad_records += 1;
                if v.bad_records == 1 {
                    self.warnings
                        .push(format!("PE {from} sent a bad verbs record: {e}"));
                }
                return;
            }
        };
        if from >= self.n_pes || from == me {
            v.bad_records += 1;
            return;
        }
        if matches!(
            rec,
            Record::SetQpns { .. } | Record::SetClosed { .. } | Record::SetLink { .. }
        ) {
            self.verbs_set_record(from, rec);
            return;
        }
        let wanted = v.peer(from).is_some_and(|p| p.wanted);
        if v.lazy {
            match rec {
                // Lazy peers: the sender's card, for a pairing it starts.
                Record::CardPiece { piece, bytes } => {
                    if wanted {
                        return;
                    }
                    let inc = v.cards_in.entry(from).or_default();
                    inc.card.put(piece, &bytes);
                    // QPNs that came first are applied now.
                    if inc.card.card().is_some()
                        && let Some(q) = inc.qpns.take()
                    {
                        self.verbs_record(from, &q);
                    }
                    return;
                }
                Record::Qpns { .. } if !wanted && v.fatal => {
                    // The sender waits for our QPNs: they will not come.
                    v.cards_in.remove(&from);
                    self.verbs_send(
                        from,
                        Record::Refused {
                            reason: Refusal::Device,
                        },
                    );
                    return;
                }
                Record::Qpns { .. } if !wanted => {
                    // The sender pairs with us at its first use of us:
                    // take it on with the card it sent, and answer with
                    // ours and our QPNs (below, once connected), or tell
                    // it why not (it would wait for our QPNs otherwise).
                    let inc = v.cards_in.entry(from).or_default();
                    let Some(card) = inc.card.card().copied() else {
                        // Its card's pieces may still come (another rail).
                        inc.qpns = Some(*bytes);
                        return;
                    };
                    v.cards_in.remove(&from);
                    if let Err(reason) = self.verbs_take_peer(from, &card) {
                        self.verbs_send(from, Record::Refused { reason });
                        return;
                    }
                }
                _ => {}
            }
        }
        let Some(v) = self.verbs.as_mut() else { return };
        let Some(slot) = v.slot(from) else { return };
        let p = &mut v.peers[slot];
        if !p.wanted {
            // The sender waits for our QPNs and RTS: tell it we will not
            // pair (its class here, its card refused, a connect that
            // failed), once per QPNs it sends.
            if matches!(rec, Record::Qpns { .. }) {
                let reason = p.refused.unwrap_or(if v.fatal {
                    Refusal::Device
                } else {
                    Refusal::NotWanted
                });
                self.verbs_send(from, Record::Refused { reason });
            }
            return;
        }
        match rec {
            Record::Qpns { n, qpns } => {
                if p.connected {
                    return;
                }
                let Some(pe_card) = p.card else { return };
                let card = pair_card(&pe_card, &qpns[..usize::from(n)], seed, from, me);
                let r = v
                    .drv
                    .set_peer_card(from, card)
                    .and_then(|()| v.drv.connect(from));
                match r {
                    Ok(()) => {
                        p.connected = true;
                        p.generation = 0;
                        // Lazy peers: the sender may not have our QPNs
                        // yet (it started the pairing); before our RTS.
                        if !p.qpns_sent {
                            self.verbs_send_qpns_to(from);
                        }
                        self.verbs_send(from, Record::Rts { generation: 0 });
                    }
                    Err(e) => {
                        p.wanted = false;
                        self.warnings.push(format!(
                            "verbs to PE {from} not connected ({e}): it stays on TCP"
                        ));
                        self.verbs_send(
                            from,
                            Record::Refused {
                                reason: Refusal::Driver,
                            },
                        );
                    }
                }
            }
            Record::Rts { generation } => {
                p.peer_rts = Some(generation);
                v.raise_due = true;
                if generation > 0 && generation == p.generation {
                    let _ = v.drv.peer_rebuilt(from, generation);
                }
                self.verbs_events();
            }
            Record::Failed { generation } => {
                // Only a generation beyond ours: an announcement of the
                // failure we already rebuilt from is old news.
                if generation > p.generation {
                    let _ = v.drv.peer_failed(from);
                    p.rebuild_to = Some(p.rebuild_to.map_or(generation, |g| g.max(generation)));
                    v.rebuild_due = true;
                }
                // The peer asks which of its puts landed: answer now when
                // the receipts are collected (also for a failure we already
                // rebuilt from: the question may come late), else when the
                // driver reports them.
                if let Some((g, r)) = v.drv.receipts(from) {
                    self.verbs_send_receipts(from, g, &r);
                } else if p.withheld == Some(generation) {
                    self.verbs_send(from, Record::Withheld { generation });
                }
                self.verbs_events();
            }
            // Set records went to `verbs_set_record` above.
            Record::CardPiece { .. }
            | Record::SetQpns { .. }
            | Record::SetClosed { .. }
            | Record::SetLink { .. } => {}
            Record::Refused { reason } => {
                // We asked (our QPNs) and the peer will not pair: stop
                // waiting for its QPNs and RTS, keep it on TCP, and say
                // why. A refusal of a link that is up is not believed
                // (it can only be a stray record).
                if p.bit {
                    v.bad_records += 1;
                    return;
                }
                p.wanted = false;
                p.refused = Some(reason);
                v.refused_by_peers += 1;
                tracing::warn!(
                    pe = me,
                    peer = from,
                    transport = "verbs",
                    "PE {from} refused to pair over verbs: {reason}"
                );
                self.warnings.push(format!(
                    "verbs to PE {from} refused by that PE ({reason}): it stays on TCP"
                ));
            }
            Record::Withheld { generation } => {
                // Only for the failure this PE holds for (a late answer to
                // an older one changes nothing).
                if p.hold && p.rebuild_to.unwrap_or(p.generation + 1) == generation {
                    self.verbs_abandon(from, "it cannot tell which landed");
                }
            }
            Record::Applied {
                generation,
                qp,
                of,
                seq,
            } => {
                if !p.hold {
                    return; // nothing waits for it (a repeat, or late)
                }
                if p.applied_gen != generation {
                    p.applied = [None; MAX_QPS];
                    p.applied_gen = generation;
                }
                p.applied[usize::from(qp - 1)] = Some(seq);
                let of = usize::from(of);
                if p.applied[..of].iter().any(Option::is_none) {
                    return;
                }
                let mut got = [0u64; MAX_QPS];
                for (g, a) in got.iter_mut().zip(&p.applied[..of]) {
                    *g = a.unwrap_or(0);
                }
                match v.drv.settle_receipts(from, generation, &got[..of]) {
                    Ok(_) => {
                        p.hold = false;
                        v.holding -= 1;
                        self.pe.verbs_holding.store(v.holding, Ordering::Release);
                        v.drain_due = true;
                    }
                    Err(e) => {
                        // Keep holding: the deadline reports the puts lost.
                        p.applied = [None; MAX_QPS];
                        v.bad_records += 1;
                        self.warnings.push(format!(
                            "PE {from} sent verbs receipts that do not fit: {e}"
                        ));
                    }
                }
                self.verbs_events();
            }
        }
    }

    /// TCP to `pe` came back up: send the verbs records it may have missed.
    pub(in crate::context) fn verbs_tcp_up(&mut self, pe: u32) {
        self.verbs_in();
        let Some(v) = self.verbs.as_mut() else { return };
        let Some(slot) = v.slot(pe) else { return };
        let p = &mut v.peers[slot];
        if !p.wanted {
            return;
        }
        let (connected, g, up, rebuild) = (p.connected, p.generation, p.local_up, p.rebuild_to);
        if !p.qpns_sent {
            self.verbs_send_qpns_to(pe);
        }
        if let Some(g) = rebuild {
            self.verbs_send(pe, Record::Failed { generation: g });
        } else if connected && (up || g > 0) {
            self.verbs_send(pe, Record::Rts { generation: g });
        }
    }

    /// Whether verbs still has work outstanding (`Ok(true)`: all complete),
    /// for `quiet`. A failed link reports not done until its replays were
    /// drained over TCP (the next progress step does it).
    ///
    /// This context's own sets' losses and failovers always (no entry
    /// lock); the PE's shared driver only with `shared` (checked out under
    /// the entry lock). The driver is the PE's: this waits for every
    /// context's operations on it. An operation lost in a failover is
    /// reported once to each context that had verbs operations in flight
    /// to its PE ([`LossBook`](super::LossBook)): a context with none on
    /// it since its last quiet is owed none, unless it found the loss
    /// itself with nobody else's in flight ([`Context::verbs_attention`]
    /// then makes its next quiet take it).
    pub(in crate::context) fn verbs_quiet_poll(&mut self, shared: bool) -> Result<bool> {
        // This context's own sets: their losses are its alone.
        let (lost, busy) = self.verbs_sets_quiet();
        if let Some((pe, ops)) = lost {
            return Err(Error::ReplayLost { pe, ops });
        }
        if !shared || !self.verbs_in() {
            return Ok(!busy);
        }
        let lane = self.lane;
        let Some(v) = self.verbs.as_mut() else {
            return Ok(true);
        };
        if busy {
            return Ok(false);
        }
        if let Some((slot, ops)) = v.losses.take(lane) {
            let pe = v.peers.get(slot).map_or(u32::MAX, |p| p.pe);
            return Err(Error::ReplayLost { pe, ops });
        }
        if v.fatal && v.holding > 0 {
            // Puts in doubt wait for their receipts (or the deadline),
            // then are replayed over TCP: not complete yet.
            return Ok(false);
        }
        // The driver reports operations it lost (no room to replay them)
        // or whose outcome is unknown before anything else, also after the
        // device died: each surfaces once, here. `PeerDown` only means
        // replays wait to be drained (the next step does it).
        match v.drv.quiet_poll() {
            Ok(done) => {
                let done = done && !v.drain_due;
                if done && v.holding == 0 {
                    // Every context's verbs operation is complete.
                    v.losses.settled();
                }
                Ok(done)
            }
            Err(VerbsError::ReplayLost { peer, ops }) => {
                // Reported by the driver once, to whichever context polls:
                // kept for each context it concerns.
                if let Some(slot) = v.slot(peer) {
                    v.losses.record(slot, ops, lane);
                }
                match v.losses.take(lane) {
                    Some((slot, ops)) => Err(Error::ReplayLost {
                        pe: v.peers.get(slot).map_or(u32::MAX, |p| p.pe),
                        ops,
                    }),
                    None => Ok(false),
                }
            }
            Err(VerbsError::DeviceFatal) if v.fatal && !v.drain_due => Ok(true),
            Err(VerbsError::PeerDown { .. } | VerbsError::DeviceFatal) => {
                v.drain_due = true;
                Ok(false)
            }
            Err(e) => Err(Error::Verbs(e)),
        }
    }
}
