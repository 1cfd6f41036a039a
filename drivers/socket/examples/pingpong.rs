//! Loopback ping-pong of 64-byte puts between two drivers on two threads,
//! both busy-polling progress. Prints the one-way latency (half the round
//! trip): median, p99, and the minimum.
//!
//! `cargo run --release -p switchyard-socket --example pingpong [iterations]`
#![allow(unsafe_code)]

use std::time::Duration;

use switchyard_core::{
    route::ContextId,
    transport::{Instant, Transport},
};
use switchyard_socket::{SocketDriver, TcpConfig};

const CX: ContextId = ContextId { pe: 0, seq: 0 };

fn now(t0: std::time::Instant) -> Instant {
    Instant::from_nanos(t0.elapsed().as_nanos() as u64)
}

/// The stamp in the first 8 bytes of the own heap (written by the peer's put,
/// applied by this thread's own progress, so a plain read is enough).
fn stamp(d: &SocketDriver) -> u64 {
    let (p, _) = d.local_heap();
    // SAFETY: the heap is at least 64 bytes and 8-aligned; only this thread's
    // progress writes it.
    unsafe { core::ptr::read_volatile(p.cast::<u64>()) }
}

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let cfg = |me| TcpConfig {
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        ..TcpConfig::default()
    };
    let mut a = SocketDriver::with_owned_heap(cfg(0), 4096).expect("driver 0");
    let mut b = SocketDriver::with_owned_heap(cfg(1), 4096).expect("driver 1");
    let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
    a.set_peer(1, &lb, 4096).expect("peer");
    b.set_peer(0, &la, 4096).expect("peer");
    let t0 = std::time::Instant::now();
    let pong = std::thread::spawn(move || {
        b.connect_all([0].into_iter(), now(t0), Duration::from_secs(10))
            .expect("connect");
        let mut msg = [0u8; 64];
        for i in 1..=iters {
            while stamp(&b) != i {
                b.progress(now(t0));
            }
            msg[..8].copy_from_slice(&i.to_le_bytes());
            while b.rail(0).put(0, 0, &msg, CX).is_err() {
                b.progress(now(t0));
            }
        }
    });
    a.connect_all([1].into_iter(), now(t0), Duration::from_secs(10))
        .expect("connect");
    let mut msg = [0u8; 64];
    let mut rtt = Vec::with_capacity(iters as usize);
    for i in 1..=iters {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        let start = std::time::Instant::now();
        while a.rail(0).put(1, 0, &msg, CX).is_err() {
            a.progress(now(t0));
        }
        while stamp(&a) != i {
            a.progress(now(t0));
        }
        rtt.push(start.elapsed().as_nanos() as u64);
    }
    pong.join().expect("pong");
    // The cost of one idle progress step (no traffic): what a busy-poller
    // pays between a frame's arrival and its handling, on average half.
    let idle = 200_000;
    let t = std::time::Instant::now();
    for _ in 0..idle {
        a.progress(now(t0));
    }
    let idle_ns = t.elapsed().as_nanos() as f64 / f64::from(idle);
    // Skip the first 10% (warm-up).
    let mut s: Vec<u64> = rtt[rtt.len() / 10..].to_vec();
    s.sort_unstable();
    let pct = |p: f64| s[((s.len() - 1) as f64 * p) as usize] as f64 / 2000.0;
    println!(
        "tcp loopback 64 B put ping-pong, {} iterations: one-way p50 {:.1} us, p99 {:.1} us, min {:.1} us",
        s.len(),
        pct(0.5),
        pct(0.99),
        s[0] as f64 / 2000.0
    );
    println!("idle progress step: {idle_ns:.0} ns");
    let st = a.stats();
    println!(
        "PE 0: frames sent {}, received {}, would_block {}",
        st.frames_sent, st.frames_received, st.would_block
    );
}
