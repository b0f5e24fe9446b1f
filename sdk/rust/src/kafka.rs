//! Produce records through the host's Kafka producer, to topics the manifest grants
//! (`[kafka] topics`).

use std::fmt;

use crate::PublishResult;
use crate::bindings::destination_handler::outbox::relay::kafka::{self as wit, ProduceResult};

/// One record: topic, optional key and value, and headers.
pub use wit::KafkaRecord as Record;

/// Why the host did not take a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceError {
    /// The topic is not granted to this plugin, or Kafka is not configured on the host.
    Denied(String),
    /// A transient failure (broker unavailable, timeout): try again later.
    Retryable(String),
    /// The record can never be produced as it is (too large, invalid topic).
    Permanent(String),
}

/// Produces one record and waits for the broker's acknowledgement.
pub fn produce(record: &Record) -> Result<(), ProduceError> {
    match wit::produce(record) {
        ProduceResult::Ok => Ok(()),
        ProduceResult::Denied(reason) => Err(ProduceError::Denied(reason)),
        ProduceResult::Retryable(reason) => Err(ProduceError::Retryable(reason)),
        ProduceResult::Permanent(reason) => Err(ProduceError::Permanent(reason)),
    }
}

impl fmt::Display for ProduceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProduceError::Denied(reason) => write!(f, "kafka produce denied: {reason}"),
            ProduceError::Retryable(reason) => write!(f, "kafka produce failed: {reason}"),
            ProduceError::Permanent(reason) => write!(f, "kafka produce rejected: {reason}"),
        }
    }
}

impl std::error::Error for ProduceError {}

/// A denied topic needs an operator's grant, not a retry; so does a rejected record.
impl From<ProduceError> for PublishResult {
    fn from(error: ProduceError) -> Self {
        let message = error.to_string();
        match error {
            ProduceError::Denied(_) => PublishResult::permanent(message).with_error_type("denied"),
            ProduceError::Retryable(_) => {
                PublishResult::retryable(message).with_error_type("kafka")
            }
            ProduceError::Permanent(_) => {
                PublishResult::permanent(message).with_error_type("kafka")
            }
        }
    }
}
