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
mod channel;
mod peer;
mod plot;
pub mod stats;
// Without the `verbs` feature, a stand-in that says why there is no verbs.
#[cfg_attr(not(feature = "verbs"), path = "verbs_off.rs")]
pub mod verbs;
mod worker;

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

pub(crate) use args::ABOUT;
pub use args::{MAX_ITERS, MAX_QD_SWEEP_ITERS, PerfArgs, Sizes};
use baseline::TcpPath;
use stats::Measurement;
use switchyard::config::{Key, format_size};
use switchyard_launch::{self as launch, Bind, LaunchOptions};
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

/// The shape of a bandwidth or rate run: `warm` unmeasured rounds, then
/// `rounds` measured ones, of `window` operations each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rounds {
    /// Operations per round (at least 1).
    window: u64,
    /// Measured rounds (at least 1).
    rounds: u64,
    /// Unmeasured rounds first.
    warm: u64,
}

impl Rounds {
    /// At least `iters` measured operations and `warmup` unmeasured ones,
    /// in whole rounds of `window`.
    fn new(iters: u64, warmup: u64, window: u64) -> Rounds {
        let window = window.max(1);
        Rounds {
            window,
            rounds: iters.div_ceil(window).max(1),
            warm: warmup.div_ceil(window),
        }
    }

    /// Measured operations.
    fn ops(self) -> u64 {
        self.rounds * self.window
    }

    /// All operations, warm-up included.
    fn total_ops(self) -> u64 {
        (self.rounds + self.warm) * self.window
    }

    /// Runs `round` (given its index) for the warm-up rounds, then for the
    /// measured ones with the clock running; the seconds those took, or the
    /// first error.
    fn time<E>(self, mut round: impl FnMut(u64) -> Result<(), E>) -> Result<f64, E> {
        for i in 0..self.warm {
            round(i)?;
        }
        let t0 = Instant::now();
        for i in self.warm..self.warm + self.rounds {
            round(i)?;
        }
        Ok(t0.elapsed().as_secs_f64())
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
    /// `channel-lat` or `channel-bw` (`channel.rs`).
    channel: Option<channel::Which>,
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
}

impl Options {
    /// Whether the PEs talk over TCP (`--transport tcp`, or on different
    /// nodes of a sim): TCP baselines and defaults.
    fn over_tcp(&self) -> bool {
        self.transport == "tcp" || self.sim.is_some()
    }
}

/// One step of a run: a test over some sizes.
#[derive(Debug, Clone)]
struct Step {
    test: Test,
    sizes: Vec<u64>,
    iters: u64,
    warmup: u64,
    /// Operations per quiet (`put-bw`, `put-rate`, `get-rate`); 1 for
    /// `atomic-rate`, whose fetch-adds are blocking.
    window: u64,
}

impl Step {
    /// The rounds of a rate test's run.
    fn rounds(&self) -> Rounds {
        Rounds::new(self.iters, self.warmup, self.window)
    }
}

/// Default measured operations of a rate test: enough for a steady rate
/// (tens of milliseconds on shared memory), about a second over TCP, where
/// `atomic-rate` is a round trip per operation.
fn rate_iters(test: Test, tcp: bool) -> u64 {
    match (test, tcp) {
        (Test::AtomicRate, true) => 20_000,
        (_, true) => 50_000,
        _ => 2_000_000,
    }
}

/// How long one measurement's job may run (the launcher's limit).
const WORKER_TIMEOUT: Duration = Duration::from_secs(300);

fn steps(o: &Options) -> Vec<Step> {
    let mk = |test: Test, sizes: Vec<u64>, iters: u64| {
        let iters = o.iters.unwrap_or(iters);
        Step {
            test,
            // atomic-rate moves one 8-byte word (options refuse another
            // --size).
            sizes: if test == Test::AtomicRate {
                vec![8]
            } else {
                o.sizes.clone().unwrap_or(sizes)
            },
            iters,
            warmup: o.warmup.unwrap_or(iters / 10),
            window: if test == Test::AtomicRate {
                1
            } else {
                o.window
            },
        }
    };
    let tcp = o.over_tcp();
    let lat_size = |t: Test| if tcp && t == Test::PutLat { 64 } else { 8 };
    let rate_sizes = if tcp { vec![64] } else { vec![8, 64] };
    let tcp_bw = vec![64, 4096, 1 << 20];
    match o.test {
        Some(t) if t.is_latency() => vec![mk(t, vec![lat_size(t)], 20_000)],
        Some(t) if t.is_rate() => vec![mk(t, rate_sizes, rate_iters(t, tcp))],
        Some(t) if tcp => vec![mk(t, tcp_bw, 4096)],
        Some(t) => vec![mk(t, args::default_bw_sizes(), 4096)],
        None => vec![
            mk(Test::PutLat, vec![lat_size(Test::PutLat)], 20_000),
            mk(Test::GetLat, vec![8], 20_000),
            mk(Test::AtomicLat, vec![8], 20_000),
            mk(Test::PutBw, vec![64, 4096, 1 << 20], 2048),
            // One size, a quarter of the iterations: the suite stays short.
            mk(
                Test::PutRate,
                vec![if tcp { 64 } else { 8 }],
                rate_iters(Test::PutRate, tcp) / 4,
            ),
        ],
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

/// Shows progress on a terminal (a bar) or as plain lines.
struct Progress {
    tty: bool,
    total: usize,
    done: usize,
    start: Instant,
    quiet: bool,
}

impl Progress {
    fn step(&mut self, what: &str) {
        if self.quiet {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.tty {
            if self.start.elapsed() > Duration::from_secs(1) || self.done > 0 {
                let width = 30;
                let filled = width * self.done / self.total.max(1);
                let _ = write!(
                    err,
                    "\r[{}{}] {}/{} {what:<40}",
                    "=".repeat(filled),
                    " ".repeat(width - filled),
                    self.done,
                    self.total
                );
                let _ = err.flush();
            }
        } else {
            let _ = writeln!(err, "perf: [{}/{}] {what}", self.done + 1, self.total);
        }
    }

    fn finish(&mut self) {
        if self.tty && !self.quiet {
            let _ = write!(std::io::stderr(), "\r{:80}\r", "");
        }
    }
}

/// Where a run happens: the sim (if any, with one PE per node) and the path
/// of the TCP baselines.
struct Place {
    sim: Option<switchyard_launch::sim::SimState>,
    tcp: TcpPath,
    /// How the TCP path reads in the table's header.
    tcp_desc: String,
}

fn place(o: &Options) -> Result<Place, String> {
    let Some(name) = &o.sim else {
        return Ok(Place {
            sim: None,
            tcp: TcpPath::loopback(),
            tcp_desc: "loopback 127.0.0.1".into(),
        });
    };
    let sim = switchyard_launch::sim::Sim::open(name).map_err(|e| format!("--sim {name}: {e}"))?;
    let mut state = sim.state().clone();
    let nodes = state.nodes.len();
    if nodes < 2 {
        return Err(format!(
            "--sim {name}: the sim has {nodes} node(s); perf needs two (PEs 0 and 1 on different nodes)"
        ));
    }
    if o.standalone.is_none() && o.n as usize > nodes {
        return Err(format!(
            "--sim {name}: -n {} needs a node per PE and the sim has {nodes}",
            o.n
        ));
    }
    let (client, server) = (&state.nodes[0], &state.nodes[1]);
    let rail0 = |n: &switchyard_launch::sim::SimNode| {
        n.addrs
            .first()
            .copied()
            .ok_or_else(|| format!("--sim {name}: node {} has no rail address", n.host))
    };
    let server_ip = rail0(server)?;
    let tcp = TcpPath {
        server_ip: std::net::IpAddr::V4(server_ip),
        server_netns: Some(switchyard_launch::sim::netns_path(&server.netns)),
        client_netns: Some(switchyard_launch::sim::netns_path(&client.netns)),
    };
    let tcp_desc = format!(
        "sim {name}: {} ({}) -> {} ({server_ip}), rail 0",
        client.host,
        rail0(client)?,
        server.host
    );
    // One PE per node: PE 0 on node 0, PE 1 on node 1.
    state.pes_per_node = 1;
    Ok(Place {
        sim: Some(state),
        tcp,
        tcp_desc,
    })
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
    let place = place(o)?;
    if let Some(which) = o.standalone {
        return drive_standalone(o, which, &place, cpus, ncpus);
    }
    let pinned = (o.n as usize) <= ncpus;
    let bench = Bench {
        cpus,
        tcp: o.over_tcp().then(|| place.tcp.clone()),
    };
    let steps = steps(o);
    let mut progress = Progress {
        tty: std::io::stderr().is_terminal(),
        total: steps.len() * 2,
        done: 0,
        start: Instant::now(),
        quiet: o.json,
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let dir = std::env::temp_dir();
    let mut rows: Vec<(Measurement, Option<Measurement>)> = Vec::new();
    let mut drift: Vec<String> = Vec::new();
    for step in &steps {
        progress.step(&format!("baseline for {}", step.test.name()));
        let before = bench.baselines(step)?;
        progress.done += 1;
        progress.step(&format!("{} with {} PEs", step.test.name(), o.n));
        let out = dir.join(format!(
            "switchyard-perf-{}-{}.json",
            std::process::id(),
            step.test.name()
        ));
        let _ = std::fs::remove_file(&out);
        let mut args: Vec<std::ffi::OsString> = vec![
            "perf".into(),
            "--worker".into(),
            step.test.name().into(),
            "--iters".into(),
            step.iters.to_string().into(),
            "--warmup".into(),
            step.warmup.to_string().into(),
            "--window".into(),
            step.window.to_string().into(),
            "--worker-out".into(),
            out.clone().into(),
        ];
        if o.over_tcp() {
            args.extend(["--transport".into(), "tcp".into()]);
        }
        let list: Vec<String> = step.sizes.iter().map(u64::to_string).collect();
        args.extend(["--sizes".into(), list.join(",").into()]);
        let mut lo = LaunchOptions::new(o.n, exe.clone());
        lo.args = args;
        lo.bind = if pinned { Bind::Core } else { Bind::None };
        lo.timeout = Some(WORKER_TIMEOUT);
        lo.sim = place.sim.clone();
        lo.env
            .push(("SWITCHYARD_HEAP_SIZE".into(), heap_for(&step.sizes)));
        if o.transport == "tcp" {
            lo.env.push((TRANSPORTS_VAR.into(), "tcp".into()));
        }
        if step.test.is_rate() {
            // PE 1 waits in a barrier for all of PE 0's stream, which may
            // outlast the 10 s default of an operation's wait: the job's
            // own limit bounds it instead.
            lo.env.push((
                Key::OpTimeout.env().into(),
                format!("{}s", WORKER_TIMEOUT.as_secs()),
            ));
        }
        let outcome = launch::launch(&lo).map_err(|e| e.to_string())?;
        if !outcome.success() {
            return Err(format!(
                "{} failed: {:?}{}",
                step.test.name(),
                outcome.end,
                outcome
                    .bootstrap_error
                    .map(|b| format!(" ({b})"))
                    .unwrap_or_default()
            ));
        }
        let text = std::fs::read_to_string(&out).map_err(|e| {
            format!(
                "no results from {} ({}): {e}",
                step.test.name(),
                out.display()
            )
        })?;
        let _ = std::fs::remove_file(&out);
        let ms: Vec<Measurement> =
            serde_json::from_str(&text).map_err(|e| format!("bad results file: {e}"))?;
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
    plot::finish(o, &mut rows, &header)?;
    if o.json {
        print_json(o, &place, pinned, ncpus, &rows);
    } else {
        print!("{}", table(&rows, &header));
    }
    for d in &drift {
        eprintln!("perf: warning: {d}");
    }
    Ok(())
}

/// `switchyard perf tcp-pingpong|tcp-stream`: the baseline alone, no PEs.
fn drive_standalone(
    o: &Options,
    which: Standalone,
    place: &Place,
    cpus: (usize, usize),
    ncpus: usize,
) -> Result<(), String> {
    let (sizes, iters) = match which {
        Standalone::TcpPingpong => (vec![64], 20_000),
        Standalone::TcpStream => (vec![64, 4096, 1 << 20], 2048),
    };
    let sizes = o.sizes.clone().unwrap_or(sizes);
    let iters = o.iters.unwrap_or(iters);
    let warmup = o.warmup.unwrap_or(iters / 10);
    let mut progress = Progress {
        tty: std::io::stderr().is_terminal(),
        total: sizes.len(),
        done: 0,
        start: Instant::now(),
        quiet: o.json,
    };
    let mut rows = Vec::new();
    for &size in &sizes {
        progress.step(&format!("{} {}", which.name(), format_size(size)));
        let m = match which {
            Standalone::TcpPingpong => {
                baseline::tcp_pingpong(size as usize, iters, warmup, &place.tcp, cpus)?
            }
            Standalone::TcpStream => {
                baseline::tcp_stream(size as usize, iters, warmup, &place.tcp, cpus)?
            }
        };
        rows.push((m, None));
        progress.done += 1;
    }
    progress.finish();
    let pinned = ncpus >= 2;
    let header = format!(
        "switchyard perf: {} between two {} threads over {}, no PEs",
        which.name(),
        if pinned { "pinned" } else { "unpinned" },
        place.tcp_desc
    );
    plot::finish(o, &mut rows, &header)?;
    if o.json {
        print_json(o, place, pinned, ncpus, &rows);
    } else {
        print!("{}", table(&rows, &header));
    }
    Ok(())
}

fn header(o: &Options, place: &Place, pinned: bool) -> String {
    let transport = match (o.transport.as_str(), &o.sim) {
        ("tcp", _) => format!("transport tcp only ({TRANSPORTS_VAR}=tcp)"),
        (_, Some(_)) => "transport chosen by select (tcp between nodes)".to_string(),
        _ => "transport chosen by select (shm on one node)".to_string(),
    };
    let sim = o
        .sim
        .as_ref()
        .map_or(String::new(), |s| format!(" in sim {s}, one per node,"));
    let tcp_base = if o.over_tcp() {
        format!(" (tcp over {})", place.tcp_desc)
    } else {
        String::new()
    };
    format!(
        "switchyard perf: {} PEs,{sim} {}, {transport}; baselines{tcp_base}: mean of a run right before and right after each test",
        o.n,
        if pinned { "one per core" } else { "not pinned" }
    )
}

fn print_json(
    o: &Options,
    place: &Place,
    pinned: bool,
    ncpus: usize,
    rows: &[(Measurement, Option<Measurement>)],
) {
    let v: Vec<_> = rows
        .iter()
        .map(|(m, b)| serde_json::json!({ "result": m, "baseline": b, "ratio": ratio(m, b.as_ref()) }))
        .collect();
    let tcp = (o.over_tcp() || o.standalone.is_some()).then(|| place.tcp_desc.clone());
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "pes": if o.standalone.is_some() { 0 } else { o.n },
            "pinned": pinned,
            "cpus": ncpus,
            "transport": if o.standalone.is_some() { "tcp" } else { o.transport.as_str() },
            "sim": o.sim,
            "tcp_path": tcp,
            "results": v
        }))
        .unwrap_or_default()
    );
}

/// How the baselines of a run are measured.
struct Bench {
    /// The two CPUs the baseline threads are pinned to.
    cpus: (usize, usize),
    /// TCP baselines along this path, instead of cacheline and memcpy.
    tcp: Option<TcpPath>,
}

impl Bench {
    /// The baselines of one step: for a latency test the cache-line
    /// ping-pong (or, over TCP, `tcp-pingpong` at every size), for a
    /// bandwidth test memcpy (or `tcp-stream`) at every size, for a rate
    /// test its own baseline at every size ([`Bench::rate`]).
    fn baselines(&self, step: &Step) -> Result<Vec<Measurement>, String> {
        if step.test.is_rate() {
            return step.sizes.iter().map(|&s| self.rate(step, s)).collect();
        }
        let (iters, warmup) = (step.iters, step.warmup);
        match (&self.tcp, step.test.is_latency()) {
            (None, true) => Ok(baseline::for_latency(
                step.test,
                &step.sizes,
                iters,
                warmup,
                self.cpus,
            )),
            (None, false) => Ok(step
                .sizes
                .iter()
                .map(|&s| baseline::memcpy(s as usize, iters.max(1), self.cpus.0))
                .collect()),
            (Some(path), lat) => step
                .sizes
                .iter()
                .map(|&s| {
                    // atomic-lat moves 8 bytes whatever --size says.
                    let s = if step.test == Test::AtomicLat { 8 } else { s };
                    if lat {
                        baseline::tcp_latency(step.test, s as usize, iters, warmup, path, self.cpus)
                    } else {
                        baseline::tcp_stream(s as usize, iters.max(1), warmup, path, self.cpus)
                    }
                })
                .collect(),
        }
    }

    /// The baseline of rate test `step.test` at `size`, with the step's
    /// rounds: `raw-store`, `raw-load`, `raw-atomic` over shared memory,
    /// `tcp-records` or `tcp-rr` over TCP ([`baseline::rate`]).
    fn rate(&self, step: &Step, size: u64) -> Result<Measurement, String> {
        use baseline::rate::{self, Rr};
        let (r, s, cpus) = (step.rounds(), size as usize, self.cpus);
        match (&self.tcp, step.test) {
            (None, Test::PutRate) => rate::raw_store(s, r, cpus),
            (None, Test::GetRate) => rate::raw_load(s, r, cpus),
            (None, _) => rate::raw_atomic(r, cpus),
            (Some(p), Test::PutRate) => rate::tcp_records(s, r, p, cpus),
            (Some(p), Test::GetRate) => rate::tcp_rr(Rr::Get(s), r, p, cpus),
            (Some(p), _) => rate::tcp_rr(Rr::FetchAdd, r, p, cpus),
        }
    }
}

/// The mean of a baseline measured before and after a test; notes in
/// `drift` when the two differ by more than 20 % (the machine changed under
/// the run: the ratio is then less trustworthy).
fn merge_baselines(
    before: Option<Measurement>,
    after: Option<Measurement>,
    drift: &mut Vec<String>,
) -> Option<Measurement> {
    let (b, a) = match (before, after) {
        (Some(b), Some(a)) => (b, a),
        (b, a) => return b.or(a),
    };
    let mean = |x: f64, y: f64| (x + y) / 2.0;
    let moved = |x: f64, y: f64| x.min(y) > 0.0 && x.max(y) / x.min(y) > 1.2;
    let mut m = b.clone();
    if let (Some(lb), Some(la)) = (b.latency, a.latency) {
        if moved(lb.p50, la.p50) {
            drift.push(format!(
                "{} {} baseline moved between before and after the test (p50 {:.0} ns, then {:.0} ns): the host moved the vCPUs; rerun for a steady ratio",
                b.test,
                format_size(b.size),
                lb.p50,
                la.p50
            ));
        }
        m.latency = Some(stats::Latency {
            p50: mean(lb.p50, la.p50),
            p99: mean(lb.p99, la.p99),
            p999: mean(lb.p999, la.p999),
            max: lb.max.max(la.max),
        });
        m.curve = stats::mean_curve(&b.curve, &a.curve);
    }
    if let (Some(wb), Some(wa)) = (b.bandwidth, a.bandwidth) {
        if moved(wb.msgs_per_s, wa.msgs_per_s) {
            drift.push(format!(
                "{} {} baseline moved between before and after the test ({:.2} GB/s, {} msg/s, then {:.2} GB/s, {} msg/s); rerun for a steady ratio",
                b.test,
                format_size(b.size),
                wb.gbps,
                msgs(wb.msgs_per_s),
                wa.gbps,
                msgs(wa.msgs_per_s)
            ));
        }
        m.bandwidth = Some(stats::Bandwidth {
            gbps: mean(wb.gbps, wa.gbps),
            msgs_per_s: mean(wb.msgs_per_s, wa.msgs_per_s),
        });
    }
    Some(m)
}

fn heap_for(sizes: &[u64]) -> String {
    let max = sizes.iter().copied().max().unwrap_or(8);
    // Two message buffers plus slack.
    format_size((2 * max + (1 << 20)).next_power_of_two().max(4 << 20))
}

/// The ratio that matters for a row: p50 over the baseline's p50 (latency),
/// GB/s over the baseline's GB/s (bandwidth), messages per second over the
/// baseline's (a rate test, named `*-rate`).
fn ratio(m: &Measurement, b: Option<&Measurement>) -> Option<f64> {
    let b = b?;
    match (&m.latency, &b.latency, &m.bandwidth, &b.bandwidth) {
        (Some(l), Some(bl), _, _) if bl.p50 > 0.0 => Some(l.p50 / bl.p50),
        (_, _, Some(w), Some(bw)) if m.test.ends_with("-rate") && bw.msgs_per_s > 0.0 => {
            Some(w.msgs_per_s / bw.msgs_per_s)
        }
        (_, _, Some(w), Some(bw)) if bw.gbps > 0.0 => Some(w.gbps / bw.gbps),
        _ => None,
    }
}

/// Messages per second as a person reads them: `45.21M`, `812.3K`, `950`.
fn msgs(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn table(rows: &[(Measurement, Option<Measurement>)], header: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "{header}");
    let _ = writeln!(
        s,
        "{:<12} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>10} {:>12}  {:<22} {:>6}",
        "test",
        "size",
        "p50 ns",
        "p99 ns",
        "p99.9 ns",
        "max ns",
        "GB/s",
        "msg/s",
        "baseline",
        "ratio"
    );
    let mut shown = Vec::new();
    for (m, b) in rows {
        if let Some(b) = b {
            let key = (b.test.clone(), b.size);
            if !shown.contains(&key) {
                shown.push(key);
                row(&mut s, b, None, "");
            }
        }
        let label = b.as_ref().map_or(String::new(), |b| {
            if b.latency.is_some() && b.test == "cacheline" {
                format!("{} p50", b.test)
            } else if b.latency.is_some() {
                format!("{} {} p50", b.test, format_size(b.size))
            } else {
                format!("{} {}", b.test, format_size(b.size))
            }
        });
        row(&mut s, m, ratio(m, b.as_ref()), &label);
    }
    s
}

fn row(s: &mut String, m: &Measurement, ratio: Option<f64>, base: &str) {
    use std::fmt::Write as _;
    let f = |v: f64| format!("{v:.0}");
    let (p50, p99, p999, max) = m.latency.map_or_else(
        || ("".into(), "".into(), "".into(), "".into()),
        |l| (f(l.p50), f(l.p99), f(l.p999), f(l.max)),
    );
    let (gbps, mps) = m.bandwidth.map_or_else(
        || (String::new(), String::new()),
        |b| (format!("{:.2}", b.gbps), msgs(b.msgs_per_s)),
    );
    let _ = writeln!(
        s,
        "{:<12} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>10} {:>12}  {:<22} {:>6}",
        m.test,
        format_size(m.size),
        p50,
        p99,
        p999,
        max,
        gbps,
        mps,
        base,
        ratio.map_or(String::new(), |r| format!("{r:.2}x"))
    );
}

#[cfg(test)]
mod test {
    use super::{args::parse, *};

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        let o = parse(&a(&["put-bw", "--sizes", "8..64", "-n", "3"])).unwrap();
        assert_eq!(o.test, Some(Test::PutBw));
        assert_eq!(o.sizes, Some(vec![8, 16, 32, 64]));
        assert_eq!(o.n, 3);
        assert!(
            parse(&a(&["frob"]))
                .unwrap_err()
                .contains("invalid value 'frob' for '[TEST]'")
        );
        assert!(parse(&a(&["-n", "1"])).is_err());
        assert!(
            parse(&a(&["--size", "abc"]))
                .unwrap_err()
                .contains("invalid value 'abc' for '--size <S>'")
        );
        assert!(parse(&a(&["--sizes", "64..8"])).is_err());
        assert_eq!(
            parse(&a(&["--sizes", "64,4K,1M"])).unwrap().sizes,
            Some(vec![64, 4096, 1 << 20])
        );
        assert!(parse(&a(&["--sizes", "64,,1M"])).is_err());
        assert!(parse(&a(&["--transport", "udp"])).is_err());
        assert!(
            parse(&a(&["--iters"]))
                .unwrap_err()
                .contains("a value is required for '--iters <N>'")
        );
        let suite = steps(&parse(&[]).unwrap());
        assert_eq!(suite.len(), 5);
        // The suite's put-rate: one size, a short run.
        assert_eq!(suite[4].test, Test::PutRate);
        assert_eq!(
            (suite[4].sizes.as_slice(), suite[4].iters),
            ([8].as_slice(), 500_000)
        );
        // The last of --size and --sizes counts.
        assert_eq!(
            parse(&a(&["--sizes", "8..16", "--size", "4K"]))
                .unwrap()
                .sizes,
            Some(vec![4096])
        );
        assert_eq!(
            parse(&a(&["--size", "4K", "--sizes", "8..16"]))
                .unwrap()
                .sizes,
            Some(vec![8, 16])
        );
        assert_eq!(parse(&a(&["--iters", "0"])).unwrap().iters, Some(1));
        assert_eq!(parse(&a(&["--window", "0"])).unwrap().window, 1);
    }

    #[test]
    fn iterations_are_bounded() {
        let max = MAX_ITERS.to_string();
        assert_eq!(
            parse(&a(&["--iters", &max])).unwrap().iters,
            Some(MAX_ITERS)
        );
        for flag in ["--iters", "--warmup"] {
            for v in [
                "18446744073709551615",
                "4000000000",
                "100000001",
                "-1",
                "1e9",
            ] {
                let e = parse(&a(&[flag, v])).unwrap_err();
                assert!(
                    e.contains(&format!("invalid value '{v}' for '{flag} <N>'")),
                    "{e}"
                );
            }
        }
        let e = parse(&a(&[
            "--transport",
            "verbs",
            "--qd-sweep",
            "--iters",
            "2000000",
        ]))
        .unwrap_err();
        assert!(
            e.contains("--iters 2000000: at most 1562500 with --qd-sweep"),
            "{e}"
        );
        let ok = MAX_QD_SWEEP_ITERS.to_string();
        assert!(parse(&a(&["--transport", "verbs", "--qd-sweep", "--iters", &ok])).is_ok());
    }

    #[test]
    fn rate_options() {
        let o = parse(&a(&["put-rate"])).unwrap();
        let s = steps(&o);
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].test, s[0].sizes.as_slice()),
            (Test::PutRate, [8, 64].as_slice())
        );
        assert_eq!(
            (s[0].iters, s[0].warmup, s[0].window),
            (2_000_000, 200_000, 64)
        );
        let s = steps(&parse(&a(&["get-rate", "--transport", "tcp", "--window", "16"])).unwrap());
        assert_eq!(
            (s[0].sizes.as_slice(), s[0].iters, s[0].window),
            ([64].as_slice(), 50_000, 16)
        );
        let s = steps(&parse(&a(&["put-rate", "--sim", "c1"])).unwrap());
        assert_eq!(s[0].sizes, vec![64]);
        // atomic-rate: one 8-byte word, blocking fetch-adds (window 1)
        // whatever --window says; another size is refused.
        let s = steps(&parse(&a(&["atomic-rate", "--size", "8", "--window", "32"])).unwrap());
        assert_eq!((s[0].sizes.as_slice(), s[0].window), ([8].as_slice(), 1));
        for bad in [&["--size", "4"][..], &["--sizes", "8..64"]] {
            let mut args = vec!["atomic-rate"];
            args.extend_from_slice(bad);
            let e = parse(&a(&args)).unwrap_err();
            assert!(e.contains("one 8-byte word"), "{e}");
        }
        // The rate tests' sizes: 1 to 64 bytes.
        let s = steps(&parse(&a(&["get-rate", "--sizes", "1..64"])).unwrap());
        assert_eq!(s[0].sizes, vec![1, 2, 4, 8, 16, 32, 64]);
        for (t, bad) in [
            ("put-rate", "65"),
            ("put-rate", "8,4K"),
            ("get-rate", "128"),
            ("get-rate", "0"),
        ] {
            let e = parse(&a(&[t, "--sizes", bad])).unwrap_err();
            assert!(
                e.contains(if bad == "0" {
                    "expected A..B"
                } else {
                    "1 to 64 bytes"
                }),
                "{t} {bad}: {e}"
            );
        }
        let e = parse(&a(&["put-rate", "--size", "1K", "--transport", "tcp"])).unwrap_err();
        assert!(e.contains("put-rate: size 1024 is out of range"), "{e}");
        // The other tests keep their ranges.
        assert!(parse(&a(&["put-bw", "--size", "1K"])).is_ok());
        let s = steps(&parse(&a(&["atomic-rate", "--transport", "tcp"])).unwrap());
        assert_eq!((s[0].iters, s[0].window), (20_000, 1));
        assert_eq!(
            s[0].rounds(),
            Rounds {
                window: 1,
                rounds: 20_000,
                warm: 2_000
            }
        );
        for t in ["put-rate", "get-rate", "atomic-rate"] {
            let e = parse(&a(&[t, "--transport", "verbs"])).unwrap_err();
            assert!(e.contains("no rate tests"), "{e}");
        }
        // Whole rounds: at least --iters measured operations.
        let r = Rounds::new(100, 10, 64);
        assert_eq!((r.rounds, r.warm, r.ops(), r.total_ops()), (2, 1, 128, 192));
        assert_eq!(
            Rounds::new(0, 0, 0),
            Rounds {
                window: 1,
                rounds: 1,
                warm: 0
            }
        );
    }

    #[test]
    fn rate_rows_compare_message_rates() {
        let m = Measurement::throughput("put-rate", 8, 1000, 1e-3);
        let b = Measurement::throughput("raw-store", 8, 4000, 1e-3);
        assert_eq!(m.bandwidth.map(|w| w.msgs_per_s), Some(1e6));
        assert!((ratio(&m, Some(&b)).unwrap() - 0.25).abs() < 1e-9);
        let t = table(&[(m, Some(b))], "h");
        assert!(
            t.contains("1.00M") && t.contains("4.00M") && t.contains("0.25x"),
            "{t}"
        );
        assert_eq!(
            (msgs(812_345.0), msgs(950.0)),
            ("812.3K".into(), "950".into())
        );
    }

    /// The rate baselines at tiny sizes and counts: each checks its own
    /// data (the second process its total or last value, the timing side
    /// every fetch-add and the loads) and fails otherwise.
    #[test]
    fn rate_baselines_at_tiny_sizes() {
        use baseline::rate::{self, Rr};
        let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = (0, 1 % ncpus);
        let path = baseline::TcpPath::loopback();
        let check = |m: Measurement, name: &str, size: u64, r: Rounds| {
            assert_eq!((m.test.as_str(), m.size, m.iters), (name, size, r.ops()));
            assert!(m.latency.is_none());
            assert!(
                m.bandwidth
                    .is_some_and(|b| b.msgs_per_s > 0.0 && b.gbps > 0.0),
                "{m:?}"
            );
        };
        for (size, r) in [
            (1, Rounds::new(5, 0, 1)),
            (8, Rounds::new(40, 8, 4)),
            (64, Rounds::new(9, 3, 7)),
        ] {
            check(
                rate::raw_store(size, r, cpus).unwrap(),
                "raw-store",
                size as u64,
                r,
            );
            check(
                rate::raw_load(size, r, cpus).unwrap(),
                "raw-load",
                size as u64,
                r,
            );
            check(
                rate::tcp_records(size, r, &path, cpus).unwrap(),
                "tcp-records",
                size as u64,
                r,
            );
            check(
                rate::tcp_rr(Rr::Get(size), r, &path, cpus).unwrap(),
                "tcp-rr",
                size as u64,
                r,
            );
        }
        // A block of 12 bytes: a word and a half.
        let r = Rounds::new(3, 1, 2);
        check(rate::raw_load(12, r, cpus).unwrap(), "raw-load", 12, r);
        for r in [Rounds::new(30, 3, 1), Rounds::new(12, 0, 5)] {
            check(rate::raw_atomic(r, cpus).unwrap(), "raw-atomic", 8, r);
            check(
                rate::tcp_rr(Rr::FetchAdd, r, &path, cpus).unwrap(),
                "tcp-rr",
                8,
                r,
            );
        }
        assert!(rate::pattern(300).iter().all(|&b| b != 0));
        assert_ne!(rate::pattern(8), rate::pattern(16)[..8]);
    }

    #[test]
    fn tcp_options() {
        let o = parse(&a(&["tcp-pingpong", "--size", "64", "--iters", "100"])).unwrap();
        assert_eq!(o.standalone, Some(Standalone::TcpPingpong));
        assert_eq!(o.test, None);
        assert_eq!(o.sizes, Some(vec![64]));
        let o = parse(&a(&["tcp-stream", "--sizes", "64,4K"])).unwrap();
        assert_eq!(o.standalone, Some(Standalone::TcpStream));
        assert!(parse(&a(&["tcp-stream", "put-lat"])).is_err());
        assert!(
            parse(&a(&["--sim", "Bad Name"]))
                .unwrap_err()
                .contains("--sim")
        );
        assert_eq!(
            parse(&a(&["--sim", "c1"])).unwrap().sim.as_deref(),
            Some("c1")
        );
        // Default sizes over TCP: put-lat 64, put-bw 64, 4K, 1M.
        let o = parse(&a(&["atomic-lat", "--transport", "verbs", "--qd-sweep"])).unwrap();
        assert!(o.qd_sweep);
        assert_eq!(
            (o.test, o.transport.as_str()),
            (Some(Test::AtomicLat), "verbs")
        );
        for t in ["put-lat", "get-lat", "put-bw", "atomic-lat"] {
            assert!(parse(&a(&[t, "--transport", "verbs"])).is_ok(), "{t}");
        }
        assert!(
            parse(&a(&["--qd-sweep"]))
                .unwrap_err()
                .contains("--transport verbs")
        );
        if let Some(why) = verbs::unavailable() {
            // No device: the reason, before anything is launched.
            assert_eq!(drive(&o).unwrap_err(), why);
        }
        let o = parse(&a(&["--transport", "tcp"])).unwrap();
        assert!(o.over_tcp());
        let s = steps(&o);
        assert_eq!(s[0].sizes, vec![64]);
        assert_eq!(s[1].sizes, vec![8]);
        assert_eq!(s[3].sizes, vec![64, 4096, 1 << 20]);
        let o = parse(&a(&["put-bw", "--transport", "tcp"])).unwrap();
        assert_eq!(steps(&o)[0].sizes, vec![64, 4096, 1 << 20]);
        let o = parse(&a(&["put-lat", "--sim", "c1"])).unwrap();
        assert!(o.over_tcp());
        assert_eq!(steps(&o)[0].sizes, vec![64]);
        // shm and auto keep their defaults.
        let o = parse(&a(&["put-lat", "--transport", "shm"])).unwrap();
        assert!(!o.over_tcp());
        assert_eq!(steps(&o)[0].sizes, vec![8]);
    }

    #[test]
    fn latency_baselines_match_their_tests() {
        let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = (0, 1 % ncpus);
        let names = |t: Test, sizes: &[u64]| -> Vec<(String, u64)> {
            baseline::for_latency(t, sizes, 50, 5, cpus)
                .into_iter()
                .inspect(|m| {
                    assert_eq!(m.iters, 50, "{}", m.test);
                    assert!(m.latency.is_some_and(|l| l.p50 > 0.0 && l.max >= l.p50));
                })
                .map(|m| (m.test, m.size))
                .collect()
        };
        assert_eq!(names(Test::PutLat, &[8]), [("cacheline".into(), 8)]);
        assert_eq!(
            names(Test::GetLat, &[8, 4096]),
            [("remote-read".into(), 8), ("remote-read".into(), 4096)]
        );
        assert_eq!(names(Test::AtomicLat, &[8]), [("remote-rmw".into(), 8)]);
    }

    #[test]
    fn tcp_baselines_on_loopback() {
        let path = baseline::TcpPath::loopback();
        let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = (0, 1 % ncpus);
        let m = baseline::tcp_pingpong(64, 200, 20, &path, cpus).unwrap();
        assert_eq!(
            (m.test.as_str(), m.size, m.iters),
            ("tcp-pingpong", 64, 200)
        );
        assert!(m.latency.is_some_and(|l| l.p50 > 0.0 && l.max >= l.p50));
        for t in [Test::GetLat, Test::AtomicLat] {
            let m = baseline::tcp_latency(t, 8, 50, 5, &path, cpus).unwrap();
            assert_eq!((m.test.as_str(), m.size), ("tcp-rtt", 8));
        }
        let m = baseline::tcp_stream(4096, 100, 10, &path, cpus).unwrap();
        assert_eq!(
            (m.test.as_str(), m.size, m.iters),
            ("tcp-stream", 4096, 100)
        );
        assert!(
            m.bandwidth
                .is_some_and(|b| b.gbps > 0.0 && b.msgs_per_s > 0.0)
        );
        let bad = baseline::TcpPath {
            server_netns: Some("/nonexistent/netns".into()),
            ..path
        };
        assert!(
            baseline::tcp_pingpong(8, 1, 0, &bad, cpus)
                .unwrap_err()
                .contains("/nonexistent/netns")
        );
    }
}
