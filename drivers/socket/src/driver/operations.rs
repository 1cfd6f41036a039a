//! The initiator's calls, on one rail: `put`, `put_from_heap`,
//! `put_signal`, `get_into_heap`, `get_start`/`get_poll` and `atomic_start`/`atomic_poll`
//! (reached through [`Rail`](crate::Rail)). Each checks the target and the
//! range, serves this PE itself from its own heap, and otherwise takes a
//! ticket slot ([`super::tickets`]), applies the ordering rules
//! ([`super::recovery`]) and queues frames on the send path ([`super::send`]).

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, LinkState, Ticket},
    wire::{AtomicKind, FrameSignal, SIGNAL_TRAILER},
};

use super::{
    SocketDriver,
    recovery::{check_fence, check_straddle},
    send::{Source, atomic_frame, get_frame, kick, put_frames, put_signal_frame},
    tickets::{NO_SLOT, SLOT_BITS, SlotState},
};
use crate::{Result, SocketError};

impl SocketDriver {
    /// Checks the target and the range; `Ok(false)` for this PE itself.
    fn target(&mut self, rail: usize, peer: u32, offset: u64, len: u64) -> Result<bool> {
        assert!(rail < self.rails(), "rail {rail} of {}", self.rails());
        if self.ctx.closed {
            return Err(SocketError::Closed { peer: Some(peer) });
        }
        let heap_len = if peer == self.ctx.me {
            self.ctx.heap.len()
        } else {
            self.peer_mut(peer)?.st.heap_len
        };
        if offset.checked_add(len).is_none_or(|e| e > heap_len) {
            return Err(SocketError::OutOfBounds {
                peer,
                offset,
                len,
                heap_len,
            });
        }
        if peer == self.ctx.me {
            return Ok(false);
        }
        let p = self.peer_mut(peer)?;
        if p.rails[rail].state != LinkState::Up {
            return Err(SocketError::RailDown { peer, rail });
        }
        Ok(true)
    }

    fn local_range(&self, local_offset: u64, len: u32) -> Result<()> {
        let heap_len = self.ctx.heap.len();
        if local_offset
            .checked_add(u64::from(len))
            .is_none_or(|e| e > heap_len)
        {
            return Err(SocketError::OutOfBounds {
                peer: self.ctx.me,
                offset: local_offset,
                len: u64::from(len),
                heap_len,
            });
        }
        Ok(())
    }

    /// `put` on rail `rail`.
    pub(crate) fn put(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        src: &[u8],
        cx: ContextId,
    ) -> Result<()> {
        if !self.target(rail, peer, offset, src.len() as u64)? {
            self.ctx.heap.write(offset, src);
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        put_frames(ctx, p, rail, offset, Source::Copy(src), cx)
    }

    /// Whether [`Rail::put_signal`](crate::Rail::put_signal) of `len` bytes at heap `offset`,
    /// with its signal word at `signal`, fits one frame: the data and the
    /// [`SIGNAL_TRAILER`] within `max_frame_payload`, the data within one
    /// placement block, and the signal word in a block that travels on the
    /// same data connection (always, with one data connection), so that the
    /// frame keeps the rule that frames touching the same bytes share one
    /// TCP stream. Pure arithmetic, no state.
    pub fn put_signal_fits(&self, offset: u64, len: u64, signal: u64) -> bool {
        let fits = self.signal_fit().fits(offset, len, signal);
        debug_assert_eq!(
            fits,
            len.checked_add(u64::from(SIGNAL_TRAILER))
                .is_some_and(|n| n <= u64::from(self.ctx.cfg.max_frame_payload))
                && self
                    .ctx
                    .chunk_at(offset, len, u64::from(self.ctx.cfg.max_frame_payload))
                    == len
                && self.ctx.conn_for(offset) == self.ctx.conn_for(signal)
        );
        fits
    }

    /// [`SocketDriver::put_signal_fits`] as a value of the configuration
    /// alone, for a caller that decides without holding the driver.
    pub fn signal_fit(&self) -> SignalFit {
        SignalFit {
            max: self.ctx.cfg.max_frame_payload,
            conns: self.ctx.cfg.data_connections,
        }
    }

    /// `put_signal` on rail `rail`: `src` at `offset` on `peer`, then the
    /// 8-byte signal word at `signal.offset` set to (or, for
    /// [`AtomicKind::FetchAdd`], added) `signal.value` (any other kind sets),
    /// in one [`FrameOp::PutSignal`](switchyard_core::wire::FrameOp) frame:
    /// one sequence number, applied once and in order with the connection's
    /// other frames, acked and replayed like a put. The target writes the
    /// data, then updates the word with Release ordering, so that a reader
    /// that sees the signal (Acquire) sees the data. Earlier frames are
    /// ordered before it only by a [`SocketDriver::fence`], as for a put.
    ///
    /// # Errors
    /// As [`Rail`](crate::Rail)'s `put`, plus [`SocketError::Misaligned`]
    /// for a signal word not 8-aligned and [`SocketError::TooLong`] (nothing
    /// sent) when [`SocketDriver::put_signal_fits`] says no.
    pub(crate) fn put_signal(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        src: &[u8],
        signal: FrameSignal,
        cx: ContextId,
    ) -> Result<()> {
        let len = src.len() as u64;
        let local = !self.target(rail, peer, offset, len)?;
        self.target(rail, peer, signal.offset, 8)?;
        if !signal.offset.is_multiple_of(8) {
            return Err(SocketError::Misaligned {
                peer,
                offset: signal.offset,
                align: 8,
            });
        }
        let kind = match signal.kind {
            AtomicKind::FetchAdd => AtomicKind::FetchAdd,
            _ => AtomicKind::Set,
        };
        if local {
            let op = AtomicOp {
                kind,
                width: AtomicWidth::W64,
                operand: signal.value,
                compare: 0,
                fetch: true,
            };
            self.ctx.heap.write(offset, src);
            self.ctx.heap.atomic(signal.offset, &op);
            return Ok(());
        }
        if !self.put_signal_fits(offset, len, signal.offset) {
            return Err(SocketError::TooLong {
                peer,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                max: self
                    .ctx
                    .cfg
                    .max_frame_payload
                    .saturating_sub(SIGNAL_TRAILER),
            });
        }
        let (ctx, p) = self.split(peer)?;
        put_signal_frame(
            ctx,
            p,
            rail,
            offset,
            src,
            FrameSignal { kind, ..signal },
            cx,
        )
    }

    /// `put_from_heap` on rail `rail`.
    pub(crate) fn put_from_heap(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<()> {
        self.local_range(local_offset, len)?;
        if !self.target(rail, peer, offset, u64::from(len))? {
            self.ctx
                .heap
                .copy_within(local_offset, offset, len as usize);
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        put_frames(ctx, p, rail, offset, Source::Heap(local_offset, len), cx)
    }

    /// `get_into_heap` on rail `rail`.
    pub(crate) fn get_into_heap(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<()> {
        self.local_range(local_offset, len)?;
        let max = self.max_get_len();
        if !self.target(rail, peer, offset, u64::from(len))? {
            self.ctx
                .heap
                .copy_within(offset, local_offset, len as usize);
            return Ok(());
        }
        if len == 0 {
            return Ok(());
        }
        let (ctx, p) = self.split(peer)?;
        // Split into gets of at most `max` bytes within one block each, all
        // or nothing.
        let n = {
            let (mut n, mut at, end) = (0u64, offset, offset + u64::from(len));
            while at < end {
                at += ctx.chunk_at(at, end - at, u64::from(max));
                n += 1;
            }
            n
        };
        if p.st.ring.len() + n > crate::dedup::WINDOW || ctx.gets.free_slots() < n as usize {
            return Err(SocketError::WouldBlock {
                peer,
                what: "get table",
            });
        }
        check_fence(ctx, p, rail, offset, u64::from(len))?;
        let mut done = 0u32;
        while done < len {
            let chunk = ctx.chunk_at(
                offset + u64::from(done),
                u64::from(len - done),
                u64::from(max),
            ) as u32;
            let Some(slot) = ctx
                .gets
                .take(peer, chunk, Some(local_offset + u64::from(done)))
            else {
                return Err(SocketError::WouldBlock {
                    peer,
                    what: "get table",
                });
            };
            if let Err(e) = get_frame(ctx, p, rail, offset + u64::from(done), chunk, slot, cx) {
                if let Some(i) = ctx.gets.find(slot) {
                    ctx.gets.free(i);
                }
                return Err(e);
            }
            done += chunk;
        }
        // Batched like small puts: its reply is waited for by a later quiet
        // (which progresses, and so writes what queued), not by this caller,
        // so a window of non-blocking gets goes out in a few gathered writes
        // rather than one `send` (and one wake-up of the target) each.
        kick(ctx, p, rail, false);
        Ok(())
    }

    /// `get_start` on rail `rail`.
    pub(crate) fn get_start(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        len: u32,
        cx: ContextId,
    ) -> Result<Ticket> {
        let max = self.max_get_len();
        if len > max {
            return Err(SocketError::TooLong { peer, len, max });
        }
        let me = self.ctx.me;
        let local = !self.target(rail, peer, offset, u64::from(len))?;
        let Some(slot) = self.ctx.gets.take(peer, len, None) else {
            return Err(SocketError::WouldBlock {
                peer,
                what: "get arena",
            });
        };
        let ticket = Ticket {
            peer,
            offset,
            len,
            slot,
            atomic: None,
            context: cx,
        };
        let idx = self.ctx.gets.find(slot).unwrap_or(0);
        if local || peer == me {
            let s = self.ctx.gets.slots[idx];
            let (heap, arena) = (&self.ctx.heap, &mut self.ctx.gets.arena);
            heap.read(offset, &mut arena[s.at..s.at + len as usize]);
            self.ctx.gets.slots[idx].state = SlotState::Done;
            return Ok(ticket);
        }
        let (ctx, p) = match self.split(peer) {
            Ok(x) => x,
            Err(e) => {
                self.ctx.gets.free(idx);
                return Err(e);
            }
        };
        let r = check_fence(ctx, p, rail, offset, u64::from(len))
            .and_then(|_| check_straddle(ctx, p, rail, offset, len))
            .and_then(|_| get_frame(ctx, p, rail, offset, len, slot, cx));
        if let Err(e) = r {
            ctx.gets.free(idx);
            return Err(e);
        }
        kick(ctx, p, rail, true);
        Ok(ticket)
    }

    /// `get_poll`.
    pub(crate) fn get_poll(&mut self, t: &Ticket, dst: &mut [u8]) -> Result<bool> {
        let Some(idx) = self.ctx.gets.find(t.slot) else {
            return Err(SocketError::StaleTicket {
                peer: t.peer,
                slot: t.slot,
            });
        };
        if self.ctx.gets.slots[idx].state == SlotState::Pending {
            let now = self.ctx.now;
            self.progress(now);
        }
        let s = self.ctx.gets.slots[idx];
        match s.state {
            SlotState::Done => {
                let n = (s.len as usize).min(dst.len());
                dst[..n].copy_from_slice(&self.ctx.gets.arena[s.at..s.at + n]);
                self.ctx.gets.free(idx);
                Ok(true)
            }
            SlotState::Failed => {
                self.ctx.gets.free(idx);
                Err(if self.ctx.closed {
                    SocketError::Closed { peer: Some(t.peer) }
                } else {
                    SocketError::PeerDead { peer: t.peer }
                })
            }
            _ => Ok(false),
        }
    }

    /// `atomic_start` on rail `rail`.
    pub(crate) fn atomic_start(
        &mut self,
        rail: usize,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        cx: ContextId,
    ) -> Result<Ticket> {
        let w = op.width.bytes() as u64;
        let local = !self.target(rail, peer, offset, w)?;
        if !offset.is_multiple_of(w) {
            return Err(SocketError::Misaligned {
                peer,
                offset,
                align: w,
            });
        }
        let mut ticket = Ticket {
            peer,
            offset,
            len: w as u32,
            slot: NO_SLOT,
            atomic: Some(op),
            context: cx,
        };
        let slot = if op.is_fetching() {
            let Some(idx) = self
                .ctx
                .atomics
                .iter()
                .position(|s| s.state == SlotState::Free)
            else {
                return Err(SocketError::WouldBlock {
                    peer,
                    what: "atomic table",
                });
            };
            let s = &mut self.ctx.atomics[idx];
            s.gen_ = s.gen_.wrapping_add(1);
            s.state = SlotState::Pending;
            s.peer = peer;
            Some(idx)
        } else {
            None
        };
        if let Some(idx) = slot {
            ticket.slot = idx as u32 | u32::from(self.ctx.atomics[idx].gen_) << SLOT_BITS;
        }
        if local {
            let old = self.ctx.heap.atomic(offset, &op);
            if let Some(idx) = slot {
                self.ctx.atomics[idx].value = op.width.truncate(old);
                self.ctx.atomics[idx].state = SlotState::Done;
            }
            return Ok(ticket);
        }
        let r = self.split(peer).and_then(|(ctx, p)| {
            check_fence(ctx, p, rail, offset, op.width.bytes() as u64)?;
            atomic_frame(ctx, p, rail, offset, &op, ticket.slot, cx)?;
            kick(ctx, p, rail, true);
            Ok(())
        });
        if let Err(e) = r {
            if let Some(idx) = slot {
                self.ctx.atomics[idx].state = SlotState::Free;
            }
            return Err(e);
        }
        Ok(ticket)
    }

    /// `atomic_poll`.
    pub(crate) fn atomic_poll(&mut self, t: &Ticket) -> Result<Option<u64>> {
        if t.slot == NO_SLOT {
            return Ok(Some(0));
        }
        let idx = (t.slot & ((1 << SLOT_BITS) - 1)) as usize;
        let live =
            self.ctx.atomics.get(idx).is_some_and(|s| {
                s.gen_ == (t.slot >> SLOT_BITS) as u16 && s.state != SlotState::Free
            });
        if !live {
            return Err(SocketError::StaleTicket {
                peer: t.peer,
                slot: t.slot,
            });
        }
        if self.ctx.atomics[idx].state == SlotState::Pending {
            let now = self.ctx.now;
            self.progress(now);
        }
        let s = self.ctx.atomics[idx];
        match s.state {
            SlotState::Done => {
                self.ctx.atomics[idx].state = SlotState::Free;
                Ok(Some(s.value))
            }
            SlotState::Failed => {
                self.ctx.atomics[idx].state = SlotState::Free;
                Err(if self.ctx.closed {
                    SocketError::Closed { peer: Some(t.peer) }
                } else {
                    SocketError::PeerDead { peer: t.peer }
                })
            }
            _ => Ok(None),
        }
    }
}

/// Whether a `put_signal` fits one frame ([`SocketDriver::put_signal_fits`]),
/// from the driver's configuration alone ([`SocketDriver::signal_fit`]): a
/// copy, so it answers without the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalFit {
    /// `max_frame_payload`.
    max: u32,
    /// `data_connections`.
    conns: u8,
}

impl SignalFit {
    /// [`SocketDriver::put_signal_fits`].
    #[inline]
    pub fn fits(&self, offset: u64, len: u64, signal: u64) -> bool {
        let max = u64::from(self.max);
        // The placement block and the data connection of an offset, as the
        // driver's `Ctx::chunk_at` and `Ctx::conn_for` compute them.
        let block = max.max(1);
        let n = u64::from(self.conns.max(1));
        let conn = |o: u64| (o / block) % n;
        len.checked_add(u64::from(SIGNAL_TRAILER))
            .is_some_and(|n| n <= max)
            && len.min(max).min(block - offset % block) == len
            && conn(offset) == conn(signal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TcpConfig;

    #[test]
    fn signal_fit_answers_as_the_driver() {
        for (max_frame_payload, data_connections) in [(48 << 10, 1), (256, 3), (64, 2)] {
            let d = SocketDriver::with_owned_heap(
                TcpConfig {
                    max_frame_payload,
                    data_connections,
                    ..TcpConfig::default()
                },
                1 << 16,
            )
            .expect("a driver");
            let fit = d.signal_fit();
            let mut yes = 0;
            for off in (0..2048u64).step_by(24) {
                for len in [0u64, 8, 24, 40, 200, 1 << 20] {
                    for sig in [0u64, 56, 256, 512, 4096] {
                        // `put_signal_fits` asserts (debug) that the two agree.
                        let f = d.put_signal_fits(off, len, sig);
                        assert_eq!(fit.fits(off, len, sig), f, "{off} {len} {sig}");
                        yes += usize::from(f);
                    }
                }
            }
            assert!(
                yes > 0,
                "nothing fits with {max_frame_payload}, {data_connections}"
            );
        }
    }
}
