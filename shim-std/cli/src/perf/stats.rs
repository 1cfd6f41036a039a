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
        }
    }
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
}
