//! The C API's data path does not allocate: after `shmem_init`, typed and
//! untyped puts and gets, `p`/`g`, strided transfers, atomics (bitwise too),
//! put with signal, waits, tests, locks, fence and quiet, called through their
//! C entry points in a one-PE job, make no allocation (a counting global
//! allocator). `harness = false`: one thread, as `shmem_init` requires.

use core::ffi::{c_int, c_long, c_void};
use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU64, Ordering},
};

use switchyard_shmem::{amo::*, lock::*, mem::*, order::*, rma::*, setup::*, signal::*, sync::*};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    // A one-PE job whatever the environment says.
    for (k, _) in
        std::env::vars().filter(|(k, _)| k.starts_with("SWITCHYARD_") || k.starts_with("SHMEM_"))
    {
        // SAFETY: one thread; nothing reads the environment meanwhile.
        unsafe { std::env::remove_var(k) };
    }
    // SAFETY: as above.
    unsafe { std::env::set_var("SWITCHYARD_HEAP_SIZE", "1M") };
    shmem_init();
    let words = shmem_calloc(64, 8).cast::<u64>();
    let bytes = shmem_malloc(4096).cast::<u8>();
    let lock = shmem_calloc(1, 8).cast::<c_long>();
    assert!(!words.is_null() && !bytes.is_null() && !lock.is_null());
    let src = [7u8; 1024];
    let mut dst = [0u8; 1024];
    let mut got = [0u64; 8];
    let mut idx = [0usize; 8];
    let mut fetched = 0u64;
    // SAFETY: every pointer is a live symmetric block or a local buffer of
    // the stated size; one PE, so PE 0 is this one.
    unsafe {
        // Warm up once (first-use paths), then count.
        shmem_putmem(bytes.cast(), src.as_ptr().cast(), 1024, 0);
        let before = ALLOCS.load(Ordering::Relaxed);
        for i in 0..5_000u64 {
            let n = (i % 1024) as usize;
            shmem_putmem(
                bytes.add(i as usize % 3000).cast(),
                src.as_ptr().cast(),
                n,
                0,
            );
            shmem_getmem(dst.as_mut_ptr().cast(), bytes.cast::<c_void>(), 1024, 0);
            shmem_uint64_put(words, [i].as_ptr(), 1, 0);
            shmem_uint64_get(got.as_mut_ptr(), words, 8, 0);
            shmem_uint64_p(words.add(5), i, 0);
            assert_eq!(shmem_uint64_g(words.add(5), 0), i);
            shmem_uint64_iput(words.add(16), got.as_ptr(), 2, 1, 4, 0);
            shmem_uint64_iget(got.as_mut_ptr(), words.add(16), 1, 2, 4, 0);
            shmem_put64_nbi(words.add(32).cast(), got.as_ptr().cast(), 8, 0);
            shmem_putmem_nbi(bytes.add(2048).cast(), bytes.cast::<c_void>(), 512, 0);
            shmem_getmem_nbi(
                bytes.add(1024).cast(),
                bytes.add(2048).cast::<c_void>(),
                256,
                0,
            );
            shmem_uint64_atomic_fetch_add(words.add(1), 1, 0);
            shmem_uint64_atomic_compare_swap(words.add(2), i, i + 1, 0);
            shmem_uint64_atomic_swap(words.add(3), i, 0);
            shmem_uint64_atomic_set(words.add(4), i, 0);
            shmem_uint64_atomic_fetch(words.add(4), 0);
            shmem_uint64_atomic_fetch_xor(words.add(6), 1, 0);
            shmem_uint64_atomic_fetch_add_nbi(&mut fetched, words.add(7), 1, 0);
            shmem_double_atomic_set(words.add(8).cast(), 1.5, 0);
            shmem_uint64_put_signal(
                words.add(40),
                got.as_ptr(),
                4,
                words.add(48),
                i,
                SHMEM_SIGNAL_SET,
                0,
            );
            shmem_signal_wait_until(words.add(48), SHMEM_CMP_EQ, i);
            shmem_uint64_wait_until(words, SHMEM_CMP_EQ, i);
            shmem_uint64_wait_until_some(
                words.add(1),
                4,
                idx.as_mut_ptr(),
                core::ptr::null(),
                SHMEM_CMP_GE,
                0,
            );
            let _ = shmem_uint64_test_any(words, 8, core::ptr::null(), SHMEM_CMP_NE, 0);
            shmem_set_lock(lock);
            shmem_clear_lock(lock);
            shmem_fence();
            shmem_quiet();
        }
        let after = ALLOCS.load(Ordering::Relaxed);
        assert_eq!(
            after - before,
            0,
            "{} allocations on the C data path",
            after - before
        );
        assert_eq!(shmem_uint64_atomic_fetch(words.add(1), 0), 5_000);
        assert_eq!(fetched, 4_999);
        let _: c_int = shmem_my_pe();
        shmem_free(lock.cast());
        shmem_free(bytes.cast());
        shmem_free(words.cast());
    }
    shmem_finalize();
    println!("no_alloc: the C data path made no allocation in 5000 rounds");
}
