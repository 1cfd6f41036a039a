//! Load: each peer's backlog on its data QPs ([`VerbsDriver::backlog`]),
//! the measure the library compares with the load watermark
//! ([`switchyard_core::route::LoadWatermark`]) to set or clear the verbs
//! load bit of a peer.
//!
//! The counts are kept per peer beside the send-queue accounting, at the
//! same three places: `queue_wr` adds a work request ([`post`](super::post)),
//! `retire_rest` removes each one a completion retires
//! ([`progress`](super::progress)), and `fail_peer` clears them when the
//! send queues are reset ([`recovery`](super::recovery)). Two integer
//! operations per work request each way; the report reads them (O(1), no
//! allocation).

use switchyard_core::route::LoadWatermark;

use super::VerbsDriver;
use crate::seq::WINDOW;

/// A peer's backlog on the verbs link ([`VerbsDriver::backlog`]).
///
/// `wrs` counts the work requests on the peer's data QPs that were posted
/// to the device, or batched for its next doorbell, and are not yet known
/// complete: puts (RDMA WRITE with immediate), gets into the heap or into
/// a ticket (RDMA READ) and quiet markers, each piece of a put or get split
/// at 64 KiB blocks counting as one. A WR is known complete when the
/// driver polls the completion of it or of a later signaled WR on the same
/// QP (selective signaling), so the backlog falls only when the CQ is
/// polled (`progress`, `quiet_poll`, or a put making room). It does not
/// count:
///
/// * atomics: they go over the control QP, which puts and gets never use;
/// * operations held for replay after the link failed (puts in doubt
///   waiting for the peer's receipts included): the failure resets the send
///   queues and the backlog to 0, and the replays go to the fallback
///   transport, not to this link;
/// * the receive side (the peer's puts toward this PE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Work requests not yet known complete on the peer's data QPs.
    pub wrs: u32,
    /// Bytes those work requests move (a put's or get's piece length;
    /// markers carry none).
    pub bytes: u64,
    /// The send-queue slots puts and gets compete for toward this peer:
    /// `(sq_depth - 1) * data_qps` (a put keeps one slot per data QP free
    /// for a quiet marker), capped at the sequence window
    /// ([`WINDOW`], operations in flight per peer).
    /// When `wrs` reaches it every data QP is full: the next put or get
    /// spins making room and gets `WouldBlock` unless completions come.
    /// A put can block before, when the one QP of its block is full while
    /// the others are not (`wrs` sums the data QPs), or on staging or CQ
    /// credits (shared with the other peers). `wrs` can exceed it by at
    /// most one marker per data QP.
    pub capacity_wrs: u32,
}

impl Backlog {
    /// Whether the backlog is over the watermark
    /// ([`LoadWatermark::exceeded`] on `wrs` and `capacity_wrs`).
    #[inline]
    pub const fn exceeded(self, watermark: LoadWatermark) -> bool {
        watermark.exceeded(self.wrs, self.capacity_wrs)
    }
}

/// The counts of [`Backlog`] for one peer, kept in step with its data QPs'
/// send queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Load {
    wrs: u32,
    bytes: u64,
}

impl Load {
    /// A WR of `bytes` queued on a data QP.
    #[inline]
    pub(super) fn add(&mut self, bytes: u32) {
        self.wrs += 1;
        self.bytes += u64::from(bytes);
    }

    /// A WR of `bytes` on a data QP known complete. Saturating, so a
    /// count can never wrap below zero (a bug would show as a stuck 0, not
    /// as a huge backlog).
    #[inline]
    pub(super) fn retire(&mut self, bytes: u32) {
        debug_assert!(self.wrs > 0 && self.bytes >= u64::from(bytes));
        self.wrs = self.wrs.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(u64::from(bytes));
    }

    /// The send queues were reset: nothing outstanding.
    pub(super) fn clear(&mut self) {
        *self = Load::default();
    }
}

impl VerbsDriver {
    /// `peer`'s backlog on its data QPs (see [`Backlog`] for what is
    /// counted and against what). O(1), no allocation: counts kept as work
    /// requests are queued and retired. `None` for this PE, a PE outside
    /// the job, or a closed driver.
    pub fn backlog(&self, peer: u32) -> Option<Backlog> {
        if self.closed {
            return None;
        }
        let pe = self.peer_ref(peer).ok()?;
        Some(Backlog {
            wrs: pe.load.wrs,
            bytes: pe.load.bytes,
            capacity_wrs: capacity_wrs(self.p.sq_depth, self.p.data_qps),
        })
    }
}

/// [`Backlog::capacity_wrs`] for QPs `sq_depth` deep, `data_qps` of them
/// per peer.
fn capacity_wrs(sq_depth: u32, data_qps: u8) -> u32 {
    sq_depth
        .saturating_sub(1)
        .saturating_mul(u32::from(data_qps))
        .min(WINDOW as u32)
}
