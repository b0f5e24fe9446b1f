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

    /// The payload deserialised into `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        serde_json::from_str(&self.payload).map_err(PayloadError::from)
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
/// part of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// True when the text is not JSON at all, false when it is JSON of another shape.
    pub malformed: bool,
    pub line: usize,
    pub column: usize,
}

impl From<serde_json::Error> for PayloadError {
    fn from(error: serde_json::Error) -> Self {
        PayloadError {
            malformed: !error.is_data(),
            line: error.line(),
            column: error.column(),
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problem = if self.malformed {
            "is not valid JSON"
        } else {
            "does not have the expected shape"
        };
        write!(
            f,
            "the payload {problem} (line {}, column {})",
            self.line, self.column
        )
    }
}

impl std::error::Error for PayloadError {}

/// A payload that cannot be read will not become readable on retry: dead-letter it.
impl From<PayloadError> for PublishResult {
    fn from(error: PayloadError) -> Self {
        PublishResult::permanent(error.to_string()).with_error_type("payload")
    }
}
