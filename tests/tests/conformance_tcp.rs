//! The driver conformance suite, run against the TCP driver over loopback:
//! PE 0's driver (rail 0) is the transport under test; PE 1's driver runs
//! its progress loop on a thread until the guard is dropped.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use switchyard_core::transport::Instant;
use switchyard_socket::{SingleRail, SocketDriver, TcpConfig};
use switchyard_tests::conformance::{self as c, Harness};

struct Tcp;

/// PE 1, progressing on its own thread until dropped.
struct Remote {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config(me: u32) -> TcpConfig {
    TcpConfig {
        job_id: 0x7C9,
        cookie: *b"conformance-tcp!",
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        window: 1 << 20,
        max_frame_payload: 64 << 10,
        // The suite drives PE 0 with a frozen clock (progress at time 0), so
        // PE 1 must not declare the link dead while PE 0 computes.
        detection_window: Duration::from_secs(60),
        give_up: Duration::from_secs(120),
        ..TcpConfig::default()
    }
}

impl Harness for Tcp {
    type T = SingleRail;
    type Guard = Remote;

    fn pair(heap: u64) -> (SingleRail, Remote) {
        let mut a = SocketDriver::with_owned_heap(config(0), heap).expect("driver 0");
        let mut b = SocketDriver::with_owned_heap(config(1), heap).expect("driver 1");
        let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
        a.set_peer(1, &lb, heap).expect("peer 1");
        b.set_peer(0, &la, heap).expect("peer 0");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            b.connect_all([0].into_iter(), Instant::default(), Duration::from_secs(10))
                .expect("PE 1 connects");
            while !s.load(Ordering::Relaxed) {
                let now = Instant::from_nanos(t0.elapsed().as_nanos() as u64);
                b.progress(now);
                b.wait(Duration::from_millis(1));
            }
        });
        a.connect_all([1].into_iter(), Instant::default(), Duration::from_secs(10))
            .expect("PE 0 connects");
        (
            SingleRail(a),
            Remote {
                stop,
                thread: Some(thread),
            },
        )
    }
}

#[test]
fn random_put_get() {
    c::random_put_get::<Tcp>();
}

#[test]
fn bounds_are_enforced() {
    c::bounds_are_enforced::<Tcp>();
}

#[test]
fn atomics_match_reference() {
    c::atomics_match_reference::<Tcp>();
}

#[test]
fn heap_to_heap() {
    c::heap_to_heap::<Tcp>();
}

#[test]
fn fence_orders_puts() {
    c::fence_orders_puts::<Tcp>();
}

#[test]
fn close_is_final() {
    c::close_is_final::<Tcp>();
}
