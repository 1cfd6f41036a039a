//! Static dispatch over the drivers a context holds: a route names a
//! transport id, [`Drv`] is that driver borrowed for one call. An enum, not a
//! trait object: the match is one predictable branch on the hot path, and
//! every driver keeps its own concrete types.

use switchyard_core::{
    route::ContextId,
    topology::LinkState,
    transport::{AtomicOp, ErrorKind, Instant, PollResult, Ticket, Transport, TransportError},
};
use switchyard_shm::ShmError;
use switchyard_socket::{Rail, SocketError};

use super::verbs::{VerbsDriver, VerbsError};

/// One driver, borrowed for one operation.
pub(super) enum Drv<'a> {
    /// Shared memory.
    Shm(&'a mut super::shm_port::ShmPort),
    /// One TCP rail.
    Tcp(Rail<'a>),
    /// RDMA verbs.
    Verbs(&'a mut VerbsDriver),
}

/// The error of whichever driver ran the operation.
#[derive(Debug, thiserror::Error)]
pub(super) enum DrvError {
    /// From shared memory.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// From TCP.
    #[error(transparent)]
    Tcp(#[from] SocketError),
    /// From RDMA verbs.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
}

impl TransportError for DrvError {
    fn kind(&self) -> ErrorKind {
        match self {
            DrvError::Shm(e) => e.kind(),
            DrvError::Tcp(e) => e.kind(),
            DrvError::Verbs(e) => e.kind(),
        }
    }

    fn peer(&self) -> Option<u32> {
        match self {
            DrvError::Shm(e) => e.peer(),
            DrvError::Tcp(e) => e.peer(),
            DrvError::Verbs(e) => e.peer(),
        }
    }
}

impl DrvError {
    /// Whether the operation was refused before anything of it was sent, so
    /// issuing it again on another transport cannot apply it twice, even an
    /// atomic: a TCP rail that is already down when the operation reaches it
    /// (its heartbeat saw the cut before the health bits the selector reads
    /// did) queues nothing.
    pub(super) fn not_issued(&self) -> bool {
        matches!(self, DrvError::Tcp(SocketError::RailDown { .. }))
    }
}

impl From<DrvError> for super::Error {
    fn from(e: DrvError) -> Self {
        match e {
            DrvError::Shm(e) => super::Error::Shm(e),
            DrvError::Tcp(e) => super::Error::Tcp(e),
            DrvError::Verbs(e) => e.into(),
        }
    }
}

/// `dispatch!(self, t => expr)`: runs `expr` with `t` bound to the driver,
/// converting its error.
macro_rules! dispatch {
    ($self:ident, $t:ident => $e:expr) => {
        match $self {
            Drv::Shm($t) => $e.map_err(DrvError::Shm),
            Drv::Tcp($t) => $e.map_err(DrvError::Tcp),
            Drv::Verbs($t) => $e.map_err(DrvError::Verbs),
        }
    };
}

impl Transport for Drv<'_> {
    type Error = DrvError;

    fn name(&self) -> &'static str {
        match self {
            Drv::Shm(t) => t.name(),
            Drv::Tcp(t) => t.name(),
            Drv::Verbs(t) => t.name(),
        }
    }

    fn connect(&mut self, peer: u32) -> Result<(), DrvError> {
        dispatch!(self, t => t.connect(peer))
    }

    fn state(&self, peer: u32) -> LinkState {
        match self {
            Drv::Shm(t) => t.state(peer),
            Drv::Tcp(t) => t.state(peer),
            Drv::Verbs(t) => t.state(peer),
        }
    }

    fn heap_len(&self, peer: u32) -> Option<u64> {
        match self {
            Drv::Shm(t) => t.heap_len(peer),
            Drv::Tcp(t) => t.heap_len(peer),
            Drv::Verbs(t) => t.heap_len(peer),
        }
    }

    #[inline]
    fn put(&mut self, peer: u32, offset: u64, src: &[u8], ctx: ContextId) -> Result<(), DrvError> {
        dispatch!(self, t => t.put(peer, offset, src, ctx))
    }

    #[inline]
    fn put_from_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), DrvError> {
        dispatch!(self, t => t.put_from_heap(peer, offset, local_offset, len, ctx))
    }

    #[inline]
    fn get_into_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), DrvError> {
        dispatch!(self, t => t.get_into_heap(peer, offset, local_offset, len, ctx))
    }

    #[inline]
    fn get_start(
        &mut self,
        peer: u32,
        offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<Ticket, DrvError> {
        dispatch!(self, t => t.get_start(peer, offset, len, ctx))
    }

    #[inline]
    fn get_poll(&mut self, ticket: &Ticket, dst: &mut [u8]) -> Result<bool, DrvError> {
        dispatch!(self, t => t.get_poll(ticket, dst))
    }

    #[inline]
    fn atomic_start(
        &mut self,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket, DrvError> {
        dispatch!(self, t => t.atomic_start(peer, offset, op, ctx))
    }

    #[inline]
    fn atomic_poll(&mut self, ticket: &Ticket) -> Result<Option<u64>, DrvError> {
        dispatch!(self, t => t.atomic_poll(ticket))
    }

    fn fence(&mut self) -> Result<(), DrvError> {
        dispatch!(self, t => t.fence())
    }

    fn quiet_poll(&mut self) -> Result<bool, DrvError> {
        dispatch!(self, t => t.quiet_poll())
    }

    fn progress(&mut self, now: Instant) -> PollResult {
        match self {
            Drv::Shm(t) => t.progress(now),
            Drv::Tcp(t) => t.progress(now),
            Drv::Verbs(t) => t.progress(now),
        }
    }

    fn max_get_len(&self) -> u32 {
        match self {
            Drv::Shm(t) => t.max_get_len(),
            Drv::Tcp(t) => t.max_get_len(),
            Drv::Verbs(t) => t.max_get_len(),
        }
    }

    fn close(&mut self) -> Result<(), DrvError> {
        dispatch!(self, t => t.close())
    }
}
