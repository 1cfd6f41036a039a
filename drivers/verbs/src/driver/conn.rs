//! Connection state: the cards the peers exchange, the QP state machine
//! (connect takes every QP toward a peer RESET→INIT→RTR→RTS with the cards'
//! PSNs; a rebuild takes the same QPs through RESET first, with the PSNs of
//! a new generation), and each peer's link state: Down until connected, Up,
//! Error after a failure ([`super::recovery`]) until rebuilt on both sides.

use switchyard_core::transport::LinkState;

use super::{Peer, VerbsDriver, Wqe};
use crate::{
    Event, Result, VerbsError,
    card::{MAX_QPS, QpAddr, VerbsCard},
    qp_plan::{LocalQp, QpState, RemoteQp, plan_connect, plan_rebuild, psn_for},
    sys,
};

impl VerbsDriver {
    /// This PE's *PE card*: the port address and the heap (no QPs), for
    /// the bootstrap card's `verbs` field.
    pub fn pe_card(&self) -> VerbsCard {
        VerbsCard {
            link_layer: self.link_layer,
            mtu: self.port_mtu,
            lid: self.lid,
            gid: self.gid,
            atomics: self.p.atomics,
            rkey: self.heap_mr.as_deref().map_or(0, sys::Mr::rkey),
            heap_base: self.heap as u64,
            heap_len: self.heap_len,
            qps: [QpAddr::default(); MAX_QPS],
            n_qps: 0,
        }
    }

    /// This PE's *pair card* toward `peer`: QPNs and initial PSNs of the QPs this
    /// driver created for that peer, plus the port address and the heap.
    ///
    /// # Errors
    ///
    /// [`VerbsError::InvalidPe`] for this PE or one outside the job.
    pub fn card_for(&self, peer: u32) -> Result<VerbsCard> {
        let pe = self.peer_ref(peer)?;
        let mut card = self.pe_card();
        for (i, q) in pe.qps.iter().enumerate() {
            card.qps[i] = QpAddr {
                qpn: q.qp.qpn(),
                psn: psn_for(self.seed, self.me, peer, i as u8, 0),
            };
        }
        card.n_qps = pe.qps.len() as u8;
        Ok(card)
    }

    /// Records `peer`'s card toward this PE (before
    /// [`Transport::connect`](switchyard_core::transport::Transport::connect)).
    ///
    /// # Errors
    ///
    /// [`VerbsError::Card`] when it does not match this driver (QP count,
    /// link layer) or is invalid.
    pub fn set_peer_card(&mut self, peer: u32, card: VerbsCard) -> Result<()> {
        let ll = self.link_layer;
        let pe = self.peer_mut(peer)?;
        card.check()
            .map_err(|source| VerbsError::Card { peer, source })?;
        let bad = |field, value: u64, expected| VerbsError::Card {
            peer,
            source: crate::card::CardError::Field {
                field,
                value,
                expected,
            },
        };
        if usize::from(card.n_qps) != pe.qps.len() {
            return Err(bad(
                "qp count",
                card.n_qps.into(),
                "the same number of QPs as this PE (data_qps + 1)",
            ));
        }
        if card.link_layer != ll {
            return Err(bad(
                "link layer",
                card.link_layer.to_u8().into(),
                "the same link layer as this PE's port",
            ));
        }
        pe.remote = Some(card);
        Ok(())
    }

    /// Decodes and records a peer's card bytes.
    ///
    /// # Errors
    ///
    /// As [`VerbsDriver::set_peer_card`], and [`VerbsError::Card`] for bad bytes.
    pub fn set_peer_card_bytes(&mut self, peer: u32, bytes: &[u8]) -> Result<()> {
        let card = VerbsCard::decode(bytes).map_err(|source| VerbsError::Card { peer, source })?;
        self.set_peer_card(peer, card)
    }

    fn local_qp(&self, psn: u32) -> LocalQp {
        LocalQp {
            port: self.port,
            link_layer: self.link_layer,
            gid_index: self.gid_index,
            psn,
        }
    }

    /// Brings every QP toward `peer` to RTS for `generation` (0: the first
    /// connect, with the cards' PSNs; later: a rebuild, RESET first).
    fn bring_up(&mut self, peer: u32, generation: u32, rebuild: bool) -> Result<()> {
        let (me, seed, p) = (self.me, self.seed, self.p);
        // Every QP a peer may have, in an array on the stack (no allocation).
        let local: [LocalQp; MAX_QPS] =
            std::array::from_fn(|qi| self.local_qp(psn_for(seed, me, peer, qi as u8, generation)));
        let pe = self.peer_mut(peer)?;
        let card = pe.remote.ok_or(VerbsError::PeerUnknown { peer })?;
        for (qi, q) in pe.qps.iter_mut().enumerate() {
            let addr = card.qps()[qi];
            let remote = RemoteQp {
                qpn: addr.qpn,
                psn: if generation == 0 {
                    addr.psn
                } else {
                    psn_for(seed, peer, me, qi as u8, generation)
                },
                lid: card.lid,
                gid: card.gid,
                mtu: card.mtu,
            };
            let plan = if rebuild {
                plan_rebuild(q.state, &local[qi], &remote, &p)
            } else {
                plan_connect(q.state, &local[qi], &remote, &p)
            }
            .map_err(|source| VerbsError::Plan {
                peer,
                qp: qi as u8,
                source,
            })?;
            for step in plan.steps() {
                q.qp.modify(step).map_err(|source| VerbsError::Modify {
                    peer,
                    qp: qi as u8,
                    state: step.target(),
                    source,
                })?;
                q.state = step.target();
            }
        }
        pe.generation = generation;
        Ok(())
    }

    /// Rebuilds the QPs toward `peer` for `generation` (agreed with the
    /// peer after [`Event::RebuildNeeded`]): RESET→INIT→RTR→RTS on the same
    /// QPs with the generation's PSNs. The peer stays Down until
    /// [`VerbsDriver::peer_rebuilt`].
    ///
    /// # Errors
    ///
    /// [`VerbsError::Modify`] or [`VerbsError::Plan`] when a transition
    /// fails (the peer stays in Error); [`VerbsError::PeerDown`] while
    /// replays are still waiting to be drained, the peer's receipts are
    /// not settled or abandoned, or this side still collects its receipts
    /// of the peer's puts (at most
    /// [`VerbsConfig::collect_timeout_ms`](crate::params::VerbsConfig::collect_timeout_ms)
    /// of `progress` time after the failure).
    pub fn rebuild(&mut self, peer: u32, generation: u32) -> Result<()> {
        self.peer_ref(peer)?;
        // Events of the old QPs queued until now are read while the link
        // is still in Error: a late QP-fatal one then changes nothing
        // (after the rebuild it would fail the new link), a late last-WQE
        // one is ignored once the QPs are back to `Wqe::Idle`.
        self.async_events();
        self.collect_receipts();
        let pe = self.peer_mut(peer)?;
        if pe.n_replays > 0 || pe.await_receipts || pe.collect {
            // Replays not drained yet, or receipts not settled: a reset
            // now would lose what tells which puts landed.
            return Err(VerbsError::PeerDown { peer });
        }
        if pe.state == LinkState::Up || (pe.state == LinkState::Down && pe.generation == 0) {
            // Resetting a working (or never connected) link would drop its
            // outstanding work unsettled.
            return Err(VerbsError::Plan {
                peer,
                qp: 0,
                source: crate::qp_plan::PlanError::Attr {
                    field: "link state",
                    value: 0,
                    expected: "a failed link (Error), or one rebuilt and waiting for its peer",
                },
            });
        }
        if generation <= pe.generation {
            return Err(VerbsError::Plan {
                peer,
                qp: 0,
                source: crate::qp_plan::PlanError::Attr {
                    field: "generation",
                    value: generation.into(),
                    expected: "a generation above the current one",
                },
            });
        }
        for q in pe.qps.iter_mut() {
            q.stage.reset();
            // Receipts count from 1 again in the new generation, at both
            // ends (the peer's were collected before this rebuild).
            q.rcpt_next = 1;
            q.wqe = Wqe::Idle;
        }
        self.bring_up(peer, generation, true)?;
        // After the reset (nothing of the old QPs completes any more) and
        // before the peer hears of the rebuild (nothing of the new ones
        // yet): old completions still queued (a collection given up, a
        // provider whose reset keeps them) are taken before the receipts
        // count from 0 again.
        if let Some(r) = &self.recv {
            r.reset(self.seen_range(peer));
        }
        self.stats.rebuilds += 1;
        let pe = self.peer_mut(peer)?;
        pe.state = LinkState::Down;
        self.push_event(Event::Rebuilt { peer, generation });
        Ok(())
    }

    /// The peer reported its QPs at RTS for `generation`: the link is Up.
    ///
    /// # Errors
    ///
    /// [`VerbsError::PeerDown`] when this side is not rebuilt to that
    /// generation.
    pub fn peer_rebuilt(&mut self, peer: u32, generation: u32) -> Result<()> {
        let pe = self.peer_mut(peer)?;
        if pe.generation != generation || pe.qps.iter().any(|q| q.state != QpState::Rts) {
            return Err(VerbsError::PeerDown { peer });
        }
        pe.state = LinkState::Up;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Up,
        });
        Ok(())
    }

    /// The peer reports (over another transport) that its side of the link
    /// failed: this side is taken down the same way as after a local
    /// failure (QPs reset, outstanding work settled once, [`Event::Link`]
    /// Error and [`Event::RebuildNeeded`]), so both sides rebuild to the
    /// same generation. A QP whose peer was reset would otherwise only find
    /// out at its next post, after the transport retries ran out. No-op
    /// when the link already failed or was never connected.
    ///
    /// As after every failure, this side then collects its receipts of the
    /// peer's puts ([`Event::Receipts`]) for the peer's
    /// [`VerbsDriver::settle_receipts`].
    ///
    /// # Errors
    ///
    /// [`VerbsError::InvalidPe`] for this PE or one outside the job.
    pub fn peer_failed(&mut self, peer: u32) -> Result<()> {
        self.peer_ref(peer)?;
        self.fail_peer(peer);
        Ok(())
    }

    /// `peer` can take operations now: the driver open and alive, the
    /// peer's card known and its link Up.
    pub(super) fn check_up(&self, peer: u32) -> Result<&Peer> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        if self.fatal {
            return Err(VerbsError::DeviceFatal);
        }
        let pe = self.peer_ref(peer)?;
        if pe.remote.is_none() {
            return Err(VerbsError::PeerUnknown { peer });
        }
        if pe.state != LinkState::Up {
            return Err(VerbsError::PeerDown { peer });
        }
        Ok(pe)
    }

    /// [`Transport::connect`](switchyard_core::transport::Transport::connect):
    /// takes every QP toward `peer` to RTS with the cards' PSNs; the link is
    /// Up. Only the first time: after a failure the link comes back through
    /// [`VerbsDriver::rebuild`] and [`VerbsDriver::peer_rebuilt`].
    pub(super) fn connect_peer(&mut self, peer: u32) -> Result<()> {
        if self.closed {
            return Err(VerbsError::Closed { peer: Some(peer) });
        }
        if peer == self.me {
            return Ok(());
        }
        let pe = self.peer_ref(peer)?;
        if pe.state == LinkState::Up {
            return Ok(());
        }
        if pe.state == LinkState::Error || pe.generation > 0 {
            // After a failure the link comes back through rebuild and
            // peer_rebuilt, not connect.
            return Err(VerbsError::PeerDown { peer });
        }
        let generation = pe.generation;
        self.bring_up(peer, generation, false)?;
        self.peer_mut(peer)?.state = LinkState::Up;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Up,
        });
        Ok(())
    }
}
