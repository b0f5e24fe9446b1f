//! A stored outbox row, as the relay reads it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Where a row stands in the relay's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxState {
    Pending,
    Processing,
    Published,
    DeadLetter,
}

impl OutboxState {
    pub const ALL: [OutboxState; 4] = [
        OutboxState::Pending,
        OutboxState::Processing,
        OutboxState::Published,
        OutboxState::DeadLetter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "PENDING",
            OutboxState::Processing => "PROCESSING",
            OutboxState::Published => "PUBLISHED",
            OutboxState::DeadLetter => "DEAD_LETTER",
        }
    }

    /// Lenient: a value this version does not know reads as `None` rather than failing the batch.
    pub fn parse(value: &str) -> Option<OutboxState> {
        OutboxState::ALL
            .into_iter()
            .find(|state| state.as_str() == value)
    }
}

/// The largest payload, as JSON text, that a claim reads: a larger one is left in the database and
/// its row dead-lettered, so one row can never make the host run out of memory (a batch holds at
/// most `batch_size` payloads of this size).
pub const MAX_PAYLOAD_BYTES: i64 = 16 * 1024 * 1024;

/// Every column of one outbox row. The JSON columns stay JSON text, as stored: the relay checks
/// them (a row written with plain SQL may hold anything) and hands them to plugins unparsed.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRecord {
    pub id: i64,
    pub carrier_id: Uuid,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub event_type: String,
    pub destination: String,
    /// Read leniently: whatever the column holds, even an id no plugin declares.
    pub destination_type: String,
    /// `None` when it is larger than [`MAX_PAYLOAD_BYTES`]: it was not read.
    pub payload: Option<String>,
    /// The payload's size as JSON text, read or not.
    pub payload_bytes: i64,
    /// The `headers` object, `None` when the column is NULL.
    pub headers: Option<String>,
    pub metadata: String,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub available_at: DateTime<Utc>,
    pub state: Option<OutboxState>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub claimed_at: Option<DateTime<Utc>>,
    pub claimed_by: Option<String>,
    pub published_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub error_type: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for OutboxRecord {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        let state: String = row.try_get("state")?;
        Ok(OutboxRecord {
            id: row.try_get("id")?,
            carrier_id: row.try_get("carrier_id")?,
            aggregate_type: row.try_get("aggregate_type")?,
            aggregate_id: row.try_get("aggregate_id")?,
            event_type: row.try_get("event_type")?,
            destination: row.try_get("destination")?,
            destination_type: row.try_get("destination_type")?,
            payload: row.try_get("payload")?,
            payload_bytes: row.try_get("payload_bytes")?,
            headers: row.try_get("headers")?,
            metadata: row.try_get("metadata")?,
            scheduled_at: row.try_get("scheduled_at")?,
            available_at: row.try_get("available_at")?,
            state: OutboxState::parse(&state),
            attempt: row.try_get("attempt")?,
            max_attempts: row.try_get("max_attempts")?,
            claimed_at: row.try_get("claimed_at")?,
            claimed_by: row.try_get("claimed_by")?,
            published_at: row.try_get("published_at")?,
            last_error: row.try_get("last_error")?,
            error_type: row.try_get("error_type")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}
