//! What an 8-byte put to a TCP peer costs the application thread under a
//! `dedicated` progress thread: through the context's submission ring (the
//! default) beside the existing path (the put takes the TCP driver itself:
//! the lock shared with the progress thread, the frame encoded into the
//! replay ring, perhaps a `sendmsg`), in the same run.
//!
//! Two PEs of one job in one process, on two nodes, TCP over loopback their
//! only link. PE 1 runs in a thread of its own and makes progress (applies
//! the puts, acks) between short sleeps; PE 0 runs a `dedicated` progress
//! thread (unpinned) and measures.
//!
//! | id | what |
//! |---|---|
//! | `context_tcp/put8_burst/ring` | a burst of [`BURST`] `ctx.put(&sym, k, &[v], 1)` of 8 bytes, timed on the application thread (issue only); a `quiet` after each burst, not timed; time per put |
//! | `context_tcp/put8_burst/locked` | the same with the ring off ([`Context::set_submit_ring`]): the existing path |
//!
//! After criterion, a plain-clock cross-check runs both cases in interleaved
//! rounds and prints the median ns per put of each, then the distribution
//! of the bursts themselves (p10, p50, p90, p99 of one burst's ns per put):
//! a burst the scheduler interrupted (three threads on two cores) lands in
//! the tail instead of inflating the round it is in. On a machine with two
//! cores the progress thread, PE 1 and the application share them: the
//! progress thread competes with the application.

use std::{
    hint::black_box,
    net::SocketAddr,
    sync::mpsc::{Receiver, Sender, TryRecvError, channel},
    time::{Duration, Instant},
};

use criterion::BenchmarkId;
use switchyard::context::{Context, PeerInfo, Progress, Setup, Sym};
use switchyard_benches::measuring;
use switchyard_core::{class::NO_SWITCH, route::PolicyConfig};
use switchyard_shm::HugePages;
use switchyard_socket::{JobKey, SocketDriver, TcpConfig};

/// Puts per timed burst (fewer than a submission ring holds).
const BURST: usize = 64;

fn setup(job: u64, me: u32) -> Setup {
    Setup {
        job_id: job,
        me,
        n_pes: 2,
        heap_size: 1 << 20,
        huge_pages: HugePages::Off,
        numa_node: None,
        op_timeout: Duration::from_secs(60),
        progress: Progress::Adaptive { spin: 64 },
        policy: PolicyConfig::default(),
        connect_timeout: Duration::from_secs(60),
        shm_peers: false,
        symmetric_data: None,
        verbs_atomics: Default::default(),
        verbs_routed: true,
        verbs_context_sets: false,
        trace_records: 4096,
        stats: true,
        trace: switchyard::config::TraceMode::DEFAULT,
    }
}

/// PE `me`'s context over TCP; its addresses go to the other PE through
/// `tx`, the other's come through `rx`.
fn context(
    job: u64,
    me: u32,
    tx: &Sender<Vec<SocketAddr>>,
    rx: &Receiver<Vec<SocketAddr>>,
) -> Context {
    let s = setup(job, me);
    let seg = Context::create_segment(&s).expect("a shared-memory segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let cfg = TcpConfig {
        job_id: job,
        key: JobKey(*b"context_tcp bench: a 32-byte key"),
        me,
        n_pes: 2,
        ..TcpConfig::default()
    };
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the segment
    // moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(cfg, heap, len) }.expect("a TCP driver");
    let mine = tcp.local_addrs().to_vec();
    tx.send(mine.clone()).expect("the other PE");
    let other = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the other PE's addresses");
    let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
        node: 1000 + u64::from(pe),
        switch: 5,
        tree: NO_SWITCH,
        shm: None,
        tcp,
    };
    let peers = if me == 0 {
        [info(0, mine), info(1, other)]
    } else {
        [info(0, other), info(1, mine)]
    };
    Context::from_parts(s, seg, &peers, Some(tcp)).expect("a context")
}

/// PE 0: its context and block, and what ends PE 1.
struct Pe0 {
    ctx: Context,
    sym: Sym<u64>,
    done: Sender<()>,
    pe1: std::thread::JoinHandle<()>,
}

fn pair() -> Pe0 {
    let job = 0x7C_50_u64 << 40 ^ u64::from(std::process::id()) << 8;
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let (done, stop) = channel::<()>();
    let pe1 = std::thread::spawn(move || {
        let mut ctx = context(job, 1, &tx1, &rx1);
        let _sym = ctx.alloc::<u64>(BURST).expect("PE 1's alloc");
        // Progress (apply, ack) until PE 0 is done.
        while let Err(TryRecvError::Empty) = stop.try_recv() {
            ctx.progress();
            std::thread::sleep(Duration::from_micros(20));
        }
        ctx.finalize().expect("PE 1's finalize");
    });
    let mut ctx = context(job, 0, &tx0, &rx0);
    let sym = ctx.alloc::<u64>(BURST).expect("PE 0's alloc");
    ctx.start_dedicated_progress(None)
        .expect("a dedicated progress thread");
    Pe0 {
        ctx,
        sym,
        done,
        pe1,
    }
}

/// `bursts` bursts of [`BURST`] puts through the ring (`ring`) or not; the
/// time of the puts alone (each burst's quiet is not timed).
fn bursts(p: &mut Pe0, ring: bool, bursts: u64) -> Duration {
    bursts_each(p, ring, bursts, |_| {})
}

/// As [`bursts`], handing each burst's time to `each` as well.
fn bursts_each(p: &mut Pe0, ring: bool, bursts: u64, mut each: impl FnMut(Duration)) -> Duration {
    p.ctx.set_submit_ring(ring).expect("set_submit_ring");
    let mut total = Duration::ZERO;
    for b in 0..bursts {
        let t = Instant::now();
        for k in 0..BURST {
            p.ctx.put(&p.sym, k, &[black_box(b)], 1).expect("put");
        }
        let e = t.elapsed();
        total += e;
        each(e);
        p.ctx.quiet().expect("quiet");
    }
    total
}

fn main() {
    let mut p = pair();
    // First use (the ring's registration), checked.
    bursts(&mut p, true, 1);
    bursts(&mut p, false, 1);
    let mut c = switchyard_benches::criterion_config().configure_from_args();
    let mut g = c.benchmark_group("context_tcp");
    for ring in [true, false] {
        let id = BenchmarkId::new("put8_burst", if ring { "ring" } else { "locked" });
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                // One iteration is one put.
                let n = iters.div_ceil(BURST as u64);
                let t = bursts(&mut p, ring, n);
                t.mul_f64(iters as f64 / (n * BURST as u64) as f64)
            });
        });
    }
    g.finish();
    c.final_summary();

    let (rounds, n) = if measuring() { (31, 200) } else { (1, 10) };
    let mut times = [Vec::new(), Vec::new()];
    let mut each = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        // Every other round the other case first.
        for ring in [r % 2 == 0, r % 2 != 0] {
            let k = usize::from(!ring);
            let t = bursts_each(&mut p, ring, n, |e| {
                each[k].push(e.as_nanos() as f64 / BURST as f64)
            });
            times[k].push(t.as_nanos() as f64 / (n * BURST as u64) as f64);
        }
    }
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    println!();
    println!(
        "quick cross-check (std::time::Instant, {rounds} rounds of {n} bursts of {BURST} puts \
         per case, interleaved; median ns per put on the application thread{}):",
        if measuring() {
            ""
        } else {
            ", test mode: not a measurement"
        }
    );
    for (k, name) in ["ring", "locked"].into_iter().enumerate() {
        println!("  put8_burst/{name:<8} {:>10.1}", median(times[k].clone()));
    }
    println!(
        "per burst (ns per put in one burst of {BURST}, over every burst of the rounds above: \
         p10 / p50 / p90 / p99; a burst the scheduler interrupted lands in the tail):"
    );
    for (k, name) in ["ring", "locked"].into_iter().enumerate() {
        let mut t = each[k].clone();
        t.sort_by(f64::total_cmp);
        let q = |f: f64| t[((t.len() - 1) as f64 * f) as usize];
        println!(
            "  put8_burst/{name:<8} {:>8.1} {:>8.1} {:>8.1} {:>10.1}",
            q(0.1),
            q(0.5),
            q(0.9),
            q(0.99)
        );
    }
    let Pe0 { ctx, done, pe1, .. } = p;
    let _ = done.send(());
    ctx.finalize().expect("PE 0's finalize");
    pe1.join().expect("PE 1");
}
