//! What a run does: its steps (a test over some sizes) and the rounds of a
//! rate or bandwidth test.

use std::time::{Duration, Instant};

use switchyard::config::format_size;

use super::{Options, Test, args};

/// The shape of a bandwidth or rate run: `warm` unmeasured rounds, then
/// `rounds` measured ones, of `window` operations each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rounds {
    /// Operations per round (at least 1).
    pub(super) window: u64,
    /// Measured rounds (at least 1).
    pub(super) rounds: u64,
    /// Unmeasured rounds first.
    pub(super) warm: u64,
}

impl Rounds {
    /// At least `iters` measured operations and `warmup` unmeasured ones,
    /// in whole rounds of `window`.
    pub(super) fn new(iters: u64, warmup: u64, window: u64) -> Rounds {
        let window = window.max(1);
        Rounds {
            window,
            rounds: iters.div_ceil(window).max(1),
            warm: warmup.div_ceil(window),
        }
    }

    /// Measured operations.
    pub(super) fn ops(self) -> u64 {
        self.rounds * self.window
    }

    /// All operations, warm-up included.
    pub(super) fn total_ops(self) -> u64 {
        (self.rounds + self.warm) * self.window
    }

    /// Runs `round` (given its index) for the warm-up rounds, then for the
    /// measured ones with the clock running; the seconds those took, or the
    /// first error.
    pub(super) fn time<E>(self, round: impl FnMut(u64) -> Result<(), E>) -> Result<f64, E> {
        let (t0, t1) = self.span(|| {}, round)?;
        Ok((t1 - t0).as_secs_f64())
    }

    /// As [`Rounds::time`], calling `ready` between the warm-up and the
    /// measured rounds (threads line up there); when the measured rounds
    /// started and ended.
    pub(super) fn span<E>(
        self,
        ready: impl FnOnce(),
        mut round: impl FnMut(u64) -> Result<(), E>,
    ) -> Result<(Instant, Instant), E> {
        for i in 0..self.warm {
            round(i)?;
        }
        ready();
        let t0 = Instant::now();
        for i in self.warm..self.warm + self.rounds {
            round(i)?;
        }
        Ok((t0, Instant::now()))
    }
}

/// One step of a run: a test over some sizes.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub(super) test: Test,
    pub(super) sizes: Vec<u64>,
    pub(super) iters: u64,
    pub(super) warmup: u64,
    /// Operations per quiet (`put-bw`, `put-rate`, `get-rate`); 1 for
    /// `atomic-rate`, whose fetch-adds are blocking.
    pub(super) window: u64,
}

impl Step {
    /// The rounds of a rate test's run.
    pub(super) fn rounds(&self) -> Rounds {
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
pub(super) const WORKER_TIMEOUT: Duration = Duration::from_secs(300);

pub(super) fn steps(o: &Options) -> Vec<Step> {
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

pub(super) fn heap_for(sizes: &[u64]) -> String {
    let max = sizes.iter().copied().max().unwrap_or(8);
    // Two message buffers plus slack.
    format_size((2 * max + (1 << 20)).next_power_of_two().max(4 << 20))
}
