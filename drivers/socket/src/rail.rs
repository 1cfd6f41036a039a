//! The transport contract per rail ([`Rail`]) and a single-rail driver that
//! owns itself ([`SingleRail`]).

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, Instant, LinkState, PollResult, Ticket, Transport},
    wire::FrameSignal,
};

use crate::{SocketDriver, SocketError};

/// One rail's view of a [`SocketDriver`]: operations go on that rail, and
/// [`Transport::state`] is that rail's state toward the peer. `progress`,
/// `quiet_poll`, `fence` and `close` act on the whole driver.
#[derive(Debug)]
pub struct Rail<'a> {
    pub(crate) drv: &'a mut SocketDriver,
    pub(crate) rail: usize,
}

impl SocketDriver {
    /// The transport view of rail `rail`.
    ///
    /// # Panics
    /// When `rail >= self.rails()`.
    pub fn rail(&mut self, rail: usize) -> Rail<'_> {
        assert!(
            rail < self.rails(),
            "rail {rail} out of range: this driver has {}",
            self.rails()
        );
        Rail { drv: self, rail }
    }
}

impl Rail<'_> {
    /// A put with signal on this rail, in one frame
    /// ([`SocketDriver::put_signal_fits`] says when it fits): `src` at
    /// `offset` on `peer`, then the signal word updated, Release-ordered
    /// after the data at the target. Non-blocking like `put`: complete at
    /// `quiet`, replayed after a failure like any frame.
    ///
    /// # Errors
    /// As `put`, plus [`SocketError::Misaligned`] (signal word not
    /// 8-aligned) and [`SocketError::TooLong`] (does not fit one frame;
    /// nothing sent).
    pub fn put_signal(
        &mut self,
        peer: u32,
        offset: u64,
        src: &[u8],
        signal: FrameSignal,
        ctx: ContextId,
    ) -> Result<(), SocketError> {
        self.drv
            .put_signal(self.rail, peer, offset, src, signal, ctx)
    }

    /// [`SocketDriver::put_signal_fits`].
    pub fn put_signal_fits(&self, offset: u64, len: u64, signal: u64) -> bool {
        self.drv.put_signal_fits(offset, len, signal)
    }
}

/// Access to the driver and the rail, for the shared Transport impl.
trait Access {
    fn drv(&self) -> &SocketDriver;
    fn drv_mut(&mut self) -> &mut SocketDriver;
    fn rail_idx(&self) -> usize;
}

impl Access for Rail<'_> {
    fn drv(&self) -> &SocketDriver {
        self.drv
    }
    fn drv_mut(&mut self) -> &mut SocketDriver {
        self.drv
    }
    fn rail_idx(&self) -> usize {
        self.rail
    }
}

impl Access for SingleRail {
    fn drv(&self) -> &SocketDriver {
        &self.0
    }
    fn drv_mut(&mut self) -> &mut SocketDriver {
        &mut self.0
    }
    fn rail_idx(&self) -> usize {
        0
    }
}

macro_rules! forward_transport {
    () => {
        type Error = SocketError;

        fn name(&self) -> &'static str {
            "tcp"
        }

        fn connect(&mut self, peer: u32) -> Result<(), SocketError> {
            let r = self.rail_idx();
            self.drv_mut().connect_rail(r, peer)
        }

        fn state(&self, peer: u32) -> LinkState {
            let r = self.rail_idx();
            self.drv().rail_state(r, peer)
        }

        fn heap_len(&self, peer: u32) -> Option<u64> {
            self.drv().heap_len(peer)
        }

        fn put(
            &mut self,
            peer: u32,
            offset: u64,
            src: &[u8],
            ctx: ContextId,
        ) -> Result<(), SocketError> {
            let r = self.rail_idx();
            self.drv_mut().put(r, peer, offset, src, ctx)
        }

        fn put_from_heap(
            &mut self,
            peer: u32,
            offset: u64,
            local_offset: u64,
            len: u32,
            ctx: ContextId,
        ) -> Result<(), SocketError> {
            let r = self.rail_idx();
            self.drv_mut()
                .put_from_heap(r, peer, offset, local_offset, len, ctx)
        }

        fn get_into_heap(
            &mut self,
            peer: u32,
            offset: u64,
            local_offset: u64,
            len: u32,
            ctx: ContextId,
        ) -> Result<(), SocketError> {
            let r = self.rail_idx();
            self.drv_mut()
                .get_into_heap(r, peer, offset, local_offset, len, ctx)
        }

        fn get_start(
            &mut self,
            peer: u32,
            offset: u64,
            len: u32,
            ctx: ContextId,
        ) -> Result<Ticket, SocketError> {
            let r = self.rail_idx();
            self.drv_mut().get_start(r, peer, offset, len, ctx)
        }

        fn get_poll(&mut self, ticket: &Ticket, dst: &mut [u8]) -> Result<bool, SocketError> {
            self.drv_mut().get_poll(ticket, dst)
        }

        fn atomic_start(
            &mut self,
            peer: u32,
            offset: u64,
            op: AtomicOp,
            ctx: ContextId,
        ) -> Result<Ticket, SocketError> {
            let r = self.rail_idx();
            self.drv_mut().atomic_start(r, peer, offset, op, ctx)
        }

        fn atomic_poll(&mut self, ticket: &Ticket) -> Result<Option<u64>, SocketError> {
            self.drv_mut().atomic_poll(ticket)
        }

        fn fence(&mut self) -> Result<(), SocketError> {
            self.drv_mut().fence()
        }

        fn quiet_poll(&mut self) -> Result<bool, SocketError> {
            self.drv_mut().quiet_poll()
        }

        fn progress(&mut self, now: Instant) -> PollResult {
            self.drv_mut().progress(now)
        }

        fn close(&mut self) -> Result<(), SocketError> {
            self.drv_mut().close()
        }

        fn max_get_len(&self) -> u32 {
            self.drv().max_get_len()
        }
    };
}

impl Transport for Rail<'_> {
    forward_transport!();
}

/// A [`SocketDriver`] used through rail 0 only, as an owned transport
/// (the conformance suite, tools).
#[derive(Debug)]
pub struct SingleRail(pub SocketDriver);

impl Transport for SingleRail {
    forward_transport!();
}
