//! The context's side of the RDMA verbs transport.
//!
//! # What is wired
//!
//! * **Driver.** When the probe finds a usable port, `transports` allows
//!   verbs and the job has TCP (the control channel below), init creates one
//!   [`VerbsDriver`] over the context's own heap (the shared-memory segment's
//!   mapping, registered once), with settings from [`verbs_config`] and the
//!   job id as the PSN seed. The application thread progresses it in
//!   `poll_once` (every wait step); no progress thread is needed, the NIC
//!   does the target side of every operation. The dispatch has a
//!   `Drv::Verbs` arm for transport id [`VERBS`].
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
//!   the next `quiet` (the driver's [`VerbsError::ReplayLost`]); so is one
//!   lost when the device died. Atomics go over the control QP, which carries
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
//!   CPU, a peer during failover), and each driver orders only its own. The
//!   context keeps two bits per peer (`context/order.rs`): the transports
//!   (verbs, TCP: all rails count as one driver) that carried *writes* (puts,
//!   non-blocking puts, non-fetching atomics) to it since they were last
//!   known complete. Shared memory is not tracked: its writes are complete
//!   when they return. What is guaranteed, per target PE, when its
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
//!   order per connection; verbs as the driver fences). Each wait is counted
//!   in `Stats::ordering_waits` and the operation traced `ORDERED`. The bits
//!   are stale after a driver-only wait (a later wait on an idle driver
//!   returns at once) and are cleared by each full quiet; nothing allocates
//!   after init (the bitmap is sized at attach).
//! * **Counting.** `Stats::downgrades` counts NEAR operations that fell back
//!   (where the class's rule is `AllowAndCount`), `Stats::verbs_failovers`
//!   the links lost, `Stats::verbs_replays` the operations replayed.
//!
//! # What is not wired
//!
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

use std::time::Duration;

use switchyard_core::{
    class::PathClass,
    route::ContextId,
    topology::LinkState,
    transport::{ErrorKind, Instant as CoreInstant, Transport, TransportError},
};
use switchyard_socket::SocketDriver;
use switchyard_verbs::{
    Event, Receipts, Replay, VerbsDriver, VerbsError,
    card::{CardError, MAX_24, MAX_QPS, QpAddr, VerbsCard},
    params::{AtomicCap, Template, VerbsConfig},
    probe,
    qp_plan::psn_for,
};

use super::{Context, VERBS, progress};
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

/// Whether the verbs transport is in use by this context, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsStatus {
    /// The probe found a usable port (or a test injected a device).
    pub device_usable: bool,
    /// Whether this context drives a verbs driver and routes over it.
    pub in_use: bool,
    /// Peers whose verbs health bit is set now.
    pub peers_up: u32,
    /// Why not, when it does not.
    pub why_not: Option<String>,
    /// Whether atomics to verbs peers use the NIC's atomics (else they go
    /// over TCP and run on the target's CPU; see [`nic_atomics`]).
    pub nic_atomics: bool,
}

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
        },
        None => VerbsStatus {
            device_usable: true,
            in_use: false,
            peers_up: 0,
            why_not: Some(why.into()),
            nic_atomics: false,
        },
    }
}

/// The verbs driver's settings from the job's configuration: the config's
/// template picks the driver's template (trading without one), and
/// `queue_depth` and `inline_threshold` become explicit overrides only when
/// the file or the environment set them (a template's value for them leaves
/// the driver's template, clamped to the device, in charge).
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
        device: std::env::var("SWITCHYARD_VERBS_DEVICE").ok(),
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

/// A verbs control record between two PEs, carried in the TCP driver's
/// 32-byte link-state records. Layout: `"SYV"`, kind `u8`, then
///
/// * kind 1, QPNs: count `u8` (2 to 9: control + data), then each QPN in 3
///   bytes little-endian (non-zero);
/// * kind 2, RTS: generation `u32` LE, the sender's QPs toward the reader are
///   at RTS for it (0: the first connect);
/// * kind 3, failed: generation `u32` LE, the sender's link to the reader
///   failed and it rebuilds to that generation;
/// * kind 4, applied: generation `u32` LE (the failure's, as in kind 3),
///   data QP `u8` (1 to `of`), `of` `u8` (the sender's data QPs, 1 to 8),
///   receipt `u64` LE: the highest receipt of the reader's puts the sender
///   saw on that data QP before the link failed (one record per data QP);
/// * kind 5, withheld: generation `u32` LE (the failure's): the sender
///   cannot tell which of the reader's puts landed (its QPs did not report
///   their last WQE in time, or could not be moved to the error state), so
///   the reader reports its puts in doubt lost now instead of waiting for
///   receipts until its op timeout;
///
/// and zeros to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The sender's QP numbers toward the reader.
    Qpns {
        /// How many of `qpns` are used.
        n: u8,
        /// QP numbers (index 0 the control QP).
        qpns: [u32; MAX_QPS],
    },
    /// The sender's QPs are at RTS for `generation`.
    Rts {
        /// The generation.
        generation: u32,
    },
    /// The sender's link failed; it rebuilds to `generation`.
    Failed {
        /// The generation.
        generation: u32,
    },
    /// After the link failed (rebuilding to `generation`), the reader's
    /// puts on data QP `qp` that landed at the sender: every one up to
    /// receipt `seq`, none after it.
    Applied {
        /// The generation of the failure.
        generation: u32,
        /// The data QP (1 to `of`).
        qp: u8,
        /// The sender's data QPs per peer.
        of: u8,
        /// The highest receipt seen (0: none).
        seq: u64,
    },
    /// After the link failed (rebuilding to `generation`), the sender
    /// cannot tell which of the reader's puts landed: no receipts will come.
    Withheld {
        /// The generation of the failure.
        generation: u32,
    },
}

/// Why a verbs control record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Not a verbs record.
    #[error("verbs record magic {got:02x?}, expected \"SYV\"")]
    Magic {
        /// The bytes found.
        got: [u8; 3],
    },
    /// An unknown kind.
    #[error(
        "verbs record kind {kind}, expected 1 (QPNs), 2 (RTS), 3 (failed), 4 (applied) or 5 (withheld)"
    )]
    Kind {
        /// The kind byte.
        kind: u8,
    },
    /// A QP count outside 2..=9.
    #[error("verbs record QP count {n}, expected 2 to 9 (control + 1..=8 data)")]
    QpCount {
        /// The count.
        n: u8,
    },
    /// A data QP outside 1..=of, or `of` outside 1..=8.
    #[error("verbs record data QP {qp} of {of}, expected 1 to {of} of 1 to 8")]
    DataQp {
        /// The data QP.
        qp: u8,
        /// The data QP count.
        of: u8,
    },
    /// A zero QPN.
    #[error("verbs record QPN {index} is 0, expected 1 to 2^24-1")]
    Qpn {
        /// Its index.
        index: u8,
    },
    /// Non-zero bytes after the fields.
    #[error("verbs record has non-zero bytes after its fields, at byte {at}")]
    Trailing {
        /// The first one.
        at: usize,
    },
}

const MAGIC: [u8; 3] = *b"SYV";

impl Record {
    /// Whether `b` is meant to be a verbs record (its magic).
    pub fn is_verbs(b: &[u8; 32]) -> bool {
        b[..3] == MAGIC
    }

    /// The 32 bytes.
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..3].copy_from_slice(&MAGIC);
        match *self {
            Record::Qpns { n, qpns } => {
                b[3] = 1;
                let n = n.min(MAX_QPS as u8);
                b[4] = n;
                for (i, q) in qpns.iter().take(usize::from(n)).enumerate() {
                    b[5 + 3 * i..8 + 3 * i].copy_from_slice(&(q & MAX_24).to_le_bytes()[..3]);
                }
            }
            Record::Rts { generation } => {
                b[3] = 2;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
            Record::Failed { generation } => {
                b[3] = 3;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
            Record::Applied {
                generation,
                qp,
                of,
                seq,
            } => {
                b[3] = 4;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
                b[8] = qp;
                b[9] = of;
                b[10..18].copy_from_slice(&seq.to_le_bytes());
            }
            Record::Withheld { generation } => {
                b[3] = 5;
                b[4..8].copy_from_slice(&generation.to_le_bytes());
            }
        }
        b
    }

    /// Decodes and checks 32 record bytes.
    ///
    /// # Errors
    ///
    /// [`RecordError`] naming what was wrong; never panics.
    pub fn decode(b: &[u8; 32]) -> Result<Record, RecordError> {
        if b[..3] != MAGIC {
            return Err(RecordError::Magic {
                got: [b[0], b[1], b[2]],
            });
        }
        let gen_at = || u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (rec, end) = match b[3] {
            1 => {
                let n = b[4];
                if !(2..=MAX_QPS as u8).contains(&n) {
                    return Err(RecordError::QpCount { n });
                }
                let mut qpns = [0u32; MAX_QPS];
                for (i, q) in qpns.iter_mut().take(usize::from(n)).enumerate() {
                    let at = 5 + 3 * i;
                    *q = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], 0]);
                    if *q == 0 {
                        return Err(RecordError::Qpn { index: i as u8 });
                    }
                }
                (Record::Qpns { n, qpns }, 5 + 3 * usize::from(n))
            }
            2 => (
                Record::Rts {
                    generation: gen_at(),
                },
                8,
            ),
            3 => (
                Record::Failed {
                    generation: gen_at(),
                },
                8,
            ),
            4 => {
                let (qp, of) = (b[8], b[9]);
                if !(1..=MAX_QPS as u8 - 1).contains(&of) || !(1..=of).contains(&qp) {
                    return Err(RecordError::DataQp { qp, of });
                }
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&b[10..18]);
                (
                    Record::Applied {
                        generation: gen_at(),
                        qp,
                        of,
                        seq: u64::from_le_bytes(seq),
                    },
                    18,
                )
            }
            5 => (
                Record::Withheld {
                    generation: gen_at(),
                },
                8,
            ),
            kind => return Err(RecordError::Kind { kind }),
        };
        if let Some(at) = (end..32).find(|&i| b[i] != 0) {
            return Err(RecordError::Trailing { at });
        }
        Ok(rec)
    }
}

/// What the context knows of one peer's verbs link.
#[derive(Debug, Clone, Default)]
struct PeerV {
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
}

/// The verbs driver a context drives, and the per-peer link bookkeeping.
pub(super) struct Verbs {
    /// The driver (its own heap registration, QPs, CQ).
    pub(super) drv: VerbsDriver,
    seed: u64,
    peers: Vec<PeerV>,
    /// The device failed: verbs is never used again by this context.
    fatal: bool,
    /// Replays TCP could not take since the last quiet: (first peer, count).
    lost: Option<(u32, u64)>,
    /// Whether replays may be waiting in the driver.
    drain_due: bool,
    /// Whether a peer may have a rebuild to start (else `poll_once` skips
    /// the per-peer scan).
    rebuild_due: bool,
    /// Whether a peer's link may have come up (else `quiet` skips the scan).
    raise_due: bool,
    /// Peers with `hold` set (else nothing checks them).
    pub(super) holding: u32,
    pub(super) failovers: u64,
    pub(super) replays: u64,
    pub(super) bad_records: u64,
    /// Tests: [`Record::Applied`] records to drop instead of sending (a
    /// control record lost).
    #[cfg(test)]
    drop_applied: u32,
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
    /// Peers whose health bit is set.
    fn peers_up(&self) -> u32 {
        self.peers.iter().filter(|p| p.bit).count() as u32
    }
}

impl Context {
    /// Whether `pe`'s verbs health bit is set (no driver: no).
    #[inline]
    pub(super) fn verbs_up(&self, pe: u32) -> bool {
        self.verbs
            .as_ref()
            .and_then(|v| v.peers.get(pe as usize))
            .is_some_and(|p| p.bit)
    }

    /// Why atomics to verbs peers use the NIC or not ([`nic_atomics`]);
    /// empty before a verbs driver is attached.
    pub fn verbs_atomics_reason(&self) -> &'static str {
        self.verbs_atomics_why
    }
}

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

impl Context {
    /// Takes over a verbs driver created over this context's heap: decodes
    /// the peers' bootstrap `verbs` fields (index = PE; a bad one leaves
    /// that peer on TCP with a warning), chooses the NEAR peers with a card,
    /// and sends each our QP numbers. `seed` is the PSN seed the driver was
    /// created with (the job id). Without TCP the driver is dropped (verbs
    /// needs the TCP control records) and the reason kept for
    /// [`Context::verbs_status`].
    pub(super) fn attach_verbs(&mut self, drv: VerbsDriver, seed: u64, cards: &[Option<Vec<u8>>]) {
        if self.tcp.is_none() {
            self.verbs_why = Some(
                "verbs needs TCP between the PEs (pair addresses and rebuilds travel over it): NEAR uses TCP"
                    .into(),
            );
            return;
        }
        let mut peers = vec![PeerV::default(); self.n_pes as usize];
        for (pe, p) in peers.iter_mut().enumerate() {
            let pe = pe as u32;
            let Some(Some(bytes)) = cards.get(pe as usize) else {
                continue;
            };
            if pe == self.me {
                continue;
            }
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
        self.verbs = Some(Verbs {
            drv,
            seed,
            peers,
            fatal: false,
            lost: None,
            drain_due: false,
            rebuild_due: false,
            raise_due: false,
            holding: 0,
            failovers: 0,
            replays: 0,
            bad_records: 0,
            #[cfg(test)]
            drop_applied: 0,
        });
        self.verbs_why = None;
        // A peer's operations may now be split over verbs and TCP.
        self.order.enable(self.n_pes);
        // The progress thread keeps the receive side going (receipts,
        // receives re-posted) while the application is outside.
        if let (Some(t), Some(r)) = (
            self.tcp.as_ref(),
            self.verbs.as_ref().and_then(|v| v.drv.recv_side()),
        ) {
            t.set_verbs_recv(r);
        }
        self.verbs_send_qpns();
        self.leave();
    }

    /// Sends our QP numbers to every wanted peer that has not had them.
    fn verbs_send_qpns(&mut self) {
        let (Some(v), Some(t)) = (self.verbs.as_mut(), self.tcp.as_mut()) else {
            return;
        };
        let t = t.get();
        for pe in 0..v.peers.len() as u32 {
            let p = &v.peers[pe as usize];
            if !p.wanted || p.qpns_sent {
                continue;
            }
            let Ok(card) = v.drv.card_for(pe) else {
                continue;
            };
            let mut qpns = [0u32; MAX_QPS];
            for (q, a) in qpns.iter_mut().zip(card.qps()) {
                *q = a.qpn;
            }
            let rec = Record::Qpns {
                n: card.n_qps,
                qpns,
            };
            if t.send_link_state(pe, rec.encode()).is_ok() {
                v.peers[pe as usize].qpns_sent = true;
            }
        }
    }

    /// Sends one control record to `pe` (best effort: a lost one is sent
    /// again when TCP to `pe` comes back up).
    fn verbs_send(&mut self, pe: u32, rec: Record) {
        #[cfg(test)]
        if let (Some(v), Record::Applied { .. }) = (self.verbs.as_mut(), rec)
            && v.drop_applied > 0
        {
            v.drop_applied -= 1;
            return;
        }
        if let Some(t) = self.tcp.as_mut().map(progress::Tcp::get) {
            let _ = t.send_link_state(pe, rec.encode());
        }
    }

    /// Waits (progressing, at most `timeout`) until every wanted peer's
    /// link is Up at both ends, then sets their health bits (at init
    /// nothing sent over TCP can be overtaken). Returns the peers up.
    pub(super) fn verbs_connect(&mut self, timeout: Duration) -> u32 {
        let start = std::time::Instant::now();
        loop {
            self.poll_once();
            let done = self.verbs.as_ref().is_none_or(|v| {
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
        self.verbs_raise();
        let up = self.verbs.as_ref().map_or(0, Verbs::peers_up);
        if let Some(v) = &self.verbs {
            let missing: Vec<u32> = (0..v.peers.len() as u32)
                .filter(|&pe| v.peers[pe as usize].wanted && !v.peers[pe as usize].bit)
                .collect();
            if !missing.is_empty() {
                self.warnings.push(format!(
                    "verbs links to PEs {missing:?} did not come up within {timeout:?}: they use TCP until they do"
                ));
            }
        }
        self.leave();
        up
    }

    /// Sets the health bit of every peer whose link is Up at both ends (at
    /// the end of a successful quiet: nothing sent over TCP before can be
    /// overtaken by what goes over verbs from now on).
    pub(super) fn verbs_raise(&mut self) {
        let Some(v) = self.verbs.as_mut() else { return };
        if v.fatal || !v.raise_due {
            return;
        }
        v.raise_due = false;
        for (pe, p) in v.peers.iter_mut().enumerate() {
            if p.wanted && !p.bit && p.local_up && p.peer_rts == Some(p.generation) {
                self.topo.set_health(VERBS, pe as u32, true);
                p.bit = true;
            }
        }
    }

    /// One verbs step of `poll_once`: progress the driver, apply its
    /// events, drain replays, start rebuilds that are due.
    pub(super) fn verbs_poll(&mut self, now: CoreInstant) {
        let Some(v) = self.verbs.as_mut() else { return };
        v.drv.progress(now);
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
        for pe in 0..v.peers.len() as u32 {
            let p = &mut v.peers[pe as usize];
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
    /// by the next `quiet` ([`Error::ReplayLost`](super::Error::ReplayLost)),
    /// never replayed blindly nor dropped silently.
    fn verbs_hold_deadlines(&mut self, now: u64) {
        let n = self.verbs.as_ref().map_or(0, |v| v.peers.len() as u32);
        for pe in 0..n {
            let Some(v) = self.verbs.as_ref() else { return };
            let p = &v.peers[pe as usize];
            if !p.hold {
                continue;
            }
            let (expired, ask) = (now > p.hold_until, now >= p.ask_at);
            let generation = p.rebuild_to.unwrap_or(p.generation + 1);
            if !expired && !self.is_dead(pe) {
                if ask {
                    // No (complete) answer yet: ask again.
                    let Some(v) = self.verbs.as_mut() else { return };
                    let p = &mut v.peers[pe as usize];
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
        let Some(p) = v.peers.get_mut(pe as usize) else {
            return;
        };
        if !p.hold {
            return;
        }
        p.hold = false;
        v.holding -= 1;
        let lost = v.drv.abandon_receipts(pe);
        v.drain_due = true;
        if lost > 0 {
            let (p0, c) = v.lost.unwrap_or((pe, 0));
            v.lost = Some((p0, c + lost));
        }
        self.warnings.push(format!(
            "PE {pe} sent no verbs receipts ({why}): {lost} puts in doubt reported lost"
        ));
    }

    /// Whether operations to `pe` must wait: its verbs link failed with
    /// puts in doubt, whose receipts have not come (they are replayed, or
    /// known landed, before anything newer goes to `pe`).
    #[inline]
    pub(super) fn verbs_holds(&self, pe: u32) -> bool {
        self.verbs
            .as_ref()
            .is_some_and(|v| v.holding > 0 && v.peers.get(pe as usize).is_some_and(|p| p.hold))
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
    pub(super) fn verbs_events(&mut self) {
        while let Some(ev) = self.verbs.as_mut().and_then(|v| v.drv.poll_event()) {
            self.verbs_event(ev);
        }
        if self.verbs.as_ref().is_some_and(|v| v.drain_due) {
            self.verbs_drain();
        }
    }

    fn verbs_event(&mut self, ev: Event) {
        let now = self.now().nanos;
        let Some(v) = self.verbs.as_mut() else { return };
        match ev {
            Event::Link { peer, state } => {
                let Some(p) = v.peers.get_mut(peer as usize) else {
                    return;
                };
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
                let Some(p) = v.peers.get_mut(peer as usize) else {
                    return;
                };
                p.rebuild_to = Some(p.rebuild_to.map_or(generation, |g| g.max(generation)));
                p.rebuild_at = now + p.backoff;
                v.drain_due = true;
                v.rebuild_due = true;
                // The peer's QPs were not reset by our failure: tell it.
                self.verbs_send(peer, Record::Failed { generation });
            }
            Event::Rebuilt { peer, generation } => {
                let Some(p) = v.peers.get_mut(peer as usize) else {
                    return;
                };
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
                for pe in 0..v.peers.len() as u32 {
                    v.peers[pe as usize].bit = false;
                    self.topo.apply_link_state(VERBS, pe, LinkState::Error);
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
                if let Some(p) = v.peers.get_mut(peer as usize) {
                    p.withheld = Some(generation);
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
        let mut tcp = self.tcp.as_mut().map(progress::Tcp::get);
        let (mut n, mut lost, mut first) = (0u64, 0u64, None);
        v.drv.drain_replays(|r| {
            n += 1;
            let peer = match r {
                Replay::Put { peer, .. }
                | Replay::PutFromHeap { peer, .. }
                | Replay::GetIntoHeap { peer, .. }
                | Replay::Atomic { peer, .. } => peer,
            };
            let ok = tcp
                .as_deref_mut()
                .is_some_and(|t| replay_one(t, r, me, clock, patience));
            if !ok {
                lost += 1;
                first.get_or_insert(peer);
            }
        });
        if n > lost
            && let Some(t) = tcp
        {
            // The replays went over rail 0; a later operation may take
            // another rail, and TCP orders its rails only at a fence. The
            // replays stand for operations issued before anything that
            // follows, so they are fenced off from it (a fence that
            // follows them in the application's order needs it).
            let _ = t.fence();
        }
        v.replays += n;
        if let Some(pe) = first {
            let (p0, c) = v.lost.unwrap_or((pe, 0));
            v.lost = Some((p0, c + lost));
        }
    }

    /// Applies a verbs control record from `from` (a TCP link-state record
    /// with the verbs magic). Bad records are counted and ignored.
    pub(super) fn verbs_record(&mut self, from: u32, bytes: &[u8; 32]) {
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
        let Some(p) = v.peers.get_mut(from as usize) else {
            v.bad_records += 1;
            return;
        };
        if !p.wanted {
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
                        self.verbs_send(from, Record::Rts { generation: 0 });
                    }
                    Err(e) => {
                        p.wanted = false;
                        self.warnings.push(format!(
                            "verbs to PE {from} not connected ({e}): it stays on TCP"
                        ));
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
    pub(super) fn verbs_tcp_up(&mut self, pe: u32) {
        let Some(v) = self.verbs.as_mut() else { return };
        let Some(p) = v.peers.get_mut(pe as usize) else {
            return;
        };
        if !p.wanted {
            return;
        }
        let (connected, g, up, rebuild) = (p.connected, p.generation, p.local_up, p.rebuild_to);
        if !p.qpns_sent {
            self.verbs_send_qpns();
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
    pub(super) fn verbs_quiet_poll(&mut self) -> super::Result<bool> {
        let Some(v) = self.verbs.as_mut() else {
            return Ok(true);
        };
        if let Some((pe, ops)) = v.lost.take() {
            return Err(super::Error::ReplayLost { pe, ops });
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
            Ok(done) => Ok(done && !v.drain_due),
            Err(VerbsError::ReplayLost { peer, ops }) => {
                Err(super::Error::ReplayLost { pe: peer, ops })
            }
            Err(VerbsError::DeviceFatal) if v.fatal && !v.drain_due => Ok(true),
            Err(VerbsError::PeerDown { .. } | VerbsError::DeviceFatal) => {
                v.drain_due = true;
                Ok(false)
            }
            Err(e) => Err(super::Error::Verbs(e)),
        }
    }

    /// Whether this context routes over RDMA verbs, and why not.
    pub fn verbs_status(&self) -> VerbsStatus {
        match &self.verbs {
            Some(v) if v.fatal => VerbsStatus {
                device_usable: false,
                in_use: false,
                peers_up: 0,
                why_not: Some("the RDMA device failed: every peer uses TCP".into()),
                nic_atomics: false,
            },
            Some(v) => {
                let up = v.peers_up();
                VerbsStatus {
                    device_usable: true,
                    in_use: up > 0,
                    peers_up: up,
                    why_not: (up == 0).then(|| {
                        if v.peers.iter().any(|p| p.wanted) {
                            "no verbs link is up now (connecting or rebuilding): NEAR uses TCP"
                                .into()
                        } else if self.verbs_routed {
                            "no NEAR or ROUTED peer with a verbs card: nothing to route over verbs"
                                .into()
                        } else {
                            "no NEAR peer with a verbs card (verbs_routed = off): nothing to route over verbs"
                                .into()
                        }
                    }),
                    nic_atomics: !self.cpu_atomics_rule,
                }
            }
            None => status_without_driver(
                self.verbs_why
                    .as_deref()
                    .unwrap_or("the context does not drive a verbs driver"),
            ),
        }
    }
}

#[cfg(test)]
mod test {
    use switchyard_core::{
        class::{PathClass, TransportId},
        route::{Downgrade, Op, Policy, PolicyConfig, SelectError, Selector, TransportRoles},
        topology::{LinkState, Shape, Topology, TopologyBox},
    };

    use super::*;

    const fn tid(i: u8) -> TransportId {
        match TransportId::new(i) {
            Some(t) => t,
            None => panic!("transport id"),
        }
    }

    /// As the context runs without verbs: PE 1 is NEAR, PE 2 ROUTED, the
    /// verbs bits are never set, TCP's are. NEAR and ROUTED go over TCP;
    /// with `AllowAndCount` the fallbacks are counted, with `Forbid` NEAR is
    /// refused.
    #[test]
    fn without_verbs_near_and_routed_fall_back_to_tcp_as_the_policy_says() {
        let (shm, verbs, tcp) = (tid(0), tid(1), tid(2));
        let shape = Shape {
            me: 0,
            n_pes: 3,
            n_transports: 3,
            load_hints: false,
        };
        let store = TopologyBox::new(shape, 2);
        let classes = [PathClass::Local, PathClass::Near, PathClass::Routed];
        let topo = Topology::new(store.mem(), shape, |p| classes[p as usize]).unwrap();
        for pe in 1..3 {
            topo.apply_link_state(tcp, pe, LinkState::Up);
        }
        let roles = TransportRoles {
            shm: Some(shm),
            rdma: Some(verbs),
            stream: [Some(tcp), None, None, None],
        };
        let mut downgrade = [Downgrade::AllowAndCount; 5];
        let counted = Policy::new(PolicyConfig {
            roles,
            downgrade,
            ..PolicyConfig::default()
        });
        let mut sel = Selector::new(&topo, counted).unwrap();
        for pe in 1..3 {
            let r = sel.select(pe, 64, Op::Put).unwrap();
            assert_eq!(r.transport, tcp, "PE {pe}");
        }
        let d = sel.downgrades();
        assert_eq!(d[PathClass::Near.index()], 1, "{d:?}");

        downgrade[PathClass::Near.index()] = Downgrade::Forbid;
        let forbid = Policy::new(PolicyConfig {
            roles,
            downgrade,
            ..PolicyConfig::default()
        });
        let mut sel = Selector::new(&topo, forbid).unwrap();
        assert!(matches!(
            sel.select(1, 64, Op::Put),
            Err(SelectError::DowngradeForbidden { .. })
        ));
        // The reason the context gives for not using verbs.
        let s = status_without_driver("not attached");
        assert!(!s.in_use);
        assert!(s.why_not.is_some_and(|w| !w.is_empty()));
    }

    #[test]
    fn config_maps_to_the_driver_template_and_explicit_overrides() {
        let load = |vars: &[(&str, &str)]| {
            crate::config::Config::load_from_vars(
                vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            )
            .unwrap()
        };
        let v = verbs_config(&load(&[]));
        assert_eq!(
            (v.template, v.sq_depth, v.max_inline),
            (Template::Trading, None, None)
        );
        let v = verbs_config(&load(&[("SWITCHYARD_TEMPLATE", "storage")]));
        assert_eq!(
            (v.template, v.sq_depth, v.max_inline),
            (Template::Storage, None, None),
            "template values stay the driver's"
        );
        let v = verbs_config(&load(&[
            ("SWITCHYARD_TEMPLATE", "ai"),
            ("SWITCHYARD_QUEUE_DEPTH", "512"),
            ("SWITCHYARD_INLINE_THRESHOLD", "64"),
        ]));
        assert_eq!(
            (v.template, v.sq_depth, v.max_inline),
            (Template::Ai, Some(512), Some(64))
        );
    }

    #[test]
    fn link_events_map_to_health() {
        assert_eq!(
            health_change(&Event::Link {
                peer: 3,
                state: LinkState::Error
            }),
            Some((3, false))
        );
        assert_eq!(
            health_change(&Event::Link {
                peer: 3,
                state: LinkState::Up
            }),
            Some((3, true))
        );
        assert_eq!(health_change(&Event::DeviceFatal), None);
        assert_eq!(pe_card_bytes(None), None);
    }
}

/// Records and cards: every bad byte is a typed error.
#[cfg(test)]
mod record_test {
    use proptest::prelude::*;
    use switchyard_verbs::{card::LinkLayer, params::Mtu};

    use super::*;

    fn pe_card() -> VerbsCard {
        VerbsCard {
            link_layer: LinkLayer::Ethernet,
            mtu: Mtu::M1024,
            lid: 0,
            gid: Some([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            atomics: true,
            rkey: 0x1234,
            heap_base: 0x7f00_0000_0000,
            heap_len: 1 << 20,
            qps: [QpAddr::default(); MAX_QPS],
            n_qps: 0,
        }
    }

    #[test]
    fn records_round_trip() {
        let mut qpns = [0u32; MAX_QPS];
        qpns[..3].copy_from_slice(&[0x101, 0xFF_FFFF, 7]);
        for r in [
            Record::Qpns { n: 3, qpns },
            Record::Rts { generation: 0 },
            Record::Rts { generation: 9 },
            Record::Failed { generation: 1 },
            Record::Applied {
                generation: 1,
                qp: 1,
                of: 1,
                seq: 0,
            },
            Record::Applied {
                generation: u32::MAX,
                qp: 8,
                of: 8,
                seq: u64::MAX,
            },
            Record::Withheld { generation: 3 },
        ] {
            let b = r.encode();
            assert!(Record::is_verbs(&b));
            assert_eq!(Record::decode(&b), Ok(r));
        }
        // The TCP link-state records are not verbs records.
        let mut ls = [0u8; 32];
        ls[..4].copy_from_slice(b"SYLS");
        assert!(!Record::is_verbs(&ls));
    }

    #[test]
    fn bad_records_are_named() {
        let mut qpns = [0u32; MAX_QPS];
        qpns[..2].copy_from_slice(&[5, 6]);
        let good = Record::Qpns { n: 2, qpns }.encode();
        let bad = |f: &dyn Fn(&mut [u8; 32])| {
            let mut b = good;
            f(&mut b);
            Record::decode(&b).unwrap_err()
        };
        assert_eq!(
            bad(&|b| b[0] = b'X'),
            RecordError::Magic {
                got: [b'X', b'Y', b'V']
            }
        );
        assert_eq!(bad(&|b| b[3] = 6), RecordError::Kind { kind: 6 });
        let mut w = Record::Withheld { generation: 2 }.encode();
        w[8] = 1;
        assert_eq!(Record::decode(&w), Err(RecordError::Trailing { at: 8 }));
        assert_eq!(bad(&|b| b[4] = 1), RecordError::QpCount { n: 1 });
        assert_eq!(bad(&|b| b[4] = 10), RecordError::QpCount { n: 10 });
        assert_eq!(bad(&|b| b[8..11].fill(0)), RecordError::Qpn { index: 1 });
        assert_eq!(bad(&|b| b[31] = 1), RecordError::Trailing { at: 31 });
        let mut rts = Record::Rts { generation: 1 }.encode();
        rts[8] = 1;
        assert_eq!(Record::decode(&rts), Err(RecordError::Trailing { at: 8 }));
        // Receipts: the data QP within 1..=of, of within 1..=8, nothing
        // after the receipt.
        let applied = Record::Applied {
            generation: 3,
            qp: 2,
            of: 4,
            seq: u64::MAX - 1,
        }
        .encode();
        let bad_applied = |f: &dyn Fn(&mut [u8; 32])| {
            let mut b = applied;
            f(&mut b);
            Record::decode(&b).unwrap_err()
        };
        assert_eq!(
            bad_applied(&|b| b[8] = 0),
            RecordError::DataQp { qp: 0, of: 4 }
        );
        assert_eq!(
            bad_applied(&|b| b[8] = 5),
            RecordError::DataQp { qp: 5, of: 4 }
        );
        assert_eq!(
            bad_applied(&|b| b[9] = 0),
            RecordError::DataQp { qp: 2, of: 0 }
        );
        assert_eq!(
            bad_applied(&|b| b[9] = 9),
            RecordError::DataQp { qp: 2, of: 9 }
        );
        assert_eq!(
            bad_applied(&|b| b[18] = 1),
            RecordError::Trailing { at: 18 }
        );
    }

    #[test]
    fn bootstrap_cards_are_pe_cards() {
        let pe = pe_card();
        let bytes = pe.to_vec().unwrap();
        assert_eq!(parse_pe_card(&bytes), Ok(pe));
        // A card with QPs is not what the bootstrap carries.
        let with_qps = pair_card(&pe, &[0x11, 0x12], 42, 1, 0);
        assert!(matches!(
            parse_pe_card(&with_qps.to_vec().unwrap()),
            Err(CardError::Field {
                field: "qp count",
                value: 2,
                ..
            })
        ));
        assert!(matches!(
            parse_pe_card(&bytes[..10]),
            Err(CardError::Truncated { .. })
        ));
        // The pair card's PSNs are the ones the sender's driver starts with.
        assert_eq!(with_qps.qps()[1].qpn, 0x12);
        assert_eq!(with_qps.qps()[1].psn, psn_for(42, 1, 0, 1, 0));
    }

    proptest! {
        /// Arbitrary bytes with the verbs magic decode to an error or to a
        /// record that encodes to the same bytes; nothing panics.
        #[test]
        fn arbitrary_records_never_panic(tail in proptest::array::uniform29(any::<u8>())) {
            let mut b = [0u8; 32];
            b[..3].copy_from_slice(b"SYV");
            b[3..].copy_from_slice(&tail);
            if let Ok(r) = Record::decode(&b) {
                prop_assert_eq!(r.encode(), b);
            }
        }
    }
}

/// Two contexts in two threads of one process, NEAR to each other, with TCP
/// over loopback and the verbs driver on the fake HCA (one fabric shared by
/// both): the wiring end to end, without RDMA hardware.
#[cfg(test)]
mod fake_pair_test {
    use std::{
        net::SocketAddr,
        sync::{
            Arc,
            atomic::{AtomicU32, Ordering},
            mpsc::{Receiver, Sender, channel},
        },
        time::{Duration, Instant},
    };

    use switchyard_core::{
        class::NO_SWITCH,
        route::{Downgrade, PolicyConfig},
        trace::TraceRecord,
    };
    use switchyard_shm::HugePages;
    use switchyard_socket::TcpConfig;
    use switchyard_verbs::fake::Fabric;

    use super::*;
    use crate::context::{PeerInfo, Progress, Setup, Sym, TCP, TRACE_RECORDS};

    const N: u64 = 64;

    enum Msg {
        Addrs(Vec<SocketAddr>),
        Card(Option<Vec<u8>>),
    }

    /// How a test pair is set up.
    #[derive(Debug, Clone, Copy, Default)]
    struct Opts {
        /// Flip a byte of the card received from the other PE before it is
        /// attached.
        corrupt: bool,
        /// The two PEs are on different switches (ROUTED), not NEAR.
        routed: bool,
        /// `verbs_atomics`.
        atomics: VerbsAtomics,
        /// `verbs_routed = off`.
        no_routed: bool,
        /// Clear the atomics flag of the card received from the other PE
        /// (its device does no RDMA atomics).
        peer_without_atomics: bool,
    }

    /// PE `me` of a NEAR (or, with `opts.routed`, ROUTED) pair.
    fn context(
        job: u64,
        me: u32,
        fabric: &Fabric,
        chans: (&Sender<Msg>, &Receiver<Msg>),
        opts: Opts,
    ) -> Context {
        context_with(job, me, fabric, chans, opts, VerbsConfig::default())
    }

    /// [`context`] with the verbs driver's settings `vcfg`.
    fn context_with(
        job: u64,
        me: u32,
        fabric: &Fabric,
        (tx, rx): (&Sender<Msg>, &Receiver<Msg>),
        opts: Opts,
        vcfg: VerbsConfig,
    ) -> Context {
        let corrupt = opts.corrupt;
        let wait = Duration::from_secs(20);
        let setup = Setup {
            job_id: job,
            me,
            n_pes: 2,
            heap_size: 1 << 20,
            huge_pages: HugePages::Off,
            numa_node: None,
            op_timeout: wait,
            progress: Progress::Adaptive { spin: 64 },
            policy: PolicyConfig {
                downgrade: [Downgrade::AllowAndCount; 5],
                ..PolicyConfig::default()
            },
            connect_timeout: wait,
            shm_peers: true,
            symmetric_data: None,
            verbs_atomics: opts.atomics,
            verbs_routed: !opts.no_routed,
        };
        let seg = Context::create_segment(&setup).expect("segment");
        let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
        let tcfg = TcpConfig {
            job_id: job,
            cookie: *b"verbs-fake-pair!",
            me,
            n_pes: 2,
            listen: vec!["127.0.0.1".parse().expect("ip")],
            detection_window: Duration::from_secs(10),
            give_up: Duration::from_secs(20),
            ..TcpConfig::default()
        };
        #[allow(unsafe_code)]
        // SAFETY: the segment's heap mapping, valid for `len` bytes; the
        // segment moves into the context with the driver and outlives it.
        let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
        tx.send(Msg::Addrs(tcp.local_addrs().to_vec())).unwrap();
        let Ok(Msg::Addrs(other)) = rx.recv_timeout(wait) else {
            panic!("no addresses from the other PE");
        };
        let mine = tcp.local_addrs().to_vec();
        let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
            node: 1000 + u64::from(pe),
            switch: if opts.routed { 5 + pe } else { 5 },
            tree: NO_SWITCH,
            shm: None,
            tcp,
        };
        let peers = if me == 0 {
            [info(0, mine), info(1, other)]
        } else {
            [info(0, other), info(1, mine)]
        };
        let mut ctx = Context::from_parts(setup, seg, &peers, Some(tcp)).expect("context");
        let class = if opts.routed {
            PathClass::Routed
        } else {
            PathClass::Near
        };
        assert_eq!(ctx.class(1 - me), Some(class));
        let (h, l) = ctx.shm.local_heap();
        #[allow(unsafe_code)]
        // SAFETY: the context's own heap; the driver is dropped with the
        // context, before its segment.
        let drv = unsafe { VerbsDriver::new_fake(vcfg, me, 2, job, h, l, fabric) }
            .expect("fake verbs driver");
        tx.send(Msg::Card(pe_card_bytes(Some(&drv)))).unwrap();
        let Ok(Msg::Card(mut card)) = rx.recv_timeout(wait) else {
            panic!("no card from the other PE");
        };
        if corrupt && let Some(c) = card.as_mut() {
            c[5] = 9; // the link layer
        }
        if opts.peer_without_atomics
            && let Some(c) = card.as_mut()
        {
            c[2] &= !2; // the flags: atomics
        }
        let mut cards = vec![None, None];
        cards[(1 - me) as usize] = card;
        cards[me as usize] = pe_card_bytes(Some(&drv));
        ctx.attach_verbs(drv, job, &cards);
        let up = ctx.verbs_connect(wait);
        let want = !(corrupt || (opts.routed && opts.no_routed));
        assert_eq!(up, u32::from(want), "verbs links up at init");
        ctx
    }

    /// Waits (bounded: 20 s) until the pair's `step` counter reaches `want`,
    /// without calling the library.
    fn wait_for_step(step: &AtomicU32, want: u32) {
        let start = Instant::now();
        while step.load(Ordering::SeqCst) < want {
            assert!(start.elapsed() < Duration::from_secs(20), "step {want}");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// What each PE of a pair runs: its context, the shared fake fabric,
    /// the pair's `done` counter (for [`close_together`]) and a `step`
    /// counter the script may use to hand off between the two PEs.
    type Script = fn(Context, &Fabric, &AtomicU32, &AtomicU32) -> Context;

    /// Runs `script` as PE 1 (a thread) and PE 0 (this thread) of a pair
    /// on one fake fabric, set up with `opts` and the driver settings
    /// `vcfg`; `tag` makes the job id unique among this process's tests.
    /// Returns the fabric, for checks after both PEs are done.
    fn run_pair(tag: u64, opts: Opts, vcfg: VerbsConfig, script: Script) -> Fabric {
        let job = tag << 32 ^ u64::from(std::process::id()) << 8;
        let fabric = Fabric::new();
        let (tx0, rx1) = channel();
        let (tx1, rx0) = channel();
        let f1 = fabric.clone();
        let done = Arc::new(AtomicU32::new(0));
        let step = Arc::new(AtomicU32::new(0));
        let (done1, step1, vcfg1) = (Arc::clone(&done), Arc::clone(&step), vcfg.clone());
        let pe1 = std::thread::spawn(move || {
            let ctx = context_with(job, 1, &f1, (&tx1, &rx1), opts, vcfg1);
            drop(script(ctx, &f1, &done1, &step1));
        });
        let ctx = context_with(job, 0, &fabric, (&tx0, &rx0), opts, vcfg);
        let ctx = script(ctx, &fabric, &done, &step);
        pe1.join().expect("PE 1");
        drop(ctx);
        fabric
    }

    fn verbs_ops(ctx: &Context) -> u64 {
        ctx.stats().ops[VERBS.index()]
    }

    /// Waits (bounded) until this PE's verbs link to the other is up again,
    /// progressing and quieting (which raises the bit) meanwhile.
    fn wait_up(ctx: &mut Context) {
        let start = Instant::now();
        while ctx.verbs_status().peers_up == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the verbs link did not come back: {:?}",
                ctx.verbs_status()
            );
            ctx.poll_once();
            ctx.quiet().expect("quiet");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(256).expect("alloc");
        let near = PathClass::Near.index();
        // 1. Put, get and atomics go over verbs.
        if me == 0 {
            let (v0, t0) = (verbs_ops(&ctx), ctx.stats().ops[TCP.index()]);
            ctx.put(&sym, 0, &[11, 12, 13], 1).unwrap();
            let mut g = [0u64; 3];
            ctx.get(&sym, 0, &mut g, 1).unwrap();
            assert_eq!(g, [11, 12, 13]);
            assert_eq!(ctx.fetch_add(&sym, 10, 5, 1).unwrap(), 0);
            assert_eq!(ctx.fetch_add(&sym, 10, 1, 1).unwrap(), 5);
            assert_eq!(ctx.compare_swap(&sym, 10, 6, 7, 1).unwrap(), 6);
            ctx.quiet().unwrap();
            let s = ctx.stats();
            assert_eq!(verbs_ops(&ctx) - v0, 5, "{s:?}");
            assert_eq!(s.ops[TCP.index()], t0, "nothing went over TCP");
            assert_eq!(s.downgrades[near], 0);
            let mut recs = [TraceRecord::default(); TRACE_RECORDS];
            let n = ctx.trace().snapshot(&mut recs);
            let last = recs[n - 1];
            assert_eq!((last.dst, last.transport), (1, VERBS.index() as u8));
            let st = ctx.verbs_status();
            assert!(st.in_use && st.peers_up == 1, "{st:?}");
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; 11];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            assert_eq!((v[0], v[1], v[2], v[10]), (11, 12, 13, 7));
        }
        ctx.barrier_all().unwrap();
        // 2. The link fails: the bit clears, what was in flight is replayed
        //    over TCP once, later operations go over TCP, in order.
        if me == 0 {
            fabric.break_links();
            let t0 = ctx.stats().ops[TCP.index()];
            for i in 0..N {
                ctx.put(&sym, 100 + i as usize, &[i + 1], 1).unwrap();
                ctx.put(&sym, 50, &[i + 1], 1).unwrap();
            }
            ctx.quiet().unwrap();
            let s = ctx.stats();
            assert!(s.verbs_failovers >= 1, "{s:?}");
            assert!(s.verbs_replays >= 1, "{s:?}");
            assert!(s.ops[TCP.index()] > t0, "{s:?}");
            assert!(s.downgrades[near] >= 1, "{s:?}");
            let mut recs = [TraceRecord::default(); TRACE_RECORDS];
            let n = ctx.trace().snapshot(&mut recs);
            assert!(
                recs[..n]
                    .iter()
                    .any(|r| r.transport == TCP.index() as u8
                        && r.flags & TraceRecord::DOWNGRADED != 0),
                "a downgraded NEAR put over TCP is traced"
            );
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; N as usize];
            ctx.read_local(&sym, 100, &mut v).unwrap();
            for (i, x) in v.iter().enumerate() {
                assert_eq!(*x, i as u64 + 1, "slot {i}");
            }
            let mut last = [0u64];
            ctx.read_local(&sym, 50, &mut last).unwrap();
            assert_eq!(last[0], N, "an older put (a replay) overtook a newer one");
        }
        ctx.barrier_all().unwrap();
        // 3. Healed: both sides rebuild, the bit is set again, verbs again.
        if me == 0 {
            fabric.heal();
        }
        ctx.barrier_all().unwrap();
        wait_up(&mut ctx);
        ctx.barrier_all().unwrap();
        if me == 0 {
            let v0 = verbs_ops(&ctx);
            ctx.put(&sym, 60, &[99], 1).unwrap();
            assert_eq!(ctx.fetch_add(&sym, 61, 1, 1).unwrap(), 0);
            ctx.quiet().unwrap();
            assert_eq!(verbs_ops(&ctx) - v0, 2, "{:?}", ctx.stats());
            assert!(ctx.verbs.as_ref().unwrap().drv.stats().rebuilds >= 1);
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; 2];
            ctx.read_local(&sym, 60, &mut v).unwrap();
            assert_eq!(v, [99, 1]);
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    /// Quiet, then keep progressing (acks, verbs records) until the other
    /// side is quiet too: nothing of either side is in flight when the other
    /// closes (an operation in flight to a closed peer is reported, not
    /// dropped).
    fn close_together(ctx: &mut Context, done: &AtomicU32) {
        ctx.quiet().unwrap();
        done.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        while done.load(Ordering::SeqCst) < 2 {
            assert!(start.elapsed() < Duration::from_secs(20), "the other PE");
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    #[test]
    fn near_traffic_goes_over_verbs_fails_over_to_tcp_and_comes_back() {
        // NIC atomics: this test fails atomics over verbs over too.
        let o = Opts {
            atomics: VerbsAtomics::Nic,
            ..Opts::default()
        };
        run_pair(0x7e, o, VerbsConfig::default(), script);
    }

    /// The known gap of the replay without receipts, made deterministic:
    /// PE 0 puts data, fences and puts a flag over verbs; both land at
    /// PE 1 but the flag's ack is lost (an in-doubt WRITE), so PE 0's link
    /// fails with both puts in flight. Before PE 0's context acts on the
    /// failure, PE 1 sees the flag and writes newer data, as the flag
    /// allows. Then PE 0 fails over: its receipts handshake shows both puts
    /// landed, so neither is replayed and PE 1's newer data stays. (A
    /// blind replay over TCP writes the old data over it.)
    fn gap_script(
        mut ctx: Context,
        fabric: &Fabric,
        done: &AtomicU32,
        step: &AtomicU32,
    ) -> Context {
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
        ctx.barrier_all().unwrap();
        // The barrier's last put may still be in a batch: post it (the
        // other PE waits for it while this one waits without progress).
        ctx.quiet().unwrap();
        if me == 1 {
            step.store(1, Ordering::SeqCst);
            // Wait for the flag reading the heap only: no progress, so
            // nothing of PE 0's failover can be applied meanwhile.
            let start = Instant::now();
            let mut flag = [0u64];
            while flag[0] != 1 {
                assert!(start.elapsed() < Duration::from_secs(20), "no flag");
                std::thread::sleep(Duration::from_micros(50));
                ctx.read_local(&sym, 8, &mut flag).unwrap();
            }
            let mut data = [0u64];
            ctx.read_local(&sym, 0, &mut data).unwrap();
            assert_eq!(data[0], 1, "the fence: the data landed before the flag");
            ctx.write_local(&sym, 0, &[2]).unwrap();
            step.store(2, Ordering::SeqCst);
        } else {
            wait_for_step(step, 1);
            let failovers = ctx.stats().verbs_failovers;
            fabric.lose_ack_after(1); // the data is acked, the flag is not
            ctx.put(&sym, 0, &[1], 1).unwrap();
            ctx.fence().unwrap();
            ctx.put(&sym, 8, &[1], 1).unwrap();
            // Post the batch (both land, the flag's ack is lost) without
            // letting the context act on the failure yet.
            let v = ctx.verbs.as_mut().expect("verbs");
            v.drv.progress(CoreInstant::default());
            assert_eq!(v.drv.state(1), LinkState::Error);
            wait_for_step(step, 2);
            ctx.quiet().unwrap();
            let s = ctx.stats();
            assert_eq!(s.verbs_failovers, failovers + 1, "{s:?}");
            let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
            assert_eq!(d.receipts_settled, 2, "both puts known landed: {d:?}");
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut data = [0u64];
            ctx.read_local(&sym, 0, &mut data).unwrap();
            assert_eq!(
                data[0], 2,
                "a replay of an in-doubt put overwrote the newer data"
            );
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    /// PE 0's put lands but its ack is lost, and no QP reports its last
    /// WQE, so PE 1 cannot tell which of PE 0's puts landed: after its
    /// collection deadline it says so ([`Record::Withheld`]) and PE 0
    /// reports the put lost at once, instead of holding every operation
    /// to PE 1 until its op timeout (20 s here).
    fn withheld_script(
        mut ctx: Context,
        fabric: &Fabric,
        done: &AtomicU32,
        step: &AtomicU32,
    ) -> Context {
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
        ctx.barrier_all().unwrap();
        ctx.quiet().unwrap();
        if me == 1 {
            step.store(1, Ordering::SeqCst);
            wait_for_step(step, 2); // no calls until PE 0's put is out
            // Progress (PE 0's Failed record, the collection deadline)
            // without sending PE 0 anything that could be in doubt too.
            let start = Instant::now();
            while step.load(Ordering::SeqCst) < 3 {
                assert!(start.elapsed() < Duration::from_secs(20), "PE 0's quiet");
                ctx.poll_once();
                std::thread::sleep(Duration::from_micros(100));
            }
        } else {
            wait_for_step(step, 1);
            fabric.suppress_last_wqe(true);
            fabric.lose_ack_after(0); // the put lands, its ack is lost
            ctx.put(&sym, 0, &[7], 1).unwrap();
            step.store(2, Ordering::SeqCst);
            let start = Instant::now();
            let r = ctx.quiet();
            let took = start.elapsed();
            fabric.suppress_last_wqe(false);
            assert!(
                matches!(r, Err(super::super::Error::ReplayLost { pe: 1, ops }) if ops >= 1),
                "the put in doubt was not reported lost: {r:?}"
            );
            assert!(
                took < Duration::from_secs(10),
                "PE 0 waited {took:?} for receipts PE 1 had withheld (op timeout 20 s)"
            );
            ctx.quiet().expect("reported once");
            step.store(3, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
            assert!(d.receipts_withheld >= 1, "{d:?}");
            let mut v = [0u64];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            assert_eq!(v[0], 7, "the put landed (reported lost: in doubt)");
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    #[test]
    fn withheld_receipts_are_reported_at_once() {
        run_pair(
            0x6b,
            Opts::default(),
            VerbsConfig::default(),
            withheld_script,
        );
    }

    #[test]
    fn a_flag_acted_on_before_the_failover_is_not_undone_by_a_replay() {
        run_pair(0x7d, Opts::default(), VerbsConfig::default(), gap_script);
    }

    /// PE 0's put lands but its ack is lost (in doubt), and one of PE 1's
    /// receipts records is lost on the way (a control record the TCP
    /// driver could not queue is not resent by it): PE 0 asks again and
    /// settles, instead of holding its operations to PE 1 until the op
    /// timeout and reporting the put lost.
    fn lost_receipt_script(
        mut ctx: Context,
        fabric: &Fabric,
        done: &AtomicU32,
        step: &AtomicU32,
    ) -> Context {
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
        ctx.barrier_all().unwrap();
        ctx.quiet().unwrap();
        if me == 1 {
            // Both answers PE 1 may give without being asked again (when
            // it finds the failure itself, and to PE 0's first question).
            let v = ctx.verbs.as_mut().expect("verbs");
            v.drop_applied = 2 * u32::from(v.drv.params().data_qps);
            step.store(1, Ordering::SeqCst);
            wait_for_step(step, 2);
        } else {
            wait_for_step(step, 1);
            fabric.lose_ack_after(0);
            ctx.put(&sym, 0, &[7], 1).unwrap();
            let v = ctx.verbs.as_mut().expect("verbs");
            v.drv.progress(CoreInstant::default());
            assert_eq!(v.drv.state(1), LinkState::Error);
            step.store(2, Ordering::SeqCst);
            let start = Instant::now();
            ctx.quiet().expect("quiet: the put is known landed");
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the receipts took {:?}",
                start.elapsed()
            );
            let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
            assert_eq!(d.receipts_settled, 1, "{d:?}");
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut data = [0u64];
            ctx.read_local(&sym, 0, &mut data).unwrap();
            assert_eq!(data[0], 7);
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    #[test]
    fn a_lost_receipts_record_is_asked_for_again() {
        run_pair(
            0x7a,
            Opts::default(),
            VerbsConfig::default(),
            lost_receipt_script,
        );
    }

    /// PE 0's device dies with a put in doubt (posted unsignaled, landed
    /// at PE 1, not known complete): `quiet` must not return while that
    /// put waits for PE 1's receipts, even though verbs is never used
    /// again. PE 1 stays outside the library until PE 0 is in its quiet,
    /// and answers only some time later.
    fn fatal_script(
        mut ctx: Context,
        fabric: &Fabric,
        done: &AtomicU32,
        step: &AtomicU32,
    ) -> Context {
        let _ = fabric;
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
        ctx.barrier_all().unwrap();
        ctx.quiet().unwrap();
        if me == 1 {
            step.store(1, Ordering::SeqCst);
            wait_for_step(step, 2);
            // PE 0 is in its quiet now: answer (in the barrier) later.
            std::thread::sleep(Duration::from_millis(300));
        } else {
            wait_for_step(step, 1);
            ctx.put(&sym, 0, &[5], 1).unwrap();
            ctx.verbs.as_ref().expect("verbs").drv.fake_device_fatal();
            let start = Instant::now();
            while ctx.verbs_status().in_use {
                assert!(start.elapsed() < Duration::from_secs(20), "no fatal");
                ctx.poll_once();
            }
            assert!(ctx.verbs_holds(1), "the put is in doubt");
            step.store(2, Ordering::SeqCst);
            ctx.quiet().unwrap();
            let v = ctx.verbs.as_ref().expect("verbs");
            assert!(
                !v.drv.awaits_receipts(1) && !ctx.verbs_holds(1),
                "quiet returned with a put still waiting for its receipts"
            );
            assert_eq!(v.drv.stats().receipts_settled, 1, "{:?}", v.drv.stats());
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut data = [0u64];
            ctx.read_local(&sym, 0, &mut data).unwrap();
            assert_eq!(data[0], 5);
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    #[test]
    fn quiet_waits_for_receipts_after_the_device_died() {
        run_pair(0x7b, Opts::default(), VerbsConfig::default(), fatal_script);
    }

    /// PE 0's link fails with a put in flight that the driver has no room
    /// to keep for replay (its replay list shrunk to nothing): the put is
    /// lost, and the next `quiet` must say so ([`Error::ReplayLost`]),
    /// not take the driver's report for "replays pending" and succeed.
    fn no_room_script(
        mut ctx: Context,
        fabric: &Fabric,
        done: &AtomicU32,
        _: &AtomicU32,
    ) -> Context {
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
        ctx.barrier_all().unwrap();
        ctx.quiet().unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            ctx.verbs
                .as_mut()
                .expect("verbs")
                .drv
                .fake_limit_replays(1, 0);
            fabric.break_links();
            ctx.put(&sym, 0, &[5], 1).unwrap();
            let r = ctx.quiet();
            fabric.heal();
            assert!(
                matches!(r, Err(super::super::Error::ReplayLost { pe: 1, ops }) if ops >= 1),
                "the lost put was not reported: {r:?}"
            );
            ctx.quiet().expect("reported once");
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    #[test]
    fn a_put_with_no_room_to_replay_fails_the_next_quiet() {
        run_pair(
            0x71,
            Opts::default(),
            VerbsConfig::default(),
            no_room_script,
        );
    }

    /// PE 1 computes outside the library (no calls at all) while PE 0
    /// puts far more than PE 1's shared receive queue holds (16): PE 1's
    /// progress thread re-posts the receives, so PE 0's puts complete (over
    /// verbs, no failover) instead of waiting on RNR until PE 1 calls in.
    fn idle_target_script(
        mut ctx: Context,
        _: &Fabric,
        done: &AtomicU32,
        step: &AtomicU32,
    ) -> Context {
        const PUTS: u64 = 300;
        let me = ctx.my_pe();
        // As init starts it for `progress = adaptive`.
        let clock = ctx.clock;
        ctx.tcp
            .as_mut()
            .expect("tcp")
            .start(
                progress::ThreadMode::Adaptive {
                    tick: Duration::from_millis(1),
                },
                clock,
                None,
                me,
            )
            .expect("progress thread");
        let sym: Sym<u64> = ctx.alloc(64).expect("alloc");
        ctx.barrier_all().unwrap();
        ctx.quiet().unwrap(); // the barrier's last put is out
        let start = Instant::now();
        if me == 1 {
            step.store(1, Ordering::SeqCst);
            while step.load(Ordering::SeqCst) < 2 {
                assert!(start.elapsed() < Duration::from_secs(20), "PE 0's puts");
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            while step.load(Ordering::SeqCst) < 1 {
                assert!(start.elapsed() < Duration::from_secs(20), "PE 1");
                std::thread::sleep(Duration::from_micros(50));
            }
            let (v0, t0) = (verbs_ops(&ctx), ctx.stats().ops[TCP.index()]);
            for i in 0..PUTS {
                ctx.put(&sym, (i % 64) as usize, &[i + 1], 1).unwrap();
            }
            ctx.quiet().unwrap();
            let s = ctx.stats();
            assert!(verbs_ops(&ctx) - v0 >= PUTS, "over verbs: {s:?}");
            assert_eq!(s.ops[TCP.index()], t0, "nothing over TCP: {s:?}");
            assert_eq!(s.verbs_failovers, 0, "{s:?}");
            step.store(2, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; 64];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            for (i, x) in v.iter().enumerate() {
                let i = i as u64;
                let last = i + 64 * ((PUTS - 1 - i) / 64); // the last put there
                assert_eq!(*x, last + 1, "slot {i}");
            }
            // Every put left its receipt (the last ones may still be in
            // the receive CQ: progress polls them).
            let start = Instant::now();
            while ctx.verbs.as_ref().expect("verbs").drv.stats().receipts < PUTS {
                assert!(start.elapsed() < Duration::from_secs(10), "receipts");
                ctx.poll_once();
            }
        }
        ctx.barrier_all().unwrap();
        close_together(&mut ctx, done);
        ctx
    }

    #[test]
    fn the_progress_thread_reposts_receives_while_the_target_computes() {
        let cfg = VerbsConfig {
            srq_depth: Some(16),
            ..VerbsConfig::default()
        };
        let fabric = run_pair(0x7c, Opts::default(), cfg, idle_target_script);
        assert!(fabric.rnr_naks() > 0, "PE 1's SRQ ran dry at times");
    }

    /// A bad verbs card from the bootstrap is a typed error in the
    /// warnings, never a panic: that peer stays on TCP (counted as a NEAR
    /// downgrade) and the status says no verbs link is up.
    #[test]
    fn a_bad_verbs_card_leaves_the_peer_on_tcp() {
        let job = 0x7f_0000_0000 ^ u64::from(std::process::id()) << 8;
        let fabric = Fabric::new();
        let (tx0, rx1) = channel();
        let (tx1, rx0) = channel();
        let f1 = fabric.clone();
        let done = Arc::new(AtomicU32::new(0));
        let done1 = Arc::clone(&done);
        let run = move |mut ctx: Context, done: &AtomicU32| {
            let me = ctx.my_pe();
            let w = ctx.warnings().join("\n");
            assert!(
                w.contains("verbs card is refused") && w.contains("link layer"),
                "{w}"
            );
            let st = ctx.verbs_status();
            assert!(!st.in_use && st.peers_up == 0, "{st:?}");
            let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
            ctx.put(&sym, 0, &[u64::from(me) + 1], 1 - me).unwrap();
            ctx.barrier_all().unwrap();
            let mut v = [0u64];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            assert_eq!(v[0], u64::from(1 - me) + 1);
            let s = ctx.stats();
            assert_eq!(s.ops[VERBS.index()], 0, "{s:?}");
            assert!(s.downgrades[PathClass::Near.index()] >= 1, "{s:?}");
            close_together(&mut ctx, done);
        };
        let pe1 = std::thread::spawn(move || {
            let o = Opts {
                corrupt: true,
                ..Opts::default()
            };
            run(context(job, 1, &f1, (&tx1, &rx1), o), &done1);
        });
        let o = Opts {
            corrupt: true,
            ..Opts::default()
        };
        run(context(job, 0, &fabric, (&tx0, &rx0), o), &done);
        pe1.join().expect("PE 1");
    }

    /// Runs `script` on both PEs of a pair set up as `opts` on a fake HCA
    /// reporting `cap`, then closes them together.
    fn pair<F>(opts: Opts, cap: AtomicCap, script: F)
    where
        F: Fn(&mut Context) + Send + Clone + 'static,
    {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = u64::from(NEXT.fetch_add(1, Ordering::Relaxed));
        let job = (0x90_0000_0000 + (n << 32)) ^ u64::from(std::process::id()) << 8;
        let fabric = Fabric::new();
        fabric.set_atomic_cap(cap);
        let (tx0, rx1) = channel();
        let (tx1, rx0) = channel();
        let f1 = fabric.clone();
        let done = Arc::new(AtomicU32::new(0));
        let done1 = Arc::clone(&done);
        let script1 = script.clone();
        let pe1 = std::thread::spawn(move || {
            let mut ctx = context(job, 1, &f1, (&tx1, &rx1), opts);
            script1(&mut ctx);
            close_together(&mut ctx, &done1);
        });
        let mut ctx = context(job, 0, &fabric, (&tx0, &rx0), opts);
        script(&mut ctx);
        close_together(&mut ctx, &done);
        pe1.join().expect("PE 1");
    }

    fn tcp_ops(ctx: &Context) -> u64 {
        ctx.stats().ops[TCP.index()]
    }

    fn last_trace(ctx: &Context) -> TraceRecord {
        let mut recs = [TraceRecord::default(); TRACE_RECORDS];
        let n = ctx.trace().snapshot(&mut recs);
        recs[n - 1]
    }

    /// Both PEs add to a word of PE 1: PE 1's adds are its own (CPU
    /// atomics), PE 0's remote. With NIC atomics allowed they go over
    /// verbs, else over TCP (counted as `cpu_atomics`, traced with
    /// `CPU_ATOMIC`, not downgrades); puts stay on verbs either way, and
    /// no update is lost.
    fn atomics_script(expect_nic: bool) -> impl Fn(&mut Context) + Send + Clone + 'static {
        move |ctx: &mut Context| {
            const ADDS: u64 = 100;
            let me = ctx.my_pe();
            let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
            let st = ctx.verbs_status();
            assert_eq!((st.peers_up, st.nic_atomics), (1, expect_nic), "{st:?}");
            assert!(!ctx.verbs_atomics_reason().is_empty());
            let (v0, t0, s0) = (verbs_ops(ctx), tcp_ops(ctx), ctx.stats());
            let mut olds = Vec::new();
            for _ in 0..ADDS {
                olds.push(ctx.fetch_add(&sym, 0, 1, 1).unwrap());
            }
            ctx.add(&sym, 1, 2, 1).unwrap();
            if me == 0 {
                let (dv, dt) = (verbs_ops(ctx) - v0, tcp_ops(ctx) - t0);
                let s = ctx.stats();
                let last = last_trace(ctx);
                if expect_nic {
                    assert_eq!((dv, dt), (ADDS + 1, 0), "{s:?}");
                    assert_eq!(s.cpu_atomics, 0, "{s:?}");
                    assert_eq!(last.transport, VERBS.index() as u8);
                } else {
                    assert_eq!((dv, dt), (0, ADDS + 1), "{s:?}");
                    assert_eq!(s.cpu_atomics - s0.cpu_atomics, ADDS + 1, "{s:?}");
                    assert_eq!(last.transport, TCP.index() as u8);
                    assert_ne!(last.flags & TraceRecord::CPU_ATOMIC, 0, "{last:?}");
                }
                assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
                assert_eq!(s.downgrades, s0.downgrades, "not downgrades");
                // A put still goes over verbs.
                let v1 = verbs_ops(ctx);
                ctx.put(&sym, 3, &[7], 1).unwrap();
                assert_eq!(verbs_ops(ctx) - v1, 1);
            } else {
                assert_eq!(ctx.stats().cpu_atomics, 0, "its own atomics are local");
            }
            // Old values are increasing and distinct on each PE.
            assert!(olds.windows(2).all(|w| w[0] < w[1]), "{olds:?}");
            ctx.barrier_all().unwrap();
            if me == 1 {
                let mut v = [0u64; 4];
                ctx.read_local(&sym, 0, &mut v).unwrap();
                assert_eq!((v[0], v[1], v[3]), (2 * ADDS, 4, 7), "an update was lost");
            }
            ctx.barrier_all().unwrap();
        }
    }

    /// An HCA-only device with `verbs_atomics = auto`: atomics to the NEAR
    /// peer go over TCP (the target's CPU), coherent with its own.
    #[test]
    fn hca_only_atomics_go_over_tcp_with_auto() {
        pair(Opts::default(), AtomicCap::Hca, atomics_script(false));
    }

    /// `verbs_atomics = nic` forces NIC atomics on an HCA-only device.
    #[test]
    fn nic_forces_atomics_over_verbs() {
        let o = Opts {
            atomics: VerbsAtomics::Nic,
            ..Opts::default()
        };
        pair(o, AtomicCap::Hca, atomics_script(true));
    }

    /// A peer whose device does no RDMA atomics: even `nic` sends atomics
    /// over TCP (the driver would refuse them).
    #[test]
    fn a_peer_without_rdma_atomics_gets_them_over_tcp() {
        let o = Opts {
            atomics: VerbsAtomics::Nic,
            peer_without_atomics: true,
            ..Opts::default()
        };
        pair(o, AtomicCap::Global, atomics_script(false));
    }

    /// A device with global atomics uses them with `auto`; `cpu` never.
    #[test]
    fn global_atomics_with_auto_and_cpu_forced() {
        pair(Opts::default(), AtomicCap::Global, atomics_script(true));
        let o = Opts {
            atomics: VerbsAtomics::Cpu,
            ..Opts::default()
        };
        pair(o, AtomicCap::Global, atomics_script(false));
    }

    /// The decision table of [`nic_atomics`].
    #[test]
    fn nic_atomics_rule() {
        use VerbsAtomics::{Auto, Cpu, Nic};
        for (set, cap, want) in [
            (Auto, AtomicCap::Global, true),
            (Auto, AtomicCap::Hca, false),
            (Auto, AtomicCap::None, false),
            (Nic, AtomicCap::Global, true),
            (Nic, AtomicCap::Hca, true),
            (Nic, AtomicCap::None, false),
            (Cpu, AtomicCap::Global, false),
            (Cpu, AtomicCap::Hca, false),
        ] {
            let (nic, why) = nic_atomics(set, cap);
            assert_eq!(nic, want, "{set:?} {cap:?}");
            assert!(!why.is_empty());
        }
    }

    const LONG: usize = 16 << 10;

    /// ROUTED peers over verbs: long messages take verbs, short ones TCP,
    /// and the ordering rules hold across the two.
    fn routed_script(ctx: &mut Context) {
        let me = ctx.my_pe();
        let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
        let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
        let st = ctx.verbs_status();
        assert_eq!(st.peers_up, 1, "a verbs link to the ROUTED peer: {st:?}");
        // 1. Split by size: short over TCP, long over verbs.
        if me == 0 {
            let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
            ctx.put(&data, 0, &[1u8; 64], 1).unwrap();
            assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
            assert_eq!(last_trace(ctx).class, PathClass::Routed.to_wire());
            ctx.put(&data, 0, &[2u8; LONG], 1).unwrap();
            assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (1, 1));
            let last = last_trace(ctx);
            assert_eq!(last.transport, VERBS.index() as u8);
            assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
            ctx.quiet().unwrap();
        }
        ctx.barrier_all().unwrap();
        // 2. put long (verbs) + fence + flag (TCP): the target sees the
        //    flag only after the data. PE 0 then sleeps without progress:
        //    whatever it left unposted stays so.
        //    Odd rounds start clean: the fence is the verbs driver's own and
        //    the flag put waits for the data (traced ORDERED). Even rounds
        //    start with the barrier's flag put (TCP) pending: the data makes
        //    the peer's writes mixed and the fence is a quiet.
        for round in 1..=4u8 {
            if me == 0 {
                if round % 2 == 1 {
                    ctx.quiet().unwrap();
                }
                let w0 = ctx.stats().ordering_waits;
                ctx.put(&data, 0, &[round; LONG], 1).unwrap();
                ctx.fence().unwrap();
                ctx.put(&flag, 0, &[u64::from(round)], 1).unwrap();
                assert!(ctx.stats().ordering_waits > w0, "{:?}", ctx.stats());
                let ordered = last_trace(ctx).flags & TraceRecord::ORDERED != 0;
                assert_eq!(ordered, round % 2 == 1, "round {round}");
                std::thread::sleep(Duration::from_millis(30));
                ctx.quiet().unwrap();
            } else {
                ctx.wait_until(&flag, 0, crate::context::Cmp::Eq, u64::from(round))
                    .unwrap();
                let mut v = vec![0u8; LONG];
                ctx.read_local(&data, 0, &mut v).unwrap();
                let stale = v.iter().filter(|&&b| b != round).count();
                assert_eq!(stale, 0, "round {round}: the flag overtook the data");
            }
            ctx.barrier_all().unwrap();
        }
        // 3. A get after a long put returns the new bytes, over TCP (short)
        //    and over verbs (long).
        if me == 0 {
            ctx.put(&data, 0, &[7u8; LONG], 1).unwrap();
            let mut g = [0u8; 64];
            ctx.get(&data, 100, &mut g, 1).unwrap();
            assert_eq!(g, [7u8; 64], "a short get (TCP) missed the long put");
        }
        ctx.barrier_all().unwrap();
        // 4. A long get (verbs) after a short put (TCP) while the target
        //    does not progress: it must wait for the put's ack.
        if me == 1 {
            std::thread::sleep(Duration::from_millis(100));
        } else {
            let w0 = ctx.stats().ordering_waits;
            ctx.put(&data, 200, &[9u8; 64], 1).unwrap();
            let mut g = vec![0u8; LONG];
            ctx.get(&data, 0, &mut g, 1).unwrap();
            assert_eq!(
                &g[200..264],
                &[9u8; 64],
                "a long get (verbs) missed the short put"
            );
            assert_eq!(g[0], 7);
            assert!(ctx.stats().ordering_waits > w0);
        }
        ctx.barrier_all().unwrap();
        // 5. A fetching atomic (over TCP: the fake is HCA-only) observes a
        //    long put (verbs) of the word.
        if me == 0 {
            let mut bytes = [0u8; LONG];
            bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
            ctx.put(&data, 0, &bytes, 1).unwrap();
            // The first 8 bytes of `data`, as a word: a Sym<u64> over them.
            let word = Sym::<u64>::new(data.offset, 1, data.owner);
            assert_eq!(ctx.fetch_add(&word, 0, 1, 1).unwrap(), 1000);
        }
        ctx.barrier_all().unwrap();
    }

    /// A ROUTED pair: verbs QPs are connected to it too, long puts go over
    /// verbs and short ones over TCP, a fence between them orders them,
    /// reads see earlier writes over the other transport.
    #[test]
    fn routed_peers_split_by_size_and_stay_ordered() {
        let o = Opts {
            routed: true,
            ..Opts::default()
        };
        pair(o, AtomicCap::Hca, routed_script);
    }

    /// A put's work request is posted before the call returns, not left in
    /// a doorbell batch for the application's next call: PE 1 sees the
    /// bytes while PE 0 makes no further call (it waits on a plain atomic,
    /// as an application computing between calls would). Before the fix,
    /// the put waited in PE 0's batch until PE 0 called in again.
    #[test]
    fn a_put_is_posted_before_the_call_returns() {
        let step = Arc::new(AtomicU32::new(0));
        pair(Opts::default(), AtomicCap::Hca, move |ctx: &mut Context| {
            let a: Sym<u64> = ctx.alloc(8).expect("alloc");
            ctx.barrier_all().unwrap();
            let wait_for = |v: u32| {
                let start = Instant::now();
                while step.load(Ordering::Acquire) < v {
                    assert!(start.elapsed() < Duration::from_secs(10), "step {v}");
                    std::thread::sleep(Duration::from_micros(100));
                }
            };
            if ctx.my_pe() == 0 {
                let v0 = verbs_ops(ctx);
                ctx.put(&a, 0, &[42u64], 1).unwrap();
                assert_eq!(verbs_ops(ctx) - v0, 1, "the put went over verbs");
                step.store(1, Ordering::Release);
                wait_for(2);
            } else {
                wait_for(1);
                let mut w = [0u64];
                ctx.read_local(&a, 0, &mut w).unwrap();
                step.store(2, Ordering::Release);
                assert_eq!(w[0], 42, "the put is still batched at PE 0");
            }
            ctx.barrier_all().unwrap();
        });
    }

    /// `verbs_routed = off`: a ROUTED peer gets no verbs link; its long
    /// messages go over TCP (its first choice then: not a downgrade).
    #[test]
    fn verbs_routed_off_keeps_routed_peers_on_tcp() {
        let o = Opts {
            routed: true,
            no_routed: true,
            ..Opts::default()
        };
        pair(o, AtomicCap::Hca, |ctx: &mut Context| {
            let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
            let st = ctx.verbs_status();
            assert_eq!(st.peers_up, 0, "{st:?}");
            assert!(st.why_not.is_some_and(|w| w.contains("verbs_routed = off")));
            if ctx.my_pe() == 0 {
                let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
                ctx.put(&data, 0, &[3u8; LONG], 1).unwrap();
                assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
            }
            ctx.barrier_all().unwrap();
        });
    }

    /// After init, puts, gets and atomics over the fake verbs fabric (and
    /// the TCP half of a split peer, the ordering waits, fence, quiet and
    /// barriers) allocate nothing on either PE thread. Each pass is run
    /// once to warm up (first-use paths, the fake's queues), then counted.
    fn no_alloc_script(ctx: &mut Context) {
        use crate::test_alloc::{allocations, count_here};
        const ROUNDS: u64 = 200;
        let me = ctx.my_pe();
        let a: Sym<u64> = ctx.alloc(64).expect("alloc");
        let b: Sym<u8> = ctx.alloc(2 * LONG).expect("alloc");
        let src = vec![5u8; LONG];
        let mut dst = vec![0u8; LONG];
        let mut words = [0u64; 8];
        for pass in 0..2 {
            ctx.barrier_all().unwrap();
            let s0 = ctx.stats();
            let before = allocations();
            if pass == 1 {
                count_here(true);
            }
            if me == 0 {
                for i in 0..ROUNDS {
                    ctx.put(&a, 0, &[i], 1).unwrap();
                    ctx.put(&b, 0, &src, 1).unwrap();
                    ctx.get(&a, 0, &mut words, 1).unwrap();
                    ctx.get(&b, 0, &mut dst, 1).unwrap();
                    ctx.fetch_add(&a, 1, 1, 1).unwrap();
                    ctx.compare_swap(&a, 2, i, i + 1, 1).unwrap();
                    ctx.swap(&a, 3, i, 1).unwrap();
                    ctx.add(&a, 4, 1, 1).unwrap();
                    ctx.put_nbi(&b, LONG, &b, 0, LONG, 1).unwrap();
                    ctx.get_nbi(&b, 0, &b, LONG, 64, 1).unwrap();
                    ctx.fence().unwrap();
                    ctx.put(&a, 5, &[i], 1).unwrap();
                    ctx.quiet().unwrap();
                }
            }
            ctx.barrier_all().unwrap();
            if pass == 1 {
                count_here(false);
                let n = allocations() - before;
                assert_eq!(n, 0, "PE {me}: {n} allocations on the data path");
                let s = ctx.stats();
                if me == 0 {
                    // The long puts, long gets and put_nbi went over verbs.
                    let dv = s.ops[VERBS.index()] - s0.ops[VERBS.index()];
                    assert!(dv >= 3 * ROUNDS, "{s:?}");
                }
            }
        }
        if me == 1 {
            // fetch_add and add ran twice per round; the compare-swaps
            // matched in the first pass only.
            let mut v = [0u64; 4];
            ctx.read_local(&a, 1, &mut v).unwrap();
            assert_eq!((v[0], v[1], v[3]), (2 * ROUNDS, ROUNDS, 2 * ROUNDS));
        }
        ctx.barrier_all().unwrap();
    }

    /// NEAR with NIC atomics: everything over verbs.
    #[test]
    fn verbs_data_path_does_not_allocate() {
        let o = Opts {
            atomics: VerbsAtomics::Nic,
            ..Opts::default()
        };
        pair(o, AtomicCap::Hca, no_alloc_script);
    }

    /// ROUTED with atomics to the CPU: split over verbs and TCP, with the
    /// ordering waits.
    #[test]
    fn split_data_path_does_not_allocate() {
        let o = Opts {
            routed: true,
            ..Opts::default()
        };
        pair(o, AtomicCap::Hca, no_alloc_script);
    }
}
