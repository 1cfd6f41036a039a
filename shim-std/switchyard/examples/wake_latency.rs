//! Wake latency of `wait_until` when a flag comes every millisecond: PE 1
//! puts the time (ns since a shared start) into PE 0's word every `PERIOD`
//! µs; PE 0 waits for each new value and records how late it woke. The two
//! PEs are two threads of this process on shared memory (no launcher), each
//! with its own context; every progress mode runs in the same process, one
//! after the other, so their figures compare. Run with:
//!
//! ```text
//! cargo run --release -p switchyard --example wake_latency [N] [PERIOD_US]
//! ```
//!
//! Prints, per mode, the p50, p90 and p99 of the wake latency in µs.

use std::{
    path::PathBuf,
    sync::mpsc::{Receiver, Sender, channel},
    time::{Duration, Instant},
};

use switchyard::{
    config::{TraceMode, VerbsAtomics},
    context::{Cmp, Context, PeerInfo, Progress, Setup},
};
use switchyard_core::{class::NO_SWITCH, route::PolicyConfig};
use switchyard_shm::HugePages;

fn setup(job: u64, me: u32, progress: Progress) -> Setup {
    Setup {
        job_id: job,
        me,
        n_pes: 2,
        heap_size: 1 << 20,
        huge_pages: HugePages::Off,
        numa_node: None,
        op_timeout: Duration::from_secs(10),
        progress,
        policy: PolicyConfig::default(),
        connect_timeout: Duration::from_secs(10),
        shm_peers: true,
        symmetric_data: None,
        verbs_atomics: VerbsAtomics::Auto,
        verbs_routed: true,
        verbs_context_sets: false,
        trace_records: 64,
        trace: TraceMode::DEFAULT,
        stats: false,
    }
}

fn context(s: Setup, tx: &Sender<PathBuf>, rx: &Receiver<PathBuf>) -> Context {
    let seg = Context::create_segment(&s).expect("segment");
    let mine = seg.path().to_path_buf();
    tx.send(mine.clone()).expect("the other PE");
    let other = rx.recv().expect("the other PE's segment");
    let info = |path: PathBuf| PeerInfo {
        node: 1,
        switch: NO_SWITCH,
        tree: NO_SWITCH,
        shm: Some(path),
        tcp: Vec::new(),
    };
    let peers = if s.me == 0 {
        [info(mine), info(other)]
    } else {
        [info(other), info(mine)]
    };
    Context::from_parts(s, seg, &peers, None).expect("context")
}

/// Low bits of a flag: its sequence number (the rest: the time stamp).
const SEQ_BITS: u32 = 20;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// The wake latencies (ns) of `n` flags, one every `period`.
fn run(job: u64, progress: Progress, n: usize, period: Duration) -> Vec<u64> {
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let t0 = Instant::now();
    let pe1 = std::thread::spawn(move || {
        let mut ctx = context(setup(job, 1, progress), &tx1, &rx1);
        let flag = ctx.alloc::<u64>(1).expect("alloc");
        ctx.barrier_all().expect("barrier");
        let mut next = Instant::now() + period;
        for i in 0..n as u64 {
            // Sleep most of the period, spin the rest: the put leaves on time.
            while let Some(d) = next.checked_duration_since(Instant::now()) {
                if d > Duration::from_micros(200) {
                    std::thread::sleep(d - Duration::from_micros(150));
                }
            }
            let stamp = t0.elapsed().as_nanos() as u64;
            ctx.put(&flag, 0, &[stamp << SEQ_BITS | i], 0).expect("put");
            next += period;
        }
        ctx.barrier_all().expect("barrier");
        ctx.finalize().expect("finalize");
    });
    let mut ctx = context(setup(job, 0, progress), &tx0, &rx0);
    let flag = ctx.alloc::<u64>(1).expect("alloc");
    ctx.barrier_all().expect("barrier");
    let mut lat = Vec::with_capacity(n);
    let mut last = 0;
    // A flag overwritten before this PE looked (it was descheduled) is not
    // counted; the last one ends the loop.
    while last & SEQ_MASK != n as u64 - 1 {
        let v = ctx.wait_until(&flag, 0, Cmp::Gt, last).expect("wait");
        let now = t0.elapsed().as_nanos() as u64;
        lat.push(now.saturating_sub(v >> SEQ_BITS));
        last = v;
    }
    ctx.barrier_all().expect("barrier");
    ctx.finalize().expect("finalize");
    pe1.join().expect("PE 1");
    lat
}

fn pct(sorted: &[u64], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
        .clamp(1, SEQ_MASK as usize);
    let period_us: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let period = Duration::from_micros(period_us);
    let base = u64::from(std::process::id()) << 8 ^ 0x3A4E_0000_0000_0000;
    let modes = [
        ("busy", Progress::Busy),
        ("adaptive", Progress::Adaptive { spin: 2000 }),
    ];
    println!("wake latency, one flag every {period_us} µs, {n} flags (µs)");
    for (i, (name, mode)) in modes.into_iter().enumerate() {
        let mut lat = run(base + i as u64, mode, n, period);
        lat.sort_unstable();
        println!(
            "{name:>9}: p50 {:>7.1}  p90 {:>7.1}  p99 {:>7.1}",
            pct(&lat, 50),
            pct(&lat, 90),
            pct(&lat, 99)
        );
    }
}
