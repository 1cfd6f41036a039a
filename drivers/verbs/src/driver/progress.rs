//! The progress loop: doorbells for batches left behind, CQ polling in
//! batches, each completion retiring its QP's records up to it (staging
//! freed, sequence numbers settled, gets done, the next step of an emulated
//! atomic posted), the receive side (the receipts of the peers' puts,
//! receives re-posted), the receipt collections of failed links, and the
//! async events (QP and port errors, a fatal device, last-WQE events).

use std::ptr;

use switchyard_core::transport::{Instant, PollResult};

use super::{
    ASYNC_EVERY, EMPTY, ReplayRec, SET_TAG, TState, VerbsDriver, What, Wqe, fail_ticket,
    release_ticket, split_wr_id,
};
use crate::{
    Event, SetBudget,
    atomic_plan::{Next, Wr},
    seq::Settle,
    sys,
};

impl VerbsDriver {
    /// Polls the CQ once (a batch). Returns whether anything was reaped.
    pub(super) fn poll_cq(&mut self) -> bool {
        let Some(cq) = self.cq.as_mut() else {
            return false;
        };
        let n = match cq.poll(&mut self.cqes) {
            Ok(n) => n,
            Err(_) => {
                self.device_failed();
                return false;
            }
        };
        for i in 0..n {
            let c = self.cqes[i];
            self.on_completion(c);
        }
        n > 0
    }

    fn on_completion(&mut self, c: sys::Cqe) {
        let (peer, qi, inc, low) = split_wr_id(c.wr_id);
        let ok = c.ok;
        let Some(pe) = self.peers.get_mut(peer) else {
            self.stats.stale_completions += 1;
            return;
        };
        if pe.incarnation != inc || usize::from(qi) >= pe.qps.len() {
            // A flush of an earlier incarnation: its credits were returned
            // when the peer failed.
            self.stats.stale_completions += 1;
            return;
        }
        if !ok {
            self.stats.completion_errors += 1;
            let q = &mut pe.qps[usize::from(qi)];
            if q.sig_in_flight > 0 {
                q.sig_in_flight -= 1;
                self.credits.give(1);
            }
            self.fail_peer(peer);
            return;
        }
        let q = &mut pe.qps[usize::from(qi)];
        let Some(index) = q.sq.resolve(low) else {
            self.stats.stale_completions += 1;
            return;
        };
        let from = q.sq.posted() - q.sq.outstanding();
        if q.sq.complete(index).is_err() {
            self.stats.stale_completions += 1;
            return;
        }
        q.sig_in_flight = q.sig_in_flight.saturating_sub(1);
        self.credits.give(1);
        self.stats.completions += 1;
        self.retire_rest(peer, usize::from(qi), from, index);
    }

    /// Retires records `from..=to` of QP `qi` (split out of
    /// `on_completion` so the ticket table can be borrowed per record).
    ///
    /// Reads and atomics are always signaled, so only the last record of a
    /// range can be one; the atomic's next step is posted after the loop
    /// anyway, so a new record never lands on one not yet retired.
    fn retire_rest(&mut self, peer: u32, qi: usize, from: u64, to: u64) {
        let mut deferred: Option<u32> = None;
        let mut i = from;
        while i <= to {
            let Some(pe) = self.peers.get_mut(peer) else {
                return;
            };
            let q = &mut pe.qps[qi];
            let depth = q.records.len() as u64;
            let rec = std::mem::replace(&mut q.records[(i % depth) as usize], EMPTY);
            q.stage.release_to(rec.stage_end);
            if qi > 0 {
                pe.load.retire(rec.what.bytes());
            }
            // An atomic is settled when its last step is done.
            if rec.seq != 0 && !matches!(rec.what, What::Atomic { .. }) {
                let _ = pe.settle.settle(rec.seq);
            }
            match rec.what {
                What::Get { ticket, .. } => {
                    if let Some(t) = self.tickets.get_mut(ticket as usize) {
                        t.state = TState::Done(0);
                    }
                }
                What::Atomic { ticket, .. } => {
                    if let Some(earlier) = deferred.replace(ticket) {
                        self.atomic_step(earlier);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        if let Some(ticket) = deferred {
            self.atomic_step(ticket);
        }
    }

    /// An atomic WR of ticket `idx` completed: read the fetched word and
    /// finish or post the next compare-swap.
    fn atomic_step(&mut self, idx: u32) {
        let at = self.atomic_off + 8 * idx as usize;
        // SAFETY: the word lies in the scratch allocation, 8-aligned (the
        // scratch is u64s and `atomic_off` is a multiple of 8); the device
        // wrote it before the completion was polled.
        let word = unsafe { ptr::read_volatile(self.scratch_ptr.add(at).cast::<u64>()) };
        let t = &mut self.tickets[idx as usize];
        let Some(plan) = t.plan.as_mut() else { return };
        let before = plan.retries();
        let next = plan.on_result(word);
        self.stats.cas_retries += u64::from(plan.retries() - before);
        match next {
            Next::Done(v) => {
                t.state = TState::Done(v);
                let (peer, seq, internal) = (t.peer, t.seq, t.internal);
                if let Some(pe) = self.peers.get_mut(peer) {
                    let _ = pe.settle.settle(seq);
                }
                if internal {
                    self.free_ticket(idx);
                }
            }
            Next::Post(wr) => {
                if !self.continue_atomic(idx, wr) {
                    self.tickets[idx as usize].repost = Some(wr);
                    self.reposts += 1;
                }
            }
        }
    }

    /// Posts the next compare-swap of ticket `idx`. `false` when the queue
    /// is full (retry later). Any other failure ends the atomic: none of
    /// its earlier steps changed the word (reads and lost compare-swaps), so
    /// it fails with `PeerDown` (safe to retry elsewhere), or is replayed
    /// when nobody polls it.
    fn continue_atomic(&mut self, idx: u32, wr: Wr) -> bool {
        use switchyard_core::transport::{ErrorKind, TransportError};
        match self.post_atomic(idx, wr, false) {
            Ok(()) => return true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => {}
        }
        let t = self.tickets[idx as usize];
        if let Some(pe) = self.peers.get_mut(t.peer)
            && pe.settle.settle(t.seq) == Settle::New
        {
            if t.internal && pe.n_replays < pe.replays.len() {
                pe.replays[pe.n_replays] = Some(ReplayRec {
                    seq: t.seq,
                    qp: 0,
                    what: What::Atomic {
                        ticket: idx,
                        first: false,
                    },
                    atomic: t.plan.map(|p| (t.offset, *p.op())),
                    rcpt: 0,
                });
                pe.n_replays += 1;
                self.stats.replays += 1;
            } else if t.internal {
                // Never applied (see above), and nobody polls it.
                pe.lost += 1;
            }
        }
        fail_ticket(&mut self.tickets, idx, false, &mut self.stats);
        if t.internal {
            release_ticket(&mut self.tickets, &mut self.free_list, idx);
        }
        true
    }

    /// Retries atomic steps that found the control queue full.
    pub(super) fn retry_reposts(&mut self) {
        if self.reposts == 0 {
            return;
        }
        for idx in 0..self.tickets.len() as u32 {
            if let Some(wr) = self.tickets[idx as usize].repost
                && self.tickets[idx as usize].state == TState::Pending
                && self.continue_atomic(idx, wr)
            {
                self.tickets[idx as usize].repost = None;
                self.reposts -= 1;
            }
        }
    }

    /// Polls the receive side once (a batch of receipts, receives
    /// re-posted; skipped while another thread polls it). Returns whether
    /// anything was reaped.
    fn poll_recv(&mut self) -> bool {
        let Some(r) = &self.recv else { return false };
        let busy = r.poll() == PollResult::Busy;
        if r.failed() {
            self.device_failed();
        }
        busy
    }

    fn device_failed(&mut self) {
        if self.fatal {
            return;
        }
        self.fatal = true;
        for slot in 0..self.peers.len() {
            self.fail_peer(self.peers.id(slot));
        }
        self.push_event(Event::DeviceFatal);
    }

    /// The next async event: the device's, or the fake HCA's.
    fn next_async(&self) -> Option<sys::AsyncEvent> {
        if self.reads_async {
            if let Some(e) = self.ctx.as_ref().and_then(|c| c.next_async_event()) {
                return Some(e);
            }
            if let Some(e) = self.cq.as_ref().and_then(sys::Cq::fake_device_event) {
                return Some(e);
            }
        }
        self.cq.as_ref().and_then(sys::Cq::fake_event)
    }

    /// The (peer, QP index) of a QP event's tag, when the QP is this
    /// driver's; a QP set's event read by the PE's driver is left in the
    /// set's mailbox ([`crate::sets`]) instead, any other ignored.
    fn event_qp(&mut self, tag: usize, kind: u32) -> Option<(u32, usize)> {
        use sys::event::*;
        let qi = tag & 0xFF;
        if tag & SET_TAG != 0 && self.set_peer.is_none() {
            let bits = match kind {
                _ if qi >= 16 => 0,
                LAST_WQE_REACHED => crate::sets::MAIL_LAST_WQE << qi,
                QP_FATAL | QP_REQ_ERR | QP_ACCESS_ERR | PATH_MIG_ERR => {
                    crate::sets::MAIL_QP_FATAL << qi
                }
                _ => 0,
            };
            match self.sets.get() {
                Some(b) if bits != 0 => b.post(((tag & !SET_TAG) >> 8) as u32, bits),
                _ => self.stats.stale_async_events += 1,
            }
            return None;
        }
        if tag & SET_TAG != self.tag_bits {
            // A PE driver's QP read by a set (never on a device, where
            // sets read no events): not this driver's.
            self.stats.stale_async_events += 1;
            return None;
        }
        match self.set_peer {
            Some(peer) => Some((peer, qi)),
            None => Some(((tag >> 8) as u32, qi)),
        }
    }

    /// A data QP's last WQE reached (ignored unless awaited).
    fn last_wqe(&mut self, peer: u32, qi: usize) {
        if let Some(pe) = self.peers.get_mut(peer)
            && let Some(q) = pe.qps.get_mut(qi)
        {
            if q.wqe == Wqe::Awaiting {
                q.wqe = Wqe::Reached;
            } else {
                self.stats.stale_async_events += 1;
            }
        }
    }

    /// A set: what the PE's driver left in its mailbox (the device's events
    /// of its QPs, the port's and the device's).
    fn set_mail(&mut self) -> bool {
        use crate::sets::*;
        let (Some(peer), Some((b, slot))) = (self.set_peer, &self.lease) else {
            return false;
        };
        let mail = b.take_mail(*slot);
        if mail == 0 {
            return false;
        }
        self.stats.async_events += u64::from(mail.count_ones());
        for qi in 0..self.peer_ref(peer).map_or(0, |p| p.qps.len()).min(16) {
            if mail & MAIL_QP_FATAL << qi != 0 {
                self.fail_peer(peer);
            }
            if mail & MAIL_LAST_WQE << qi != 0 {
                self.last_wqe(peer, qi);
            }
        }
        if mail & MAIL_PORT_DOWN != 0 {
            self.fail_peer(peer);
            self.push_event(Event::PortDown { port: self.port });
        }
        if mail & MAIL_PORT_ACTIVE != 0 {
            self.push_event(Event::PortActive { port: self.port });
        }
        if mail & MAIL_DEVICE_FATAL != 0 {
            self.device_failed();
        }
        true
    }

    pub(super) fn async_events(&mut self) -> bool {
        let mut any = self.set_mail();
        while let Some(ev) = self.next_async() {
            any = true;
            self.stats.async_events += 1;
            use sys::event::*;
            let qp = match ev.qp_context {
                Some(tag) => match self.event_qp(tag, ev.kind) {
                    Some(qp) => Some(qp),
                    None => continue,
                },
                None => None,
            };
            // Port and device events reach the sets too (their mailboxes).
            let to_sets = match ev.kind {
                PORT_ERR => crate::sets::MAIL_PORT_DOWN,
                PORT_ACTIVE => crate::sets::MAIL_PORT_ACTIVE,
                DEVICE_FATAL => crate::sets::MAIL_DEVICE_FATAL,
                _ => 0,
            };
            if to_sets != 0
                && let Some(b) = self.sets.get()
            {
                b.post_all(to_sets);
            }
            match ev.kind {
                QP_FATAL | QP_REQ_ERR | QP_ACCESS_ERR | PATH_MIG_ERR => {
                    if let Some((peer, _)) = qp {
                        self.fail_peer(peer);
                    }
                }
                LAST_WQE_REACHED => {
                    if let Some((peer, qi)) = qp {
                        self.last_wqe(peer, qi);
                    }
                }
                PORT_ERR => {
                    for slot in 0..self.peers.len() {
                        self.fail_peer(self.peers.id(slot));
                    }
                    self.push_event(Event::PortDown {
                        port: ev.port.unwrap_or(self.port),
                    });
                }
                PORT_ACTIVE => self.push_event(Event::PortActive {
                    port: ev.port.unwrap_or(self.port),
                }),
                DEVICE_FATAL | CQ_ERR => self.device_failed(),
                _ => {}
            }
        }
        any
    }

    /// Fake HCA only: the device reports `IBV_EVENT_DEVICE_FATAL` (seen
    /// at the next async-event check of `progress`), as a real device
    /// that died would.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_device_fatal(&self) {
        if let Some(cq) = &self.cq {
            cq.fake_push_event(sys::event::DEVICE_FATAL);
        }
    }

    /// One step of [`Transport::progress`](switchyard_core::transport::Transport::progress).
    pub(super) fn progress_step(&mut self, now: Instant) -> PollResult {
        if self.closed {
            return PollResult::Idle;
        }
        self.now = now;
        let mut busy = false;
        // Doorbells for batches left by puts.
        busy |= self.post_batches();
        self.retry_reposts();
        busy |= self.poll_cq();
        // The target side: receipts of the peers' puts, receives re-posted.
        busy |= self.poll_recv();
        self.collect_receipts();
        self.steps = self.steps.wrapping_add(1);
        // The async fd is a read(2): every ASYNC_EVERY steps, not per spin.
        // Fatal QP events come with error completions anyway when work is
        // outstanding; this catches idle links (port down, device fatal).
        // While a QP set of this PE collects its receipts, the PE's driver
        // reads every step (it forwards the set's last-WQE events).
        if self.steps.is_multiple_of(ASYNC_EVERY)
            || self.sets.get().is_some_and(SetBudget::any_collecting)
        {
            busy |= self.async_events();
        }
        if busy {
            PollResult::Busy
        } else {
            PollResult::Idle
        }
    }
}
