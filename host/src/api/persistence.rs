//! Store failures as the application API reports them.

/// SQLSTATEs where trying the whole transaction again has a reasonable chance of succeeding.
const RETRYABLE_SQLSTATES: &[&str] = &[
    "40P01", // deadlock_detected
    "40001", // serialization_failure
    "55P03", // lock_not_available
];

/// The store failed; the application's transaction should be rolled back. `retryable()` says whether
/// running it again may succeed (deadlocks, lock and serialization failures).
#[derive(Debug, thiserror::Error)]
#[error("inbox/outbox persistence failure ({}): {source}", if *.retryable { "retryable" } else { "not retryable" })]
pub struct PersistenceError {
    #[source]
    source: sqlx::Error,
    retryable: bool,
}

impl PersistenceError {
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    pub fn sqlstate(&self) -> Option<String> {
        match &self.source {
            sqlx::Error::Database(error) => error.code().map(|code| code.into_owned()),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for PersistenceError {
    fn from(source: sqlx::Error) -> Self {
        let retryable = matches!(&source, sqlx::Error::Database(error)
            if error.code().is_some_and(|code| RETRYABLE_SQLSTATES.contains(&code.as_ref())));
        PersistenceError { source, retryable }
    }
}
