//! The unit tests' global allocator: the system allocator, counting the
//! allocations of the thread that asked ([`counting`]), so a test can
//! assert that a data path allocates nothing while the other tests of the
//! binary allocate freely. Forwarding adds nothing else.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

struct Counting;

thread_local! {
    /// `Some(n)`: this thread counts, `n` so far.
    static COUNT: Cell<Option<u64>> = const { Cell::new(None) };
    /// While counting: bytes allocated minus bytes freed by this thread.
    static BYTES: Cell<i64> = const { Cell::new(0) };
}

fn count() {
    let _ = COUNT.try_with(|c| {
        if let Some(n) = c.get() {
            c.set(Some(n + 1));
        }
    });
}

/// Adds `delta` bytes to this thread's balance while it counts.
fn weigh(delta: i64) {
    let counting = COUNT.try_with(|c| c.get().is_some()).unwrap_or(false);
    if counting {
        let _ = BYTES.try_with(|b| b.set(b.get() + delta));
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only
// counts allocations and reallocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        weigh(l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        weigh(l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        weigh(-(l.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        weigh(n as i64 - l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` on this thread and returns its result and the allocations it
/// made.
pub(crate) fn counting<R>(f: impl FnOnce() -> R) -> (R, u64) {
    COUNT.with(|c| c.set(Some(0)));
    let r = f();
    let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
    (r, n)
}

/// Runs `f` on this thread and returns its result and the heap bytes it
/// left allocated (allocated minus freed, by this thread, while in `f`):
/// what the value it returns holds, when it frees nothing older.
pub(crate) fn held_bytes<R>(f: impl FnOnce() -> R) -> (R, i64) {
    BYTES.with(|b| b.set(0));
    let (r, _) = counting(f);
    (r, BYTES.with(|b| b.replace(0)))
}

#[test]
fn held_bytes_are_what_the_result_keeps() {
    let (v, b) = held_bytes(|| {
        drop(vec![0u8; 4096]);
        Vec::<u8>::with_capacity(1000)
    });
    assert_eq!((v.capacity(), b), (1000, 1000));
}

#[test]
fn allocations_are_counted_while_counting_only() {
    let (v, n) = counting(|| Vec::<u8>::with_capacity(8));
    assert_eq!((v.capacity() >= 8, n), (true, 1));
    let ((), n) = counting(|| ());
    assert_eq!(n, 0);
    drop(Vec::<u8>::with_capacity(8));
    assert_eq!(COUNT.with(Cell::get), None, "not counting outside");
}
