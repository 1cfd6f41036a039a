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
//! | `context_shm_threads/put8/<T>` | `T` threads of PE 0 (1, 2), each on a context of its own ([`Pe::context`](switchyard::context::Pe::context)), each putting 8 bytes to a word of PE 1's heap 128 bytes from the other thread's (`CONTEXT_SHM_LANE=64`: 64); throughput in elements is the aggregate message rate |
//! | `context_shm_threads/machine8/<T>` | the machine baseline of the row above: `T` threads started and pinned alike, each storing 8 bytes into a line of its own private memory and bumping two counters and a countdown of its own per operation (no library): how two threads of any such work scale on this machine now |
//!
//! Both PEs trace as `CONTEXT_SHM_TRACE` says (`off`, `all`, `sample:N`;
//! the library's default, `sample:64`, without it).
//!
//! After criterion, a quick cross-check with a plain clock runs every case in
//! interleaved rounds and prints the median ns per operation and the
//! context/raw ratio (load from other processes falls on all cases alike);
//! then the aggregate rate of the thread cases and the ratio of 2 threads'
//! to 1 thread's (each thread needs a core of its own: on a machine with
//! two, the passive PE 1 and the rest of the system share them). Each round
//! brackets the library's thread cases by the machine baseline's (1 and 2
//! threads before, 2 and 1 after): the bench prints both ratios per round
//! and the median of their quotient, library scaling over machine scaling,
//! which stays near 1 when the library adds no serialisation of its own
//! even while the host gives the two vCPUs less than two cores. The thread
//! cases pin thread `t` to the `t`-th CPU the process may run on
//! (`CONTEXT_SHM_PIN=off`: no pinning, for both); the run starts by printing
//! the CPU topology the (virtual) machine reports (core ids, hardware-thread
//! siblings, model), which shows a guest's view only: a host that places
//! two vCPUs on one core's two hardware threads does not say so there.
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
        let _lanes = ctx
            .alloc::<u64>(LANE_WORDS * MAX_THREADS)
            .expect("PE 1's alloc");
        // Wait until PE 0 is done (the sender drops or says so).
        let _ = rx1.recv();
        ctx.finalize().expect("PE 1's finalize");
    });
    let mut ctx = context(job, 0, stats, &tx0, &rx0);
    let sym = ctx.alloc::<u64>(WORDS).expect("PE 0's alloc");
    let lanes = ctx
        .alloc::<u64>(LANE_WORDS * MAX_THREADS)
        .expect("PE 0's alloc");
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

/// Words from one thread's target to the next one's in the thread cases:
/// 128 bytes, so that no two threads' targets share a line, nor a pair of
/// lines the adjacent-line prefetcher fetches together (`CONTEXT_SHM_LANE=64`
/// puts them 64 bytes apart, adjacent lines, as before).
const LANE_WORDS: usize = 16;

/// The words between two threads' targets: [`LANE_WORDS`], or 8 with
/// `CONTEXT_SHM_LANE=64`.
fn lane_words() -> usize {
    match std::env::var("CONTEXT_SHM_LANE").as_deref() {
        Ok("64") => WORDS,
        _ => LANE_WORDS,
    }
}

/// Operations of the machine baseline per operation of the library's case:
/// the baseline's are about eight times cheaper, so that both run about as
/// long and sample the machine over the same span.
const MACHINE_SCALE: u64 = 8;

/// Whether the thread cases pin their threads: thread `t` to the `t`-th
/// CPU the process may run on (`CONTEXT_SHM_PIN=off`: not pinned). Both the
/// library's threads and the machine baseline's are pinned (or not) alike.
fn pinning() -> bool {
    std::env::var("CONTEXT_SHM_PIN").map_or(true, |v| v != "off")
}

/// Pins the calling thread, `t`-th of a thread case, when [`pinning`].
fn pin(t: usize) {
    if pinning() {
        let cpus = switchyard::cpus::allowed();
        if let Some(&c) = cpus.get(t % cpus.len().max(1)) {
            let _ = switchyard::sys::pin_current_thread(c as usize);
        }
    }
}

/// Prints, for each online CPU, its core id, its hardware-thread siblings
/// and its model, as this (virtual) machine reports them.
fn print_topology() {
    let read = |p: String| {
        std::fs::read_to_string(p).map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned())
    };
    let online = read("/sys/devices/system/cpu/online".to_owned());
    let models: Vec<(u32, String)> = {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut cpu = None;
        let mut v = Vec::new();
        for line in info.lines() {
            let Some((k, val)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "processor" => cpu = val.trim().parse::<u32>().ok(),
                "model name" => v.extend(cpu.map(|c| (c, val.trim().to_owned()))),
                _ => {}
            }
        }
        v
    };
    println!(
        "CPU topology as this machine reports it (online {online}; thread cases {}):",
        if pinning() {
            "pinned, thread t on the t-th allowed CPU"
        } else {
            "not pinned"
        }
    );
    for c in switchyard::cpus::parse_list(&online).unwrap_or_default() {
        let t = |f: &str| read(format!("/sys/devices/system/cpu/cpu{c}/topology/{f}"));
        let model = models
            .iter()
            .find(|(m, _)| *m == c)
            .map_or("?", |(_, n)| n.as_str());
        println!(
            "  cpu{c}: core_id {} thread_siblings_list {} package {} model {model}",
            t("core_id"),
            t("thread_siblings_list"),
            t("physical_package_id")
        );
    }
}

/// `n` puts of 8 bytes by each of `threads` threads of PE 0, each on a
/// context of its own (made beforehand), to its own word of PE 1
/// ([`lane_words`] apart), started together; the time from the start until
/// the last one has quieted.
fn threads_round(p: &Pe0, ctxs: &mut [Context], n: u64) -> Duration {
    let start = Barrier::new(ctxs.len() + 1);
    let lanes = p.lanes;
    let lane = lane_words();
    std::thread::scope(|s| {
        let workers: Vec<_> = ctxs
            .iter_mut()
            .enumerate()
            .map(|(t, c)| {
                let start = &start;
                s.spawn(move || {
                    pin(t);
                    start.wait();
                    for i in 0..n {
                        c.put(&lanes, lane * t, &[black_box(i)], 1).expect("put");
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

/// One thread's private state of the machine baseline: the line it stores
/// into (as large as the heap area a thread of the library case writes: one
/// word, alone on its line) and its bookkeeping (an operation and a byte
/// counter, as the stats slot's, and a sampling countdown, as the trace's).
/// Aligned to 128 bytes: no two threads' states share a line, nor a pair of
/// lines the adjacent-line prefetcher fetches together.
#[repr(C, align(128))]
struct Private {
    word: AtomicU64,
    _rest: [u64; 7],
    ops: AtomicU64,
    bytes: AtomicU64,
    countdown: u32,
}

impl Private {
    fn new() -> Self {
        Private {
            word: AtomicU64::new(0),
            _rest: [0; 7],
            ops: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            countdown: 64,
        }
    }
}

/// The machine baseline of [`threads_round`]: the same loop shape (threads
/// spawned, pinned and started alike, `n` operations each), each operation
/// the cheapest equivalent of an 8-byte put: one 8-byte store into the
/// thread's own line, and the counters and countdown bumped. How well two
/// threads of any such work scale on this machine now.
fn machine_round(privs: &mut [Private], n: u64) -> Duration {
    let start = Barrier::new(privs.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = privs
            .iter_mut()
            .enumerate()
            .map(|(t, me)| {
                let start = &start;
                s.spawn(move || {
                    pin(t);
                    start.wait();
                    for i in 0..n {
                        black_box(&me.word).store(black_box(i), Ordering::Relaxed);
                        me.ops
                            .store(me.ops.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                        me.bytes
                            .store(me.bytes.load(Ordering::Relaxed) + 8, Ordering::Relaxed);
                        me.countdown -= 1;
                        if me.countdown == 0 {
                            me.countdown = black_box(64);
                        }
                    }
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for w in workers {
            w.join().expect("a storing thread");
        }
        t0.elapsed()
    })
}

/// Median of `v` (sorted in place; not empty).
fn median_of(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The thread cases: criterion's, then the cross-check's rates and ratios,
/// each round bracketing the library's cases by the machine baseline's.
fn threads(c: &mut criterion::Criterion, p: &Pe0) {
    let pe = p.ctx.pe();
    let mut ctxs: Vec<Vec<Context>> = (1..=MAX_THREADS)
        .map(|t| (0..t).map(|_| pe.context().expect("a context")).collect())
        .collect();
    let mut privs: Vec<Vec<Private>> = (1..=MAX_THREADS)
        .map(|t| (0..t).map(|_| Private::new()).collect())
        .collect();
    // Where the two threads' contexts lie: a line they share is written
    // by both (each context's own counters and countdowns).
    let at = |c: &Context| std::ptr::from_ref(c) as usize;
    let two = &ctxs[MAX_THREADS - 1];
    println!(
        "contexts of the {MAX_THREADS}-thread case: {} bytes each, aligned {}, at +0 and +{} \
         (first at {} mod 128)",
        std::mem::size_of::<Context>(),
        std::mem::align_of::<Context>(),
        at(&two[1]).wrapping_sub(at(&two[0])),
        at(&two[0]) % 128
    );
    let mut g = c.benchmark_group("context_shm_threads");
    for cs in &mut ctxs {
        g.throughput(criterion::Throughput::Elements(cs.len() as u64));
        g.bench_function(format!("put8/{}", cs.len()), |b| {
            b.iter_custom(|iters| threads_round(p, cs, iters))
        });
    }
    for ps in &mut privs {
        g.throughput(criterion::Throughput::Elements(ps.len() as u64));
        g.bench_function(format!("machine8/{}", ps.len()), |b| {
            b.iter_custom(|iters| machine_round(ps, iters))
        });
    }
    g.finish();
    let (rounds, n) = if measuring() {
        (11, 4_000_000)
    } else {
        (1, 1000)
    };
    // Per round: the library's aggregate rate per thread count, the
    // baseline's (the mean of its rates before and after), M msg/s.
    let mut lib: Vec<Vec<f64>> = vec![Vec::new(); MAX_THREADS];
    let mut mach: Vec<Vec<f64>> = vec![Vec::new(); MAX_THREADS];
    let rate =
        |threads: usize, n: u64, d: Duration| (threads as u64 * n) as f64 / d.as_secs_f64() / 1e6;
    let m = n * MACHINE_SCALE;
    for _ in 0..rounds {
        let mut before = [0.0; MAX_THREADS];
        for (ps, b) in privs.iter_mut().zip(&mut before) {
            *b = rate(ps.len(), m, machine_round(ps, m));
        }
        for (cs, r) in ctxs.iter_mut().zip(&mut lib) {
            r.push(rate(cs.len(), n, threads_round(p, cs, n)));
        }
        // After, in the reverse order: each count as far from the
        // library's in time on average as before.
        for (k, ps) in privs.iter_mut().enumerate().rev() {
            let after = rate(ps.len(), m, machine_round(ps, m));
            mach[k].push((before[k] + after) / 2.0);
        }
    }
    for ps in &privs {
        for me in ps {
            assert_eq!(
                me.ops.load(Ordering::Relaxed) * 8,
                me.bytes.load(Ordering::Relaxed),
                "the baseline's counters"
            );
        }
    }
    let last = MAX_THREADS - 1;
    let ratios =
        |r: &[Vec<f64>]| -> Vec<f64> { r[last].iter().zip(&r[0]).map(|(a, b)| a / b).collect() };
    let (lib_ratio, mach_ratio) = (ratios(&lib), ratios(&mach));
    let mut quotient: Vec<f64> = lib_ratio
        .iter()
        .zip(&mach_ratio)
        .map(|(l, m)| l / m)
        .collect();
    println!();
    println!(
        "threads (std::time::Instant, {rounds} rounds of {n} puts per thread ({m} baseline \
         operations), interleaved: machine baseline, library, machine baseline again; median \
         aggregate M msg/s; {} CPUs online; targets {} bytes apart{}):",
        std::thread::available_parallelism().map_or(0, usize::from),
        8 * lane_words(),
        if measuring() {
            ""
        } else {
            ", test mode: not a measurement"
        }
    );
    let (mut lib_m, mut mach_m) = (Vec::new(), Vec::new());
    for t in 0..MAX_THREADS {
        lib_m.push(median_of(&mut lib[t].clone()));
        mach_m.push(median_of(&mut mach[t].clone()));
    }
    for t in 0..MAX_THREADS {
        println!(
            "  put8 x {} threads {:>10.2} M msg/s {:>6.2}x one thread's   machine8 x {} threads \
             {:>10.2} M op/s {:>6.2}x",
            t + 1,
            lib_m[t],
            lib_m[t] / lib_m[0],
            t + 1,
            mach_m[t],
            mach_m[t] / mach_m[0]
        );
    }
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("  per round, 2/1 threads: library {}", fmt(&lib_ratio));
    println!("  per round, 2/1 threads: machine {}", fmt(&mach_ratio));
    println!(
        "  scaling, median of the rounds: library {:.2}x, machine {:.2}x, library/machine {:.2}",
        median_of(&mut lib_ratio.clone()),
        median_of(&mut mach_ratio.clone()),
        median_of(&mut quotient)
    );
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
        print_topology();
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
