//! Latency samples to percentiles, and one measured result.

use serde::{Deserialize, Serialize};

/// One measured figure set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// Test name (`put-lat`, `cacheline`, ...).
    pub test: String,
    /// Message size in bytes (0 where it does not apply).
    pub size: u64,
    /// Iterations measured.
    pub iters: u64,
    /// Latency percentiles in nanoseconds (latency tests).
    pub latency: Option<Latency>,
    /// Bandwidth (bandwidth tests).
    pub bandwidth: Option<Bandwidth>,
    /// The percentile curve of a latency test: `[percentile, ns]` points,
    /// percentiles from 0 towards 100 on a "nines" grid (see [`curve`]),
    /// the last point the maximum. Empty for the other tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<[f64; 2]>,
    /// Application threads of PE 0 that ran a rate test at once, each on
    /// its own context (`perf --threads`); absent without the option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// The aggregate rate of `threads` threads over one thread's, both
    /// measured in the same run (the multi-thread row of `--threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ratio: Option<f64>,
}

/// Latency percentiles, nanoseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// Bandwidth figures.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Bandwidth {
    /// Gigabytes (10^9 bytes) per second.
    pub gbps: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
}

impl Measurement {
    /// A throughput result: `msgs` messages of `size` bytes in `secs`
    /// seconds (GB/s and messages per second).
    pub fn throughput(test: &str, size: u64, msgs: u64, secs: f64) -> Measurement {
        let secs = secs.max(1e-9);
        Measurement {
            test: test.into(),
            size,
            iters: msgs,
            latency: None,
            bandwidth: Some(Bandwidth {
                gbps: size as f64 * msgs as f64 / secs / 1e9,
                msgs_per_s: msgs as f64 / secs,
            }),
            curve: Vec::new(),
            threads: None,
            thread_ratio: None,
        }
    }

    /// A latency result: the percentiles and the curve of `samples`
    /// (nanoseconds, each scaled by `scale`); sorts `samples` in place.
    pub fn latency(
        test: &str,
        size: u64,
        iters: u64,
        samples: &mut [u64],
        scale: f64,
    ) -> Measurement {
        let latency = Latency::from_samples(samples, scale);
        Measurement {
            test: test.into(),
            size,
            iters,
            latency,
            bandwidth: None,
            curve: curve(samples, scale),
            threads: None,
            thread_ratio: None,
        }
    }

    /// A result with no figures (its measurement failed).
    pub fn none(test: &str, size: u64) -> Measurement {
        Measurement {
            test: test.into(),
            size,
            iters: 0,
            latency: None,
            bandwidth: None,
            curve: Vec::new(),
            threads: None,
            thread_ratio: None,
        }
    }
}

/// Steps of the curve's grid, in nines: 20 points from one nine to the next
/// (0 to 90 %, 90 to 99 %, ...).
pub const CURVE_STEP: f64 = 0.05;

/// The percentile curve of `sorted` (ascending, nanoseconds scaled by
/// `scale`): at percentiles `100 (1 - 10^-x)` for `x` = 0, [`CURVE_STEP`],
/// ... up to `log10(n)` (the resolution `n` samples have), where the last
/// point is the maximum, as HdrHistogram's percentile plots are drawn.
pub fn curve(sorted: &[u64], scale: f64) -> Vec<[f64; 2]> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let top = (n as f64).log10();
    let steps = (top / CURVE_STEP).ceil() as usize;
    (0..=steps)
        .map(|k| {
            let x = (k as f64 * CURVE_STEP).min(top);
            let q = 1.0 - 10f64.powf(-x);
            let i = if k == steps {
                n - 1
            } else {
                (((n - 1) as f64 * q).round() as usize).min(n - 1)
            };
            [q * 100.0, sorted[i] as f64 * scale]
        })
        .collect()
}

/// The mean of two curves on the same grid (a baseline measured before and
/// after a test, with the same sample count); `a` alone when the grids
/// differ.
pub fn mean_curve(a: &[[f64; 2]], b: &[[f64; 2]]) -> Vec<[f64; 2]> {
    if a.len() != b.len() || a.iter().zip(b).any(|(p, q)| p[0] != q[0]) {
        return a.to_vec();
    }
    a.iter()
        .zip(b)
        .map(|(p, q)| [p[0], (p[1] + q[1]) / 2.0])
        .collect()
}

impl Latency {
    /// Percentiles of `samples` (nanoseconds), each scaled by `scale` (0.5 for
    /// a round trip's one-way latency). Sorts `samples` in place.
    pub fn from_samples(samples: &mut [u64], scale: f64) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i.min(samples.len() - 1)] as f64 * scale
        };
        Some(Latency {
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn percentiles() {
        let mut s: Vec<u64> = (1..=1000).rev().collect();
        let l = Latency::from_samples(&mut s, 1.0).unwrap();
        assert_eq!((l.p50, l.p99, l.p999, l.max), (501.0, 990.0, 999.0, 1000.0));
        let l = Latency::from_samples(&mut [10, 20], 0.5).unwrap();
        assert_eq!((l.p50, l.max), (10.0, 10.0));
        assert!(Latency::from_samples(&mut [], 1.0).is_none());
    }

    #[test]
    fn curves() {
        let mut s: Vec<u64> = (1..=1000).rev().collect();
        let m = Measurement::latency("t", 8, 1000, &mut s, 1.0);
        let c = &m.curve;
        // 0 to 3 nines in steps of 0.05: 61 points, the last the maximum.
        assert_eq!(c.len(), 61);
        assert_eq!(c[0], [0.0, 1.0]);
        assert!(
            (c[20][0] - 90.0).abs() < 1e-9 && c[20][1] == 900.0,
            "{:?}",
            c[20]
        );
        assert!(
            (c[40][0] - 99.0).abs() < 1e-9 && c[40][1] == 990.0,
            "{:?}",
            c[40]
        );
        assert_eq!(c[60][1], 1000.0);
        assert!(
            c.windows(2)
                .all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1])
        );
        assert_eq!(curve(&[7], 0.5), vec![[0.0, 3.5]]);
        assert!(curve(&[], 1.0).is_empty());
        let b: Vec<[f64; 2]> = c.iter().map(|p| [p[0], p[1] + 2.0]).collect();
        assert_eq!(mean_curve(c, &b)[5][1], c[5][1] + 1.0);
        assert_eq!(mean_curve(c, &b[1..]), *c);
        // Throughput results have none, and JSON leaves it out.
        let t = Measurement::throughput("put-bw", 8, 10, 1.0);
        assert!(!serde_json::to_string(&t).unwrap().contains("curve"));
    }
}
