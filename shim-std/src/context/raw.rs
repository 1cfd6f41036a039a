//! Address-based access for foreign-language front ends (the OpenSHMEM C API
//! in `shim-std/capi`): the local heap mapping and handles made from a byte
//! offset, checked against the heap, so a caller holding only a pointer can
//! use the typed operations.

use super::{Context, Error, Plain, Result, Sym, SymmetricData};

impl Context {
    /// This PE's own heap mapping: its base address and length in bytes. The
    /// symmetric address of a byte is its offset from this base, the same on
    /// every PE. Other PEs write it at any time: read through atomics or
    /// [`Context::read_local`], never through references that assume no writer.
    pub fn local_heap(&self) -> (*mut u8, u64) {
        self.shm.local_heap()
    }

    /// Where the symmetric global variables are in this process and in the
    /// heap, when [`Setup::symmetric_data`](super::Setup::symmetric_data)
    /// gave them at init.
    pub fn symmetric_data(&self) -> Option<SymmetricData> {
        self.data
    }

    /// A handle for `len` elements of `T` at byte `offset` of the heap.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`] when the range is not inside the heap or
    /// `offset` is not aligned for `T`.
    pub fn sym_at<T: Plain>(&self, offset: u64, len: usize) -> Result<Sym<T>> {
        let size = core::mem::size_of::<T>() as u64;
        let align = core::mem::align_of::<T>() as u64;
        let end = (len as u64)
            .checked_mul(size)
            .and_then(|b| b.checked_add(offset));
        match end {
            Some(end) if end <= self.heap_len && offset.is_multiple_of(align) => {
                Ok(Sym::new(offset, len, self.owner))
            }
            _ => Err(Error::OutOfBounds {
                at: usize::try_from(offset).unwrap_or(usize::MAX),
                count: len,
                len: usize::try_from(self.heap_len).unwrap_or(usize::MAX),
            }),
        }
    }
}
