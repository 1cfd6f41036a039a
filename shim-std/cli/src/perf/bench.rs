//! The baselines the driver measures in this process: beside each test
//! (before and after it), and alone (`tcp-pingpong`, `tcp-stream`).

use switchyard::config::format_size;

use super::{
    Options, Standalone, Test,
    baseline::{self, TcpPath},
    job::Place,
    plan::Step,
    report::{Progress, msgs},
    stats::{self, Measurement},
};

/// `switchyard perf tcp-pingpong|tcp-stream`: the baseline alone, no PEs.
pub(super) fn drive_standalone(
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
    let mut progress = Progress::new(sizes.len(), o.json);
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
    super::report::emit(o, place, (pinned, ncpus), &mut rows, &header, &[])
}

/// How the baselines of a run are measured.
pub(super) struct Bench {
    /// The two CPUs the baseline threads are pinned to.
    pub(super) cpus: (usize, usize),
    /// TCP baselines along this path, instead of cacheline and memcpy.
    pub(super) tcp: Option<TcpPath>,
}

impl Bench {
    /// The baselines of one step: for a latency test the cache-line
    /// ping-pong (or, over TCP, `tcp-pingpong` at every size), for a
    /// bandwidth test memcpy (or `tcp-stream`) at every size, for a rate
    /// test its own baseline at every size ([`Bench::rate`]).
    pub(super) fn baselines(&self, step: &Step) -> Result<Vec<Measurement>, String> {
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
pub(super) fn merge_baselines(
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
