//! Small operations through the [`Context`] API to a same-node peer over
//! shared memory, each beside the raw access it ends in, on the same word of
//! the same mapping, in the same run.
//!
//! Two PEs of one job in one process: PE 1 runs in a thread of its own (it
//! takes part in the collective `alloc` and the final barrier, and waits
//! meanwhile), PE 0 measures. Both are on one node, so PE 0 reaches PE 1 over
//! shared memory (the peer's heap is mapped here).
//!
//! | id | what |
//! |---|---|
//! | `context_shm/put8/context` | `ctx.put(&sym, 0, &[v], 1)`: 8 bytes to PE 1 (bounds, select, shm driver, trace) |
//! | `context_shm/put8/raw` | the same word of PE 1's mapping written by one `AtomicU64` store (what the driver's 8-byte copy is) |
//! | `context_shm/get8/context` | `ctx.get(&sym, 0, &mut [v], 1)` |
//! | `context_shm/get8/raw` | one `AtomicU64` load of that word |
//! | `context_shm/fetch_add8/context` | `ctx.fetch_add(&sym, 0, 1, 1)` |
//! | `context_shm/fetch_add8/raw` | one `AtomicU64::fetch_add` (AcqRel) on that word |
//! | `context_shm/<op>/nostats` | the `context` case on a second job whose PEs keep no stats segment (`stats = off`): the cost of the counters is `context/nostats` |
//! | `context_shm/put8_self/context` | `ctx.put` of 8 bytes to PE 0 itself (class LOCAL, also shared memory) |
//!
//! | `context_shm_threads/put8/<T>` | `T` threads of PE 0 (1, 2), each on a context of its own ([`Pe::context`](switchyard::context::Pe::context)), each putting 8 bytes to its own line of PE 1; throughput in elements is the aggregate message rate |
//!
//! Both PEs trace as `CONTEXT_SHM_TRACE` says (`off`, `all`, `sample:N`;
//! the library's default, `sample:64`, without it).
//!
//! After criterion, a quick cross-check with a plain clock runs every case in
//! interleaved rounds and prints the median ns per operation and the
//! context/raw ratio (load from other processes falls on all cases alike);
//! then the aggregate rate of the thread cases and the ratio of 2 threads'
//! to 1 thread's (each thread needs a core of its own: on a machine with
//! two, the passive PE 1 and the rest of the system share them).
//!
//! Instruction counts: with `CONTEXT_SHM_COUNT=<case>:<n>` (case `put8`,
//! `get8`, `fetch_add8`, `put8_self`, each `/context` or `/raw`) the binary
//! runs only `n` operations of that case, no criterion, so that
//! `valgrind --tool=callgrind` gives the instructions of `n` operations; the
//! difference between two runs with different `n`, divided by the difference
//! of `n`, is the cost of one operation without the set-up:
//!
//! ```text
//! B=$(ls -t target/release/deps/context_shm-* | grep -v '\.d$' | head -1)
//! for n in 100000 200000; do
//!   CONTEXT_SHM_COUNT=put8/context:$n valgrind --tool=callgrind \
//!     --callgrind-out-file=/dev/null $B 2>&1 | grep 'refs'
//! done
//! ```

use std::{
    hint::black_box,
    sync::{
        Barrier,
        mpsc::{Receiver, Sender, channel},
    },
    time::{Duration, Instant},
};

use switchyard::{
    config::TraceMode,
    context::{Context, PeerInfo, Progress, Setup, Sym},
};
use switchyard_benches::measuring;
use switchyard_core::{
    class::NO_SWITCH,
    route::PolicyConfig,
    sync::atomic::{AtomicU64, Ordering},
};
use switchyard_shm::HugePages;

/// The trace mode of both PEs: `CONTEXT_SHM_TRACE` (`off`, `all`,
/// `sample:N`), else the library's default.
fn trace_mode() -> TraceMode {
    std::env::var("CONTEXT_SHM_TRACE").map_or(TraceMode::DEFAULT, |v| {
        TraceMode::parse(&v).expect("CONTEXT_SHM_TRACE: off, all or sample:N")
    })
}

/// The setup of PE `me` of the two-PE job `job`, its stats segment on or
/// off.
fn setup(job: u64, me: u32, stats: bool) -> Setup {
    let trace = trace_mode();
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
        shm_peers: true,
        symmetric_data: None,
        verbs_atomics: Default::default(),
        verbs_routed: true,
        verbs_context_sets: false,
        trace_records: 4096,
        stats,
        trace,
    }
}

/// PE `me`'s context: its segment's path goes to the other PE through `tx`,
/// the other's comes through `rx`; both on node 1.
fn context(job: u64, me: u32, stats: bool, tx: &Sender<String>, rx: &Receiver<String>) -> Context {
    let s = setup(job, me, stats);
    let seg = Context::create_segment(&s).expect("a shared-memory segment");
    let mine = seg.path().to_string_lossy().into_owned();
    tx.send(mine.clone()).expect("the other PE");
    let other = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the other PE's segment");
    let info = |path: String| PeerInfo {
        node: 1,
        switch: NO_SWITCH,
        tree: NO_SWITCH,
        shm: Some(path.into()),
        tcp: Vec::new(),
    };
    let peers = if me == 0 {
        [info(mine), info(other)]
    } else {
        [info(other), info(mine)]
    };
    Context::from_parts(s, seg, &peers, None).expect("a context")
}

/// Words of the bench block (one cache line).
const WORDS: usize = 8;

/// PE 0's half of the job: its context, the block, and what ends PE 1.
struct Pe0 {
    ctx: Context,
    sym: Sym<u64>,
    /// A line per thread of the thread cases.
    lanes: Sym<u64>,
    /// PE 1's copy of word 0 of `sym`, in PE 1's heap mapped here.
    remote: &'static AtomicU64,
    /// PE 0's own copy of word 1 of `sym`.
    local: &'static AtomicU64,
    done: Sender<String>,
    pe1: std::thread::JoinHandle<()>,
}

/// Starts PE 1 of a job in a thread and builds PE 0 here; both keep a
/// stats segment when `stats` is set (the library's default).
fn pair(stats: bool) -> Pe0 {
    let job = (0xC0_5A_u64 << 40 ^ u64::from(std::process::id()) << 8) + u64::from(stats);
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let pe1 = std::thread::spawn(move || {
        let mut ctx = context(job, 1, stats, &tx1, &rx1);
        let _sym = ctx.alloc::<u64>(WORDS).expect("PE 1's alloc");
        let _lanes = ctx.alloc::<u64>(WORDS * MAX_THREADS).expect("PE 1's alloc");
        // Wait until PE 0 is done (the sender drops or says so).
        let _ = rx1.recv();
        ctx.finalize().expect("PE 1's finalize");
    });
    let mut ctx = context(job, 0, stats, &tx0, &rx0);
    let sym = ctx.alloc::<u64>(WORDS).expect("PE 0's alloc");
    let lanes = ctx.alloc::<u64>(WORDS * MAX_THREADS).expect("PE 0's alloc");
    let (base, len) = ctx.peer_heap(1).expect("PE 1's heap is mapped here");
    let (own, _) = ctx.local_heap();
    assert!(sym.offset() + 8 * WORDS as u64 <= len);
    // SAFETY: the word is 8-aligned (blocks are 64-aligned, heaps page
    // aligned) and inside PE 1's heap (checked above), which stays mapped
    // as long as PE 0's context lives; `main` drops the context last. Other
    // agents touch it only through atomics and the driver's copies.
    let remote = unsafe { AtomicU64::from_ptr(base.add(sym.offset() as usize).cast()) };
    // SAFETY: as above, word 1 of the own heap's copy.
    let local = unsafe { AtomicU64::from_ptr(own.add(sym.offset() as usize + 8).cast()) };
    Pe0 {
        ctx,
        sym,
        lanes,
        remote,
        local,
        done: tx0,
        pe1,
    }
}

/// Most threads of the thread cases.
const MAX_THREADS: usize = 2;

/// `n` puts of 8 bytes by each of `threads` threads of PE 0, each on a
/// context of its own (made beforehand), to its own line of PE 1, started
/// together; the time from the start until the last one has quieted.
fn threads_round(p: &Pe0, ctxs: &mut [Context], n: u64) -> Duration {
    let start = Barrier::new(ctxs.len() + 1);
    let lanes = p.lanes;
    std::thread::scope(|s| {
        let workers: Vec<_> = ctxs
            .iter_mut()
            .enumerate()
            .map(|(t, c)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    for i in 0..n {
                        c.put(&lanes, WORDS * t, &[black_box(i)], 1).expect("put");
                    }
                    c.quiet().expect("quiet");
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for w in workers {
            w.join().expect("a putting thread");
        }
        t0.elapsed()
    })
}

/// The thread cases: criterion's, then the cross-check's rates and ratio.
fn threads(c: &mut criterion::Criterion, p: &Pe0) {
    let pe = p.ctx.pe();
    let mut ctxs: Vec<Vec<Context>> = (1..=MAX_THREADS)
        .map(|t| (0..t).map(|_| pe.context().expect("a context")).collect())
        .collect();
    let mut g = c.benchmark_group("context_shm_threads");
    for cs in &mut ctxs {
        g.throughput(criterion::Throughput::Elements(cs.len() as u64));
        g.bench_function(format!("put8/{}", cs.len()), |b| {
            b.iter_custom(|iters| threads_round(p, cs, iters))
        });
    }
    g.finish();
    let (rounds, n) = if measuring() {
        (11, 4_000_000)
    } else {
        (1, 1000)
    };
    let mut rates: Vec<Vec<f64>> = (0..MAX_THREADS)
        .map(|_| Vec::with_capacity(rounds))
        .collect();
    for _ in 0..rounds {
        for (cs, r) in ctxs.iter_mut().zip(&mut rates) {
            let secs = threads_round(p, cs, n).as_secs_f64();
            r.push((cs.len() as u64 * n) as f64 / secs / 1e6);
        }
    }
    let medians: Vec<f64> = rates
        .iter_mut()
        .map(|r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect();
    println!();
    println!(
        "threads (std::time::Instant, {rounds} rounds of {n} puts per thread, interleaved; \
         median aggregate M msg/s; {} CPUs online):",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for (t, m) in medians.iter().enumerate() {
        println!(
            "  put8 x {} threads {m:>10.2} M msg/s {:>8.2}x one thread's",
            t + 1,
            m / medians[0]
        );
    }
}

/// The cases, by name: `<op>/<context|raw|nostats>`; a `nostats` case is
/// its `context` case on a second job whose PEs keep no stats segment.
const CASES: [&str; 10] = [
    "put8/context",
    "put8/nostats",
    "put8/raw",
    "get8/context",
    "get8/nostats",
    "get8/raw",
    "fetch_add8/context",
    "fetch_add8/nostats",
    "fetch_add8/raw",
    "put8_self/context",
];

/// Runs `n` operations of `case` (on `p`, a `nostats` case on `q`);
/// returns a value folded from them.
#[inline(never)]
fn run(p: &mut Pe0, q: &mut Pe0, case: &str, n: u64) -> u64 {
    if let Some(op) = case.strip_suffix("/nostats") {
        return run_on(q, &format!("{op}/context"), n);
    }
    run_on(p, case, n)
}

/// Runs `n` operations of `case` on `p`.
#[inline(never)]
fn run_on(p: &mut Pe0, case: &str, n: u64) -> u64 {
    let (ctx, sym) = (&mut p.ctx, &p.sym);
    let mut acc = 0u64;
    match case {
        "put8/context" => {
            for i in 0..n {
                ctx.put(sym, 0, &[black_box(i)], 1).expect("put");
            }
        }
        "put8/raw" => {
            for i in 0..n {
                p.remote.store(black_box(i), Ordering::Relaxed);
            }
        }
        "get8/context" => {
            let mut v = [0u64];
            for _ in 0..n {
                ctx.get(sym, 0, &mut v, black_box(1)).expect("get");
                acc = acc.wrapping_add(v[0]);
            }
        }
        "get8/raw" => {
            for _ in 0..n {
                acc = acc.wrapping_add(black_box(p.remote).load(Ordering::Relaxed));
            }
        }
        "fetch_add8/context" => {
            for _ in 0..n {
                acc = acc.wrapping_add(ctx.fetch_add(sym, 0, 1u64, black_box(1)).expect("fadd"));
            }
        }
        "fetch_add8/raw" => {
            for _ in 0..n {
                acc = acc.wrapping_add(black_box(p.remote).fetch_add(1, Ordering::AcqRel));
            }
        }
        "put8_self/context" => {
            let me = ctx.my_pe();
            for i in 0..n {
                ctx.put(sym, 1, &[black_box(i)], me).expect("put");
            }
        }
        _ => panic!("unknown case {case}; one of {CASES:?}"),
    }
    acc
}

/// ns per operation of one round of `n` operations of `case`.
fn round(p: &mut Pe0, q: &mut Pe0, case: &str, n: u64) -> f64 {
    let t = Instant::now();
    black_box(run(p, q, case, n));
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let (mut p, mut q) = (pair(true), pair(false));
    // A first operation of each case (first-use paths), checked.
    for case in CASES {
        run(&mut p, &mut q, case, 1);
    }
    p.ctx.quiet().expect("quiet");
    q.ctx.quiet().expect("quiet");
    assert_eq!(p.local.load(Ordering::Relaxed), 0, "put8_self wrote 0");

    if let Ok(spec) = std::env::var("CONTEXT_SHM_COUNT") {
        let (case, n) = spec
            .split_once(':')
            .and_then(|(c, n)| Some((c.to_owned(), n.parse::<u64>().ok()?)))
            .expect("CONTEXT_SHM_COUNT=<case>:<n>");
        black_box(run(&mut p, &mut q, &case, n));
        println!("{case}: {n} operations");
    } else {
        let mut c = switchyard_benches::criterion_config().configure_from_args();
        let mut g = c.benchmark_group("context_shm");
        for case in CASES {
            g.bench_function(case, |b| b.iter(|| run(&mut p, &mut q, case, 1)));
        }
        g.finish();
        threads(&mut c, &p);
        c.final_summary();

        let (rounds, n) = if measuring() {
            (31, 1_000_000)
        } else {
            (1, 1000)
        };
        let mut times = vec![Vec::with_capacity(rounds); CASES.len()];
        for r in 0..rounds {
            // Every other round backwards, so that no case always runs
            // right after the same one.
            let order: Vec<usize> = if r % 2 == 0 {
                (0..CASES.len()).collect()
            } else {
                (0..CASES.len()).rev().collect()
            };
            for i in order {
                times[i].push(round(&mut p, &mut q, CASES[i], n));
            }
        }
        let median = |mut t: Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let medians: Vec<f64> = times.iter().cloned().map(median).collect();
        // The ratio of two cases: the median of their ratios round by
        // round (neighbours in time, so the machine's drift cancels).
        let paired = |a: usize, b: usize| {
            median(times[a].iter().zip(&times[b]).map(|(x, y)| x / y).collect())
        };
        println!();
        println!(
            "quick cross-check (std::time::Instant, {rounds} rounds of {n} operations per case, \
             interleaved; trace = {}; median ns/op, median of the rounds' ratios{}):",
            trace_mode(),
            if measuring() {
                ""
            } else {
                ", test mode: not a measurement"
            }
        );
        println!(
            "  {:<22} {:>10} {:>14} {:>16}",
            "case", "ns/op", "context/raw", "context/nostats"
        );
        for (case, ns) in CASES.iter().zip(&medians) {
            let me = CASES.iter().position(|c| c == case).unwrap_or(0);
            let of = |kind: &str| {
                case.strip_suffix("/context")
                    .and_then(|op| CASES.iter().position(|c| *c == format!("{op}/{kind}")))
                    .map_or(f64::NAN, |i| paired(me, i))
            };
            println!(
                "  {case:<22} {ns:>10.2} {:>13.2}x {:>15.3}x",
                of("raw"),
                of("nostats")
            );
        }
    }
    for Pe0 { ctx, done, pe1, .. } in [p, q] {
        let _ = done.send(String::new());
        ctx.finalize().expect("PE 0's finalize");
        pe1.join().expect("PE 1");
    }
}
