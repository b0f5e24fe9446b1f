//! `outbox:relay/kafka`: topic grants from `kafka.topics`, and the host's one Kafka producer behind
//! them (librdkafka through `rdkafka`, configured under `[kafka]`). A record for a topic not granted
//! is denied without touching the broker; without `[kafka]` every record is denied as "not
//! configured", so a plugin author can tell a manifest mistake from a host that has no Kafka.
//!
//! A call returns when the broker's acknowledgement (or librdkafka's last word) arrives; the plugin's
//! time limit bounds that wait, and librdkafka gives up on a record by then too. Answers never name
//! the topic (a destination, which may be a claim-scope target) or quote the record.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use toml::Table;
use wasmtime::component::{HasSelf, Linker};

use crate::config::KafkaConfig;
use crate::plugins::bindings::handler::outbox::relay::kafka;
use crate::plugins::bindings::{KafkaRecord, ProduceResult};
use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::capabilities::{Capability, Section};
use crate::plugins::loader::World;
use crate::plugins::manifest::{ManifestError, pattern_list};
use crate::plugins::mock::MockKafka;
use crate::plugins::sandbox::StoreState;

/// The host's producer, shared by every plugin (cheap to clone). Idempotent with `acks = all`, so a
/// retry inside librdkafka never writes a record twice.
#[derive(Clone)]
pub struct KafkaProducer {
    producer: FutureProducer,
}

/// Its configuration holds credentials: nothing of it is shown.
impl fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KafkaProducer")
    }
}

/// `[kafka]` that librdkafka refuses. Names the property, never its value (it may be a password).
#[derive(Debug, thiserror::Error)]
pub enum KafkaSetupError {
    #[error("kafka.client.{property}: librdkafka refuses its value")]
    Property { property: String },
    #[error("cannot create the Kafka producer: {0}")]
    Create(String),
}

impl KafkaProducer {
    /// Connects in the background: a broker that is down does not hold up the start.
    /// `max_call_time` is how long a plugin call may wait for a record's acknowledgement; librdkafka
    /// gives up on a record no later (`message.timeout.ms`, which `[kafka.client]` may lower).
    pub fn new(config: &KafkaConfig, max_call_time: Duration) -> Result<Self, KafkaSetupError> {
        let mut client = ClientConfig::new();
        let timeout_ms = max_call_time.as_millis().max(1).to_string();
        client.set("message.timeout.ms", timeout_ms);
        // Each call waits for its record's acknowledgement, so time a record lingers for a batch is
        // time a relay slot is held; calls in flight together still share batches.
        client.set("linger.ms", "1");
        for (property, value) in config.client.properties() {
            client.set(property, value);
        }
        client
            .set("bootstrap.servers", &config.bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("acks", "all");
        let producer = client.create().map_err(|error| match error {
            KafkaError::ClientConfig(_, _, property, _) => KafkaSetupError::Property { property },
            other => KafkaSetupError::Create(other.to_string()),
        })?;
        Ok(Self { producer })
    }

    async fn produce(&self, record: KafkaRecord) -> ProduceResult {
        let headers = record.headers.iter().fold(
            OwnedHeaders::new_with_capacity(record.headers.len()),
            |headers, (key, value)| {
                headers.insert(Header {
                    key,
                    value: Some(value),
                })
            },
        );
        let mut message = FutureRecord::<[u8], [u8]>::to(&record.topic).headers(headers);
        if let Some(key) = &record.key {
            message = message.key(key.as_slice());
        }
        if let Some(value) = &record.value {
            message = message.payload(value.as_slice());
        }
        // A full queue is answered at once (retryable), never waited on: the call's time is the
        // plugin's, and other plugins' calls must not queue behind this one.
        match self
            .producer
            .send(message, Timeout::After(Duration::ZERO))
            .await
        {
            Ok(_) => ProduceResult::Ok,
            Err((error, _)) => answer_for(&error),
        }
    }
}

/// librdkafka retries what can pass on another try by itself until `message.timeout.ms`; what is
/// left is either such a failure that outlasted it (retryable: the row comes back later) or one the
/// same record meets every time (permanent).
fn answer_for(error: &KafkaError) -> ProduceResult {
    let message = match error.rdkafka_error_code() {
        Some(code) => format!("kafka: {code}"),
        None => "kafka: the producer failed".to_owned(),
    };
    if error.rdkafka_error_code().is_some_and(is_retriable) {
        ProduceResult::Retryable(message)
    } else {
        ProduceResult::Permanent(message)
    }
}

fn is_retriable(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        code,
        MessageTimedOut
            | QueueFull
            | AllBrokersDown
            | BrokerTransportFailure
            | Resolve
            | OperationTimedOut
            | PurgeQueue
            | PurgeInflight
            | UnknownTopic
            | UnknownPartition
            | UnknownTopicOrPartition
            | LeaderNotAvailable
            | NotLeaderForPartition
            | RequestTimedOut
            | BrokerNotAvailable
            | ReplicaNotAvailable
            | NetworkException
            | NotEnoughReplicas
            | NotEnoughReplicasAfterAppend
            | KafkaStorageError
    )
}

/// `[kafka]`: `topics`, the topics a handler may produce to. Observers have no `kafka`.
pub(crate) enum Kafka {}

impl Capability for Kafka {
    const SECTION: Option<Section<Vec<TopicPattern>>> = Some(Section {
        name: "kafka",
        read: read_section,
    });
    const WORLDS: &'static [World] = &[World::DestinationHandler];

    type Grant = Vec<TopicPattern>;
    /// `None` without `[kafka]`.
    type Services = Option<KafkaBackend>;
    type PluginState = KafkaGate;
    type InstanceState = KafkaGate;

    fn plugin_state(
        topics: &Vec<TopicPattern>,
        backend: &Option<KafkaBackend>,
        _: &PluginLog,
    ) -> KafkaGate {
        KafkaGate {
            topics: topics.clone().into(),
            backend: backend.clone(),
        }
    }

    fn instance_state(gate: &KafkaGate) -> KafkaGate {
        gate.clone()
    }

    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
        kafka::add_to_linker::<StoreState, HasSelf<KafkaGate>>(linker, |state| {
            &mut state.capabilities.kafka
        })
    }
}

fn read_section(entries: &Table) -> Result<Vec<TopicPattern>, ManifestError> {
    let mut topics = Vec::new();
    for (key, value) in entries {
        match key.as_str() {
            "topics" => topics = pattern_list("kafka.topics", value, TopicPattern::parse)?,
            _ => return Err(ManifestError::UnknownKey(format!("kafka.{key}"))),
        }
    }
    Ok(topics)
}

/// Kafka's own limit on a topic name's length.
const MAX_TOPIC_LEN: usize = 249;

/// Kafka's rule for a topic name: 1 to 249 of letters, digits, `.`, `_` and `-`.
fn is_topic_name(name: &str) -> bool {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    !name.is_empty() && name.len() <= MAX_TOPIC_LEN && name.chars().all(legal)
}

/// One entry of `kafka.topics`: a topic name, or `prefix*` for every topic starting with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicPattern {
    Exact(String),
    Prefix(String),
}

/// Why a `kafka.topics` entry was rejected. The message follows the entry's key and never quotes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("is not a topic name or `prefix*` pattern (letters, digits, `.`, `_`, `-`, at most 249)")]
pub struct TopicPatternError;

impl TopicPattern {
    pub fn parse(pattern: &str) -> Result<Self, TopicPatternError> {
        let invalid = || TopicPatternError;
        let (name, is_prefix) = match pattern.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (pattern, false),
        };
        if !(is_topic_name(name) || is_prefix && name.is_empty()) {
            return Err(invalid());
        }
        Ok(if is_prefix {
            Self::Prefix(name.to_owned())
        } else {
            Self::Exact(name.to_owned())
        })
    }

    pub fn matches(&self, topic: &str) -> bool {
        match self {
            Self::Exact(name) => topic == name,
            Self::Prefix(prefix) => topic.starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => f.write_str(name),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// What granted records go to: the host's producer, or the mock runner's record of them.
#[derive(Clone)]
pub(crate) enum KafkaBackend {
    Producer(KafkaProducer),
    Mock(MockKafka),
}

/// The Kafka capability of one plugin instance.
#[derive(Clone)]
pub struct KafkaGate {
    topics: Arc<[TopicPattern]>,
    backend: Option<KafkaBackend>,
}

impl KafkaGate {
    pub fn is_granted(&self, topic: &str) -> bool {
        self.topics.iter().any(|pattern| pattern.matches(topic))
    }
}

impl kafka::Host for KafkaGate {
    async fn produce(&mut self, record: KafkaRecord) -> ProduceResult {
        // A granted prefix would let a plugin append anything, NUL and control characters
        // included: only a name Kafka accepts goes further.
        if !is_topic_name(&record.topic) {
            return ProduceResult::Permanent(
                "the topic is not a valid Kafka topic name".to_owned(),
            );
        }
        match (self.is_granted(&record.topic), &self.backend) {
            (false, _) => ProduceResult::Denied(
                "the topic is not granted to this plugin (kafka.topics)".to_owned(),
            ),
            (true, None) => {
                ProduceResult::Denied("kafka is not configured on this host".to_owned())
            }
            (true, Some(KafkaBackend::Producer(producer))) => producer.produce(record).await,
            (true, Some(KafkaBackend::Mock(mock))) => mock.produce(record),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::mock::RequestLog;

    #[test]
    fn only_failures_that_may_pass_on_another_try_are_retryable() {
        let timed_out = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert!(matches!(
            answer_for(&timed_out),
            ProduceResult::Retryable(_)
        ));
        let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let ProduceResult::Permanent(message) = answer_for(&too_large) else {
            panic!("a record too large is retried")
        };
        assert!(message.starts_with("kafka: "), "{message}");
    }

    #[test]
    fn an_exact_topic_grants_only_that_topic() {
        let pattern = TopicPattern::parse("orders").unwrap();
        assert!(pattern.matches("orders"));
        assert!(!pattern.matches("orders-eu"));
    }

    #[test]
    fn a_prefix_pattern_grants_every_topic_with_the_prefix() {
        let pattern = TopicPattern::parse("audit-*").unwrap();
        assert!(pattern.matches("audit-"));
        assert!(pattern.matches("audit-login"));
        assert!(!pattern.matches("audit"));
    }

    #[test]
    fn a_star_inside_a_topic_or_an_empty_topic_is_rejected() {
        assert!(TopicPattern::parse("a*b").is_err());
        assert!(TopicPattern::parse("").is_err());
        assert!(TopicPattern::parse("has space").is_err());
    }

    fn gate(topics: &[&str]) -> KafkaGate {
        KafkaGate {
            topics: topics
                .iter()
                .map(|t| TopicPattern::parse(t).unwrap())
                .collect(),
            backend: None,
        }
    }

    async fn produce(gate: &mut KafkaGate, topic: &str) -> ProduceResult {
        let record = KafkaRecord {
            topic: topic.to_owned(),
            key: None,
            value: Some(b"{}".to_vec()),
            headers: vec![],
        };
        kafka::Host::produce(gate, record).await
    }

    #[tokio::test]
    async fn a_granted_topic_is_denied_for_the_missing_producer() {
        let ProduceResult::Denied(reason) = produce(&mut gate(&["orders"]), "orders").await else {
            panic!("not denied")
        };
        assert!(reason.contains("not configured"), "{reason}");
    }

    #[tokio::test]
    async fn a_hostile_topic_under_a_granted_prefix_never_reaches_the_backend() {
        let produced = RequestLog::default();
        let mut gate = KafkaGate {
            topics: vec![TopicPattern::parse("orders*").unwrap()].into(),
            backend: Some(KafkaBackend::Mock(MockKafka::new(None, produced.clone()))),
        };
        let long = format!("orders{}", "x".repeat(MAX_TOPIC_LEN));
        for topic in ["orders\0secret", "orders\n", "orders x", long.as_str()] {
            let result = produce(&mut gate, topic).await;
            assert!(matches!(result, ProduceResult::Permanent(_)), "{topic:?}");
        }
        assert!(produced.take().is_empty());
        assert!(matches!(
            produce(&mut gate, "orders.eu").await,
            ProduceResult::Ok
        ));
    }

    #[tokio::test]
    async fn a_topic_not_granted_is_denied_for_the_grant() {
        let ProduceResult::Denied(reason) = produce(&mut gate(&["audit-*"]), "orders").await else {
            panic!("not denied")
        };
        assert!(reason.contains("not granted"), "{reason}");
    }
}
