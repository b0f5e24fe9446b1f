//! The mock envelope: every field has a default, and a JSON document overrides any of them with the
//! WIT field names in snake_case, `payload` and `metadata` as any JSON value and `headers` as an
//! object of strings.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::plugins::bindings::Envelope;

/// A plausible first attempt of one row for `destination_type`.
pub fn mock_envelope(destination_type: &str) -> Envelope {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Envelope {
        entry_id: 1,
        carrier_id: "01900000-0000-7000-8000-000000000001".to_owned(),
        aggregate_type: Some("Order".to_owned()),
        aggregate_id: Some("order-1".to_owned()),
        event_type: "OrderCreated".to_owned(),
        destination_type: destination_type.to_owned(),
        destination: "mock-destination".to_owned(),
        payload: r#"{"mock":true}"#.to_owned(),
        headers: Vec::new(),
        metadata: r#"{"context":{},"delivery":{"outbox":{}}}"#.to_owned(),
        scheduled_at: None,
        attempt: 0,
        max_attempts: 5,
        created_at: i64::try_from(now_ms).unwrap_or(i64::MAX),
    }
}

/// `envelope` in the form `--envelope` reads: WIT names in snake_case, `payload` and `metadata` as
/// JSON values (as text when they are not JSON), `headers` as an object. Printed by
/// `plugin test --show-envelope`, so a plugin author sees every default and can start a file from it.
pub fn envelope_json(envelope: &Envelope) -> Value {
    let json_or_text =
        |text: &str| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    let headers: serde_json::Map<String, Value> = envelope
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    serde_json::json!({
        "entry_id": envelope.entry_id,
        "carrier_id": envelope.carrier_id,
        "aggregate_type": envelope.aggregate_type,
        "aggregate_id": envelope.aggregate_id,
        "event_type": envelope.event_type,
        "destination_type": envelope.destination_type,
        "destination": envelope.destination,
        "payload": json_or_text(&envelope.payload),
        "headers": headers,
        "metadata": json_or_text(&envelope.metadata),
        "scheduled_at": envelope.scheduled_at,
        "attempt": envelope.attempt,
        "max_attempts": envelope.max_attempts,
        "created_at": envelope.created_at,
    })
}

/// The fields of a mock envelope a test sets; absent fields keep their defaults, and `null` clears
/// an optional one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeOverride {
    entry_id: Option<i64>,
    carrier_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    aggregate_type: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    aggregate_id: Option<Option<String>>,
    event_type: Option<String>,
    destination_type: Option<String>,
    destination: Option<String>,
    #[serde(default, deserialize_with = "present")]
    payload: Option<Value>,
    headers: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "present")]
    metadata: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    scheduled_at: Option<Option<i64>>,
    attempt: Option<u32>,
    max_attempts: Option<u32>,
    created_at: Option<i64>,
}

/// Tells a field given as `null` (`Some(null)`) from an absent one (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

impl EnvelopeOverride {
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub fn apply(self, mut envelope: Envelope) -> Envelope {
        fn set<T>(field: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *field = value;
            }
        }
        set(&mut envelope.entry_id, self.entry_id);
        set(&mut envelope.carrier_id, self.carrier_id);
        set(&mut envelope.aggregate_type, self.aggregate_type);
        set(&mut envelope.aggregate_id, self.aggregate_id);
        set(&mut envelope.event_type, self.event_type);
        set(&mut envelope.destination_type, self.destination_type);
        set(&mut envelope.destination, self.destination);
        set(
            &mut envelope.payload,
            self.payload.map(|payload| payload.to_string()),
        );
        set(
            &mut envelope.headers,
            self.headers.map(|headers| headers.into_iter().collect()),
        );
        set(
            &mut envelope.metadata,
            self.metadata.map(|metadata| metadata.to_string()),
        );
        set(&mut envelope.scheduled_at, self.scheduled_at);
        set(&mut envelope.attempt, self.attempt);
        set(&mut envelope.max_attempts, self.max_attempts);
        set(&mut envelope.created_at, self.created_at);
        envelope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overridden(json: &str) -> Envelope {
        EnvelopeOverride::from_json(json)
            .unwrap()
            .apply(mock_envelope("NOOP"))
    }

    #[test]
    fn the_mock_envelope_carries_the_destination_type_it_is_made_for() {
        assert_eq!(mock_envelope("WEBHOOK").destination_type, "WEBHOOK");
    }

    #[test]
    fn an_empty_override_keeps_every_default() {
        let envelope = overridden("{}");
        let default = mock_envelope("NOOP");
        assert_eq!(
            (envelope.entry_id, envelope.payload, envelope.destination),
            (default.entry_id, default.payload, default.destination)
        );
    }

    #[test]
    fn the_payload_is_any_json_value_and_becomes_json_text() {
        assert_eq!(
            overridden(r#"{"payload": {"id": 7}}"#).payload,
            r#"{"id":7}"#
        );
        assert_eq!(overridden(r#"{"payload": "text"}"#).payload, r#""text""#);
        assert_eq!(overridden(r#"{"payload": null}"#).payload, "null");
    }

    #[test]
    fn headers_are_an_object_of_strings() {
        let envelope = overridden(r#"{"headers": {"b": "2", "a": "1"}}"#);
        assert_eq!(
            envelope.headers,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ]
        );
    }

    #[test]
    fn null_clears_an_optional_field() {
        let envelope = overridden(r#"{"aggregate_id": null, "scheduled_at": 5}"#);
        assert_eq!(envelope.aggregate_id, None);
        assert_eq!(envelope.scheduled_at, Some(5));
    }

    #[test]
    fn a_printed_envelope_reads_back_as_the_same_envelope() {
        let envelope = overridden(r#"{"payload": {"id": 7}, "headers": {"a": "1"}}"#);
        let printed = envelope_json(&envelope).to_string();
        let read_back = EnvelopeOverride::from_json(&printed)
            .unwrap()
            .apply(mock_envelope("OTHER"));
        assert_eq!(read_back, envelope);
    }

    #[test]
    fn an_unknown_field_is_rejected() {
        let error = EnvelopeOverride::from_json(r#"{"destinaton": "x"}"#).unwrap_err();
        assert!(error.to_string().contains("destinaton"), "{error}");
    }
}
