//! Per-context QP sets, the shim's half: a context opens a QP set of its
//! own toward a peer ([`VerbsDriver::open_set`]), the peer opens the
//! matching set, the two connect, the context's verbs operations to that
//! peer are routed over it (`verbs_context_sets = on`), and the set is
//! closed at both ends when the context drops. A set's failure (its
//! receipts handshake, replays over TCP, rebuild) is not handled here yet
//! (docs/ARCHITECTURE.md, "Per-context QP sets").
//!
//! The exchange, over the TCP control records ([`Record::SetQpns`],
//! [`Record::SetClosed`]):
//!
//! 1. The opener (context `c` of PE A, with A's verbs link to B up) opens
//!    a set toward B within the PE's [`SetBudget`] (spent: the context
//!    keeps the shared driver) with the seed [`set_seed`]`(job seed, A,
//!    B, id)`, and sends its QPNs with the set's [`SetId`] (`c`'s lane
//!    index, a per-PE number).
//! 2. B, in any context's step, collects the pieces, opens the matching
//!    set with the same seed (its budget spent, B's link to A not up, or
//!    the connect failing: it answers [`Record::SetClosed`]), connects it
//!    with A's QPNs (the PSNs both derive from the seed) and answers with
//!    its QPNs once its QPs are at RTS. B's sets are the PE's, progressed
//!    at every `poll_once` of any of its contexts.
//! 3. A's context, at its next verbs step, connects its set with B's QPNs:
//!    both ends are at RTS. A refusal closes A's set (its unit goes back
//!    to the budget) and the context keeps the shared driver.
//! 4. When the context drops, it tells B ([`Record::SetClosed`]), which
//!    closes its matching set; its own set closes with it.
//!
//! Routing (`verbs_context_sets = on`; [`Context::verbs_set_route`], called
//! by route selection for every operation routed to verbs):
//!
//! * The context's first verbs operation to B opens the set (step 1); the
//!   operation, and every one until the switch, goes on the shared driver.
//!   An opening refused here (the budget spent) or by B, or not answered in
//!   time, leaves the context on the shared driver toward B for good (no
//!   opening again; `Stats::verbs_sets_refused`); so does a set B closed.
//! * The switch: once the set is up at both ends and the context's verbs
//!   writes to B are known complete (its order bit, `context/order.rs`,
//!   clear: after its next `quiet`, or an ordering wait), so that nothing it
//!   sent over the shared driver can be overtaken. From then on its puts,
//!   gets and atomics to B are posted on the set (`Stats::verbs_set_ops`)
//!   without the entry lock: one scan of the context's sets, no
//!   allocation; a get or an atomic is polled on the driver that started
//!   it. The set's backlog sets no load bit (those are the PE's).
//! * `quiet` and the ordering waits poll the sets posted on since their
//!   last complete quiet (their completions, bounded by the op timeout as
//!   the shared driver's), `fence` fences them, and the call's end rings
//!   their batched doorbells: in `order.rs` the set is this context's
//!   verbs (bit `V`), so a fence orders its writes against TCP's both ways.
//!   A context that drops completes what it posted on its sets first
//!   (bounded by the op timeout), then closes them.
//! * A set that is not usable takes nothing: a post it refuses because its
//!   link is not up (nothing of it sent) marks it so and goes on the shared
//!   driver; the failure code marks it with [`Context::verbs_set_unusable`]
//!   while it settles, and [`Context::verbs_set_usable`] lets it switch
//!   back (under the same condition). Operations in doubt on a failed set
//!   are the failure handshake's to settle: until it exists, a `quiet` with
//!   replays waiting on a set times out.

use std::collections::BTreeMap;

use switchyard_core::{
    topology::LinkState,
    transport::{Instant as CoreInstant, Transport},
};
use switchyard_verbs::{SetBudget, VerbsDriver, VerbsError, card::MAX_QPS};

use super::{Record, SetId, SetQpnPieces, pair_card};
use crate::context::Context;

/// QP sets a PE may have open at once (its own contexts' and the ones it
/// answers for its peers'), by default.
pub(super) const SETS_PER_PE: u32 = 64;

/// The PSN seed of set `id` opened by `opener` toward `answerer`, from the
/// job's seed: both ends derive it.
pub fn set_seed(seed: u64, opener: u32, answerer: u32, id: SetId) -> u64 {
    let mut x = seed
        ^ (u64::from(opener) << 32 | u64::from(answerer)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (u64::from(id.context) << 8 | u64::from(id.set)).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    // splitmix64's finaliser: nearby ids give unrelated seeds.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Why a context could not open a QP set toward a peer (it keeps the
/// PE's shared driver).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetError {
    /// The PE has no verbs driver.
    #[error("the PE has no verbs driver")]
    NoVerbs,
    /// The verbs link to the peer is not up at both ends.
    #[error("the verbs link to PE {pe} is not up")]
    NotUp {
        /// The peer.
        pe: u32,
    },
    /// The driver refused ([`VerbsError::NoSetLeft`]: the budget spent).
    #[error(transparent)]
    Driver(#[from] VerbsError),
}

/// An answer to one of this PE's contexts' sets, as far as it came.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The peer's QPNs, in pieces.
    Pieces(SetQpnPieces),
    /// Connected at both ends.
    Up,
    /// The peer refused or closed its end.
    Closed,
}

/// The PE's side of the QP sets, in its shared verbs state.
pub(super) struct PeSets {
    /// The PE's budget (every set of the PE counts here).
    pub(super) budget: SetBudget,
    /// The next set number (wraps; with the opener's lane it names a set).
    next: u8,
    /// Sets of peers' contexts toward this PE: their QPNs in pieces, then
    /// the matching set, by (peer, id).
    answering: BTreeMap<(u32, SetId), Answering>,
    /// Answers to this PE's contexts' sets, by (peer, id), while the set
    /// lives.
    answers: BTreeMap<(u32, SetId), Answer>,
    /// Openings refused here (budget, link, connect).
    pub(super) refused_here: u64,
    /// Openings answered here (sets opened for peers).
    pub(super) answered: u64,
}

enum Answering {
    Pieces(SetQpnPieces),
    Open(Box<VerbsDriver>),
}

impl PeSets {
    pub(super) fn new(max: u32) -> PeSets {
        PeSets {
            budget: SetBudget::new(max),
            next: 0,
            answering: BTreeMap::new(),
            answers: BTreeMap::new(),
            refused_here: 0,
            answered: 0,
        }
    }

    /// Sets this PE answers for its peers' contexts (open now).
    #[cfg(test)]
    pub(super) fn answering(&self) -> usize {
        self.answering
            .values()
            .filter(|a| matches!(a, Answering::Open(_)))
            .count()
    }

    /// One progress step of every set this PE answers for.
    fn progress(&mut self, now: CoreInstant) {
        for a in self.answering.values_mut() {
            if let Answering::Open(d) = a {
                d.progress(now);
                // Nothing is posted on a set yet: its events (its link
                // state) change nothing here.
                while d.poll_event().is_some() {}
            }
        }
    }
}

/// One set of a context's own.
struct Own {
    peer: u32,
    id: SetId,
    drv: VerbsDriver,
    up: bool,
    /// Closed if the peer has not answered by then (ns, context clock):
    /// a peer that ignores set records (an older build) or lost them.
    deadline: u64,
    /// Whether the context's verbs operations to `peer` go here.
    route: SetRoute,
    /// Something was posted on it since its last complete quiet.
    posted: bool,
}

/// A context's own QP sets (one per peer at most).
#[derive(Default)]
pub(in crate::context) struct Sets {
    own: Vec<Own>,
    /// Peers whose set was refused or closed (`verbs_context_sets`): the
    /// context stays on the shared driver toward them for good, no
    /// opening again (no retry storm). O(peers met).
    refused: Vec<u32>,
    /// Tests: how long an opening waits for its answer (else the op
    /// timeout).
    #[cfg(test)]
    open_wait: Option<std::time::Duration>,
}

impl core::fmt::Debug for Sets {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sets")
            .field("own", &self.own.len())
            .finish_non_exhaustive()
    }
}

/// The progress thread's key of the set `id` opened by `from`.
fn recv_key(from: u32, id: SetId) -> u64 {
    u64::from(from) << 32 | u64::from(id.context) << 8 | u64::from(id.set)
}

/// The QPNs of `drv`'s QPs toward `pe`.
fn qpns_of(drv: &VerbsDriver, pe: u32) -> Result<([u32; MAX_QPS], usize), VerbsError> {
    let card = drv.card_for(pe)?;
    let mut q = [0u32; MAX_QPS];
    let qps = card.qps();
    for (d, s) in q.iter_mut().zip(qps) {
        *d = s.qpn;
    }
    Ok((q, qps.len()))
}

impl Context {
    /// Opens a QP set of this context's own toward `pe` and sends the
    /// peer its QPNs; it is connected once the peer answers (at a later
    /// verbs step of this context: [`Context::verbs_set_up`]). A second
    /// call for the same peer returns the set it has.
    ///
    /// # Errors
    ///
    /// [`SetError`]: no verbs, the link to `pe` not up, the PE's budget of
    /// sets spent ([`VerbsError::NoSetLeft`]) or the driver's error; the
    /// context keeps the PE's shared driver.
    #[cfg(test)]
    pub(in crate::context) fn verbs_open_set(&mut self, pe: u32) -> Result<SetId, SetError> {
        // A call: the TCP driver and the PE's verbs state go back at its end.
        self.call().open_set_in(pe)
    }

    /// Opens this context's set toward `pe`, in a call: route selection
    /// calls it at the context's first verbs operation to `pe`
    /// ([`Context::verbs_set_route`]), tests through `verbs_open_set`.
    fn open_set_in(&mut self, pe: u32) -> Result<SetId, SetError> {
        if let Some(o) = self.vsets.own.iter().find(|o| o.peer == pe) {
            return Ok(o.id);
        }
        if !self.verbs_in() {
            return Err(SetError::NoVerbs);
        }
        let (me, lane) = (self.me, self.lane);
        let Some(v) = self.verbs.as_mut() else {
            return Err(SetError::NoVerbs);
        };
        if v.fatal || !v.peer(pe).is_some_and(|p| p.bit) {
            return Err(SetError::NotUp { pe });
        }
        // A number no live set of ours toward `pe` has (the numbers wrap).
        let mut id = SetId {
            context: lane.trailing_zeros() as u16,
            set: v.sets.next,
        };
        for _ in 0..=u8::MAX {
            if !v.sets.answers.contains_key(&(pe, id)) {
                break;
            }
            id.set = id.set.wrapping_add(1);
        }
        let drv = v
            .drv
            .open_set(pe, set_seed(v.seed, me, pe, id), &v.sets.budget)?;
        v.sets.next = id.set.wrapping_add(1);
        let (q, n) = qpns_of(&drv, pe)?;
        let Some((recs, k)) = Record::set_qpns(id, false, &q[..n]) else {
            return Err(SetError::NotUp { pe });
        };
        v.sets
            .answers
            .insert((pe, id), Answer::Pieces(SetQpnPieces::default()));
        let wait = self.op_timeout;
        #[cfg(test)]
        let wait = self.vsets.open_wait.unwrap_or(wait);
        let deadline = self.now().nanos.saturating_add(wait.as_nanos() as u64);
        self.vsets.own.push(Own {
            peer: pe,
            id,
            drv,
            up: false,
            deadline,
            route: SetRoute::Waiting,
            posted: false,
        });
        for r in &recs[..k] {
            self.verbs_send(pe, *r);
        }
        Ok(id)
    }

    /// Whether this context's set toward `pe` is connected at both ends.
    #[cfg(test)]
    pub(in crate::context) fn verbs_set_up(&self, pe: u32) -> bool {
        self.vsets.own.iter().any(|o| o.peer == pe && o.up)
    }

    /// The sets' step of `poll_once` (the PE's verbs state checked out):
    /// the sets this PE answers for progress; this context's own sets
    /// progress, and connect (or close) on their peer's answer.
    pub(super) fn verbs_sets_step(&mut self, now: CoreInstant) {
        let me = self.me;
        let Some(v) = self.verbs.as_mut() else { return };
        v.sets.progress(now);
        if self.vsets.own.is_empty() {
            return;
        }
        let seed = v.seed;
        let mut i = 0;
        while i < self.vsets.own.len() {
            let o = &mut self.vsets.own[i];
            o.drv.progress(now);
            while o.drv.poll_event().is_some() {}
            let key = (o.peer, o.id);
            let keep = match v.sets.answers.get(&key).copied() {
                Some(Answer::Up) => true,
                Some(Answer::Pieces(p)) => match (p.qpns(), v.peer(o.peer).and_then(|p| p.card)) {
                    (Some(q), Some(pe_card)) => {
                        let card =
                            pair_card(&pe_card, q, set_seed(seed, me, o.peer, o.id), o.peer, me);
                        let r = o
                            .drv
                            .set_peer_card(o.peer, card)
                            .and_then(|()| o.drv.connect(o.peer));
                        o.up = r.is_ok();
                        if o.up {
                            v.sets.answers.insert(key, Answer::Up);
                        }
                        o.up
                    }
                    // Not answered yet: wait until the deadline.
                    _ => now.nanos < o.deadline,
                },
                Some(Answer::Closed) | None => false,
            };
            if keep {
                i += 1;
                continue;
            }
            // Refused or closed by the peer, or a connect that failed:
            // the set goes (its unit back to the budget), the context
            // keeps the shared driver.
            let o = self.vsets.own.swap_remove(i);
            v.sets.answers.remove(&key);
            // No opening again toward that peer (a refusal is counted).
            self.vsets.gone(o.peer);
            self.stats.verbs_sets_refused += u64::from(!o.up);
            if let Some(t) = self.tcp.as_mut() {
                let _ = t.get().send_link_state(
                    o.peer,
                    Record::SetClosed {
                        id: o.id,
                        answer: false,
                    }
                    .encode(),
                );
            }
        }
    }

    /// Closes this context's sets (it drops): each peer is told and closes
    /// its matching set.
    pub(in crate::context) fn verbs_close_sets(&mut self) {
        if self.vsets.own.is_empty() || !self.verbs_in() {
            return;
        }
        for o in std::mem::take(&mut self.vsets.own) {
            if let Some(v) = self.verbs.as_mut() {
                v.sets.answers.remove(&(o.peer, o.id));
            }
            self.verbs_send(
                o.peer,
                Record::SetClosed {
                    id: o.id,
                    answer: false,
                },
            );
        }
    }

    /// `pe` is dead: the sets this PE answers for its contexts close (and
    /// leave the progress thread), and the answers to this PE's contexts'
    /// sets toward it say closed, so each owner closes its set at its next
    /// step.
    pub(in crate::context) fn verbs_sets_peer_dead(&mut self, pe: u32) {
        if !self.verbs_in() {
            return;
        }
        let Some(v) = self.verbs.as_mut() else { return };
        let gone: Vec<(u32, SetId)> = v
            .sets
            .answering
            .keys()
            .filter(|k| k.0 == pe)
            .copied()
            .collect();
        for k in gone {
            v.sets.answering.remove(&k);
            if let Some(t) = self.tcp.as_ref() {
                t.drop_set_recv(recv_key(k.0, k.1));
            }
        }
        for (k, a) in &mut v.sets.answers {
            if k.0 == pe {
                *a = Answer::Closed;
            }
        }
    }

    /// A set record from `from` (kinds 8 and 9; `from` checked).
    pub(super) fn verbs_set_record(&mut self, from: u32, rec: Record) {
        let me = self.me;
        let Some(v) = self.verbs.as_mut() else { return };
        match rec {
            Record::SetQpns {
                id, answer: true, ..
            } => {
                // An answer to one of our contexts' sets (if it lives).
                if let Some(Answer::Pieces(p)) = v.sets.answers.get_mut(&(from, id)) {
                    p.put(&rec);
                }
            }
            Record::SetClosed { id, answer: true } => {
                if let Some(a) = v.sets.answers.get_mut(&(from, id)) {
                    *a = Answer::Closed;
                }
            }
            Record::SetClosed { id, answer: false } => {
                // The opener closed its set: ours goes too (and the
                // progress thread stops polling its receive side).
                if v.sets.answering.remove(&(from, id)).is_some()
                    && let Some(t) = self.tcp.as_ref()
                {
                    t.drop_set_recv(recv_key(from, id));
                }
            }
            Record::SetQpns {
                id, answer: false, ..
            } => {
                let key = (from, id);
                // Openings whose pieces are still coming are at most the
                // budget's size: a peer cannot grow the map without bound.
                if !v.sets.answering.contains_key(&key)
                    && v.sets
                        .answering
                        .values()
                        .filter(|a| matches!(a, Answering::Pieces(_)))
                        .count()
                        >= v.sets.budget.max() as usize
                {
                    v.sets.refused_here += 1;
                    self.verbs_send(from, Record::SetClosed { id, answer: true });
                    return;
                }
                let e = v
                    .sets
                    .answering
                    .entry(key)
                    .or_insert_with(|| Answering::Pieces(SetQpnPieces::default()));
                let Answering::Pieces(p) = e else {
                    return; // open already: a repeat
                };
                p.put(&rec);
                let Some(q) = p.qpns() else { return };
                let mut qpns = [0u32; MAX_QPS];
                qpns[..q.len()].copy_from_slice(q);
                let n = q.len();
                let sseed = set_seed(v.seed, from, me, id);
                // The link up at both ends: its health bit set, or not yet
                // (it is set at this PE's next quiet), which must not refuse
                // an opener for good (it keeps the shared driver then).
                let card = v
                    .peer(from)
                    .filter(|p| {
                        (p.bit || (p.local_up && p.peer_rts == Some(p.generation))) && !v.fatal
                    })
                    .and_then(|p| p.card);
                let opened = card
                    .ok_or(VerbsError::Closed { peer: Some(from) })
                    .and_then(|c| {
                        let mut d = v.drv.open_set(from, sseed, &v.sets.budget)?;
                        d.set_peer_card(from, pair_card(&c, &qpns[..n], sseed, from, me))?;
                        d.connect(from)?;
                        let (ours, k) = qpns_of(&d, from)?;
                        Ok((d, ours, k))
                    });
                let reply = match opened {
                    Ok((d, ours, k)) => {
                        // The progress thread keeps its receives posted
                        // while the application computes.
                        if let (Some(r), Some(t)) = (d.recv_side(), self.tcp.as_ref()) {
                            t.add_set_recv(recv_key(from, id), r);
                        }
                        v.sets.answering.insert(key, Answering::Open(Box::new(d)));
                        v.sets.answered += 1;
                        Record::set_qpns(id, true, &ours[..k])
                    }
                    Err(_) => {
                        v.sets.answering.remove(&key);
                        v.sets.refused_here += 1;
                        None
                    }
                };
                match reply {
                    Some((recs, k)) => {
                        for r in &recs[..k] {
                            self.verbs_send(from, *r);
                        }
                    }
                    None => self.verbs_send(from, Record::SetClosed { id, answer: true }),
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
impl Context {
    /// Tests: this context's set toward `pe` (to post on it directly).
    pub(in crate::context) fn verbs_set_drv(&mut self, pe: u32) -> Option<&mut VerbsDriver> {
        self.vsets
            .own
            .iter_mut()
            .find(|o| o.peer == pe)
            .map(|o| &mut o.drv)
    }

    /// Tests: replaces the PE's budget of sets by one of `max` (before any
    /// set is open).
    pub(in crate::context) fn verbs_set_budget(&mut self, max: u32) {
        let mut call = self.call();
        assert!(call.verbs_in(), "the PE has verbs");
        if let Some(v) = call.verbs.as_mut() {
            assert_eq!(v.sets.budget.in_use(), 0, "no set open yet");
            v.sets.budget = SetBudget::new(max);
        }
    }

    /// Tests: how long this context's openings wait for their answer.
    pub(in crate::context) fn verbs_set_open_wait(&mut self, d: std::time::Duration) {
        self.vsets.open_wait = Some(d);
    }

    /// Tests: openings whose pieces are still coming here.
    pub(in crate::context) fn verbs_sets_pending(&self) -> usize {
        self.with_verbs(|v| {
            v.sets
                .answering
                .values()
                .filter(|a| matches!(a, Answering::Pieces(_)))
                .count()
        })
        .unwrap_or(0)
    }

    /// Tests: sets this PE answers for its peers, and sets open on the PE's
    /// budget.
    pub(in crate::context) fn verbs_sets_open(&self) -> (usize, u32) {
        self.with_verbs(|v| (v.sets.answering(), v.sets.budget.in_use()))
            .unwrap_or((0, 0))
    }

    /// Tests: openings answered and refused by this PE so far.
    pub(in crate::context) fn verbs_sets_answered(&self) -> (u64, u64) {
        self.with_verbs(|v| (v.sets.answered, v.sets.refused_here))
            .unwrap_or((0, 0))
    }
}

/// Whether a context's verbs operations to a set's peer go on the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetRoute {
    /// Not yet: the set is not up at both ends, or this context's verbs
    /// writes to the peer over the shared driver may not be complete.
    Waiting,
    /// They go here, without the entry lock.
    On,
    /// Not usable (its link failed, or it is being settled): they take the
    /// shared driver until [`Context::verbs_set_usable`].
    Off,
}

impl Sets {
    /// The set toward `peer` closed, or its opening was refused: the
    /// context keeps the shared driver toward it for good.
    fn gone(&mut self, peer: u32) {
        if !self.refused.contains(&peer) {
            self.refused.push(peer);
        }
    }
}

/// Routing a context's verbs operations over its own sets
/// (`verbs_context_sets = on`).
impl Context {
    /// Whether this context's verbs operation to `pe` goes on its own QP
    /// set (`verbs_context_sets = on`), else on the PE's shared driver.
    /// Its first verbs operation to `pe` opens the set (asynchronously:
    /// the shared driver meanwhile); the operations switch to it once it
    /// is up at both ends and this context's verbs writes to `pe` over the
    /// shared driver are known complete (its order bit clear: after its
    /// next `quiet`, or an ordering wait), so nothing of the context's
    /// overtakes them. A refused opening keeps the shared driver for good.
    /// Once switched: one scan of the context's sets, no lock, no
    /// allocation.
    #[inline]
    pub(in crate::context) fn verbs_set_route(&mut self, pe: u32) -> bool {
        if !self.verbs_sets_on {
            return false;
        }
        if let Some(o) = self
            .vsets
            .own
            .iter_mut()
            .find(|o| o.peer == pe && o.route == SetRoute::On)
        {
            o.posted = true;
            return true;
        }
        self.verbs_set_route_slow(pe)
    }

    /// [`Context::verbs_set_route`] before the switch: open the set, or
    /// switch to it once it may take the operations.
    #[cold]
    #[inline(never)]
    fn verbs_set_route_slow(&mut self, pe: u32) -> bool {
        let order_v = self.order.get(pe) & crate::context::order::V;
        if let Some(o) = self.vsets.own.iter_mut().find(|o| o.peer == pe) {
            if o.route == SetRoute::Waiting
                && o.up
                && order_v == 0
                && o.drv.state(pe) == LinkState::Up
            {
                o.route = SetRoute::On;
                o.posted = true;
                return true;
            }
            return false;
        }
        if self.vsets.refused.contains(&pe) {
            return false;
        }
        // The first verbs operation to `pe`: open a set (it goes on the
        // shared driver meanwhile).
        match self.open_set_in(pe) {
            Ok(_) | Err(SetError::NotUp { .. }) => {}
            Err(_) => {
                self.vsets.gone(pe);
                self.stats.verbs_sets_refused += 1;
            }
        }
        false
    }

    /// The driver of this context's set toward `pe`, whatever its route
    /// (an operation started on it is polled on it).
    #[inline]
    pub(in crate::context) fn verbs_set_for(&mut self, pe: u32) -> Option<&mut VerbsDriver> {
        self.vsets
            .own
            .iter_mut()
            .find(|o| o.peer == pe)
            .map(|o| &mut o.drv)
    }

    /// Stops routing this context's verbs operations to `pe` over its set
    /// (its link failed, or it is being settled: the failure code calls
    /// it): they take the shared driver until [`Context::verbs_set_usable`].
    pub(in crate::context) fn verbs_set_unusable(&mut self, pe: u32) {
        if let Some(o) = self.vsets.own.iter_mut().find(|o| o.peer == pe) {
            o.route = SetRoute::Off;
        }
    }

    /// Lets the set toward `pe` take this context's verbs operations again
    /// (after its failure settled): they switch back under the same
    /// condition as the first time ([`Context::verbs_set_route`]).
    #[allow(
        dead_code,
        reason = "for the set failure handshake, which rebuilds a set"
    )]
    pub(in crate::context) fn verbs_set_usable(&mut self, pe: u32) {
        if let Some(o) = self
            .vsets
            .own
            .iter_mut()
            .find(|o| o.peer == pe && o.route == SetRoute::Off)
        {
            o.route = SetRoute::Waiting;
        }
    }

    /// One progress step of this context's set toward `pe` (a full send
    /// queue on it: completions free room), without the entry lock.
    #[cold]
    pub(in crate::context) fn verbs_set_progress(&mut self, pe: u32) {
        let now = self.now();
        if let Some(d) = self.verbs_set_for(pe) {
            d.progress(now);
        }
    }

    /// Rings the doorbells of what this context batched on its sets in
    /// the call (at the call's end, as for the shared driver).
    #[inline]
    pub(in crate::context) fn verbs_sets_post(&mut self) {
        for o in &mut self.vsets.own {
            if o.posted {
                o.drv.post_batches();
            }
        }
    }

    /// A `fence` on this context's sets: each orders its earlier puts
    /// before its later ones (as the shared driver's fence does).
    ///
    /// # Errors
    ///
    /// The driver's (a set closed).
    pub(in crate::context) fn verbs_sets_fence(&mut self) -> crate::context::Result<()> {
        for o in &mut self.vsets.own {
            if o.posted {
                o.drv.fence()?;
            }
        }
        Ok(())
    }

    /// Whether this context's sets have nothing in flight (`Ok(true)`),
    /// for `quiet` and the ordering waits: each set posted on since its
    /// last complete quiet is polled (its completions), without the entry
    /// lock; the caller bounds the wait by the op timeout.
    ///
    /// # Errors
    ///
    /// [`Error::ReplayLost`](crate::context::Error::ReplayLost) for
    /// operations a set lost, or the driver's error.
    pub(in crate::context) fn verbs_sets_quiet_poll(&mut self) -> crate::context::Result<bool> {
        let mut done = true;
        for o in &mut self.vsets.own {
            if !o.posted {
                continue;
            }
            match o.drv.quiet_poll() {
                Ok(true) => o.posted = false,
                Ok(false) => done = false,
                Err(VerbsError::ReplayLost { peer, ops }) => {
                    return Err(crate::context::Error::ReplayLost { pe: peer, ops });
                }
                Err(VerbsError::PeerDown { .. }) => {
                    // The set's link failed with operations in flight: it
                    // takes nothing more. TODO(set failure handshake): its
                    // receipts settle them and its replays go over TCP;
                    // until that code drains them, this quiet waits (and
                    // times out at the op timeout).
                    o.route = SetRoute::Off;
                    done = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }
}

impl Context {
    /// Before this context's sets close (it drops): what it batched on
    /// them goes out and what is in flight completes, polled for at most
    /// the op timeout (a context's destruction quiets it, as OpenSHMEM's
    /// `shmem_ctx_destroy` does); a set whose link failed is left to its
    /// failure handling.
    pub(in crate::context) fn verbs_sets_finish(&mut self) {
        if !self.vsets.own.iter().any(|o| o.posted) {
            return;
        }
        self.verbs_sets_post();
        let start = std::time::Instant::now();
        while start.elapsed() < self.op_timeout {
            if !matches!(self.verbs_sets_quiet_poll(), Ok(false))
                || self
                    .vsets
                    .own
                    .iter()
                    .all(|o| !o.posted || o.route == SetRoute::Off)
            {
                return;
            }
            std::thread::yield_now();
        }
    }
}
