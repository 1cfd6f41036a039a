//! The driver conformance suite, run against the shared-memory driver.

use switchyard_shm::{Segment, SegmentConfig, ShmTransport};
use switchyard_tests::conformance::{self as c, Harness};

struct Shm;

impl Harness for Shm {
    type T = ShmTransport;
    type Guard = Segment;

    fn pair(heap: u64) -> (ShmTransport, Segment) {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let job = 0xC0F0_0000_0000_0000
            | u64::from(std::process::id()) << 16
            | N.fetch_add(1, Ordering::Relaxed);
        let s0 = Segment::create(&SegmentConfig::new(job, 0, 2, heap)).expect("segment 0");
        let s1 = Segment::create(&SegmentConfig::new(job, 1, 2, heap)).expect("segment 1");
        let mut t = ShmTransport::new(s0, job, 0, 2).expect("transport");
        t.set_address(1, s1.path()).expect("address");
        switchyard_core::transport::Transport::connect(&mut t, 1).expect("connect");
        (t, s1)
    }
}

#[test]
fn random_put_get() {
    c::random_put_get::<Shm>();
}

#[test]
fn bounds_are_enforced() {
    c::bounds_are_enforced::<Shm>();
}

#[test]
fn atomics_match_reference() {
    c::atomics_match_reference::<Shm>();
}

#[test]
fn heap_to_heap() {
    c::heap_to_heap::<Shm>();
}

#[test]
fn fence_orders_puts() {
    c::fence_orders_puts::<Shm>();
}

#[test]
fn close_is_final() {
    c::close_is_final::<Shm>();
}
