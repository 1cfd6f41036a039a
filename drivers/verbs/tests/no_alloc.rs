//! After connect, put, put_from_heap, get_into_heap, get, atomics (native
//! and emulated), fence, quiet, progress and the backlog report do not
//! allocate, at the initiator nor at the target (whose progress polls the
//! receipts of the puts and re-posts receives): a counting global allocator
//! around two drivers on the fake HCA. A warm-up round first lets the fake's own
//! completion queues reach their size. One test in this binary, so no other
//! test's allocations are counted.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU64, Ordering},
};

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, Instant, Transport},
    wire::AtomicKind,
};
use switchyard_verbs::{VerbsDriver, fake::Fabric, params::VerbsConfig};

struct Counting;

thread_local! {
    /// Set on the test thread while it counts (the harness's main thread
    /// allocates meanwhile; its allocations are not the data path's).
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn counting() -> bool {
    COUNTING.try_with(std::cell::Cell::get).unwrap_or(false)
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CX: ContextId = ContextId { pe: 0, seq: 1 };

fn round(a: &mut VerbsDriver, b: &mut VerbsDriver, buf: &[u8], out: &mut [u8]) {
    let ops = [
        (AtomicKind::FetchAdd, AtomicWidth::W64),
        (AtomicKind::CompareSwap, AtomicWidth::W64),
        (AtomicKind::Swap, AtomicWidth::W32),
        (AtomicKind::Set, AtomicWidth::W64),
    ];
    for i in 0..64u64 {
        a.put(1, (i * 1024) % 200_000, buf, CX).expect("put");
    }
    assert!(a.backlog(1).expect("backlog").wrs > 0);
    a.put_from_heap(1, 300_000, 0, 4096, CX)
        .expect("put_from_heap");
    a.get_into_heap(1, 300_000, 8192, 4096, CX)
        .expect("get_into_heap");
    a.fence().expect("fence");
    a.put(1, 70_000, &buf[..8], CX).expect("flag");
    while !a.quiet_poll().expect("quiet") {}
    let t = a.get_start(1, 1024, out.len() as u32, CX).expect("get");
    while !a.get_poll(&t, out).expect("get poll") {}
    for (kind, width) in ops {
        let op = AtomicOp {
            kind,
            width,
            operand: 3,
            compare: 0,
            fetch: true,
        };
        let t = a.atomic_start(1, 400_000, op, CX).expect("atomic");
        if op.is_fetching() {
            while a.atomic_poll(&t).expect("atomic poll").is_none() {}
        }
    }
    while !a.quiet_poll().expect("quiet") {}
    assert_eq!(a.backlog(1).map(|b| b.wrs), Some(0), "quiet: no backlog");
    for _ in 0..300 {
        a.progress(Instant::default());
        b.progress(Instant::default());
    }
}

#[test]
fn data_path_does_not_allocate_after_connect() {
    const HEAP: u64 = 1 << 20;
    let f = Fabric::new();
    let cfg = VerbsConfig::default;
    let mut a = VerbsDriver::fake_with_owned_heap(cfg(), 0, 2, 3, HEAP, &f).expect("driver 0");
    let mut b = VerbsDriver::fake_with_owned_heap(cfg(), 1, 2, 3, HEAP, &f).expect("driver 1");
    a.set_peer_card(1, b.card_for(0).expect("card"))
        .expect("peer");
    b.set_peer_card(0, a.card_for(1).expect("card"))
        .expect("peer");
    b.connect(0).expect("connect");
    a.connect(1).expect("connect");
    while a.poll_event().is_some() {}
    let buf = vec![7u8; 300];
    let mut out = vec![0u8; 4096];
    round(&mut a, &mut b, &buf, &mut out); // warm-up: the fake's CQ grows here
    COUNTING.with(|c| c.set(true));
    for _ in 0..5 {
        round(&mut a, &mut b, &buf, &mut out);
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "allocations on the data path"
    );
    assert_eq!(out[..300], buf[..]);
    let s = b.stats();
    assert!(s.receipts >= 6 * 66, "the target saw the receipts: {s:?}");
    assert!(s.recv_reposts > 0, "and re-posted receives: {s:?}");
}
