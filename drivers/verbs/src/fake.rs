//! An in-process fake HCA (feature `fake-hca`, and in this crate's unit
//! tests): lets the whole driver (accounting, signaling, fences, failures,
//! replays, rebuilds) run without RDMA hardware.
//!
//! Two drivers in one process share one [`Fabric`]. A post executes its work
//! requests at once, in order, against real memory: RDMA WRITE and READ are
//! copies between the registered regions (the "remote" heap is the other
//! driver's heap, whose address is in its card), fetch-add and compare-swap
//! run on the remote word and write the old value to the local buffer. Keys,
//! access flags, bounds and QP states are checked as a device would, and a
//! failure is an error completion followed by flush errors, with the QP in
//! error. [`Fabric::break_links`] makes every QP fail its next post, like a
//! cable pulled; [`Fabric::heal`] undoes it. Completions are queued on the
//! QP's CQ for the driver to poll. This is a model for tests, not a
//! performance model, and its atomics are the CPU's.
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
    sys::{Cqe, SendWr, access, ibv_wr_opcode, send_flags},
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
    state: QpState,
    dest: u32,
    live: bool,
}

#[derive(Debug, Default)]
struct State {
    mrs: Vec<FMr>,
    cqs: Vec<VecDeque<Cqe>>,
    qps: Vec<FQp>,
    broken: bool,
    posts: u64,
    atomic_cap: AtomicCap,
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

    /// Posts succeed again (on QPs that were rebuilt).
    pub fn heal(&self) {
        self.lock().broken = false;
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

    pub(crate) fn create_cq(&self) -> usize {
        let mut s = self.lock();
        s.cqs.push(VecDeque::new());
        s.cqs.len() - 1
    }

    pub(crate) fn poll(&self, cq: usize, out: &mut [Cqe]) -> usize {
        let mut s = self.lock();
        let Some(q) = s.cqs.get_mut(cq) else { return 0 };
        let mut n = 0;
        while n < out.len() {
            let Some(c) = q.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        n
    }

    pub(crate) fn create_qp(&self, cq: usize, _tag: usize) -> u32 {
        let mut s = self.lock();
        s.qps.push(FQp {
            cq,
            state: QpState::Reset,
            dest: 0,
            live: true,
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
        let Some(q) = s.qps.get_mut(qpn.wrapping_sub(QPN_BASE) as usize) else {
            return einval();
        };
        let ok = matches!(
            (q.state, step),
            (_, Step::Reset)
                | (QpState::Reset, Step::Init { .. })
                | (QpState::Init, Step::Rtr { .. })
                | (QpState::Rtr, Step::Rts { .. })
        );
        if !ok {
            return einval();
        }
        if let Step::Rtr { dest_qpn, .. } = step {
            q.dest = *dest_qpn;
        }
        q.state = step.target();
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
        let me = qpn.wrapping_sub(QPN_BASE) as usize;
        let Some(q) = s.qps.get(me) else {
            return Err((libc::EINVAL, 0));
        };
        if q.state == QpState::Reset || q.state == QpState::Init || q.state == QpState::Rtr {
            return Err((libc::EINVAL, 0));
        }
        let cq = q.cq;
        while !wr.is_null() {
            // SAFETY: the caller's chain is valid.
            let w = unsafe { &*wr };
            wr = w.next;
            let ok = s.qps[me].state == QpState::Rts
                && !s.broken
                // SAFETY: `w` is valid; addresses are checked in `execute`.
                && unsafe { execute(&s, s.qps[me].dest, w) };
            if !ok {
                s.qps[me].state = QpState::Err;
            }
            if !ok || w.send_flags & send_flags::SIGNALED != 0 {
                s.cqs[cq].push_back(Cqe { wr_id: w.wr_id, ok });
            }
        }
        Ok(())
    }
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

/// Runs one work request; `false` is an error completion.
///
/// # Safety
///
/// `w` is a valid work request; every address it names is checked against
/// a live region before it is touched.
unsafe fn execute(s: &State, dest: u32, w: &SendWr) -> bool {
    let Some(peer) = s.qps.get(dest.wrapping_sub(QPN_BASE) as usize) else {
        return false;
    };
    if !peer.live || !matches!(peer.state, QpState::Rtr | QpState::Rts) {
        return false; // nobody answers: retries exceeded
    }
    let (laddr, llen, lkey) = if w.num_sge == 1 {
        // SAFETY: `num_sge == 1`: the list holds one entry.
        let g = unsafe { &*w.sg_list };
        (g.addr, u64::from(g.length), g.lkey)
    } else {
        (0, 0, 0)
    };
    let inline = w.send_flags & send_flags::INLINE != 0;
    match w.opcode {
        ibv_wr_opcode::IBV_WR_RDMA_WRITE | ibv_wr_opcode::IBV_WR_RDMA_READ => {
            // SAFETY: the opcode says the `rdma` member is the one set.
            let r = unsafe { w.wr.rdma };
            let read = w.opcode == ibv_wr_opcode::IBV_WR_RDMA_READ;
            let remote_need = if read {
                access::REMOTE_READ
            } else {
                access::REMOTE_WRITE
            };
            if !mr_covers(s, r.rkey, true, r.remote_addr, llen, remote_need) {
                return false;
            }
            if llen == 0 {
                return true;
            }
            let local_ok = if read {
                mr_covers(s, lkey, false, laddr, llen, access::LOCAL_WRITE)
            } else {
                inline && llen <= u64::from(MAX_INLINE) || mr_covers(s, lkey, false, laddr, llen, 0)
            };
            if !local_ok {
                return false;
            }
            let (src, dst) = if read {
                (r.remote_addr, laddr)
            } else {
                (laddr, r.remote_addr)
            };
            // SAFETY: both ranges lie in live registered regions (checked);
            // `copy` allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, llen as usize) };
            true
        }
        ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD | ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP => {
            // SAFETY: the opcode says the `atomic` member is the one set.
            let a = unsafe { w.wr.atomic };
            if a.remote_addr % 8 != 0
                || llen != 8
                || !mr_covers(s, a.rkey, true, a.remote_addr, 8, access::REMOTE_ATOMIC)
                || !mr_covers(s, lkey, false, laddr, 8, access::LOCAL_WRITE)
            {
                return false;
            }
            // SAFETY: an 8-aligned word of a live region (checked).
            let word = unsafe { AtomicU64::from_ptr(a.remote_addr as *mut u64) };
            let old = if w.opcode == ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD {
                word.fetch_add(a.compare_add, Ordering::AcqRel)
            } else {
                match word.compare_exchange(
                    a.compare_add,
                    a.swap,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                }
            };
            // SAFETY: 8 bytes of a live local region (checked); unaligned
            // write for safety.
            unsafe { std::ptr::write_unaligned(laddr as *mut u64, old) };
            true
        }
        _ => false,
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
