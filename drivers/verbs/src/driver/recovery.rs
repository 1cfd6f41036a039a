//! Failure, replay and recovery: `fail_peer` takes a peer to Error and
//! settles every outstanding operation once (puts and gets into the heap
//! kept for replay, gets failed, atomics replayed, failed or of unknown
//! outcome); the receipts handshake (this side collects its receipts of the
//! peer's puts once every data QP reported its last WQE, or withholds them;
//! the initiator settles its in-doubt puts with the peer's receipts, or
//! abandons them); and the replays drained to the fallback transport.

use switchyard_core::transport::LinkState;

use super::{
    EMPTY, Replay, ReplayRec, TState, VerbsDriver, What, Wqe, fail_ticket, release_ticket,
};
use crate::{Event, Receipts, Result, VerbsError, Withheld, qp_plan::QpState, seq::Settle};

impl VerbsDriver {
    /// Takes `peer` to Error: resets its QPs, settles every outstanding
    /// operation once (replay, fail, or unknown), reports the events.
    pub(super) fn fail_peer(&mut self, peer: u32) {
        let Some(pe) = self.peers.get_mut(peer) else {
            return;
        };
        if pe.state == LinkState::Error || pe.remote.is_none() {
            return; // already failed, or never connected
        }
        pe.state = LinkState::Error;
        pe.incarnation = pe.incarnation.wrapping_add(1);
        self.stats.peer_failures += 1;
        let mut give = 0u32;
        let mut puts = false;
        let mut refused = None;
        for qi in 0..pe.qps.len() {
            let q = &mut pe.qps[qi];
            // ERROR, not RESET: nothing more of the peer's lands here, its
            // receive completions stay in the receive CQ (a reset may drop
            // them) and the QP reports its last WQE; rebuild resets it. A
            // data QP that cannot be moved there may still take the
            // peer's puts: its receipts cannot be trusted.
            let moved = q.qp.modify(&crate::qp_plan::Step::Error).is_ok();
            if qi > 0 && !moved {
                refused.get_or_insert(qi as u8);
            }
            q.wqe = if moved { Wqe::Awaiting } else { Wqe::Idle };
            q.state = QpState::Err;
            give += q.sig_in_flight;
            q.sig_in_flight = 0;
            if q.n_batch > 0 {
                q.n_batch = 0;
                self.batched = self.batched.saturating_sub(1);
            }
            let depth = q.records.len() as u64;
            let first = q.sq.posted() - q.sq.outstanding();
            for i in first..q.sq.posted() {
                let rec = std::mem::replace(&mut q.records[(i % depth) as usize], EMPTY);
                let reached = i < q.to_hw;
                if rec.seq == 0 || pe.settle.settle(rec.seq) != Settle::New {
                    continue; // markers, and anything already settled
                }
                match rec.what {
                    What::PutStaged { .. } | What::PutHeap { .. } | What::GetHeap { .. } => {
                        if pe.n_replays < pe.replays.len() {
                            puts |= rec.rcpt != 0 && reached;
                            pe.replays[pe.n_replays] = Some(ReplayRec {
                                seq: rec.seq,
                                qp: qi as u8,
                                what: rec.what,
                                atomic: None,
                                rcpt: rec.rcpt,
                            });
                            pe.n_replays += 1;
                            self.stats.replays += 1;
                        } else {
                            // No room to keep it for replay: lost,
                            // reported by the next quiet.
                            pe.lost += 1;
                        }
                    }
                    What::Get { ticket, .. } => {
                        fail_ticket(&mut self.tickets, ticket, false, &mut self.stats)
                    }
                    What::Atomic { ticket, .. } => {
                        // Only a native op's WR or the emulation's winning
                        // compare-swap changes the word; earlier steps were
                        // reads or lost compare-swaps. So a step that never
                        // reached the device means the op was not applied.
                        let t = self.tickets[ticket as usize];
                        if !reached && t.internal && pe.n_replays < pe.replays.len() {
                            pe.replays[pe.n_replays] = Some(ReplayRec {
                                seq: rec.seq,
                                qp: 0,
                                what: rec.what,
                                atomic: t.plan.map(|p| (t.offset, *p.op())),
                                rcpt: 0,
                            });
                            pe.n_replays += 1;
                            self.stats.replays += 1;
                            release_ticket(&mut self.tickets, &mut self.free_list, ticket);
                        } else {
                            if t.internal && reached && pe.unreported.is_none() {
                                pe.unreported = Some(VerbsError::OutcomeUnknown {
                                    peer,
                                    offset: t.offset,
                                });
                            } else if t.internal && !reached {
                                // Not applied, no room to replay it.
                                pe.lost += 1;
                            }
                            fail_ticket(&mut self.tickets, ticket, reached, &mut self.stats);
                            if t.internal {
                                release_ticket(&mut self.tickets, &mut self.free_list, ticket);
                            }
                        }
                    }
                    What::Marker | What::Empty => {}
                }
            }
            q.sq.reset();
            q.to_hw = q.sq.posted();
        }
        // Every send queue is reset: the backlog is gone (what is kept is
        // in `replays`, for the fallback).
        pe.load.clear();
        // A put that reached the device may have landed: wait for the
        // peer's receipts before replaying any of them.
        pe.await_receipts = puts;
        // And this side collects its receipts of the peer's puts (not
        // when a data QP stayed out of the error state: withheld below).
        pe.receipts = None;
        pe.collect_until = None;
        if !pe.collect && refused.is_none() {
            pe.collect = true;
            self.collecting += 1;
            if let Some((b, _)) = &self.lease {
                b.collecting(true);
            }
        }
        self.credits.give(give);
        // Atomics whose next compare-swap was waiting for room never
        // applied it: replay the non-fetching ones, fail the others (safe to
        // retry elsewhere).
        let pe = self.peers.get_mut(peer).expect("peer checked above");
        for idx in 0..self.tickets.len() {
            let t = self.tickets[idx];
            if t.peer != peer || t.repost.is_none() || t.state != TState::Pending {
                continue;
            }
            self.tickets[idx].repost = None;
            self.reposts = self.reposts.saturating_sub(1);
            if pe.settle.settle(t.seq) != Settle::New {
                continue;
            }
            if t.internal && pe.n_replays < pe.replays.len() {
                pe.replays[pe.n_replays] = Some(ReplayRec {
                    seq: t.seq,
                    qp: 0,
                    what: What::Atomic {
                        ticket: idx as u32,
                        first: false,
                    },
                    atomic: t.plan.map(|p| (t.offset, *p.op())),
                    rcpt: 0,
                });
                pe.n_replays += 1;
                self.stats.replays += 1;
            } else {
                fail_ticket(&mut self.tickets, idx as u32, false, &mut self.stats);
                if t.internal {
                    pe.lost += 1;
                }
            }
            if t.internal {
                release_ticket(&mut self.tickets, &mut self.free_list, idx as u32);
            }
        }
        let generation = self.peers.get(peer).map_or(0, |p| p.generation) + 1;
        self.push_event(Event::Link {
            peer,
            state: LinkState::Error,
        });
        self.push_event(Event::RebuildNeeded { peer, generation });
        if let Some(qp) = refused {
            self.stats.receipts_withheld += 1;
            self.push_event(Event::ReceiptsWithheld {
                peer,
                generation,
                reason: Withheld::ModifyFailed { qp },
            });
        }
    }

    /// Where `peer`'s receipts are in the receive side's table.
    pub(super) fn seen_range(&self, peer: u32) -> core::ops::Range<usize> {
        let d = usize::from(self.p.data_qps);
        match self.peers.slot_of(peer) {
            Some(s) => s * d..(s + 1) * d,
            None => 0..0,
        }
    }

    /// Finishes the receipt collection of every failed peer whose data QPs
    /// all reported their last WQE: polls the receive CQ empty, keeps the
    /// receipts and reports [`Event::Receipts`]. Gives up on a peer whose
    /// data QPs did not all report it by the collection deadline
    /// ([`VerbsConfig::collect_timeout_ms`](crate::params::VerbsConfig::collect_timeout_ms)
    /// after the first step that saw it collecting): no answer
    /// ([`Event::ReceiptsWithheld`]), and the rebuild may go ahead. So a
    /// missing event costs at most that long of async-event reads on the
    /// progress path.
    pub(super) fn collect_receipts(&mut self) {
        if self.collecting == 0 {
            return;
        }
        self.async_events();
        let now = self.now.nanos;
        let patience = u64::from(self.cfg.collect_timeout_ms) * 1_000_000;
        for slot in 0..self.peers.len() {
            let peer = self.peers.id(slot);
            let Some(pe) = self.peers.get_mut(peer) else {
                continue;
            };
            if !pe.collect {
                continue;
            }
            if let Some(i) = pe.qps.iter().skip(1).position(|q| q.wqe != Wqe::Reached) {
                let until = *pe.collect_until.get_or_insert(now.saturating_add(patience));
                if now < until {
                    continue;
                }
                // Receive completions of that QP may still come: an answer
                // now could be too low. Give up without one.
                pe.collect = false;
                pe.collect_until = None;
                let generation = pe.generation + 1;
                self.collecting -= 1;
                if let Some((b, _)) = &self.lease {
                    b.collecting(false);
                }
                self.stats.receipts_withheld += 1;
                self.push_event(Event::ReceiptsWithheld {
                    peer,
                    generation,
                    reason: Withheld::NoLastWqe { qp: i as u8 + 1 },
                });
                continue;
            }
            let mut applied = Receipts {
                n: self.p.data_qps,
                ..Receipts::default()
            };
            let range = self.seen_range(peer);
            if let Some(r) = &self.recv {
                r.drain_and_read(range, &mut applied.seq);
            }
            let Some(pe) = self.peers.get_mut(peer) else {
                continue;
            };
            let generation = pe.generation + 1;
            pe.collect = false;
            pe.collect_until = None;
            pe.receipts = Some((generation, applied));
            self.collecting -= 1;
            if let Some((b, _)) = &self.lease {
                b.collecting(false);
            }
            self.push_event(Event::Receipts {
                peer,
                generation,
                applied,
            });
        }
    }

    /// The receipts this side collected at the last failure of the link to
    /// `peer` (and the generation that failure rebuilds to), once
    /// [`Event::Receipts`] was reported; `None` before, or while
    /// collecting. Kept until the next failure, so a peer that asks late is
    /// answered the same.
    pub fn receipts(&self, peer: u32) -> Option<(u32, Receipts)> {
        self.peer_ref(peer).ok()?.receipts
    }

    /// Whether in-doubt puts toward `peer` wait for its receipts.
    pub fn awaits_receipts(&self, peer: u32) -> bool {
        self.peer_ref(peer).is_ok_and(|p| p.await_receipts)
    }

    /// Settles the in-doubt puts toward `peer` with its receipts (from its
    /// [`Event::Receipts`] for `generation`, the one this side's
    /// [`Event::RebuildNeeded`] named): each put whose receipt is at most
    /// the one `applied` gives for its data QP landed, and is dropped from
    /// the replays; the rest are drained by the next
    /// [`VerbsDriver::drain_replays`], in order. Returns how many were
    /// known landed. Without puts waiting, nothing happens (`Ok(0)`).
    ///
    /// # Errors
    ///
    /// [`VerbsError::BadReceipts`] when `generation` is not the failure's,
    /// `applied` has not one entry per data QP, or a receipt is above any
    /// put this side posted on that QP (nothing is settled then).
    pub fn settle_receipts(&mut self, peer: u32, generation: u32, applied: &[u64]) -> Result<u64> {
        let pe = self.peer_mut(peer)?;
        if !pe.await_receipts {
            return Ok(0);
        }
        let bad = |what| Err(VerbsError::BadReceipts { peer, what });
        if generation != pe.generation + 1 {
            return bad("not the generation of this side's failure");
        }
        if applied.len() + 1 != pe.qps.len() {
            return bad("not one receipt per data QP");
        }
        if applied
            .iter()
            .zip(pe.qps.iter().skip(1))
            .any(|(&a, q)| a >= q.rcpt_next)
        {
            return bad("a receipt above every put posted on its QP");
        }
        let mut landed = 0u64;
        for r in pe.replays.iter_mut().take(pe.n_replays) {
            let Some(rec) = r else { continue };
            let put = matches!(rec.what, What::PutStaged { .. } | What::PutHeap { .. });
            if put && rec.rcpt != 0 && rec.qp > 0 && rec.rcpt <= applied[usize::from(rec.qp) - 1] {
                *r = None;
                landed += 1;
            }
        }
        pe.await_receipts = false;
        self.stats.receipts_settled += landed;
        self.stats.replays -= landed.min(self.stats.replays);
        Ok(landed)
    }

    /// Gives up on `peer`'s receipts (it is dead, or did not answer in
    /// time): every put waiting for them is dropped and counted, for the
    /// caller to report as lost (replaying one could apply it twice, not
    /// replaying it could lose it: neither is silent). Gets and atomics
    /// waiting stay for [`VerbsDriver::drain_replays`]. Returns the puts
    /// dropped.
    pub fn abandon_receipts(&mut self, peer: u32) -> u64 {
        let Ok(pe) = self.peer_mut(peer) else {
            return 0;
        };
        if !pe.await_receipts {
            return 0;
        }
        let mut n = 0u64;
        for r in pe.replays.iter_mut().take(pe.n_replays) {
            if r.is_some_and(|rec| {
                matches!(rec.what, What::PutStaged { .. } | What::PutHeap { .. })
            }) {
                *r = None;
                n += 1;
            }
        }
        pe.await_receipts = false;
        self.stats.receipts_abandoned += n;
        self.stats.replays -= n.min(self.stats.replays);
        n
    }

    /// Calls `f` with every operation waiting for replay over the fallback
    /// (each once: settled by sequence), then frees what they held. Replay
    /// them before any later operation to that peer, in the order given:
    /// per QP in issue order, and operations on the same bytes always
    /// shared a QP, so their order is kept.
    pub fn drain_replays(&mut self, mut f: impl FnMut(Replay<'_>)) {
        let scratch = self.scratch_ptr;
        for (peer, pe) in self.peers.iter_ids_mut() {
            if pe.n_replays == 0 || pe.await_receipts {
                continue;
            }
            for r in pe.replays.iter_mut().take(pe.n_replays) {
                let Some(r) = r.take() else { continue };
                let replay = match (r.what, r.atomic) {
                    (_, Some((offset, op))) => Replay::Atomic {
                        peer,
                        seq: r.seq,
                        offset,
                        op,
                    },
                    (What::PutStaged { offset, len, at }, None) => {
                        let q = &pe.qps[usize::from(r.qp)];
                        let start = q.stage_off + q.stage.offset(at) as usize;
                        // SAFETY: the staged bytes lie inside the scratch
                        // allocation and the QP is in the error state (the
                        // device no longer reads them; it is reset only by
                        // a rebuild, after the replays are drained).
                        let bytes =
                            unsafe { std::slice::from_raw_parts(scratch.add(start), len as usize) };
                        Replay::Put {
                            peer,
                            seq: r.seq,
                            offset,
                            bytes,
                        }
                    }
                    (
                        What::PutHeap {
                            offset,
                            len,
                            local_offset,
                        },
                        None,
                    ) => Replay::PutFromHeap {
                        peer,
                        seq: r.seq,
                        offset,
                        local_offset,
                        len,
                    },
                    (
                        What::GetHeap {
                            offset,
                            len,
                            local_offset,
                        },
                        None,
                    ) => Replay::GetIntoHeap {
                        peer,
                        seq: r.seq,
                        offset,
                        local_offset,
                        len,
                    },
                    _ => continue,
                };
                f(replay);
            }
            pe.n_replays = 0;
            for q in pe.qps.iter_mut() {
                q.stage.release_all();
            }
        }
    }

    /// Adds a piece of a put that was never posted (its link failed while
    /// the put was queued) to the peer's replays, after the pieces
    /// `fail_peer` put there: it carries no receipt, so it is replayed
    /// whatever the peer's receipts say. Its staged bytes stay until the
    /// replays are drained.
    pub(super) fn replay_unposted(
        &mut self,
        peer: u32,
        qi: usize,
        what: What,
        seq: u64,
        stage_end: u64,
    ) {
        let Some(pe) = self.peers.get_mut(peer) else {
            return;
        };
        pe.qps[qi].stage.commit(stage_end);
        if pe.settle.settle(seq) != Settle::New {
            return;
        }
        if pe.n_replays < pe.replays.len() {
            pe.replays[pe.n_replays] = Some(ReplayRec {
                seq,
                qp: qi as u8,
                what,
                atomic: None,
                rcpt: 0,
            });
            pe.n_replays += 1;
            self.stats.replays += 1;
        } else {
            pe.lost += 1;
        }
    }

    /// Fake HCA only: keeps at most `n` operations toward `peer` for
    /// replay (the list is sized for every outstanding WR, so tests shrink
    /// it to reach the full case). Allocates: call it before traffic.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_limit_replays(&mut self, peer: u32, n: usize) {
        if let Ok(pe) = self.peer_mut(peer)
            && pe.n_replays == 0
        {
            pe.replays = vec![None; n].into_boxed_slice();
        }
    }
}
