//! `switchyard perf`: multi-process benchmarks of the real data path, each
//! beside a baseline measured in the same run.
//!
//! ```text
//! switchyard perf [TEST] [-n PES] [--size S | --sizes A..B] [--iters N]
//!                 [--warmup N] [--transport auto|shm|tcp|verbs] [--sim NAME] [--json]
//!                 [--plot FILE.svg]
//! ```
//!
//! `--plot` also draws each latency result's percentile curve beside its
//! baseline's into an SVG (the `plot` module).
//!
//! Tests, each beside the baseline that times the same thing without the
//! library (the worker's and the baselines' module docs say exactly what is
//! timed):
//!
//! * `put-lat`: a ping-pong on a flag, one-way = RTT/2; baseline `cacheline`,
//!   a bare cache-line ping-pong between two pinned threads (RTT/2).
//! * `get-lat`: one get of `size` bytes that PE 1 has just written (PE 1
//!   writes, flags, PE 0 times the get alone); baseline `remote-read`, one
//!   thread reading `size` bytes another core has just written.
//! * `atomic-lat`: one fetch-add on a word PE 1 has just written; baseline
//!   `remote-rmw`, one `fetch_add` on a word another core has just written.
//! * `put-bw`: a window of non-blocking puts, then quiet; baseline `memcpy`
//!   (single-thread copy).
//! * `put-rate`: message rate of small blocking puts (`put` from a local
//!   buffer, each carrying its sequence number), `--window` of them then a
//!   quiet; baseline `raw-store`, the same loop as plain stores into a
//!   mapping shared with a second process, a Release store of a counter it
//!   polls per window.
//! * `get-rate`: message rate of non-blocking gets of `size` bytes,
//!   `--window` of them then a quiet; baseline `raw-load`, the same loop as
//!   plain loads from a mapping shared with a second process.
//! * `atomic-rate`: rate of back-to-back blocking fetch-adds on one word of
//!   PE 1 (each old value checked); baseline `raw-atomic`, the same loop of
//!   `fetch_add` on a word of a mapping shared with a second process.
//!
//! The rate tests report operations per second (the `msg/s` column, and
//! `msgs_per_s` in JSON) and the ratio of the two rates; the worker checks
//! after each run that the target saw every operation (the last put's
//! number, the get's bytes, the counter's total), and so does each
//! baseline's second process. Default sizes: 8 and 64 bytes (64 over TCP);
//! `atomic-rate` is 8 bytes. A rate test's sizes are 1 to 64 bytes (1 B is
//! the OSU benchmarks' smallest message rate, 64 B a cache line; past it
//! the cost is in the bytes moved, which `put-bw` measures).
//!
//! Without a TEST, a short default suite runs and prints each result's
//! ratio to its baseline.
//!
//! The command launches its own PEs through [`switchyard_launch`], pinned one per
//! core where there are enough cores: each PE runs `switchyard perf --worker`
//! and PE 0 writes its measurements to a file the driver reads back.
//!
//! ## Over TCP
//!
//! `--transport tcp` launches the PEs with `SWITCHYARD_TRANSPORTS=tcp`, so the
//! context connects them only over TCP, even on one node: the measured path is
//! the TCP driver's. The baselines are then TCP too: `tcp-pingpong`
//! (busy-polled ping-pong of the test's message size over a bare connected
//! socket pair, RTT/2) for `put-lat`, `tcp-rtt` (the same, the full round
//! trip: a get or fetch-add is a request and a reply) for `get-lat` and
//! `atomic-lat`, `tcp-stream` (one thread
//! writing, one reading, with `put-bw`'s sizes and message counts) for
//! `put-bw`, `tcp-records` (a window of `size`-byte records per `send`, then
//! the reader's count back) for `put-rate`, and `tcp-rr` (a request/response
//! stream with the test's window of requests outstanding: `--window` for
//! `get-rate`, 1 for `atomic-rate`, whose fetch-adds are blocking) for
//! `get-rate` and `atomic-rate` (see the `baseline::rate` module).
//! `tcp-pingpong` and `tcp-stream` also run on their own, without PEs:
//! `switchyard perf tcp-pingpong` and `switchyard perf tcp-stream`. Default sizes over TCP:
//! 64 B for `put-lat`, 64, 4K and 1M for `put-bw`.
//!
//! ## Over RDMA verbs
//!
//! `--transport verbs` measures the verbs driver on its own ([`verbs`]): two
//! drivers in this process on one device, `--qd-sweep` adds queue depths 1
//! to 64 to the latency tests. Without a usable device it fails at once
//! with the probe's reason.
//!
//! `--sim NAME` launches the PEs in the running simulated cluster NAME
//! ([`switchyard_launch::sim`]), one per node (so PEs 0 and 1 are on different nodes and
//! talk over the rails), and runs the TCP baselines between the first two
//! nodes' namespaces over rail 0 (the listener on node 1's address, the
//! timing side in node 0, as PEs 1 and 0). Without `--sim`, everything runs
//! on this machine over loopback (127.0.0.1).

mod args;
mod baseline;
mod bench;
mod channel;
mod job;
mod peer;
mod plan;
mod plot;
mod report;
pub mod stats;
// Without the `verbs` feature, a stand-in that says why there is no verbs.
#[cfg_attr(not(feature = "verbs"), path = "verbs_off.rs")]
pub mod verbs;
mod worker;

use std::path::PathBuf;

pub(crate) use args::ABOUT;
pub use args::{MAX_ITERS, MAX_QD_SWEEP_ITERS, MAX_THREADS, PerfArgs, Sizes};
use bench::{Bench, merge_baselines};
use plan::{Rounds, steps};
#[cfg(test)]
use report::table;
use report::{Progress, header};
use stats::Measurement;
pub use worker::WorkerPlan;

use crate::Output;

/// A perf test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Put ping-pong latency.
    PutLat,
    /// Blocking get latency.
    GetLat,
    /// Fetch-add latency.
    AtomicLat,
    /// Non-blocking put bandwidth.
    PutBw,
    /// Small-put message rate.
    PutRate,
    /// Small non-blocking get rate.
    GetRate,
    /// Fetch-add rate.
    AtomicRate,
}

impl Test {
    /// The test's name.
    pub const fn name(self) -> &'static str {
        match self {
            Test::PutLat => "put-lat",
            Test::GetLat => "get-lat",
            Test::AtomicLat => "atomic-lat",
            Test::PutBw => "put-bw",
            Test::PutRate => "put-rate",
            Test::GetRate => "get-rate",
            Test::AtomicRate => "atomic-rate",
        }
    }

    fn parse(s: &str) -> Option<Test> {
        Some(match s {
            "put-lat" => Test::PutLat,
            "get-lat" => Test::GetLat,
            "atomic-lat" => Test::AtomicLat,
            "put-bw" => Test::PutBw,
            "put-rate" => Test::PutRate,
            "get-rate" => Test::GetRate,
            "atomic-rate" => Test::AtomicRate,
            _ => return None,
        })
    }

    fn is_latency(self) -> bool {
        matches!(self, Test::PutLat | Test::GetLat | Test::AtomicLat)
    }

    fn is_rate(self) -> bool {
        matches!(self, Test::PutRate | Test::GetRate | Test::AtomicRate)
    }
}

/// A baseline run on its own, as a test (no PEs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standalone {
    /// `tcp-pingpong`.
    TcpPingpong,
    /// `tcp-stream`.
    TcpStream,
}

impl Standalone {
    const fn name(self) -> &'static str {
        match self {
            Standalone::TcpPingpong => "tcp-pingpong",
            Standalone::TcpStream => "tcp-stream",
        }
    }

    fn parse(s: &str) -> Option<Standalone> {
        Some(match s {
            "tcp-pingpong" => Standalone::TcpPingpong,
            "tcp-stream" => Standalone::TcpStream,
            _ => return None,
        })
    }
}

/// The variable that restricts the transports a PE's context connects with
/// (read by the context).
pub const TRANSPORTS_VAR: &str = "SWITCHYARD_TRANSPORTS";

#[derive(Debug, Clone)]
struct Options {
    test: Option<Test>,
    /// `channel-lat`, `channel-bw` or `broadcast-bw` (`channel.rs`).
    channel: Option<channel::Which>,
    /// `--subscribers`: broadcast-bw's subscriber PEs (default 2).
    subscribers: u32,
    standalone: Option<Standalone>,
    n: u32,
    sizes: Option<Vec<u64>>,
    iters: Option<u64>,
    warmup: Option<u64>,
    window: u64,
    json: bool,
    transport: String,
    sim: Option<String>,
    worker_out: Option<PathBuf>,
    #[cfg_attr(
        not(feature = "verbs"),
        allow(dead_code, reason = "read by the verbs measurement")
    )]
    qd_sweep: bool,
    /// `--plot FILE.svg`.
    plot: Option<PathBuf>,
    /// `--threads N`: PE 0's application threads in a rate test.
    threads: u32,
}

impl Options {
    /// Whether the PEs talk over TCP (`--transport tcp`, or on different
    /// nodes of a sim): TCP baselines and defaults.
    fn over_tcp(&self) -> bool {
        self.transport == "tcp" || self.sim.is_some()
    }
}

/// Runs `switchyard perf` (or, with `--worker`, one PE of a measurement).
/// The results are printed as they come; the returned [`Output`] carries
/// only the exit status, or a usage error.
pub fn run(args: &PerfArgs) -> Output {
    let o = match args.options() {
        Ok(o) => o,
        Err(e) => return crate::cli::usage_error(&["perf"], e),
    };
    if let Some(w) = o.channel {
        return channel::run(args.worker, &o, w);
    }
    if args.worker {
        return Output::status(worker_main(&o));
    }
    match drive(&o) {
        Ok(()) => Output::status(0),
        Err(e) => Output {
            code: 1,
            stdout: String::new(),
            stderr: format!("switchyard perf: error: {e}\n"),
        },
    }
}

fn worker_main(o: &Options) -> u8 {
    let Some(test) = o.test else {
        eprintln!("switchyard perf --worker: no test");
        return crate::EXIT_USAGE;
    };
    let step = steps(o).remove(0);
    let plan = WorkerPlan {
        test,
        sizes: step.sizes,
        iters: step.iters,
        warmup: step.warmup,
        window: step.window,
        tcp: o.transport == "tcp",
        threads: o.threads,
    };
    let result = switchyard::context::Context::from_env()
        .map_err(worker::WorkerError::from)
        .and_then(|mut ctx| {
            let r = worker::run(&mut ctx, &plan)?;
            let me = ctx.my_pe();
            ctx.finalize()?;
            Ok((me, r))
        });
    match result {
        Ok((0, r)) => {
            let json = serde_json::to_string(&r).unwrap_or_default();
            if let Some(path) = &o.worker_out
                && let Err(e) = std::fs::write(path, json)
            {
                eprintln!("cannot write results to {}: {e}", path.display());
                return 1;
            }
            0
        }
        Ok(_) => 0,
        Err(e) => {
            eprintln!("switchyard perf worker: {e}");
            1
        }
    }
}

fn drive(o: &Options) -> Result<(), String> {
    match o.transport.as_str() {
        "verbs" => return verbs::drive(o),
        "shm" if o.sim.is_some() => {
            return Err(
                "--transport shm cannot cross nodes: under --sim each PE is on a node of its own (use tcp or auto)"
                    .into(),
            );
        }
        _ => {}
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = (0, 1 % ncpus);
    let place = job::place(o)?;
    if let Some(which) = o.standalone {
        return bench::drive_standalone(o, which, &place, cpus, ncpus);
    }
    // PE 0's threads need more than one core: no pinning with --threads.
    let pinned = (o.n as usize) <= ncpus && o.threads <= 1;
    let bench = Bench {
        cpus,
        tcp: o.over_tcp().then(|| place.tcp.clone()),
    };
    let steps = steps(o);
    let mut progress = Progress::new(steps.len() * 2, o.json);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let mut rows: Vec<(Measurement, Option<Measurement>)> = Vec::new();
    let mut drift: Vec<String> = Vec::new();
    for step in &steps {
        progress.step(&format!("baseline for {}", step.test.name()));
        let before = bench.baselines(step)?;
        progress.done += 1;
        progress.step(&format!("{} with {} PEs", step.test.name(), o.n));
        let ms = job::run(o, step, &exe, &place, pinned)?;
        // The baseline again, right after: the host moves the vCPUs between
        // near and far cores every few minutes, so a ratio is against the mean
        // of before and after, and a baseline that moved is reported.
        let after = bench.baselines(step)?;
        let base: Vec<Measurement> = before
            .into_iter()
            .zip(after)
            .filter_map(|(b, a)| merge_baselines(Some(b), Some(a), &mut drift))
            .collect();
        for m in ms {
            let b = base
                .iter()
                .find(|b| b.size == m.size && b.latency.is_some() == m.latency.is_some())
                .or_else(|| {
                    base.iter()
                        .find(|b| b.test == "cacheline" && m.latency.is_some())
                })
                .cloned();
            rows.push((m, b));
        }
        progress.done += 1;
    }
    progress.finish();
    let header = header(o, &place, pinned);
    report::emit(o, &place, (pinned, ncpus), &mut rows, &header, &drift)
}

#[cfg(test)]
mod test;
