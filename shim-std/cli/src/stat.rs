//! `switchyard stat`: the counters of the running jobs of this node, read
//! from their PEs' stats segments ([`switchyard::statseg`]) without
//! stopping them: a view refreshed every second, one snapshot (`--once`),
//! JSON or the Prometheus text format; and the `/metrics` server of
//! `switchyard run --metrics-addr` ([`serve_metrics`]).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use switchyard::statseg::{self, PeerWord, Reader, SharedWord, Snapshot};
use switchyard_shm::SHM_DIR;

use crate::{Output, values};

/// What `switchyard stat --help` says.
pub(crate) const ABOUT: &str = "\
Shows the counters of the switchyard jobs running on this machine, read from
each PE's stats segment (/dev/shm/switchyard-<JOB>-stats-<RANK>, kept unless
the job sets stats = off) while the job runs: per PE and per (peer, transport)
operations, bytes and their rates since the last refresh, retries, errors,
reroutes, failovers, downgrades, link transitions, the TCP driver's replays,
duplicate frames dropped and connections cut for a bad frame (CRC) per peer and
rail, the current route and the health (H), load (L) and dead (D) bits of each
transport, the latency
percentiles of the sampled operations, and per channel end (SPSC producer or
consumer, broadcast publisher or subscriber, numbered as the job made them)
messages sent and received with their rates, full rings and messages lost. Without --once, --json or
--prometheus the view is redrawn every --interval until no job is left.";

/// `switchyard stat` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Exit status: 0 success (also when no job runs), 1 JOB not found, 2 bad usage."
)]
pub struct StatArgs {
    /// Job id (hex, as in the objects' names; a unique prefix is enough)
    /// [default: every running job]
    #[arg(value_name = "JOB")]
    pub job: Option<String>,
    /// Print one snapshot and exit
    #[arg(long)]
    pub once: bool,
    /// Print one snapshot as JSON
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print one snapshot in the Prometheus text format (0.0.4)
    #[arg(long)]
    pub prometheus: bool,
    /// Refresh interval of the live view, seconds
    #[arg(long, value_name = "S", default_value = "1", value_parser = values::positive_seconds)]
    pub interval: Duration,
}

/// The snapshots of every PE of the jobs `job` selects (a hex prefix of the
/// job id; `None`: all), by job id.
pub fn snapshots(dir: &Path, job: Option<&str>) -> BTreeMap<u64, Vec<Snapshot>> {
    let mut out = BTreeMap::new();
    for j in statseg::find_jobs(dir) {
        if job.is_some_and(|p| !format!("{:016x}", j.job_id).starts_with(&p.to_lowercase())) {
            continue;
        }
        let snaps: Vec<Snapshot> = j
            .pes
            .iter()
            .filter_map(|(_, path)| Reader::open(path).ok())
            .map(|r| r.snapshot())
            .collect();
        if !snaps.is_empty() {
            out.insert(j.job_id, snaps);
        }
    }
    out
}

/// Runs `switchyard stat`.
pub fn run(args: &StatArgs) -> Output {
    let dir = Path::new(SHM_DIR);
    let job = args.job.as_deref();
    if let Some(j) = job
        && (j.is_empty() || j.len() > 16 || !j.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Output::usage_error(format!("JOB: expected a hex job id, not {j:?}"));
    }
    let snaps = snapshots(dir, job);
    if let Some(j) = job
        && snaps.is_empty()
    {
        return Output {
            code: 1,
            stdout: String::new(),
            stderr: format!("switchyard stat: no running job {j} on this machine\n"),
        };
    }
    if args.json {
        return Output::ok(json(&snaps));
    }
    if args.prometheus {
        let all: Vec<Snapshot> = snaps.into_values().flatten().collect();
        return Output::ok(statseg::prometheus(&all));
    }
    if args.once {
        return Output::ok(screen(&snaps, None, Duration::ZERO));
    }
    live(dir, job, args.interval, snaps)
}

/// The live view: redrawn every `interval` (ANSI clear and home) until no
/// job is left.
fn live(
    dir: &Path,
    job: Option<&str>,
    interval: Duration,
    mut snaps: BTreeMap<u64, Vec<Snapshot>>,
) -> Output {
    let mut prev: Option<BTreeMap<u64, Vec<Snapshot>>> = None;
    let mut at = Instant::now();
    let mut since = Duration::ZERO;
    loop {
        let text = screen(&snaps, prev.as_ref(), since);
        let mut out = std::io::stdout().lock();
        if write!(out, "\x1b[H\x1b[2J{text}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return Output::status(0);
        }
        drop(out);
        if snaps.is_empty() {
            return Output::status(0);
        }
        std::thread::sleep(interval);
        let next = snapshots(dir, job);
        since = at.elapsed();
        at = Instant::now();
        prev = Some(std::mem::replace(&mut snaps, next));
    }
}

/// `stat --json`: every job, its PEs' snapshots.
pub fn json(snaps: &BTreeMap<u64, Vec<Snapshot>>) -> String {
    let jobs: Vec<serde_json::Value> = snaps
        .iter()
        .map(|(id, pes)| {
            serde_json::json!({
                "job": format!("{id:016x}"),
                "pes": pes,
            })
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs }))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// A rate per second of `now - before` over `dt`, as text.
fn rate(now: u64, before: Option<u64>, dt: Duration) -> String {
    match before {
        Some(b) if !dt.is_zero() => human(now.saturating_sub(b) as f64 / dt.as_secs_f64()),
        _ => "-".into(),
    }
}

/// `v` with a k, M or G suffix.
fn human(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// One screen: per job, a table of its PEs, one of their (peer,
/// transport)s, and one of the latencies; rates against `prev`, taken `dt`
/// earlier (none for `--once`).
pub fn screen(
    snaps: &BTreeMap<u64, Vec<Snapshot>>,
    prev: Option<&BTreeMap<u64, Vec<Snapshot>>>,
    dt: Duration,
) -> String {
    let mut o = String::new();
    if snaps.is_empty() {
        o.push_str("no running switchyard job on this machine\n");
        return o;
    }
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    for (job, pes) in snaps {
        let before = prev.and_then(|p| p.get(job));
        let old = |rank: u32| before.and_then(|b| b.iter().find(|s| s.header.rank == rank));
        let n = pes.first().map_or(0, |s| s.header.n_pes);
        let up = pes
            .iter()
            .map(|s| s.header.start_unix_ns)
            .min()
            .unwrap_or(now_ns);
        let _ = writeln!(
            o,
            "job {job:016x}: {} of {n} PEs on this machine, up {:.1} s",
            pes.len(),
            now_ns.saturating_sub(up) as f64 / 1e9
        );
        let _ = writeln!(
            o,
            "{:>5} {:>8} {:>12} {:>8} {:>12} {:>9} {:>7} {:>6} {:>8} {:>8} {:>5}",
            "PE",
            "pid",
            "ops",
            "ops/s",
            "bytes",
            "B/s",
            "retries",
            "errors",
            "reroutes",
            "barriers",
            "dead"
        );
        for s in pes {
            let o_s = old(s.header.rank);
            let (ops, bytes) = (s.total(PeerWord::Ops), s.total(PeerWord::Bytes));
            let _ = writeln!(
                o,
                "{:>5} {:>8} {:>12} {:>8} {:>12} {:>9} {:>7} {:>6} {:>8} {:>8} {:>5}",
                s.header.rank,
                s.header.pid,
                ops,
                rate(ops, o_s.map(|p| p.total(PeerWord::Ops)), dt),
                bytes,
                rate(bytes, o_s.map(|p| p.total(PeerWord::Bytes)), dt),
                s.total(PeerWord::Retries),
                s.total(PeerWord::Errors),
                s.total(PeerWord::Reroutes),
                s.pe.get("barriers").copied().unwrap_or(0),
                s.pe.get("dead_peers").copied().unwrap_or(0),
            );
        }
        let _ = writeln!(
            o,
            "\n{:>5} {:>5} {:<7} {:>12} {:>8} {:>12} {:>9} {:>7} {:>6} {:>7} {:>7} {:>5} {:>7} {:>6} {:>5} {:<5}",
            "PE",
            "peer",
            "via",
            "ops",
            "ops/s",
            "bytes",
            "B/s",
            "retries",
            "errors",
            "failovr",
            "downgr",
            "links",
            "replays",
            "dedup",
            "crc",
            "state"
        );
        for s in pes {
            let o_s = old(s.header.rank);
            for p in &s.peers {
                let c = |w: PeerWord| p.counters.get(w.name()).copied().unwrap_or(0);
                let shared = |w: SharedWord| p.counters.get(w.name()).copied().unwrap_or(0);
                let prior = |w: PeerWord| {
                    o_s.and_then(|q| {
                        q.peers
                            .iter()
                            .find(|r| r.peer == p.peer && r.transport == p.transport)
                            .map(|r| r.counters.get(w.name()).copied().unwrap_or(0))
                            .or(Some(0))
                    })
                };
                let state: String = [(p.healthy, 'H'), (p.loaded, 'L'), (p.dead, 'D')]
                    .iter()
                    .map(|(b, ch)| if *b { *ch } else { '-' })
                    .collect();
                let via = format!("{}{}", p.transport, if p.route { "*" } else { "" });
                let _ = writeln!(
                    o,
                    "{:>5} {:>5} {:<7} {:>12} {:>8} {:>12} {:>9} {:>7} {:>6} {:>7} {:>7} {:>5} {:>7} {:>6} {:>5} {:<5}",
                    s.header.rank,
                    p.peer,
                    via,
                    c(PeerWord::Ops),
                    rate(c(PeerWord::Ops), prior(PeerWord::Ops), dt),
                    c(PeerWord::Bytes),
                    rate(c(PeerWord::Bytes), prior(PeerWord::Bytes), dt),
                    c(PeerWord::Retries),
                    c(PeerWord::Errors),
                    c(PeerWord::Failovers),
                    c(PeerWord::Downgrades),
                    c(PeerWord::LinkTransitions),
                    shared(SharedWord::Replays),
                    shared(SharedWord::DedupDrops),
                    shared(SharedWord::CrcFailures),
                    state,
                );
            }
        }
        channels(&mut o, pes, &old, dt);
        let hists: Vec<_> = pes
            .iter()
            .flat_map(|s| s.hists.iter().map(move |h| (s, h)))
            .collect();
        if !hists.is_empty() {
            let _ = writeln!(
                o,
                "\n{:>5} {:<7} {:<7} {:>10} {:>10} {:>10} {:>10}",
                "PE", "op", "via", "samples", "p50 ns", "p99 ns", "max ns"
            );
            for (s, h) in hists {
                let [p50, p99, max] = h.percentiles_ns(s.header.tick_unit);
                let _ = writeln!(
                    o,
                    "{:>5} {:<7} {:<7} {:>10} {p50:>10} {p99:>10} {max:>10}",
                    s.header.rank, h.op, h.transport, h.count
                );
            }
        }
        let wide: Vec<_> = pes
            .iter()
            .flat_map(|s| s.wide.iter().map(move |w| (s, w)))
            .collect();
        if !wide.is_empty() {
            o.push('\n');
            for (s, w) in wide {
                let nz: Vec<String> = w
                    .counters
                    .iter()
                    .filter(|(_, v)| **v != 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                let _ = writeln!(o, "PE {} {}: {}", s.header.rank, w.transport, nz.join(", "));
            }
        }
        o.push('\n');
    }
    o.push_str("state: H healthy, L loaded, D dead; * the route of a short put\n");
    o
}

/// The table of the PEs' channel ends: counters and, against the snapshot
/// of the same PE `old` gives, `dt` earlier, the rates of sent and received.
fn channels<'a>(
    o: &mut String,
    pes: &[Snapshot],
    old: &dyn Fn(u32) -> Option<&'a Snapshot>,
    dt: Duration,
) {
    if pes.iter().all(|s| s.channels.is_empty()) {
        return;
    }
    let _ = writeln!(
        o,
        "\n{:>5} {:>5} {:<9} {:<10} {:>6} {:<6} {:>12} {:>8} {:>12} {:>8} {:>9} {:>9}",
        "PE",
        "chan",
        "kind",
        "role",
        "peer",
        "via",
        "sent",
        "sent/s",
        "received",
        "recv/s",
        "full",
        "lost"
    );
    for s in pes {
        let o_s = old(s.header.rank);
        for c in &s.channels {
            let prior = o_s.and_then(|q| {
                q.channels
                    .iter()
                    .find(|r| r.channel == c.channel && r.role == c.role)
            });
            let peer = if c.role == "publisher" {
                format!("{}sub", c.peer)
            } else {
                c.peer.to_string()
            };
            let _ = writeln!(
                o,
                "{:>5} {:>5} {:<9} {:<10} {:>6} {:<6} {:>12} {:>8} {:>12} {:>8} {:>9} {:>9}",
                s.header.rank,
                c.channel,
                c.kind,
                c.role,
                peer,
                if c.direct { "shm" } else { "routed" },
                c.sent,
                rate(c.sent, prior.map(|r| r.sent).or(o_s.map(|_| 0)), dt),
                c.received,
                rate(c.received, prior.map(|r| r.received).or(o_s.map(|_| 0)), dt),
                c.full,
                c.lost,
            );
        }
    }
}

/// Serves `/metrics` (the Prometheus text format of every PE of job
/// `job_id` on this machine) at `addr` until the returned handle is
/// stopped; anything else is 404.
///
/// # Errors
///
/// The address cannot be bound.
pub fn serve_metrics(addr: &str, job_id: u64) -> Result<MetricsServer, String> {
    let server = std::sync::Arc::new(
        tiny_http::Server::http(addr).map_err(|e| format!("--metrics-addr {addr}: {e}"))?,
    );
    let s = server.clone();
    let job = format!("{job_id:016x}");
    let thread = std::thread::spawn(move || {
        for req in s.incoming_requests() {
            let resp = if req.url() == "/metrics" || req.url().starts_with("/metrics?") {
                let snaps: Vec<Snapshot> = snapshots(Path::new(SHM_DIR), Some(&job))
                    .into_values()
                    .flatten()
                    .collect();
                let header = tiny_http::Header::from_bytes(
                    &b"Content-Type"[..],
                    &b"text/plain; version=0.0.4; charset=utf-8"[..],
                );
                let mut r = tiny_http::Response::from_string(statseg::prometheus(&snaps));
                if let Ok(h) = header {
                    r.add_header(h);
                }
                r
            } else {
                tiny_http::Response::from_string("not found\n").with_status_code(404)
            };
            let _ = req.respond(resp);
        }
    });
    Ok(MetricsServer {
        server,
        thread: Some(thread),
    })
}

/// The running `/metrics` server; stopped (the socket closed) on drop.
pub struct MetricsServer {
    server: std::sync::Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer").finish_non_exhaustive()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
