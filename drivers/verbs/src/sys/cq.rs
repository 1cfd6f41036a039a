//! Completion queues: creation and polling (the fake HCA's too).

use std::{io, ptr::NonNull};

use ibverbs_sys as ffi;

use super::{AsyncEvent, Ctx, last_err};

/// One work completion, as the driver needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqe {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Whether it succeeded.
    pub ok: bool,
    /// The local QP it belongs to (receive completions of an SRQ).
    pub qp_num: u32,
    /// The immediate data in host order (receive completions of an RDMA
    /// WRITE with immediate; 0 otherwise).
    pub imm: u32,
}

/// Completions taken per poll at most.
pub const POLL_BATCH: usize = 32;

/// A completion queue.
pub struct Cq {
    pub(super) inner: CqInner,
}

pub(super) enum CqInner {
    Real {
        ptr: NonNull<ffi::ibv_cq>,
        poll: unsafe extern "C" fn(*mut ffi::ibv_cq, i32, *mut ffi::ibv_wc) -> i32,
        wc: Box<[ffi::ibv_wc]>,
    },
    #[cfg(any(test, feature = "fake-hca"))]
    Fake {
        fabric: crate::fake::Fabric,
        id: usize,
    },
}

// SAFETY: as for `Ctx`.
unsafe impl Send for Cq {}

impl Cq {
    /// `ibv_create_cq` with at least `entries` entries, no channel.
    pub fn create(ctx: &Ctx, entries: u32) -> io::Result<Cq> {
        let n = i32::try_from(entries).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a live context; no completion channel.
        let cq = unsafe {
            ffi::ibv_create_cq(
                ctx.as_raw(),
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let ptr = NonNull::new(cq).ok_or_else(last_err)?;
        // SAFETY: the context's ops table is filled by the provider at open.
        let poll = unsafe { (*ctx.as_raw()).ops.poll_cq };
        let Some(poll) = poll else {
            // SAFETY: the CQ was just created and is destroyed once.
            let _ = unsafe { ffi::ibv_destroy_cq(ptr.as_ptr()) };
            return Err(io::Error::other("provider has no poll_cq"));
        };
        Ok(Cq {
            inner: CqInner::Real {
                ptr,
                poll,
                wc: vec![ffi::ibv_wc::default(); POLL_BATCH].into_boxed_slice(),
            },
        })
    }

    /// Polls up to `out.len()` (at most [`POLL_BATCH`]) completions;
    /// returns how many were written.
    #[inline]
    pub fn poll(&mut self, out: &mut [Cqe]) -> io::Result<usize> {
        match &mut self.inner {
            CqInner::Real { ptr, poll, wc } => {
                let n = out.len().min(wc.len());
                // SAFETY: a live CQ, and `wc` has room for `n` entries.
                let got = unsafe { poll(ptr.as_ptr(), n as i32, wc.as_mut_ptr()) };
                let got =
                    usize::try_from(got).map_err(|_| io::Error::other("ibv_poll_cq failed"))?;
                for (o, w) in out.iter_mut().zip(wc.iter()).take(got) {
                    *o = Cqe {
                        wr_id: w.wr_id(),
                        ok: w.is_valid(),
                        qp_num: w.qp_num,
                        imm: w.imm_data().map_or(0, u32::from_be),
                    };
                }
                Ok(got)
            }
            #[cfg(any(test, feature = "fake-hca"))]
            CqInner::Fake { fabric, id } => Ok(fabric.poll(*id, out)),
        }
    }

    /// The next async event of a fake QP on this CQ (the fake HCA has no
    /// async fd); `None` on a real CQ, whose events come from the context.
    pub fn fake_event(&self) -> Option<AsyncEvent> {
        match &self.inner {
            CqInner::Real { .. } => None,
            #[cfg(any(test, feature = "fake-hca"))]
            CqInner::Fake { fabric, id } => fabric.take_event(*id),
        }
    }

    /// Fake HCA only: while its events are the device's
    /// (`fake::Fabric::device_events`), the next event of any CQ
    /// of this CQ's device; `None` on a real CQ.
    pub fn fake_device_event(&self) -> Option<AsyncEvent> {
        match &self.inner {
            CqInner::Real { .. } => None,
            #[cfg(any(test, feature = "fake-hca"))]
            CqInner::Fake { fabric, id } => fabric.take_device_event(*id),
        }
    }

    /// Fake HCA only: this CQ belongs to device `device` (the PE).
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_set_device(&self, device: u32) {
        if let CqInner::Fake { fabric, id } = &self.inner {
            fabric.set_cq_device(*id, device);
        }
    }

    /// Queues async event `kind` for this fake CQ's owner (tests); no-op
    /// on a real CQ.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_push_event(&self, kind: u32) {
        self.fake_push_qp_event(kind, None);
    }

    /// Fake HCA only: queues async event `kind` of the QP tagged
    /// `qp_context` (or none) for this CQ's driver.
    #[cfg(any(test, feature = "fake-hca"))]
    pub fn fake_push_qp_event(&self, kind: u32, qp_context: Option<usize>) {
        if let CqInner::Fake { fabric, id } = &self.inner {
            fabric.push_event(*id, kind, qp_context);
        }
    }

    pub(super) fn as_raw(&self) -> Option<*mut ffi::ibv_cq> {
        match &self.inner {
            CqInner::Real { ptr, .. } => Some(ptr.as_ptr()),
            #[cfg(any(test, feature = "fake-hca"))]
            CqInner::Fake { .. } => None,
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        #[allow(irrefutable_let_patterns)] // without the fake, only Real
        if let CqInner::Real { ptr, .. } = &self.inner {
            // SAFETY: destroyed once, after its QPs.
            let _ = unsafe { ffi::ibv_destroy_cq(ptr.as_ptr()) };
        }
    }
}
