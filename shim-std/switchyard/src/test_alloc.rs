//! The unit tests' global allocator: the system allocator, counting the
//! allocations of threads that enrolled ([`count_here`]), so a test can
//! assert that a data path allocates nothing on its PE threads while the
//! other tests of the binary allocate freely. Each thread has its own
//! count ([`allocations`] reads the caller's), so two tests counting at
//! once cannot see each other's allocations. Forwarding adds nothing
//! else.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

struct Counting;

thread_local! {
    /// Set on the threads whose allocations count.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    /// This thread's allocations while it was enrolled.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only
// counts allocations and reallocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Whether this thread's allocations count from now on.
pub(crate) fn count_here(on: bool) {
    COUNTED.with(|c| c.set(on));
}

/// Allocations counted so far on this thread.
pub(crate) fn allocations() -> u64 {
    ALLOCS.try_with(Cell::get).unwrap_or(0)
}
