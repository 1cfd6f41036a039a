//! Wire I/O: where an operation goes (a put or get is split at 64 KiB heap
//! blocks, each block always on the same data QP; atomics on the control
//! QP), room for all of it before any of it is queued (send-queue slots,
//! staging, CQ credits, sequence numbers: a bounded spin making room, then
//! `WouldBlock`), fences, the copy of a put's bytes into the QP's staging
//! ring, and the work requests: RDMA WRITE with immediate (the put's
//! receipt), READ, fetch-add and compare-swap, recorded in the QP's
//! send-queue slot, signaled every k-th ([`crate::signal`]), chained in
//! a per-QP batch and posted with one doorbell per batch. A refused
//! doorbell fails the peer ([`super::recovery`]).

use std::ptr;

use switchyard_core::transport::LinkState;

use super::{BATCH, BLOCK, FULL_SPIN, Record, VerbsDriver, What, pending_code, wr_id};
use crate::{
    Result, VerbsError,
    atomic_plan::Wr,
    card::MAX_QPS,
    sys::{self, Sge, send_flags},
};

impl VerbsDriver {
    /// The data QP of the heap block that holds `offset`.
    pub(super) fn data_qp(&self, offset: u64) -> usize {
        1 + ((offset / BLOCK) % u64::from(self.p.data_qps)) as usize
    }

    /// A pending fence before posting to QP `qi` of `peer`: the peer's other
    /// QPs must drain first (markers make them report); then the next WR on
    /// `qi` carries `IBV_SEND_FENCE` (it also waits for earlier reads and
    /// atomics on `qi`). Returns whether to set the flag; the caller clears
    /// the fence once that WR is queued.
    ///
    /// The fence's WR goes behind `qi`'s pre-fence WRs (one QP executes in
    /// order), but a later WR on another QP (an atomic on the control QP, a
    /// put to another block's data QP) would not be: until `qi` drained
    /// (`fence_qp`), a WR on another QP waits for it first.
    pub(super) fn fence_check(&mut self, peer: u32, qi: usize) -> Result<bool> {
        let pe = self.peer_ref(peer)?;
        let after = pe.fence_qp.filter(|&f| f != qi);
        if !pe.fence && after.is_none() {
            return Ok(false);
        }
        for spin in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            let pe = self.peer_ref(peer)?;
            let (fence, n) = (pe.fence, pe.qps.len());
            // Under a new fence every other QP drains (the fenced one's
            // included); else only the last fence's QP.
            let wait = |i: usize| if fence { i != qi } else { Some(i) == after };
            let busy = pe
                .qps
                .iter()
                .enumerate()
                .any(|(i, q)| wait(i) && q.outstanding() > 0);
            if !busy {
                let pe = self.peer_mut(peer)?;
                pe.fence_qp = if fence { Some(qi) } else { None };
                return Ok(fence);
            }
            if spin == 0 {
                self.stats.fence_waits += 1;
            }
            for i in (0..n).filter(|&i| wait(i)) {
                let _ = self.marker(peer, i);
                self.flush_qp(peer, i);
            }
            self.poll_cq();
        }
        Err(self.would_block(peer, "fence"))
    }

    pub(super) fn fence_done(&mut self, peer: u32) {
        if let Some(pe) = self.peers.get_mut(peer) {
            pe.fence = false;
        }
    }

    /// Sequence numbers for `n` operations toward `peer`, if the settle
    /// window has room for all of them.
    fn seqs_fit(&self, peer: u32, n: u64) -> bool {
        self.peer_ref(peer)
            .is_ok_and(|pe| pe.settle.can_issue(pe.next_seq + n.saturating_sub(1)))
    }

    pub(super) fn next_seq(&mut self, peer: u32) -> Result<u64> {
        let pe = self.peer_mut(peer)?;
        let seq = pe.next_seq;
        if !pe.settle.can_issue(seq) {
            return Err(self.would_block(peer, "sequence window"));
        }
        self.peer_mut(peer)?.next_seq += 1;
        Ok(seq)
    }

    /// Queues one WR on QP `qi` of `peer`. `sge` is (addr, len, lkey) or
    /// `None` for a zero-length WR. Posts the batch when full or `flush`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn queue_wr(
        &mut self,
        peer: u32,
        qi: usize,
        what: What,
        seq: u64,
        opcode: u32,
        sge: Option<(u64, u32, u32)>,
        remote: (u64, u32),
        atomic: Option<(u64, u64)>,
        must_signal: bool,
        fence: bool,
        inline: bool,
        stage_end: u64,
    ) -> Result<()> {
        if self.peer_ref(peer)?.qps[qi].n_batch == BATCH {
            self.flush_qp(peer, qi);
            // A refused doorbell failed the link: queue nothing on it.
            self.check_up(peer)?;
        }
        if self.peer_ref(peer)?.qps[qi].sq.free() == 0 {
            return Err(self.would_block(peer, "send queue"));
        }
        let pe_inc;
        let slot;
        {
            let n_pes = self.n_pes;
            let Some(pe) = self.peers.get_mut(peer) else {
                return Err(VerbsError::InvalidPe { peer, n_pes });
            };
            pe_inc = pe.incarnation;
            let q = &mut pe.qps[qi];
            let (run, last) = q.sq.checkpoint();
            slot = match q.sq.reserve(must_signal) {
                Ok(s) => s,
                Err(_) => return Err(self.would_block(peer, "send queue")),
            };
            if slot.signaled && !self.credits.take() {
                q.sq.unreserve(slot, run, last);
                return Err(self.would_block(peer, "completion queue credits"));
            }
            if slot.signaled {
                q.sig_in_flight += 1;
            }
            let depth = q.records.len() as u64;
            let rcpt = if opcode == sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM {
                q.rcpt_next += 1;
                q.rcpt_next - 1
            } else {
                0
            };
            q.records[(slot.index % depth) as usize] = Record {
                seq,
                what,
                stage_end,
                rcpt,
            };
            let n = q.n_batch;
            let wr = &mut q.batch[n];
            if rcpt != 0 {
                // The low 32 bits; the target extends them (in order, one
                // at a time, so never ambiguous).
                sys::set_imm(wr, rcpt as u32);
            }
            wr.wr_id = wr_id(peer, qi as u8, pe_inc, slot.index);
            wr.opcode = opcode;
            wr.send_flags = if slot.signaled {
                send_flags::SIGNALED
            } else {
                0
            } | if fence { send_flags::FENCE } else { 0 }
                | if inline { send_flags::INLINE } else { 0 };
            match sge {
                Some((addr, length, lkey)) => {
                    q.sges[n] = Sge { addr, length, lkey };
                    wr.num_sge = 1;
                }
                None => wr.num_sge = 0,
            }
            match atomic {
                Some((compare_add, swap)) => {
                    sys::set_atomic(wr, remote.0, remote.1, compare_add, swap)
                }
                None => sys::set_rdma(wr, remote.0, remote.1),
            }
            if q.n_batch == 0 {
                self.batched += 1;
                if !q.listed && self.n_pending < self.pending.len() {
                    q.listed = true;
                    self.pending[self.n_pending] = pending_code(peer, qi);
                    self.n_pending += 1;
                }
            }
            q.n_batch += 1;
            q.stage.commit(stage_end);
            if qi > 0 {
                pe.load.add(what.bytes());
            }
        }
        self.stats.wrs += 1;
        if slot.signaled {
            self.stats.signaled += 1;
        }
        if inline {
            self.stats.inline_wrs += 1;
        }
        if must_signal || self.peer_ref(peer)?.qps[qi].n_batch == BATCH {
            self.flush_qp(peer, qi);
        }
        Ok(())
    }

    /// Rings the doorbell of every QP whose work requests are still batched
    /// (small puts wait in a batch so that one doorbell posts many). The
    /// context calls it whenever the application leaves the library, so a
    /// batch never waits on the application's next call: batching coalesces
    /// the work requests of one call (the pieces of a put, a collective's
    /// puts, `quiet`'s markers) and of the calls between two progress steps
    /// inside one wait. Visits only the QPs that batched something; returns
    /// whether it posted anything. No allocation.
    pub fn post_batches(&mut self) -> bool {
        let mut posted = false;
        while self.n_pending > 0 {
            self.n_pending -= 1;
            let code = self.pending[self.n_pending];
            let (peer, qi) = (code >> 4, (code & 0xf) as usize);
            let Some(p) = self.peers.get_mut(peer) else {
                continue;
            };
            let Some(q) = p.qps.get_mut(qi) else {
                continue;
            };
            q.listed = false;
            if q.n_batch > 0 {
                self.flush_qp(peer, qi);
                posted = true;
            }
        }
        posted
    }

    /// Posts QP `qi`'s batch with one doorbell. A failed post fails the peer.
    pub(super) fn flush_qp(&mut self, peer: u32, qi: usize) {
        let Some(pe) = self.peers.get_mut(peer) else {
            return;
        };
        let q = &mut pe.qps[qi];
        let n = q.n_batch;
        if n == 0 {
            return;
        }
        let base = q.batch.as_mut_ptr();
        let sges = q.sges.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i < n <= BATCH`, inside both arrays; the chain points
            // only into this QP's own arrays, which do not move.
            unsafe {
                let w = base.add(i);
                (*w).sg_list = sges.add(i);
                (*w).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        // SAFETY: the chain is valid (above); every SGE points into the
        // registered heap or scratch, which outlive the WRs (the QP is reset
        // before either is released), and inline data is read during the call.
        let r = unsafe { q.qp.post(base) };
        q.n_batch = 0;
        self.batched = self.batched.saturating_sub(1);
        self.stats.doorbells += 1;
        match r {
            Ok(()) => q.to_hw = q.sq.posted(),
            Err((_errno, accepted)) => {
                q.to_hw = q.sq.posted() - (n - accepted) as u64;
                self.fail_peer(peer);
            }
        }
    }

    /// Posts a signaled zero-length write on QP `qi` of `peer` when its
    /// outstanding WRs end unsignaled (so a completion will report them).
    pub(super) fn marker(&mut self, peer: u32, qi: usize) -> Result<()> {
        let (needs, card) = {
            let pe = self.peer_ref(peer)?;
            let q = &pe.qps[qi];
            (q.outstanding() > 0 && q.sq.tail_unsignaled(), pe.remote)
        };
        if !needs {
            return Ok(());
        }
        let card = card.ok_or(VerbsError::PeerUnknown { peer })?;
        self.stats.markers += 1;
        let end = self.peer_ref(peer)?.qps[qi].stage.head();
        self.queue_wr(
            peer,
            qi,
            What::Marker,
            0,
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            None,
            (card.heap_base, card.rkey),
            None,
            true,
            false,
            false,
            end,
        )
    }

    /// Posts one atomic step for ticket `idx` on the control QP.
    pub(super) fn post_atomic(&mut self, idx: u32, wr: Wr, first: bool) -> Result<()> {
        let t = self.tickets[idx as usize];
        let peer = t.peer;
        let card = self
            .peer_ref(peer)?
            .remote
            .ok_or(VerbsError::PeerUnknown { peer })?;
        let lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let local = self.scratch_ptr as u64 + (self.atomic_off + 8 * idx as usize) as u64;
        let (opcode, word_offset, ops) = match wr {
            Wr::FetchAdd { word_offset, add } => (
                sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
                word_offset,
                (add, 0),
            ),
            Wr::CompareSwap {
                word_offset,
                compare,
                swap,
            } => (
                sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
                word_offset,
                (compare, swap),
            ),
        };
        let fence = first && self.fence_check(peer, 0)?;
        let end = self.peer_ref(peer)?.qps[0].stage.head();
        self.queue_wr(
            peer,
            0,
            What::Atomic { ticket: idx, first },
            t.seq,
            opcode,
            Some((local, 8, lkey)),
            (card.heap_base + word_offset, card.rkey),
            Some(ops),
            true,
            fence,
            false,
            end,
        )?;
        if fence {
            self.fence_done(peer);
        }
        Ok(())
    }

    /// Puts `len` bytes (from staging `src` or the heap) at `offset`,
    /// split at block boundaries, one sequence number per piece. Checks room
    /// for every piece first (SQ slots, staging, CQ credits, sequence
    /// window, fence), so a put is queued whole or not at all.
    pub(super) fn put_pieces(
        &mut self,
        peer: u32,
        offset: u64,
        len: u64,
        src: Option<&[u8]>,
        local_offset: u64,
    ) -> Result<()> {
        let card = self.remote_bounds(peer, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let fence = self.fence_check(peer, self.data_qp(offset))?;
        let pieces = self.dry_run(peer, offset, len, src.is_some())?;
        let heap_lkey = self.heap_mr.as_deref().map_or(0, sys::Mr::lkey);
        let scratch_lkey = self.scratch_mr.as_ref().map_or(0, sys::Mr::lkey);
        let (mut at, mut done) = (offset, 0u64);
        for piece in 0..pieces {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            let (what, sge, inline, end) = match src {
                Some(bytes) => {
                    let q = &self.peer_ref(peer)?.qps[qi];
                    let (start, end) =
                        q.stage
                            .fit(q.stage.head(), n)
                            .ok_or(VerbsError::WouldBlock {
                                peer,
                                what: "staging",
                            })?;
                    let inline = n <= u64::from(q.inline_cap);
                    let dst = q.stage_off + q.stage.offset(start) as usize;
                    // SAFETY: `dst..dst + n` lies in this QP's staging ring
                    // inside the scratch allocation, and the ring accounting
                    // says the device no longer reads it; `done + n` is
                    // within `bytes`.
                    unsafe {
                        ptr::copy_nonoverlapping(
                            bytes.as_ptr().add(done as usize),
                            self.scratch_ptr.add(dst),
                            n as usize,
                        );
                    }
                    (
                        What::PutStaged {
                            offset: at,
                            len: n as u32,
                            at: start,
                        },
                        (self.scratch_ptr as u64 + dst as u64, n as u32, scratch_lkey),
                        inline,
                        end,
                    )
                }
                None => (
                    What::PutHeap {
                        offset: at,
                        len: n as u32,
                        local_offset: local_offset + done,
                    },
                    (self.heap as u64 + local_offset + done, n as u32, heap_lkey),
                    false,
                    self.peer_ref(peer)?.qps[qi].stage.head(),
                ),
            };
            let seq = self.next_seq(peer)?;
            if piece > 0 && self.peer_ref(peer)?.state != LinkState::Up {
                // A doorbell for the earlier pieces was refused and failed
                // the link: this piece joins them in the replays instead
                // of the failed QP (where it would be neither done nor
                // replayed).
                self.replay_unposted(peer, qi, what, seq, end);
                done += n;
                at += n;
                continue;
            }
            self.queue_wr(
                peer,
                qi,
                what,
                seq,
                // With immediate: the target's receive completion is the
                // put's receipt.
                sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                Some(sge),
                (card.heap_base + at, card.rkey),
                None,
                false,
                fence && piece == 0,
                inline,
                end,
            )?;
            if piece == 0 && fence {
                self.fence_done(peer);
            }
            done += n;
            at += n;
        }
        Ok(())
    }

    /// Checks that the pieces of an operation of `len` bytes at `offset`
    /// fit: SQ slots per QP, staging (when `staged`), CQ credits (as if
    /// every piece were signaled) and the sequence window. When they do
    /// not, makes room for a bounded while ([`FULL_SPIN`] CQ polls, with
    /// the batches posted and markers behind unsignaled tails so the
    /// completions that free room do come), then gives up with
    /// `WouldBlock`. Returns the number of pieces.
    fn dry_run(&mut self, peer: u32, offset: u64, len: u64, staged: bool) -> Result<u64> {
        let mut what = "send queue";
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            match self.room(peer, offset, len, staged)? {
                Ok(pieces) => return Ok(pieces),
                Err(w) => what = w,
            }
            self.make_room(peer);
        }
        Err(self.would_block(peer, what))
    }

    /// Room for one signaled WR on QP `qi` of `peer` (a get or an atomic
    /// step), with the same bounded spin as [`VerbsDriver::dry_run`].
    pub(super) fn single_room(&mut self, peer: u32, qi: usize) -> Result<()> {
        let mut what = "send queue";
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            let q = &self.peer_ref(peer)?.qps[qi];
            let short = if q.sq.free() < 2 {
                Some("send queue")
            } else if self.credits.available() < 2 {
                Some("completion queue credits")
            } else if !self.seqs_fit(peer, 1) {
                Some("sequence window")
            } else {
                None
            };
            match short {
                None => return Ok(()),
                Some(w) => what = w,
            }
            self.make_room(peer);
        }
        Err(self.would_block(peer, what))
    }

    /// Waits (a bounded spin, then `WouldBlock`) until QP `qi` of `peer`
    /// has nothing outstanding.
    pub(super) fn drain_qp(&mut self, peer: u32, qi: usize) -> Result<()> {
        for _ in 0..FULL_SPIN {
            // Making room polls the CQ, which may fail the link: never queue
            // on a failed one (the work would be neither done nor replayed).
            self.check_up(peer)?;
            if self.peer_ref(peer)?.qps[qi].outstanding() == 0 {
                return Ok(());
            }
            let _ = self.marker(peer, qi);
            self.flush_qp(peer, qi);
            self.poll_cq();
        }
        Err(self.would_block(peer, "the next block's queue"))
    }

    /// Posts the peer's batches and markers, and polls the CQ once.
    fn make_room(&mut self, peer: u32) {
        let n = self.peer_ref(peer).map_or(0, |p| p.qps.len());
        for qi in 0..n {
            let _ = self.marker(peer, qi);
            self.flush_qp(peer, qi);
        }
        self.retry_reposts();
        self.poll_cq();
    }

    /// [`VerbsDriver::dry_run`]'s check: `Ok(Ok(pieces))` when everything
    /// fits, `Ok(Err(what))` naming what is short.
    fn room(
        &self,
        peer: u32,
        offset: u64,
        len: u64,
        staged: bool,
    ) -> Result<core::result::Result<u64, &'static str>> {
        let mut heads = [0u64; MAX_QPS];
        let mut slots = [0u32; MAX_QPS];
        let mut pieces = 0u64;
        let pe = self.peer_ref(peer)?;
        for (i, q) in pe.qps.iter().enumerate() {
            heads[i] = q.stage.head();
            // Keep one slot per QP for a quiet marker.
            slots[i] = q.sq.free().saturating_sub(1);
        }
        let mut at = offset;
        while at < offset + len {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            pieces += 1;
            if slots[qi] == 0 {
                return Ok(Err("send queue"));
            }
            slots[qi] -= 1;
            if staged {
                match pe.qps[qi].stage.fit(heads[qi], n) {
                    Some((_, end)) => heads[qi] = end,
                    None => return Ok(Err("staging")),
                }
            }
            at += n;
        }
        // One credit kept for a marker.
        if self.credits.available() < pieces + 1 {
            return Ok(Err("completion queue credits"));
        }
        if !self.seqs_fit(peer, pieces) {
            return Ok(Err("sequence window"));
        }
        Ok(Ok(pieces))
    }

    /// Gets `len` bytes at `offset` of `peer` into this PE's heap at
    /// `local_offset`: RDMA READs split at block boundaries, one sequence
    /// number per piece, queued whole or not at all (as
    /// [`VerbsDriver::put_pieces`]).
    pub(super) fn get_pieces(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
    ) -> Result<()> {
        let card = self.remote_bounds(peer, offset, len.into())?;
        if len == 0 {
            return Ok(());
        }
        let len = u64::from(len);
        let fence = self.fence_check(peer, self.data_qp(offset))?;
        let pieces = self.dry_run(peer, offset, len, false)?;
        let lkey = self.heap_mr.as_deref().map_or(0, sys::Mr::lkey);
        let (mut at, mut done) = (offset, 0u64);
        for piece in 0..pieces {
            let n = (BLOCK - at % BLOCK).min(offset + len - at);
            let qi = self.data_qp(at);
            let end = self.peer_ref(peer)?.qps[qi].stage.head();
            let seq = self.next_seq(peer)?;
            self.queue_wr(
                peer,
                qi,
                What::GetHeap {
                    offset: at,
                    len: n as u32,
                    local_offset: local_offset + done,
                },
                seq,
                sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                Some((self.heap as u64 + local_offset + done, n as u32, lkey)),
                (card.heap_base + at, card.rkey),
                None,
                false,
                fence && piece == 0,
                false,
                end,
            )?;
            if piece == 0 && fence {
                self.fence_done(peer);
            }
            done += n;
            at += n;
        }
        Ok(())
    }
}
