//! The shared receive queue: one for every peer's data QPs, with its own
//! receive CQ, posted with zero-SGE receives (one per put received).

use std::{io, ptr::NonNull};

use ibverbs_sys as ffi;

use super::{Cq, Ctx, Pd, check, last_err};

/// Receive WQEs posted per doorbell at most (the SRQ's chain).
pub const RECV_BATCH: usize = 64;

/// A chain of [`RECV_BATCH`] zero-SGE receive WRs (a receipt carries no
/// payload: the WRITE's data goes to the heap, the immediate to the CQE).
pub(super) fn recv_chain() -> Box<[ffi::ibv_recv_wr]> {
    vec![
        ffi::ibv_recv_wr {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        RECV_BATCH
    ]
    .into_boxed_slice()
}

type PostRecvFn = unsafe extern "C" fn(
    *mut ffi::ibv_srq,
    *mut ffi::ibv_recv_wr,
    *mut *mut ffi::ibv_recv_wr,
) -> i32;

/// A shared receive queue with its receive CQ: the data QPs of every peer
/// take their receive WQEs from it, one per RDMA WRITE with immediate.
pub struct Srq {
    pub(super) inner: SrqInner,
    /// The receive CQ (the SRQ's QPs' `recv_cq`).
    pub cq: Cq,
    /// Pre-built receive WRs, chained at each post (never reallocated).
    pub(super) chain: Box<[ffi::ibv_recv_wr]>,
}

pub(super) enum SrqInner {
    Real {
        ptr: NonNull<ffi::ibv_srq>,
        post: PostRecvFn,
    },
    #[cfg(any(test, feature = "fake-hca"))]
    Fake {
        fabric: crate::fake::Fabric,
        id: usize,
    },
}

// SAFETY: as for `Ctx`.
unsafe impl Send for Srq {}

impl Srq {
    /// `ibv_create_srq` with `depth` WRs of no SGE, receive CQ `cq`.
    pub(super) fn create(ctx: &Ctx, pd: &Pd, cq: Cq, depth: u32) -> io::Result<Srq> {
        let mut attr = ffi::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ffi::ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD; `attr` is valid and filled back.
        let srq = unsafe { ffi::ibv_create_srq(pd.ptr.as_ptr(), &mut attr) };
        let ptr = NonNull::new(srq).ok_or_else(last_err)?;
        // SAFETY: the context's ops table is filled by the provider at open.
        let post = unsafe { (*ctx.as_raw()).ops.post_srq_recv };
        let Some(post) = post else {
            // SAFETY: the SRQ was just created and is destroyed once.
            let _ = unsafe { ffi::ibv_destroy_srq(ptr.as_ptr()) };
            return Err(io::Error::other("provider has no post_srq_recv"));
        };
        Ok(Srq {
            inner: SrqInner::Real { ptr, post },
            cq,
            chain: recv_chain(),
        })
    }

    /// Posts `n` (at most [`RECV_BATCH`]) receive WQEs with one doorbell.
    pub fn post(&mut self, n: usize) -> io::Result<()> {
        let n = n.min(self.chain.len());
        if n == 0 {
            return Ok(());
        }
        let (ptr, post) = match &self.inner {
            SrqInner::Real { ptr, post } => (*ptr, *post),
            #[cfg(any(test, feature = "fake-hca"))]
            SrqInner::Fake { fabric, id } => {
                fabric.post_recv(*id, n as u32);
                return Ok(());
            }
        };
        let base = self.chain.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i < n <= chain.len()`; the chain points only into
            // this SRQ's own array, which does not move.
            unsafe {
                (*base.add(i)).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    std::ptr::null_mut()
                };
            }
        }
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: a live SRQ and a valid chain of zero-SGE WRs.
        check(unsafe { post(ptr.as_ptr(), base, &mut bad) })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        #[allow(irrefutable_let_patterns)] // without the fake, only Real
        if let SrqInner::Real { ptr, .. } = &self.inner {
            // SAFETY: destroyed once, after the QPs attached to it (owner
            // order), before its CQ (a field, dropped after this).
            let _ = unsafe { ffi::ibv_destroy_srq(ptr.as_ptr()) };
        }
    }
}
