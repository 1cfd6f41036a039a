//! Loopback ping-pong of 64-byte puts between two drivers on two threads,
//! both busy-polling progress. Prints the one-way latency (half the round
//! trip): median, p99, and the minimum.
//!
//! Beside it, in the same run: the raw baseline, a busy-polled ping-pong of
//! 64-byte records over one loopback TCP connection (non-blocking,
//! `TCP_NODELAY`, both sides spinning on `recv`), and the driver's ratio
//! to it (p50 over p50).
//!
//! `cargo run --release -p switchyard-socket --example pingpong [iterations [busy_poll_us]]`
//!
//! With `busy_poll_us` > 0, the raw sockets get `SO_BUSY_POLL` (and
//! `SO_PREFER_BUSY_POLL`) with that many microseconds, a second raw run
//! without them follows, and both are printed.
#![allow(unsafe_code)]

use std::{
    io::{ErrorKind, Read, Write},
    net::{TcpListener, TcpStream},
    os::fd::AsRawFd,
    time::Duration,
};

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

/// Sets an integer socket option; the OS error when refused.
fn setsockopt(s: &TcpStream, name: libc::c_int, v: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a valid descriptor and a c_int option value that lives for
    // the call.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&raw const v).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reads exactly `buf.len()` bytes from a non-blocking socket, spinning.
fn read_spin(mut s: &TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("raw peer closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => core::hint::spin_loop(),
            Err(e) => panic!("raw read: {e}"),
        }
    }
}

/// Writes all of `b` to a non-blocking socket, spinning while it is full.
fn write_spin(mut s: &TcpStream, mut b: &[u8]) {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => core::hint::spin_loop(),
            Err(e) => panic!("raw write: {e}"),
        }
    }
}

/// The raw baseline: `iters` round trips of 64-byte records, busy-polled on
/// both sides (with `SO_BUSY_POLL` of `busy_us` when > 0). Round-trip
/// times in ns.
fn raw_pingpong(iters: u64, busy_us: i32) -> Vec<u64> {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    for s in [&a, &b] {
        s.set_nodelay(true).expect("nodelay");
        s.set_nonblocking(true).expect("nonblocking");
        if busy_us > 0 {
            if let Err(e) = setsockopt(s, libc::SO_BUSY_POLL, busy_us) {
                eprintln!("SO_BUSY_POLL {busy_us}: {e}");
            }
            if let Err(e) = setsockopt(s, libc::SO_PREFER_BUSY_POLL, 1) {
                eprintln!("SO_PREFER_BUSY_POLL: {e}");
            }
        }
    }
    let pong = std::thread::spawn(move || {
        let mut m = [0u8; 64];
        for _ in 0..iters {
            read_spin(&b, &mut m);
            write_spin(&b, &m);
        }
    });
    let mut m = [0u8; 64];
    let mut rtt = Vec::with_capacity(iters as usize);
    for i in 1..=iters {
        m[..8].copy_from_slice(&i.to_le_bytes());
        let start = std::time::Instant::now();
        write_spin(&a, &m);
        read_spin(&a, &mut m);
        rtt.push(start.elapsed().as_nanos() as u64);
        assert_eq!(u64::from_le_bytes(m[..8].try_into().expect("8")), i);
    }
    pong.join().expect("raw pong");
    rtt
}

/// One-way (RTT / 2) p50, p99 and minimum in µs, the first 10% skipped.
fn one_way(rtt: &[u64]) -> (f64, f64, f64) {
    let mut s: Vec<u64> = rtt[rtt.len() / 10..].to_vec();
    s.sort_unstable();
    let pct = |p: f64| s[((s.len() - 1) as f64 * p) as usize] as f64 / 2000.0;
    (pct(0.5), pct(0.99), s[0] as f64 / 2000.0)
}

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let busy_us: i32 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
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
    let (p50, p99, min) = one_way(&rtt);
    println!(
        "tcp loopback 64 B put ping-pong, {} iterations: one-way p50 {p50:.2} us, p99 {p99:.2} us, min {min:.2} us",
        iters - iters / 10
    );
    let mut raws = vec![("raw", raw_pingpong(iters, 0))];
    if busy_us > 0 {
        raws.push(("raw+busy_poll", raw_pingpong(iters, busy_us)));
    }
    for (name, r) in &raws {
        let (r50, r99, rmin) = one_way(r);
        println!(
            "{name:<14} 64 B ping-pong: one-way p50 {r50:.2} us, p99 {r99:.2} us, min {rmin:.2} us; driver/{name} p50 {:.2}",
            p50 / r50
        );
    }
    println!("idle progress step: {idle_ns:.0} ns");
    let st = a.stats();
    println!(
        "PE 0: frames sent {}, received {}, writes {}, would_block {}",
        st.frames_sent, st.frames_received, st.writes, st.would_block
    );
}
