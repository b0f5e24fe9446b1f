//! A stored outbox row, as the relay reads it.

use crate::text;
use chrono::{DateTime, Utc};
use sqlx::Postgres;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use std::str::FromStr;
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

    /// The value of the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "PENDING",
            OutboxState::Processing => "PROCESSING",
            OutboxState::Published => "PUBLISHED",
            OutboxState::DeadLetter => "DEAD_LETTER",
        }
    }
}

/// A `state` column holding a value this version does not know (a row written with plain SQL, or by
/// a later version). It names the value as a short token only, so a hostile one cannot forge a log
/// line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the row state {0} is not one this version knows")]
pub struct UnknownState(String);

/// The longest state a message repeats (the column is VARCHAR(32)).
const MAX_STATE_CHARS: usize = 32;

impl FromStr for OutboxState {
    type Err = UnknownState;

    fn from_str(value: &str) -> Result<Self, UnknownState> {
        OutboxState::ALL
            .into_iter()
            .find(|state| state.as_str() == value)
            .ok_or_else(|| UnknownState(text::token(value, MAX_STATE_CHARS).unwrap_or_default()))
    }
}

/// Read as text, so every statement decodes a state the same way: a value this version does not know
/// fails the read with [`UnknownState`].
impl sqlx::Type<Postgres> for OutboxState {
    fn type_info() -> PgTypeInfo {
        <&str as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for OutboxState {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse()?)
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
    pub state: OutboxState,
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
            state: row.try_get("state")?,
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

#[cfg(test)]
mod tests {
    use super::{OutboxState, UnknownState};

    #[test]
    fn every_state_reads_back_from_its_column_value() {
        for state in OutboxState::ALL {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
    }

    #[test]
    fn an_unknown_state_is_an_error_naming_it_as_a_short_token() {
        assert_eq!(
            "pending".parse::<OutboxState>(),
            Err(UnknownState("pending".into()))
        );
        let hostile = format!("X\n2024-01-01 INFO forged{}", "y".repeat(100));
        let message = hostile.parse::<OutboxState>().unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.len() < 100, "{message}");
    }
}
