//! The symmetric heap: the collective [`Context::alloc`] and
//! [`Context::free`], their allocator, and typed handles.
//!
//! Every PE runs the same sequence of collective `alloc`/`free` calls, and the
//! allocator is deterministic (first fit over an ordered free list, coalescing
//! on free), so a block has the same offset on every PE: that offset *is* the
//! symmetric address.

use std::{collections::BTreeMap, marker::PhantomData};

use switchyard_core::transport::Transport;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use super::{Context, Error, Result};

/// A typed symmetric array: `len` elements of `T` at the same offset of every
/// PE's heap. Plain data only (zerocopy's `FromBytes + IntoBytes + Immutable`),
/// so any bytes a peer writes are a valid `T`. Indexing is checked by every
/// operation, so a handle cannot reach outside its block.
#[derive(Debug)]
pub struct Sym<T> {
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) owner: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Sym<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Sym<T> {}

impl<T> Sym<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset in the symmetric heap (the symmetric address).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub(crate) fn new(offset: u64, len: usize, owner: u64) -> Sym<T> {
        Sym {
            offset,
            len,
            owner,
            _t: PhantomData,
        }
    }
}

/// Element types a symmetric handle can hold.
pub trait Plain: FromBytes + IntoBytes + Immutable + Copy + 'static {}

impl<T: FromBytes + IntoBytes + Immutable + Copy + 'static> Plain for T {}

/// Deterministic first-fit allocator over `[base, end)`.
#[derive(Debug)]
pub(crate) struct SymAllocator {
    /// Free blocks: offset → length.
    free: BTreeMap<u64, u64>,
    /// Allocated blocks: offset → length.
    used: BTreeMap<u64, u64>,
}

/// Alignment of every block: a cache line, so blocks never share one.
pub(crate) const BLOCK_ALIGN: u64 = 64;

impl SymAllocator {
    pub(crate) fn new(base: u64, end: u64) -> SymAllocator {
        let base = base.next_multiple_of(BLOCK_ALIGN);
        let mut free = BTreeMap::new();
        if end > base {
            free.insert(base, end - base);
        }
        SymAllocator {
            free,
            used: BTreeMap::new(),
        }
    }

    /// Bytes still free (not necessarily contiguous).
    pub(crate) fn available(&self) -> u64 {
        self.free.values().sum()
    }

    /// Reserves `bytes` (rounded up to [`BLOCK_ALIGN`], at least one block).
    pub(crate) fn alloc(&mut self, bytes: u64) -> Option<u64> {
        let size = bytes.max(1).checked_next_multiple_of(BLOCK_ALIGN)?;
        let (&off, &len) = self.free.iter().find(|&(_, &len)| len >= size)?;
        self.free.remove(&off);
        if len > size {
            self.free.insert(off + size, len - size);
        }
        self.used.insert(off, size);
        Some(off)
    }

    /// Reserves `bytes` (rounded up to [`BLOCK_ALIGN`]) at an offset that is
    /// a multiple of `align` (a power of two, at least [`BLOCK_ALIGN`]): first
    /// fit, the gap before the block stays free.
    pub(crate) fn alloc_aligned(&mut self, bytes: u64, align: u64) -> Option<u64> {
        if align <= BLOCK_ALIGN {
            return self.alloc(bytes);
        }
        let size = bytes.max(1).checked_next_multiple_of(BLOCK_ALIGN)?;
        let (&off, &len, start) = self.free.iter().find_map(|(off, len)| {
            let start = off.checked_next_multiple_of(align)?;
            let end = start.checked_add(size)?;
            (end <= off + len).then_some((off, len, start))
        })?;
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if off + len > start + size {
            self.free.insert(start + size, off + len - start - size);
        }
        self.used.insert(start, size);
        Some(start)
    }

    /// The length of the block at `off`, if one starts there.
    pub(crate) fn block_len(&self, off: u64) -> Option<u64> {
        self.used.get(&off).copied()
    }

    /// The allocated block holding byte `off`: its offset and length.
    pub(crate) fn block_of(&self, off: u64) -> Option<(u64, u64)> {
        let (&start, &len) = self.used.range(..=off).next_back()?;
        (off - start < len).then_some((start, len))
    }

    /// Releases the block at `off`; `false` if there is none.
    pub(crate) fn free(&mut self, off: u64) -> bool {
        let Some(mut size) = self.used.remove(&off) else {
            return false;
        };
        let mut start = off;
        // Coalesce with the next free block...
        if let Some(next) = self.free.remove(&(off + size)) {
            size += next;
        }
        // ...and with the previous one.
        if let Some((&p, &plen)) = self.free.range(..off).next_back()
            && p + plen == off
        {
            self.free.remove(&p);
            start = p;
            size += plen;
        }
        self.free.insert(start, size);
        true
    }
}

impl Context {
    /// Collectively allocates `len` elements of `T`, zeroed, at the same
    /// symmetric address on every PE. Every PE must make the same sequence of
    /// `alloc`/`free` calls. Ends with a barrier, so no PE can put into the
    /// block before every PE has it.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`]; barrier errors.
    pub fn alloc<T: Plain>(&mut self, len: usize) -> Result<Sym<T>> {
        let (off, bytes) = {
            let mut a = super::pe::lock(&self.pe.alloc);
            let oom = |requested, a: &SymAllocator| Error::OutOfMemory {
                requested,
                available: a.available(),
            };
            if core::mem::align_of::<T>() as u64 > BLOCK_ALIGN {
                return Err(oom(u64::MAX, &a));
            }
            let bytes = (len as u64)
                .checked_mul(core::mem::size_of::<T>() as u64)
                .ok_or_else(|| oom(u64::MAX, &a))?;
            let off = a.alloc(bytes).ok_or_else(|| oom(bytes, &a))?;
            (off, bytes)
        };
        // SAFETY-free zeroing: through the driver, like any local put.
        let zeros = [0u8; 4096];
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min(zeros.len() as u64);
            self.shm
                .put(self.me, off + done, &zeros[..n as usize], self.sel_ctx())?;
            done += n;
        }
        self.barrier_all()?;
        Ok(Sym::new(off, len, self.owner))
    }

    /// Collectively frees a block (same order on every PE). Starts with a
    /// barrier, so no PE still uses it.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignHandle`] for a handle not from this context or freed.
    pub fn free<T>(&mut self, sym: Sym<T>) -> Result<()> {
        if sym.owner != self.owner {
            return Err(Error::ForeignHandle);
        }
        self.barrier_all()?;
        if super::pe::lock(&self.pe.alloc).free(sym.offset) {
            Ok(())
        } else {
            Err(Error::ForeignHandle)
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn first_fit_and_coalescing() {
        let mut a = SymAllocator::new(100, 100 + 64 * 10 + 28);
        let base = 128;
        assert_eq!(a.available(), 64 * 10);
        let x = a.alloc(1).unwrap();
        let y = a.alloc(65).unwrap();
        let z = a.alloc(64).unwrap();
        assert_eq!((x, y, z), (base, base + 64, base + 192));
        assert!(a.alloc(64 * 8).is_none());
        assert!(a.free(y));
        assert!(!a.free(y), "double free refused");
        assert_eq!(a.alloc(64).unwrap(), base + 64, "first fit reuses the hole");
        assert!(a.free(x) && a.free(base + 64) && a.free(z));
        assert_eq!(a.available(), 64 * 10);
        assert_eq!(a.alloc(64 * 10).unwrap(), base, "fully coalesced");
        assert!(a.alloc(u64::MAX).is_none());
    }

    #[test]
    fn the_block_holding_an_offset() {
        let mut a = SymAllocator::new(0, 1 << 16);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(64).unwrap();
        assert_eq!(a.block_of(x), Some((x, 128)));
        assert_eq!(a.block_of(x + 127), Some((x, 128)));
        assert_eq!(a.block_of(y), Some((y, 64)));
        assert_eq!(a.block_of(y + 64), None, "free space after the last block");
        assert!(a.free(x));
        assert_eq!(a.block_of(x + 5), None, "a freed block");
    }

    #[test]
    fn aligned_blocks_leave_the_gap_free() {
        let mut a = SymAllocator::new(0, 1 << 16);
        assert_eq!(a.alloc(64), Some(0));
        let x = a.alloc_aligned(100, 4096).unwrap();
        assert_eq!(x, 4096);
        assert_eq!(a.block_len(x), Some(128));
        assert_eq!(a.alloc(64), Some(64), "the gap before it is still free");
        assert!(a.alloc_aligned(1, 1 << 20).is_none());
        assert!(a.free(x));
        assert_eq!(a.block_len(x), None);
        assert_eq!(a.available(), (1 << 16) - 128);
    }

    #[test]
    fn same_calls_same_offsets() {
        // Determinism is what makes the offsets symmetric.
        let run = || {
            let mut a = SymAllocator::new(0, 1 << 20);
            let v: Vec<_> = (1..50u64).map(|i| a.alloc(i * 37).unwrap()).collect();
            for o in v.iter().step_by(3) {
                a.free(*o);
            }
            (1..20u64)
                .map(|i| a.alloc(i * 11).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
