//! Symmetric memory: `shmem_malloc`, `shmem_calloc`, `shmem_align`,
//! `shmem_realloc`, `shmem_free` and the deprecated `shmalloc` family.
//!
//! Every call is collective (the same sequence on every PE, which keeps the
//! blocks at the same offsets everywhere) and ends with a barrier. Blocks are
//! zeroed, 64-byte aligned and rounded up to 64 bytes (so at least 8-byte
//! granularity). `shmem_malloc(0)` returns NULL. When the heap has no room
//! the allocating calls return NULL (the same on every PE: the allocator is
//! deterministic); `SHMEM_DEBUG` says why.

use core::ffi::c_void;

use switchyard::context::{Context, Error};

use crate::{setup, state};

fn ptr_at(ctx: &Context, off: u64) -> *mut c_void {
    let (base, _) = ctx.local_heap();
    // SAFETY: allocator offsets lie inside the heap mapping.
    unsafe { base.add(off as usize).cast() }
}

/// An allocation's result: the block, NULL when the heap is full, or the end
/// of the job for anything else.
fn block(ctx: &Context, call: &'static str, r: switchyard::context::Result<u64>) -> *mut c_void {
    match r {
        Ok(off) => ptr_at(ctx, off),
        Err(e @ Error::OutOfMemory { .. }) => {
            if setup::debug() {
                eprintln!("switchyard: debug: {call}: {e}");
            }
            core::ptr::null_mut()
        }
        Err(e) => state::fatal(call, format_args!("{e}")),
    }
}

fn alloc(call: &'static str, size: usize, align: usize) -> *mut c_void {
    state::with(call, |ctx| {
        if size == 0 {
            state::ok(call, ctx.barrier_all());
            return core::ptr::null_mut();
        }
        let r = ctx.alloc_bytes(size as u64, align as u64);
        block(ctx, call, r)
    })
}

/// The heap offset of a block start `ptr` (argument `arg`), or the end of
/// the job.
fn offset(ctx: &Context, call: &'static str, arg: &'static str, ptr: *mut c_void) -> u64 {
    state::sym::<u8>(ctx, call, arg, ptr.cast_const(), 0).offset()
}

fn not_a_block(call: &'static str, ptr: *mut c_void) -> ! {
    state::fatal(
        call,
        format_args!("ptr = {ptr:p} is not a block from shmem_malloc (or was freed already)"),
    )
}

/// `shmem_malloc`: `size` bytes of zeroed symmetric memory (collective).
#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    alloc("shmem_malloc", size, 64)
}

/// `shmem_malloc_with_hints`: as [`shmem_malloc`]; the hints
/// (`SHMEM_MALLOC_ATOMICS_REMOTE`, `SHMEM_MALLOC_SIGNAL_REMOTE`) change
/// nothing here.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc_with_hints(size: usize, _hints: core::ffi::c_long) -> *mut c_void {
    alloc("shmem_malloc_with_hints", size, 64)
}

/// `shmem_calloc`: `count * size` zeroed bytes (collective); an overflowing
/// product ends the job.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    const CALL: &str = "shmem_calloc";
    match count.checked_mul(size) {
        Some(n) => alloc(CALL, n, 64),
        None => state::fatal(
            CALL,
            format_args!("count = {count} times size = {size} overflows"),
        ),
    }
}

/// `shmem_align`: `size` bytes aligned to `alignment` (collective). A power
/// of two up to the heap size is served (see [`max_align`]); one larger
/// than the heap cannot be and gives NULL; anything else ends the job.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    aligned("shmem_align", alignment, size)
}

/// The largest alignment `shmem_align` gives on a heap of `heap` bytes: the
/// allocator aligns heap *offsets*, which are aligned addresses on every PE
/// up to the alignment of every PE's heap start
/// ([`heap_align`](switchyard::context::heap_align): the heap size rounded
/// up to a power of two, at least 2 MiB).
pub fn max_align(heap: u64) -> u64 {
    switchyard::context::heap_align(heap)
}

/// `shmem_align` and `shmemalign`: ends the job unless `alignment` is a
/// power of two; NULL (on every PE, after the barrier) when it is larger
/// than the heap.
fn aligned(call: &'static str, alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        state::fatal(
            call,
            format_args!("alignment = {alignment} is not a power of two"),
        );
    }
    let heap = state::heap_size();
    if alignment as u64 > max_align(heap) {
        if setup::debug() {
            eprintln!(
                "switchyard: debug: {call}: alignment = {alignment} is larger than the \
                 symmetric heap ({heap} bytes)"
            );
        }
        return alloc(call, 0, 64);
    }
    alloc(call, size, alignment)
}

/// `shmem_realloc`: resizes a block, keeping its contents up to the smaller
/// size (collective). NULL `ptr`: as `shmem_malloc`; `size` 0: as
/// `shmem_free`, returning NULL. When the heap has no room it returns NULL
/// and the old block stays.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    realloc("shmem_realloc", ptr, size)
}

fn realloc(call: &'static str, ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return alloc(call, size, 64);
    }
    if size == 0 {
        free(call, ptr);
        return core::ptr::null_mut();
    }
    state::with(call, |ctx| {
        let off = offset(ctx, call, "ptr", ptr);
        state::blocks_changed();
        match ctx.realloc_bytes(off, size as u64, 64) {
            Err(Error::ForeignHandle) => not_a_block(call, ptr),
            r => block(ctx, call, r),
        }
    })
}

fn free(call: &'static str, ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    state::with(call, |ctx| {
        let off = offset(ctx, call, "ptr", ptr);
        state::blocks_changed();
        match ctx.free_bytes(off) {
            Ok(()) => {}
            Err(Error::ForeignHandle) => not_a_block(call, ptr),
            Err(e) => state::fatal(call, format_args!("{e}")),
        }
    })
}

/// `shmem_free`: releases a block (collective; a barrier first). NULL does
/// nothing.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    free("shmem_free", ptr);
}

/// `shmalloc` (deprecated): [`shmem_malloc`].
#[unsafe(no_mangle)]
pub extern "C" fn shmalloc(size: usize) -> *mut c_void {
    alloc("shmalloc", size, 64)
}

/// `shfree` (deprecated): [`shmem_free`].
#[unsafe(no_mangle)]
pub extern "C" fn shfree(ptr: *mut c_void) {
    free("shfree", ptr);
}

/// `shrealloc` (deprecated): [`shmem_realloc`].
#[unsafe(no_mangle)]
pub extern "C" fn shrealloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    realloc("shrealloc", ptr, size)
}

/// `shmemalign` (deprecated): [`shmem_align`].
#[unsafe(no_mangle)]
pub extern "C" fn shmemalign(alignment: usize, size: usize) -> *mut c_void {
    aligned("shmemalign", alignment, size)
}
