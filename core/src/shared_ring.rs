//! A [`Ring`] in a shared-memory mapping, behind a header that lets the
//! attaching process check what it maps before it uses it.
//!
//! The creating process calls [`SharedRing::create`] on the fresh mapping: it
//! zeroes the ring, writes the header (capacity, element size and alignment,
//! format version, an application tag such as the job id) and publishes the magic
//! number last, with a Release store. Another process calls
//! [`SharedRing::attach`] on its own mapping of the same object: it checks length,
//! alignment, magic (Acquire), version, capacity, element layout and tag, and
//! refuses anything else with an [`AttachError`]. Each side then takes its end
//! with the `unsafe` [`Ring::producer`] / [`Ring::consumer`].
//!
//! Every header field is an atomic, read only after the Acquire of the magic,
//! so even a hostile peer rewriting the header cannot cause a data race here.
#![allow(unsafe_code)]

use core::fmt;

use zerocopy::FromBytes;

use crate::{
    pad::CachePadded,
    ring::Ring,
    sync::atomic::{AtomicU32, Ordering},
};

/// `"SYRG"`, written last by [`SharedRing::create`].
pub const SHARED_RING_MAGIC: u32 = u32::from_le_bytes(*b"SYRG");
/// Layout version of [`SharedRing`].
pub const SHARED_RING_VERSION: u32 = 1;

/// What the header records.
#[derive(Debug)]
#[repr(C)]
struct Header {
    magic: AtomicU32,
    version: AtomicU32,
    capacity: AtomicU32,
    elem_size: AtomicU32,
    elem_align: AtomicU32,
    tag: AtomicU32,
}

/// A header and a ring, `#[repr(C)]`, as they lie in the mapping.
#[derive(Debug)]
#[repr(C)]
pub struct SharedRing<T, const N: usize> {
    header: CachePadded<Header>,
    ring: Ring<T, N>,
}

/// Why a mapping is not a usable [`SharedRing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachError {
    /// The mapping is shorter than the ring.
    TooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes mapped.
        got: usize,
    },
    /// The mapping does not start on the ring's alignment.
    Misaligned {
        /// Alignment needed.
        align: usize,
    },
    /// No ring has been published there yet (magic still zero).
    NotInitialized,
    /// Something else is there.
    BadMagic(u32),
    /// A ring of another layout version.
    BadVersion(u32),
    /// A ring of another capacity.
    WrongCapacity {
        /// This process expects.
        expected: u32,
        /// The mapping holds.
        found: u32,
    },
    /// A ring of another element type (size or alignment differ).
    WrongElement {
        /// Element size in the mapping.
        size: u32,
        /// Element alignment in the mapping.
        align: u32,
    },
    /// A ring of another job or channel.
    WrongTag {
        /// This process expects.
        expected: u32,
        /// The mapping holds.
        found: u32,
    },
    /// `N` or `T` are too large to be described by the header.
    Unrepresentable,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall { need, got } => {
                write!(
                    f,
                    "mapping of {got} bytes is smaller than the ring's {need}"
                )
            }
            Self::Misaligned { align } => write!(f, "mapping is not aligned to {align} bytes"),
            Self::NotInitialized => f.write_str("no ring has been published in the mapping yet"),
            Self::BadMagic(m) => write!(f, "not a switchyard ring (magic {m:#010x})"),
            Self::BadVersion(v) => write!(
                f,
                "ring layout version {v}, this build speaks {SHARED_RING_VERSION}"
            ),
            Self::WrongCapacity { expected, found } => {
                write!(f, "ring of {found} slots, expected {expected}")
            }
            Self::WrongElement { size, align } => write!(
                f,
                "ring of {size}-byte elements aligned to {align}, not this element type"
            ),
            Self::WrongTag { expected, found } => {
                write!(f, "ring tagged {found:#x}, expected {expected:#x}")
            }
            Self::Unrepresentable => {
                f.write_str("ring capacity or element too large for the header")
            }
        }
    }
}

impl core::error::Error for AttachError {}

impl<T: Copy + FromBytes, const N: usize> SharedRing<T, N> {
    /// Bytes the mapping must have.
    pub const SIZE: usize = core::mem::size_of::<Self>();
    /// Alignment the mapping must have (page-aligned mappings always do).
    pub const ALIGN: usize = core::mem::align_of::<Self>();

    fn layout() -> Result<(u32, u32, u32), AttachError> {
        let cap = u32::try_from(N).map_err(|_| AttachError::Unrepresentable)?;
        let size =
            u32::try_from(core::mem::size_of::<T>()).map_err(|_| AttachError::Unrepresentable)?;
        let align =
            u32::try_from(core::mem::align_of::<T>()).map_err(|_| AttachError::Unrepresentable)?;
        Ok((cap, size, align))
    }

    fn check_region(ptr: *const u8, len: usize) -> Result<(), AttachError> {
        if len < Self::SIZE {
            return Err(AttachError::TooSmall {
                need: Self::SIZE,
                got: len,
            });
        }
        if !ptr.addr().is_multiple_of(Self::ALIGN) {
            return Err(AttachError::Misaligned { align: Self::ALIGN });
        }
        Ok(())
    }

    /// Lays a fresh ring over `len` bytes at `ptr` and publishes it with `tag`.
    ///
    /// # Errors
    /// [`AttachError::TooSmall`], [`AttachError::Misaligned`] or
    /// [`AttachError::Unrepresentable`]; nothing is written then.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be mapped, writable and valid for `'a`, and no other
    /// process may use it until this returns (the creator owns a fresh mapping).
    pub unsafe fn create<'a>(ptr: *mut u8, len: usize, tag: u32) -> Result<&'a Self, AttachError> {
        let (cap, size, align) = Self::layout()?;
        Self::check_region(ptr, len)?;
        let this = ptr.cast::<Self>();
        // SAFETY: the region is large and aligned enough (checked above), mapped
        // and exclusively ours (caller). All-zero bytes are a valid `SharedRing`:
        // atomics at 0, and a zeroed `Ring` (see `Ring::init_in_place`).
        let shared: &'a Self = unsafe {
            core::ptr::write_bytes(this, 0, 1);
            &*this
        };
        let h = &shared.header;
        h.version.store(SHARED_RING_VERSION, Ordering::Relaxed);
        h.capacity.store(cap, Ordering::Relaxed);
        h.elem_size.store(size, Ordering::Relaxed);
        h.elem_align.store(align, Ordering::Relaxed);
        h.tag.store(tag, Ordering::Relaxed);
        // SYNC POINT with the Acquire load of `magic` in `attach`: the zeroed
        // ring and the header fields are visible to whoever sees the magic.
        h.magic.store(SHARED_RING_MAGIC, Ordering::Release);
        Ok(shared)
    }

    /// Checks the ring published at `ptr` (by [`create`](Self::create), maybe in
    /// another process) and returns it.
    ///
    /// # Errors
    /// Every [`AttachError`]: the mapping is too small or misaligned, nothing or
    /// something else is there, or the ring's layout or tag differ.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be mapped and readable (and writable, for the
    /// ring's indices and slots) and stay valid for `'a`; other processes may use
    /// it only through [`SharedRing`].
    pub unsafe fn attach<'a>(
        ptr: *const u8,
        len: usize,
        tag: u32,
    ) -> Result<&'a Self, AttachError> {
        let (cap, size, align) = Self::layout()?;
        Self::check_region(ptr, len)?;
        // SAFETY: large and aligned enough (checked), mapped for 'a (caller);
        // every byte pattern is a valid `SharedRing` (atomics, and slots of a
        // `FromBytes` type inside `MaybeUninit`), so reading it is sound even
        // if the creator was hostile.
        let shared: &'a Self = unsafe { &*ptr.cast::<Self>() };
        let h = &shared.header;
        // SYNC POINT with the Release store of `magic` in `create`.
        match h.magic.load(Ordering::Acquire) {
            SHARED_RING_MAGIC => {}
            0 => return Err(AttachError::NotInitialized),
            m => return Err(AttachError::BadMagic(m)),
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != SHARED_RING_VERSION {
            return Err(AttachError::BadVersion(version));
        }
        let found = h.capacity.load(Ordering::Relaxed);
        if found != cap {
            return Err(AttachError::WrongCapacity {
                expected: cap,
                found,
            });
        }
        let (s, a) = (
            h.elem_size.load(Ordering::Relaxed),
            h.elem_align.load(Ordering::Relaxed),
        );
        if (s, a) != (size, align) {
            return Err(AttachError::WrongElement { size: s, align: a });
        }
        let found = h.tag.load(Ordering::Relaxed);
        if found != tag {
            return Err(AttachError::WrongTag {
                expected: tag,
                found,
            });
        }
        Ok(shared)
    }

    /// The ring. Take an end with the `unsafe` [`Ring::producer`] or
    /// [`Ring::consumer`] (one of each across all processes).
    pub fn ring(&self) -> &Ring<T, N> {
        &self.ring
    }
}

#[cfg(all(test, feature = "alloc", not(loom)))]
mod test {
    extern crate std;
    use std::alloc::{Layout, alloc_zeroed, dealloc};

    use super::*;

    type R = SharedRing<u64, 64>;

    /// A heap region standing in for a mapping.
    struct Region {
        ptr: *mut u8,
        layout: Layout,
    }

    impl Region {
        fn new(len: usize) -> Self {
            let layout = Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: non-zero size.
            let ptr = unsafe { alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            Region { ptr, layout }
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr, self.layout) }
        }
    }

    #[test]
    fn create_then_attach_and_use_both_ends() {
        let m = Region::new(R::SIZE);
        // SAFETY: the region is ours, mapped and large enough for the test's life.
        let a = unsafe { R::create(m.ptr, R::SIZE, 7) }.unwrap();
        // SAFETY: as above.
        let b = unsafe { R::attach(m.ptr, R::SIZE, 7) }.unwrap();
        // SAFETY: one producer, one consumer.
        let (mut p, mut c) = unsafe { (a.ring().producer(), b.ring().consumer()) };
        p.push_slice(&[1, 2, 3]);
        let mut out = [0; 3];
        assert_eq!(c.pop_slice(&mut out), 3);
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn attach_refuses_what_it_should() {
        let m = Region::new(R::SIZE + 4096);
        // SAFETY: the region is ours and mapped; every call below stays inside it.
        unsafe {
            assert_eq!(
                R::attach(m.ptr, R::SIZE, 7).unwrap_err(),
                AttachError::NotInitialized
            );
            assert_eq!(
                R::attach(m.ptr, R::SIZE - 1, 7).unwrap_err(),
                AttachError::TooSmall {
                    need: R::SIZE,
                    got: R::SIZE - 1
                }
            );
            assert_eq!(
                R::create(m.ptr.add(8), R::SIZE, 7).unwrap_err(),
                AttachError::Misaligned { align: R::ALIGN }
            );
            R::create(m.ptr, R::SIZE, 7).unwrap();
            assert_eq!(
                R::attach(m.ptr, R::SIZE, 8).unwrap_err(),
                AttachError::WrongTag {
                    expected: 8,
                    found: 7
                }
            );
            assert_eq!(
                SharedRing::<u64, 32>::attach(m.ptr, R::SIZE, 7).unwrap_err(),
                AttachError::WrongCapacity {
                    expected: 32,
                    found: 64
                }
            );
            assert_eq!(
                SharedRing::<u32, 64>::attach(m.ptr, R::SIZE, 7).unwrap_err(),
                AttachError::WrongElement { size: 8, align: 8 }
            );
            m.ptr.write(0xEE); // corrupt the magic
            assert!(matches!(
                R::attach(m.ptr, R::SIZE, 7),
                Err(AttachError::BadMagic(_))
            ));
        }
    }
}
