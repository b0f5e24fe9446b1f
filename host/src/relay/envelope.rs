//! A claimed row as plugins receive it (seed 000 relay cycle, step 2). Rows written with plain SQL
//! may hold anything their columns allow; one that cannot be delivered as written is refused here,
//! with an error that names the entry and what is wrong with it, never a value it holds.

use crate::api::{InvalidEntry, MAX_KEY_CHARS_SHOWN, validate_header};
use crate::plugins::Envelope;
use crate::repository::{MAX_PAYLOAD_BYTES, OutboxRecord};
use crate::text::sanitize;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// A row the relay cannot deliver as written; it is dead-lettered rather than retried for ever.
#[derive(Debug, thiserror::Error)]
#[error("entry {id} cannot be relayed: {defect}")]
pub(super) struct InvalidRow {
    id: i64,
    defect: RowDefect,
}

#[derive(Debug, thiserror::Error)]
pub(super) enum RowDefect {
    #[error(
        "its attempt counters are out of range (attempt {attempt}, max_attempts {max_attempts}; \
         max_attempts must be at least 1)"
    )]
    AttemptCounters { attempt: i32, max_attempts: i32 },
    #[error("its payload of {bytes} bytes is larger than the relay's limit of {limit} bytes")]
    PayloadTooLarge { bytes: i64, limit: i64 },
    #[error("its headers are not a JSON object")]
    HeadersNotAnObject,
    /// `key` as the write path shows it: control characters replaced, cut to 128 characters.
    #[error("its header {key:?} is not a string")]
    HeaderNotAString { key: String },
    #[error(transparent)]
    Header(InvalidEntry),
    #[error("its metadata is not a JSON object")]
    MetadataNotAnObject,
}

/// Builds the envelope, consuming the row. Headers stay application-only; the relay's control facts
/// go to `metadata.delivery.outbox`, beside the stored `metadata.context`.
pub(super) fn build(row: OutboxRecord) -> Result<Envelope, InvalidRow> {
    let id = row.id;
    let invalid = |defect| InvalidRow { id, defect };
    let counters = || RowDefect::AttemptCounters {
        attempt: row.attempt,
        max_attempts: row.max_attempts,
    };
    let attempt = u32::try_from(row.attempt).map_err(|_| invalid(counters()))?;
    let max_attempts = u32::try_from(row.max_attempts)
        .ok()
        .filter(|&max| max >= 1)
        .ok_or_else(|| invalid(counters()))?;
    let headers = decode_headers(id, row.headers.as_deref()).map_err(invalid)?;
    let metadata = project_metadata(&row, attempt, max_attempts).map_err(invalid)?;
    let payload = row.payload.ok_or_else(|| {
        invalid(RowDefect::PayloadTooLarge {
            bytes: row.payload_bytes,
            limit: MAX_PAYLOAD_BYTES,
        })
    })?;
    Ok(Envelope {
        entry_id: row.id,
        carrier_id: row.carrier_id.to_string(),
        aggregate_type: row.aggregate_type,
        aggregate_id: row.aggregate_id,
        event_type: row.event_type,
        destination_type: row.destination_type,
        destination: row.destination,
        payload,
        headers,
        metadata,
        scheduled_at: row.scheduled_at.map(unix_ms),
        attempt,
        max_attempts,
        created_at: unix_ms(row.created_at),
    })
}

/// Headers are one JSON object of text values, under the write path's rules. A JSON null value is
/// dropped with a WARN naming the entry and the key (seed 000), the rest is delivered.
fn decode_headers(id: i64, json: Option<&str>) -> Result<Vec<(String, String)>, RowDefect> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let Ok(Value::Object(map)) = serde_json::from_str(json) else {
        return Err(RowDefect::HeadersNotAnObject);
    };
    let mut headers = Vec::with_capacity(map.len());
    for (key, value) in map {
        match value {
            Value::String(value) => {
                validate_header(&key, &value).map_err(RowDefect::Header)?;
                headers.push((key, value));
            }
            Value::Null => {
                let key = sanitize(&key, MAX_KEY_CHARS_SHOWN);
                tracing::warn!(
                    entry_id = id,
                    key,
                    "dropping a header whose value is JSON null"
                );
            }
            _ => {
                return Err(RowDefect::HeaderNotAString {
                    key: sanitize(&key, MAX_KEY_CHARS_SHOWN),
                });
            }
        }
    }
    Ok(headers)
}

fn project_metadata(
    row: &OutboxRecord,
    attempt: u32,
    max_attempts: u32,
) -> Result<String, RowDefect> {
    let Ok(Value::Object(mut metadata)) = serde_json::from_str::<Value>(&row.metadata) else {
        return Err(RowDefect::MetadataNotAnObject);
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
    Ok(Value::Object(metadata).to_string())
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
            payload: Some(r#"{"n":1}"#.into()),
            payload_bytes: 7,
            headers: Some(r#"{"traceparent":"00-x"}"#.into()),
            metadata: metadata.into(),
            scheduled_at: None,
            available_at: now,
            state: OutboxState::Processing,
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

    fn defect_of(row: OutboxRecord) -> String {
        build(row).expect_err("an invalid row").to_string()
    }

    fn with_headers(headers: &str) -> OutboxRecord {
        OutboxRecord {
            headers: Some(headers.into()),
            ..row("{}")
        }
    }

    #[test]
    fn a_negative_attempt_is_an_invalid_row() {
        let mut bad = row("{}");
        bad.attempt = -1;
        assert!(build(bad).is_err());
    }

    #[test]
    fn max_attempts_of_zero_or_less_is_an_invalid_row() {
        for max_attempts in [0, -3] {
            let bad = OutboxRecord {
                max_attempts,
                ..row("{}")
            };
            assert!(defect_of(bad).contains("max_attempts must be at least 1"));
        }
    }

    #[test]
    fn headers_that_are_not_an_object_are_an_invalid_row() {
        for headers in ["[1]", r#""text""#, "3"] {
            let message = defect_of(with_headers(headers));
            assert_eq!(
                message,
                "entry 7 cannot be relayed: its headers are not a JSON object"
            );
        }
    }

    #[test]
    fn a_header_value_that_is_not_a_string_names_the_key_never_the_value() {
        let message = defect_of(with_headers(r#"{"ok":"x","count":424242}"#));
        assert!(
            message.contains(r#"header "count" is not a string"#),
            "{message}"
        );
        assert!(!message.contains("424242"));
    }

    #[test]
    fn a_reserved_header_is_an_invalid_row_named_by_its_key() {
        let message = defect_of(with_headers(r#"{"Outbox-Forged":"secret-value"}"#));
        assert!(message.contains("Outbox-Forged") && message.contains("reserved prefix"));
        assert!(!message.contains("secret-value"));
    }

    #[test]
    fn a_null_header_value_is_dropped_and_the_rest_delivered() {
        let envelope = build(with_headers(r#"{"gone":null,"kept":"v"}"#)).unwrap();
        assert_eq!(envelope.headers, vec![("kept".to_owned(), "v".to_owned())]);
    }

    #[test]
    fn metadata_that_is_not_an_object_is_an_invalid_row() {
        for metadata in ["[]", "null", r#""text""#] {
            assert!(defect_of(row(metadata)).contains("metadata is not a JSON object"));
        }
    }

    #[test]
    fn a_payload_the_claim_did_not_read_is_too_large() {
        let bad = OutboxRecord {
            payload: None,
            payload_bytes: 100_000_000,
            ..row("{}")
        };
        assert!(defect_of(bad).contains("payload of 100000000 bytes is larger"));
    }
}
