//! The local symmetric heap, seen through a raw pointer: copies in and out,
//! and hardware atomics on its words (the same instructions as the
//! shared-memory driver, so both are atomic against each other).
#![allow(unsafe_code)]

use switchyard_core::{
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
    transport::{AtomicOp, AtomicWidth, heap_rmw_u32, heap_rmw_u64},
};

use crate::sys::AnonMap;

/// The own heap. Callers check every range against [`Heap::len`] first.
#[derive(Debug)]
pub(crate) struct Heap {
    ptr: *mut u8,
    len: u64,
    _owned: Option<AnonMap>,
}

// SAFETY: the heap is memory the driver may use from whichever thread owns the
// driver (the `SocketDriver::new` contract); other threads touch it only
// through atomics or by the SHMEM rules.
unsafe impl Send for Heap {}

impl Heap {
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` bytes for the heap's
    /// lifetime and 8-byte aligned.
    pub(crate) unsafe fn new(ptr: *mut u8, len: u64, owned: Option<AnonMap>) -> Heap {
        Heap {
            ptr,
            len,
            _owned: owned,
        }
    }

    /// Start and length.
    pub(crate) fn raw(&self) -> (*mut u8, u64) {
        (self.ptr, self.len)
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    #[inline]
    fn at(&self, off: u64, len: usize) -> *mut u8 {
        debug_assert!(off.checked_add(len as u64).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (callers check, debug-asserted above).
        unsafe { self.ptr.add(off as usize) }
    }

    /// Copies `src` to `off`, as one atomic store when it is one aligned
    /// 4- or 8-byte word (a flag is never torn).
    #[inline]
    pub(crate) fn write(&self, off: u64, src: &[u8]) {
        let dst = self.at(off, src.len());
        if src.len() == 8 && (dst as usize).is_multiple_of(8) {
            let v = u64::from_ne_bytes(src.try_into().unwrap_or([0; 8]));
            // SAFETY: 8-aligned, in bounds, live for `self`.
            unsafe { AtomicU64::from_ptr(dst.cast()) }.store(v, Ordering::Release);
        } else if src.len() == 4 && (dst as usize).is_multiple_of(4) {
            let v = u32::from_ne_bytes(src.try_into().unwrap_or([0; 4]));
            // SAFETY: 4-aligned, in bounds, live for `self`.
            unsafe { AtomicU32::from_ptr(dst.cast()) }.store(v, Ordering::Release);
        } else {
            // SAFETY: in bounds; `src` is a separate buffer (never the heap
            // itself: heap-to-heap copies use `copy_within`).
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        }
    }

    /// Copies `dst.len()` bytes from `off` into `dst`.
    #[inline]
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) {
        let src = self.at(off, dst.len());
        // SAFETY: in bounds; `dst` is a separate buffer.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    }

    /// `len` bytes at `off` as a slice, to send or checksum without a copy.
    /// By the SHMEM rules the range is not written while the operation that
    /// reads it is outstanding.
    #[inline]
    pub(crate) fn slice(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: in bounds and live for `self`; see above for concurrency.
        unsafe { core::slice::from_raw_parts(self.at(off, len), len) }
    }

    /// Copies within the heap (ranges may overlap).
    pub(crate) fn copy_within(&self, from: u64, to: u64, len: usize) {
        let (s, d) = (self.at(from, len), self.at(to, len));
        // SAFETY: both in bounds; `copy` allows overlap.
        unsafe { core::ptr::copy(s, d, len) };
    }

    /// Runs `op` on the word at `off` (in bounds and aligned: checked by the
    /// caller) and returns the old value.
    pub(crate) fn atomic(&self, off: u64, op: &AtomicOp) -> u64 {
        let p = self.at(off, op.width.bytes());
        match op.width {
            AtomicWidth::W64 => {
                debug_assert!((p as usize).is_multiple_of(8));
                // SAFETY: 8-aligned (heap 8-aligned, offset checked) and in bounds.
                let a = unsafe { AtomicU64::from_ptr(p.cast()) };
                heap_rmw_u64(a, op)
            }
            AtomicWidth::W32 => {
                debug_assert!((p as usize).is_multiple_of(4));
                // SAFETY: as above, 4 bytes.
                let a = unsafe { AtomicU32::from_ptr(p.cast()) };
                heap_rmw_u32(a, op)
            }
        }
    }
}
