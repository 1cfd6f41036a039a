//! Reliable-connected queue pairs: creation, the state transitions the
//! QP plan computes, and posting chains of work requests.

use std::{io, ptr::NonNull};

use ibverbs_sys as ffi;

use super::{Cq, Ctx, Pd, Srq, check, last_err, srq::SrqInner};
use crate::qp_plan::Step;

type PostFn = unsafe extern "C" fn(
    *mut ffi::ibv_qp,
    *mut ffi::ibv_send_wr,
    *mut *mut ffi::ibv_send_wr,
) -> i32;

/// A reliable-connected queue pair.
pub struct Qp {
    pub(super) inner: QpInner,
    /// What `ibv_create_qp` granted.
    pub cap: ffi::ibv_qp_cap,
}

pub(super) enum QpInner {
    Real {
        ptr: NonNull<ffi::ibv_qp>,
        post: PostFn,
    },
    #[cfg(any(test, feature = "fake-hca"))]
    Fake {
        fabric: crate::fake::Fabric,
        qpn: u32,
    },
}

// SAFETY: as for `Ctx`.
unsafe impl Send for Qp {}

impl Qp {
    /// An RC QP on `cq` with `qp_context` set to `tag`; its receives come
    /// from `srq` (with completions on the SRQ's receive CQ) when given,
    /// else from its own receive queue of one entry, never posted.
    pub fn create(
        ctx: &Ctx,
        pd: &Pd,
        cq: &Cq,
        srq: Option<&Srq>,
        sq_depth: u32,
        max_inline: u32,
        tag: usize,
    ) -> io::Result<Qp> {
        let raw_cq = cq
            .as_raw()
            .ok_or_else(|| io::Error::other("a fake CQ for a real QP"))?;
        let (raw_srq, recv_cq) = match srq {
            Some(q) => match (&q.inner, q.cq.as_raw()) {
                (SrqInner::Real { ptr, .. }, Some(rcq)) => (ptr.as_ptr(), rcq),
                _ => return Err(io::Error::other("a fake SRQ for a real QP")),
            },
            None => (std::ptr::null_mut(), raw_cq),
        };
        let mut attr = ffi::ibv_qp_init_attr {
            qp_context: tag as *mut _,
            send_cq: raw_cq,
            recv_cq,
            srq: raw_srq,
            cap: ffi::ibv_qp_cap {
                max_send_wr: sq_depth,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: max_inline,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and CQ; `attr` is valid and filled back.
        let qp = unsafe { ffi::ibv_create_qp(pd.ptr.as_ptr(), &mut attr) };
        let ptr = NonNull::new(qp).ok_or_else(last_err)?;
        // SAFETY: the context's ops table is filled by the provider at open.
        let post = unsafe { (*ctx.as_raw()).ops.post_send };
        let Some(post) = post else {
            // SAFETY: the QP was just created and is destroyed once.
            let _ = unsafe { ffi::ibv_destroy_qp(ptr.as_ptr()) };
            return Err(io::Error::other("provider has no post_send"));
        };
        Ok(Qp {
            inner: QpInner::Real { ptr, post },
            cap: attr.cap,
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        match &self.inner {
            // SAFETY: a live QP's plain field.
            QpInner::Real { ptr, .. } => unsafe { (*ptr.as_ptr()).qp_num },
            #[cfg(any(test, feature = "fake-hca"))]
            QpInner::Fake { qpn, .. } => *qpn,
        }
    }

    /// Runs one planned transition.
    pub fn modify(&self, step: &Step) -> io::Result<()> {
        use ffi::{ibv_qp_attr_mask as M, ibv_qp_state as S};
        let ptr = match &self.inner {
            QpInner::Real { ptr, .. } => *ptr,
            #[cfg(any(test, feature = "fake-hca"))]
            QpInner::Fake { fabric, qpn } => return fabric.modify(*qpn, step),
        };
        let mut a = ffi::ibv_qp_attr::default();
        let mask = match *step {
            Step::Reset => {
                a.qp_state = S::IBV_QPS_RESET;
                M::IBV_QP_STATE
            }
            Step::Error => {
                a.qp_state = S::IBV_QPS_ERR;
                M::IBV_QP_STATE
            }
            Step::Init {
                port,
                pkey_index,
                access,
            } => {
                a.qp_state = S::IBV_QPS_INIT;
                a.port_num = port;
                a.pkey_index = pkey_index;
                a.qp_access_flags = access;
                M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS
            }
            Step::Rtr {
                dest_qpn,
                rq_psn,
                path_mtu,
                max_dest_rd_atomic,
                min_rnr_timer,
                dlid,
                grh,
                port,
            } => {
                a.qp_state = S::IBV_QPS_RTR;
                a.path_mtu = path_mtu.to_ibv();
                a.dest_qp_num = dest_qpn;
                a.rq_psn = rq_psn;
                a.max_dest_rd_atomic = max_dest_rd_atomic;
                a.min_rnr_timer = min_rnr_timer;
                a.ah_attr.dlid = dlid;
                a.ah_attr.port_num = port;
                if let Some((gid, sgid_index)) = grh {
                    a.ah_attr.is_global = 1;
                    a.ah_attr.grh.dgid = ffi::ibv_gid { raw: gid };
                    a.ah_attr.grh.sgid_index = sgid_index;
                    a.ah_attr.grh.hop_limit = 64;
                }
                M::IBV_QP_STATE
                    | M::IBV_QP_AV
                    | M::IBV_QP_PATH_MTU
                    | M::IBV_QP_DEST_QPN
                    | M::IBV_QP_RQ_PSN
                    | M::IBV_QP_MAX_DEST_RD_ATOMIC
                    | M::IBV_QP_MIN_RNR_TIMER
            }
            Step::Rts {
                sq_psn,
                timeout,
                retry_cnt,
                rnr_retry,
                max_rd_atomic,
            } => {
                a.qp_state = S::IBV_QPS_RTS;
                a.sq_psn = sq_psn;
                a.timeout = timeout;
                a.retry_cnt = retry_cnt;
                a.rnr_retry = rnr_retry;
                a.max_rd_atomic = max_rd_atomic;
                M::IBV_QP_STATE
                    | M::IBV_QP_SQ_PSN
                    | M::IBV_QP_TIMEOUT
                    | M::IBV_QP_RETRY_CNT
                    | M::IBV_QP_RNR_RETRY
                    | M::IBV_QP_MAX_QP_RD_ATOMIC
            }
        };
        // SAFETY: a live QP, a valid attribute struct and the mask of the
        // fields set.
        check(unsafe { ffi::ibv_modify_qp(ptr.as_ptr(), &mut a, mask.0 as i32) })
    }

    /// Posts a chain of work requests (one doorbell). On failure returns
    /// the errno and how many WRs of the chain were accepted.
    ///
    /// # Safety
    ///
    /// `wr` heads a valid chain whose SGEs point into registered memory
    /// (or inline data) that stays valid until the WRs complete (inline:
    /// until this call returns).
    #[inline]
    pub unsafe fn post(&self, wr: *mut ffi::ibv_send_wr) -> Result<(), (i32, usize)> {
        let (ptr, post) = match &self.inner {
            QpInner::Real { ptr, post } => (*ptr, *post),
            #[cfg(any(test, feature = "fake-hca"))]
            // SAFETY: the caller vouches for the chain.
            QpInner::Fake { fabric, qpn } => return unsafe { fabric.post(*qpn, wr) },
        };
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a live QP; the caller vouches for the chain.
        let rc = unsafe { post(ptr.as_ptr(), wr, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let mut accepted = 0;
        let mut w = wr;
        while !w.is_null() && w != bad {
            accepted += 1;
            // SAFETY: walking the caller's valid chain.
            w = unsafe { (*w).next };
        }
        Err((rc, accepted))
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.inner {
            QpInner::Real { ptr, .. } => {
                // SAFETY: destroyed once, before its CQ and PD.
                let _ = unsafe { ffi::ibv_destroy_qp(ptr.as_ptr()) };
            }
            #[cfg(any(test, feature = "fake-hca"))]
            QpInner::Fake { fabric, qpn } => fabric.destroy_qp(*qpn),
        }
    }
}
