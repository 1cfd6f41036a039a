//! The raw verbs calls, and nothing else: small owning wrappers around the
//! libibverbs objects the driver uses, each released once in `Drop`. Here
//! the device context, protection domain, memory regions, the async
//! events, the work-request fields and where objects come from
//! ([`Backend`]: the device or the fake HCA); the queues in their own
//! modules: [`cq`] (completion queues and polling), [`qp`] (RC queue pairs:
//! creation, state transitions, posting) and [`srq`] (the shared receive
//! queue of the receipts).
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

mod cq;
mod qp;
mod srq;

use std::{ffi::CStr, io, ptr::NonNull};

pub use cq::{Cq, Cqe, POLL_BATCH};
use ibverbs_sys as ffi;
pub use qp::Qp;
pub use srq::{RECV_BATCH, Srq};

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
// SAFETY: shared (a driver and its QP sets, `Arc`) only to create objects
// on it and to be released by the last holder; every verb is thread-safe,
// and the async event queue is read by one driver only.
unsafe impl Sync for Ctx {}

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
// SAFETY: shared only to create objects in it (thread-safe verbs) and to
// be released by the last holder.
unsafe impl Sync for Pd {}

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
// SAFETY: shared only to read its keys (plain values fixed at
// registration) and to be deregistered by the last holder.
unsafe impl Sync for Mr {}

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
                inner: cq::CqInner::Fake {
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
                let cq::CqInner::Fake { id, .. } = &cq.inner else {
                    return Err(io::Error::other("a real CQ for a fake SRQ"));
                };
                Srq {
                    inner: srq::SrqInner::Fake {
                        fabric: (*f).clone(),
                        id: f.create_srq(*id),
                    },
                    cq,
                    chain: srq::recv_chain(),
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
                let cq::CqInner::Fake { id, .. } = &cq.inner else {
                    return Err(io::Error::other("a real CQ for a fake QP"));
                };
                let srq_id = match srq.map(|q| &q.inner) {
                    None => None,
                    Some(srq::SrqInner::Fake { id, .. }) => Some(*id),
                    Some(_) => return Err(io::Error::other("a real SRQ for a fake QP")),
                };
                Ok(Qp {
                    inner: qp::QpInner::Fake {
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
