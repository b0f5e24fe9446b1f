//! The delay before a retried row may be claimed again.

use std::time::Duration;

/// `min(base · 2^attempt, max)`, shortened by up to a fifth at random so that rows failing together
/// do not all come back together.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The delay after attempt number `attempt` (0 for the first) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let full = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.max);
        full.mul_f64(1.0 - fastrand::f64() * 0.2)
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    fn within(delay: Duration, full_ms: u64) -> bool {
        let ms = delay.as_secs_f64() * 1000.0;
        ms <= full_ms as f64 && ms >= full_ms as f64 * 0.8
    }

    #[test]
    fn doubles_from_the_base_per_attempt() {
        let backoff = Backoff::new(Duration::from_millis(1000), Duration::from_secs(300));
        assert!(within(backoff.delay(0), 1000));
        assert!(within(backoff.delay(1), 2000));
        assert!(within(backoff.delay(5), 32_000));
    }

    #[test]
    fn never_exceeds_the_maximum_even_for_huge_attempts() {
        let backoff = Backoff::new(Duration::from_millis(1000), Duration::from_secs(300));
        assert!(within(backoff.delay(9), 300_000));
        assert!(within(backoff.delay(u32::MAX), 300_000));
    }
}
