//! # switchyard-verbs: the RDMA verbs transport of switchyard
//!
//! One [`VerbsDriver`] per PE moves puts, gets and atomics to other PEs'
//! symmetric heaps with one-sided RDMA over reliable-connected (RC) queue
//! pairs, on InfiniBand or RoCE. It implements the core transport contract
//! ([`switchyard_core::transport::Transport`]).
//!
//! **It cannot run on a machine without an RDMA device** (or soft-RoCE):
//! without one, [`probe()`] says precisely why, the shim leaves the verbs
//! health bits clear, and route selection sends NEAR and ROUTED traffic over
//! TCP as the downgrade policy allows. The driver has not run on a real
//! device in the environment it was written in (no RDMA support in that
//! kernel): what is tested there is everything that needs no device (the
//! modules below) and the whole driver on an in-process fake HCA
//! (`fake`, feature `fake-hca`), which executes the work requests against
//! real memory with a device's key, access, bounds and QP-state checks, and
//! can cut links. What only hardware can show (provider quirks, timing,
//! atomic reply byte order, real flush behaviour) is untested.
//!
//! ## Layers
//!
//! * [`mod@probe`]: devices, ports, link layer, GID table, with a typed reason
//!   ([`probe::Unavailable`]) when RDMA cannot be used.
//! * [`params`]: queue and CQ depths, inline threshold, signaling interval,
//!   path MTU and RC timers, from the device limits, a template (trading,
//!   storage, AI training) and explicit overrides.
//! * [`card`]: the versioned, checked bytes a peer needs to connect (QPNs,
//!   PSNs, LID/GID, rkey, heap base and length).
//! * [`qp_plan`]: INIT→RTR→RTS planning with validated attributes, and the
//!   rebuild (RESET first, same QPN, new PSN per generation).
//! * [`signal`]: selective signaling and send-queue/CQ accounting.
//! * [`seq`]: each operation settled exactly once across failures.
//! * [`sets`]: the per-PE budget of QP sets ([`SetBudget`]).
//! * [`recv`]: the target side of the receipts (shared receive queue,
//!   receive CQ, receipts seen), pollable from a second thread.
//! * [`stage`]: the per-QP staging rings for puts from unregistered buffers.
//! * [`atomic_plan`]: every atomic kind and width from 64-bit fetch-add and
//!   compare-swap.
//! * `sys` (private): the raw verbs calls, each `unsafe` small and
//!   justified: device context, protection domain, memory regions, async
//!   events and work-request fields in `sys`; completion queues in
//!   `sys::cq`, queue pairs in `sys::qp`, the shared receive queue in
//!   `sys::srq`. Nothing outside `sys` calls libibverbs.
//! * `fake` (feature `fake-hca`): an in-process fake HCA for tests.
//! * [`VerbsDriver`]: the transport, in the private module `driver` (its
//!   state: peers, QPs, tickets, events), one submodule per concern:
//!   * `driver::open`: resources. Device, PD, memory regions, CQ, SRQ and
//!     QPs, all sized at [`VerbsDriver::new`]; released at close.
//!   * `driver::conn`: connection state. Cards, the QP state machine, each
//!     peer's link state, connect and [`VerbsDriver::rebuild`].
//!   * `driver::transport`: the
//!     [`Transport`](switchyard_core::transport::Transport) operations:
//!     checks, this PE's own heap, the tickets of gets and atomics.
//!   * `driver::post`: wire I/O. Placement on the data QPs, room and back
//!     pressure, fences, staging, the RDMA WRITE / READ / atomic work
//!     requests, doorbell batches, selective signaling, quiet markers.
//!   * `driver::progress`: the progress loop. CQ polling, completions, the
//!     steps of emulated atomics, the receive side, async events.
//!   * `driver::recovery`: failure and replay. Settling a failed peer's
//!     operations once, puts in doubt, the receipts handshake, failover
//!     and the replays.
//!   * `driver::load`: each peer's backlog on its data QPs
//!     ([`VerbsDriver::backlog`], a [`Backlog`]) against the send-queue
//!     slots it competes for, for the load watermark.
//!
//! ## Resources and data path
//!
//! One protection domain; the symmetric heap registered once as one memory
//! region with local write, remote write, remote read and remote atomic
//! access (the minimum for put, get and atomics; READ into the heap needs
//! local write), and one driver-owned scratch region with local write only
//! (staging for puts from unregistered buffers, get buffers, atomic
//! results). One CQ, busy-polled in batches by `progress`. Per peer a
//! control QP (atomics: control work never waits behind bulk data) and
//! [`params::VerbsConfig::data_qps`] data QPs; puts and gets are split at
//! 64 KiB heap blocks and each block always uses the same data QP, so
//! operations on the same bytes stay ordered. Puts are RDMA WRITE with
//! immediate (inline up to the granted `max_inline_data`), gets RDMA READ,
//! atomics RDMA fetch-add / compare-swap. Work requests are chained per QP and posted
//! with one doorbell per batch; every k-th is signaled ([`signal`]).
//! `fence` makes the next operation to each peer wait for that peer's other
//! QPs to drain and carries `IBV_SEND_FENCE`; `quiet_poll` posts a signaled
//! zero-length marker behind unsignaled tails and reports completion when
//! every QP is drained. Nothing on the data path allocates or locks: tables,
//! rings and work-request arrays are sized at [`VerbsDriver::new`].
//!
//! **The path of a put** to another PE, through the modules:
//! [`Transport::put`](switchyard_core::transport::Transport::put)
//! (`driver::transport`; a put to this PE is a memory copy) →
//! `put_pieces` (`driver::post`: bounds, a pending fence, room for every
//! piece, or a bounded spin polling the CQ and then `WouldBlock`; one piece
//! per 64 KiB block on that block's data QP, its bytes copied into the
//! QP's staging ring) → `queue_wr` (the send-queue record with the piece's
//! sequence number and receipt, signaled every k-th, into the QP's batch)
//! → `flush_qp` (one doorbell for the batch: when it is full, for a
//! signaled WR, or from [`VerbsDriver::post_batches`], `progress` and
//! `quiet_poll`) → the completion (`driver::progress`: `poll_cq`,
//! `on_completion`, `retire_rest` retire every record up to the signaled
//! one, free its staging and settle its sequence numbers). At the target
//! the put's immediate is its receipt ([`recv`]). If the link fails first,
//! `fail_peer` (`driver::recovery`) holds the put in doubt until the
//! peer's receipts say whether it landed
//! ([`VerbsDriver::settle_receipts`]), then offers it for replay
//! ([`VerbsDriver::drain_replays`]).
//!
//! ## QP sets
//!
//! [`VerbsDriver::open_set`] opens a *QP set* toward one peer: a
//! [`VerbsDriver`] of its own (control and data QPs toward that peer only,
//! its own CQ, shared receive queue and receipts, staging, tickets, events,
//! link state, replays and rebuilds) on the PE driver's device context,
//! protection domain and heap registration, shared through `Arc`s (one
//! `rkey` for every set; a set keeps them alive if the PE's driver is
//! dropped first). The peer opens the matching set toward this PE with the
//! same PSN seed, the two exchange [`VerbsDriver::card_for`] and connect as
//! PE drivers do. A thread that owns a set posts, polls and quiets it
//! through `&mut`, with no lock and nothing shared with the PE's driver on
//! the data path (the same code as the PE driver's: no allocation, no
//! syscall). Sets count against a per-PE [`SetBudget`]; past it `open_set`
//! refuses ([`VerbsError::NoSetLeft`]) and the caller keeps the PE's
//! driver. Failures are per set: a set's break fails, settles (receipts),
//! replays and rebuilds that set only; a port failure breaks every set's
//! QPs, and each recovers on its own. The device's async events are read
//! by the PE's driver, which leaves a set's (its QPs', the port's, the
//! device's) in the set's mailbox in the budget ([`sets`]), so a set
//! collects its receipts as the PE's driver does, provided the PE's
//! driver progresses meanwhile (else it withholds them at the deadline,
//! and the peer reports its in-doubt puts lost rather than replaying one
//! that landed). Tests: `driver::test::sets` on the fake HCA (with
//! `fake::Fabric::device_events` for the device's one event queue). The
//! shim (`switchyard`) does not use sets yet: its contexts share the PE's
//! driver.
//!
//! ## Receipts
//!
//! A put's immediate is its *receipt*: the low 32 bits of its number among
//! the puts (RDMA WRITEs with immediate) on its (peer, data QP) in the
//! current generation, counted from 1 at connect and again at every
//! rebuild, at both ends. Markers (zero-length plain WRITEs), READs and
//! atomics carry none. At the target, every peer's data QPs take their
//! receive WQEs from one shared receive queue (SRQ) with its own receive
//! CQ, pre-posted with zero-SGE receives: each put consumes one and
//! produces a receive completion with the responder QP's number and the
//! immediate. `progress` polls that CQ in batches, maps the QP number to
//! (peer, data QP) through a fixed open-addressing table (O(1), no
//! allocation), extends the 32 bits against the last receipt seen (they
//! come in order, one per put), and re-posts receives in chains of up to
//! 64 once a quarter of the SRQ, or 64 if fewer, are consumed. RC executes
//! a QP's messages in order, so the highest receipt seen on a QP means
//! every earlier put on it landed and no later one did.
//!
//! *Sizing:* the SRQ holds [`params::QpParams::srq_depth`] receives
//! (template: 4096 trading, 16384 storage, 8192 AI; override
//! [`params::VerbsConfig::srq_depth`]; at most the device's `max_srq_wr` and
//! `max_cqe`; the receive CQ has as many entries, so it cannot overflow).
//! The target must run `progress` at least once per `srq_depth` puts
//! received from all peers together, or let another thread poll the
//! receive side meanwhile ([`VerbsDriver::recv_side`], [`recv`]); otherwise
//! senders get RNR NAKs and retry (`rnr_retry` must be 7, infinite), which
//! delays their puts but never fails a link.
//!
//! ## Failure
//!
//! A completion error, a post failure, or an async event (QP fatal, port
//! error, device fatal, CQ error) takes the peer to
//! `LinkState::Error` and
//! reports [`Event::Link`], so the shim clears the health bit and select
//! moves to TCP at once. The peer's QPs go to the error state (not RESET,
//! which may drop receive completions; the rebuild resets them); every
//! operation that was outstanding is settled once ([`seq`]): puts and gets
//! into the heap are offered for replay over the fallback
//! ([`VerbsDriver::drain_replays`]; puts that reached the device only after
//! the peer's receipts, below),
//! pending gets fail with `PeerDown` (the shim retries them elsewhere),
//! atomics that never reached the device fail with `PeerDown`, and atomics
//! that may have executed fail with [`VerbsError::OutcomeUnknown`] (never
//! retried: retrying could apply them twice). [`Event::RebuildNeeded`] asks
//! the shim to agree a new generation with the peer; [`VerbsDriver::rebuild`]
//! takes the same QPs through RESET→INIT→RTR→RTS with the generation's PSNs,
//! and [`VerbsDriver::peer_rebuilt`] (once the peer reports the same) sets
//! the peer Up again.
//!
//! **Receipts after a failure.** Both ends of a failed link (this side
//! after a local failure or [`VerbsDriver::peer_failed`]) collect their
//! receipts: once every data QP toward the peer reported
//! `IBV_EVENT_QP_LAST_WQE_REACHED` (no receive completion of it comes
//! after), the receive CQ is polled empty and [`Event::Receipts`] gives the
//! highest receipt per data QP ([`VerbsDriver::receipts`] keeps it until the
//! next failure). The initiator holds its in-doubt puts until the shim
//! passes the peer's receipts to [`VerbsDriver::settle_receipts`]: puts at
//! or below them landed and are dropped, the rest are replayed, in order.
//! Without receipts (peer dead, no answer) [`VerbsDriver::abandon_receipts`]
//! drops the puts and counts them for the shim to report as lost. A rebuild
//! waits until both are done. Atomics (control QP, no receipts) are settled
//! as before.
//!
//! *Bounded collection.* The target waits for the last-WQE events at most
//! [`params::VerbsConfig::collect_timeout_ms`] (default 300 ms) of the
//! `now` passed to `progress`, from its first step after the failure. If a
//! data QP could not be moved to the error state, or its event did not
//! come in time (a provider that does not send it, a dead device), the
//! target gives up collecting *without answering*: an answer without the
//! event could be too low, and make the initiator replay a put that
//! landed. It reports [`Event::ReceiptsWithheld`] (counted in
//! [`VerbsStats::receipts_withheld`]), the rebuild may go ahead, and the
//! initiator, with no answer, reports its puts in doubt lost at its op
//! timeout. Reading async events on every progress step (a syscall) lasts
//! only while a collection does.
//!
//! *Stale QP events.* Async events carry no generation. A data QP's
//! `LAST_WQE_REACHED` counts only while the driver awaits it (from its own
//! modify to ERROR in the failure, until the rebuild); any other is
//! ignored and counted ([`VerbsStats::stale_async_events`]), so a late one
//! of an earlier link never ends a later collection early (receipts too
//! low would get a landed put applied twice). A rebuild first reads every
//! async event queued, while the link is still in error, so a late
//! QP-fatal event of the old QPs does not fail the rebuilt link. Not
//! guaranteed: an event the device delivers only after that read (the
//! kernel queues them asynchronously) is still taken for the new QPs' (a
//! QP-fatal one fails the rebuilt link once more, a last-WQE one is
//! ignored); and a QP that went to error on its own, whose event is read
//! before the driver noticed the failure (its error completion), has that
//! event ignored: its collection ends at the deadline, withheld (safe,
//! the peer reports its puts in doubt lost).
//!
//! The CQ holds the signaled-WR budget (CQ credits) plus the flush
//! completions of up to four peers failing at once; more simultaneous
//! failures can overrun it, which the device reports as a CQ error and the
//! driver treats as device-fatal (every peer goes to the fallback).
//!
//! ## Example
//!
//! ```no_run
//! use switchyard_core::{route::ContextId, transport::Transport};
//! use switchyard_verbs::{VerbsDriver, params::VerbsConfig};
//!
//! let mut a = VerbsDriver::with_owned_heap(VerbsConfig::default(), 0, 2, 42, 1 << 20)?;
//! let mut b = VerbsDriver::with_owned_heap(VerbsConfig::default(), 1, 2, 42, 1 << 20)?;
//! a.set_peer_card(1, b.card_for(0)?)?;
//! b.set_peer_card(0, a.card_for(1)?)?;
//! b.connect(0)?;
//! a.connect(1)?;
//! a.put(1, 0, b"hello", ContextId { pe: 0, seq: 1 })?;
//! while !a.quiet_poll()? {}
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! MSRV: the workspace's `rust-version`.
#![deny(missing_docs)]
// Unsafe code only in `sys` (the verbs calls), `driver` (copies into and
// out of the registered scratch the device also writes), `recv` (the
// receive side shared with a progress thread) and `fake`.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::unnecessary_safety_comment)]

pub mod atomic_plan;
pub mod card;
mod driver;
#[cfg(any(test, feature = "fake-hca"))]
pub mod fake;
pub mod params;
pub mod probe;
pub mod qp_plan;
pub mod recv;
pub mod seq;
pub mod sets;
pub mod signal;
pub mod stage;
mod sys;
// The counting allocator of the no-allocation unit tests.
#[cfg(test)]
mod test_alloc;

use std::io;

pub use driver::{Backlog, Replay, VerbsDriver};
pub use sets::SetBudget;
/// The path-class encoding this driver speaks.
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::transport::{ErrorKind, LinkState, ProbeReport, TransportError};

/// Whether this driver is implemented in this build (it is; it needs an
/// RDMA device or soft-RoCE to run).
pub const IMPLEMENTED: bool = true;

/// What this machine offers for RDMA, for `switchyard info` ([`probe::probe`]
/// has the typed result).
pub fn probe() -> ProbeReport {
    probe::probe().report()
}

/// A transition the driver reports once ([`VerbsDriver::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The link to a peer changed state (Error: clear the health bit).
    Link {
        /// The peer.
        peer: u32,
        /// Its new state.
        state: LinkState,
    },
    /// The peer's QPs were reset after a failure: agree `generation` with
    /// the peer (over another transport) and call [`VerbsDriver::rebuild`].
    RebuildNeeded {
        /// The peer.
        peer: u32,
        /// The generation to rebuild to.
        generation: u32,
    },
    /// This side's QPs toward the peer are at RTS again for `generation`;
    /// tell the peer, and call [`VerbsDriver::peer_rebuilt`] when it says
    /// the same.
    Rebuilt {
        /// The peer.
        peer: u32,
        /// The generation.
        generation: u32,
    },
    /// The port went down: every peer is in error.
    PortDown {
        /// The port.
        port: u8,
    },
    /// The port is active again (rebuilds can succeed).
    PortActive {
        /// The port.
        port: u8,
    },
    /// The device (or the CQ) failed: the driver is unusable.
    DeviceFatal,
    /// After the link to `peer` failed (here, or reported by the peer with
    /// [`VerbsDriver::peer_failed`]), this side's QPs toward it are in the
    /// error state and every receive completion of theirs was polled:
    /// `applied` says which of the peer's puts landed here. Send it to the
    /// peer, which passes it to [`VerbsDriver::settle_receipts`].
    Receipts {
        /// The peer whose puts these are.
        peer: u32,
        /// The generation the failed link rebuilds to (the one in
        /// [`Event::RebuildNeeded`]).
        generation: u32,
        /// The receipts.
        applied: Receipts,
    },
    /// After the link to `peer` failed, this side gave up collecting its
    /// receipts of the peer's puts and will *not* answer for this failure
    /// (an answer it cannot trust could make the peer apply a landed put
    /// twice): the peer reports its puts in doubt lost at its op timeout.
    /// Counted in [`VerbsStats::receipts_withheld`]; worth a warning.
    ReceiptsWithheld {
        /// The peer whose puts these are.
        peer: u32,
        /// The generation the failed link rebuilds to.
        generation: u32,
        /// Why.
        reason: Withheld,
    },
}

/// Why receipts were withheld ([`Event::ReceiptsWithheld`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// Data QP `qp` did not report `IBV_EVENT_QP_LAST_WQE_REACHED` within
    /// [`params::VerbsConfig::collect_timeout_ms`] (a provider that does
    /// not send it, a device that died): receive completions of it might
    /// still come.
    NoLastWqe {
        /// The data QP (from 1).
        qp: u8,
    },
    /// Data QP `qp` could not be moved to the error state, so the peer's
    /// puts may still land on it.
    ModifyFailed {
        /// The data QP (from 1).
        qp: u8,
    },
}

impl core::fmt::Display for Withheld {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Withheld::NoLastWqe { qp } => write!(
                f,
                "data QP {qp} did not report its last WQE within the collection deadline"
            ),
            Withheld::ModifyFailed { qp } => {
                write!(f, "data QP {qp} could not be moved to the error state")
            }
        }
    }
}

/// Which puts of a peer landed at this PE over a failed link: per data QP,
/// the highest receipt (the sequence number of a put among the RDMA WRITEs
/// with immediate on that QP in the current generation, from 1) whose
/// receive completion this PE saw. RC executes a QP's messages in order,
/// so every put up to it landed and none after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Receipts {
    /// Data QPs (entries of `seq` used).
    pub n: u8,
    /// Highest receipt per data QP (index 0: data QP 1); 0: none landed.
    pub seq: [u64; params::MAX_DATA_QPS as usize],
}

impl Receipts {
    /// The used entries.
    pub fn as_slice(&self) -> &[u64] {
        &self.seq[..usize::from(self.n).min(self.seq.len())]
    }
}

/// Counters of one driver ([`VerbsDriver::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerbsStats {
    /// Work requests posted.
    pub wrs: u64,
    /// Doorbells (post calls; a batch of WRs is one).
    pub doorbells: u64,
    /// WRs posted with `IBV_SEND_INLINE`.
    pub inline_wrs: u64,
    /// WRs posted signaled.
    pub signaled: u64,
    /// Successful completions polled.
    pub completions: u64,
    /// Completions of an earlier incarnation of a QP, ignored.
    pub stale_completions: u64,
    /// Completions with an error status.
    pub completion_errors: u64,
    /// Async events read.
    pub async_events: u64,
    /// Calls that returned `WouldBlock` (SQ, CQ credits, staging, tickets).
    pub would_block: u64,
    /// Operations that waited for a fence.
    pub fence_waits: u64,
    /// Compare-swaps of emulated atomics that lost a race and were retried.
    pub cas_retries: u64,
    /// Operations offered for replay over the fallback.
    pub replays: u64,
    /// Atomics failed with an unknown outcome.
    pub outcome_unknown: u64,
    /// Peers taken to Error.
    pub peer_failures: u64,
    /// QP rebuilds done.
    pub rebuilds: u64,
    /// Quiet markers posted (zero-length signaled writes).
    pub markers: u64,
    /// Receipts received: puts of peers that landed here (receive
    /// completions of RDMA WRITEs with immediate).
    pub receipts: u64,
    /// Receive WQEs re-posted to the shared receive queue.
    pub recv_reposts: u64,
    /// In-doubt puts a peer's receipts showed landed (not replayed).
    pub receipts_settled: u64,
    /// In-doubt puts given up without receipts (reported as lost).
    pub receipts_abandoned: u64,
    /// Failures after which this side withheld its receipts of the peer's
    /// puts ([`Event::ReceiptsWithheld`]).
    pub receipts_withheld: u64,
    /// `LAST_WQE_REACHED` events ignored: of a QP the driver had not moved
    /// to ERROR since its last rebuild (an earlier incarnation's, late).
    pub stale_async_events: u64,
    /// Peers added after creation ([`VerbsDriver::add_peer`]).
    pub peers_added: u64,
    /// Peers refused by [`VerbsDriver::add_peer`]: the budget of lazily
    /// added peers was spent ([`VerbsError::NoPeerLeft`]).
    pub peers_refused: u64,
}

/// Errors of the verbs transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// A configuration value cannot be used.
    #[error(transparent)]
    Config(#[from] params::ParamError),
    /// RDMA is not usable on this machine.
    #[error("RDMA verbs unavailable: {reason}")]
    Unavailable {
        /// The probe's reason.
        reason: String,
    },
    /// A verbs resource could not be created or queried.
    #[error("{call} failed: {source}")]
    Resource {
        /// The call (`ibv_open_device`, `ibv_reg_mr (heap)`, ...).
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A peer's card is bad.
    #[error("verbs card of PE {peer}: {source}")]
    Card {
        /// The PE.
        peer: u32,
        /// What was wrong.
        #[source]
        source: card::CardError,
    },
    /// A QP transition could not be planned.
    #[error("QP {qp} toward PE {peer}: {source}")]
    Plan {
        /// The PE.
        peer: u32,
        /// QP index (0 control).
        qp: u8,
        /// What was wrong.
        #[source]
        source: qp_plan::PlanError,
    },
    /// `ibv_modify_qp` failed.
    #[error("ibv_modify_qp to {state:?} on QP {qp} toward PE {peer}: {source}")]
    Modify {
        /// The PE.
        peer: u32,
        /// QP index.
        qp: u8,
        /// Target state.
        state: qp_plan::QpState,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The PE is not a verbs peer of this job.
    #[error("PE {peer} is not a verbs peer in this job of {n_pes} PEs")]
    InvalidPe {
        /// The PE.
        peer: u32,
        /// PEs in the job.
        n_pes: u32,
    },
    /// No card is known for the PE yet.
    #[error("PE {peer} has no verbs card yet (set_peer_card was not called)")]
    PeerUnknown {
        /// The PE.
        peer: u32,
    },
    /// A queue toward the peer is full: make progress and retry.
    #[error("{what} toward PE {peer} is full or waiting: make progress and retry")]
    WouldBlock {
        /// The PE.
        peer: u32,
        /// Which queue.
        what: &'static str,
    },
    /// The link to the peer is down or in error (another transport may work).
    #[error("verbs link to PE {peer} is down")]
    PeerDown {
        /// The PE.
        peer: u32,
    },
    /// An atomic was in flight when the link failed: it may or may not have
    /// been applied, so it is not retried.
    #[error(
        "atomic at offset {offset} of PE {peer} was in flight when the link failed: outcome unknown"
    )]
    OutcomeUnknown {
        /// The PE.
        peer: u32,
        /// The offset.
        offset: u64,
    },
    /// A range outside a heap.
    #[error("{len} bytes at offset {offset} are outside PE {peer}'s heap of {heap_len} bytes")]
    OutOfBounds {
        /// The PE whose heap it is.
        peer: u32,
        /// The offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// That heap's size.
        heap_len: u64,
    },
    /// An atomic at an unaligned offset.
    #[error("atomic at offset {offset} of PE {peer} is not {align}-byte aligned")]
    Misaligned {
        /// The PE.
        peer: u32,
        /// The offset.
        offset: u64,
        /// Alignment needed.
        align: u64,
    },
    /// The device or the peer does not do RDMA atomics.
    #[error("RDMA atomics toward PE {peer} are not supported by the device")]
    NoAtomics {
        /// The PE.
        peer: u32,
    },
    /// A get longer than the driver's `max_get_len` ([`switchyard_core::transport::Transport::max_get_len`]).
    #[error("get of {len} bytes from PE {peer} exceeds the largest of {max}")]
    TooLong {
        /// The PE.
        peer: u32,
        /// Bytes asked for.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A ticket that is not (or no longer) live.
    #[error("ticket slot {slot:#x} for PE {peer} is not live")]
    StaleTicket {
        /// The PE.
        peer: u32,
        /// The slot.
        slot: u32,
    },
    /// The device failed; the driver is unusable.
    #[error("the RDMA device failed (device fatal or CQ error)")]
    DeviceFatal,
    /// Operations nobody polls (puts, non-fetching atomics) were in flight
    /// when the link to the peer failed and could not be kept for replay
    /// (the replay list was full): they are not applied. Reported once, by
    /// `quiet_poll`.
    #[error(
        "{ops} operations to PE {peer} were lost when its verbs link failed (no room to replay them): not applied"
    )]
    ReplayLost {
        /// The PE.
        peer: u32,
        /// How many operations.
        ops: u64,
    },
    /// A peer's receipts do not fit what this side sent it.
    #[error("receipts from PE {peer}: {what}")]
    BadReceipts {
        /// The PE.
        peer: u32,
        /// What does not fit.
        what: &'static str,
    },
    /// The PE's budget of QP sets is spent
    /// ([`VerbsDriver::open_set`]): keep using the PE's driver.
    #[error("no QP set toward PE {peer}: the PE's budget of {max} sets is spent")]
    NoSetLeft {
        /// The PE.
        peer: u32,
        /// The budget.
        max: u32,
    },
    /// The driver's budget of lazily added peers is spent
    /// ([`VerbsDriver::add_peer`], [`VerbsConfig::lazy_peers`](params::VerbsConfig::lazy_peers)):
    /// keep that peer on the other transports.
    #[error("no verbs QPs toward PE {peer}: the budget of {max} lazily added peers is spent")]
    NoPeerLeft {
        /// The PE.
        peer: u32,
        /// The budget.
        max: u32,
    },
    /// The driver was closed.
    #[error("the verbs driver is closed")]
    Closed {
        /// The PE the call was for.
        peer: Option<u32>,
    },
}

/// Results of this crate.
pub type Result<T> = core::result::Result<T, VerbsError>;

impl TransportError for VerbsError {
    fn kind(&self) -> ErrorKind {
        match self {
            VerbsError::Config(_)
            | VerbsError::Unavailable { .. }
            | VerbsError::Resource { .. }
            | VerbsError::Card { .. }
            | VerbsError::Plan { .. }
            | VerbsError::Modify { .. }
            | VerbsError::StaleTicket { .. }
            | VerbsError::OutcomeUnknown { .. }
            | VerbsError::BadReceipts { .. }
            | VerbsError::ReplayLost { .. }
            | VerbsError::DeviceFatal
            | VerbsError::Closed { .. } => ErrorKind::Fatal,
            VerbsError::InvalidPe { .. } | VerbsError::PeerUnknown { .. } => ErrorKind::InvalidPe,
            VerbsError::WouldBlock { .. } => ErrorKind::WouldBlock,
            VerbsError::PeerDown { .. } => ErrorKind::PeerDown,
            VerbsError::OutOfBounds { .. } => ErrorKind::OutOfBounds,
            VerbsError::Misaligned { .. } => ErrorKind::Misaligned,
            VerbsError::NoAtomics { .. }
            | VerbsError::TooLong { .. }
            | VerbsError::NoSetLeft { .. }
            | VerbsError::NoPeerLeft { .. } => ErrorKind::Unsupported,
        }
    }

    fn peer(&self) -> Option<u32> {
        match self {
            VerbsError::Card { peer, .. }
            | VerbsError::Plan { peer, .. }
            | VerbsError::Modify { peer, .. }
            | VerbsError::InvalidPe { peer, .. }
            | VerbsError::PeerUnknown { peer }
            | VerbsError::WouldBlock { peer, .. }
            | VerbsError::PeerDown { peer }
            | VerbsError::OutcomeUnknown { peer, .. }
            | VerbsError::OutOfBounds { peer, .. }
            | VerbsError::Misaligned { peer, .. }
            | VerbsError::NoAtomics { peer }
            | VerbsError::TooLong { peer, .. }
            | VerbsError::NoSetLeft { peer, .. }
            | VerbsError::NoPeerLeft { peer, .. }
            | VerbsError::StaleTicket { peer, .. }
            | VerbsError::BadReceipts { peer, .. }
            | VerbsError::ReplayLost { peer, .. } => Some(*peer),
            VerbsError::Closed { peer } => *peer,
            _ => None,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn error_kinds_and_peers() {
        let e = VerbsError::OutcomeUnknown { peer: 3, offset: 8 };
        assert_eq!(e.kind(), ErrorKind::Fatal, "never retried elsewhere");
        assert_eq!(e.peer(), Some(3));
        assert_eq!(VerbsError::PeerDown { peer: 1 }.kind(), ErrorKind::PeerDown);
        assert_eq!(
            VerbsError::WouldBlock {
                peer: 1,
                what: "send queue"
            }
            .kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(
            VerbsError::NoAtomics { peer: 1 }.kind(),
            ErrorKind::Unsupported
        );
        assert_eq!(VerbsError::DeviceFatal.peer(), None);
        assert_eq!(
            VerbsError::OutOfBounds {
                peer: 1,
                offset: 4096,
                len: 8,
                heap_len: 4096
            }
            .to_string(),
            "8 bytes at offset 4096 are outside PE 1's heap of 4096 bytes"
        );
    }

    #[test]
    fn the_probe_report_is_named_verbs() {
        let r = probe();
        assert_eq!(r.name, "verbs");
        assert_eq!(r.available, r.why_not.is_none());
    }
}
