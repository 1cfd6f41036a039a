//! The leg table: per PE, the heap of its live mapping (base and length), and
//! the small operations on it (the leg of a put, a get, an atomic, an
//! Acquire load of the own heap), each one bounds check and the access.
//!
//! [`ShmTransport`] keeps one in step with its peers' slots; a copy of it
//! ([`ShmTransport::legs`]) lets another thread of the PE run the same
//! operations through the same mappings without the transport: nothing in a
//! copy is written after it is made, so threads with a copy each share no
//! lock and no written cache line.

use switchyard_core::{
    sync::atomic::{AtomicU32, AtomicU64, Ordering, fence},
    transport::{AtomicOp, AtomicWidth},
};

use crate::{Mapped, ShmTransport};

/// One entry of the leg table: the heap of a live mapping (base and length),
/// or `len == 0` when the peer is not mapped (unknown, named, dead, closed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    base: *mut u8,
    len: u64,
}

// SAFETY: a copy of a pointer into a mapping that a `ShmTransport` owns (its
// `Mmap`s are `Send`); it is dereferenced only through that transport or a
// `ShmLegs` copy whose maker keeps the mappings alive (`ShmTransport::legs`),
// under the same rules as the mapping itself.
unsafe impl Send for Window {}

impl Window {
    pub(crate) const NONE: Window = Window {
        base: core::ptr::null_mut(),
        len: 0,
    };

    pub(crate) fn of(m: &Mapped) -> Window {
        Window {
            base: m.heap_ptr(),
            len: m.heap_len(),
        }
    }

    /// `[offset, offset+len)` when it lies in this heap: one compare pair,
    /// no search. An unmapped peer's window (`len == 0`) holds nothing, so
    /// it always answers `None`.
    #[inline(always)]
    pub(crate) fn at(self, offset: u64, len: u64) -> Option<*mut u8> {
        if offset < self.len && len <= self.len - offset {
            // SAFETY: `offset < self.len`, and `self` describes the heap of a
            // live mapping (see `Window`'s `Send`), so the pointer stays in it.
            Some(unsafe { self.base.add(offset as usize) })
        } else {
            None
        }
    }
}

/// The leg table of a PE: its small puts, gets and atomics on same-node
/// heaps, each a bounds check against a mapped heap and the access. A copy
/// for another thread comes from [`ShmTransport::legs`]; every operation
/// answers `false` (or `None`) when it did nothing (not mapped, out of
/// bounds, misaligned), and the transport then gives the typed error.
#[derive(Debug, Clone)]
pub struct ShmLegs {
    pub(crate) me: u32,
    pub(crate) windows: Box<[Window]>,
}

impl ShmLegs {
    /// `pe`'s window (the empty one when `pe` is out of range).
    #[inline(always)]
    pub(crate) fn window(&self, pe: u32) -> Window {
        self.windows
            .get(pe as usize)
            .copied()
            .unwrap_or(Window::NONE)
    }

    /// Sets `pe`'s window (ignored out of range).
    pub(crate) fn set(&mut self, pe: u32, w: Window) {
        if let Some(slot) = self.windows.get_mut(pe as usize) {
            *slot = w;
        }
    }

    /// Copies `src` to `offset` of `pe`'s heap, when mapped and in bounds.
    #[inline(always)]
    pub fn put_leg(&self, pe: u32, offset: u64, src: &[u8]) -> bool {
        let Some(dst) = self.window(pe).at(offset, src.len() as u64) else {
            return false;
        };
        // SAFETY: `dst` is valid for `src.len()` bytes (checked by `at`);
        // `src` is a caller's buffer, which cannot overlap a heap: the heaps
        // are only reachable through raw pointers.
        unsafe { ShmTransport::copy(src.as_ptr(), dst, src.len()) };
        true
    }

    /// Copies `dst.len()` bytes at `offset` of `pe`'s heap into `dst` (after
    /// an Acquire fence), when mapped and in bounds.
    #[inline(always)]
    pub fn get_leg(&self, pe: u32, offset: u64, dst: &mut [u8]) -> bool {
        let Some(src) = self.window(pe).at(offset, dst.len() as u64) else {
            return false;
        };
        // SAFETY: `src` is valid for `dst.len()` bytes (checked by `at`) in a
        // live mapping.
        unsafe { ShmTransport::load_into(src, dst) };
        true
    }

    /// Applies `op` at `offset` of `pe`'s heap and returns the old value,
    /// when mapped, in bounds and aligned.
    #[inline(always)]
    pub fn atomic_leg(&self, pe: u32, offset: u64, op: AtomicOp) -> Option<u64> {
        let w = op.width.bytes() as u64;
        if !offset.is_multiple_of(w) {
            return None;
        }
        let p = self.window(pe).at(offset, w)?;
        // SAFETY: `p` is in bounds (checked by `at`) and aligned (the heap is
        // page aligned, the offset checked) in a live mapping.
        Some(unsafe { ShmTransport::rmw(p, &op) })
    }

    /// Copies `len` bytes from `src_offset` of `src_pe`'s heap to
    /// `dst_offset` of `dst_pe`'s (after an Acquire fence), when both are
    /// mapped and in bounds: a put from the own heap or a get into it.
    #[inline]
    pub fn copy_leg(
        &self,
        dst_pe: u32,
        dst_offset: u64,
        src_pe: u32,
        src_offset: u64,
        len: u32,
    ) -> bool {
        let len64 = u64::from(len);
        let (Some(dst), Some(src)) = (
            self.window(dst_pe).at(dst_offset, len64),
            self.window(src_pe).at(src_offset, len64),
        ) else {
            return false;
        };
        // SYNC POINT with the Release fences/atomics of the writers of the
        // source: what was published to this PE before is seen by the copy.
        fence(Ordering::Acquire);
        if dst_pe == src_pe {
            // SAFETY: both in bounds of one heap (checked); `copy` allows
            // overlap.
            unsafe { core::ptr::copy(src, dst, len as usize) };
        } else {
            // SAFETY: in bounds of two different mappings (checked above).
            unsafe { ShmTransport::copy(src, dst, len as usize) };
        }
        true
    }

    /// An Acquire load of the word at `offset` of this PE's own heap (see
    /// [`ShmTransport::load_acquire`]), when in bounds and aligned.
    #[inline]
    pub fn load_acquire(&self, offset: u64, width: AtomicWidth) -> Option<u64> {
        let w = width.bytes() as u64;
        if !offset.is_multiple_of(w) {
            return None;
        }
        let p = self.window(self.me).at(offset, w)?;
        // SYNC POINT with the Release fences and stores of the writers (`fence`,
        // `quiet_poll`, atomics): what they published before is seen after.
        Some(match width {
            // SAFETY: in bounds (checked by `at`) and aligned (the heap is page
            // aligned, the offset checked) in the own mapping, alive while the
            // table is used; other PEs touch it only with atomics or copies.
            AtomicWidth::W64 => unsafe { AtomicU64::from_ptr(p.cast()) }.load(Ordering::Acquire),
            AtomicWidth::W32 => {
                // SAFETY: as above, for 4 bytes.
                let a = unsafe { AtomicU32::from_ptr(p.cast()) };
                u64::from(a.load(Ordering::Acquire))
            }
        })
    }

    /// The PE whose table this is.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// This PE's own heap mapping: base and length (see
    /// [`ShmTransport::local_heap`]).
    pub fn local_heap(&self) -> (*mut u8, u64) {
        let w = self.window(self.me);
        (w.base, w.len)
    }

    /// Whether `[offset, offset+len)` of `pe`'s heap is mapped here.
    #[inline]
    pub fn holds(&self, pe: u32, offset: u64, len: u64) -> bool {
        self.window(pe).at(offset, len).is_some()
    }
}
