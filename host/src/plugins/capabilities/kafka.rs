//! `outbox:relay/kafka`: topic grants from `kafka.topics`. No producer is wired yet, so every
//! record is answered `denied`; the reason says whether the grant or the producer is missing, so a
//! plugin author can tell a manifest mistake from a host that has no Kafka.

use std::fmt;
use std::sync::Arc;

use toml::Table;
use wasmtime::component::{HasSelf, Linker};

use crate::plugins::bindings::handler::outbox::relay::kafka;
use crate::plugins::bindings::{KafkaRecord, ProduceResult};
use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::capabilities::{Capability, Section};
use crate::plugins::loader::World;
use crate::plugins::manifest::{ManifestError, pattern_list};
use crate::plugins::sandbox::StoreState;

/// `[kafka]`: `topics`, the topics a handler may produce to. Observers have no `kafka`.
pub(crate) enum Kafka {}

impl Capability for Kafka {
    const SECTION: Option<Section<Vec<TopicPattern>>> = Some(Section {
        name: "kafka",
        read: read_section,
    });
    const WORLDS: &'static [World] = &[World::DestinationHandler];

    type Grant = Vec<TopicPattern>;
    type Services = ();
    type PluginState = KafkaGate;
    type InstanceState = KafkaGate;

    fn plugin_state(topics: &Vec<TopicPattern>, _: &(), _: &PluginLog) -> KafkaGate {
        KafkaGate::new(topics.clone())
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
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.len() > MAX_TOPIC_LEN || !name.chars().all(legal) || (!is_prefix && name.is_empty())
        {
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

/// The Kafka capability of one plugin instance.
#[derive(Debug, Clone, Default)]
pub struct KafkaGate {
    topics: Arc<[TopicPattern]>,
}

impl KafkaGate {
    pub fn new(topics: Vec<TopicPattern>) -> Self {
        Self {
            topics: topics.into(),
        }
    }

    pub fn is_granted(&self, topic: &str) -> bool {
        self.topics.iter().any(|pattern| pattern.matches(topic))
    }

    fn answer(&self, topic: &str) -> ProduceResult {
        if self.is_granted(topic) {
            ProduceResult::Denied("kafka is not configured on this host".to_owned())
        } else {
            ProduceResult::Denied(
                "the topic is not granted to this plugin (kafka.topics)".to_owned(),
            )
        }
    }
}

impl kafka::Host for KafkaGate {
    async fn produce(&mut self, record: KafkaRecord) -> ProduceResult {
        self.answer(&record.topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_granted_topic_is_denied_for_the_missing_producer() {
        let gate = KafkaGate::new(vec![TopicPattern::parse("orders").unwrap()]);
        let ProduceResult::Denied(reason) = gate.answer("orders") else {
            panic!("not denied")
        };
        assert!(reason.contains("not configured"), "{reason}");
    }

    #[test]
    fn a_topic_not_granted_is_denied_for_the_grant() {
        let gate = KafkaGate::new(vec![]);
        let ProduceResult::Denied(reason) = gate.answer("orders") else {
            panic!("not denied")
        };
        assert!(reason.contains("not granted"), "{reason}");
    }
}
