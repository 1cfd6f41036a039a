//! Reconnect pacing: exponential backoff with full random jitter (AWS
//! architecture blog, "Exponential Backoff And Jitter"): attempt `k` waits a
//! uniformly random time in `[0, min(cap, base * 2^k)]`, so PEs that lost a
//! link at the same moment do not reconnect in lockstep.

use core::time::Duration;

use rand::{Rng, SeedableRng, rngs::SmallRng};

/// Backoff state of one (peer, rail).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    rng: SmallRng,
}

impl Backoff {
    /// A fresh schedule; `seed` makes the jitter reproducible.
    pub(crate) fn new(base: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff {
            base,
            cap,
            attempt: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The ceiling of the next delay (before jitter).
    pub(crate) fn ceiling(&self) -> Duration {
        let mult = 1u32 << self.attempt.min(20);
        self.base.saturating_mul(mult).min(self.cap)
    }

    /// The delay before the next attempt; each call doubles the ceiling.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceil = self.ceiling().as_nanos() as u64;
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_nanos(self.rng.random_range(0..=ceil))
    }

    /// After a successful connection.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter() {
        let (base, cap) = (Duration::from_millis(5), Duration::from_millis(500));
        let mut b = Backoff::new(base, cap, 1);
        let mut ceilings = Vec::new();
        for _ in 0..12 {
            let c = b.ceiling();
            let d = b.next_delay();
            assert!(d <= c);
            ceilings.push(c.as_millis());
        }
        assert_eq!(&ceilings[..8], &[5, 10, 20, 40, 80, 160, 320, 500]);
        assert!(ceilings[8..].iter().all(|&c| c == 500));
        b.reset();
        assert_eq!(b.ceiling(), base);
        // Jitter spreads: 1000 draws at the cap are not all alike.
        let mut c = Backoff::new(cap, cap, 2);
        let draws: std::collections::BTreeSet<u128> = (0..1000)
            .map(|_| c.next_delay().as_micros() / 10_000)
            .collect();
        assert!(draws.len() > 30, "{draws:?}");
    }
}
