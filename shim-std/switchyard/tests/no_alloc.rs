//! After init, put, get, atomics, wait_until, fence and quiet do not allocate:
//! a counting global allocator around a one-PE job (no launcher needed).
//! Only the test thread's allocations are counted (the test harness's main
//! thread allocates meanwhile).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU64, Ordering},
};

use switchyard::context::{Cmp, Context};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the thread whose allocations count.
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTED.try_with(std::cell::Cell::get).unwrap_or(false) {
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

#[test]
fn data_path_does_not_allocate() {
    // A one-PE job whatever the environment says.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SWITCHYARD_")) {
        // SAFETY: this binary's only test; no other thread reads the
        // environment while it runs.
        unsafe { std::env::remove_var(k) };
    }
    // SAFETY: as above, no other thread reads the environment.
    unsafe { std::env::set_var("SWITCHYARD_HEAP_SIZE", "1M") };
    let mut ctx = Context::from_env().expect("context");
    let a = ctx.alloc::<u64>(64).expect("alloc");
    let b = ctx.alloc::<u8>(4096).expect("alloc");
    let src = [7u8; 1024];
    let mut dst = [0u8; 1024];
    let mut words = [0u64; 8];
    // Warm up once (first-use paths), then count.
    ctx.put(&b, 0, &src, 0).expect("put");
    COUNTED.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..10_000u64 {
        ctx.put(&b, (i % 3000) as usize, &src[..(i % 1024) as usize], 0)
            .expect("put");
        ctx.put(&a, 0, &[i], 0).expect("put");
        ctx.get(&b, 0, &mut dst, 0).expect("get");
        ctx.get(&a, 0, &mut words, 0).expect("get");
        ctx.fetch_add(&a, 1, 1, 0).expect("fetch_add");
        ctx.compare_swap(&a, 2, i, i + 1, 0).expect("cswap");
        ctx.swap(&a, 3, i, 0).expect("swap");
        ctx.set(&a, 4, i, 0).expect("set");
        ctx.fetch(&a, 4, 0).expect("fetch");
        ctx.put_nbi(&b, 2048, &b, 0, 1024, 0).expect("put_nbi");
        ctx.get_nbi(&b, 1024, &b, 2048, 512, 0).expect("get_nbi");
        ctx.fence().expect("fence");
        ctx.quiet().expect("quiet");
        ctx.wait_until(&a, 0, Cmp::Eq, i).expect("wait_until");
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    COUNTED.with(|c| c.set(false));
    assert_eq!(
        after - before,
        0,
        "{} allocations on the data path",
        after - before
    );
    assert_eq!(ctx.fetch(&a, 1, 0).expect("fetch"), 10_000);
    // 11 routed operations per iteration (fence, quiet and wait_until are local).
    assert_eq!(
        ctx.stats().ops[0],
        11 * 10_000 + 1 + 1,
        "every op went through select (shm)"
    );
    ctx.finalize().expect("finalize");
}
