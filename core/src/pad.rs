//! Cache-line padding with a layout fixed by `#[repr(C)]`.

use core::ops::{Deref, DerefMut};

/// Pads and aligns a value to 128 bytes so two of them never share a cache line.
///
/// 128 rather than 64 on x86_64 because Intel's L2 "spatial prefetcher" pulls cache
/// lines in adjacent pairs (Intel 64 and IA-32 Architectures Optimization Reference
/// Manual, §3.7.3), and 128 on aarch64 because big cores (Apple M-series, Neoverse V)
/// use 128-byte lines; crossbeam's `CachePadded` picks the same sizes for the same
/// reasons. Unlike crossbeam's, this type is `#[repr(C)]`, so structures that contain
/// it have one layout in every process mapping the same shared memory.
#[derive(Debug, Default)]
#[repr(C, align(128))]
pub struct CachePadded<T> {
    value: T,
}

static_assertions::const_assert_eq!(core::mem::align_of::<CachePadded<u8>>(), 128);
static_assertions::const_assert_eq!(core::mem::size_of::<CachePadded<usize>>(), 128);

impl<T> CachePadded<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        Self { value }
    }

    /// Unwraps the value.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> Deref for CachePadded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for CachePadded<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}
