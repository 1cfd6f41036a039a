//! Loopback put bandwidth between two drivers on two threads, both
//! busy-polling progress: PE 0 puts `SIZE` bytes from its heap
//! (`put_from_heap`, zero copy on the sending side) 64 times, then waits for
//! quiet, over and over; PE 1 only makes progress. Prints GB/s and the
//! driver's counters. The frame size and payload CRC policy come from the
//! arguments, to see what each costs.
//!
//! `cargo run --release -p switchyard-socket --example bandwidth [SIZE_KIB [FRAME_KIB [crc|nocrc]]]`

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use switchyard_core::{
    route::ContextId,
    transport::{Instant, Transport},
};
use switchyard_socket::{CrcPolicy, SocketDriver, TcpConfig};

const CX: ContextId = ContextId { pe: 0, seq: 0 };

fn now(t0: std::time::Instant) -> Instant {
    Instant::from_nanos(t0.elapsed().as_nanos() as u64)
}

fn main() {
    let arg = |i: usize, d: u32| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let size = arg(1, 1024) << 10;
    let frame = arg(2, 256) << 10;
    let crc = std::env::args().nth(3).as_deref() != Some("nocrc");
    let heap = 2 * u64::from(size) + 4096;
    let cfg = |me| TcpConfig {
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        max_frame_payload: frame,
        crc: if crc {
            CrcPolicy::Always
        } else {
            CrcPolicy::Sample {
                bulk_threshold: 1,
                every: u32::MAX,
            }
        },
        ..TcpConfig::default()
    };
    let mut a = SocketDriver::with_owned_heap(cfg(0), heap).expect("driver 0");
    let mut b = SocketDriver::with_owned_heap(cfg(1), heap).expect("driver 1");
    let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
    a.set_peer(1, &lb, heap).expect("peer");
    b.set_peer(0, &la, heap).expect("peer");
    let t0 = std::time::Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let stop = done.clone();
    let sink = std::thread::spawn(move || {
        b.connect_all([0].into_iter(), now(t0), Duration::from_secs(10))
            .expect("connect");
        while !stop.load(Ordering::Relaxed) {
            b.progress(now(t0));
        }
    });
    a.connect_all([1].into_iter(), now(t0), Duration::from_secs(10))
        .expect("connect");
    let rounds = (4u64 << 30) / (64 * u64::from(size));
    let mut start = std::time::Instant::now();
    for r in 0..rounds + 2 {
        if r == 2 {
            start = std::time::Instant::now();
        }
        for _ in 0..64 {
            while a.rail(0).put_from_heap(1, 0, 0, size, CX).is_err() {
                a.progress(now(t0));
            }
        }
        while !a.quiet_poll().expect("quiet") {
            a.progress(now(t0));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    sink.join().expect("sink");
    let bytes = rounds * 64 * u64::from(size);
    let st = a.stats();
    println!(
        "tcp loopback put_from_heap {} KiB, frames of {} KiB, payload crc {}: {:.2} GB/s (sent {} frames, would_block {}, replayed {})",
        size >> 10,
        frame >> 10,
        if crc { "on" } else { "off" },
        bytes as f64 / secs / 1e9,
        st.frames_sent,
        st.would_block,
        st.replayed
    );
}
