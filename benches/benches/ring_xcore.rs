//! What a push into a submission ring costs the producer when the consumer
//! runs on another core: the shape of a context's ring under a `dedicated`
//! progress thread (`context_tcp` measures the real one), without the TCP
//! driver, so the cache-line traffic between the two cores is all there is.
//!
//! A producer pushes bursts of [`BURST`] entries into a `Ring` of 16 KiB and
//! waits for the ring to empty after each (as the real bench's `quiet` does);
//! only the pushes are timed. A consumer thread pops everything in order,
//! reading each entry whole, and between two looks at an empty ring makes
//! one system call (a `recv` on a non-blocking UDP socket that never gets
//! anything), as an idle progress step does. The consumer pops with
//! [`Consumer::pop`](switchyard_core::ring::Consumer::pop) or
//! [`Consumer::pop_evict`](switchyard_core::ring::Consumer::pop_evict)
//! (evicting the lines it finished from every cache).
//!
//! | id | what |
//! |---|---|
//! | `ring_xcore/line64/pop` | entries of 64 bytes (one line each; the context's `Entry`), popped with `pop` |
//! | `ring_xcore/line64/pop_evict` | the same, popped with `pop_evict` |
//! | `ring_xcore/line64/pop_evict_prefetch` | the same, each push first prefetching the slot [`PREFETCH`] ahead ([`Producer::prefetch`](switchyard_core::ring::Producer::prefetch)): what the context's ring does |
//! | `ring_xcore/line32/pop` | entries of 32 bytes (two to a line), `pop` |
//! | `ring_xcore/line32/pop_evict_prefetch` | the same, evicting and prefetching |
//! | `ring_xcore/line32/pop_evict_prefetch_once` | the same, the consumer looking at the tail once per step: it pops what that look saw, then makes its system call (empty or not), so the tail's line moves once per step, not once per entry the producer adds while it pops |
//!
//! One iteration is one push. After criterion, a plain-clock cross-check
//! runs the cases in interleaved rounds (the host may move the two
//! threads between cores close to each other and far apart, every few
//! minutes; interleaving puts every case in each phase) and prints each
//! round's median ns per push per case, then every case's p10 / p50 / p90 / p99
//! over all bursts and the median over rounds of each case's ratio to
//! `line64/pop` in the same round.

use std::{
    hint::black_box,
    net::UdpSocket,
    sync::Barrier,
    thread,
    time::{Duration, Instant},
};

use criterion::BenchmarkId;
use switchyard_benches::measuring;
use switchyard_core::ring::{Consumer, Ring};

/// Pushes per timed burst.
const BURST: usize = 64;
/// Bytes of slots in every ring (256 entries of 64 bytes, as a context's).
const RING_BYTES: usize = 16 * 1024;
/// The longest any wait here may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// An entry: its sequence number first, the rest filled from it.
trait Entry: Copy + Send + 'static {
    fn new(seq: u64) -> Self;
    /// The sequence number, and whether the rest matches it (reads it all).
    fn check(&self) -> (u64, bool);
}

/// A 64-byte entry: one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line64([u64; 8]);

/// A 32-byte entry: half a line.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Line32([u64; 4]);

impl Entry for Line64 {
    #[inline(always)]
    fn new(seq: u64) -> Self {
        Line64([seq, !seq, seq, !seq, seq, !seq, seq, !seq])
    }
    fn check(&self) -> (u64, bool) {
        let s = self.0[0];
        (
            s,
            self.0
                .iter()
                .enumerate()
                .all(|(i, w)| *w == if i % 2 == 0 { s } else { !s }),
        )
    }
}

impl Entry for Line32 {
    #[inline(always)]
    fn new(seq: u64) -> Self {
        Line32([seq, !seq, seq, !seq])
    }
    fn check(&self) -> (u64, bool) {
        let s = self.0[0];
        (
            s,
            self.0
                .iter()
                .enumerate()
                .all(|(i, w)| *w == if i % 2 == 0 { s } else { !s }),
        )
    }
}

/// Pops `n` entries, evicting or not, making one system call per look at an
/// empty ring (`once`: per look, after popping only what that look saw);
/// whether they were `0..n` in order and whole.
fn consume<T: Entry, const N: usize>(
    c: &mut Consumer<'_, T, N>,
    n: u64,
    evict: bool,
    once: bool,
    sock: &UdpSocket,
) -> bool {
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let mut expect = 0;
    let mut ok = true;
    while expect < n {
        if once {
            // One look at the tail, then only what it saw (the cached
            // tail: no more looks), then the step's system call.
            for _ in 0..c.slots() {
                let Ok(e) = (if evict { c.pop_evict() } else { c.pop() }) else {
                    break;
                };
                let (seq, whole) = e.check();
                ok &= whole && seq == expect;
                expect += 1;
            }
            let _ = sock.recv(&mut buf);
            assert!(start.elapsed() < DEADLINE, "the producer stopped");
            continue;
        }
        let got = if evict { c.pop_evict() } else { c.pop() };
        match got {
            Ok(e) => {
                let (seq, whole) = e.check();
                ok &= whole && seq == expect;
                expect += 1;
            }
            Err(_) => {
                // An idle progress step: nothing arrives on this socket.
                let _ = sock.recv(&mut buf);
                assert!(start.elapsed() < DEADLINE, "the producer stopped");
            }
        }
    }
    ok
}

/// `bursts` bursts of [`BURST`] pushes into a fresh ring of `N` entries `T`
/// (each push prefetching [`PREFETCH`] ahead, or not), a consumer popping
/// them on another thread (evicting or not); `each` gets
/// every burst's time, and the total is returned.
fn run<T: Entry, const N: usize>(
    evict: bool,
    prefetch: bool,
    once: bool,
    bursts: u64,
    sock: &UdpSocket,
    mut each: impl FnMut(Duration),
) -> Duration {
    let mut ring = Box::new(Ring::<T, N>::new());
    let (mut p, mut c) = ring.split();
    let n = bursts * BURST as u64;
    let barrier = Barrier::new(2);
    let barrier = &barrier;
    let (total, ok) = thread::scope(|s| {
        let consumer = s.spawn(move || {
            barrier.wait();
            consume(&mut c, n, evict, once, sock)
        });
        barrier.wait();
        let mut total = Duration::ZERO;
        let mut seq = 0u64;
        for _ in 0..bursts {
            let t = Instant::now();
            for _ in 0..BURST {
                let mut e = T::new(black_box(seq));
                if prefetch {
                    p.prefetch(PREFETCH);
                }
                while let Err(full) = p.push(e) {
                    e = full.into_inner();
                    std::hint::spin_loop();
                }
                seq += 1;
            }
            let el = t.elapsed();
            total += el;
            each(el);
            // Wait for the consumer to take them all (untimed).
            let w = Instant::now();
            while p.slots() < N {
                std::hint::spin_loop();
                assert!(w.elapsed() < DEADLINE, "the consumer stopped");
            }
        }
        (total, consumer.join().expect("the consumer"))
    });
    assert!(ok, "the ring lost, reordered or tore an entry");
    total
}

/// The cases: (name, evicting, prefetching, 32-byte entries, one look per
/// consumer step).
const CASES: [(&str, bool, bool, bool, bool); 6] = [
    ("line64/pop", false, false, false, false),
    ("line64/pop_evict", true, false, false, false),
    ("line64/pop_evict_prefetch", true, true, false, false),
    ("line32/pop", false, false, true, false),
    ("line32/pop_evict_prefetch", true, true, true, false),
    ("line32/pop_evict_prefetch_once", true, true, true, true),
];
/// How many pushes ahead the prefetching cases prefetch (as the context's
/// submission ring does).
const PREFETCH: usize = 8;

fn case(k: usize, bursts: u64, sock: &UdpSocket, each: impl FnMut(Duration)) -> Duration {
    let (_, evict, prefetch, small, once) = CASES[k];
    if small {
        run::<Line32, { RING_BYTES / 32 }>(evict, prefetch, once, bursts, sock, each)
    } else {
        run::<Line64, { RING_BYTES / 64 }>(evict, prefetch, once, bursts, sock, each)
    }
}

fn main() {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket");
    sock.set_nonblocking(true).expect("a non-blocking socket");
    // Correctness first (checked inside).
    for k in 0..CASES.len() {
        case(k, 4, &sock, |_| {});
    }
    let mut c = switchyard_benches::criterion_config().configure_from_args();
    let mut g = c.benchmark_group("ring_xcore");
    for (k, (name, ..)) in CASES.iter().enumerate() {
        let (entry, pop) = name.split_once('/').expect("entry/pop");
        g.bench_function(BenchmarkId::new(entry, pop), |b| {
            b.iter_custom(|iters| {
                let n = iters.div_ceil(BURST as u64);
                let t = case(k, n, &sock, |_| {});
                t.mul_f64(iters as f64 / (n * BURST as u64) as f64)
            });
        });
    }
    g.finish();
    c.final_summary();

    let (rounds, n) = if measuring() { (24, 200) } else { (1, 10) };
    let mut each: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
    let p50 = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    println!();
    println!(
        "quick cross-check (std::time::Instant, {rounds} rounds of {n} bursts of {BURST} \
         pushes per case, interleaved; per round, median ns per push{}):",
        if measuring() {
            ""
        } else {
            ", test mode: not a measurement"
        }
    );
    println!(
        "  round {}",
        CASES
            .iter()
            .map(|c| format!("{:>32}", c.0))
            .collect::<String>()
    );
    for r in 0..rounds {
        let mut med = vec![0.0; CASES.len()];
        // Every round starts with another case.
        for j in 0..CASES.len() {
            let k = (j + r) % CASES.len();
            let mut v = Vec::new();
            case(k, n as u64, &sock, |e| {
                v.push(e.as_nanos() as f64 / BURST as f64)
            });
            med[k] = p50(v.clone());
            each[k].extend(v);
        }
        for k in 0..CASES.len() {
            ratios[k].push(med[k] / med[0]);
        }
        println!(
            "  {r:>5} {}",
            med.iter().map(|m| format!("{m:>32.1}")).collect::<String>()
        );
    }
    println!(
        "per burst (ns per push, p10 / p50 / p90 / p99 over every burst), and the median \
         over rounds of the ratio to line64/pop in the same round:"
    );
    for (k, (name, ..)) in CASES.iter().enumerate() {
        let mut t = each[k].clone();
        t.sort_by(f64::total_cmp);
        let q = |f: f64| t[((t.len() - 1) as f64 * f) as usize];
        println!(
            "  {name:<30} {:>8.1} {:>8.1} {:>8.1} {:>8.1}   x{:.2}",
            q(0.1),
            q(0.5),
            q(0.9),
            q(0.99),
            p50(ratios[k].clone())
        );
    }
}
