use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;

use crate::PublishResult;
use crate::bindings::destination_handler::outbox::relay::types as wit;

/// One outbox row, as handed to a handler or an observer.
///
/// The payload stays JSON text until a handler asks for it, so a handler that only forwards it
/// never parses it. `Debug` shows sizes and header names only: logging an envelope never leaks
/// its payload or header values.
#[derive(Clone)]
pub struct Envelope {
    pub entry_id: i64,
    /// A stable idempotency key for the destination (a UUIDv7).
    pub carrier_id: String,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub event_type: String,
    pub destination_type: String,
    pub destination: String,
    /// The payload as JSON text; see [`Envelope::payload_value`] and [`Envelope::payload_as`].
    pub payload: String,
    /// Application headers only, no framework keys.
    pub headers: BTreeMap<String, String>,
    /// JSON text: `{"context": …, "delivery": {"outbox": {…}}}`.
    pub metadata: String,
    /// Unix milliseconds.
    pub scheduled_at: Option<i64>,
    /// Attempts made before this one (0 for the first).
    pub attempt: u32,
    pub max_attempts: u32,
    /// Unix milliseconds.
    pub created_at: i64,
}

impl Envelope {
    /// The payload as a JSON value.
    pub fn payload_value(&self) -> Result<serde_json::Value, PayloadError> {
        self.payload_as()
    }

    /// The payload deserialised into `T`; an error names the field path where it went wrong.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        let mut json = serde_json::Deserializer::from_str(&self.payload);
        let value = serde_path_to_error::deserialize(&mut json).map_err(|error| {
            let path = field_path(error.path());
            PayloadError::new(error.into_inner(), path)
        })?;
        json.end()
            .map_err(|error| PayloadError::new(error, String::new()))?;
        Ok(value)
    }
}

impl From<wit::Envelope> for Envelope {
    fn from(envelope: wit::Envelope) -> Self {
        Envelope {
            entry_id: envelope.entry_id,
            carrier_id: envelope.carrier_id,
            aggregate_type: envelope.aggregate_type,
            aggregate_id: envelope.aggregate_id,
            event_type: envelope.event_type,
            destination_type: envelope.destination_type,
            destination: envelope.destination,
            payload: envelope.payload,
            headers: envelope.headers.into_iter().collect(),
            metadata: envelope.metadata,
            scheduled_at: envelope.scheduled_at,
            attempt: envelope.attempt,
            max_attempts: envelope.max_attempts,
            created_at: envelope.created_at,
        }
    }
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("entry_id", &self.entry_id)
            .field("carrier_id", &self.carrier_id)
            .field("event_type", &self.event_type)
            .field("destination_type", &self.destination_type)
            .field("payload_bytes", &self.payload.len())
            .field("header_names", &self.headers.keys().collect::<Vec<_>>())
            .field("attempt", &self.attempt)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

/// The payload could not be read as the type asked for.
///
/// It says where, never what: serde's own messages quote the offending value, which could be
/// part of the payload. The field path is made of the type's field names and array indexes (a key
/// that is not a plain name, such as a map key from the payload, shows as `?`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// True when the text is not JSON at all, false when it is JSON of another shape.
    pub malformed: bool,
    /// Where the shape is wrong, e.g. `order.items[2].price`; empty at the top level.
    pub path: String,
    pub line: usize,
    pub column: usize,
}

impl PayloadError {
    fn new(error: serde_json::Error, mut path: String) -> Self {
        // The one message worth keeping names a field of the type, not a value.
        if let Some(field) = missing_field(&error.to_string()) {
            path = join(&path, field);
        }
        PayloadError {
            malformed: !error.is_data(),
            path,
            line: error.line(),
            column: error.column(),
        }
    }
}

impl From<serde_json::Error> for PayloadError {
    fn from(error: serde_json::Error) -> Self {
        PayloadError::new(error, String::new())
    }
}

/// `missing field `name`` → `name`, when it is a plain name.
fn missing_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("missing field `")?;
    let field = &rest[..rest.find('`')?];
    is_plain_name(field).then_some(field)
}

fn is_plain_name(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut shown = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => shown.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                let key = if is_plain_name(key) {
                    key.as_str()
                } else {
                    "?"
                };
                shown = join(&shown, key);
            }
            Segment::Unknown => shown = join(&shown, "?"),
        }
    }
    shown
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.malformed {
            f.write_str("the payload is not valid JSON")?;
        } else if self.path.is_empty() {
            f.write_str("the payload does not have the expected shape")?;
        } else {
            write!(
                f,
                "the payload does not have the expected shape at `{}`",
                self.path
            )?;
        }
        write!(f, " (line {}, column {})", self.line, self.column)
    }
}

impl std::error::Error for PayloadError {}

/// A payload that cannot be read will not become readable on retry: dead-letter it.
impl From<PayloadError> for PublishResult {
    fn from(error: PayloadError) -> Self {
        PublishResult::permanent(error.to_string()).with_error_type("payload")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Order {
        order_id: String,
        lines: Vec<Line>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Line {
        price_cents: u64,
    }

    fn envelope(payload: &str) -> Envelope {
        Envelope {
            entry_id: 1,
            carrier_id: String::new(),
            aggregate_type: None,
            aggregate_id: None,
            event_type: String::new(),
            destination_type: String::new(),
            destination: String::new(),
            payload: payload.to_owned(),
            headers: BTreeMap::new(),
            metadata: String::new(),
            scheduled_at: None,
            attempt: 0,
            max_attempts: 1,
            created_at: 0,
        }
    }

    #[test]
    fn a_wrong_value_is_named_by_its_field_path_never_quoted() {
        let payload =
            r#"{"order_id": "o-1", "lines": [{"price_cents": 1}, {"price_cents": "secret"}]}"#;
        let error = envelope(payload).payload_as::<Order>().unwrap_err();
        assert_eq!(error.path, "lines[1].price_cents");
        let message = error.to_string();
        assert!(message.contains("at `lines[1].price_cents`"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn a_missing_field_is_named() {
        let error = envelope(r#"{"lines": []}"#)
            .payload_as::<Order>()
            .unwrap_err();
        assert_eq!(error.path, "order_id");
    }

    #[test]
    fn a_map_key_that_is_not_a_plain_name_is_not_shown() {
        let payload = r#"{"a secret key": "x"}"#;
        let error = envelope(payload)
            .payload_as::<BTreeMap<String, u32>>()
            .unwrap_err();
        assert_eq!(error.path, "?");
        assert!(!error.to_string().contains("secret"));
    }

    #[test]
    fn text_that_is_not_json_is_malformed_without_a_path() {
        let error = envelope("{nope").payload_value().unwrap_err();
        assert!(error.malformed);
        assert_eq!(
            error.to_string(),
            "the payload is not valid JSON (line 1, column 2)"
        );
    }
}
