//! What one publish attempt means for its row (seed 000 relay cycle, steps 4–8).

use std::time::Duration;

use super::DeliveryPolicy;
use super::breaker::CallEnd;
use crate::error_type::HostErrorType;
use crate::plugins::{CallError, EntryDisposition, PublishOutcome, PublishResult};
use crate::repository::{Mark, stored_error, stored_error_type};

/// How an attempt ended, before the relay decides what that means for the row.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Attempted {
    Success,
    Retryable {
        message: String,
        error_type: Option<String>,
        /// The plugin's `retry-after-ms`, as it gave it: a wish, honoured within the backoff.
        retry_after: Option<Duration>,
    },
    Permanent {
        message: String,
        error_type: Option<String>,
    },
    Unresolvable,
    /// No loaded handler serves the row's destination type (a reload raced the claim).
    NoHandler,
    /// The plugin's calls kept every permit taken until it was too late to start the call within
    /// the row's lease, or the engine had no instance free to run it in: it is deferred, attempt
    /// unchanged.
    NotStarted,
    /// A delivery policy held the row back before any call (an open breaker, a rate or
    /// concurrency limit): it is deferred by `delay`, attempt unchanged.
    Held {
        delay: Duration,
    },
    /// The publish failed inside the host, not in the plugin (its task panicked): the plugin's
    /// answer is unknown, so the row is tried again without spending an attempt.
    HostFailed {
        message: String,
    },
}

impl Attempted {
    /// What the attempt tells the destination's circuit breaker: only a plugin's own answer counts.
    pub fn call_end(&self) -> CallEnd {
        match self {
            Attempted::Success | Attempted::Permanent { .. } => CallEnd::Answered,
            Attempted::Retryable { .. } => CallEnd::RetryableFailure,
            Attempted::Unresolvable
            | Attempted::NoHandler
            | Attempted::NotStarted
            | Attempted::Held { .. }
            | Attempted::HostFailed { .. } => CallEnd::Unknown,
        }
    }

    /// A call that timed out, trapped or hit its memory limit is a retryable failure of this entry.
    pub fn from_call(result: Result<PublishResult, CallError>) -> Self {
        match result {
            Ok(PublishResult::Success) => Attempted::Success,
            Ok(PublishResult::Retryable(failure)) => Attempted::Retryable {
                message: failure.message,
                error_type: failure.error_type,
                retry_after: failure.retry_after_ms.map(Duration::from_millis),
            },
            Ok(PublishResult::Permanent(failure)) => Attempted::Permanent {
                message: failure.message,
                error_type: failure.error_type,
            },
            Ok(PublishResult::Unresolvable(_)) => Attempted::Unresolvable,
            Err(error) => Attempted::Retryable {
                message: error.to_string(),
                error_type: Some(error.error_type().as_str().to_owned()),
                retry_after: None,
            },
        }
    }
}

/// The row's next state, and the facts observers receive. When the row is due again is the mark's
/// delay after the database records it: the decision carries no time.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Decision {
    pub mark: Mark,
    pub outcome: PublishOutcome,
    pub disposition: EntryDisposition,
    pub error_type: Option<String>,
}

/// Success → published; retryable → retry with backoff (at least the plugin's `retry-after-ms`, never
/// past the backoff maximum), or dead letter once the incremented attempt reaches `max_attempts`,
/// whether or not it asked for a delay; permanent → dead letter; unresolvable, no handler or not
/// started in time → deferred, attempt unchanged; held back by a delivery policy → deferred by the
/// policy's delay, attempt unchanged; a failure inside the host → retry with backoff, attempt
/// unchanged, never a dead letter. A plugin's message and error type are hostile input: they are
/// decided in the form they are stored in (sanitized, cut), which is also what observers see.
pub(super) fn decide(
    id: i64,
    attempt: u32,
    max_attempts: u32,
    attempted: Attempted,
    policy: &DeliveryPolicy,
) -> Decision {
    match attempted {
        Attempted::Success => Decision {
            mark: Mark::Published { id },
            outcome: PublishOutcome::Success,
            disposition: EntryDisposition::Published,
            error_type: None,
        },
        Attempted::Retryable {
            message,
            error_type,
            retry_after,
        } => {
            let error_type = error_type.as_deref().and_then(stored_error_type);
            let last_error = stored_error(&message);
            let new_attempt = attempt.saturating_add(1);
            if new_attempt >= max_attempts {
                return Decision {
                    mark: Mark::DeadLetter {
                        id,
                        last_error,
                        error_type: error_type.clone(),
                    },
                    outcome: PublishOutcome::RetryableFailure,
                    disposition: EntryDisposition::DeadLettered,
                    error_type,
                };
            }
            Decision {
                mark: Mark::Retry {
                    id,
                    new_attempt: i32::try_from(new_attempt).unwrap_or(i32::MAX),
                    delay: match retry_after {
                        Some(asked) => policy.backoff.delay_at_least(attempt, asked),
                        None => policy.backoff.delay(attempt),
                    },
                    last_error,
                    error_type: error_type.clone(),
                },
                outcome: PublishOutcome::RetryableFailure,
                disposition: EntryDisposition::RetryScheduled,
                error_type,
            }
        }
        Attempted::Permanent {
            message,
            error_type,
        } => {
            let error_type = error_type.as_deref().and_then(stored_error_type);
            Decision {
                mark: Mark::DeadLetter {
                    id,
                    last_error: stored_error(&message),
                    error_type: error_type.clone(),
                },
                outcome: PublishOutcome::PermanentFailure,
                disposition: EntryDisposition::DeadLettered,
                error_type,
            }
        }
        Attempted::HostFailed { message } => Decision {
            mark: Mark::Retry {
                id,
                new_attempt: i32::try_from(attempt).unwrap_or(i32::MAX),
                delay: policy.backoff.delay(attempt),
                last_error: stored_error(&message),
                error_type: Some(HostErrorType::HostFailure.as_str().to_owned()),
            },
            outcome: PublishOutcome::RetryableFailure,
            disposition: EntryDisposition::RetryScheduled,
            error_type: Some(HostErrorType::HostFailure.as_str().to_owned()),
        },
        Attempted::Held { delay } => Decision {
            mark: Mark::Unresolvable { id, delay },
            outcome: PublishOutcome::Unresolvable,
            disposition: EntryDisposition::Deferred,
            error_type: None,
        },
        Attempted::Unresolvable | Attempted::NoHandler | Attempted::NotStarted => Decision {
            mark: Mark::Unresolvable {
                id,
                delay: policy.unresolvable_delay,
            },
            outcome: PublishOutcome::Unresolvable,
            disposition: EntryDisposition::Deferred,
            error_type: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, RelayConfig};
    use crate::relay::DeliveryPolicies;
    use crate::repository::{MAX_ERROR_TYPE_CHARS, MAX_LAST_ERROR_CHARS};

    fn settings() -> DeliveryPolicy {
        DeliveryPolicies::from_config(&Config::default())
            .of("WEBHOOK")
            .clone()
    }

    fn retryable() -> Attempted {
        Attempted::Retryable {
            message: "HTTP 503".into(),
            error_type: Some("http_5xx".into()),
            retry_after: None,
        }
    }

    fn retryable_after(ms: u64) -> Attempted {
        Attempted::from_call(Ok(PublishResult::Retryable(
            crate::plugins::bindings::RetryableFailure {
                message: "HTTP 429".into(),
                error_type: Some("http-status".into()),
                retry_after_ms: Some(ms),
            },
        )))
    }

    fn retry_of(decision: Decision) -> (i32, Duration) {
        match decision.mark {
            Mark::Retry {
                new_attempt, delay, ..
            } => (new_attempt, delay),
            other => panic!("expected a retry, not {other:?}"),
        }
    }

    #[test]
    fn success_is_published() {
        let decision = decide(1, 0, 20, Attempted::Success, &settings());
        assert_eq!(decision.mark, Mark::Published { id: 1 });
        assert_eq!(decision.disposition, EntryDisposition::Published);
    }

    #[test]
    fn a_retryable_failure_schedules_the_next_attempt_with_backoff() {
        let decision = decide(1, 2, 20, retryable(), &settings());
        let Mark::Retry {
            new_attempt, delay, ..
        } = decision.mark
        else {
            panic!("expected a retry")
        };
        assert_eq!(new_attempt, 3);
        let delay_ms = delay.as_millis();
        assert!((3200..=4000).contains(&delay_ms), "{delay_ms}");
        assert_eq!(decision.disposition, EntryDisposition::RetryScheduled);
        assert_eq!(decision.mark.delay(), Some(delay));
    }

    #[test]
    fn a_retry_after_is_waited_in_full_and_spends_one_attempt() {
        let (new_attempt, delay) = retry_of(decide(1, 0, 20, retryable_after(2_000), &settings()));
        assert_eq!(new_attempt, 1);
        assert_eq!(delay, Duration::from_secs(2));
    }

    #[test]
    fn a_retry_after_shorter_than_the_backoff_keeps_the_backoff() {
        let (new_attempt, delay) = retry_of(decide(1, 4, 20, retryable_after(0), &settings()));
        assert_eq!(new_attempt, 5);
        let delay_ms = delay.as_millis();
        assert!((12_800..=16_000).contains(&delay_ms), "{delay_ms}");
    }

    #[test]
    fn a_hostile_retry_after_is_cut_to_the_backoff_maximum() {
        let max = RelayConfig::default().backoff_max_delay;
        for ms in [300_001, u64::MAX / 2, u64::MAX] {
            let (new_attempt, delay) = retry_of(decide(1, 0, 20, retryable_after(ms), &settings()));
            assert_eq!(new_attempt, 1);
            assert_eq!(delay, max, "{ms}");
        }
    }

    #[test]
    fn a_retry_after_on_the_last_attempt_still_dead_letters() {
        let decision = decide(1, 19, 20, retryable_after(1_000), &settings());
        assert!(matches!(decision.mark, Mark::DeadLetter { .. }));
        assert_eq!(decision.disposition, EntryDisposition::DeadLettered);
    }

    #[test]
    fn the_last_retryable_failure_dead_letters() {
        let decision = decide(1, 19, 20, retryable(), &settings());
        assert!(matches!(decision.mark, Mark::DeadLetter { .. }));
        assert_eq!(decision.mark.delay(), None);
        assert_eq!(decision.outcome, PublishOutcome::RetryableFailure);
        assert_eq!(decision.disposition, EntryDisposition::DeadLettered);
    }

    #[test]
    fn a_permanent_failure_dead_letters_at_once() {
        let attempted = Attempted::Permanent {
            message: "HTTP 404".into(),
            error_type: None,
        };
        let decision = decide(1, 0, 20, attempted, &settings());
        assert!(matches!(decision.mark, Mark::DeadLetter { .. }));
        assert_eq!(decision.disposition, EntryDisposition::DeadLettered);
    }

    #[test]
    fn unresolvable_and_no_handler_defer_without_an_attempt() {
        for attempted in [Attempted::Unresolvable, Attempted::NoHandler] {
            let decision = decide(1, 4, 20, attempted, &settings());
            assert!(matches!(decision.mark, Mark::Unresolvable { .. }));
            assert_eq!(decision.disposition, EntryDisposition::Deferred);
            assert_eq!(decision.mark.delay(), Some(settings().unresolvable_delay));
        }
    }

    #[test]
    fn a_row_held_by_a_policy_is_deferred_by_the_policy_s_delay_without_an_attempt() {
        let held = Attempted::Held {
            delay: Duration::from_millis(1234),
        };
        let decision = decide(1, 19, 20, held, &settings());
        assert_eq!(
            decision.mark,
            Mark::Unresolvable {
                id: 1,
                delay: Duration::from_millis(1234)
            }
        );
        assert_eq!(decision.disposition, EntryDisposition::Deferred);
    }

    #[test]
    fn a_failure_inside_the_host_retries_without_spending_an_attempt_even_on_the_last_one() {
        let attempted = Attempted::HostFailed {
            message: "the publish task panicked".into(),
        };
        let decision = decide(1, 19, 20, attempted, &settings());
        let Mark::Retry {
            new_attempt,
            delay,
            error_type,
            ..
        } = decision.mark
        else {
            panic!("expected a retry, not {:?}", decision.mark)
        };
        assert_eq!(new_attempt, 19);
        let delay_ms = delay.as_millis();
        assert!((240_000..=300_000).contains(&delay_ms), "{delay_ms}");
        assert_eq!(
            error_type.as_deref(),
            Some(HostErrorType::HostFailure.as_str())
        );
        assert_eq!(decision.disposition, EntryDisposition::RetryScheduled);
    }

    #[test]
    fn a_timeout_is_a_retryable_failure_typed_timeout() {
        let attempted = Attempted::from_call(Err(CallError::Timeout { limit_ms: 5 }));
        let decision = decide(1, 0, 20, attempted, &settings());
        assert_eq!(decision.error_type.as_deref(), Some("timeout"));
        assert_eq!(decision.outcome, PublishOutcome::RetryableFailure);
    }

    #[test]
    fn a_long_error_type_is_cut_to_a_short_token() {
        let attempted = Attempted::Permanent {
            message: "x".into(),
            error_type: Some("t".repeat(900)),
        };
        let decision = decide(1, 0, 20, attempted, &settings());
        assert_eq!(decision.error_type.unwrap().len(), MAX_ERROR_TYPE_CHARS);
    }

    #[test]
    fn a_hostile_message_and_error_type_are_decided_in_their_stored_form() {
        let attempted = Attempted::Retryable {
            message: format!("bad\0byte\r\n2024-01-01 INFO forged{}", "x".repeat(10_000)),
            error_type: Some("evil\0type\n".into()),
            retry_after: None,
        };
        let decision = decide(1, 0, 20, attempted, &settings());
        let Mark::Retry {
            last_error,
            error_type,
            ..
        } = decision.mark
        else {
            panic!("expected a retry")
        };
        assert!(last_error.starts_with("bad?byte??2024-01-01 INFO forged"));
        assert_eq!(last_error.chars().count(), MAX_LAST_ERROR_CHARS);
        assert_eq!(error_type.as_deref(), Some("evil_type_"));
        assert_eq!(decision.error_type, error_type);
    }
}
