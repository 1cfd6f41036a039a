//! An in-process fake HCA (feature `fake-hca`, and in this crate's unit
//! tests): lets the whole driver (accounting, signaling, fences, failures,
//! replays, receipts, rebuilds) run without RDMA hardware.
//!
//! Two drivers in one process share one [`Fabric`]. A post executes its work
//! requests at once, in order, against real memory: RDMA WRITE and READ are
//! copies between the registered regions (the "remote" heap is the other
//! driver's heap, whose address is in its card), fetch-add and compare-swap
//! run on the remote word and write the old value to the local buffer. Keys,
//! access flags, bounds and QP states are checked as a device would, and a
//! failure is an error completion followed by flush errors, with the QP in
//! error. Completions are queued on the QP's CQ for the driver to poll.
//!
//! **Receipts.** An RDMA WRITE with immediate needs a receive WQE of the
//! responder QP's shared receive queue: it consumes one and queues a receive
//! completion (the responder's QPN and the immediate) on the SRQ's CQ after
//! the data landed. With no receive posted the responder answers RNR NAK
//! and, as with `rnr_retry = 7` on a device, the message waits: it stays
//! pending on the initiator QP (it and every later WR of that QP, in order,
//! inline bytes copied) and runs when the responder posts receives. Nothing
//! fails and nothing runs out of order, so tests stay deterministic; the
//! initiator sees no completion until then.
//!
//! **Faults.** [`Fabric::break_links`] makes every QP fail its next post,
//! like a cable pulled; [`Fabric::heal`] undoes it.
//! [`Fabric::lose_ack_after`] models an in-doubt WRITE: a message executes
//! at the target (data and receipt land) but its acknowledgement is lost,
//! so the initiator gets an error completion and its QP goes to error.
//! A QP attached to an SRQ that enters the error state (modified there, or
//! failing as initiator) reports `IBV_EVENT_QP_LAST_WQE_REACHED` to its
//! owner (`sys::Cq::fake_event` on the QP's CQ): after it, no
//! more receive completions of that QP come. [`Fabric::suppress_last_wqe`]
//! withholds that event and [`Fabric::refuse_error_state`] makes the
//! modify to ERROR fail (a provider without the event, a dead device);
//! [`Fabric::flood_receives`] keeps a receive CQ full (peers sending at
//! full rate).
//!
//! This is a model for tests, not a performance model, and its atomics are
//! the CPU's.
#![allow(unsafe_code)]

use std::{
    collections::VecDeque,
    io,
    sync::{Arc, Mutex, MutexGuard},
};

use switchyard_core::sync::atomic::{AtomicU64, Ordering};

use crate::{
    params::AtomicCap,
    qp_plan::{QpState, Step},
    sys::{AsyncEvent, Cqe, SendWr, access, event, ibv_wr_opcode, send_flags},
};

/// Largest inline payload the fake grants.
pub const MAX_INLINE: u32 = 256;

#[derive(Debug)]
struct FMr {
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
    access: u32,
    live: bool,
}

#[derive(Debug)]
struct FQp {
    cq: usize,
    srq: Option<usize>,
    tag: usize,
    state: QpState,
    dest: u32,
    live: bool,
    /// Fails its next posts, like every QP under [`Fabric::break_links`]
    /// ([`Fabric::break_qps`]).
    broken: bool,
    /// Messages waiting for the responder's receives (RNR), in order.
    pending: VecDeque<Op>,
}

#[derive(Debug)]
struct FSrq {
    /// The receive CQ.
    cq: usize,
    /// Receive WQEs posted and not consumed.
    posted: u64,
}

/// One work request as the fake runs it (copied out of the caller's chain
/// when it must wait).
#[derive(Debug, Clone)]
struct Op {
    wr_id: u64,
    opcode: u32,
    flags: u32,
    /// (addr, len, lkey) of the one SGE, or zeros.
    sge: (u64, u64, u32),
    /// Inline bytes copied when the op waits (the caller's buffer is only
    /// valid during the post).
    inline_copy: Option<Vec<u8>>,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    imm: u32,
}

#[derive(Debug, Default)]
struct State {
    mrs: Vec<FMr>,
    cqs: Vec<VecDeque<Cqe>>,
    qps: Vec<FQp>,
    srqs: Vec<FSrq>,
    /// Async events: (the QP's CQ, the event).
    events: VecDeque<(usize, AsyncEvent)>,
    /// Async events are the device's, as on hardware
    /// ([`Fabric::device_events`]): read by the driver that reads the
    /// device's events, for every CQ of its device.
    device_events: bool,
    /// The device of each CQ ([`Fabric::set_cq_device`]), by CQ.
    cq_device: Vec<Option<u32>>,
    broken: bool,
    /// `Some(n)`: the message executed after `n` more lands, its ack lost.
    lose_ack: Option<u64>,
    posts: u64,
    /// `Some(n)`: the post after `n` more is refused (nothing accepted).
    fail_post: Option<u64>,
    atomic_cap: AtomicCap,
    rnr_naks: u64,
    /// QPs entering the error state report no `LAST_WQE_REACHED` (held
    /// here until [`Fabric::release_last_wqe`]).
    no_last_wqe: bool,
    held_events: VecDeque<(usize, AsyncEvent)>,
    /// `ibv_modify_qp` to ERROR fails (the QP stays as it was).
    refuse_error: bool,
    /// Receive completions of no known QP still to produce on every poll
    /// of a receive CQ (other peers sending at full rate).
    flood: u64,
    /// Flood completions produced so far.
    flooded: u64,
}

/// What running one message did.
enum Ran {
    /// Executed and acknowledged.
    Done,
    /// Not executed: an error completion.
    Failed,
    /// Not executed: no receive at the responder (retry later).
    Rnr,
}

/// The fake fabric (and HCA) shared by the drivers of one test.
#[derive(Debug, Clone, Default)]
pub struct Fabric(Arc<Mutex<State>>);

/// QPNs start here (0 is invalid).
const QPN_BASE: u32 = 0x100;

impl Fabric {
    /// A fabric with nothing on it.
    pub fn new() -> Fabric {
        Fabric::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every QP fails its next post (error completions, QP in error).
    pub fn break_links(&self) {
        self.lock().broken = true;
    }

    /// The QPs numbered `qpns` (and only they: a QP set's, say) fail their
    /// next posts, as under [`Fabric::break_links`]; unknown numbers are
    /// ignored.
    pub fn break_qps(&self, qpns: &[u32]) {
        let mut s = self.lock();
        for &qpn in qpns {
            if let Some(q) = qpn
                .checked_sub(QPN_BASE)
                .and_then(|i| s.qps.get_mut(i as usize))
            {
                q.broken = true;
            }
        }
    }

    /// Posts succeed again (on QPs that were rebuilt), on every QP.
    pub fn heal(&self) {
        let mut s = self.lock();
        s.broken = false;
        for q in s.qps.iter_mut() {
            q.broken = false;
        }
    }

    /// Sets the `atomic_cap` the fake device reports to drivers created on
    /// this fabric from now on ([`AtomicCap::Hca`] by default, as most
    /// devices report; its atomics are the CPU's whatever it says).
    pub fn set_atomic_cap(&self, cap: AtomicCap) {
        self.lock().atomic_cap = cap;
    }

    /// The `atomic_cap` the fake device reports.
    pub fn atomic_cap(&self) -> AtomicCap {
        self.lock().atomic_cap
    }

    /// Posts (doorbells) so far.
    pub fn posts(&self) -> u64 {
        self.lock().posts
    }

    /// The message that executes after `n` more have executed lands at the
    /// target (data and receipt) but its acknowledgement is lost: the
    /// initiator gets an error completion and its QP goes to error (an
    /// in-doubt WRITE). Once.
    pub fn lose_ack_after(&self, n: u64) {
        self.lock().lose_ack = Some(n);
    }

    /// The post (doorbell) after `n` more is refused by the provider
    /// (`ibv_post_send` fails, no WR of the chain accepted), as a device
    /// may refuse a post to a QP that went to error meanwhile. Once.
    pub fn fail_post_after(&self, n: u64) {
        self.lock().fail_post = Some(n);
    }

    /// QPs entering the error state from now on report no
    /// `IBV_EVENT_QP_LAST_WQE_REACHED` (`true`), as a provider that does
    /// not send it, or a device that died, would; `false` undoes it. The
    /// events are held until [`Fabric::release_last_wqe`] (late ones).
    pub fn suppress_last_wqe(&self, on: bool) {
        self.lock().no_last_wqe = on;
    }

    /// `ibv_modify_qp` to ERROR fails from now on (`true`; the QP stays in
    /// its state and reports nothing); `false` undoes it.
    pub fn refuse_error_state(&self, on: bool) {
        self.lock().refuse_error = on;
    }

    /// Every poll of a receive CQ (an SRQ's) returns a full batch of
    /// receive completions of no known QP until `n` more were produced, as
    /// if other peers kept sending at full rate.
    pub fn flood_receives(&self, n: u64) {
        self.lock().flood = n;
    }

    /// Flood completions produced so far ([`Fabric::flood_receives`]).
    pub fn flooded(&self) -> u64 {
        self.lock().flooded
    }

    /// RNR NAKs so far (messages that found no receive and waited).
    pub fn rnr_naks(&self) -> u64 {
        self.lock().rnr_naks
    }

    /// Messages waiting on an RNR NAK now, over all QPs.
    pub fn rnr_waiting(&self) -> usize {
        self.lock().qps.iter().map(|q| q.pending.len()).sum()
    }

    /// Receive WQEs posted and not consumed on every SRQ, in creation order.
    pub fn srq_posted(&self) -> Vec<u64> {
        self.lock().srqs.iter().map(|q| q.posted).collect()
    }

    pub(crate) fn create_srq(&self, cq: usize) -> usize {
        let mut s = self.lock();
        s.srqs.push(FSrq { cq, posted: 0 });
        s.srqs.len() - 1
    }

    /// Posts `n` receive WQEs on SRQ `srq`, then lets the messages waiting
    /// on RNR run (in order, as far as the receives go).
    pub(crate) fn post_recv(&self, srq: usize, n: u32) {
        let mut s = self.lock();
        let Some(q) = s.srqs.get_mut(srq) else { return };
        q.posted += u64::from(n);
        for me in 0..s.qps.len() {
            while let Some(op) = s.qps[me].pending.pop_front() {
                // SAFETY: a waiting op's addresses point into regions
                // that stay registered while its QP is not reset (a reset
                // or error drops the waiting ops); inline bytes are copied.
                match unsafe { run(&mut s, me, &op) } {
                    Ran::Rnr => {
                        s.qps[me].pending.push_front(op);
                        break;
                    }
                    r => finish(&mut s, me, &op, r),
                }
            }
        }
    }

    /// Queues async event `kind` on fake CQ `cq` (a device or port event
    /// for the driver that owns it; [`crate::VerbsDriver::fake_device_fatal`]).
    pub(crate) fn push_event(&self, cq: usize, kind: u32, qp_context: Option<usize>) {
        self.lock().events.push_back((
            cq,
            AsyncEvent {
                kind,
                qp_context,
                port: None,
            },
        ));
    }

    /// Queues now the `LAST_WQE_REACHED` events withheld while
    /// [`Fabric::suppress_last_wqe`] was on (they arrive late).
    pub fn release_last_wqe(&self) {
        let mut s = self.lock();
        while let Some(e) = s.held_events.pop_front() {
            s.events.push_back(e);
        }
    }

    /// Async events go to the device, as on hardware: every event of a
    /// device's CQs is read by the driver that reads the device's events
    /// (a PE's driver, not its QP sets);
    /// off (the default): each driver reads its own CQ's.
    pub fn device_events(&self, on: bool) {
        self.lock().device_events = on;
    }

    /// Records that CQ `cq` belongs to device `device` (a PE).
    pub(crate) fn set_cq_device(&self, cq: usize, device: u32) {
        let mut s = self.lock();
        if s.cq_device.len() <= cq {
            s.cq_device.resize(cq + 1, None);
        }
        s.cq_device[cq] = Some(device);
    }

    /// The next event of CQ `cq` (none while events are the device's).
    pub(crate) fn take_event(&self, cq: usize) -> Option<AsyncEvent> {
        let mut s = self.lock();
        if s.device_events {
            return None;
        }
        let i = s.events.iter().position(|(c, _)| *c == cq)?;
        s.events.remove(i).map(|(_, e)| e)
    }

    /// While events are the device's: the next event of any CQ of the
    /// device that CQ `cq` belongs to.
    pub(crate) fn take_device_event(&self, cq: usize) -> Option<AsyncEvent> {
        let mut s = self.lock();
        if !s.device_events {
            return None;
        }
        let dev = s.cq_device.get(cq).copied().flatten()?;
        let i = s
            .events
            .iter()
            .position(|(c, _)| s.cq_device.get(*c).copied().flatten() == Some(dev))?;
        s.events.remove(i).map(|(_, e)| e)
    }

    pub(crate) fn reg_mr(&self, addr: u64, len: u64, access: u32) -> (u32, u32) {
        let mut s = self.lock();
        let i = s.mrs.len() as u32;
        let (lkey, rkey) = (0x1000 + 2 * i, 0x1001 + 2 * i);
        s.mrs.push(FMr {
            addr,
            len,
            lkey,
            rkey,
            access,
            live: true,
        });
        (lkey, rkey)
    }

    pub(crate) fn dereg(&self, lkey: u32) {
        if let Some(m) = self.lock().mrs.iter_mut().find(|m| m.lkey == lkey) {
            m.live = false;
        }
    }

    /// A CQ of `entries` entries: its queue is allocated once, as a
    /// device's ring is, so completions never allocate on the data path.
    pub(crate) fn create_cq(&self, entries: u32) -> usize {
        let mut s = self.lock();
        s.cqs.push(VecDeque::with_capacity(entries as usize));
        s.cqs.len() - 1
    }

    pub(crate) fn poll(&self, cq: usize, out: &mut [Cqe]) -> usize {
        let mut s = self.lock();
        if s.flood > 0 && s.srqs.iter().any(|q| q.cq == cq) {
            let n = out
                .len()
                .min(usize::try_from(s.flood).unwrap_or(usize::MAX));
            for c in out.iter_mut().take(n) {
                *c = Cqe {
                    wr_id: 0,
                    ok: true,
                    qp_num: 0,
                    imm: 0,
                };
            }
            s.flood -= n as u64;
            s.flooded += n as u64;
            return n;
        }
        let Some(q) = s.cqs.get_mut(cq) else { return 0 };
        let mut n = 0;
        while n < out.len() {
            let Some(c) = q.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        n
    }

    pub(crate) fn create_qp(&self, cq: usize, srq: Option<usize>, tag: usize) -> u32 {
        let mut s = self.lock();
        s.qps.push(FQp {
            cq,
            srq,
            tag,
            state: QpState::Reset,
            dest: 0,
            live: true,
            broken: false,
            pending: VecDeque::new(),
        });
        QPN_BASE + s.qps.len() as u32 - 1
    }

    pub(crate) fn destroy_qp(&self, qpn: u32) {
        let mut s = self.lock();
        if let Some(q) = s.qps.get_mut((qpn - QPN_BASE) as usize) {
            q.live = false;
            // Like the provider: a destroyed QP's completions leave its CQ.
        }
    }

    pub(crate) fn modify(&self, qpn: u32, step: &Step) -> io::Result<()> {
        let mut s = self.lock();
        let einval = || Err(io::Error::from_raw_os_error(libc::EINVAL));
        let refuse_error = s.refuse_error;
        let Some(q) = s.qps.get_mut(qpn.wrapping_sub(QPN_BASE) as usize) else {
            return einval();
        };
        let ok = matches!(
            (q.state, step),
            (_, Step::Reset | Step::Error)
                | (QpState::Reset, Step::Init { .. })
                | (QpState::Init, Step::Rtr { .. })
                | (QpState::Rtr, Step::Rts { .. })
        );
        if !ok {
            return einval();
        }
        if matches!(step, Step::Error) && refuse_error {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if let Step::Rtr { dest_qpn, .. } = step {
            q.dest = *dest_qpn;
        }
        let me = qpn.wrapping_sub(QPN_BASE) as usize;
        match step {
            Step::Error => to_error(&mut s, me),
            Step::Reset => {
                // Nothing of a reset QP is sent again, nor completed.
                s.qps[me].pending.clear();
                s.qps[me].state = QpState::Reset;
            }
            _ => s.qps[me].state = step.target(),
        }
        Ok(())
    }

    /// Executes a chain of work requests.
    ///
    /// # Safety
    ///
    /// As `sys::Qp::post`: a valid chain whose addresses lie in memory the
    /// fabric's regions describe (checked against them before any copy).
    pub(crate) unsafe fn post(&self, qpn: u32, mut wr: *mut SendWr) -> Result<(), (i32, usize)> {
        let mut s = self.lock();
        s.posts += 1;
        match s.fail_post {
            Some(0) => {
                s.fail_post = None;
                return Err((libc::EIO, 0));
            }
            Some(n) => s.fail_post = Some(n - 1),
            None => {}
        }
        let me = qpn.wrapping_sub(QPN_BASE) as usize;
        let Some(q) = s.qps.get(me) else {
            return Err((libc::EINVAL, 0));
        };
        if q.state == QpState::Reset || q.state == QpState::Init || q.state == QpState::Rtr {
            return Err((libc::EINVAL, 0));
        }
        while !wr.is_null() {
            // SAFETY: the caller's chain is valid.
            let w = unsafe { &*wr };
            wr = w.next;
            let (sge, inline) = if w.num_sge == 1 {
                // SAFETY: `num_sge == 1`: the list holds one entry.
                let g = unsafe { &*w.sg_list };
                (
                    (g.addr, u64::from(g.length), g.lkey),
                    w.send_flags & send_flags::INLINE != 0,
                )
            } else {
                ((0, 0, 0), false)
            };
            let atomic = matches!(
                w.opcode,
                ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
                    | ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
            );
            let (remote_addr, rkey, compare_add, swap) = if atomic {
                // SAFETY: the opcode says the `atomic` member is the one set.
                let a = unsafe { w.wr.atomic };
                (a.remote_addr, a.rkey, a.compare_add, a.swap)
            } else {
                // SAFETY: every other opcode the driver posts sets `rdma`.
                let r = unsafe { w.wr.rdma };
                (r.remote_addr, r.rkey, 0, 0)
            };
            let mut op = Op {
                wr_id: w.wr_id,
                opcode: w.opcode,
                flags: w.send_flags,
                sge,
                inline_copy: None,
                remote_addr,
                rkey,
                compare_add,
                swap,
                // SAFETY: a plain integer of the union, set or zero.
                imm: unsafe { w.__bindgen_anon_1.imm_data },
            };
            let waiting = !s.qps[me].pending.is_empty();
            let ran = if waiting && s.qps[me].state == QpState::Rts {
                Ran::Rnr
            } else {
                // SAFETY: `op` comes from the caller's valid WR; addresses
                // are checked in `run`.
                unsafe { run(&mut s, me, &op) }
            };
            match ran {
                Ran::Rnr => {
                    if inline && sge.1 <= u64::from(MAX_INLINE) {
                        // SAFETY: inline data is readable during the post
                        // (the caller's promise), `sge.1` bytes long.
                        let b = unsafe {
                            std::slice::from_raw_parts(sge.0 as *const u8, sge.1 as usize)
                        };
                        op.inline_copy = Some(b.to_vec());
                    }
                    s.qps[me].pending.push_back(op);
                }
                r => finish(&mut s, me, &op, r),
            }
        }
        Ok(())
    }
}

/// Takes QP `me` to the error state: waiting messages are flushed with
/// error completions, and a QP on an SRQ reports its last WQE reached.
fn to_error(s: &mut State, me: usize) {
    let was = s.qps[me].state;
    s.qps[me].state = QpState::Err;
    let cq = s.qps[me].cq;
    while let Some(op) = s.qps[me].pending.pop_front() {
        s.cqs[cq].push_back(Cqe {
            wr_id: op.wr_id,
            ok: false,
            ..Cqe::default()
        });
    }
    if was != QpState::Err && s.qps[me].srq.is_some() {
        let tag = s.qps[me].tag;
        let e = (
            cq,
            AsyncEvent {
                kind: event::LAST_WQE_REACHED,
                qp_context: Some(tag),
                port: None,
            },
        );
        if s.no_last_wqe {
            s.held_events.push_back(e);
        } else {
            s.events.push_back(e);
        }
    }
}

/// Queues the initiator's completion of a message that ran (or failed).
fn finish(s: &mut State, me: usize, op: &Op, ran: Ran) {
    let cq = s.qps[me].cq;
    let ok = match ran {
        Ran::Done => true,
        Ran::Failed | Ran::Rnr => false,
    };
    if !ok {
        to_error(s, me);
    }
    if !ok || op.flags & send_flags::SIGNALED != 0 {
        s.cqs[cq].push_back(Cqe {
            wr_id: op.wr_id,
            ok,
            ..Cqe::default()
        });
    }
}

/// Runs one message of QP `me` (the initiator) at its destination.
///
/// # Safety
///
/// `op`'s local address is the caller's registered memory (or its inline
/// copy); every address is checked against a live region before use.
unsafe fn run(s: &mut State, me: usize, op: &Op) -> Ran {
    if s.qps[me].state != QpState::Rts || s.broken || s.qps[me].broken {
        return Ran::Failed;
    }
    // SAFETY: passed on.
    let ran = unsafe { execute(s, s.qps[me].dest, op) };
    if matches!(ran, Ran::Done)
        && let Some(n) = s.lose_ack
    {
        if n == 0 {
            s.lose_ack = None;
            return Ran::Failed; // landed, but the initiator never hears so
        }
        s.lose_ack = Some(n - 1);
    }
    ran
}

fn mr_covers(s: &State, key: u32, remote: bool, addr: u64, len: u64, need: u32) -> bool {
    s.mrs.iter().any(|m| {
        m.live
            && (if remote { m.rkey == key } else { m.lkey == key })
            && m.access & need == need
            && addr >= m.addr
            && addr.checked_add(len).is_some_and(|e| e <= m.addr + m.len)
    })
}

/// Runs one work request at the responder `dest`.
///
/// # Safety
///
/// `op`'s local address is valid as [`run`] says; every address it names
/// is checked against a live region before it is touched.
unsafe fn execute(s: &mut State, dest: u32, op: &Op) -> Ran {
    let di = dest.wrapping_sub(QPN_BASE) as usize;
    let Some(peer) = s.qps.get(di) else {
        return Ran::Failed;
    };
    if !peer.live || !matches!(peer.state, QpState::Rtr | QpState::Rts) {
        return Ran::Failed; // nobody answers: retries exceeded
    }
    let (laddr, llen, lkey) = op.sge;
    let inline = op.flags & send_flags::INLINE != 0;
    let src = op.inline_copy.as_ref().map_or(laddr, |b| b.as_ptr() as u64);
    let with_imm = op.opcode == ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
    let mut srq = None;
    if with_imm {
        match peer.srq {
            Some(q) if s.srqs[q].posted > 0 => srq = Some(q),
            Some(_) => {
                s.rnr_naks += 1;
                return Ran::Rnr;
            }
            None => return Ran::Failed, // no receive queue: a device error
        }
    }
    match op.opcode {
        ibv_wr_opcode::IBV_WR_RDMA_WRITE
        | ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
        | ibv_wr_opcode::IBV_WR_RDMA_READ => {
            let read = op.opcode == ibv_wr_opcode::IBV_WR_RDMA_READ;
            let remote_need = if read {
                access::REMOTE_READ
            } else {
                access::REMOTE_WRITE
            };
            if !mr_covers(s, op.rkey, true, op.remote_addr, llen, remote_need) {
                return Ran::Failed;
            }
            if llen > 0 {
                let local_ok = if read {
                    mr_covers(s, lkey, false, laddr, llen, access::LOCAL_WRITE)
                } else {
                    inline && llen <= u64::from(MAX_INLINE)
                        || mr_covers(s, lkey, false, laddr, llen, 0)
                };
                if !local_ok {
                    return Ran::Failed;
                }
                let (from, to) = if read {
                    (op.remote_addr, laddr)
                } else {
                    (src, op.remote_addr)
                };
                // SAFETY: both ranges lie in live registered regions
                // (checked) or the op's own inline copy; `copy` allows
                // overlap.
                unsafe { std::ptr::copy(from as *const u8, to as *mut u8, llen as usize) };
            }
            if let Some(q) = srq {
                // The receipt: after the data, one receive consumed.
                s.srqs[q].posted -= 1;
                let cq = s.srqs[q].cq;
                s.cqs[cq].push_back(Cqe {
                    wr_id: 0,
                    ok: true,
                    qp_num: dest,
                    imm: u32::from_be(op.imm),
                });
            }
            Ran::Done
        }
        ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD | ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP => {
            if !op.remote_addr.is_multiple_of(8)
                || llen != 8
                || !mr_covers(s, op.rkey, true, op.remote_addr, 8, access::REMOTE_ATOMIC)
                || !mr_covers(s, lkey, false, laddr, 8, access::LOCAL_WRITE)
            {
                return Ran::Failed;
            }
            // SAFETY: an 8-aligned word of a live region (checked).
            let word = unsafe { AtomicU64::from_ptr(op.remote_addr as *mut u64) };
            let old = if op.opcode == ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD {
                word.fetch_add(op.compare_add, Ordering::AcqRel)
            } else {
                match word.compare_exchange(
                    op.compare_add,
                    op.swap,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                }
            };
            // SAFETY: 8 bytes of a live local region (checked); unaligned
            // write for safety.
            unsafe { std::ptr::write_unaligned(laddr as *mut u64, old) };
            Ran::Done
        }
        _ => Ran::Failed,
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::{VerbsDriver, params::VerbsConfig};

    /// The device's `atomic_cap` is a fabric setting: drivers created after
    /// the change report it, and say whether they do atomics at all.
    #[test]
    fn the_reported_atomic_cap_is_configurable() {
        let f = Fabric::new();
        let d = |f: &Fabric| {
            VerbsDriver::fake_with_owned_heap(VerbsConfig::default(), 0, 2, 1, 4096, f).unwrap()
        };
        assert_eq!(d(&f).params().atomic_cap, AtomicCap::Hca);
        for cap in [AtomicCap::Global, AtomicCap::None] {
            f.set_atomic_cap(cap);
            let p = *d(&f).params();
            assert_eq!((p.atomic_cap, p.atomics), (cap, cap != AtomicCap::None));
        }
    }
}
