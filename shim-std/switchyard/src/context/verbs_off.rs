//! RDMA verbs in a build without the `verbs` feature of switchyard: there is
//! none. No driver crate, no `libibverbs`; a context routes over shared
//! memory and TCP, NEAR and ROUTED peers taking TCP as on a machine without
//! RDMA (the route policy's fallback, counted as downgrades where the class
//! says so). [`Context::verbs_status`] says why ([`NO_VERBS`]).
//!
//! This module stands in for the verbs glue (`context/verbs/`) with the same
//! calls, so the rest of the context is the same code in both builds: the
//! driver's types are uninhabited (no value of them can exist, so the
//! context's `verbs` is always `None` and no `Drv::Verbs` is ever made),
//! and each hook is what the glue does without a driver. The configuration keeps its `verbs*` keys (a file
//! serves both builds); they change nothing here.

use std::time::Duration;

use switchyard_bootstrap::RankInfo;
use switchyard_core::{
    route::{ContextId, LoadWatermark},
    topology::LinkState,
    transport::{
        AtomicOp, ErrorKind, Instant as CoreInstant, PollResult, Ticket, Transport, TransportError,
    },
};

use super::Context;
use crate::config::Config;

#[path = "verbs/common.rs"]
mod common;

pub use common::{NO_VERBS, Refusal, VerbsStatus};

/// Stands in for the verbs driver: never created.
#[derive(Debug)]
pub(super) enum VerbsDriver {}

/// Stands in for the verbs driver's error: never raised.
#[derive(Debug)]
pub(super) enum VerbsError {}

/// Stands in for the verbs driver's receive side, which the progress thread
/// would poll: never set.
#[derive(Debug)]
pub(super) enum RecvSide {}

/// Stands in for the verbs control records: only recognised (a peer built
/// with verbs sends none to a PE that sent no verbs card), never decoded.
pub(super) enum Record {}

/// Stands in for the context's verbs state: never created, as its driver.
pub(super) struct Verbs {
    pub(super) drv: VerbsDriver,
    pub(super) failovers: u64,
    pub(super) replays: u64,
    pub(super) losses: LossBook,
}

/// Stands in for the verbs loss reports: never used.
pub(super) struct LossBook;

impl LossBook {
    /// Never called: there is no verbs state.
    pub(super) fn forget_lane(&mut self, _: u64) {}
}

impl Verbs {
    /// Never called: there is no verbs state.
    pub(super) fn attention_changed(&mut self) -> Option<u64> {
        match self.drv {}
    }
}

impl Record {
    /// Whether `b` is meant to be a verbs record (its magic): ignored here.
    pub(super) fn is_verbs(b: &[u8; 32]) -> bool {
        b[..3] == common::RECORD_MAGIC
    }
}

impl RecvSide {
    pub(super) fn poll(&self) -> PollResult {
        match *self {}
    }
}

impl VerbsDriver {
    pub(super) fn post_batches(&mut self) {
        match *self {}
    }
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for VerbsError {}

impl TransportError for VerbsError {
    fn kind(&self) -> ErrorKind {
        match *self {}
    }

    fn peer(&self) -> Option<u32> {
        match *self {}
    }
}

impl From<VerbsError> for super::Error {
    fn from(e: VerbsError) -> Self {
        match e {}
    }
}

impl Transport for VerbsDriver {
    type Error = VerbsError;

    fn name(&self) -> &'static str {
        match *self {}
    }

    fn connect(&mut self, _: u32) -> Result<(), VerbsError> {
        match *self {}
    }

    fn state(&self, _: u32) -> LinkState {
        match *self {}
    }

    fn heap_len(&self, _: u32) -> Option<u64> {
        match *self {}
    }

    fn put(&mut self, _: u32, _: u64, _: &[u8], _: ContextId) -> Result<(), VerbsError> {
        match *self {}
    }

    fn put_from_heap(
        &mut self,
        _: u32,
        _: u64,
        _: u64,
        _: u32,
        _: ContextId,
    ) -> Result<(), VerbsError> {
        match *self {}
    }

    fn get_into_heap(
        &mut self,
        _: u32,
        _: u64,
        _: u64,
        _: u32,
        _: ContextId,
    ) -> Result<(), VerbsError> {
        match *self {}
    }

    fn get_start(&mut self, _: u32, _: u64, _: u32, _: ContextId) -> Result<Ticket, VerbsError> {
        match *self {}
    }

    fn get_poll(&mut self, _: &Ticket, _: &mut [u8]) -> Result<bool, VerbsError> {
        match *self {}
    }

    fn atomic_start(
        &mut self,
        _: u32,
        _: u64,
        _: AtomicOp,
        _: ContextId,
    ) -> Result<Ticket, VerbsError> {
        match *self {}
    }

    fn atomic_poll(&mut self, _: &Ticket) -> Result<Option<u64>, VerbsError> {
        match *self {}
    }

    fn fence(&mut self) -> Result<(), VerbsError> {
        match *self {}
    }

    fn quiet_poll(&mut self) -> Result<bool, VerbsError> {
        match *self {}
    }

    fn progress(&mut self, _: CoreInstant) -> PollResult {
        match *self {}
    }

    fn close(&mut self) -> Result<(), VerbsError> {
        match *self {}
    }
}

/// No verbs driver in this build: why, for [`Context::verbs_status`].
pub(super) fn create_driver(
    _: &Config,
    _: &RankInfo,
    _seed: u64,
    _has_tcp_lazy: (bool, bool),
    _heap: *mut u8,
    _heap_len: u64,
) -> (Option<VerbsDriver>, Option<String>) {
    (None, Some(NO_VERBS.into()))
}

/// The bootstrap card's `verbs` field: none.
pub(super) fn pe_card_bytes(drv: Option<&VerbsDriver>) -> Option<Vec<u8>> {
    drv.map(|d| match *d {})
}

/// The verbs glue's hooks, as it runs without a driver.
impl Context {
    /// Whether this context routes over RDMA verbs, and why not: never, as
    /// this build has no verbs support ([`NO_VERBS`]).
    pub fn verbs_status(&self) -> VerbsStatus {
        VerbsStatus {
            device_usable: false,
            in_use: false,
            peers_up: 0,
            why_not: Some(self.verbs_why.as_deref().unwrap_or(NO_VERBS).into()),
            nic_atomics: false,
            refused_here: 0,
            refused_by_peers: 0,
        }
    }

    /// Why `pe` refused to pair over verbs: never, as this build has no
    /// verbs support.
    pub fn verbs_refusal(&self, _pe: u32) -> Option<Refusal> {
        None
    }

    #[inline]
    pub(super) fn verbs_counters(&self) -> Option<[u64; 15]> {
        None
    }

    pub(super) fn verbs_up(&self, _pe: u32) -> bool {
        false
    }

    pub(super) fn attach_verbs(&mut self, drv: VerbsDriver, _: u64, _: &[Option<Vec<u8>>]) {
        match drv {}
    }

    pub(super) fn verbs_connect(&mut self, _: Duration) -> u32 {
        0
    }

    pub(super) fn verbs_raise(&mut self, _shared: bool) {}

    /// Nothing for a quiet: there is no shared verbs state.
    #[inline]
    pub(super) fn verbs_attention(&self) -> bool {
        false
    }

    pub(super) fn verbs_poll(&mut self, _: CoreInstant) {}

    pub(super) fn verbs_events(&mut self) {}

    pub(super) fn verbs_holds(&self, _pe: u32) -> bool {
        false
    }

    #[inline]
    pub(super) fn verbs_set_holds(&self, _pe: u32) -> bool {
        false
    }

    #[inline]
    pub(super) fn verbs_issued(&mut self, _pe: u32) {}

    #[inline]
    pub(super) fn verbs_backlog_over(&self, _pe: u32, _: LoadWatermark) -> bool {
        false
    }

    pub(super) fn verbs_record(&mut self, _from: u32, _: &[u8; 32]) {}

    pub(super) fn verbs_tcp_up(&mut self, _pe: u32) {}

    pub(super) fn verbs_first_use(&mut self, _pe: u32, _card: Option<&[u8]>) {}

    pub(super) fn verbs_quiet_poll(&mut self, _shared: bool) -> super::Result<bool> {
        Ok(true)
    }
}

#[cfg(test)]
#[path = "verbs_off_test.rs"]
mod test;

/// Stands in for a context's own verbs QP sets: never any.
#[derive(Debug, Default)]
pub(super) struct Sets {}

impl Context {
    /// Nothing to close: there are no QP sets.
    pub(super) fn verbs_close_sets(&mut self) {}

    /// Nothing to close: there are no QP sets.
    pub(super) fn verbs_sets_peer_dead(&mut self, _: u32) {}

    /// No QP set to route over.
    #[inline]
    pub(super) fn verbs_set_route(&mut self, _: u32) -> bool {
        false
    }

    /// No QP set.
    #[inline]
    pub(super) fn verbs_set_for(&mut self, _: u32) -> Option<&mut VerbsDriver> {
        None
    }

    /// No QP set.
    pub(super) fn verbs_set_unusable(&mut self, _: u32) {}

    /// No QP set.
    pub(super) fn verbs_set_progress(&mut self, _: u32) {}

    /// Nothing batched: there are no QP sets.
    #[inline]
    pub(super) fn verbs_sets_post(&mut self) {}

    /// Nothing to fence: there are no QP sets.
    pub(super) fn verbs_sets_fence(&mut self) -> super::Result<()> {
        Ok(())
    }

    /// Nothing fails over: there are no QP sets.
    #[inline]
    pub(super) fn verbs_sets_local(&self) -> bool {
        true
    }

    /// Nothing in flight: there are no QP sets.
    pub(super) fn verbs_sets_quiet_poll(&mut self) -> super::Result<bool> {
        Ok(true)
    }

    /// Nothing to finish: there are no QP sets.
    pub(super) fn verbs_sets_finish(&mut self) {}
}
