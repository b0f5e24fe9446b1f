//! The mock runner's Kafka: the manifest's `kafka.topics` are enforced as the host enforces them
//! (a topic not granted is denied before this is reached), every record produced is recorded for
//! the report, and each is answered `ok`, or as `--kafka-response` says, so a Kafka plugin is
//! tested without a broker.

use std::fmt;
use std::str::FromStr;

use crate::plugins::bindings::{KafkaRecord, ProduceResult};
use crate::plugins::mock::http::RequestLog;

/// What every record produced is answered with instead of `ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MockKafkaResponse {
    Retryable,
    Permanent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected `retryable` or `permanent`")]
pub struct MockKafkaResponseError;

impl FromStr for MockKafkaResponse {
    type Err = MockKafkaResponseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "retryable" => Ok(Self::Retryable),
            "permanent" => Ok(Self::Permanent),
            _ => Err(MockKafkaResponseError),
        }
    }
}

/// A record as the report shows it: its value by size only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducedRecord {
    pub topic: String,
    /// As text, lossily (a key is usually an id).
    pub key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub value_bytes: usize,
}

impl fmt::Display for ProducedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} key={:?}",
            self.topic,
            self.key.as_deref().unwrap_or("")
        )?;
        for (name, value) in &self.headers {
            write!(f, " {name}={value:?}")?;
        }
        writeln!(f, " value={} bytes", self.value_bytes)
    }
}

#[derive(Clone)]
pub(crate) struct MockKafka {
    response: Option<MockKafkaResponse>,
    produced: RequestLog<ProducedRecord>,
}

impl MockKafka {
    pub(crate) fn new(
        response: Option<MockKafkaResponse>,
        produced: RequestLog<ProducedRecord>,
    ) -> Self {
        Self { response, produced }
    }

    pub(crate) fn produce(&self, record: KafkaRecord) -> ProduceResult {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        self.produced.push(ProducedRecord {
            key: record.key.as_deref().map(text),
            headers: record
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), text(value)))
                .collect(),
            value_bytes: record.value.as_ref().map_or(0, Vec::len),
            topic: record.topic,
        });
        match self.response {
            None => ProduceResult::Ok,
            Some(MockKafkaResponse::Retryable) => {
                ProduceResult::Retryable("mock: --kafka-response retryable".to_owned())
            }
            Some(MockKafkaResponse::Permanent) => {
                ProduceResult::Permanent("mock: --kafka-response permanent".to_owned())
            }
        }
    }
}
