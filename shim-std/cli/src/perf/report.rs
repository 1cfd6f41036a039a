//! How results are shown: progress on stderr, the table, the JSON.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use switchyard::config::format_size;

use super::{Options, TRANSPORTS_VAR, job::Place, stats::Measurement};

/// Shows progress on a terminal (a bar) or as plain lines.
pub(super) struct Progress {
    tty: bool,
    total: usize,
    /// Steps done so far.
    pub(super) done: usize,
    start: Instant,
    quiet: bool,
}

impl Progress {
    /// `total` steps, shown on stderr unless `quiet` (`--json`).
    pub(super) fn new(total: usize, quiet: bool) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            total,
            done: 0,
            start: Instant::now(),
            quiet,
        }
    }

    pub(super) fn step(&mut self, what: &str) {
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

    pub(super) fn finish(&mut self) {
        if self.tty && !self.quiet {
            let _ = write!(std::io::stderr(), "\r{:80}\r", "");
        }
    }
}

pub(super) fn header(o: &Options, place: &Place, pinned: bool) -> String {
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
    let threads = if o.threads > 1 {
        format!(
            ", PE 0 from 1 then {} threads, each on its own context",
            o.threads
        )
    } else {
        String::new()
    };
    format!(
        "switchyard perf: {} PEs,{sim} {}{threads}, {transport}; baselines{tcp_base}: mean of a run right before and right after each test",
        o.n,
        if pinned { "one per core" } else { "not pinned" }
    )
}

/// The end of a run: the plot (`--plot`), then the table or `--json` on
/// stdout, then each drift warning on stderr.
///
/// # Errors
///
/// The plot's, as [`super::plot::finish`].
pub(super) fn emit(
    o: &Options,
    place: &Place,
    (pinned, ncpus): (bool, usize),
    rows: &mut [(Measurement, Option<Measurement>)],
    header: &str,
    drift: &[String],
) -> Result<(), String> {
    super::plot::finish(o, rows, header)?;
    if o.json {
        print_json(o, place, pinned, ncpus, rows);
    } else {
        print!("{}", table(rows, header));
    }
    for d in drift {
        eprintln!("perf: warning: {d}");
    }
    Ok(())
}

pub(super) fn print_json(
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
            "threads": o.threads,
            "tcp_path": tcp,
            "results": v
        }))
        .unwrap_or_default()
    );
}

/// The ratio that matters for a row: p50 over the baseline's p50 (latency),
/// GB/s over the baseline's GB/s (bandwidth), messages per second over the
/// baseline's (a rate test, named `*-rate`).
pub(super) fn ratio(m: &Measurement, b: Option<&Measurement>) -> Option<f64> {
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
pub(super) fn msgs(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

pub(super) fn table(rows: &[(Measurement, Option<Measurement>)], header: &str) -> String {
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
        // A measurement that is also a later row's baseline (broadcast-bw's
        // channel-bw) is not shown twice.
        shown.push((m.test.clone(), m.size));
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
        "{:<12} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>10} {:>12}  {:<22} {:>6}{}",
        m.test,
        format_size(m.size),
        p50,
        p99,
        p999,
        max,
        gbps,
        mps,
        base,
        ratio.map_or(String::new(), |r| format!("{r:.2}x")),
        threads(m)
    );
}

/// A `--threads` row's tail: its threads, and the multi-thread row's
/// aggregate over one thread's rate in the same run.
fn threads(m: &Measurement) -> String {
    match (m.threads, m.thread_ratio) {
        (Some(1), _) => "  1 thread".into(),
        (Some(n), Some(r)) => format!("  {n} threads: {r:.2}x 1 thread"),
        (Some(n), None) => format!("  {n} threads"),
        (None, _) => String::new(),
    }
}
