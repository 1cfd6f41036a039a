//! Address-based access for foreign-language front ends (the OpenSHMEM C API
//! in `shim-std/capi`): the local heap mapping and handles made from a byte
//! offset, checked against the heap, so a caller holding only a pointer can
//! use the typed operations; plus what such a front end needs beyond the
//! typed API (bitwise atomics, aligned and resized blocks, waits on a caller's
//! own condition, same-node peers' heaps).

use switchyard_core::{transport::Transport, wire::AtomicKind};

use super::{
    AtomicInt, BLOCK_ALIGN, Context, Error, Plain, Result, Sym, SymmetricData,
    wait::{Limit, Watch},
};

/// A bitwise atomic operation ([`Context::fetch_bitwise`], [`Context::bitwise`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bitwise {
    /// `old & operand`
    And,
    /// `old | operand`
    Or,
    /// `old ^ operand`
    Xor,
}

impl Bitwise {
    /// The atomic kind (also the wire encoding).
    #[inline]
    const fn kind(self) -> AtomicKind {
        match self {
            Bitwise::And => AtomicKind::FetchAnd,
            Bitwise::Or => AtomicKind::FetchOr,
            Bitwise::Xor => AtomicKind::FetchXor,
        }
    }
}

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

    /// The heap mapping of a same-node peer (this PE's own for `pe ==
    /// my_pe()`): base address and length. `None` when `pe` is not mapped here
    /// (another node, or not connected). Other PEs write it at any time.
    pub fn peer_heap(&self, pe: u32) -> Option<(*mut u8, u64)> {
        if pe == self.me {
            return Some(self.local_heap());
        }
        self.shm.peer_heap(pe)
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
            _ => Err(sym_out_of_bounds(offset, len, self.heap_len)),
        }
    }

    /// Atomically applies `op` with `value` to element `at` of `pe`'s copy of
    /// `sym` and returns the old value.
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn fetch_bitwise<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        op: Bitwise,
        value: T,
        pe: u32,
    ) -> Result<T> {
        self.atomic(sym, at, op.kind(), value, value, true, pe)
    }

    /// Atomically applies `op` with `value` to element `at` of `pe`'s copy of
    /// `sym` (OpenSHMEM's `shmem_atomic_and`, `_or`, `_xor`; complete at `pe`
    /// after [`Context::quiet`]). It waits for no reply, as
    /// [`Context::add`].
    ///
    /// # Errors
    ///
    /// As [`Context::put`].
    pub fn bitwise<T: AtomicInt>(
        &mut self,
        sym: &Sym<T>,
        at: usize,
        op: Bitwise,
        value: T,
        pe: u32,
    ) -> Result<()> {
        self.atomic(sym, at, op.kind(), value, value, false, pe)
            .map(|_| ())
    }

    /// Collectively allocates `bytes` aligned to `align` (a power of two;
    /// blocks are always aligned to at least 64), zeroed, like
    /// [`Context::alloc`]. Returns the block's heap offset.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] (also for an `align` that is not a power of
    /// two); barrier errors.
    pub fn alloc_bytes(&mut self, bytes: u64, align: u64) -> Result<u64> {
        let off = self.alloc_quiet(bytes, align)?;
        self.zero(off, bytes)?;
        self.barrier_all()?;
        Ok(off)
    }

    /// Collectively resizes the block at heap offset `off` to `bytes`: a new
    /// block (same alignment as the blocks of [`Context::alloc_bytes`] with
    /// `align`) holding the old contents up to the smaller size, the rest
    /// zeroed; the old block is freed. Starts with a barrier (nobody still
    /// writes the old block) and ends with one (nobody writes the new one
    /// before it is filled). Returns the new offset.
    ///
    /// # Errors
    ///
    /// [`Error::ForeignHandle`] when `off` is not a block;
    /// [`Error::OutOfMemory`] (the old block is kept); barrier errors.
    pub fn realloc_bytes(&mut self, off: u64, bytes: u64, align: u64) -> Result<u64> {
        let old = self
            .allocator()
            .block_len(off)
            .ok_or(Error::ForeignHandle)?;
        self.barrier_all()?;
        let new = self.alloc_quiet(bytes, align)?;
        let keep = old.min(bytes);
        // Both blocks are distinct (the old one is still allocated) and no
        // peer writes either between the two barriers.
        let mut done = 0u64;
        while done < keep {
            let n = (keep - done).min(1 << 30) as u32;
            self.shm
                .put_from_heap(self.me, new + done, off + done, n, self.sel_ctx())?;
            done += u64::from(n);
        }
        self.quiet()?;
        self.zero(new + keep, bytes.saturating_sub(keep))?;
        self.allocator().free(off);
        self.barrier_all()?;
        Ok(new)
    }

    /// The allocated block holding heap byte `off`: its offset and length in
    /// bytes (a multiple of 64: allocations are rounded up). `None` when no
    /// block holds it: free heap space, the reserved area, the symmetric
    /// global variables.
    pub fn block_of(&self, off: u64) -> Option<(u64, u64)> {
        self.allocator().block_of(off)
    }

    /// Collectively frees the block at heap offset `off` (a barrier first).
    ///
    /// # Errors
    ///
    /// [`Error::ForeignHandle`] when `off` is not the start of a block.
    pub fn free_bytes(&mut self, off: u64) -> Result<()> {
        if self.allocator().block_len(off).is_none() {
            return Err(Error::ForeignHandle);
        }
        self.barrier_all()?;
        self.allocator().free(off);
        Ok(())
    }

    fn alloc_quiet(&mut self, bytes: u64, align: u64) -> Result<u64> {
        let oom = |available| Error::OutOfMemory {
            requested: bytes,
            available,
        };
        let mut a = self.allocator();
        if !align.is_power_of_two() {
            return Err(oom(a.available()));
        }
        a.alloc_aligned(bytes, align.max(BLOCK_ALIGN))
            .ok_or_else(|| oom(a.available()))
    }

    /// The PE's heap allocator (shared by its contexts; `alloc` and `free`
    /// are collective and rare).
    fn allocator(&self) -> std::sync::MutexGuard<'_, super::heap::SymAllocator> {
        super::pe::lock(&self.pe.alloc)
    }

    fn zero(&mut self, mut off: u64, bytes: u64) -> Result<()> {
        let zeros = [0u8; 4096];
        let end = off + bytes;
        while off < end {
            let n = (end - off).min(zeros.len() as u64);
            self.shm
                .put(self.me, off, &zeros[..n as usize], self.sel_ctx())?;
            off += n;
        }
        Ok(())
    }

    /// Waits until `ready` returns true, making progress between calls (it
    /// may read the own heap, or run operations on peers through the context
    /// it is given). Lasts as long as the application takes while the PEs
    /// are alive (no op timeout: the operations `ready` runs on peers have
    /// their own); fails when a PE dies.
    ///
    /// # Errors
    ///
    /// [`Error::PeerDead`] naming `what`, or the error `ready` returns.
    pub fn wait_for(
        &mut self,
        what: &'static str,
        ready: impl FnMut(&mut Context) -> Result<bool>,
    ) -> Result<()> {
        // Like every call: the TCP driver goes back to the progress thread,
        // which acks the peers' operations while the application is out.
        self.call().wait_on(what, Watch::Any, Limit::Peers, ready)
    }

    /// [`Context::wait_for`] watching one PE: ends with [`Error::PeerDead`]
    /// only when `pe` dies (the channels' waits).
    pub(crate) fn wait_for_peer(
        &mut self,
        what: &'static str,
        pe: u32,
        ready: impl FnMut(&mut Context) -> Result<bool>,
    ) -> Result<()> {
        self.call()
            .wait_on(what, Watch::Peer(pe), Limit::Peers, ready)
    }

    /// The id the PE's symmetric handles carry (the same in every context
    /// of the PE).
    pub(crate) fn owner_id(&self) -> u64 {
        self.owner
    }

    /// One progress step of every driver (what a `test` call does before it
    /// looks at its word, so data arriving over TCP is applied).
    pub fn progress(&mut self) {
        // Held past the call, the TCP driver would keep the progress thread
        // out while the application computes or sleeps, and a peer's quiet
        // would wait for this PE's next call for its ack.
        self.call().poll_once();
    }
}

/// The error of a [`Context::sym_at`] that does not fit the heap, built out of
/// line: filled in the caller, the error's fields shared the result's slots
/// with the handle's, and the C glue's 16-byte copy of the handle stalled on
/// the two 8-byte stores it could not forward from.
#[cold]
#[inline(never)]
fn sym_out_of_bounds(offset: u64, count: usize, heap_len: u64) -> Error {
    Error::OutOfBounds {
        at: usize::try_from(offset).unwrap_or(usize::MAX),
        count,
        len: usize::try_from(heap_len).unwrap_or(usize::MAX),
    }
}
