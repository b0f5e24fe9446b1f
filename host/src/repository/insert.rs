//! Inserts that run on the application's own transaction, so they commit or roll back with its writes.

use super::Statements;
use crate::api::OutboxEntry;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

/// Inserts a validated entry and returns its id.
pub(crate) async fn insert_outbox(
    conn: &mut PgConnection,
    sql: &Statements,
    entry: &OutboxEntry,
    carrier_id: Uuid,
) -> Result<i64, sqlx::Error> {
    let headers = (!entry.headers.is_empty()).then_some(Json(&entry.headers));
    let metadata = match &entry.context {
        Some(context) => serde_json::json!({ "context": context }),
        None => serde_json::json!({}),
    };
    sqlx::query_scalar(&sql.insert_outbox)
        .bind(carrier_id)
        .bind(&entry.aggregate_type)
        .bind(&entry.aggregate_id)
        .bind(&entry.event_type)
        .bind(&entry.destination)
        .bind(&entry.destination_type)
        .bind(Json(&entry.payload))
        .bind(headers)
        .bind(Json(metadata))
        .bind(entry.scheduled_at)
        .bind(entry.available_at)
        .bind(i32::try_from(entry.max_attempts).unwrap_or(i32::MAX))
        .fetch_one(conn)
        .await
}

/// Records an inbound message; true when it is new. A duplicate is not an error, so the caller's
/// transaction stays usable.
pub(crate) async fn insert_inbox(
    conn: &mut PgConnection,
    sql: &Statements,
    message_id: &str,
    source: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(&sql.insert_inbox).bind(message_id).bind(source).execute(conn).await?;
    Ok(done.rows_affected() == 1)
}
