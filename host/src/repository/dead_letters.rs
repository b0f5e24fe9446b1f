//! Dead letters as operators handle them: listed, sent back to `PENDING`, or deleted. Every
//! statement touches `DEAD_LETTER` rows only, and never reads a payload or headers.

use super::{OutboxRepository, RepositoryError};
use chrono::{DateTime, Utc};

/// One dead-lettered row, without its payload and headers.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: i64,
    pub destination_type: String,
    pub destination: String,
    /// Attempts made, the last one included.
    pub attempt: i32,
    pub max_attempts: i32,
    pub error_type: Option<String>,
    pub last_error: Option<String>,
    /// When the row was dead-lettered (or last touched since).
    pub updated_at: DateTime<Utc>,
}

/// Which dead letters a redrive or a purge acts on. There is no "all": an operator names rows or a
/// destination type, so an empty filter can never empty the queue.
#[derive(Debug, Clone, PartialEq)]
pub enum DeadLetterSelection {
    Ids(Vec<i64>),
    /// The rows of one destination type, dead-lettered at or after `since` when given.
    Type {
        destination_type: String,
        since: Option<DateTime<Utc>>,
    },
}

impl DeadLetterSelection {
    /// The bind parameters of the selection clause: ids (empty for a type), type, since.
    fn parameters(&self) -> (&[i64], Option<&str>, Option<DateTime<Utc>>) {
        match self {
            DeadLetterSelection::Ids(ids) => (ids, None, None),
            DeadLetterSelection::Type {
                destination_type,
                since,
            } => (&[], Some(destination_type), *since),
        }
    }
}

impl OutboxRepository {
    /// The most recently dead-lettered rows first, at most `limit`, optionally of one destination
    /// type and dead-lettered at or after `since`.
    pub async fn list_dead_letters(
        &self,
        destination_type: Option<&str>,
        since: Option<DateTime<Utc>>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, RepositoryError> {
        Ok(sqlx::query_as(&self.sql.list_dead_letters)
            .bind(destination_type)
            .bind(since)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?)
    }

    /// Sends the selected dead letters back to `PENDING` with `attempt` reset to 0, available now.
    /// Returns their ids.
    pub async fn redrive_dead_letters(
        &self,
        selection: &DeadLetterSelection,
    ) -> Result<Vec<i64>, RepositoryError> {
        let (ids, destination_type, since) = selection.parameters();
        Ok(sqlx::query_scalar(&self.sql.redrive_dead_letters)
            .bind(ids)
            .bind(destination_type)
            .bind(since)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Deletes the selected dead letters; returns how many.
    pub async fn purge_dead_letters(
        &self,
        selection: &DeadLetterSelection,
    ) -> Result<u64, RepositoryError> {
        let (ids, destination_type, since) = selection.parameters();
        Ok(sqlx::query(&self.sql.purge_dead_letters)
            .bind(ids)
            .bind(destination_type)
            .bind(since)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }
}
