//! Lease recovery: rows a node claimed and never finished go back to PENDING.

use super::{OutboxRepository, RepositoryError};
use std::time::Duration;

impl OutboxRepository {
    /// Returns PROCESSING rows claimed longer than `lease` ago to PENDING, attempt unchanged, and says
    /// how many. Deliberately unguarded: its job is to take rows from nodes that are gone.
    pub async fn reclaim_stale(&self, lease: Duration) -> Result<u64, RepositoryError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let done = sqlx::query(&self.sql.reclaim_stale)
            .bind(lease_ms)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
