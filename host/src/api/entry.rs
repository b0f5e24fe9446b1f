//! An outbox entry as an application writes it, and the rules it must meet before it is inserted.

use crate::destination_type::{self, InvalidDestinationType};
use crate::text::sanitize;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::fmt;

/// Header keys with this prefix belong to the framework; applications may not set them.
pub const RESERVED_HEADER_PREFIX: &str = "outbox-";
/// The attempt limit a row gets unless the entry says otherwise (the schema's default too).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 20;
const MAX_COLUMN_CHARS: usize = 255;
pub(crate) const MAX_KEY_CHARS_SHOWN: usize = 128;

/// One outbound side effect. `Debug` never shows the payload, header values or context.
#[derive(Clone, PartialEq)]
pub struct OutboxEntry {
    pub aggregate_type: Option<String>,
    /// Rows of one aggregate are delivered one at a time, in id order.
    pub aggregate_id: Option<String>,
    pub event_type: String,
    /// Selects the plugin: `^[A-Za-z0-9_-]{1,32}$`.
    pub destination_type: String,
    /// The target within the destination type (a URL, a topic, ...).
    pub destination: String,
    pub payload: serde_json::Value,
    /// Application and transport headers: text values, unique keys, no `outbox-` prefix.
    pub headers: BTreeMap<String, String>,
    /// Durable propagation context, relayed as `metadata.context`.
    pub context: Option<serde_json::Value>,
    /// Not published before this time.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// Internal retry scheduling override; applications normally leave it unset.
    pub available_at: Option<DateTime<Utc>>,
    pub max_attempts: u32,
}

impl OutboxEntry {
    pub fn new(
        event_type: impl Into<String>,
        destination_type: impl Into<String>,
        destination: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        OutboxEntry {
            aggregate_type: None,
            aggregate_id: None,
            event_type: event_type.into(),
            destination_type: destination_type.into(),
            destination: destination.into(),
            payload,
            headers: BTreeMap::new(),
            context: None,
            scheduled_at: None,
            available_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    pub fn aggregate(
        mut self,
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
    ) -> Self {
        self.aggregate_type = Some(aggregate_type.into());
        self.aggregate_id = Some(aggregate_id.into());
        self
    }

    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(key.into(), value.into());
        self
    }

    pub fn context(mut self, context: serde_json::Value) -> Self {
        self.context = Some(context);
        self
    }

    pub fn scheduled_at(mut self, at: DateTime<Utc>) -> Self {
        self.scheduled_at = Some(at);
        self
    }

    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Checks every rule before anything is inserted. Messages name fields and header keys, never
    /// values.
    pub fn validate(&self) -> Result<(), InvalidEntry> {
        destination_type::validate(&self.destination_type)?;
        required_column("event_type", &self.event_type)?;
        required_column("destination", &self.destination)?;
        optional_column("aggregate_type", self.aggregate_type.as_deref())?;
        optional_column("aggregate_id", self.aggregate_id.as_deref())?;
        if self.max_attempts == 0 || i32::try_from(self.max_attempts).is_err() {
            return Err(InvalidEntry::MaxAttempts);
        }
        self.headers
            .iter()
            .try_for_each(|(key, value)| validate_header(key, value))
    }
}

fn required_column(field: &'static str, value: &str) -> Result<(), InvalidEntry> {
    if value.trim().is_empty() {
        return Err(InvalidEntry::Blank { field });
    }
    optional_column(field, Some(value))
}

fn optional_column(field: &'static str, value: Option<&str>) -> Result<(), InvalidEntry> {
    match value {
        Some(value) if value.chars().count() > MAX_COLUMN_CHARS => {
            Err(InvalidEntry::TooLong { field })
        }
        _ => Ok(()),
    }
}

/// The header rules of the write path; the relay applies them again to rows written with plain SQL.
pub(crate) fn validate_header(key: &str, value: &str) -> Result<(), InvalidEntry> {
    let shown = || sanitize(key, MAX_KEY_CHARS_SHOWN);
    if key.is_empty() {
        return Err(InvalidEntry::EmptyHeaderKey);
    }
    let prefix = RESERVED_HEADER_PREFIX.len();
    if key.len() >= prefix
        && key.as_bytes()[..prefix].eq_ignore_ascii_case(RESERVED_HEADER_PREFIX.as_bytes())
    {
        return Err(InvalidEntry::ReservedHeader { key: shown() });
    }
    if key.contains('\0') || value.contains('\0') {
        return Err(InvalidEntry::NulInHeader { key: shown() });
    }
    Ok(())
}

/// Why an entry was refused; nothing was inserted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    #[error(transparent)]
    DestinationType(#[from] InvalidDestinationType),
    #[error("{field} must not be blank")]
    Blank { field: &'static str },
    #[error("{field} is longer than 255 characters")]
    TooLong { field: &'static str },
    #[error("max_attempts must be between 1 and 2147483647")]
    MaxAttempts,
    #[error("a header key is empty")]
    EmptyHeaderKey,
    /// `key` has control characters replaced and is cut to 128 characters.
    #[error("header {key:?} uses the reserved prefix \"outbox-\"")]
    ReservedHeader { key: String },
    #[error("header {key:?} contains a NUL character, which PostgreSQL cannot store")]
    NulInHeader { key: String },
}

impl fmt::Debug for OutboxEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxEntry")
            .field("aggregate_type", &self.aggregate_type)
            .field("aggregate_id", &self.aggregate_id)
            .field("event_type", &self.event_type)
            .field("destination_type", &self.destination_type)
            .field("destination", &self.destination)
            .field("payload", &"<redacted>")
            .field("header_keys", &self.headers.keys().collect::<Vec<_>>())
            .field("scheduled_at", &self.scheduled_at)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}
