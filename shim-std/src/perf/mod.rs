//! `switchyard perf`: multi-process benchmarks of the real data path, each
//! beside a baseline measured in the same run.
//!
//! ```text
//! switchyard perf [TEST] [-n PES] [--size S | --sizes A..B] [--iters N]
//!                 [--warmup N] [--transport auto|shm|tcp|verbs] [--json]
//! ```
//!
//! Tests: `put-lat` (ping-pong on a flag; one-way = RTT/2), `get-lat`,
//! `atomic-lat` (fetch-add), `put-bw` (a window of non-blocking puts, then
//! quiet). Baselines: `cacheline` (a bare cache-line ping-pong between two
//! pinned threads: the physical floor) for the latency tests, `memcpy`
//! (single-thread copy) for the bandwidth test. Without a TEST, a short
//! default suite runs and prints each result's ratio to its baseline.
//!
//! The command launches its own PEs through [`crate::launch`], pinned one per
//! core where there are enough cores: each PE runs `switchyard perf --worker`
//! and PE 0 writes its measurements to a file the driver reads back.

mod baseline;
pub mod stats;
mod worker;

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use stats::Measurement;
pub use worker::WorkerPlan;

use crate::{
    config::{format_size, parse_size},
    launch::{self, Bind, LaunchOptions},
};

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
}

impl Test {
    /// The test's name.
    pub const fn name(self) -> &'static str {
        match self {
            Test::PutLat => "put-lat",
            Test::GetLat => "get-lat",
            Test::AtomicLat => "atomic-lat",
            Test::PutBw => "put-bw",
        }
    }

    fn parse(s: &str) -> Option<Test> {
        Some(match s {
            "put-lat" => Test::PutLat,
            "get-lat" => Test::GetLat,
            "atomic-lat" => Test::AtomicLat,
            "put-bw" => Test::PutBw,
            _ => return None,
        })
    }

    fn is_latency(self) -> bool {
        !matches!(self, Test::PutBw)
    }
}

/// Usage of `switchyard perf`.
pub const USAGE: &str = "\
Usage: switchyard perf [TEST] [OPTIONS]

Benchmarks the data path with real PEs, each result beside a baseline measured
in the same run. Without TEST, a short default suite and a table of ratios.

Tests:
  put-lat      put ping-pong on a flag; one-way latency = RTT/2 (p50, p99, p99.9, max)
  get-lat      blocking get latency
  atomic-lat   fetch-add latency
  put-bw       a window of non-blocking puts, then quiet (GB/s, msg/s)
Baselines (always measured too):
  cacheline    bare cache-line ping-pong between two pinned threads (latency floor)
  memcpy       single-thread copy bandwidth (bandwidth ceiling)

Options:
  -n PES               PEs to launch (default 2; PEs 0 and 1 measure)
  --size S             one message size (e.g. 8, 4K, 1M)
  --sizes A..B         powers of two from A to B (default: 8 for latency, 8..4M for put-bw)
  --iters N            measured iterations per size (default 20000 latency, 4096 messages bandwidth)
  --warmup N           unmeasured iterations first (default 10% of --iters)
  --window W           puts per quiet in put-bw (default 64)
  --transport T        auto|shm|tcp|verbs (default auto = what select chooses)
  --json               machine-readable output
  -h, --help           this text
";

#[derive(Debug, Clone)]
struct Options {
    test: Option<Test>,
    n: u32,
    sizes: Option<Vec<u64>>,
    iters: Option<u64>,
    warmup: Option<u64>,
    window: u64,
    json: bool,
    transport: String,
    worker_out: Option<PathBuf>,
}

fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let bad = || {
        format!(
            "--sizes {s}: expected A..B (powers of two) or a list A,B,C, with sizes such as 8..4M"
        )
    };
    if s.contains(',') || !s.contains("..") {
        let v = s
            .split(',')
            .map(|x| parse_size(x.trim()).filter(|&v| v > 0 && v <= 1 << 30))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(bad)?;
        return Ok(v);
    }
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b) = (
        parse_size(a).ok_or_else(bad)?,
        parse_size(b).ok_or_else(bad)?,
    );
    if a == 0 || a > b || b > (1 << 30) {
        return Err(format!("--sizes {s}: need 0 < A <= B <= 1G"));
    }
    let mut v = Vec::new();
    let mut x = a;
    while x <= b {
        v.push(x);
        x = x.saturating_mul(2);
    }
    Ok(v)
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        test: None,
        n: 2,
        sizes: None,
        iters: None,
        warmup: None,
        window: 64,
        json: false,
        transport: "auto".into(),
        worker_out: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let num = |name: &str, v: String| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{name} {v}: expected a whole number"))
        };
        match a.as_str() {
            "-n" => {
                let v = val("-n")?;
                o.n = v
                    .parse()
                    .ok()
                    .filter(|&n| (2..=launch::MAX_PES).contains(&n))
                    .ok_or_else(|| format!("-n {v}: expected 2..={}", launch::MAX_PES))?;
            }
            "--size" => {
                let v = val("--size")?;
                let s = parse_size(&v)
                    .filter(|&s| s > 0 && s <= 1 << 30)
                    .ok_or_else(|| {
                        format!("--size {v}: expected a size such as 8, 4K or 1M (at most 1G)")
                    })?;
                o.sizes = Some(vec![s]);
            }
            "--sizes" => o.sizes = Some(parse_sizes(&val("--sizes")?)?),
            "--iters" => o.iters = Some(num("--iters", val("--iters")?)?.max(1)),
            "--warmup" => o.warmup = Some(num("--warmup", val("--warmup")?)?),
            "--window" => o.window = num("--window", val("--window")?)?.clamp(1, 4096),
            "--transport" => {
                let v = val("--transport")?;
                if !matches!(v.as_str(), "auto" | "shm" | "tcp" | "verbs") {
                    return Err(format!("--transport {v}: expected auto, shm, tcp or verbs"));
                }
                o.transport = v;
            }
            "--json" => o.json = true,
            "--worker-out" => o.worker_out = Some(PathBuf::from(val("--worker-out")?)),
            t if !t.starts_with('-') && o.test.is_none() => {
                o.test = Some(Test::parse(t).ok_or_else(|| {
                    format!("unknown test '{t}' (expected put-lat, get-lat, atomic-lat or put-bw)")
                })?);
            }
            other => return Err(format!("unknown option '{other}'")),
        }
    }
    Ok(o)
}

/// One step of a run: a test over some sizes.
#[derive(Debug, Clone)]
struct Step {
    test: Test,
    sizes: Vec<u64>,
    iters: u64,
    warmup: u64,
}

fn steps(o: &Options) -> Vec<Step> {
    let mk = |test: Test, sizes: Vec<u64>, iters: u64| {
        let iters = o.iters.unwrap_or(iters);
        Step {
            test,
            sizes: o.sizes.clone().unwrap_or(sizes),
            iters,
            warmup: o.warmup.unwrap_or(iters / 10),
        }
    };
    match o.test {
        Some(t) if t.is_latency() => vec![mk(t, vec![8], 20_000)],
        Some(t) => vec![mk(t, parse_sizes("8..4M").unwrap_or_default(), 4096)],
        None => vec![
            mk(Test::PutLat, vec![8], 20_000),
            mk(Test::GetLat, vec![8], 20_000),
            mk(Test::AtomicLat, vec![8], 20_000),
            mk(Test::PutBw, vec![64, 4096, 1 << 20], 2048),
        ],
    }
}

/// Entry point of `switchyard perf` (streams its output).
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("--worker") {
        return worker_main(&args[1..]);
    }
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("switchyard perf: error: {e}\n\n{USAGE}");
            return ExitCode::from(crate::cli::EXIT_USAGE);
        }
    };
    match drive(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard perf: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn worker_main(args: &[String]) -> ExitCode {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("switchyard perf --worker: {e}");
            return ExitCode::from(crate::cli::EXIT_USAGE);
        }
    };
    let Some(test) = o.test else {
        eprintln!("switchyard perf --worker: no test");
        return ExitCode::from(crate::cli::EXIT_USAGE);
    };
    let step = steps(&o).remove(0);
    let plan = WorkerPlan {
        test,
        sizes: step.sizes,
        iters: step.iters,
        warmup: step.warmup,
        window: o.window,
    };
    let result = crate::context::Context::from_env().and_then(|mut ctx| {
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
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard perf worker: {e}");
            ExitCode::from(1)
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

fn drive(o: &Options) -> Result<(), String> {
    match o.transport.as_str() {
        "tcp" => {
            return Err(format!(
                "transport tcp is not available: {}",
                switchyard_socket::probe().why_not.unwrap_or_default()
            ));
        }
        "verbs" => {
            return Err(format!(
                "transport verbs is not available: {}",
                switchyard_verbs::probe().why_not.unwrap_or_default()
            ));
        }
        _ => {}
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = (o.n as usize) <= ncpus;
    let cpus = (0, 1 % ncpus);
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
        let (before_lat, before_bw) = baselines(step, cpus);
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
            o.window.to_string().into(),
            "--worker-out".into(),
            out.clone().into(),
        ];
        let list: Vec<String> = step.sizes.iter().map(u64::to_string).collect();
        args.extend(["--sizes".into(), list.join(",").into()]);
        let mut lo = LaunchOptions::new(o.n, exe.clone());
        lo.args = args;
        lo.bind = if pinned { Bind::Core } else { Bind::None };
        lo.timeout = Some(Duration::from_secs(300));
        lo.env
            .push(("SWITCHYARD_HEAP_SIZE".into(), heap_for(&step.sizes)));
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
        let (after_lat, after_bw) = baselines(step, cpus);
        let base_lat = merge_baselines(before_lat, after_lat, &mut drift);
        let base_bw: Vec<Measurement> = before_bw
            .into_iter()
            .zip(after_bw)
            .filter_map(|(b, a)| merge_baselines(Some(b), Some(a), &mut drift))
            .collect();
        for m in ms {
            let base = if m.latency.is_some() {
                base_lat.clone()
            } else {
                base_bw.iter().find(|b| b.size == m.size).cloned()
            };
            rows.push((m, base));
        }
        progress.done += 1;
    }
    progress.finish();
    if o.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(m, b)| serde_json::json!({ "result": m, "baseline": b, "ratio": ratio(m, b.as_ref()) }))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "pes": o.n, "pinned": pinned, "cpus": ncpus, "results": v
            }))
            .unwrap_or_default()
        );
    } else {
        print!("{}", table(&rows, o.n, pinned));
    }
    for d in &drift {
        eprintln!("perf: warning: {d}");
    }
    Ok(())
}

/// The baselines of one step: the cache-line ping-pong for a latency test,
/// memcpy at every size for a bandwidth test.
fn baselines(step: &Step, cpus: (usize, usize)) -> (Option<Measurement>, Vec<Measurement>) {
    if step.test.is_latency() {
        (
            Some(baseline::cacheline(step.iters, step.warmup, cpus)),
            Vec::new(),
        )
    } else {
        let bw = step
            .sizes
            .iter()
            .map(|&s| baseline::memcpy(s as usize, step.iters.max(1), cpus.0))
            .collect();
        (None, bw)
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
                "{} baseline moved between before and after the test (p50 {:.0} ns, then {:.0} ns): the host moved the vCPUs; rerun for a steady ratio",
                b.test, lb.p50, la.p50
            ));
        }
        m.latency = Some(stats::Latency {
            p50: mean(lb.p50, la.p50),
            p99: mean(lb.p99, la.p99),
            p999: mean(lb.p999, la.p999),
            max: lb.max.max(la.max),
        });
    }
    if let (Some(wb), Some(wa)) = (b.bandwidth, a.bandwidth) {
        if moved(wb.gbps, wa.gbps) {
            drift.push(format!(
                "{} {} baseline moved between before and after the test ({:.2} GB/s, then {:.2} GB/s); rerun for a steady ratio",
                b.test,
                format_size(b.size),
                wb.gbps,
                wa.gbps
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
/// GB/s over the baseline's GB/s (bandwidth).
fn ratio(m: &Measurement, b: Option<&Measurement>) -> Option<f64> {
    let b = b?;
    match (&m.latency, &b.latency, &m.bandwidth, &b.bandwidth) {
        (Some(l), Some(bl), _, _) if bl.p50 > 0.0 => Some(l.p50 / bl.p50),
        (_, _, Some(w), Some(bw)) if bw.gbps > 0.0 => Some(w.gbps / bw.gbps),
        _ => None,
    }
}

fn table(rows: &[(Measurement, Option<Measurement>)], n: u32, pinned: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "switchyard perf: {n} PEs, {}, transport chosen by select (shm on one node); baselines: mean of a run right before and right after each test",
        if pinned { "one per core" } else { "not pinned" }
    );
    let _ = writeln!(
        s,
        "{:<11} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>10} {:>12}  {:<22} {:>6}",
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
            if b.latency.is_some() {
                format!("{} p50", b.test)
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
        |b| (format!("{:.2}", b.gbps), format!("{:.0}", b.msgs_per_s)),
    );
    let _ = writeln!(
        s,
        "{:<11} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>10} {:>12}  {:<22} {:>6}",
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
    use super::*;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        let o = parse(&a(&["put-bw", "--sizes", "8..64", "-n", "3"])).unwrap();
        assert_eq!(o.test, Some(Test::PutBw));
        assert_eq!(o.sizes, Some(vec![8, 16, 32, 64]));
        assert_eq!(o.n, 3);
        assert!(parse(&a(&["frob"])).unwrap_err().contains("unknown test"));
        assert!(parse(&a(&["-n", "1"])).is_err());
        assert!(
            parse(&a(&["--size", "abc"]))
                .unwrap_err()
                .contains("--size abc")
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
                .contains("needs a value")
        );
        assert_eq!(steps(&parse(&[]).unwrap()).len(), 4);
    }
}
