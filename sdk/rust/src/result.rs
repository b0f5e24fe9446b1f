use crate::{EntryDisposition, Failure, PublishOutcome, PublishResult};

impl PublishResult {
    /// Delivered: the row is marked published.
    pub fn success() -> Self {
        PublishResult::Success
    }

    /// A transient failure: the row is tried again with backoff, and dead-lettered once its
    /// attempts run out.
    pub fn retryable(message: impl Into<String>) -> Self {
        PublishResult::Retryable(failure(message))
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
            PublishResult::Retryable(failure) => {
                PublishResult::Retryable(typed(failure, error_type))
            }
            PublishResult::Permanent(failure) => {
                PublishResult::Permanent(typed(failure, error_type))
            }
            other => other,
        }
    }
}

fn failure(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        error_type: None,
    }
}

fn typed(failure: Failure, error_type: impl Into<String>) -> Failure {
    Failure {
        error_type: Some(error_type.into()),
        ..failure
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
