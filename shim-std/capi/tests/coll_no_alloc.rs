//! The collectives' data path does not allocate: in a one-PE job, team
//! sync, broadcast, collect, fcollect, alltoall(s), reductions and the
//! active-set forms, called through their C entry points, make no
//! allocation on the calling thread (a counting global allocator that counts
//! only while this test's thread is measuring). With one PE the algorithms
//! run their local paths: the entry points' checks, the link groups, the
//! stack buffers and the local copies.

use core::{
    cell::Cell,
    ffi::{c_long, c_void},
};
use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU64, Ordering},
};

use switchyard_shmem::{
    coll::api::*,
    mem::{shmem_calloc, shmem_malloc},
    setup::shmem_init,
    team::{TeamHandle, shmem_sync_all, shmem_team_sync},
};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if MEASURING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WORLD: TeamHandle = 0x5E7A_0000 as TeamHandle;

#[test]
fn collectives_allocate_nothing() {
    // A one-PE job whatever the environment says.
    for (k, _) in
        std::env::vars().filter(|(k, _)| k.starts_with("SWITCHYARD_") || k.starts_with("SHMEM_"))
    {
        // SAFETY: this test binary has this one test; nothing else reads
        // the environment meanwhile.
        unsafe { std::env::remove_var(k) };
    }
    // SAFETY: as above.
    unsafe { std::env::set_var("SWITCHYARD_HEAP_SIZE", "16M") };
    shmem_init();
    const N: usize = 5000;
    let src = shmem_malloc(N * 16);
    let dst = shmem_malloc(N * 16);
    let wrk = shmem_malloc(N * 16);
    let psync = shmem_calloc(SYNC_SIZE, 8).cast::<c_long>();
    assert!(!src.is_null() && !dst.is_null() && !wrk.is_null() && !psync.is_null());
    let round = |i: usize| {
        let n = 1 + i % N;
        let (s, d): (*const c_void, *mut c_void) = (src, dst);
        assert_eq!(shmem_team_sync(WORLD), 0);
        shmem_sync_all();
        assert_eq!(shmem_long_broadcast(WORLD, d, s, n, 0), 0);
        assert_eq!(shmem_int_collect(WORLD, d, s, n), 0);
        assert_eq!(shmem_double_fcollect(WORLD, d, s, n), 0);
        assert_eq!(shmem_char_alltoall(WORLD, d, s, n), 0);
        assert_eq!(shmem_int_alltoalls(WORLD, d, s, 2, 1, n / 2), 0);
        assert_eq!(shmem_int_sum_reduce(WORLD, d, s, n), 0);
        assert_eq!(shmem_double_max_reduce(WORLD, d, d, n), 0);
        assert_eq!(shmem_complexd_prod_reduce(WORLD, d, s, n / 2), 0);
        assert_eq!(shmem_uint64_xor_reduce(WORLD, d, s, n), 0);
        shmem_barrier(0, 0, 1, psync);
        shmem_broadcast64(d, s, n, 0, 0, 0, 1, psync);
        shmem_collect32(d, s, n, 0, 0, 1, psync);
        shmem_fcollect64(d, s, n, 0, 0, 1, psync);
        shmem_alltoall32(d, s, n, 0, 0, 1, psync);
        shmem_long_sum_to_all(d, s, n as i32, 0, 0, 1, wrk, psync);
    };
    round(0); // first-use paths
    // The counter counts this thread's allocations.
    MEASURING.with(|m| m.set(true));
    drop(std::hint::black_box(vec![1u8; 8]));
    MEASURING.with(|m| m.set(false));
    assert_eq!(
        ALLOCS.swap(0, Ordering::Relaxed),
        1,
        "the counter missed an allocation"
    );
    MEASURING.with(|m| m.set(true));
    for i in 0..500 {
        round(i * 37);
    }
    MEASURING.with(|m| m.set(false));
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "the collectives allocated on the data path"
    );
}
