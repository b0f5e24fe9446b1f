//! Lease recovery: rows a node claimed and never finished go back to PENDING; rows that no node
//! can ever claim end as dead letters.

use super::{OutboxRepository, RepositoryError};
use crate::error_type::HostErrorType;
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

    /// Dead-letters PENDING rows whose destination type is not a valid id (`^[A-Za-z0-9_-]{1,32}$`):
    /// rows written with plain SQL that no plugin can ever declare, which would otherwise wait for
    /// ever. Returns their ids; the stored error never repeats the type.
    pub async fn dead_letter_invalid_destination_types(&self) -> Result<Vec<i64>, RepositoryError> {
        Ok(sqlx::query_scalar(&self.sql.dead_letter_invalid_types)
            .bind(INVALID_DESTINATION_TYPE_ERROR)
            .bind(HostErrorType::InvalidRow.as_str())
            .fetch_all(&self.pool)
            .await?)
    }
}

const INVALID_DESTINATION_TYPE_ERROR: &str =
    "invalid destination type: must match ^[A-Za-z0-9_-]{1,32}$; no plugin can ever claim the row";
