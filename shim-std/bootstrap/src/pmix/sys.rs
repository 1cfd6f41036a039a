//! The PMIx client calls the bootstrap makes, as safe functions over the
//! bindings `build.rs` generates from `pmix.h`. Every `unsafe` of the PMIx
//! support is here.
//!
//! Values PMIx hands back (`PMIx_Get`) are copied into owned Rust values and
//! released at once (`PMIx_Value_destruct` and `free`, which is what
//! `PMIX_VALUE_RELEASE` does); values handed to PMIx (`PMIx_Put`, the
//! fence's directives) are copied by PMIx, so they only need to live for
//! the call.

#![allow(unsafe_code)]

use std::{
    ffi::{CStr, c_char, c_void},
    ptr,
};

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
mod ffi {
    include!(concat!(env!("OUT_DIR"), "/pmix.rs"));
}

/// `pmix_status_t`: 0 is success, every failure is negative.
pub(crate) type Status = i32;

/// A key as PMIx wants it: a NUL-terminated C string.
pub(crate) type Key = &'static CStr;

/// `PMIX_RANK_WILDCARD`: every rank of a namespace (`UINT32_MAX-1`, which
/// bindgen does not evaluate).
const RANK_WILDCARD: u32 = u32::MAX - 1;

/// The constants of `pmix_common.h` the bootstrap uses, as `CStr`s and
/// numbers of the right type.
pub(crate) mod keys {
    use super::{Key, ffi};

    const fn key(bytes: &'static [u8]) -> Key {
        match core::ffi::CStr::from_bytes_with_nul(bytes) {
            Ok(k) => k,
            Err(_) => panic!("a PMIx key is a NUL-terminated string"),
        }
    }

    /// `PMIX_JOB_SIZE` (`uint32_t`).
    pub(crate) const JOB_SIZE: Key = key(ffi::PMIX_JOB_SIZE);
    /// `PMIX_LOCAL_RANK` (`uint16_t`).
    pub(crate) const LOCAL_RANK: Key = key(ffi::PMIX_LOCAL_RANK);
    /// `PMIX_LOCAL_SIZE` (`uint32_t`).
    pub(crate) const LOCAL_SIZE: Key = key(ffi::PMIX_LOCAL_SIZE);
    /// `PMIX_NUM_NODES` (`uint32_t`).
    pub(crate) const NUM_NODES: Key = key(ffi::PMIX_NUM_NODES);
    /// `PMIX_HOSTNAME` (`char *`).
    pub(crate) const HOSTNAME: Key = key(ffi::PMIX_HOSTNAME);
    /// `PMIX_ERR_NOT_FOUND`.
    pub(crate) const ERR_NOT_FOUND: super::Status = ffi::PMIX_ERR_NOT_FOUND;
}

// The layouts the safe code below relies on (bindgen's own layout checks
// cover every field; these name the ones that matter here).
const _: () = {
    assert!(size_of::<ffi::pmix_proc_t>() == ffi::PMIX_MAX_NSLEN as usize + 1 + 4);
    assert!(size_of::<ffi::pmix_data_type_t>() == 2);
    assert!(size_of::<ffi::pmix_status_t>() == size_of::<Status>());
};

/// A process name: namespace and rank.
#[derive(Clone, Copy)]
pub(crate) struct Proc(ffi::pmix_proc_t);

impl Proc {
    /// The namespace (lossily decoded; PMIx namespaces are ASCII).
    pub(crate) fn nspace(&self) -> String {
        let bytes: Vec<u8> = self
            .0
            .nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The rank.
    pub(crate) fn rank(&self) -> u32 {
        self.0.rank
    }

    /// The same namespace, another rank.
    pub(crate) fn with_rank(&self, rank: u32) -> Proc {
        Proc(ffi::pmix_proc_t {
            nspace: self.0.nspace,
            rank,
        })
    }

    /// Every rank of the namespace.
    pub(crate) fn wildcard(&self) -> Proc {
        self.with_rank(RANK_WILDCARD)
    }
}

/// A value PMIx returned, copied out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// `PMIX_UINT16`.
    U16(u16),
    /// `PMIX_UINT32`.
    U32(u32),
    /// `PMIX_STRING`.
    Str(String),
    /// `PMIX_BYTE_OBJECT`.
    Bytes(Vec<u8>),
    /// Any other type (its `pmix_data_type_t`), not read.
    Other(u16),
}

/// `PMIx_Error_string`: the status's name.
pub(crate) fn error_string(status: Status) -> String {
    // SAFETY: PMIx_Error_string returns a pointer to a static string (or
    // NULL), valid for the process's life.
    let p = unsafe { ffi::PMIx_Error_string(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static (above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(status: ffi::pmix_status_t) -> Result<(), Status> {
    if status == ffi::PMIX_SUCCESS as ffi::pmix_status_t {
        Ok(())
    } else {
        Err(status)
    }
}

/// `PMIx_Init` with no directives: connects to the local PMIx server named
/// by the environment (`PMIX_SERVER_URI*`). Returns this process's name.
/// Reference-counted by PMIx: every success needs one [`finalize`].
pub(crate) fn init() -> Result<Proc, Status> {
    let mut me = std::mem::MaybeUninit::<ffi::pmix_proc_t>::zeroed();
    // SAFETY: `me` is a writable pmix_proc_t; no directives (NULL, 0).
    check(unsafe { ffi::PMIx_Init(me.as_mut_ptr(), ptr::null_mut(), 0) })?;
    // SAFETY: zero-initialised plain data (char array and integer), filled
    // by a successful PMIx_Init.
    Ok(Proc(unsafe { me.assume_init() }))
}

/// `PMIx_Finalize` with no directives (no barrier).
pub(crate) fn finalize() -> Result<(), Status> {
    // SAFETY: no directives; called once per successful `init`.
    check(unsafe { ffi::PMIx_Finalize(ptr::null(), 0) })
}

/// `atexit(3)`: `f` runs at the process's normal exit (`exit`, a return
/// from `main`). `Err` when it could not be registered.
pub(crate) fn at_exit(f: extern "C" fn()) -> Result<(), ()> {
    // SAFETY: `f` is a function of this program, valid for the process's
    // life; it takes no arguments, as atexit requires.
    if unsafe { libc::atexit(f) } == 0 {
        Ok(())
    } else {
        Err(())
    }
}

/// `PMIx_Abort` of every process of the caller's job (no process list),
/// with `status` and `message` for the resource manager to report.
pub(crate) fn abort(status: i32, message: &CStr) -> Result<(), Status> {
    // SAFETY: the message is NUL-terminated and outlives the call; no
    // process list (NULL, 0) means the whole job.
    check(unsafe { ffi::PMIx_Abort(status, message.as_ptr(), ptr::null_mut(), 0) })
}

/// `PMIx_Get` of `key` for `proc`, copied into a [`Value`]; with
/// `timeout_s`, the server gives up after that many seconds (`PMIX_TIMEOUT`:
/// a key of another process, fetched from its server on demand, may never
/// come).
pub(crate) fn get(proc: &Proc, key: Key, timeout_s: Option<i32>) -> Result<Value, Status> {
    // SAFETY: all-zero is a valid pmix_info_t (empty key, PMIX_UNDEF).
    let mut info: [ffi::pmix_info_t; 1] = unsafe { std::mem::zeroed() };
    let ninfo = match timeout_s {
        Some(t) => {
            load(&mut info[0], ffi::PMIX_TIMEOUT, &t)?;
            1
        }
        None => 0,
    };
    let mut out: *mut ffi::pmix_value_t = ptr::null_mut();
    // SAFETY: `proc` and `key` are valid for the call; `ninfo` (0 or 1) of
    // the loaded directives; `out` receives a value PMIx allocated
    // (released below).
    let result =
        check(unsafe { ffi::PMIx_Get(&proc.0, key.as_ptr(), info.as_ptr(), ninfo, &mut out) });
    for i in &mut info[..ninfo] {
        // SAFETY: loaded above; an int owns nothing, but destruct is what
        // PMIX_INFO_DESTRUCT does.
        unsafe { ffi::PMIx_Value_destruct(&mut i.value) };
    }
    result?;
    if out.is_null() {
        return Err(keys::ERR_NOT_FOUND);
    }
    // SAFETY: a successful PMIx_Get left a valid, initialised value at `out`.
    let v = unsafe { &*out };
    let value = match u32::from(v.type_) {
        // SAFETY: the union's field is the one `type_` names.
        ffi::PMIX_UINT16 => Value::U16(unsafe { v.data.uint16 }),
        // SAFETY: as above.
        ffi::PMIX_UINT32 => Value::U32(unsafe { v.data.uint32 }),
        ffi::PMIX_STRING => {
            // SAFETY: as above.
            let s = unsafe { v.data.string };
            if s.is_null() {
                Value::Str(String::new())
            } else {
                // SAFETY: a PMIX_STRING value holds a NUL-terminated string.
                Value::Str(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
            }
        }
        ffi::PMIX_BYTE_OBJECT => {
            // SAFETY: as above.
            let bo = unsafe { v.data.bo };
            if bo.bytes.is_null() || bo.size == 0 {
                Value::Bytes(Vec::new())
            } else {
                // SAFETY: a byte object holds `size` bytes at `bytes`.
                let bytes = unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) };
                Value::Bytes(bytes.to_vec())
            }
        }
        other => Value::Other(other as u16),
    };
    // SAFETY: PMIX_VALUE_RELEASE: free what the value holds, then the value
    // itself (malloc'd by PMIx); nothing refers to it any more.
    unsafe {
        ffi::PMIx_Value_destruct(out);
        libc::free(out.cast::<c_void>());
    }
    Ok(value)
}

/// `PMIx_Put` of `bytes` (a `PMIX_BYTE_OBJECT`) under `key`, for every
/// process of the job wherever it runs (`PMIX_GLOBAL`).
pub(crate) fn put_bytes(key: Key, bytes: &[u8]) -> Result<(), Status> {
    // SAFETY: all-zero is a valid pmix_value_t (PMIX_UNDEF, null data).
    let mut v: ffi::pmix_value_t = unsafe { std::mem::zeroed() };
    v.type_ = ffi::PMIX_BYTE_OBJECT as ffi::pmix_data_type_t;
    v.data.bo = ffi::pmix_byte_object_t {
        // PMIx copies the bytes and never writes through this pointer.
        bytes: bytes.as_ptr().cast::<c_char>().cast_mut(),
        size: bytes.len(),
    };
    // SAFETY: `key` is NUL-terminated; `v` describes `bytes`, which outlive
    // the call; PMIx_Put copies the value.
    check(unsafe { ffi::PMIx_Put(ffi::PMIX_GLOBAL as ffi::pmix_scope_t, key.as_ptr(), &mut v) })
}

/// `PMIx_Commit`: what this process put goes to its server.
pub(crate) fn commit() -> Result<(), Status> {
    // SAFETY: no arguments.
    check(unsafe { ffi::PMIx_Commit() })
}

/// A C scalar PMIx can load into a directive, with its `pmix_data_type_t`.
trait Scalar: Copy {
    /// The PMIx type of `Self`.
    const TYPE: u32;
}

impl Scalar for bool {
    const TYPE: u32 = ffi::PMIX_BOOL;
}

impl Scalar for i32 {
    const TYPE: u32 = ffi::PMIX_INT;
}

/// `PMIx_Info_load` of `value` under `key` (one of `pmix_common.h`'s
/// NUL-terminated keys) into `info`.
fn load<T: Scalar>(info: &mut ffi::pmix_info_t, key: &[u8], value: &T) -> Result<(), Status> {
    if key.last() != Some(&0) {
        return Err(ffi::PMIX_ERR_BAD_PARAM);
    }
    // SAFETY: `info` is writable; `key` is NUL-terminated (checked);
    // `value` points at a `T`, whose PMIx type is `T::TYPE`, and
    // PMIx_Info_load copies it.
    check(unsafe {
        ffi::PMIx_Info_load(
            info,
            key.as_ptr().cast::<c_char>(),
            std::ptr::from_ref(value).cast::<c_void>(),
            T::TYPE as ffi::pmix_data_type_t,
        )
    })
}

/// `PMIx_Fence` over every process of `proc`'s namespace, failing after
/// `timeout_s` seconds (0: never). With `collect`, the data they committed
/// is collected and sent to every node (`PMIX_COLLECT_DATA`); without, it
/// stays with each process's server, and a `PMIx_Get` of another
/// process's key fetches it from there on demand ("direct modex").
pub(crate) fn fence_all(proc: &Proc, timeout_s: i32, collect: bool) -> Result<(), Status> {
    let all = proc.wildcard();
    // SAFETY: all-zero is a valid pmix_info_t (empty key, PMIX_UNDEF).
    let mut info: [ffi::pmix_info_t; 2] = unsafe { std::mem::zeroed() };
    load(&mut info[0], ffi::PMIX_COLLECT_DATA, &collect)?;
    load(&mut info[1], ffi::PMIX_TIMEOUT, &timeout_s)?;
    // SAFETY: one process name (the wildcard) and two loaded directives,
    // all valid for the call.
    let result = check(unsafe { ffi::PMIx_Fence(&all.0, 1, info.as_ptr(), info.len()) });
    for i in &mut info {
        // SAFETY: loaded above; a bool and an int own nothing, but destruct
        // is what PMIX_INFO_DESTRUCT does.
        unsafe { ffi::PMIx_Value_destruct(&mut i.value) };
    }
    result
}
