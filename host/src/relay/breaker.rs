//! One destination's circuit breaker: after `threshold` consecutive retryable failures within
//! `window` it opens for `cool_down`, during which the destination is not called; then one probe
//! is let through (half-open), whose result closes it or opens it again. Only retryable failures
//! count: a permanent failure or a success shows the destination answers, and ends the streak.

use std::time::{Duration, Instant};

/// When a breaker opens and for how long; `threshold` 0 turns breakers off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    pub threshold: u32,
    pub window: Duration,
    pub cool_down: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// No call until `until`.
    Open {
        until: Instant,
    },
    /// The cool-down is over: one probe may be called, and while it runs nothing else.
    HalfOpen {
        probing: bool,
    },
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen { .. } => "half_open",
        }
    }
}

/// What the breaker says about calling the destination now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Call,
    /// The one call of a half-open breaker: its result decides.
    Probe,
    /// Not now; ask again after this long.
    Wait(Duration),
}

/// How an admitted call ended, as far as the breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// Published, or refused for good: the destination answers.
    Answered,
    RetryableFailure,
    /// No answer to judge by (no handler, the host failed, the call was abandoned).
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    state: BreakerState,
    /// Consecutive retryable failures in the current streak.
    failures: u32,
    streak_started: Option<Instant>,
    /// When it last opened, for the operators' view.
    opened_at: Option<Instant>,
}

/// How long a row waits while a half-open breaker's probe runs.
const WAIT_FOR_PROBE: Duration = Duration::from_secs(1);

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            state: BreakerState::Closed,
            failures: 0,
            streak_started: None,
            opened_at: None,
        }
    }
}

impl Breaker {
    pub fn state(&self) -> BreakerState {
        self.state
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn opened_at(&self) -> Option<Instant> {
        self.opened_at
    }

    /// Whether it holds nothing worth keeping: closed with no streak under way.
    pub fn is_idle(&self, now: Instant, settings: &BreakerSettings) -> bool {
        self.state == BreakerState::Closed
            && self
                .streak_started
                .is_none_or(|started| now.duration_since(started) > settings.window)
    }

    pub fn verdict(&mut self, now: Instant, settings: &BreakerSettings) -> Verdict {
        match self.state {
            BreakerState::Closed => Verdict::Call,
            BreakerState::Open { until } if now < until => Verdict::Wait(until - now),
            BreakerState::Open { .. } | BreakerState::HalfOpen { probing: false } => {
                self.state = BreakerState::HalfOpen { probing: true };
                Verdict::Probe
            }
            BreakerState::HalfOpen { probing: true } => {
                Verdict::Wait(WAIT_FOR_PROBE.min(settings.cool_down))
            }
        }
    }

    /// Records how a call ended; `probe` when it was the half-open breaker's probe. Returns true
    /// when this call opened the breaker.
    pub fn record(
        &mut self,
        end: CallEnd,
        probe: bool,
        now: Instant,
        settings: &BreakerSettings,
    ) -> bool {
        match end {
            CallEnd::Unknown => {
                if probe && self.state == (BreakerState::HalfOpen { probing: true }) {
                    self.state = BreakerState::HalfOpen { probing: false };
                }
                false
            }
            CallEnd::Answered => {
                if probe || self.state == BreakerState::Closed {
                    self.state = BreakerState::Closed;
                    self.failures = 0;
                    self.streak_started = None;
                }
                false
            }
            CallEnd::RetryableFailure => {
                let streak_over = self
                    .streak_started
                    .is_none_or(|started| now.duration_since(started) > settings.window);
                if streak_over {
                    self.failures = 0;
                    self.streak_started = Some(now);
                }
                self.failures = self.failures.saturating_add(1);
                let opens = match self.state {
                    BreakerState::Closed => {
                        settings.threshold > 0 && self.failures >= settings.threshold
                    }
                    BreakerState::HalfOpen { .. } => probe,
                    BreakerState::Open { .. } => false,
                };
                if opens {
                    self.state = BreakerState::Open {
                        until: now + settings.cool_down,
                    };
                    self.opened_at = Some(now);
                }
                opens
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: BreakerSettings = BreakerSettings {
        threshold: 3,
        window: Duration::from_secs(10),
        cool_down: Duration::from_secs(5),
    };

    fn fail(breaker: &mut Breaker, now: Instant) -> bool {
        breaker.record(CallEnd::RetryableFailure, false, now, &SETTINGS)
    }

    #[test]
    fn opens_after_the_threshold_of_consecutive_retryable_failures() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        assert!(!fail(&mut breaker, now));
        assert!(!fail(&mut breaker, now));
        assert_eq!(breaker.verdict(now, &SETTINGS), Verdict::Call);
        assert!(fail(&mut breaker, now));
        assert_eq!(
            breaker.verdict(now + Duration::from_secs(1), &SETTINGS),
            Verdict::Wait(Duration::from_secs(4))
        );
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not_open_it() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        fail(&mut breaker, now);
        fail(&mut breaker, now + Duration::from_secs(1));
        assert!(!fail(&mut breaker, now + Duration::from_secs(11)));
        assert_eq!(breaker.failures(), 1);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn a_success_or_a_permanent_failure_ends_the_streak_and_never_opens_it() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        fail(&mut breaker, now);
        fail(&mut breaker, now);
        breaker.record(CallEnd::Answered, false, now, &SETTINGS);
        assert_eq!(breaker.failures(), 0);
        for _ in 0..100 {
            breaker.record(CallEnd::Answered, false, now, &SETTINGS);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn after_the_cool_down_exactly_one_probe_goes_through() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        (0..3).for_each(|_| {
            fail(&mut breaker, now);
        });
        let later = now + Duration::from_secs(5);
        assert_eq!(breaker.verdict(later, &SETTINGS), Verdict::Probe);
        assert_eq!(
            breaker.verdict(later, &SETTINGS),
            Verdict::Wait(Duration::from_secs(1))
        );
    }

    #[test]
    fn a_probe_that_succeeds_closes_it_and_one_that_fails_opens_it_again() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        (0..3).for_each(|_| {
            fail(&mut breaker, now);
        });
        let later = now + Duration::from_secs(5);
        breaker.verdict(later, &SETTINGS);
        assert!(breaker.record(CallEnd::RetryableFailure, true, later, &SETTINGS));
        assert_eq!(
            breaker.state(),
            BreakerState::Open {
                until: later + Duration::from_secs(5)
            }
        );
        let again = later + Duration::from_secs(5);
        assert_eq!(breaker.verdict(again, &SETTINGS), Verdict::Probe);
        breaker.record(CallEnd::Answered, true, again, &SETTINGS);
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.verdict(again, &SETTINGS), Verdict::Call);
    }

    #[test]
    fn a_probe_without_an_answer_lets_the_next_one_through() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        (0..3).for_each(|_| {
            fail(&mut breaker, now);
        });
        let later = now + Duration::from_secs(5);
        breaker.verdict(later, &SETTINGS);
        breaker.record(CallEnd::Unknown, true, later, &SETTINGS);
        assert_eq!(breaker.verdict(later, &SETTINGS), Verdict::Probe);
    }

    #[test]
    fn a_late_failure_of_a_call_admitted_before_it_opened_does_not_extend_the_cool_down() {
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        (0..3).for_each(|_| {
            fail(&mut breaker, now);
        });
        assert!(!fail(&mut breaker, now + Duration::from_secs(2)));
        assert_eq!(
            breaker.verdict(now + Duration::from_secs(5), &SETTINGS),
            Verdict::Probe
        );
    }

    #[test]
    fn a_threshold_of_zero_never_opens() {
        let off = BreakerSettings {
            threshold: 0,
            ..SETTINGS
        };
        let (mut breaker, now) = (Breaker::default(), Instant::now());
        for _ in 0..1000 {
            breaker.record(CallEnd::RetryableFailure, false, now, &off);
        }
        assert_eq!(breaker.verdict(now, &off), Verdict::Call);
    }
}
