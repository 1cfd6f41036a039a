//! Loopback message rate of small puts: PE 0 puts `WINDOW` puts of `SIZE`
//! bytes to PE 1, then waits for quiet, over and over (`PUTS` puts in all
//! per round); PE 1 only makes progress (both busy-poll, on two threads).
//! Beside it, in the same run and interleaved round by round, a raw TCP
//! stream of `SIZE`-byte records over a loopback connection (non-blocking,
//! `TCP_NODELAY`, both sides busy-polling), with a put stream's freedom:
//!
//! * **raw**: per window, the `WINDOW` records in one `send` (the records a
//!   put stream queues before its quiet may be coalesced), then the reader's
//!   count of records received (8 bytes back), as a quiet waits for the
//!   acks. The reader copies each record to a heap slot. This is the
//!   `tcp-records` baseline of `switchyard perf put-rate`.
//! * **raw-eager**: the same with one `send` per record (no coalescing at
//!   all: what a sender that writes every put at once pays).
//!
//! Prints, per variant, the median over rounds of msgs/s, and the driver's
//! ratio to each raw stream. Only the variant being measured has threads
//! spinning.
//!
//! `cargo run --release -p switchyard-socket --example rate [PUTS [SIZE [WINDOW [ROUNDS [only]]]]]`
//!
//! With a fifth argument `driver` or `raw`, only that variant runs (for
//! `strace -c -f`: system calls per put).

use std::{
    io::{ErrorKind, Read, Write},
    net::{TcpListener, TcpStream},
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
use switchyard_socket::{SocketDriver, TcpConfig};

const CX: ContextId = ContextId { pe: 0, seq: 0 };

fn now(t0: std::time::Instant) -> Instant {
    Instant::from_nanos(t0.elapsed().as_nanos() as u64)
}

/// Two connected drivers; PE 1 progresses on its own thread until `stop`
/// (sleeping while `pause`, so that it leaves the CPUs to the raw rounds).
struct Pair {
    a: SocketDriver,
    stop: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
    sink: Option<std::thread::JoinHandle<()>>,
    t0: std::time::Instant,
}

impl Pair {
    fn new(heap: u64) -> Pair {
        let cfg = |me| TcpConfig {
            me,
            n_pes: 2,
            listen: vec!["127.0.0.1".parse().expect("ip")],
            // PE 1 sleeps through the raw rounds: not a failure.
            heartbeat_interval: Duration::from_secs(1),
            detection_window: Duration::from_secs(60),
            ..TcpConfig::default()
        };
        let mut a = SocketDriver::with_owned_heap(cfg(0), heap).expect("driver 0");
        let mut b = SocketDriver::with_owned_heap(cfg(1), heap).expect("driver 1");
        let (la, lb) = (a.local_addrs().to_vec(), b.local_addrs().to_vec());
        a.set_peer(1, &lb, heap).expect("peer");
        b.set_peer(0, &la, heap).expect("peer");
        let t0 = std::time::Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicBool::new(false));
        let (s, ps) = (stop.clone(), pause.clone());
        let sink = std::thread::spawn(move || {
            b.connect_all([0].into_iter(), now(t0), Duration::from_secs(10))
                .expect("connect");
            while !s.load(Ordering::Relaxed) {
                if ps.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                b.progress(now(t0));
            }
            b.flush_acks();
        });
        a.connect_all([1].into_iter(), now(t0), Duration::from_secs(10))
            .expect("connect");
        Pair {
            a,
            stop,
            pause,
            sink: Some(sink),
            t0,
        }
    }

    /// `n` puts of `msg` to consecutive slots, a quiet after every
    /// `window`: seconds taken.
    fn round(&mut self, n: u64, msg: &[u8], window: u64, slots: u64) -> f64 {
        let (a, t0) = (&mut self.a, self.t0);
        let size = msg.len() as u64;
        let start = std::time::Instant::now();
        for i in 0..n {
            let at = (i % slots) * size;
            while a.rail(0).put(1, at, msg, CX).is_err() {
                a.progress(now(t0));
            }
            if (i + 1).is_multiple_of(window) {
                while !a.quiet_poll().expect("quiet") {
                    a.progress(now(t0));
                }
            }
        }
        start.elapsed().as_secs_f64()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.sink.take() {
            let _ = s.join();
        }
    }
}

/// A raw loopback TCP stream of fixed-size records: the reader thread
/// copies each record to a heap slot and, per `window` records, sends back
/// its count (8 bytes).
struct Raw {
    w: TcpStream,
    reader: Option<std::thread::JoinHandle<()>>,
    sent: u64,
}

/// Writes all of `b` to a non-blocking socket, spinning while it is full.
fn send_all(mut s: &TcpStream, mut b: &[u8]) {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => core::hint::spin_loop(),
            Err(e) => panic!("raw write: {e}"),
        }
    }
}

impl Raw {
    fn new(size: usize, window: u64, slots: u64) -> Raw {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let w = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut r, _) = l.accept().expect("accept");
        for s in [&w, &r] {
            s.set_nodelay(true).expect("nodelay");
            s.set_nonblocking(true).expect("nonblocking");
        }
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut heap = vec![0u8; size * slots as usize];
            let (mut fill, mut rec) = (0usize, 0u64);
            loop {
                match r.read(&mut buf[fill..]) {
                    Ok(0) => break,
                    Ok(n) => {
                        fill += n;
                        let whole = fill / size * size;
                        for c in buf[..whole].chunks_exact(size) {
                            let at = (rec % slots) as usize * size;
                            heap[at..at + size].copy_from_slice(c);
                            rec += 1;
                            if rec.is_multiple_of(window) {
                                send_all(&r, &rec.to_le_bytes());
                            }
                        }
                        buf.copy_within(whole..fill, 0);
                        fill -= whole;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => core::hint::spin_loop(),
                    Err(_) => break,
                }
            }
            std::hint::black_box(&heap);
        });
        Raw {
            w,
            reader: Some(reader),
            sent: 0,
        }
    }

    /// `n` records of `msg` by windows of `window`, each window written in
    /// one `send` (`batch`) or one `send` per record, then waiting for the
    /// reader's count: seconds taken.
    fn round(&mut self, n: u64, msg: &[u8], window: u64, batch: bool) -> f64 {
        let recs: Vec<u8> = msg.repeat(window as usize);
        let mut count = [0u8; 8];
        let start = std::time::Instant::now();
        for _ in 0..n / window {
            if batch {
                send_all(&self.w, &recs);
            } else {
                for r in recs.chunks_exact(msg.len()) {
                    send_all(&self.w, r);
                }
            }
            self.sent += window;
            let mut got = 0;
            while got < 8 {
                match self.w.read(&mut count[got..]) {
                    Ok(0) => panic!("raw reader closed"),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => core::hint::spin_loop(),
                    Err(e) => panic!("raw read: {e}"),
                }
            }
            assert_eq!(u64::from_le_bytes(count), self.sent, "raw reader count");
        }
        start.elapsed().as_secs_f64()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.w.shutdown(std::net::Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let window = arg(3, 64).max(1);
    let n = arg(1, 100_000) / window * window;
    let size = arg(2, 64) as usize;
    let rounds = arg(4, 7) as usize;
    let only = std::env::args().nth(5);
    let run = |v: &str| only.as_deref().is_none_or(|o| o == v);
    let slots = 1024u64;
    let msg = vec![0x5Au8; size];

    let mut pair = run("driver").then(|| Pair::new(slots * size as u64 + 4096));
    let (mut d, mut rb, mut re) = (Vec::new(), Vec::new(), Vec::new());
    // One warm-up round each, then `rounds` measured, interleaved. Only the
    // variant measured has threads spinning (the driver's PE 1 sleeps during
    // the raw rounds, each raw stream's reader ends with its round): on a
    // machine with few cores an idle spinner would take the CPU from it.
    for round in 0..=rounds {
        let rate = |secs: f64| n as f64 / secs;
        if let Some(p) = pair.as_mut() {
            p.pause.store(false, Ordering::Relaxed);
            let x = rate(p.round(n, &msg, window, slots));
            p.pause.store(true, Ordering::Relaxed);
            if round > 0 {
                d.push(x);
            }
        }
        if run("raw") {
            let x = rate(Raw::new(size, window, slots).round(n, &msg, window, true));
            let y = rate(Raw::new(size, window, slots).round(n, &msg, window, false));
            if round > 0 {
                rb.push(x);
                re.push(y);
            }
        }
    }
    let m = |v: &mut Vec<f64>| (!v.is_empty()).then(|| median(v));
    let (md, mrb, mre) = (m(&mut d), m(&mut rb), m(&mut re));
    println!(
        "{size} B puts, windows of {window} then quiet, {n} per round, median of {rounds} rounds (M msgs/s):"
    );
    for (name, v) in [("driver", md), ("raw", mrb), ("raw-eager", mre)] {
        if let Some(x) = v {
            println!("  {name:<10} {:7.3}", x / 1e6);
        }
    }
    if let (Some(x), Some(y), Some(z)) = (md, mrb, mre) {
        println!("  driver/raw {:.2}, driver/raw-eager {:.2}", x / y, x / z);
    }
    if let Some(p) = pair.as_ref() {
        let st = p.a.stats();
        println!(
            "  PE 0: frames sent {}, writes {}, bytes sent {}, would_block {}",
            st.frames_sent, st.writes, st.bytes_sent, st.would_block
        );
    }
}
