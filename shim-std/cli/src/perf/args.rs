//! `switchyard perf`'s command line: [`PerfArgs`], its checks, and the
//! [`Options`] a run works from.

use std::path::PathBuf;

use switchyard::config::parse_size;
use switchyard_launch::MAX_PES;

use super::{Options, Standalone, Test};
use crate::values;

/// Most measured (and warm-up) iterations per size: the latency tests keep
/// one 8-byte sample per iteration, so this bounds that buffer to 800 MB.
pub const MAX_ITERS: u64 = 100_000_000;

/// Most iterations per size with `--qd-sweep`, which keeps a sample per
/// operation in flight at every queue depth up to 64.
pub const MAX_QD_SWEEP_ITERS: u64 = MAX_ITERS / 64;

/// Most application threads of `--threads` (each takes one of the PE's
/// contexts).
pub const MAX_THREADS: u32 = 32;

/// Largest message size.
const MAX_SIZE: u64 = 1 << 30;

/// The tests and the baselines that run on their own.
const TESTS: [&str; 12] = [
    "put-lat",
    "get-lat",
    "atomic-lat",
    "put-bw",
    "put-rate",
    "get-rate",
    "atomic-rate",
    "channel-lat",
    "channel-bw",
    "broadcast-bw",
    "tcp-pingpong",
    "tcp-stream",
];

/// What `switchyard perf --help` says after the options.
const AFTER_HELP: &str = "\
Tests:
  put-lat       put ping-pong on a flag; one-way latency = RTT/2 (p50, p99, p99.9, max)
  get-lat       one blocking get of a block PE 1 has just written
  atomic-lat    one fetch-add on a word PE 1 has just written
  put-bw        a window of non-blocking puts, then quiet (GB/s, msg/s)
  put-rate      message rate: --window blocking puts of --size bytes from a local
                buffer (each with its sequence number), then quiet (msg/s)
  get-rate      --window non-blocking gets of --size bytes, then quiet (msg/s)
  atomic-rate   back-to-back blocking fetch-adds on one word of PE 1 (ops/s)
                The rate tests time PE 0's stream from its first measured
                operation to the last one's return; afterwards the target's
                state is checked (last put's number, the get's bytes, the
                counter's total)
  channel-lat   ping-pong over two typed SPSC channels (switchyard::channel) of
                --size-byte messages (8 to 1024, default 64), RTT/2
  channel-bw    stream of --size-byte messages over one channel, send by send,
                received in batches (msg/s)
  broadcast-bw  the publisher's rate over a broadcast stream to --subscribers PEs
                (default 2), under backpressure and under drop, beside
                channel-bw in the same launch (ratio: the publisher's rate over
                one SPSC producer's; 1/ratio is a broadcast send's cost in
                SPSC sends)
Baselines (measured right before and right after each test; ratio against their mean):
  cacheline     bare cache-line ping-pong between two pinned threads (put-lat)
  remote-read   one thread reading what a thread on another core just wrote (get-lat)
  remote-rmw    one fetch_add on a word another core just wrote (atomic-lat)
  memcpy        single-thread copy bandwidth (bandwidth ceiling)
  raw-store     put-rate's loop as plain stores (memcpy) into a mapping shared with
                a second process, then per window a Release store of a counter
                that process polls
  raw-load      get-rate's loop as plain loads from such a mapping, an Acquire
                fence per window
  raw-atomic    atomic-rate's loop as fetch_add on a word of such a mapping
  tcp-pingpong  busy-polled ping-pong of the test's message size over a bare TCP
                socket pair (TCP_NODELAY), RTT/2: the latency floor over TCP
  tcp-rtt       the same, the full round trip (get-lat and atomic-lat over TCP)
  raw-ring      channel-lat's ping-pong (channel-bw's stream) over rings of the
                channel's slot layout in a mapping shared by a thread and a
                forked process, no library (the TCP ones over TCP)
  tcp-stream    one thread writing messages over a TCP connection, one reading
                them: the bandwidth ceiling over TCP
  tcp-records   put-rate over TCP: per window, --window records of --size bytes
                in one send, then the reader's count of records back (busy-polled,
                yielding after 64 empty polls, as the library's waits do)
  tcp-rr        get-rate and atomic-rate over TCP: a request/response stream
                with the test's window of 16-byte requests outstanding
                (--window for get-rate; 1 for atomic-rate, whose fetch-adds
                block), replies of --size bytes (8 for atomic-rate)
  The TCP baselines replace the others with --transport tcp or --sim,
  and also run on their own (no PEs): switchyard perf tcp-pingpong [--size S]
  [--iters N], switchyard perf tcp-stream [--sizes ...] [--iters N].";

/// What `switchyard perf --help` says before the options.
pub(crate) const ABOUT: &str = "\
Benchmarks the data path with real PEs, each result beside a baseline measured
in the same run. Without TEST, a short default suite and a table of ratios.";

/// `switchyard perf` arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = AFTER_HELP
)]
pub struct PerfArgs {
    /// The test, or a TCP baseline on its own [default: a short suite]
    #[arg(value_name = "TEST", value_parser = clap::builder::PossibleValuesParser::new(TESTS))]
    pub test: Option<String>,
    /// PEs to launch (2..=4096; PEs 0 and 1 measure)
    #[arg(
        short = 'n',
        value_name = "PES",
        allow_negative_numbers = true,
        default_value_t = 2,
        value_parser = clap::value_parser!(u32).range(2..=i64::from(MAX_PES))
    )]
    pub n: u32,
    /// One message size (e.g. 8, 4K, 1M; at most 1G; the rate tests 1 to
    /// 64, atomic-rate 8)
    #[arg(long, value_name = "S", value_parser = size, overrides_with = "sizes")]
    pub size: Option<u64>,
    /// Powers of two from A to B, or a list A,B,C [default: 8 for latency,
    /// 8..4M for put-bw, 8,64 for put-rate and get-rate; over TCP 64 for
    /// put-lat, tcp-pingpong and the rate tests, 64,4K,1M for put-bw and
    /// tcp-stream; atomic-rate is always 8]
    #[arg(long, value_name = "A..B|A,B,C", value_parser = sizes, overrides_with = "size")]
    pub sizes: Option<Sizes>,
    /// Measured iterations per size, at most 100000000 (1562500 with
    /// --qd-sweep) [default: 20000 latency, 4096 messages bandwidth;
    /// rate tests 2000000 operations, over TCP 50000 (atomic-rate 20000)]
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = iterations)]
    pub iters: Option<u64>,
    /// Unmeasured iterations first, at most 100000000 [default: 10% of
    /// --iters]
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = iterations)]
    pub warmup: Option<u64>,
    /// Operations per quiet in put-bw, put-rate and get-rate (1 to 4096);
    /// atomic-rate's fetch-adds block, one at a time
    #[arg(
        long,
        value_name = "W",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub window: u64,
    /// auto (what select chooses), shm, tcp (the PEs connect only over TCP,
    /// SWITCHYARD_TRANSPORTS=tcp, with TCP baselines) or verbs (the verbs
    /// driver on its own, two drivers on one device)
    #[arg(
        long,
        value_name = "T",
        default_value = "auto",
        value_parser = clap::builder::PossibleValuesParser::new(["auto", "shm", "tcp", "verbs"])
    )]
    pub transport: String,
    /// With --transport verbs: latency tests at queue depths 1, 2, 4 ... 64
    /// (latency must stay flat while offloaded)
    #[arg(long = "qd-sweep")]
    pub qd_sweep: bool,
    /// Run the PEs in the running sim NAME, one per node, and the TCP
    /// baselines between its first two nodes over rail 0 [default: this
    /// machine, TCP over 127.0.0.1]
    #[arg(long, value_name = "NAME", value_parser = values::sim_name)]
    pub sim: Option<String>,
    /// Rate tests: PE 0 streams from N application threads at once, each
    /// on its own context, and from one thread in the same run (1 to 32);
    /// the PEs are then not pinned
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_THREADS))
    )]
    pub threads: u32,
    /// broadcast-bw: subscriber PEs, 1 to 64 (PEs 1 to N) [default: 2]
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub subscribers: Option<u32>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    /// Also draw each latency result's percentile curve beside its
    /// baseline's into FILE (SVG)
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Run as one PE of a measurement (what perf launches)
    #[arg(long, hide = true)]
    pub worker: bool,
    /// Where PE 0 of a worker writes its measurements
    #[arg(long = "worker-out", value_name = "PATH", hide = true)]
    pub worker_out: Option<PathBuf>,
}

/// The message sizes of `--sizes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes(pub Vec<u64>);

/// `--size`: one message size, 1 byte to 1G.
fn size(v: &str) -> Result<u64, String> {
    parse_size(v)
        .filter(|&s| s > 0 && s <= MAX_SIZE)
        .ok_or_else(|| "expected a size such as 8, 4K or 1M (at most 1G)".into())
}

/// `--sizes`: `A..B`, the powers of two from A to B, or a list `A,B,C`.
fn sizes(s: &str) -> Result<Sizes, String> {
    let bad =
        || String::from("expected A..B (powers of two) or a list A,B,C, with sizes such as 8..4M");
    if s.contains(',') || !s.contains("..") {
        let v = s
            .split(',')
            .map(|x| parse_size(x.trim()).filter(|&v| v > 0 && v <= MAX_SIZE))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(bad)?;
        return Ok(Sizes(v));
    }
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b) = (
        parse_size(a).ok_or_else(bad)?,
        parse_size(b).ok_or_else(bad)?,
    );
    if a == 0 || a > b || b > MAX_SIZE {
        return Err("need 0 < A <= B <= 1G".into());
    }
    Ok(Sizes(
        std::iter::successors(Some(a), |&x| Some(x.saturating_mul(2)))
            .take_while(|&x| x <= b)
            .collect(),
    ))
}

/// `--iters`, `--warmup`: a whole number up to [`MAX_ITERS`].
fn iterations(v: &str) -> Result<u64, String> {
    let n: u64 = v
        .parse()
        .map_err(|_| format!("expected a whole number, at most {MAX_ITERS}"))?;
    if n > MAX_ITERS {
        return Err(format!(
            "at most {MAX_ITERS} (each iteration keeps an 8-byte sample)"
        ));
    }
    Ok(n)
}

/// Smallest message of a rate test: 1 byte, the smallest message-rate size
/// of the OSU OpenSHMEM benchmarks.
pub const RATE_MIN_SIZE: u64 = 1;

/// Largest message of a rate test: 64 bytes, one cache line. Past it an
/// operation's cost is in the bytes it moves, which `put-bw` measures.
pub const RATE_MAX_SIZE: u64 = 64;

/// Why `perf`'s arguments do not make a run (a usage error, exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// `--qd-sweep` without `--transport verbs`.
    #[error("--qd-sweep needs --transport verbs")]
    QdSweepTransport,
    /// `--qd-sweep` with more than [`MAX_QD_SWEEP_ITERS`] iterations.
    #[error(
        "--iters {iters}: at most {MAX_QD_SWEEP_ITERS} with --qd-sweep \
         (it keeps N x 64 samples at queue depth 64)"
    )]
    QdSweepIters {
        /// The iterations asked for.
        iters: u64,
    },
    /// A rate test with `--transport verbs`.
    #[error("{test} runs over shm or tcp; --transport verbs has no rate tests")]
    RateOverVerbs {
        /// The test.
        test: &'static str,
    },
    /// A rate test's size outside [`RATE_MIN_SIZE`]..=[`RATE_MAX_SIZE`].
    #[error(
        "{test}: size {size} is out of range: a rate test's messages are \
         {RATE_MIN_SIZE} to {RATE_MAX_SIZE} bytes (larger ones: put-bw)"
    )]
    RateSize {
        /// The test.
        test: &'static str,
        /// The size asked for.
        size: u64,
    },
    /// `--plot` with a test that has no latency curve.
    #[error(
        "--plot draws latency curves: {test} has none (put-lat, get-lat, \
         atomic-lat, tcp-pingpong or the default suite)"
    )]
    PlotNoLatency {
        /// The test.
        test: &'static str,
    },
    /// `--threads` with a test other than a rate test.
    #[error(
        "--threads {threads}: only the rate tests (put-rate, get-rate, atomic-rate) run threads"
    )]
    ThreadsNeedRate {
        /// The threads asked for.
        threads: u32,
    },
    /// `--subscribers` with a test other than `broadcast-bw`.
    #[error("--subscribers {subscribers}: only broadcast-bw has subscribers")]
    SubscribersNeedBroadcast {
        /// The subscribers asked for.
        subscribers: u32,
    },
    /// `atomic-rate` with a size other than 8.
    #[error("atomic-rate --size {size}: its fetch-adds are on one 8-byte word (--size 8)")]
    AtomicSize {
        /// The size asked for.
        size: u64,
    },
}

impl PerfArgs {
    /// The run these arguments ask for.
    ///
    /// # Errors
    ///
    /// `--qd-sweep` without `--transport verbs`, or with more than
    /// [`MAX_QD_SWEEP_ITERS`] iterations; a rate test over verbs, or with a
    /// size out of its range ([`OptionsError`]).
    pub(super) fn options(&self) -> Result<Options, OptionsError> {
        if self.qd_sweep && self.transport != "verbs" {
            return Err(OptionsError::QdSweepTransport);
        }
        if let Some(iters) = self.iters
            && self.qd_sweep
            && iters > MAX_QD_SWEEP_ITERS
        {
            return Err(OptionsError::QdSweepIters { iters });
        }
        let name = self.test.as_deref();
        let test = name.and_then(Test::parse);
        let standalone = name.and_then(Standalone::parse);
        match (test, standalone) {
            (Some(t), _) if self.plot.is_some() && !t.is_latency() => {
                return Err(OptionsError::PlotNoLatency { test: t.name() });
            }
            (_, Some(s)) if self.plot.is_some() && s == Standalone::TcpStream => {
                return Err(OptionsError::PlotNoLatency { test: s.name() });
            }
            _ => {}
        }
        let sizes = match (&self.size, &self.sizes) {
            (Some(s), _) => Some(vec![*s]),
            (None, Some(Sizes(v))) => Some(v.clone()),
            (None, None) => None,
        };
        if self.threads > 1 && !test.is_some_and(Test::is_rate) {
            return Err(OptionsError::ThreadsNeedRate {
                threads: self.threads,
            });
        }
        let channel = name.and_then(super::channel::Which::parse);
        if let Some(subscribers) = self.subscribers
            && channel != Some(super::channel::Which::Broadcast)
        {
            return Err(OptionsError::SubscribersNeedBroadcast { subscribers });
        }
        let subscribers = self.subscribers.unwrap_or(2);
        if let Some(t) = test
            && t.is_rate()
        {
            rate_sizes(t, self.transport.as_str(), sizes.as_deref())?;
        }
        Ok(Options {
            test,
            channel,
            subscribers,
            standalone,
            // broadcast-bw: the publisher and its subscribers (PEs past them,
            // with a larger -n, stand by).
            n: if channel == Some(super::channel::Which::Broadcast) {
                self.n.max(subscribers + 1)
            } else {
                self.n
            },
            sizes,
            iters: self.iters.map(|n| n.max(1)),
            warmup: self.warmup,
            window: self.window.clamp(1, 4096),
            json: self.json,
            transport: self.transport.clone(),
            sim: self.sim.clone(),
            worker_out: self.worker_out.clone(),
            qd_sweep: self.qd_sweep,
            plot: self.plot.clone(),
            threads: self.threads,
        })
    }
}

/// Checks rate test `t`'s transport and sizes (`None`: its defaults).
fn rate_sizes(t: Test, transport: &str, sizes: Option<&[u64]>) -> Result<(), OptionsError> {
    let test = t.name();
    if transport == "verbs" {
        return Err(OptionsError::RateOverVerbs { test });
    }
    for &size in sizes.unwrap_or_default() {
        if t == Test::AtomicRate && size != 8 {
            return Err(OptionsError::AtomicSize { size });
        }
        if !(RATE_MIN_SIZE..=RATE_MAX_SIZE).contains(&size) {
            return Err(OptionsError::RateSize { test, size });
        }
    }
    Ok(())
}

/// Parses `perf ARGS` for a unit test: the options, or the error as printed.
#[cfg(test)]
pub(super) fn parse(args: &[String]) -> Result<Options, String> {
    let mut all = vec!["perf"];
    all.extend(args.iter().map(String::as_str));
    match crate::cli::parse_strs(&all) {
        Ok(crate::cli::Command::Perf(p)) => p.options().map_err(|e| e.to_string()),
        Ok(other) => panic!("{other:?}"),
        Err(out) => Err(out.stderr),
    }
}

/// The default sizes of put-bw.
pub(super) fn default_bw_sizes() -> Vec<u64> {
    sizes("8..4M").map(|s| s.0).unwrap_or_default()
}
