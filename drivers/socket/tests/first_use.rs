//! Connect-on-first-use ([`SocketDriver::set_connect_on_first_use`]) over
//! loopback: three drivers progressed in turn on one thread, no peer
//! declared up front. Every wait has a deadline; nothing asserts a duration.

mod common;

use std::{sync::OnceLock, time::Duration};

use common::heap_u64;
use switchyard_core::{
    route::ContextId,
    transport::{Instant, LinkState, Transport},
};
use switchyard_socket::{JobKey, SocketDriver, SocketError, TcpConfig};

const CX: ContextId = ContextId { pe: 0, seq: 1 };
const KEY: JobKey = JobKey(*b"first-use-tests-32-byte-job-key!");
const HEAP: u64 = 1 << 20;

fn now() -> Instant {
    static T0: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_nanos(T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64)
}

/// Three lazy drivers (PEs 0, 1, 2) on 127.0.0.1, none declaring any peer.
fn three() -> Vec<SocketDriver> {
    (0..3)
        .map(|me| {
            let cfg = TcpConfig {
                job_id: 0x1A2B,
                key: KEY,
                me,
                n_pes: 3,
                // A generous silence window: one thread steps all three.
                detection_window: Duration::from_secs(2),
                ..TcpConfig::default()
            };
            let mut d = SocketDriver::with_owned_heap(cfg, HEAP).expect("driver");
            d.set_connect_on_first_use(true);
            d
        })
        .collect()
}

/// Steps every driver until `done` holds, for at most 10 s.
fn until(ds: &mut [SocketDriver], what: &str, mut done: impl FnMut(&mut [SocketDriver]) -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        for d in ds.iter_mut() {
            d.progress(now());
        }
        if done(ds) {
            return;
        }
        assert!(std::time::Instant::now() < end, "timed out: {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Puts `v` at `off` from `ds[from]` to PE `to`, then quiets.
fn put_quiet(ds: &mut [SocketDriver], from: usize, to: u32, off: u64, v: u64) {
    ds[from]
        .rail(0)
        .put(to, off, &v.to_le_bytes(), CX)
        .expect("put");
    until(ds, "quiet", |ds| ds[from].quiet_poll().expect("quiet"));
}

#[test]
fn the_higher_rank_connects_first_and_the_lower_serves_it_without_its_addresses() {
    let mut ds = three();
    // Before anything: no peer, and an operation says the peer is unknown.
    let e = ds[2].rail(0).put(0, 0, &[1], CX).expect_err("unknown peer");
    assert!(matches!(e, SocketError::PeerUnknown { peer: 0 }), "{e}");
    let a0 = ds[0].local_addrs().to_vec();
    ds[2].connect_on_first_use(0, &a0).expect("connect");
    until(&mut ds, "2 -> 0 up", |ds| {
        ds[2].rail(0).state(0) == LinkState::Up && ds[0].rail(0).state(2) == LinkState::Up
    });
    put_quiet(&mut ds, 2, 0, 64, 0xAB);
    assert_eq!(heap_u64(&ds[0], 64), 0xAB);
    // PE 0 never learned PE 2's addresses, yet puts and gets back to it
    // over the accepted connection.
    assert!(ds[0].knows_peer(2));
    put_quiet(&mut ds, 0, 2, 128, 0xCD);
    assert_eq!(heap_u64(&ds[2], 128), 0xCD);
    // Memory for peers: one each, none on PE 1.
    assert_eq!(ds[0].peer_count(), 1);
    assert_eq!(ds[2].peer_count(), 1);
    assert_eq!(ds[1].peer_count(), 0);
    assert!(!ds[1].knows_peer(0));

    // A cut: PE 2 connected, so PE 2 reconnects, and what follows arrives.
    ds[2].debug_cut(0, 0);
    until(&mut ds, "the cut seen", |ds| {
        ds[2].rail(0).state(0) != LinkState::Up
    });
    until(&mut ds, "reconnected", |ds| {
        ds[2].rail(0).state(0) == LinkState::Up && ds[0].rail(0).state(2) == LinkState::Up
    });
    assert!(ds[2].stats().reconnects > 0, "{:?}", ds[2].stats());
    put_quiet(&mut ds, 2, 0, 72, 0xEF);
    assert_eq!(heap_u64(&ds[0], 72), 0xEF);
    put_quiet(&mut ds, 0, 2, 136, 0x12);
    assert_eq!(heap_u64(&ds[2], 136), 0x12);
    assert_eq!(ds[0].stats().refused, 0, "{:?}", ds[0].stats());
}

#[test]
fn both_sides_connecting_at_once_keep_one_connection() {
    let mut ds = three();
    let (a0, a1) = (ds[0].local_addrs().to_vec(), ds[1].local_addrs().to_vec());
    ds[0].connect_on_first_use(1, &a1).expect("0 connects");
    ds[1].connect_on_first_use(0, &a0).expect("1 connects");
    until(&mut ds, "0 <-> 1 up", |ds| {
        ds[0].rail(0).state(1) == LinkState::Up && ds[1].rail(0).state(0) == LinkState::Up
    });
    let crossed = ds[0].stats().crossed + ds[1].stats().crossed;
    assert!(crossed > 0, "{:?} {:?}", ds[0].stats(), ds[1].stats());
    put_quiet(&mut ds, 0, 1, 0, 5);
    put_quiet(&mut ds, 1, 0, 8, 6);
    assert_eq!(heap_u64(&ds[1], 0), 5);
    assert_eq!(heap_u64(&ds[0], 8), 6);
    // It stays up: no churn of connections replacing each other.
    let settle = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < settle {
        for d in &mut ds {
            d.progress(now());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(ds[0].rail(0).state(1), LinkState::Up);
    assert_eq!(ds[1].rail(0).state(0), LinkState::Up);
    put_quiet(&mut ds, 1, 0, 16, 7);
    assert_eq!(heap_u64(&ds[0], 16), 7);
    assert_eq!(ds[0].stats().refused + ds[1].stats().refused, 0);
}

#[test]
fn without_first_use_a_stranger_peer_is_refused() {
    let mut ds = three();
    ds[0].set_connect_on_first_use(false);
    let a0 = ds[0].local_addrs().to_vec();
    ds[2].connect_on_first_use(0, &a0).expect("connect");
    until(&mut ds, "refused", |ds| ds[0].stats().refused > 0);
    assert_ne!(ds[2].rail(0).state(0), LinkState::Up);
    assert!(!ds[0].knows_peer(2));
}
