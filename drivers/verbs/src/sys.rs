//! The raw verbs calls, and nothing else: small owning wrappers around the
//! libibverbs objects the driver uses (device context, protection domain,
//! memory region, completion queue, queue pair), each released once in
//! `Drop`.
//!
//! Why raw: `ibverbs` 0.9 (whose `ibverbs-sys` bindings these are, the same
//! crate in the graph) has no RDMA WRITE, READ or atomic work requests, no
//! way to register memory it did not allocate (the symmetric heap already
//! exists), no `ibv_modify_qp` after the handshake (so no rebuild with a new
//! PSN), only port 1, and no raw handles to mix its objects with these
//! calls. The crate is used for the device list in the probe.
//!
//! Every `unsafe` block is one FFI call or one read of a field libibverbs
//! owns, with its justification. Owners must drop QPs before the CQ, and
//! MRs, QPs and the CQ before the PD and the context (the driver's `close`
//! does).
#![allow(unsafe_code)]

use std::{ffi::CStr, io, ptr::NonNull};

use ibverbs_sys as ffi;

use crate::qp_plan::Step;

/// `-1`/`NULL`-style failures as `io::Error` from errno (the `syscall!` idea).
fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// An errno-returning call's result.
fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else if rc > 0 {
        Err(io::Error::from_raw_os_error(rc))
    } else {
        Err(last_err())
    }
}

/// An open device context.
pub struct Ctx {
    ptr: NonNull<ffi::ibv_context>,
}

// SAFETY: libibverbs contexts are thread-safe (rdma-core documents every verb
// as thread-safe); the wrapper owns the context exclusively.
unsafe impl Send for Ctx {}

impl Ctx {
    /// Opens the device named `name`, or the first device when `None`;
    /// returns the context and the device's name.
    pub fn open(name: Option<&str>) -> io::Result<(Ctx, String)> {
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; the list is freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(last_err());
        }
        let mut found = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` device pointers.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                continue;
            }
            // SAFETY: `dev` is a device of the live list; the name is a
            // NUL-terminated string owned by it.
            let dname = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if name.is_none_or(|w| w == dname) {
                found = Some((dev, dname));
                break;
            }
        }
        let result = match found {
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device named {}", name.unwrap_or("(any)")),
            )),
            Some((dev, dname)) => {
                // SAFETY: `dev` is from the live list; a context stays valid
                // after the list is freed (rdma-core keeps the device
                // referenced while a context is open).
                let ctx = unsafe { ffi::ibv_open_device(dev) };
                NonNull::new(ctx)
                    .map(|ptr| (Ctx { ptr }, dname))
                    .ok_or_else(last_err)
            }
        };
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        result
    }

    /// The raw context (for the calls below).
    pub fn as_raw(&self) -> *mut ffi::ibv_context {
        self.ptr.as_ptr()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> io::Result<ffi::ibv_device_attr> {
        let mut attr = ffi::ibv_device_attr::default();
        // SAFETY: a live context and a valid out-pointer.
        check(unsafe { ffi::ibv_query_device(self.as_raw(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> io::Result<ffi::ibv_port_attr> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: a live context and a valid out-pointer of the type the
        // exported `ibv_query_port` symbol fills.
        check(unsafe {
            ffi::ibv_query_port(
                self.as_raw(),
                port,
                (&mut attr as *mut ffi::ibv_port_attr).cast(),
            )
        })?;
        Ok(attr)
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> io::Result<[u8; 16]> {
        let mut gid = ffi::ibv_gid::default();
        let index = i32::try_from(index).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a live context and a valid out-pointer.
        check(unsafe { ffi::ibv_query_gid(self.as_raw(), port, index, &mut gid) })?;
        // SAFETY: every bit pattern of the union is a valid `raw` array.
        Ok(unsafe { gid.raw })
    }

    /// Makes the async event fd non-blocking, so [`Ctx::next_async_event`]
    /// never waits.
    pub fn async_nonblocking(&self) -> io::Result<()> {
        // SAFETY: reading a plain int field of the live context.
        let fd = unsafe { (*self.as_raw()).async_fd };
        // SAFETY: fcntl on the context's own fd, flags only.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(last_err());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// The next async event, acknowledged, if one is pending: (type, the
    /// QP's `qp_context` for QP events, the port for port events).
    pub fn next_async_event(&self) -> Option<AsyncEvent> {
        let mut ev = ffi::ibv_async_event {
            element: ffi::ibv_async_event__bindgen_ty_1 { port_num: 0 },
            event_type: 0,
        };
        // SAFETY: a live context whose fd is non-blocking; `ev` is a valid
        // out-pointer.
        if unsafe { ffi::ibv_get_async_event(self.as_raw(), &mut ev) } != 0 {
            return None;
        }
        let kind = ev.event_type;
        let qp_events = [
            ffi::IBV_EVENT_QP_FATAL,
            ffi::IBV_EVENT_QP_REQ_ERR,
            ffi::IBV_EVENT_QP_ACCESS_ERR,
            ffi::IBV_EVENT_PATH_MIG_ERR,
            ffi::IBV_EVENT_COMM_EST,
            ffi::IBV_EVENT_SQ_DRAINED,
            ffi::IBV_EVENT_PATH_MIG,
            ffi::IBV_EVENT_QP_LAST_WQE_REACHED,
        ];
        let out = if qp_events.contains(&kind) {
            // SAFETY: for QP events the union holds the QP; the QP is ours
            // and alive (events for destroyed QPs are acked before destroy).
            let ctx = unsafe { (*ev.element.qp).qp_context } as usize;
            AsyncEvent {
                kind,
                qp_context: Some(ctx),
                port: None,
            }
        } else if [
            ffi::IBV_EVENT_PORT_ACTIVE,
            ffi::IBV_EVENT_PORT_ERR,
            ffi::IBV_EVENT_LID_CHANGE,
            ffi::IBV_EVENT_GID_CHANGE,
        ]
        .contains(&kind)
        {
            // SAFETY: for port events the union holds the port number.
            let port = unsafe { ev.element.port_num };
            AsyncEvent {
                kind,
                qp_context: None,
                port: u8::try_from(port).ok(),
            }
        } else {
            AsyncEvent {
                kind,
                qp_context: None,
                port: None,
            }
        };
        // SAFETY: every event got is acked exactly once.
        unsafe { ffi::ibv_ack_async_event(&mut ev) };
        Some(out)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the context is closed once; its objects are gone (owner
        // order).
        let _ = unsafe { ffi::ibv_close_device(self.as_raw()) };
    }
}

/// Opens device `name` and reads its attributes.
pub fn device_attrs(name: &str) -> io::Result<crate::probe::DeviceAttrs> {
    let (ctx, _) = Ctx::open(Some(name))?;
    let a = ctx.query_device()?;
    let fw: Vec<u8> = a
        .fw_ver
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let n = |v: i32| u32::try_from(v).unwrap_or(0);
    Ok(crate::probe::DeviceAttrs {
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        ports: a.phys_port_cnt,
        max_qp_wr: n(a.max_qp_wr),
        max_cqe: n(a.max_cqe),
        max_qp: n(a.max_qp),
        rd_atom: (n(a.max_qp_init_rd_atom), n(a.max_qp_rd_atom)),
        atomic_cap: match a.atomic_cap {
            ffi::IBV_ATOMIC_HCA => crate::params::AtomicCap::Hca,
            ffi::IBV_ATOMIC_GLOB => crate::params::AtomicCap::Global,
            _ => crate::params::AtomicCap::None,
        },
        max_mr_size: a.max_mr_size,
        max_srq_wr: n(a.max_srq_wr),
    })
}

/// One async event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `IBV_EVENT_*`.
    pub kind: u32,
    /// The QP's context value, for QP events.
    pub qp_context: Option<usize>,
    /// The port, for port events.
    pub port: Option<u8>,
}

/// A protection domain.
pub struct Pd {
    ptr: NonNull<ffi::ibv_pd>,
}

// SAFETY: as for `Ctx`.
unsafe impl Send for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn alloc(ctx: &Ctx) -> io::Result<Pd> {
        // SAFETY: a live context.
        NonNull::new(unsafe { ffi::ibv_alloc_pd(ctx.as_raw()) })
            .map(|ptr| Pd { ptr })
            .ok_or_else(last_err)
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: deallocated once, after its MRs and QPs (owner order).
        let _ = unsafe { ffi::ibv_dealloc_pd(self.ptr.as_ptr()) };
    }
}

/// A registered memory region.
pub struct Mr {
    inner: MrInner,
}

enum MrInner {
    Real(NonNull<ffi::ibv_mr>),
    #[cfg(any(test, feature = "fake-hca"))]
    Fake {
        lkey: u32,
        rkey: u32,
        fabric: crate::fake::Fabric,
    },
}

// SAFETY: as for `Ctx`.
unsafe impl Send for Mr {}

impl Mr {
    /// Registers `len` bytes at `addr` with `access` (`IBV_ACCESS_*` bits).
    ///
    /// # Safety
    ///
    /// The memory must stay mapped until the region is dropped.
    pub unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        let access =
            i32::try_from(access).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a live PD; the caller keeps the range mapped.
        let mr = unsafe { ffi::ibv_reg_mr(pd.ptr.as_ptr(), addr.cast(), len, access) };
        NonNull::new(mr)
            .map(|ptr| Mr {
                inner: MrInner::Real(ptr),
            })
            .ok_or_else(last_err)
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        match &self.inner {
            // SAFETY: a live MR's plain field.
            MrInner::Real(ptr) => unsafe { (*ptr.as_ptr()).lkey },
            #[cfg(any(test, feature = "fake-hca"))]
            MrInner::Fake { lkey, .. } => *lkey,
        }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        match &self.inner {
            // SAFETY: a live MR's plain field.
            MrInner::Real(ptr) => unsafe { (*ptr.as_ptr()).rkey },
            #[cfg(any(test, feature = "fake-hca"))]
            MrInner::Fake { rkey, .. } => *rkey,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        match &self.inner {
            MrInner::Real(ptr) => {
                // SAFETY: deregistered once, before its PD.
                let _ = unsafe { ffi::ibv_dereg_mr(ptr.as_ptr()) };
            }
            #[cfg(any(test, feature = "fake-hca"))]
            MrInner::Fake { lkey, fabric, .. } => fabric.dereg(*lkey),
        }
    }
}

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
    inner: CqInner,
}

enum CqInner {
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

    fn as_raw(&self) -> Option<*mut ffi::ibv_cq> {
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

type PostFn = unsafe extern "C" fn(
    *mut ffi::ibv_qp,
    *mut ffi::ibv_send_wr,
    *mut *mut ffi::ibv_send_wr,
) -> i32;

/// A reliable-connected queue pair.
pub struct Qp {
    inner: QpInner,
    /// What `ibv_create_qp` granted.
    pub cap: ffi::ibv_qp_cap,
}

enum QpInner {
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

/// Where the driver's objects come from: the device, or the in-process
/// fake HCA (feature `fake-hca`).
pub enum Backend<'a> {
    /// A real device: its context and protection domain.
    Real(&'a Ctx, &'a Pd),
    /// The fake HCA.
    #[cfg(any(test, feature = "fake-hca"))]
    Fake(&'a crate::fake::Fabric),
}

impl Backend<'_> {
    /// Registers memory.
    ///
    /// # Safety
    ///
    /// As [`Mr::register`].
    pub unsafe fn register(&self, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        match self {
            // SAFETY: the caller's promise is passed on.
            Backend::Real(_, pd) => unsafe { Mr::register(pd, addr, len, access) },
            #[cfg(any(test, feature = "fake-hca"))]
            Backend::Fake(f) => {
                let (lkey, rkey) = f.reg_mr(addr as u64, len as u64, access);
                Ok(Mr {
                    inner: MrInner::Fake {
                        lkey,
                        rkey,
                        fabric: (*f).clone(),
                    },
                })
            }
        }
    }

    /// Creates the CQ.
    pub fn cq(&self, entries: u32) -> io::Result<Cq> {
        match self {
            Backend::Real(ctx, _) => Cq::create(ctx, entries),
            #[cfg(any(test, feature = "fake-hca"))]
            Backend::Fake(f) => Ok(Cq {
                inner: CqInner::Fake {
                    fabric: (*f).clone(),
                    id: f.create_cq(entries),
                },
            }),
        }
    }

    /// Creates the shared receive queue of `depth` WQEs, with its own
    /// receive CQ of `depth` entries (a receive completes once), and posts
    /// every WQE.
    pub fn srq(&self, depth: u32) -> io::Result<Srq> {
        let cq = self.cq(depth)?;
        let mut srq = match self {
            Backend::Real(ctx, pd) => Srq::create(ctx, pd, cq, depth)?,
            #[cfg(any(test, feature = "fake-hca"))]
            Backend::Fake(f) => {
                let CqInner::Fake { id, .. } = &cq.inner else {
                    return Err(io::Error::other("a real CQ for a fake SRQ"));
                };
                Srq {
                    inner: SrqInner::Fake {
                        fabric: (*f).clone(),
                        id: f.create_srq(*id),
                    },
                    cq,
                    chain: recv_chain(),
                }
            }
        };
        let mut left = depth;
        while left > 0 {
            let n = left.min(RECV_BATCH as u32);
            srq.post(n as usize)?;
            left -= n;
        }
        Ok(srq)
    }

    /// Creates an RC QP (its receives from `srq` when given).
    pub fn qp(
        &self,
        cq: &Cq,
        srq: Option<&Srq>,
        sq_depth: u32,
        max_inline: u32,
        tag: usize,
    ) -> io::Result<Qp> {
        match self {
            Backend::Real(ctx, pd) => Qp::create(ctx, pd, cq, srq, sq_depth, max_inline, tag),
            #[cfg(any(test, feature = "fake-hca"))]
            Backend::Fake(f) => {
                let CqInner::Fake { id, .. } = &cq.inner else {
                    return Err(io::Error::other("a real CQ for a fake QP"));
                };
                let srq_id = match srq.map(|q| &q.inner) {
                    None => None,
                    Some(SrqInner::Fake { id, .. }) => Some(*id),
                    Some(_) => return Err(io::Error::other("a real SRQ for a fake QP")),
                };
                Ok(Qp {
                    inner: QpInner::Fake {
                        fabric: (*f).clone(),
                        qpn: f.create_qp(*id, srq_id, tag),
                    },
                    cap: ffi::ibv_qp_cap {
                        max_send_wr: sq_depth,
                        max_recv_wr: 1,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: max_inline.min(crate::fake::MAX_INLINE),
                    },
                })
            }
        }
    }
}

/// `IBV_ACCESS_*` bits.
pub mod access {
    /// Local write (needed by every remote-writable region, and by RDMA
    /// READ destinations).
    pub const LOCAL_WRITE: u32 = 1;
    /// Remote write.
    pub const REMOTE_WRITE: u32 = 2;
    /// Remote read.
    pub const REMOTE_READ: u32 = 4;
    /// Remote atomics.
    pub const REMOTE_ATOMIC: u32 = 8;
}

pub use ffi::{ibv_send_wr as SendWr, ibv_sge as Sge, ibv_wr_opcode};

/// Receive WQEs posted per doorbell at most (the SRQ's chain).
pub const RECV_BATCH: usize = 64;

/// A chain of [`RECV_BATCH`] zero-SGE receive WRs (a receipt carries no
/// payload: the WRITE's data goes to the heap, the immediate to the CQE).
fn recv_chain() -> Box<[ffi::ibv_recv_wr]> {
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
    inner: SrqInner,
    /// The receive CQ (the SRQ's QPs' `recv_cq`).
    pub cq: Cq,
    /// Pre-built receive WRs, chained at each post (never reallocated).
    chain: Box<[ffi::ibv_recv_wr]>,
}

enum SrqInner {
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
    fn create(ctx: &Ctx, pd: &Pd, cq: Cq, depth: u32) -> io::Result<Srq> {
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

/// Sets the immediate data (host order; sent in network order).
pub fn set_imm(wr: &mut SendWr, imm: u32) {
    wr.__bindgen_anon_1.imm_data = imm.to_be();
}

/// `IBV_SEND_*` bits.
pub mod send_flags {
    /// Wait for earlier reads and atomics.
    pub const FENCE: u32 = 1;
    /// Generate a completion.
    pub const SIGNALED: u32 = 2;
    /// Copy the payload into the WQE.
    pub const INLINE: u32 = 8;
}

/// A zeroed work request.
pub fn empty_wr() -> SendWr {
    // SAFETY: `ibv_send_wr` is plain C data (integers, raw pointers and
    // unions of those); all-zero is a valid value of every field.
    unsafe { std::mem::zeroed() }
}

/// Sets the RDMA part of a work request.
pub fn set_rdma(wr: &mut SendWr, remote_addr: u64, rkey: u32) {
    wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
}

/// Sets the atomic part of a work request.
pub fn set_atomic(wr: &mut SendWr, remote_addr: u64, rkey: u32, compare_add: u64, swap: u64) {
    wr.wr.atomic = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
        remote_addr,
        compare_add,
        swap,
        rkey,
    };
}

/// Event kinds the driver reacts to.
pub mod event {
    pub use ibverbs_sys::{
        IBV_EVENT_CQ_ERR as CQ_ERR, IBV_EVENT_DEVICE_FATAL as DEVICE_FATAL,
        IBV_EVENT_PATH_MIG_ERR as PATH_MIG_ERR, IBV_EVENT_PORT_ACTIVE as PORT_ACTIVE,
        IBV_EVENT_PORT_ERR as PORT_ERR, IBV_EVENT_QP_ACCESS_ERR as QP_ACCESS_ERR,
        IBV_EVENT_QP_FATAL as QP_FATAL, IBV_EVENT_QP_LAST_WQE_REACHED as LAST_WQE_REACHED,
        IBV_EVENT_QP_REQ_ERR as QP_REQ_ERR,
    };
}
