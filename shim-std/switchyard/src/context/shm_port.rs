//! A context's port on the PE's shared-memory transport: its own copy of the
//! leg table ([`ShmLegs`]) for every operation that fits it (puts, gets,
//! atomics, copies within the heaps, the own heap's loads: no lock, nothing
//! written that another context reads), and the transport itself, shared by
//! the PE's contexts behind a mutex, for the rest: the typed error of an
//! operation the legs decline, liveness checks, link states.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use switchyard_core::{
    route::ContextId,
    sync::atomic::{Ordering, fence},
    transport::{AtomicOp, AtomicWidth, Instant, LinkState, PollResult, Ticket, Transport},
};
use switchyard_shm::{ShmError, ShmLegs, ShmTransport};

/// One context's port on the PE's shared-memory transport.
#[derive(Debug)]
pub(super) struct ShmPort {
    legs: ShmLegs,
    drv: Arc<Mutex<ShmTransport>>,
}

impl ShmPort {
    /// A port on `drv`, with the leg table as it is now.
    pub(super) fn new(drv: &Arc<Mutex<ShmTransport>>) -> ShmPort {
        let guard = drv.lock().unwrap_or_else(PoisonError::into_inner);
        #[allow(unsafe_code)]
        // SAFETY: the port keeps the transport alive (its `Arc`), and nothing
        // calls `set_address` or `close` on a transport once it is shared:
        // the PE reaches it only through ports, and a port exposes neither
        // (its `close` is a no-op; the mappings go with the last one).
        let legs = unsafe { guard.legs() };
        drop(guard);
        ShmPort {
            legs,
            drv: Arc::clone(drv),
        }
    }

    /// The shared transport (the slow path).
    fn lock(&self) -> MutexGuard<'_, ShmTransport> {
        self.drv.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// See [`ShmLegs::put_leg`].
    #[inline(always)]
    pub(super) fn put_leg(&mut self, pe: u32, offset: u64, src: &[u8]) -> bool {
        self.legs.put_leg(pe, offset, src)
    }

    /// See [`ShmLegs::get_leg`].
    #[inline(always)]
    pub(super) fn get_leg(&mut self, pe: u32, offset: u64, dst: &mut [u8]) -> bool {
        self.legs.get_leg(pe, offset, dst)
    }

    /// See [`ShmLegs::atomic_leg`].
    #[inline(always)]
    pub(super) fn atomic_leg(&mut self, pe: u32, offset: u64, op: AtomicOp) -> Option<u64> {
        self.legs.atomic_leg(pe, offset, op)
    }

    /// This PE's own heap mapping (the same in every context).
    pub(super) fn local_heap(&self) -> (*mut u8, u64) {
        self.legs.local_heap()
    }

    /// A same-node peer's heap, `None` when not mapped or dead.
    pub(super) fn peer_heap(&self, pe: u32) -> Option<(*mut u8, u64)> {
        self.lock().peer_heap(pe)
    }

    /// See [`ShmTransport::load_acquire`].
    #[inline]
    pub(super) fn load_acquire(&self, offset: u64, width: AtomicWidth) -> Result<u64, ShmError> {
        match self.legs.load_acquire(offset, width) {
            Some(v) => Ok(v),
            None => self.lock().load_acquire(offset, width),
        }
    }
}

/// A ticket completed at once (a get's range, an atomic's old value in
/// `atomic.compare`), as the shm driver makes them.
fn ticket(peer: u32, offset: u64, len: u32, atomic: Option<AtomicOp>, ctx: ContextId) -> Ticket {
    Ticket {
        peer,
        offset,
        len,
        slot: 0,
        atomic,
        context: ctx,
    }
}

impl Transport for ShmPort {
    type Error = ShmError;

    fn name(&self) -> &'static str {
        "shm"
    }

    fn connect(&mut self, pe: u32) -> Result<(), ShmError> {
        self.lock().connect(pe)
    }

    fn state(&self, pe: u32) -> LinkState {
        self.lock().state(pe)
    }

    fn heap_len(&self, pe: u32) -> Option<u64> {
        self.lock().heap_len(pe)
    }

    #[inline]
    fn put(&mut self, pe: u32, offset: u64, src: &[u8], ctx: ContextId) -> Result<(), ShmError> {
        if self.legs.put_leg(pe, offset, src) {
            return Ok(());
        }
        self.lock().put(pe, offset, src, ctx)
    }

    fn put_from_heap(
        &mut self,
        pe: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), ShmError> {
        let me = self.legs.me();
        if self.legs.copy_leg(pe, offset, me, local_offset, len) {
            return Ok(());
        }
        self.lock()
            .put_from_heap(pe, offset, local_offset, len, ctx)
    }

    fn get_into_heap(
        &mut self,
        pe: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), ShmError> {
        let me = self.legs.me();
        if self.legs.copy_leg(me, local_offset, pe, offset, len) {
            return Ok(());
        }
        self.lock()
            .get_into_heap(pe, offset, local_offset, len, ctx)
    }

    fn get_start(
        &mut self,
        pe: u32,
        offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<Ticket, ShmError> {
        if self.legs.holds(pe, offset, u64::from(len)) {
            return Ok(ticket(pe, offset, len, None, ctx));
        }
        self.lock().get_start(pe, offset, len, ctx)
    }

    #[inline]
    fn get_poll(&mut self, t: &Ticket, dst: &mut [u8]) -> Result<bool, ShmError> {
        if dst.len() == t.len as usize && self.legs.get_leg(t.peer, t.offset, dst) {
            return Ok(true);
        }
        self.lock().get_poll(t, dst)
    }

    fn atomic_start(
        &mut self,
        pe: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket, ShmError> {
        match self.legs.atomic_leg(pe, offset, op) {
            // Complete at once; the old value rides in the ticket.
            Some(old) => Ok(ticket(
                pe,
                offset,
                op.width.bytes() as u32,
                Some(AtomicOp { compare: old, ..op }),
                ctx,
            )),
            None => self.lock().atomic_start(pe, offset, op, ctx),
        }
    }

    #[inline]
    fn atomic_poll(&mut self, t: &Ticket) -> Result<Option<u64>, ShmError> {
        Ok(t.atomic.map(|op| op.compare))
    }

    #[inline]
    fn fence(&mut self) -> Result<(), ShmError> {
        // SYNC POINT with the Acquire loads of the targets (`wait_until`, get),
        // as the driver's own fence: stores before it are visible before
        // stores after it.
        fence(Ordering::Release);
        Ok(())
    }

    #[inline]
    fn quiet_poll(&mut self) -> Result<bool, ShmError> {
        // As the driver's: every store has executed; SeqCst orders them before
        // anything later, loads included.
        fence(Ordering::SeqCst);
        Ok(true)
    }

    /// The liveness checks, when no other context of the PE is running them.
    fn progress(&mut self, now: Instant) -> PollResult {
        match self.drv.try_lock() {
            Ok(mut d) => d.progress(now),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().progress(now),
            Err(std::sync::TryLockError::WouldBlock) => PollResult::Idle,
        }
    }

    /// Nothing: the PE's mappings stay until its last context is gone (other
    /// contexts may still use them).
    fn close(&mut self) -> Result<(), ShmError> {
        Ok(())
    }
}
