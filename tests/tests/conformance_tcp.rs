//! The driver conformance suite, run against the TCP driver over loopback:
//! PE 0's driver (rail 0) is the transport under test; PE 1's driver runs
//! its progress loop on a thread until the guard is dropped.
//!
//! Three configurations run the whole suite: the defaults (one data
//! connection, every payload CRC-checked), bulk frames striped over three data
//! connections (small frames, so even the suite's 16 KiB puts are split and
//! spread), and sampled payload CRCs.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use switchyard_core::transport::Instant;
use switchyard_socket::{CrcPolicy, SingleRail, SocketDriver, TcpConfig};
use switchyard_tests::conformance::{self as c, Harness};

/// A configuration of PE 0 and PE 1 for the suite.
trait Variant {
    fn tune(c: TcpConfig) -> TcpConfig;
}

/// The suite's harness for configuration `V`.
struct Tcp<V>(core::marker::PhantomData<V>);

struct Defaults;
impl Variant for Defaults {
    fn tune(c: TcpConfig) -> TcpConfig {
        c
    }
}

struct Striped;
impl Variant for Striped {
    fn tune(c: TcpConfig) -> TcpConfig {
        TcpConfig {
            data_connections: 3,
            max_frame_payload: 4 << 10,
            ..c
        }
    }
}

struct Sampled;
impl Variant for Sampled {
    fn tune(c: TcpConfig) -> TcpConfig {
        TcpConfig {
            crc: CrcPolicy::Sample {
                bulk_threshold: 1024,
                every: 4,
            },
            ..c
        }
    }
}

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
        key: switchyard_socket::JobKey(*b"conformance-tcp!conformance-tcp!"),
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

impl<V: Variant> Harness for Tcp<V> {
    type T = SingleRail;
    type Guard = Remote;

    fn pair(heap: u64) -> (SingleRail, Remote) {
        let mut a = SocketDriver::with_owned_heap(V::tune(config(0)), heap).expect("driver 0");
        let mut b = SocketDriver::with_owned_heap(V::tune(config(1)), heap).expect("driver 1");
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

/// The whole suite, one test per check, for configuration `$v`.
macro_rules! suite {
    ($m:ident, $v:ty) => {
        mod $m {
            use super::*;

            #[test]
            fn random_put_get() {
                c::random_put_get::<Tcp<$v>>();
            }

            #[test]
            fn bounds_are_enforced() {
                c::bounds_are_enforced::<Tcp<$v>>();
            }

            #[test]
            fn atomics_match_reference() {
                c::atomics_match_reference::<Tcp<$v>>();
            }

            #[test]
            fn heap_to_heap() {
                c::heap_to_heap::<Tcp<$v>>();
            }

            #[test]
            fn fence_orders_puts() {
                c::fence_orders_puts::<Tcp<$v>>();
            }

            #[test]
            fn close_is_final() {
                c::close_is_final::<Tcp<$v>>();
            }
        }
    };
}

suite!(defaults, Defaults);
suite!(striped, Striped);
suite!(sampled, Sampled);
