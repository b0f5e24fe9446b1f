//! Retention: deleting old published, dead-lettered and inbox rows in bounded batches.

use super::{OutboxRepository, RepositoryError};

/// What one cleanup run deleted, and in how many statements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub deleted: u64,
    pub batches: u32,
}

impl OutboxRepository {
    /// PUBLISHED rows published more than `retention_days` ago.
    pub async fn cleanup_published(
        &self,
        retention_days: u32,
        batch_size: u32,
    ) -> Result<CleanupReport, RepositoryError> {
        self.delete_in_batches(&self.sql.cleanup_published, retention_days, batch_size)
            .await
    }

    /// DEAD_LETTER rows dead-lettered more than `retention_days` ago.
    pub async fn cleanup_dead_letter(
        &self,
        retention_days: u32,
        batch_size: u32,
    ) -> Result<CleanupReport, RepositoryError> {
        self.delete_in_batches(&self.sql.cleanup_dead_letter, retention_days, batch_size)
            .await
    }

    /// Inbox dedup records first seen more than `retention_days` ago.
    pub async fn cleanup_inbox(
        &self,
        retention_days: u32,
        batch_size: u32,
    ) -> Result<CleanupReport, RepositoryError> {
        self.delete_in_batches(&self.sql.cleanup_inbox, retention_days, batch_size)
            .await
    }

    /// Short statements keep locks and WAL bursts small; repeats until a batch comes back short.
    async fn delete_in_batches(
        &self,
        sql: &str,
        retention_days: u32,
        batch_size: u32,
    ) -> Result<CleanupReport, RepositoryError> {
        let days = i32::try_from(retention_days).unwrap_or(i32::MAX);
        let limit = i64::from(batch_size.max(1));
        let mut report = CleanupReport::default();
        loop {
            let deleted = sqlx::query(sql)
                .bind(days)
                .bind(limit)
                .execute(&self.pool)
                .await?
                .rows_affected();
            report.deleted += deleted;
            report.batches += 1;
            if deleted < limit as u64 {
                return Ok(report);
            }
        }
    }
}
