//! Attaching a verbs driver to a context at init: creating it (or why
//! not), the peers' cards, the QP numbers sent to each peer, and the first
//! connect (bounded by the bootstrap timeout).

use std::time::Duration;

use switchyard_bootstrap::RankInfo;
use switchyard_core::class::PathClass;
use switchyard_verbs::{VerbsDriver, card::MAX_QPS};

use super::{
    MIN_BACKOFF_NS, PeerV, Record, Refusal, Verbs, nic_atomics, parse_pe_card, verbs_config,
};
use crate::{
    config::Config,
    context::{Context, progress},
};

/// The verbs driver over the own heap, or why there is none; `seed` seeds
/// the initial PSNs (the same on every PE of the job). With `lazy` (lazy
/// cards) the driver creates no QPs at creation: a peer's are created at
/// its first use, within a budget of `verbs_lazy_peers` peers
/// ([`driver_config`]; `first_use.rs`, [`Context::verbs_first_use`]).
pub(in crate::context) fn create_driver(
    cfg: &Config,
    info: &RankInfo,
    seed: u64,
    (has_tcp, lazy): (bool, bool),
    heap: *mut u8,
    heap_len: u64,
) -> (Option<VerbsDriver>, Option<String>) {
    if info.size < 2 {
        return (
            None,
            Some("a job of one PE has no peer to reach over verbs".into()),
        );
    }
    if !cfg.transports.verbs {
        return (None, Some("verbs is not in SWITCHYARD_TRANSPORTS".into()));
    }
    if let Some(why) = switchyard_verbs::probe::probe().unavailable {
        return (None, Some(why.to_string()));
    }
    if !has_tcp {
        return (
            None,
            Some(
                "verbs needs TCP between the PEs (pair addresses and rebuilds travel over it)"
                    .into(),
            ),
        );
    }
    #[allow(unsafe_code)]
    // SAFETY: the heap is the own segment's mapping, valid for `heap_len`
    // bytes and page-aligned; the segment moves into the context with the
    // driver and outlives it (the context's `verbs` field is declared, so
    // dropped, before `shm`).
    let d = unsafe {
        VerbsDriver::new(
            driver_config(cfg, lazy),
            info.rank,
            info.size,
            seed,
            heap,
            heap_len,
        )
    };
    match d {
        Ok(d) => (Some(d), None),
        Err(e) => {
            tracing::warn!(pe = info.rank, transport = "verbs", "verbs not used: {e}");
            (
                None,
                Some(format!("the verbs driver could not be created: {e}")),
            )
        }
    }
}

/// The driver's settings from the configuration ([`verbs_config`]); with
/// `lazy` (lazy cards), lazy peers with a budget of `verbs_lazy_peers`.
pub(in crate::context) fn driver_config(
    cfg: &Config,
    lazy: bool,
) -> switchyard_verbs::params::VerbsConfig {
    switchyard_verbs::params::VerbsConfig {
        lazy_peers: lazy.then_some(cfg.verbs_lazy_peers),
        ..verbs_config(cfg)
    }
}

impl Context {
    /// Takes over a verbs driver created over this context's heap: decodes
    /// the peers' bootstrap `verbs` fields (index = PE; a bad one leaves
    /// that peer on TCP with a warning), chooses the NEAR peers with a card,
    /// and sends each our QP numbers. `seed` is the PSN seed the driver was
    /// created with (derived from the job secret). Without TCP the driver is dropped (verbs
    /// needs the TCP control records) and the reason kept for
    /// [`Context::verbs_status`].
    pub(in crate::context) fn attach_verbs(
        &mut self,
        drv: VerbsDriver,
        seed: u64,
        cards: &[Option<Vec<u8>>],
    ) {
        if self.tcp.is_none() {
            self.verbs_why = Some(
                "verbs needs TCP between the PEs (pair addresses and rebuilds travel over it): NEAR uses TCP"
                    .into(),
            );
            return;
        }
        // One entry per peer the driver has QPs toward, at its slot: every
        // other PE (eager), none yet (lazy: added at first use, up to the
        // driver's budget).
        let (added, cap) = drv.peer_count();
        let mut peers = Vec::with_capacity(cap as usize);
        peers.resize(added as usize, PeerV::default());
        for (pe, bytes) in cards.iter().enumerate() {
            let pe = pe as u32;
            let Some(slot) = drv.peer_slot(pe).filter(|&s| s < peers.len()) else {
                continue;
            };
            let p = &mut peers[slot];
            p.pe = pe;
            let Some(bytes) = bytes else {
                continue;
            };
            match parse_pe_card(bytes) {
                Ok(c) => p.card = Some(c),
                Err(e) => {
                    self.warnings.push(format!(
                        "PE {pe}'s verbs card is refused ({e}): it stays on TCP"
                    ));
                    continue;
                }
            }
            p.wanted = match self.class(pe) {
                Some(PathClass::Near) => true,
                Some(PathClass::Routed) => self.verbs_routed,
                _ => false,
            };
            p.backoff = MIN_BACKOFF_NS;
        }
        // The atomicity domain: NIC atomics only where they are atomic with
        // the CPU's (or the configuration forces them); else the policy's
        // atomic band leaves RDMA out and atomics go to the target's CPU.
        let (mut nic, mut why) = nic_atomics(self.verbs_atomics, drv.params().atomic_cap);
        if nic
            && peers
                .iter()
                .any(|p| p.wanted && p.card.is_some_and(|c| !c.atomics))
        {
            // The driver refuses atomics toward such a peer (`NoAtomics`).
            (nic, why) = (
                false,
                "a peer's device does no RDMA atomics: atomics go over TCP (the target's CPU)",
            );
        }
        let mut policy = *self.sel.policy().config();
        policy.rdma_atomics = nic;
        if self
            .sel
            .set_policy(switchyard_core::route::Policy::new(policy))
            .is_ok()
        {
            self.cpu_atomics_rule = !nic;
        }
        self.verbs_atomics_why = why;
        let n = cap as usize;
        self.verbs_pe = true;
        self.verbs_max_get = switchyard_core::transport::Transport::max_get_len(&drv);
        // What later contexts of the PE copy (`Pe::context`).
        *crate::context::pe::lock(&self.pe.verbs_shape) = Some(crate::context::pe::VerbsShape {
            policy: *self.sel.policy().config(),
            cpu_atomics_rule: self.cpu_atomics_rule,
            why,
            atomics: self.verbs_atomics,
            routed: self.verbs_routed,
            context_sets: self.verbs_sets_on,
            max_get: self.verbs_max_get,
        });
        self.verbs = Some(Box::new(Verbs {
            lazy: drv.lazy(),
            cards_in: std::collections::BTreeMap::new(),
            lazy_refused: 0,
            refused_by_peers: 0,
            drv,
            seed,
            peers,
            fatal: false,
            losses: super::LossBook::new(n),
            sets: super::sets::PeSets::new(super::sets::SETS_PER_PE),
            drain_due: false,
            rebuild_due: false,
            raise_due: false,
            published: 0,
            holding: 0,
            failovers: 0,
            replays: 0,
            bad_records: 0,
            #[cfg(test)]
            drop_applied: 0,
            #[cfg(test)]
            drop_set_rts: 0,
            #[cfg(test)]
            reorder: false,
        }));
        self.verbs_why = None;
        // Into the PE's cell (under the TCP driver's entry lock), shared by
        // every context of the PE from here on.
        self.pe
            .verbs
            .store(true, switchyard_core::sync::atomic::Ordering::Release);
        self.verbs_back();
        // A peer's operations may now be split over verbs and TCP.
        self.order.enable(self.n_pes);
        // The progress thread keeps the receive side going (receipts,
        // receives re-posted) while the application is outside.
        if let (Some(t), Some(r)) = (
            self.tcp.as_ref(),
            self.with_verbs(|v| v.drv.recv_side()).flatten(),
        ) {
            t.set_verbs_recv(r);
        }
        self.call().verbs_send_qpns();
    }

    /// Sends our QP numbers to every wanted peer that has not had them.
    pub(super) fn verbs_send_qpns(&mut self) {
        self.verbs_in();
        let pes: Vec<u32> = self
            .verbs
            .as_ref()
            .map_or_else(Vec::new, |v| v.peers.iter().map(|p| p.pe).collect());
        for pe in pes {
            self.verbs_send_qpns_to(pe);
        }
    }

    /// Sends our QP numbers to `pe` if it is wanted and has not had them;
    /// with lazy peers, our PE card first ([`Record::CardPiece`]: `pe` may
    /// not have it).
    pub(super) fn verbs_send_qpns_to(&mut self, pe: u32) {
        let (Some(v), Some(t)) = (self.verbs.as_mut(), self.tcp.as_mut()) else {
            return;
        };
        let t = t.get();
        let Some(slot) = v.slot(pe) else {
            return;
        };
        let p = &v.peers[slot];
        if !p.wanted || p.qpns_sent {
            return;
        }
        let Ok(card) = v.drv.card_for(pe) else {
            return;
        };
        let mut recs = Vec::with_capacity(3);
        if v.lazy {
            let pieces = v
                .drv
                .pe_card()
                .to_vec()
                .ok()
                .and_then(|b| Record::card_pieces(&b));
            let Some(pieces) = pieces else { return };
            recs.extend(pieces);
        }
        let mut qpns = [0u32; MAX_QPS];
        for (q, a) in qpns.iter_mut().zip(card.qps()) {
            *q = a.qpn;
        }
        recs.push(Record::Qpns {
            n: card.n_qps,
            qpns,
        });
        #[cfg(test)]
        if v.reorder {
            // Tests: as if the records took rails that reorder them.
            recs.reverse();
        }
        for r in recs {
            if t.send_link_state(pe, r.encode()).is_err() {
                return; // sent again when TCP to `pe` is up
            }
        }
        v.peers[slot].qpns_sent = true;
    }

    /// Whether this PE routes to `pe` over verbs by its class (NEAR; ROUTED
    /// unless `verbs_routed = off`).
    pub(super) fn verbs_class_wants(&mut self, pe: u32) -> bool {
        match self.class(pe) {
            Some(PathClass::Near) => true,
            Some(PathClass::Routed) => self.verbs_routed,
            _ => false,
        }
    }

    /// Whether `pe`'s class is not in the topology yet: an off-node peer
    /// not located here (node localities, `first_use.rs`), which pairs
    /// with this PE before this PE's first use of it. The responder then
    /// takes it on as its initiator found it (the locality rule is the
    /// same both ways: the initiator's class of this PE wanted verbs); its
    /// own first use of it locates it as usual. Only for a class
    /// `Unreachable`: then it may wait on the PE's card mutex (not held
    /// with the TCP driver taken, so no deadlock), on this control path.
    fn verbs_locates_later(&mut self, pe: u32) -> bool {
        self.class(pe) == Some(PathClass::Unreachable) && self.locates_later(pe)
    }

    /// Lazy peers: takes `pe` on as a verbs peer with PE card `bytes` (its
    /// card fetched at first use, or received in [`Record::CardPiece`]s):
    /// checks the card, the class (one not located here yet as its
    /// initiator found it: [`Context::verbs_locates_later`]), adds the
    /// peer's QPs to the driver. `Ok` when `pe` is now wanted; else why not
    /// ([`Refusal`], which the caller may send `pe`), with a warning where
    /// it is this PE's news (a bad card, the budget spent: `pe` stays on
    /// TCP). A peer that refused us before ([`Record::Refused`]) is not
    /// asked again. Control path.
    pub(super) fn verbs_take_peer(&mut self, pe: u32, bytes: &[u8]) -> Result<(), Refusal> {
        if !self.verbs_class_wants(pe) && !self.verbs_locates_later(pe) {
            return Err(Refusal::NotWanted);
        }
        let nic = !self.cpu_atomics_rule;
        let Some(v) = self.verbs.as_mut() else {
            return Err(Refusal::Device);
        };
        if pe == self.me || pe >= self.n_pes {
            return Err(Refusal::NotWanted);
        }
        match v.peer(pe) {
            Some(p) if p.wanted => return Ok(()),
            Some(PeerV {
                refused: Some(why), ..
            }) => return Err(*why),
            _ => {}
        }
        let card = match parse_pe_card(bytes) {
            Ok(c) => c,
            Err(e) => {
                self.warnings.push(format!(
                    "PE {pe}'s verbs card is refused ({e}): it stays on TCP"
                ));
                return Err(Refusal::BadCard);
            }
        };
        if nic && !card.atomics {
            // The policy sends atomics to verbs peers over the NIC, which
            // this peer's device cannot do.
            self.warnings.push(format!(
                "PE {pe}'s device does no RDMA atomics while this PE's atomics use the NIC: it stays on TCP"
            ));
            return Err(Refusal::NoAtomics);
        }
        if let Err(e) = v.drv.add_peer(pe) {
            v.lazy_refused += 1;
            tracing::warn!(pe = self.me, peer = pe, transport = "verbs", "{e}");
            let (hint, why) = if matches!(e, switchyard_verbs::VerbsError::NoPeerLeft { .. }) {
                (" (the budget is verbs_lazy_peers)", Refusal::Budget)
            } else {
                ("", Refusal::Driver)
            };
            self.warnings.push(format!(
                "verbs to PE {pe} not paired ({e}): it stays on TCP{hint}"
            ));
            return Err(why);
        }
        // Its entry at its driver slot (slots a caller added directly, as
        // tests do, get an entry too).
        let Some(slot) = v.drv.peer_slot(pe) else {
            return Err(Refusal::Driver);
        };
        let cap = v.peers.capacity();
        while v.peers.len() <= slot && v.peers.len() < cap {
            v.peers.push(PeerV::default());
        }
        let Some(p) = v.peers.get_mut(slot) else {
            return Err(Refusal::Driver);
        };
        p.pe = pe;
        p.card = Some(card);
        p.wanted = true;
        p.backoff = MIN_BACKOFF_NS;
        Ok(())
    }

    /// Lazy peers, at the first use of `pe` (after its card was fetched
    /// and TCP to it started: `first_use.rs`): when its card has a verbs
    /// PE card and its class wants verbs, adds its QPs and sends it our
    /// card and QP numbers (now, or when TCP to it is up). The link comes
    /// up as at init (QPNs both ways, [`Record::Rts`]), and its health bit
    /// at the end of a quiet; until then its traffic goes over TCP.
    pub(in crate::context) fn verbs_first_use(&mut self, pe: u32, card: Option<&[u8]>) {
        if !self.verbs_in() {
            return;
        }
        if !self.verbs.as_ref().is_some_and(|v| v.lazy && !v.fatal) {
            return;
        }
        let Some(bytes) = card else { return };
        if self.verbs_take_peer(pe, bytes).is_ok() {
            self.verbs_send_qpns_to(pe);
        }
    }

    /// Sends one control record to `pe` (best effort: a lost one is sent
    /// again when TCP to `pe` comes back up).
    pub(super) fn verbs_send(&mut self, pe: u32, rec: Record) {
        #[cfg(test)]
        if let (Some(v), Record::Applied { .. }) = (self.verbs.as_mut(), rec)
            && v.drop_applied > 0
        {
            v.drop_applied -= 1;
            return;
        }
        #[cfg(test)]
        if let (
            Some(v),
            Record::SetLink {
                link: super::SetLink::Rts { .. },
                ..
            },
        ) = (self.verbs.as_mut(), rec)
            && v.drop_set_rts > 0
        {
            v.drop_set_rts -= 1;
            return;
        }
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            let _ = t.send_link_state(pe, rec.encode());
        }
    }

    /// Waits (progressing, at most `timeout`) until every wanted peer's
    /// link is Up at both ends, then sets their health bits (at init
    /// nothing sent over TCP can be overtaken). Returns the peers up.
    pub(in crate::context) fn verbs_connect(&mut self, timeout: Duration) -> u32 {
        // Given back when done, like any call.
        let mut call = self.call();
        let start = std::time::Instant::now();
        loop {
            call.poll_once();
            call.verbs_in();
            let done = call.verbs.as_ref().is_none_or(|v| {
                v.fatal
                    || v.peers
                        .iter()
                        .all(|p| !p.wanted || (p.local_up && p.peer_rts == Some(p.generation)))
            });
            if done || start.elapsed() > timeout {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        call.verbs_raise(true);
        call.verbs_in();
        let up = call.verbs.as_deref().map_or(0, Verbs::peers_up);
        let missing: Vec<u32> = call.verbs.as_ref().map_or_else(Vec::new, |v| {
            v.peers
                .iter()
                .filter(|p| p.wanted && !p.bit)
                .map(|p| p.pe)
                .collect()
        });
        if !missing.is_empty() {
            call.warnings.push(format!(
                "verbs links to PEs {missing:?} did not come up within {timeout:?}: they use TCP until they do"
            ));
        }
        up
    }
}
