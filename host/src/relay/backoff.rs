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

    /// The delay after attempt number `attempt` failed when the destination asked to be left
    /// alone for `asked` (a plugin's `retry-after-ms`): at least that long and at least the
    /// backoff, but never past the maximum, so a plugin can neither retry sooner than the backoff
    /// nor park a row for longer than the operator allows.
    pub fn delay_at_least(&self, attempt: u32, asked: Duration) -> Duration {
        self.delay(attempt).max(asked.min(self.max))
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

    #[test]
    fn an_asked_delay_is_waited_in_full_without_jitter() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(60));
        for _ in 0..50 {
            assert_eq!(
                backoff.delay_at_least(0, Duration::from_secs(2)),
                Duration::from_secs(2)
            );
        }
    }

    #[test]
    fn an_asked_delay_shorter_than_the_backoff_does_not_shorten_it() {
        let backoff = Backoff::new(Duration::from_millis(1000), Duration::from_secs(300));
        assert!(within(backoff.delay_at_least(3, Duration::ZERO), 8_000));
        assert!(within(
            backoff.delay_at_least(3, Duration::from_millis(1)),
            8_000
        ));
    }

    #[test]
    fn an_asked_delay_never_passes_the_maximum() {
        let backoff = Backoff::new(Duration::from_millis(1000), Duration::from_secs(300));
        let longest = Duration::from_millis(u64::MAX);
        assert_eq!(backoff.delay_at_least(0, longest), Duration::from_secs(300));
        assert_eq!(
            backoff.delay_at_least(u32::MAX, longest),
            Duration::from_secs(300)
        );
    }
}
