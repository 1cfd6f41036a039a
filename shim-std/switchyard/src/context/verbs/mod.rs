//! The context's side of the RDMA verbs transport.
//!
//! # What is wired
//!
//! * **Driver.** When the probe finds a usable port, `transports` allows
//!   verbs and the job has TCP (the control channel below), init creates one
//!   [`VerbsDriver`] over the context's own heap (the shared-memory segment's
//!   mapping, registered once), with settings from [`verbs_config`] and a
//!   PSN seed derived from the job secret (the job id in a job without one). The application thread progresses it in
//!   `poll_once` (every wait step); no progress thread is needed, the NIC
//!   does the target side of every operation. The dispatch has a
//!   `Drv::Verbs` arm for transport id [`VERBS`](super::VERBS).
//! * **Contexts.** The driver and the link bookkeeping below (`Verbs`)
//!   are the PE's, shared by all its contexts (`context/pe.rs`): they sit in
//!   a cell of the TCP handle under the TCP entry lock; a context checks
//!   them out at its first verbs use in a call (taking the TCP driver first:
//!   the lock order is TCP, then verbs) and puts them back when it gives the
//!   TCP driver back. One QP set per PE: a context's `quiet` that used the
//!   shared driver since its last quiet waits for the other contexts'
//!   verbs operations too (one that did not skips it, `context/order.rs`),
//!   and a lost operation is reported
//!   once to each context with verbs operations in flight to its PE
//!   (`LossBook`). With `verbs_context_sets = on` a context opens a QP set
//!   of its own toward each peer it uses over verbs
//!   (`VerbsDriver::open_set`) and, once switched, posts its operations to
//!   that peer there, without the entry lock (below, "QP sets").
//! * **QP sets** (`sets.rs`). A context opens a set toward a peer whose
//!   link is up ([`SetBudget`](switchyard_verbs::SetBudget) of
//!   `SETS_PER_PE`, 64, per PE; spent: [`SetError`], the context keeps the
//!   shared driver) and sends its QPNs ([`Record::SetQpns`], with the
//!   set's [`SetId`]: the context's lane and a per-PE number, in two
//!   pieces above 7 QPs); the peer opens the matching set with the same
//!   PSN seed ([`set_seed`]), connects it, and answers with its QPNs (or
//!   [`Record::SetClosed`] when its budget is spent, its link to us is not
//!   up or the connect failed: the opener closes its set; so does an
//!   opening not answered within the op timeout). The sets a PE
//!   answers are the PE's, progressed at every `poll_once` of any of its
//!   contexts, their receive sides also by the progress thread; a
//!   context's own sets are
//!   progressed at its own `poll_once`, and closed when it drops, telling
//!   the peer, which closes its matching set; a peer found dead closes
//!   every set toward it at this end. With `verbs_context_sets = on` a
//!   context's first verbs operation to a peer opens its set; a refused
//!   opening keeps the shared driver toward that peer for good. Once the
//!   set is usable at both ends and the context's verbs writes to the peer
//!   are known complete (its ordering bit clear: after its next `quiet`),
//!   its puts, gets and atomics to that peer go on the set, without the
//!   entry lock (`Stats::verbs_set_ops`); its `quiet` polls its sets, its
//!   `fence` fences them, and the ordering rules below count the set as
//!   its verbs. A set's failure is failed over per set (`set_link.rs`,
//!   [`Record::SetLink`]): the same receipts handshake as below
//!   ("Failure", "Exactly once"), its replays over TCP before anything
//!   newer from its context, its losses reported to that context only,
//!   its rebuild and RTS; meanwhile the context's operations to that peer
//!   take the shared driver. Tested on the fake HCA in
//!   `fake_pair_test/sets.rs`, `sets_fail.rs` and `routed_sets.rs`.
//! * **Addressing.** The bootstrap card's `verbs` field carries the *PE
//!   card* ([`pe_card_bytes`]: port address, heap rkey, base and length,
//!   44 bytes; the card format is unchanged). The per-pair QP numbers do not
//!   travel in the bootstrap: they go to each peer in one 32-byte control
//!   record over the TCP connections ([`Record::Qpns`], sent with the TCP
//!   driver's link-state records, so the bootstrap card stays O(1) and no
//!   second allgather is needed); the initial PSNs are derived from the job
//!   seed on both sides ([`psn_for`]). Everything received is validated
//!   ([`parse_pe_card`], [`Record::decode`]): bad bytes are a typed error,
//!   the peer is left on TCP and a warning names it.
//! * **Connect.** Init connects every NEAR peer that sent a card, and every
//!   ROUTED one (RoCEv2 is routable) unless `verbs_routed = off`, waits
//!   (bounded by the bootstrap timeout) until each side reported its QPs at
//!   RTS ([`Record::Rts`]), and sets the verbs health bit: NEAR traffic then
//!   goes over verbs, and ROUTED messages of `short_threshold` bytes and
//!   more (the route policy's rule 3; shorter ones take TCP).
//! * **Lazy cards** (`cards = lazy`). The driver is created with lazy
//!   peers (no QPs; `VerbsConfig::lazy_peers`) and init fetches no
//!   off-node card, so no peer is paired at init. At the first use of a
//!   peer (`first_use.rs`, after its card was fetched and TCP to it
//!   started) `Context::verbs_first_use` adds it to the driver
//!   (`VerbsDriver::add_peer`) when its card has a verbs PE card and its
//!   class wants verbs, and sends it our PE card in two
//!   [`Record::CardPiece`]s before our [`Record::Qpns`]: the responder
//!   served us as a stranger and holds no card of ours. It takes us on
//!   ([`CardPieces`], [`parse_pe_card`]), connects, and answers with its
//!   card, QPNs and [`Record::Rts`]; the rest is as above (the health bit
//!   at the end of a quiet). A budget spent
//!   ([`VerbsError::NoPeerLeft`]; the budget is `verbs_lazy_peers`) or a
//!   bad card leaves the peer on TCP with a warning; the responder says
//!   so to the initiator ([`Record::Refused`], with a [`Refusal`]), which
//!   stops waiting for the link and keeps the peer on TCP
//!   ([`Context::verbs_refusal`], [`VerbsStatus::refused_by_peers`]).
//!   Both sides pairing at once converge: adding a peer twice does
//!   nothing, and each side connects once.
//! * **Atomics** ([`nic_atomics`], `verbs_atomics = auto | nic | cpu`). RDMA
//!   atomics of a device whose `atomic_cap` is `IBV_ATOMIC_HCA` are atomic
//!   only among that HCA's own atomics, while same-node atomics (shared
//!   memory), the TCP target's and a PE's own are CPU atomics: mixed on one
//!   word they can lose an update. Unless the device reports
//!   `IBV_ATOMIC_GLOB` (or `nic` forces it), attach sets the route policy's
//!   `rdma_atomics` off: every atomic to a verbs peer takes TCP as its first
//!   choice and runs on the target's CPU. Counted in `Stats::cpu_atomics`,
//!   traced `CPU_ATOMIC`; not downgrades. A peer whose card says its
//!   device does no RDMA atomics turns them off too. The job's devices are
//!   otherwise assumed alike: the target's NIC is what executes an atomic,
//!   but the decision uses this PE's `atomic_cap` (the PE card carries
//!   whether a device does atomics, not whether they are global), so a job
//!   mixing global and HCA-only devices needs `verbs_atomics = cpu`.
//! * **Failure.** [`Event::Link`] Error clears the health bit at once (the
//!   next select takes TCP). The peer is told ([`Record::Failed`]) so its
//!   side fails too and reports which of our puts landed (the receipts
//!   handshake below); the driver's replays
//!   ([`VerbsDriver::drain_replays`]) are sent over TCP once the receipts
//!   settled them, before any later operation to that peer (operations to
//!   it wait meanwhile, bounded by the op timeout). Both sides rebuild to
//!   the same generation after a backoff (1 ms doubling to 1 s), exchange
//!   [`Record::Rts`], and the link is Up again. The health bit is set again
//!   only at the end of a successful `quiet` (or barrier), when nothing sent
//!   over TCP meanwhile can still be overtaken by verbs.
//! * **Exactly once: receipts.** Every put is an RDMA WRITE with immediate;
//!   the immediate is the put's *receipt*, its number among the puts on its
//!   (peer, data QP) in this generation, from 1. The target's driver takes
//!   one receive WQE of its shared receive queue per put and polls the
//!   receive completions in its progress step; RC executes a QP's messages
//!   in order, so the highest receipt it saw on a QP means every earlier put
//!   on that QP landed and no later one did. When a link fails, the
//!   initiator (A) keeps its in-doubt puts (posted, not known complete) and
//!   replays nothing yet; it sends [`Record::Failed`]. The target (B) takes
//!   its QPs toward A to the error state (nothing more of A's lands), waits
//!   until each data QP reported its last WQE and its receive CQ is empty
//!   ([`Event::Receipts`]), and answers with one [`Record::Applied`] per data
//!   QP. A then settles ([`VerbsDriver::settle_receipts`]): a put at or below
//!   its QP's receipt landed and is *not* replayed; the rest are replayed
//!   over TCP exactly once, in order, and only then does anything newer go
//!   to B (new operations to B wait in `routed`, bounded by the op
//!   timeout). So a target that acted on a landed flag (data, fence, flag)
//!   and rewrote the data never sees a replay undo it
//!   (`fake_pair_test::a_flag_acted_on_before_the_failover_is_not_undone_by_a_replay`).
//!   Gets are replayed as before (reading twice is harmless).
//!
//!   What is *not* guaranteed: if B is dead or its receipts do not come
//!   within the op timeout, A cannot know which of its in-doubt puts landed;
//!   B withholds them on purpose when a data QP toward A could not be moved
//!   to the error state or did not report its last WQE within the driver's
//!   `collect_timeout_ms` (300 ms; an answer without that event could be
//!   too low and get a landed put applied twice): B warns
//!   ([`Event::ReceiptsWithheld`]), tells A ([`Record::Withheld`], again
//!   whenever A asks) and rebuilds, and A ends as below at once, not at
//!   its op timeout
//!   (`fake_pair_test::withheld_receipts_are_reported_at_once`);
//!   they are neither replayed (that could apply one twice) nor dropped
//!   silently: the next `quiet` fails with
//!   [`Error::ReplayLost`](super::Error::ReplayLost) naming B and the count,
//!   and a warning says why. An operation nobody polls (a put, a
//!   non-fetching atomic) that the driver could keep neither in flight nor
//!   for replay (its replay list full) is reported the same way, once, by
//!   the next `quiet` (the driver's
//!   [`VerbsError::ReplayLost`]);
//!   so is one lost when the device died. Atomics go over the control QP, which carries
//!   no receipts: a non-fetching atomic is replayed only when it never
//!   reached the device, and an atomic that may have run fails with
//!   `OutcomeUnknown` and is never retried, as before. Receipts need the
//!   target to progress: its receive queue holds
//!   [`QpParams::srq_depth`](switchyard_verbs::params::QpParams::srq_depth)
//!   puts (from all peers together) between two of its progress steps;
//!   beyond that the senders get RNR NAKs and wait (`rnr_retry` is 7,
//!   infinite), which delays puts but never fails a link; the progress
//!   thread re-posts them while the application computes (see below). The
//!   receipts handshake is answered in the target's `poll_once`, so a target
//!   that computes outside the library for longer than the op timeout makes
//!   the initiator report its in-doubt puts lost.
//! * **Ordering across transports.** A peer's operations may go over two
//!   drivers (a ROUTED peer by size, a NEAR peer whose atomics go to the
//!   CPU, a peer during failover, a peer whose verbs backlog is over the
//!   load watermark: its puts and gets yield to TCP, `context/load.rs`),
//!   and each driver orders only its own. The context keeps two bits per
//!   peer (`context/order.rs`): the transports (verbs, TCP: all rails count
//!   as one driver here; reads across rails are below) that carried
//!   *writes* (puts, non-blocking puts, non-fetching atomics) to it since
//!   they were last known complete. Shared memory is not tracked: its
//!   writes are complete when they return. What is guaranteed, per target PE, when its
//!   operations are split:
//!   - `fence` orders every earlier put, non-blocking put and non-fetching
//!     atomic before every later one (OpenSHMEM's rule): when some peer's
//!     writes since the last quiet went over both transports, the fence is
//!     a full `quiet`; otherwise each driver fences its own, and a later
//!     write to a peer over the *other* transport than its pending writes
//!     first waits until those are complete (a quiet of that driver).
//!     Without a fence, writes over two transports are not ordered (nor are
//!     they by OpenSHMEM).
//!   - A blocking get, a non-blocking get, or a fetching atomic over one
//!     transport first waits until the peer's pending writes over the other
//!     are complete, so it observes every earlier write of this PE to that
//!     peer, as it would on one in-order transport.
//!   - `quiet` (and every barrier) completes everything on every transport.
//!
//!   Over one transport the driver's own ordering applies (TCP frames in
//!   order per connection; verbs as the driver fences), but for TCP's
//!   rails: a get or fetching atomic over one rail while another rail
//!   still holds frames toward the peer (load yields, failover) first waits
//!   until TCP is complete (`Context::order_rails`). Each wait is counted
//!   in `Stats::ordering_waits` and the operation traced `ORDERED`. The bits
//!   are stale after a driver-only wait (a later wait on an idle driver
//!   returns at once) and are cleared by each full quiet; nothing allocates
//!   after init (the bitmap is sized at attach).
//! * **Counting.** `Stats::downgrades` counts NEAR operations that fell back
//!   (where the class's rule is `AllowAndCount`), `Stats::verbs_failovers`
//!   the links lost, `Stats::verbs_replays` the operations replayed.
//! * **Load.** The verbs load bit of a peer ([`VerbsDriver::backlog`]
//!   against the load watermark; the rule is in the
//!   [context docs](super#load)) is set and cleared like a TCP rail's, its
//!   completions polled first; while it is set the peer's puts and gets
//!   take TCP (load yields), its atomics stay on their route.
//!
//! # What is not wired
//!
//! * **Per-context QP sets.** Sets are opened, answered, routed over,
//!   quieted, failed over and closed (above), off by default
//!   (`verbs_context_sets`). A context's `quiet` and `fence` take the
//!   entry lock only when it used the PE's shared driver or TCP since its
//!   last quiet, or the shared state has something for it (a loss, a
//!   health bit to raise); the ordering waits still complete the whole
//!   shared driver (docs/ARCHITECTURE.md, "Per-context QP sets").
//! * **Verbs without TCP** (`transports = shm,verbs`): the pair addresses and
//!   the rebuild handshake travel over TCP, so verbs is not used then
//!   ([`Context::verbs_status`](super::Context::verbs_status) says so).
//! * The control records are not retransmitted by TCP's replay (they are
//!   control frames); a lost one is sent again when the peer's TCP link
//!   comes back up, and a PE holding its operations for a peer's receipts
//!   asks again ([`Record::Failed`], answered the same each time) from
//!   20 ms after the failure, doubling up to 1 s, until they come or the
//!   op timeout.
//! * **The progress thread progresses only verbs' receive side.** While
//!   the application computes outside the library, the TCP progress
//!   thread (`context/progress.rs`) also polls the verbs driver's receive
//!   side ([`VerbsDriver::recv_side`]: receipts, receives re-posted, at
//!   least every tick), so peers putting to this PE over verbs do not stall
//!   on RNR. The rest of verbs (its send side, its events, and the receipts
//!   handshake records, which arrive as TCP events) runs only in the
//!   application's calls: a PE that stays outside the library longer than
//!   the op timeout while a peer's link to it fails makes that peer report
//!   its in-doubt puts as lost. With `progress = caller` there is no
//!   thread, and the application must progress once per `srq_depth`
//!   incoming puts.
//! * Nothing of this has run on an RDMA device: it is tested on the verbs
//!   driver's in-process fake HCA (two contexts in two threads, see the
//!   tests below).

mod attach;
mod common;
#[cfg(test)]
mod fake_pair_test;
mod link;
mod record;
#[cfg(test)]
mod record_test;
mod set_link;
mod sets;
#[cfg(test)]
mod test;

pub(super) use attach::create_driver;
pub use common::{NO_VERBS, Refusal, VerbsStatus};
pub use record::{CardPieces, Record, RecordError, SetId, SetLink, SetQpnPieces};
pub(super) use sets::Sets;
pub use sets::{SetError, set_seed};
use switchyard_core::route::LoadWatermark;
use switchyard_verbs::{
    Event,
    card::{CardError, MAX_QPS, QpAddr, VerbsCard},
    params::{AtomicCap, Template, VerbsConfig},
    probe,
    qp_plan::psn_for,
};
/// The driver's types the rest of the context names (`drv.rs`,
/// `progress.rs`), here so that a build without the `verbs` feature swaps
/// them for stand-ins in one place (`context/verbs_off.rs`).
pub(super) use switchyard_verbs::{VerbsDriver, VerbsError, recv::RecvSide};

use super::Context;
use crate::config::{Config, Key, Source, Template as ConfigTemplate, VerbsAtomics};

/// First delay before a rebuild after a failure (ns).
const MIN_BACKOFF_NS: u64 = 1_000_000;
/// Longest delay before a rebuild (ns).
const MAX_BACKOFF_NS: u64 = 1_000_000_000;
/// First delay before a held peer is asked again for its receipts (ns);
/// it doubles up to [`MAX_BACKOFF_NS`].
const ASK_AGAIN_NS: u64 = 20_000_000;
/// A failure this long after the previous one starts the backoff over (ns).
const BACKOFF_RESET_NS: u64 = 10_000_000_000;

/// Whether atomics to verbs peers may use the NIC's atomics, given the
/// `verbs_atomics` setting and the device's `atomic_cap`, and why.
///
/// * `auto`: only a device whose atomics are atomic with respect to the
///   CPU's (`IBV_ATOMIC_GLOB`). With `IBV_ATOMIC_HCA` (what most devices
///   report) a NIC atomic and a CPU atomic on one word (a same-node peer's
///   over shared memory, a TCP peer's run by the target, the owner's own)
///   can lose an update, so atomics go over TCP to the target's CPU.
/// * `nic`: whenever the device does RDMA atomics at all.
/// * `cpu`: never.
pub fn nic_atomics(setting: VerbsAtomics, cap: AtomicCap) -> (bool, &'static str) {
    match (setting, cap) {
        (_, AtomicCap::None) => (
            false,
            "the device does no RDMA atomics: atomics go over TCP (the target's CPU)",
        ),
        (VerbsAtomics::Cpu, _) => (
            false,
            "verbs_atomics = cpu: atomics go over TCP (the target's CPU)",
        ),
        (VerbsAtomics::Nic, AtomicCap::Global) | (VerbsAtomics::Auto, AtomicCap::Global) => (
            true,
            "the device's atomics are atomic with the CPU's (global): atomics use the NIC",
        ),
        (VerbsAtomics::Nic, AtomicCap::Hca) => (
            true,
            "verbs_atomics = nic: atomics use the NIC although they are atomic only among the HCA's own (do not mix them with same-node or TCP atomics on one word)",
        ),
        (VerbsAtomics::Auto, AtomicCap::Hca) => (
            false,
            "the device's atomics are atomic only among the HCA's own, not with the CPU's: atomics go over TCP (the target's CPU); verbs_atomics = nic forces the NIC",
        ),
    }
}

/// The status without a context's driver: the probe's reason without a
/// device, else `why` (the reason the context did not create one).
pub fn status_without_driver(why: &str) -> VerbsStatus {
    let p = probe::probe();
    match p.unavailable {
        Some(u) => VerbsStatus {
            device_usable: false,
            in_use: false,
            peers_up: 0,
            why_not: Some(u.to_string()),
            nic_atomics: false,
            refused_here: 0,
            refused_by_peers: 0,
        },
        None => VerbsStatus {
            device_usable: true,
            in_use: false,
            peers_up: 0,
            why_not: Some(why.into()),
            nic_atomics: false,
            refused_here: 0,
            refused_by_peers: 0,
        },
    }
}

/// The verbs driver's settings from the job's configuration: the config's
/// template picks the driver's template (trading without one), and
/// `queue_depth` and `inline_threshold` become explicit overrides only when
/// the file or the environment set them (a template's value for them leaves
/// the driver's template, clamped to the device, in charge); `verbs_device`
/// and `verbs_gid_index` pick the device and the GID.
pub fn verbs_config(cfg: &Config) -> VerbsConfig {
    let explicit = |k: Key| matches!(cfg.source(k), Source::File { .. } | Source::Env(_));
    VerbsConfig {
        template: match cfg.template() {
            Some(ConfigTemplate::Storage) => Template::Storage,
            Some(ConfigTemplate::Ai) => Template::Ai,
            Some(ConfigTemplate::Trading) | None => Template::Trading,
        },
        sq_depth: explicit(Key::QueueDepth).then_some(cfg.queue_depth),
        max_inline: explicit(Key::InlineThreshold).then_some(cfg.inline_threshold),
        device: cfg.verbs_device.clone(),
        gid_index: cfg.verbs_gid_index.map(u32::from),
        ..VerbsConfig::default()
    }
}

/// The bootstrap card's `verbs` field for a driver: its PE card (port
/// address, rkey, heap base and length); `None` without a driver.
pub fn pe_card_bytes(drv: Option<&VerbsDriver>) -> Option<Vec<u8>> {
    drv.and_then(|d| d.pe_card().to_vec().ok())
}

/// Decodes a bootstrap card's `verbs` field: a checked PE card (no QPs;
/// those come per pair in a [`Record::Qpns`]).
///
/// # Errors
///
/// [`CardError`] naming the bad field; a card with QPs is a `qp count`
/// error.
pub fn parse_pe_card(bytes: &[u8]) -> Result<VerbsCard, CardError> {
    let c = VerbsCard::decode(bytes)?;
    if c.n_qps != 0 {
        return Err(CardError::Field {
            field: "qp count",
            value: c.n_qps.into(),
            expected: "0 in a bootstrap card (QPs travel per pair)",
        });
    }
    Ok(c)
}

/// The card of `from`'s QPs toward `to`: `from`'s PE card, the QPNs of its
/// [`Record::Qpns`], and the initial PSNs both sides derive from the job
/// seed.
pub fn pair_card(pe: &VerbsCard, qpns: &[u32], seed: u64, from: u32, to: u32) -> VerbsCard {
    let mut c = *pe;
    let n = qpns.len().min(MAX_QPS);
    for (i, &qpn) in qpns.iter().take(n).enumerate() {
        c.qps[i] = QpAddr {
            qpn,
            psn: psn_for(seed, from, to, i as u8, 0),
        };
    }
    c.n_qps = n as u8;
    c
}

/// Whether a driver event means the verbs health bit of a peer changes:
/// `Some((peer, usable))`.
pub fn health_change(e: &Event) -> Option<(u32, bool)> {
    match *e {
        Event::Link { peer, state } => Some((peer, state.is_usable())),
        _ => None,
    }
}

/// What the context knows of one peer's verbs link (one per peer the
/// driver has QPs toward, at the driver's slot for it:
/// [`VerbsDriver::peer_slot`]).
#[derive(Debug, Clone, Default)]
struct PeerV {
    /// The PE.
    pe: u32,
    /// Its PE card (from the bootstrap): `None` when it has no verbs.
    card: Option<VerbsCard>,
    /// Whether this PE routes to it over verbs (NEAR, with a card).
    wanted: bool,
    /// Whether our QPNs went out to it.
    qpns_sent: bool,
    /// Whether its QPNs arrived and the QPs were connected.
    connected: bool,
    /// Generation our QPs are at RTS for.
    generation: u32,
    /// The driver reports the link Up.
    local_up: bool,
    /// The generation the peer says its QPs are at RTS for.
    peer_rts: Option<u32>,
    /// A rebuild to do, and not before `rebuild_at` (ns on the context clock).
    rebuild_to: Option<u32>,
    rebuild_at: u64,
    backoff: u64,
    last_fail: u64,
    /// Whether the health bit is set.
    bit: bool,
    /// In-doubt puts to it wait for its receipts ([`Record::Applied`]):
    /// nothing newer goes to it meanwhile, until `hold_until` (ns).
    hold: bool,
    hold_until: u64,
    /// When to ask again ([`Record::Failed`]) while holding: a control
    /// record the TCP driver could not queue is not sent again by it, and
    /// the answer is idempotent.
    ask_at: u64,
    ask_every: u64,
    /// Receipts received so far for `applied_gen`, per data QP.
    applied: [Option<u64>; MAX_QPS],
    applied_gen: u32,
    /// The failure (generation) whose receipts of the peer's puts this PE
    /// withheld: a repeated question gets [`Record::Withheld`] again.
    withheld: Option<u32>,
    /// The peer refused to pair ([`Record::Refused`]), and why: not
    /// wanted from then on, it stays on TCP, and is not asked again (its
    /// QPs here stay unconnected in their slot).
    refused: Option<Refusal>,
}

/// Lazy peers: what a peer that starts a pairing sent so far.
#[derive(Debug, Default)]
struct Incoming {
    /// Its PE card, in pieces.
    card: CardPieces,
    /// Its [`Record::Qpns`] (encoded), when it came before the card was
    /// complete (records may take different TCP rails): applied once it is.
    qpns: Option<[u8; 32]>,
}

/// The PE's verbs driver and the per-peer link bookkeeping, shared by its
/// contexts (in the TCP handle's cell, checked out by one context at a
/// time: `context/pe.rs`).
pub(super) struct Verbs {
    /// The driver was created with lazy peers (lazy cards): a peer's QPs
    /// are added at its first use, or when it sends us its card and QPNs.
    lazy: bool,
    /// Lazy peers: the PE cards being received in pieces
    /// ([`Record::CardPiece`]), by sender; O(peers pairing now).
    cards_in: std::collections::BTreeMap<u32, Incoming>,
    /// Lazy peers refused (the driver's budget spent, a bad card).
    pub(super) lazy_refused: u64,
    /// Peers that refused to pair with this PE ([`Record::Refused`]).
    pub(super) refused_by_peers: u64,
    /// The driver (its own heap registration, QPs, CQ).
    pub(super) drv: VerbsDriver,
    seed: u64,
    /// Per peer the driver has QPs toward, at its slot
    /// ([`VerbsDriver::peer_slot`]): every other PE with eager cards, the
    /// peers paired so far with lazy ones (O(peers), not O(PEs)).
    peers: Vec<PeerV>,
    /// The device failed: verbs is never used again by this context.
    fatal: bool,
    /// Which context is told of which lost operations.
    pub(super) losses: LossBook,
    /// QP sets: the PE's budget, the sets it answers for its peers'
    /// contexts, the answers to its own contexts' (`sets.rs`).
    sets: sets::PeSets,
    /// Whether replays may be waiting in the driver.
    drain_due: bool,
    /// Whether a peer may have a rebuild to start (else `poll_once` skips
    /// the per-peer scan).
    rebuild_due: bool,
    /// Whether a peer's link may have come up (else `quiet` skips the scan).
    raise_due: bool,
    /// Peers with `hold` set (else nothing checks them).
    pub(super) holding: u32,
    /// [`Verbs::attention`] as last published for the contexts' quiets.
    published: u64,
    pub(super) failovers: u64,
    pub(super) replays: u64,
    pub(super) bad_records: u64,
    /// Tests: [`Record::Applied`] records to drop instead of sending (a
    /// control record lost).
    #[cfg(test)]
    drop_applied: u32,
    /// Tests: a QP set's [`SetLink::Rts`] records to drop instead of
    /// sending.
    #[cfg(test)]
    drop_set_rts: u32,
    /// Tests: send our card pieces and QPNs in reverse order.
    #[cfg(test)]
    reorder: bool,
}

impl core::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Verbs")
            .field("fatal", &self.fatal)
            .field("failovers", &self.failovers)
            .field("replays", &self.replays)
            .finish_non_exhaustive()
    }
}

impl Verbs {
    /// `pe`'s slot in `peers` (one hash probe in the driver's table).
    #[inline]
    fn slot(&self, pe: u32) -> Option<usize> {
        self.drv.peer_slot(pe).filter(|&s| s < self.peers.len())
    }

    /// `pe`'s link bookkeeping.
    #[inline]
    fn peer(&self, pe: u32) -> Option<&PeerV> {
        self.slot(pe).map(|s| &self.peers[s])
    }

    /// Peers whose health bit is set.
    fn peers_up(&self) -> u32 {
        self.peers.iter().filter(|p| p.bit).count() as u32
    }

    /// The lanes of the contexts whose next quiet must complete the shared
    /// driver though they may have nothing on it: those owed a loss, and
    /// every lane while a link that came (back) up waits for its health
    /// bit (`Context::verbs_raise`; never once the device failed).
    #[inline]
    pub(super) fn attention(&self) -> u64 {
        let raise = if self.raise_due && !self.fatal {
            u64::MAX
        } else {
            0
        };
        self.losses.lanes | raise
    }

    /// [`Verbs::attention`] when it changed since it was last published
    /// (`PeInner::verbs_attention`, when the state goes back to its cell):
    /// two compares, nothing shared touched otherwise.
    #[inline]
    pub(in crate::context) fn attention_changed(&mut self) -> Option<u64> {
        let a = self.attention();
        (a != self.published).then(|| {
            self.published = a;
            a
        })
    }
}

#[cfg(test)]
impl Context {
    /// Tests: the PE's verbs state, checked out for this context (put back
    /// at its next call's end, or [`Context::leave`]).
    pub(super) fn verbs_mut(&mut self) -> &mut Verbs {
        assert!(self.verbs_in(), "the PE has verbs");
        self.verbs.as_deref_mut().expect("verbs")
    }
}

impl Context {
    /// A verbs operation to `pe` was issued by this context: in flight
    /// until the driver is quiet (its loss reports).
    #[inline]
    pub(super) fn verbs_issued(&mut self, pe: u32) {
        let lane = self.lane;
        if let Some(v) = self.verbs.as_mut()
            && let Some(s) = v.drv.peer_slot(pe)
        {
            v.losses.issued(s, lane);
        }
    }

    /// Whether `pe`'s verbs health bit is set (no driver: no).
    #[inline]
    pub(super) fn verbs_up(&self, pe: u32) -> bool {
        self.with_verbs(|v| v.peer(pe).is_some_and(|p| p.bit))
            .unwrap_or(false)
    }

    /// Whether `pe`'s verbs backlog ([`VerbsDriver::backlog`]) is over
    /// `level` of its capacity (no driver: no). O(1): the driver's
    /// counters, as of its last completion poll.
    #[inline]
    pub(super) fn verbs_backlog_over(&self, pe: u32, level: LoadWatermark) -> bool {
        self.with_verbs(|v| v.drv.backlog(pe).is_some_and(|b| b.exceeded(level)))
            .unwrap_or(false)
    }

    /// The verbs driver's counters as the words of its wide block in the
    /// stats segment ([`VerbsWord`](crate::statseg::VerbsWord)), when there is a driver.
    pub(super) fn verbs_counters(&self) -> Option<[u64; 15]> {
        let s = self.with_verbs(|v| v.drv.stats())?;
        Some([
            s.wrs,
            s.doorbells,
            s.completions,
            s.completion_errors,
            s.would_block,
            s.fence_waits,
            s.cas_retries,
            s.replays,
            s.outcome_unknown,
            s.peer_failures,
            s.rebuilds,
            s.receipts,
            s.recv_reposts,
            s.receipts_abandoned,
            s.receipts_withheld,
        ])
    }

    /// Whether this context routes over RDMA verbs, and why not; how many
    /// peers stay on TCP because a pairing was refused (here, or by them).
    pub fn verbs_status(&self) -> VerbsStatus {
        // The PE's driver, shared by its contexts.
        let v = self.with_verbs(|v| {
            let refused = v.peers.iter().find_map(|p| p.refused.map(|r| (p.pe, r)));
            (
                (v.fatal, v.peers_up(), v.peers.iter().any(|p| p.wanted)),
                (v.lazy_refused, v.refused_by_peers, refused),
            )
        });
        match v {
            Some(((true, _, _), (here, by_peers, _))) => VerbsStatus {
                device_usable: false,
                in_use: false,
                peers_up: 0,
                why_not: Some("the RDMA device failed: every peer uses TCP".into()),
                nic_atomics: false,
                refused_here: here,
                refused_by_peers: by_peers,
            },
            Some(((false, up, wanted), (here, by_peers, refused))) => {
                VerbsStatus {
                    device_usable: true,
                    in_use: up > 0,
                    peers_up: up,
                    why_not: (up == 0).then(|| {
                        if wanted {
                            "no verbs link is up now (connecting or rebuilding): NEAR uses TCP"
                                .into()
                        } else if let Some((pe, why)) = refused {
                            format!("PE {pe} refused to pair over verbs ({why}): it uses TCP")
                        } else if self.verbs_routed {
                            "no NEAR or ROUTED peer with a verbs card: nothing to route over verbs"
                                .into()
                        } else {
                            "no NEAR peer with a verbs card (verbs_routed = off): nothing to route over verbs"
                                .into()
                        }
                    }),
                    nic_atomics: !self.cpu_atomics_rule,
                    refused_here: here,
                    refused_by_peers: by_peers,
                }
            }
            None => status_without_driver(
                self.verbs_why
                    .as_deref()
                    .unwrap_or("the context does not drive a verbs driver"),
            ),
        }
    }

    /// Why `pe` stays on TCP after it refused to pair with this PE over
    /// verbs (its answer to our QP numbers: its budget of lazily paired
    /// peers spent, our card refused, ...); `None` when it did not.
    pub fn verbs_refusal(&self, pe: u32) -> Option<Refusal> {
        self.with_verbs(|v| v.peer(pe).and_then(|p| p.refused))
            .flatten()
    }
}

/// The operations lost in failovers on the PE's shared verbs driver, and
/// which contexts are to be told: contexts are named by their lane (a bit,
/// `Context::lane`); per peer (by its driver slot,
/// [`VerbsDriver::peer_slot`]: O(peers the driver may have)) it keeps the
/// lanes with verbs operations in flight, and the losses not yet reported
/// to each.
#[derive(Debug, Default)]
pub(super) struct LossBook {
    /// Per peer: the lanes still to be told, and the count.
    lost: Vec<(u64, u64)>,
    /// The lanes with a loss still to report (an `or` of `lost`'s).
    lanes: u64,
    /// Per peer, the lanes of the contexts with verbs operations to it that
    /// may not be complete (cleared when the driver is quiet).
    inflight: Vec<u64>,
}

impl LossBook {
    /// A book for `n` peer slots.
    pub(super) fn new(n: usize) -> LossBook {
        LossBook {
            lost: vec![(0, 0); n],
            lanes: 0,
            inflight: vec![0; n],
        }
    }

    /// `lane`'s context issued a verbs operation to the peer in `slot`.
    #[inline]
    pub(super) fn issued(&mut self, slot: usize, lane: u64) {
        if let Some(f) = self.inflight.get_mut(slot) {
            *f |= lane;
        }
    }

    /// Records `ops` operations toward the peer in `slot` lost (neither in
    /// flight nor replayed), for each context with verbs operations to it
    /// in flight (their next `quiet` reports it), or for `lane`'s (the
    /// context that found it) when none is known: every loss is reported,
    /// once per context it may concern, and not to the contexts it cannot.
    pub(super) fn record(&mut self, slot: usize, ops: u64, lane: u64) {
        let i = slot;
        let (Some(l), Some(&f)) = (self.lost.get_mut(i), self.inflight.get(i)) else {
            return;
        };
        let owed = if f == 0 { lane } else { f };
        l.0 |= owed;
        l.1 += ops;
        self.lanes |= owed;
    }

    /// The next loss to report to `lane`'s context, once: (peer slot,
    /// count).
    #[inline]
    pub(super) fn take(&mut self, lane: u64) -> Option<(usize, u64)> {
        if self.lanes & lane == 0 {
            return None;
        }
        self.take_slow(lane)
    }

    #[cold]
    #[inline(never)]
    fn take_slow(&mut self, lane: u64) -> Option<(usize, u64)> {
        let mut found = None;
        let mut lanes = 0;
        for (slot, l) in self.lost.iter_mut().enumerate() {
            if found.is_none() && l.0 & lane != 0 {
                l.0 &= !lane;
                found = Some((slot, l.1));
                if l.0 == 0 {
                    l.1 = 0;
                }
            }
            lanes |= l.0;
        }
        self.lanes = lanes;
        found
    }

    /// Every verbs operation of every context is complete: none is in
    /// flight for anyone.
    pub(super) fn settled(&mut self) {
        self.inflight.fill(0);
    }

    /// A context's lane is freed (the context dropped): nothing is in
    /// flight or owed for it any more.
    pub(super) fn forget_lane(&mut self, lane: u64) {
        for f in &mut self.inflight {
            *f &= !lane;
        }
        for l in &mut self.lost {
            l.0 &= !lane;
            if l.0 == 0 {
                l.1 = 0;
            }
        }
        self.lanes &= !lane;
    }
}
