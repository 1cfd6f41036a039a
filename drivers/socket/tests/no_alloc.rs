//! After connect, put, put_from_heap, get, atomics, quiet, progress and
//! backlog do not allocate, on either side: a counting global allocator around two drivers
//! over loopback (PE 1 progressing on its own thread). One test in this
//! binary, so no other test's allocations are counted.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, Instant, Transport},
    wire::AtomicKind,
};
use switchyard_socket::{Backlog, SocketDriver, TcpConfig};

struct Counting;

/// The counting window.
static COUNTING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the two PE threads: only theirs count (the test harness's
    /// main thread allocates meanwhile).
    static ENROLLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn counting() -> bool {
    COUNTING.load(Ordering::Relaxed) && ENROLLED.try_with(std::cell::Cell::get).unwrap_or(false)
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

fn now(t0: std::time::Instant) -> Instant {
    Instant::from_nanos(t0.elapsed().as_nanos() as u64)
}

fn cfg(me: u32) -> TcpConfig {
    TcpConfig {
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        window: 1 << 20,
        detection_window: Duration::from_secs(30),
        ..TcpConfig::default()
    }
}

#[test]
fn data_path_does_not_allocate_after_connect() {
    const HEAP: u64 = 1 << 20;
    let mut a = SocketDriver::with_owned_heap(cfg(0), HEAP).expect("driver 0");
    let mut b = SocketDriver::with_owned_heap(cfg(1), HEAP).expect("driver 1");
    let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
    a.set_peer(1, &lb, HEAP).expect("peer");
    b.set_peer(0, &la, HEAP).expect("peer");
    let t0 = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let pe1 = std::thread::spawn(move || {
        ENROLLED.with(|c| c.set(true));
        b.connect_all([0].into_iter(), now(t0), Duration::from_secs(10))
            .expect("connect");
        while !s.load(Ordering::Relaxed) {
            b.progress(now(t0));
        }
    });
    a.connect_all([1].into_iter(), now(t0), Duration::from_secs(10))
        .expect("connect");
    let src = vec![5u8; 100 << 10];
    let mut dst = vec![0u8; 4096];
    let add = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    let mut round = |a: &mut SocketDriver, i: u64| {
        let len = 1 + (i as usize * 37) % src.len();
        while a.rail(0).put(1, 4096, &src[..len], CX).is_err() {
            a.progress(now(t0));
        }
        while a.rail(0).put_from_heap(1, 512 << 10, 0, 8192, CX).is_err() {
            a.progress(now(t0));
        }
        assert!(a.backlog(1, 0).frames >= 1, "the heap put is held");
        let tk = loop {
            match a.rail(0).get_start(1, 0, dst.len() as u32, CX) {
                Ok(t) => break t,
                Err(_) => {
                    a.progress(now(t0));
                }
            }
        };
        while !a.rail(0).get_poll(&tk, &mut dst).expect("get") {
            a.progress(now(t0));
        }
        let tk = loop {
            match a.rail(0).atomic_start(1, 8, add, CX) {
                Ok(t) => break t,
                Err(_) => {
                    a.progress(now(t0));
                }
            }
        };
        while a.rail(0).atomic_poll(&tk).expect("atomic").is_none() {
            a.progress(now(t0));
        }
        if i.is_multiple_of(16) {
            while !a.quiet_poll().expect("quiet") {
                a.progress(now(t0));
            }
            assert_eq!(a.backlog(1, 0), Backlog::default(), "quiet drains it");
        }
    };
    // Warm up every path once, then count on both threads.
    for i in 0..64 {
        round(&mut a, i);
    }
    ENROLLED.with(|c| c.set(true));
    COUNTING.store(true, Ordering::Relaxed);
    for i in 0..3000 {
        round(&mut a, i);
    }
    COUNTING.store(false, Ordering::Relaxed);
    let n = ALLOCS.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    pe1.join().expect("PE 1");
    assert_eq!(n, 0, "{n} allocations on the data path after connect");
}
