//! The [`Transport`] operations the shim calls: their checks (closed,
//! bounds, alignment, lengths), operations on this PE's own heap (done at
//! once, in memory), and the tickets of gets and atomics; the work toward
//! other PEs goes to [`super::post`], and what only completes later is
//! finished by [`super::progress`].

use std::ptr;

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, Instant, LinkState, PollResult, Ticket, Transport},
};

use super::{BLOCK, TState, TicketSlot, VerbsDriver, What};
use crate::{Result, VerbsError, atomic_plan::AtomicPlan, card::VerbsCard, sys};

/// `Ticket::slot` of a get from this PE's own heap (copied at poll).
const LOCAL_SLOT: u32 = u32::MAX;

impl VerbsDriver {
    pub(super) fn remote_bounds(&self, peer: u32, offset: u64, len: u64) -> Result<VerbsCard> {
        let card = self
            .check_up(peer)?
            .remote
            .ok_or(VerbsError::PeerUnknown { peer })?;
        if offset
            .checked_add(len)
            .is_none_or(|end| end > card.heap_len)
        {
            return Err(VerbsError::OutOfBounds {
                peer,
                offset,
                len,
                heap_len: card.heap_len,
            });
        }
        Ok(card)
    }

    fn local_bounds(&self, offset: u64, len: u64) -> Result<()> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.heap_len)
        {
            return Err(VerbsError::OutOfBounds {
                peer: self.me,
                offset,
                len,
                heap_len: self.heap_len,
            });
        }
        Ok(())
    }

    fn own_range(&self, offset: u64, len: u64) -> Result<*mut u8> {
        if self.closed {
            return Err(VerbsError::Closed {
                peer: Some(self.me),
            });
        }
        self.local_bounds(offset, len)?;
        // SAFETY: in bounds of the heap (checked above), which `new`'s
        // contract keeps mapped.
        Ok(unsafe { self.heap.add(offset as usize) })
    }

    /// Copies `len` bytes of this PE's heap from `from` to `to` (ranges may
    /// overlap).
    fn own_copy(&self, to: u64, from: u64, len: u32) -> Result<()> {
        let dst = self.own_range(to, len.into())?;
        let src = self.own_range(from, len.into())?;
        // SAFETY: both ranges are in the heap (own_range); `copy` allows
        // overlap.
        unsafe { ptr::copy(src, dst, len as usize) };
        Ok(())
    }

    fn own_atomic(&mut self, offset: u64, op: AtomicOp) -> Result<u64> {
        let align = op.width.bytes() as u64;
        let p = self.own_range(offset, align)?;
        if !offset.is_multiple_of(align) {
            return Err(VerbsError::Misaligned {
                peer: self.me,
                offset,
                align,
            });
        }
        use switchyard_core::{
            sync::atomic::{AtomicU32, AtomicU64},
            transport::{AtomicWidth, heap_rmw_u32, heap_rmw_u64},
        };
        Ok(match op.width {
            // SAFETY: in bounds and 8-aligned (the heap is 8-aligned); the
            // heap's words are only ever accessed atomically or by the
            // device, as in the other drivers.
            AtomicWidth::W64 => heap_rmw_u64(unsafe { AtomicU64::from_ptr(p.cast()) }, &op),
            // SAFETY: in bounds and 4-aligned, as above.
            AtomicWidth::W32 => heap_rmw_u32(unsafe { AtomicU32::from_ptr(p.cast()) }, &op),
        })
    }
}

impl Transport for VerbsDriver {
    type Error = VerbsError;

    fn name(&self) -> &'static str {
        "verbs"
    }

    fn connect(&mut self, peer: u32) -> Result<()> {
        self.connect_peer(peer)
    }

    fn state(&self, peer: u32) -> LinkState {
        if peer == self.me {
            return if self.closed {
                LinkState::Down
            } else {
                LinkState::Up
            };
        }
        self.peer_ref(peer).map_or(LinkState::Down, |p| p.state)
    }

    fn heap_len(&self, peer: u32) -> Option<u64> {
        if peer == self.me {
            return Some(self.heap_len);
        }
        self.peer_ref(peer).ok()?.remote.map(|c| c.heap_len)
    }

    fn put(&mut self, peer: u32, offset: u64, src: &[u8], _ctx: ContextId) -> Result<()> {
        if peer == self.me {
            let dst = self.own_range(offset, src.len() as u64)?;
            // SAFETY: `dst` has room for `src` (checked by own_range); a
            // caller's buffer never overlaps the heap mapping it writes.
            unsafe { ptr::copy(src.as_ptr(), dst, src.len()) };
            return Ok(());
        }
        self.put_pieces(peer, offset, src.len() as u64, Some(src), 0)
    }

    fn put_from_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        _ctx: ContextId,
    ) -> Result<()> {
        self.local_bounds(local_offset, len.into())?;
        if peer == self.me {
            return self.own_copy(offset, local_offset, len);
        }
        self.put_pieces(peer, offset, len.into(), None, local_offset)
    }

    fn get_into_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        _ctx: ContextId,
    ) -> Result<()> {
        self.local_bounds(local_offset, len.into())?;
        if peer == self.me {
            return self.own_copy(local_offset, offset, len);
        }
        self.get_pieces(peer, offset, local_offset, len)
    }

    fn max_get_len(&self) -> u32 {
        // One block, so a get is one READ on one data QP.
        self.cfg.get_slot_bytes.min(BLOCK as u32)
    }

    fn get_start(&mut self, peer: u32, offset: u64, len: u32, ctx: ContextId) -> Result<Ticket> {
        let max = self.max_get_len();
        if len > max {
            return Err(VerbsError::TooLong { peer, len, max });
        }
        if peer == self.me {
            self.own_range(offset, len.into())?;
            return Ok(Ticket {
                peer,
                offset,
                len,
                slot: LOCAL_SLOT,
                atomic: None,
                context: ctx,
            });
        }
        let card = self.remote_bounds(peer, offset, len.into())?;
        // At most one block's length: one READ on the first block's data
        // QP, behind the earlier writes to those bytes (RC executes a QP's
        // requests in order). A get straddling into the next block also
        // reads bytes whose writes went over that block's QP: it waits for
        // that QP to drain first (as the TCP driver waits for the second
        // block's connection).
        let qi = self.data_qp(offset);
        let fence = self.fence_check(peer, qi)?;
        if len > 0 {
            let other = self.data_qp(offset + u64::from(len) - 1);
            if other != qi {
                self.drain_qp(peer, other)?;
            }
        }
        if len > 0 {
            self.single_room(peer, qi)?;
        }
        let idx = self.take_ticket(peer)?;
        let tgen = {
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: if len == 0 {
                    TState::Done(0)
                } else {
                    TState::Pending
                },
                peer,
                offset,
                seq: 0,
                plan: None,
                internal: false,
                repost: None,
            };
            t.tgen
        };
        let ticket = Ticket {
            peer,
            offset,
            len,
            slot: u32::from(tgen) << 16 | idx,
            atomic: None,
            context: ctx,
        };
        if len == 0 {
            return Ok(ticket);
        }
        let local = self.scratch_ptr as u64
            + (self.get_off + idx as usize * self.cfg.get_slot_bytes as usize) as u64;
        let lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let end = self.peer_ref(peer)?.qps[qi].stage.head();
        let seq = match self.next_seq(peer) {
            Ok(seq) => seq,
            Err(e) => {
                self.free_ticket(idx);
                return Err(e);
            }
        };
        self.tickets[idx as usize].seq = seq;
        if let Err(e) = self.queue_wr(
            peer,
            qi,
            What::Get { ticket: idx, len },
            seq,
            sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
            Some((local, len, lkey)),
            (card.heap_base + offset, card.rkey),
            None,
            true,
            fence,
            false,
            end,
        ) {
            // Checked above; settle the number so the window moves on.
            if let Some(pe) = self.peers.get_mut(peer) {
                let _ = pe.settle.settle(seq);
            }
            self.free_ticket(idx);
            return Err(e);
        }
        if fence {
            self.fence_done(peer);
        }
        Ok(ticket)
    }

    fn get_poll(&mut self, ticket: &Ticket, dst: &mut [u8]) -> Result<bool> {
        let peer = ticket.peer;
        if peer == self.me && ticket.slot == LOCAL_SLOT {
            let n = (ticket.len as usize).min(dst.len());
            let src = self.own_range(ticket.offset, n as u64)?;
            // SAFETY: `src..src + n` is in the heap (own_range) and `dst`
            // holds `n` bytes; a caller's buffer is not in the heap mapping.
            unsafe { ptr::copy(src, dst.as_mut_ptr(), n) };
            return Ok(true);
        }
        let idx = self.ticket_of(peer, ticket.slot)?;
        if self.tickets[idx as usize].state == TState::Pending {
            self.flush_qp(peer, self.data_qp(ticket.offset));
            self.poll_cq();
        }
        match self.tickets[idx as usize].state {
            TState::Pending => Ok(false),
            TState::Done(_) => {
                let n = (ticket.len as usize).min(dst.len());
                let src = self.get_off + idx as usize * self.cfg.get_slot_bytes as usize;
                // SAFETY: the slot's buffer lies in the scratch allocation
                // and the READ into it completed.
                unsafe { ptr::copy_nonoverlapping(self.scratch_ptr.add(src), dst.as_mut_ptr(), n) };
                self.free_ticket(idx);
                Ok(true)
            }
            TState::Failed { .. } | TState::Free => {
                self.free_ticket(idx);
                Err(VerbsError::PeerDown { peer })
            }
        }
    }

    fn atomic_start(
        &mut self,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket> {
        if peer == self.me {
            let idx = self.take_ticket(peer)?;
            let v = match self.own_atomic(offset, op) {
                Ok(v) => v,
                Err(e) => {
                    self.free_ticket(idx);
                    return Err(e);
                }
            };
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: TState::Done(v),
                peer,
                offset,
                seq: 0,
                plan: None,
                internal: false,
                repost: None,
            };
            let slot = u32::from(t.tgen) << 16 | idx;
            if !op.is_fetching() {
                self.free_ticket(idx);
            }
            return Ok(Ticket {
                peer,
                offset,
                len: op.width.bytes() as u32,
                slot,
                atomic: Some(op),
                context: ctx,
            });
        }
        let card = self.remote_bounds(peer, offset, op.width.bytes() as u64)?;
        if !self.p.atomics || !card.atomics {
            return Err(VerbsError::NoAtomics { peer });
        }
        let plan = AtomicPlan::new(offset, op).map_err(|m| VerbsError::Misaligned {
            peer,
            offset,
            align: m.align,
        })?;
        // The emulation works on the aligned 8-byte word: it must be inside.
        self.remote_bounds(peer, offset & !7, 8)?;
        self.single_room(peer, 0)?;
        let idx = self.take_ticket(peer)?;
        let seq = match self.next_seq(peer) {
            Ok(seq) => seq,
            Err(e) => {
                self.free_ticket(idx);
                return Err(e);
            }
        };
        let tgen = {
            let t = &mut self.tickets[idx as usize];
            *t = TicketSlot {
                tgen: t.tgen,
                state: TState::Pending,
                peer,
                offset,
                seq,
                plan: Some(plan),
                internal: !op.is_fetching(),
                repost: None,
            };
            t.tgen
        };
        if let Err(e) = self.post_atomic(idx, plan.first(), true) {
            // Nothing reached the device: settle the number and give the
            // ticket back.
            if let Some(pe) = self.peers.get_mut(peer) {
                let _ = pe.settle.settle(seq);
            }
            self.free_ticket(idx);
            return Err(e);
        }
        Ok(Ticket {
            peer,
            offset,
            len: op.width.bytes() as u32,
            slot: u32::from(tgen) << 16 | idx,
            atomic: Some(op),
            context: ctx,
        })
    }

    fn atomic_poll(&mut self, ticket: &Ticket) -> Result<Option<u64>> {
        let peer = ticket.peer;
        let idx = self.ticket_of(peer, ticket.slot)?;
        if self.tickets[idx as usize].state == TState::Pending {
            self.retry_reposts();
            self.poll_cq();
        }
        match self.tickets[idx as usize].state {
            TState::Pending => Ok(None),
            TState::Done(v) => {
                self.free_ticket(idx);
                Ok(Some(v))
            }
            TState::Failed { unknown } => {
                let offset = self.tickets[idx as usize].offset;
                self.free_ticket(idx);
                Err(if unknown {
                    VerbsError::OutcomeUnknown { peer, offset }
                } else {
                    VerbsError::PeerDown { peer }
                })
            }
            TState::Free => Err(VerbsError::StaleTicket {
                peer,
                slot: ticket.slot,
            }),
        }
    }

    fn fence(&mut self) -> Result<()> {
        if self.closed {
            return Err(VerbsError::Closed { peer: None });
        }
        for pe in self.peers.iter_mut() {
            if pe.state == LinkState::Up && pe.qps.iter().any(|q| q.outstanding() > 0) {
                pe.fence = true;
            }
        }
        Ok(())
    }

    fn quiet_poll(&mut self) -> Result<bool> {
        if self.closed {
            return Err(VerbsError::Closed { peer: None });
        }
        // Operations lost or of unknown outcome first, also after the
        // device died (it fails every peer, which may lose some).
        for (peer, pe) in self.peers.iter_ids_mut() {
            if let Some(e) = pe.unreported.take() {
                return Err(e);
            }
            if pe.lost > 0 {
                let ops = core::mem::take(&mut pe.lost);
                return Err(VerbsError::ReplayLost { peer, ops });
            }
        }
        if self.fatal {
            return Err(VerbsError::DeviceFatal);
        }
        let mut done = true;
        for slot in 0..self.peers.len() {
            let peer = self.peers.id(slot);
            let Some(pe) = self.peers.get_mut(peer) else {
                continue;
            };
            if pe.n_replays > 0 {
                // Completed through the fallback once the shim drains them.
                return Err(VerbsError::PeerDown { peer });
            }
            for qi in 0..pe.qps.len() {
                // The marker joins the batch: one doorbell for both.
                let _ = self.marker(peer, qi);
                self.flush_qp(peer, qi);
                if self
                    .peers
                    .get(peer)
                    .is_some_and(|p| p.qps[qi].outstanding() > 0)
                {
                    done = false;
                }
            }
        }
        if self
            .tickets
            .iter()
            .any(|t| t.internal && t.state == TState::Pending)
        {
            self.retry_reposts();
            done = false;
        }
        if !done {
            self.poll_cq();
        }
        Ok(done)
    }

    fn progress(&mut self, now: Instant) -> PollResult {
        self.progress_step(now)
    }

    fn close(&mut self) -> Result<()> {
        self.close_all()
    }
}
