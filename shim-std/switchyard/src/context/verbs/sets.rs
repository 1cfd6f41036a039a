//! Per-context QP sets, the shim's half: a context opens a QP set of its
//! own toward a peer ([`VerbsDriver::open_set`]), the peer opens the
//! matching set, the two connect, the context's verbs operations to that
//! peer are routed over it (`verbs_context_sets = on`), a failure of the
//! set fails over and rebuilds at both ends (`set_link.rs`, below), and
//! the set is closed at both ends when the context drops
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
//!    closes its matching set; its own set closes with it. A close that
//!    overtakes its opening (records take different TCP rails) is
//!    remembered at B (at most 64, for the op timeout) and the opening's
//!    pieces that come later are dropped; an opening whose pieces do not
//!    all come within the op timeout is dropped too.
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
//!   link is not up (nothing of it sent) marks it so
//!   ([`Context::verbs_set_unusable`], which takes the set's events at
//!   once, so its puts in doubt hold the context's newer operations) and
//!   goes on the shared driver once the hold ends; the context switches
//!   back to the set under the same condition as the first time, once
//!   [`Context::verbs_set_usable`] (settled, rebuilt, and a `quiet` since).
//!   Replays over TCP set the peer's TCP order bit, so a fence after them
//!   orders them before the set's or the shared driver's later writes.
//!
//! A set's failure ([`Record::SetLink`], `set_link.rs`), as the shared
//! driver's (`link.rs`) with the set's own generations and receipts:
//!
//! * A's context takes its set's events at its step. A link error with
//!   puts in doubt holds the context's operations to B
//!   ([`Context::verbs_set_holds`], bounded by the op timeout) and sends
//!   the set's `Failed`.
//! * B (the PE's sets, in any context's step) takes its set's QPs to the
//!   error state, collects its receipts and answers `Applied` per data QP
//!   (or `Withheld`). B's answers reach A's context through a mailbox per
//!   set in the PE's verbs state; A asks again while it holds.
//! * A settles ([`VerbsDriver::settle_receipts`]), replays the rest over
//!   TCP exactly once, fenced, before anything newer from the context,
//!   then stops holding. Withheld, no receipts by the op timeout, or the
//!   set closed meanwhile: the in-doubt puts are reported lost to this
//!   context only, by its next `quiet` ([`Error::ReplayLost`](crate::context::Error::ReplayLost)).
//! * Both rebuild to the next generation and exchange the set's `Rts`;
//!   the set is usable again ([`Context::verbs_set_usable`]) once Up at
//!   both ends and after the context's next successful `quiet`.

use std::collections::{BTreeMap, VecDeque};

use switchyard_core::{
    topology::LinkState,
    trace::TraceRecord,
    transport::{Instant as CoreInstant, Transport},
    wire::FrameOp,
};
use switchyard_verbs::{SetBudget, VerbsDriver, VerbsError, card::MAX_QPS};

use super::{
    Record, SetId, SetLink, SetQpnPieces, Verbs, link::drain_over_tcp, pair_card,
    set_link::SetState,
};
use crate::context::{Context, progress};

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
    /// The answering ends' [`Record::SetLink`]s for this PE's contexts'
    /// sets, by (peer, id), while the set lives (its context takes them
    /// at its next step; a few per failure, bounded).
    mail: BTreeMap<(u32, SetId), heapless::Vec<SetLink, MAIL>>,
    /// Openings closed by their opener before they were open here
    /// (records take different TCP rails: a close can overtake its
    /// opening), with when they are forgotten (ns): an opening that
    /// arrives later is dropped. At most [`TOMBSTONES`].
    closed: VecDeque<((u32, SetId), u64)>,
    /// Openings dropped: pieces not complete within the op timeout, or
    /// overtaken by their close.
    pub(super) dropped: u64,
    /// Tests: how long an opening's pieces may take (else the op timeout).
    #[cfg(test)]
    pieces_wait: Option<u64>,
    /// Openings refused here (budget, link, connect).
    pub(super) refused_here: u64,
    /// Openings answered here (sets opened for peers).
    pub(super) answered: u64,
}

/// [`SetLink`]s held for one of this PE's contexts' sets.
const MAIL: usize = 24;
/// Closed openings remembered ([`PeSets::closed`]).
const TOMBSTONES: usize = 64;

enum Answering {
    /// The opener's QPNs, in pieces, until the deadline (ns).
    Pieces(SetQpnPieces, u64),
    Open(Box<Answered>),
}

/// A set this PE answers: its driver and its link.
struct Answered {
    drv: VerbsDriver,
    link: SetState,
}

impl PeSets {
    pub(super) fn new(max: u32) -> PeSets {
        PeSets {
            budget: SetBudget::new(max),
            next: 0,
            answering: BTreeMap::new(),
            answers: BTreeMap::new(),
            mail: BTreeMap::new(),
            closed: VecDeque::new(),
            dropped: 0,
            #[cfg(test)]
            pieces_wait: None,
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

    /// One progress step of every set this PE answers for: its link
    /// (the opener's failure: receipts collected and answered, the
    /// rebuild, `out` gets the records to send); openings whose pieces did
    /// not all come in time, and closes remembered long enough, go.
    fn progress(
        &mut self,
        now: CoreInstant,
        hold_ns: u64,
        out: &mut Vec<(u32, Record)>,
        warn: &mut Vec<String>,
    ) {
        let mut links = Vec::new();
        let mut expired = 0u64;
        self.answering.retain(|&(peer, id), a| match a {
            Answering::Open(a) => {
                a.drv.progress(now);
                a.link
                    .step(&mut a.drv, peer, now.nanos, hold_ns, &mut links, warn);
                if a.link.drain_due {
                    // The answering end posts nothing: no replays (a
                    // rebuild waits for none).
                    a.link.drain_due = false;
                    a.drv.drain_replays(|_| {});
                }
                for link in links.drain(..) {
                    out.push((
                        peer,
                        Record::SetLink {
                            id,
                            answer: true,
                            link,
                        },
                    ));
                }
                true
            }
            Answering::Pieces(_, until) => {
                let keep = now.nanos < *until;
                expired += u64::from(!keep);
                keep
            }
        });
        self.dropped += expired;
        while self.closed.front().is_some_and(|c| c.1 <= now.nanos) {
            self.closed.pop_front();
        }
    }

    /// Remembers that the opener closed `key` before it was open here.
    fn tombstone(&mut self, key: (u32, SetId), until: u64) {
        if self.closed.len() >= TOMBSTONES {
            self.closed.pop_front();
        }
        self.closed.push_back((key, until));
    }
}

/// One set of a context's own.
struct Own {
    peer: u32,
    id: SetId,
    drv: VerbsDriver,
    up: bool,
    /// Its link: failure, receipts, rebuild (`set_link.rs`).
    link: SetState,
    /// Usable again after a failure only from the end of the context's
    /// next successful `quiet` (as the shared driver's health bit): its
    /// replays over TCP cannot be overtaken by the set then.
    raised: bool,
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
    /// Own sets holding their context's operations to their peer
    /// (in-doubt puts waiting for receipts): read on every operation.
    holding: u32,
    /// Operations of this context's sets lost (in-doubt puts whose
    /// receipts were withheld or did not come in time, replays TCP did
    /// not take), not yet reported by a `quiet`: the first such peer, and
    /// the count over all of them.
    lost: Option<(u32, u64)>,
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

/// One step of a context's own set's link (in
/// [`Context::verbs_sets_step`], after its `progress`): the answering
/// end's [`Record::SetLink`]s from the PE's mailbox, the set's events,
/// its receipts' deadline and rebuild, its replays over TCP (exactly once,
/// fenced, before anything newer from this context: its operations to the
/// peer wait while the set holds), and the records to the peer. Returns
/// the peer and the in-doubt puts given up on this step.
fn own_link_step(
    o: &mut Own,
    v: &mut Verbs,
    mut tcp: Option<&mut switchyard_socket::SocketDriver>,
    warn: &mut Vec<String>,
    moved: &mut Vec<TraceRecord>,
    now: u64,
    who: (u32, std::time::Instant, std::time::Duration),
) -> (u32, u64) {
    let hold_ns = who.2.as_nanos() as u64;
    let failovers = o.link.failovers;
    let mut out = Vec::new();
    if let Some(m) = v.sets.mail.get_mut(&(o.peer, o.id))
        && !m.is_empty()
    {
        for link in std::mem::take(m) {
            if o.link.record(&mut o.drv, o.peer, link, &mut out, warn) {
                v.bad_records += 1;
            }
        }
    }
    o.link
        .step(&mut o.drv, o.peer, now, hold_ns, &mut out, warn);
    if o.link.failovers != failovers {
        // Failed: usable again from the end of a quiet after its rebuild.
        o.raised = false;
    }
    if o.link.drain_due {
        o.link.drain_due = false;
        let d = drain_over_tcp(&mut o.drv, tcp.as_deref_mut(), who, moved);
        o.link.replays += d.offered - d.lost;
        o.link.lost += d.lost;
    }
    if let Some(t) = tcp {
        for link in out {
            let r = Record::SetLink {
                id: o.id,
                answer: false,
                link,
            };
            let _ = t.send_link_state(o.peer, r.encode());
        }
    }
    (o.peer, std::mem::take(&mut o.link.lost))
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
            link: SetState::new(),
            raised: true,
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

    /// Whether this context's set toward `pe` can take its operations:
    /// connected, Up at both ends for the same generation, and, after a
    /// failure, rebuilt with its replays over TCP and a `quiet` since (so
    /// nothing it carries can overtake them). What routing onto the set
    /// reads; false while it fails over (the context's operations to `pe`
    /// then wait, [`Context::verbs_set_holds`], or take the shared driver).
    pub(in crate::context) fn verbs_set_usable(&self, pe: u32) -> bool {
        self.vsets
            .own
            .iter()
            .any(|o| o.peer == pe && o.up && o.raised && o.link.usable())
    }

    /// Whether this context's operations to `pe` must wait: its set toward
    /// `pe` failed with puts in doubt whose receipts have not come (they
    /// are replayed, or known landed, before anything newer goes to `pe`;
    /// bounded by the op timeout). One field read when no set holds.
    #[inline]
    pub(in crate::context) fn verbs_set_holds(&self, pe: u32) -> bool {
        self.vsets.holding != 0 && self.verbs_set_holds_slow(pe)
    }

    #[cold]
    #[inline(never)]
    fn verbs_set_holds_slow(&self, pe: u32) -> bool {
        self.vsets.own.iter().any(|o| o.peer == pe && o.link.hold)
    }

    /// At the end of a successful `quiet`: this context's sets that are Up
    /// again after a failure may take operations (nothing sent over TCP
    /// meanwhile is still in flight).
    pub(super) fn verbs_sets_raise(&mut self) {
        for o in &mut self.vsets.own {
            if !o.raised && o.link.usable() {
                o.raised = true;
            }
        }
    }

    /// Whether this context's sets can be quieted without the entry lock:
    /// none fails over (holds for receipts, has replays due, or found its
    /// link failed with operations posted: their settling runs in the
    /// sets' step, under the lock). One field read and one scan of its
    /// sets.
    #[inline]
    pub(in crate::context) fn verbs_sets_local(&self) -> bool {
        self.vsets.holding == 0
            && self
                .vsets
                .own
                .iter()
                .all(|o| !o.link.drain_due && (o.route != SetRoute::Off || !o.posted))
    }

    /// For `quiet`: the in-doubt puts of this context's sets lost since
    /// the last report (peer, count), once; and whether a set still waits
    /// for receipts or replays (not quiet yet).
    pub(super) fn verbs_sets_quiet(&mut self) -> (Option<(u32, u64)>, bool) {
        let busy = self.vsets.holding > 0 || self.vsets.own.iter().any(|o| o.link.drain_due);
        (self.vsets.lost.take(), busy)
    }

    /// The sets' step of `poll_once` (the PE's verbs state checked out):
    /// the sets this PE answers for progress; this context's own sets
    /// progress, and connect (or close) on their peer's answer.
    pub(super) fn verbs_sets_step(&mut self, now: CoreInstant) {
        let me = self.me;
        let hold_ns = self.op_timeout.as_nanos() as u64;
        let Some(v) = self.verbs.as_mut() else { return };
        let mut out = Vec::new();
        v.sets.progress(now, hold_ns, &mut out, &mut self.warnings);
        for (pe, r) in out {
            self.verbs_send(pe, r);
        }
        if self.vsets.own.is_empty() {
            return;
        }
        let Some(v) = self.verbs.as_mut() else { return };
        let who = (me, self.clock, self.op_timeout);
        let mut moved = Vec::new();
        let seed = v.seed;
        let mut i = 0;
        while i < self.vsets.own.len() {
            let o = &mut self.vsets.own[i];
            o.drv.progress(now);
            let tcp = self.tcp.as_mut().map(progress::Tcp::get);
            let sent = own_link_step(o, v, tcp, &mut self.warnings, &mut moved, now.nanos, who);
            if sent.1 > 0 {
                let l = self.vsets.lost.get_or_insert((sent.0, 0));
                l.1 += sent.1;
            }
            let o = &mut self.vsets.own[i];
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
                            // The answer came once the peer's end was at
                            // RTS.
                            o.link.peer_rts = Some(0);
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
            let mut o = self.vsets.own.swap_remove(i);
            v.sets.answers.remove(&key);
            // No opening again toward that peer (a refusal is counted).
            self.vsets.gone(o.peer);
            self.stats.verbs_sets_refused += u64::from(!o.up);
            v.sets.mail.remove(&key);
            // Puts in doubt on it: their receipts will not come; what
            // waits for replay goes over TCP before the set does.
            o.link
                .abandon(&mut o.drv, o.peer, "its set closed", &mut self.warnings);
            let tcp = self.tcp.as_mut().map(progress::Tcp::get);
            let d = drain_over_tcp(&mut o.drv, tcp, who, &mut moved);
            let lost = o.link.lost + d.lost;
            if lost > 0 {
                let l = self.vsets.lost.get_or_insert((o.peer, 0));
                l.1 += lost;
            }
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
        self.vsets.holding = self.vsets.own.iter().filter(|o| o.link.hold).count() as u32;
        if !moved.is_empty() {
            // The replays went over TCP: this context's quiet waits for
            // TCP, and a write over verbs (the shared driver's, or the
            // set's again) after a fence waits for them.
            self.order.shared |= crate::context::order::T;
            for r in &moved {
                if r.op != FrameOp::Get as u8 {
                    let code = self.order.get(r.dst);
                    self.order.set(r.dst, code | crate::context::order::T);
                }
            }
            self.trace_moved(moved);
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
                v.sets.mail.remove(&(o.peer, o.id));
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
        let now = self.now().nanos;
        let wait = self.op_timeout.as_nanos() as u64;
        let Some(v) = self.verbs.as_mut() else { return };
        match rec {
            // For one of our contexts' sets (if it lives): it takes it at
            // its next step. A full mailbox drops it (the owner asks again
            // while it holds).
            Record::SetLink {
                id,
                answer: true,
                link,
            } if v.sets.answers.contains_key(&(from, id)) => {
                let _ = v.sets.mail.entry((from, id)).or_default().push(link);
            }
            Record::SetLink {
                id,
                answer: false,
                link,
            } => {
                // For a set we answer: its opener failed, asks for our
                // receipts, or rebuilt.
                let Some(Answering::Open(a)) = v.sets.answering.get_mut(&(from, id)) else {
                    return;
                };
                let mut out = Vec::new();
                if a.link
                    .record(&mut a.drv, from, link, &mut out, &mut self.warnings)
                {
                    v.bad_records += 1;
                }
                a.link
                    .events(&mut a.drv, from, now, wait, &mut out, &mut self.warnings);
                for link in out {
                    self.verbs_send(
                        from,
                        Record::SetLink {
                            id,
                            answer: true,
                            link,
                        },
                    );
                }
            }
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
                match v.sets.answering.remove(&(from, id)) {
                    Some(Answering::Open(_)) => {
                        if let Some(t) = self.tcp.as_ref() {
                            t.drop_set_recv(recv_key(from, id));
                        }
                    }
                    // Not open here yet: the close overtook its opening
                    // (another TCP rail), whose pieces are dropped when
                    // they come.
                    _ => {
                        #[cfg(test)]
                        let wait = v.sets.pieces_wait.unwrap_or(wait);
                        v.sets.tombstone((from, id), now.saturating_add(wait));
                    }
                }
            }
            Record::SetQpns {
                id, answer: false, ..
            } => {
                let key = (from, id);
                if v.sets.closed.iter().any(|c| c.0 == key) {
                    // Its opener closed it already.
                    v.sets.dropped += 1;
                    return;
                }
                // Openings whose pieces are still coming are at most the
                // budget's size: a peer cannot grow the map without bound.
                if !v.sets.answering.contains_key(&key)
                    && v.sets
                        .answering
                        .values()
                        .filter(|a| matches!(a, Answering::Pieces(..)))
                        .count()
                        >= v.sets.budget.max() as usize
                {
                    v.sets.refused_here += 1;
                    self.verbs_send(from, Record::SetClosed { id, answer: true });
                    return;
                }
                #[cfg(test)]
                let wait = v.sets.pieces_wait.unwrap_or(wait);
                let e = v.sets.answering.entry(key).or_insert_with(|| {
                    Answering::Pieces(SetQpnPieces::default(), now.saturating_add(wait))
                });
                let Answering::Pieces(p, _) = e else {
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
                        let mut link = SetState::new();
                        // Our QPs are at RTS; the opener's are once it has
                        // our answer (it posts, we do not).
                        link.peer_rts = Some(0);
                        v.sets
                            .answering
                            .insert(key, Answering::Open(Box::new(Answered { drv: d, link })));
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
                .filter(|a| matches!(a, Answering::Pieces(..)))
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

    /// Tests: how long an opening's pieces may take here (else the op
    /// timeout), and how long a close that overtook its opening is
    /// remembered.
    pub(in crate::context) fn verbs_sets_pieces_wait(&mut self, d: std::time::Duration) {
        let mut call = self.call();
        assert!(call.verbs_in(), "the PE has verbs");
        if let Some(v) = call.verbs.as_mut() {
            v.sets.pieces_wait = Some(d.as_nanos() as u64);
        }
    }

    /// Tests: openings dropped here (pieces expired, or overtaken by
    /// their close).
    pub(in crate::context) fn verbs_sets_dropped(&self) -> u64 {
        self.with_verbs(|v| v.sets.dropped).unwrap_or(0)
    }

    /// Tests: this context's set toward `pe`: its failures, the operations
    /// it replayed over TCP, its generation.
    pub(in crate::context) fn verbs_set_link(&self, pe: u32) -> Option<(u64, u64, u32)> {
        self.vsets
            .own
            .iter()
            .find(|o| o.peer == pe)
            .map(|o| (o.link.failovers, o.link.replays, o.link.generation))
    }

    /// Tests: receipts taken by the sets this PE answers (puts of its
    /// peers' contexts that landed over their sets), and their failures.
    pub(in crate::context) fn verbs_sets_answering_stats(&self) -> (u64, u64) {
        self.with_verbs(|v| {
            v.sets
                .answering
                .values()
                .filter_map(|a| match a {
                    Answering::Open(a) => Some((a.drv.stats().receipts, a.link.failovers)),
                    Answering::Pieces(..) => None,
                })
                .fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1))
        })
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
        let usable = self.verbs_set_usable(pe);
        if let Some(o) = self.vsets.own.iter_mut().find(|o| o.peer == pe) {
            // Waiting, or Off after a failure: back on once it is settled,
            // rebuilt and raised again ([`Context::verbs_set_usable`]).
            if o.route != SetRoute::On && usable && order_v == 0 && o.drv.state(pe) == LinkState::Up
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
    /// (a post on it found its link down): they take the shared driver
    /// until [`Context::verbs_set_usable`]. The set's events are taken at
    /// once (under the entry lock), so its puts in doubt hold this
    /// context's newer operations to `pe` ([`Context::verbs_set_holds`])
    /// before any of them is selected again.
    #[cold]
    pub(in crate::context) fn verbs_set_unusable(&mut self, pe: u32) {
        if let Some(o) = self.vsets.own.iter_mut().find(|o| o.peer == pe) {
            o.route = SetRoute::Off;
        }
        if self.verbs_in() {
            let now = self.now();
            self.verbs_sets_step(now);
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
                    // takes nothing more until its failure is settled (its
                    // receipts, then its replays over TCP, at the sets'
                    // step of `poll_once`; `verbs_quiet_poll` waits for
                    // that), rebuilt and raised again.
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
