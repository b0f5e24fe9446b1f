//! A claimed row as plugins receive it (seed 000 relay cycle, step 2).

use crate::plugins::Envelope;
use crate::repository::OutboxRecord;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

/// A row whose attempt counters cannot be represented; it is dead-lettered rather than retried for ever.
#[derive(Debug, thiserror::Error)]
#[error(
    "the row's attempt counters are out of range (attempt {attempt}, max_attempts {max_attempts})"
)]
pub(super) struct InvalidRow {
    attempt: i32,
    max_attempts: i32,
}

/// Builds the envelope, consuming the row. Headers stay application-only; the relay's control facts
/// go to `metadata.delivery.outbox`, beside the stored `metadata.context`.
pub(super) fn build(row: OutboxRecord) -> Result<Envelope, InvalidRow> {
    let invalid = || InvalidRow {
        attempt: row.attempt,
        max_attempts: row.max_attempts,
    };
    let attempt = u32::try_from(row.attempt).map_err(|_| invalid())?;
    let max_attempts = u32::try_from(row.max_attempts).map_err(|_| invalid())?;
    let metadata = project_metadata(&row, attempt, max_attempts);
    Ok(Envelope {
        entry_id: row.id,
        carrier_id: row.carrier_id.to_string(),
        aggregate_type: row.aggregate_type,
        aggregate_id: row.aggregate_id,
        event_type: row.event_type,
        destination_type: row.destination_type,
        destination: row.destination,
        payload: row.payload,
        headers: row.headers,
        metadata,
        scheduled_at: row.scheduled_at.map(unix_ms),
        attempt,
        max_attempts,
        created_at: unix_ms(row.created_at),
    })
}

fn project_metadata(row: &OutboxRecord, attempt: u32, max_attempts: u32) -> String {
    let mut metadata = match serde_json::from_str(&row.metadata) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let delivery = metadata.entry("delivery").or_insert_with(|| json!({}));
    if !delivery.is_object() {
        *delivery = json!({});
    }
    delivery["outbox"] = json!({
        "message_id": row.carrier_id.to_string(),
        "entry_id": row.id,
        "event_type": row.event_type,
        "aggregate_type": row.aggregate_type,
        "aggregate_id": row.aggregate_id,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "created_at": row.created_at.to_rfc3339(),
        "scheduled_at": row.scheduled_at.map(|at| at.to_rfc3339()),
    });
    Value::Object(metadata).to_string()
}

pub(super) fn unix_ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::OutboxState;

    fn row(metadata: &str) -> OutboxRecord {
        let now = Utc::now();
        OutboxRecord {
            id: 7,
            carrier_id: uuid::Uuid::now_v7(),
            aggregate_type: Some("Order".into()),
            aggregate_id: Some("42".into()),
            event_type: "order.confirmed".into(),
            destination: "https://example.com".into(),
            destination_type: "WEBHOOK".into(),
            payload: r#"{"n":1}"#.into(),
            headers: vec![("traceparent".into(), "00-x".into())],
            metadata: metadata.into(),
            scheduled_at: None,
            available_at: now,
            state: Some(OutboxState::Processing),
            attempt: 2,
            max_attempts: 20,
            claimed_at: Some(now),
            claimed_by: Some("n-0".into()),
            published_at: None,
            last_error: None,
            error_type: None,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn relay_control_goes_to_metadata_beside_the_context_never_to_headers() {
        let envelope = build(row(r#"{"context":{"locale":"fr"}}"#)).unwrap();
        assert_eq!(
            envelope.headers,
            vec![("traceparent".to_owned(), "00-x".to_owned())]
        );
        let metadata: Value = serde_json::from_str(&envelope.metadata).unwrap();
        assert_eq!(metadata["context"], json!({"locale": "fr"}));
        assert_eq!(metadata["delivery"]["outbox"]["entry_id"], json!(7));
        assert_eq!(metadata["delivery"]["outbox"]["attempt"], json!(2));
        assert_eq!(
            metadata["delivery"]["outbox"]["message_id"],
            json!(envelope.carrier_id)
        );
    }

    #[test]
    fn other_delivery_sections_are_kept() {
        let envelope = build(row(r#"{"delivery":{"delayed_job":{"at":1}}}"#)).unwrap();
        let metadata: Value = serde_json::from_str(&envelope.metadata).unwrap();
        assert_eq!(metadata["delivery"]["delayed_job"], json!({"at": 1}));
    }

    #[test]
    fn a_negative_attempt_is_an_invalid_row() {
        let mut bad = row("{}");
        bad.attempt = -1;
        assert!(build(bad).is_err());
    }
}
