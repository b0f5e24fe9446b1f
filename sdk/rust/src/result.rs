use std::time::Duration;

use crate::{EntryDisposition, Failure, PublishOutcome, PublishResult, RetryableFailure};

impl PublishResult {
    /// Delivered: the row is marked published.
    pub fn success() -> Self {
        PublishResult::Success
    }

    /// A transient failure: the row is tried again with backoff, and dead-lettered once its
    /// attempts run out.
    pub fn retryable(message: impl Into<String>) -> Self {
        PublishResult::Retryable(RetryableFailure {
            message: message.into(),
            error_type: None,
            retry_after_ms: None,
        })
    }

    /// A failure that retrying cannot fix: the row is dead-lettered now.
    pub fn permanent(message: impl Into<String>) -> Self {
        PublishResult::Permanent(failure(message))
    }

    /// This node cannot deliver the row now: it is deferred without spending an attempt.
    pub fn unresolvable(message: impl Into<String>) -> Self {
        PublishResult::Unresolvable(message.into())
    }

    /// Tags a retryable or permanent failure with a short machine-readable type (it shows in
    /// metrics and observer events). Success and unresolvable carry no type and are returned as
    /// they are.
    pub fn with_error_type(self, error_type: impl Into<String>) -> Self {
        match self {
            PublishResult::Retryable(failure) => PublishResult::Retryable(RetryableFailure {
                error_type: Some(error_type.into()),
                ..failure
            }),
            PublishResult::Permanent(failure) => PublishResult::Permanent(Failure {
                error_type: Some(error_type.into()),
                ..failure
            }),
            other => other,
        }
    }

    /// Asks the host to wait at least `delay` before the next attempt of a retryable failure (what
    /// an HTTP `Retry-After` asks). The host waits at least its own backoff too, and never longer
    /// than its backoff maximum; the attempt is spent as for any retry. Other results are returned
    /// as they are.
    pub fn with_retry_after(self, delay: Duration) -> Self {
        match self {
            PublishResult::Retryable(failure) => PublishResult::Retryable(RetryableFailure {
                retry_after_ms: Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
                ..failure
            }),
            other => other,
        }
    }

    /// The delay a retryable failure asks for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PublishResult::Retryable(failure) => failure.retry_after_ms.map(Duration::from_millis),
            _ => None,
        }
    }
}

fn failure(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        error_type: None,
    }
}

impl PublishOutcome {
    /// The WIT name, for log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            PublishOutcome::Success => "success",
            PublishOutcome::RetryableFailure => "retryable-failure",
            PublishOutcome::PermanentFailure => "permanent-failure",
            PublishOutcome::Unresolvable => "unresolvable",
        }
    }
}

impl EntryDisposition {
    /// The WIT name, for log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryDisposition::Published => "published",
            EntryDisposition::RetryScheduled => "retry-scheduled",
            EntryDisposition::DeadLettered => "dead-lettered",
            EntryDisposition::Deferred => "deferred",
        }
    }
}
