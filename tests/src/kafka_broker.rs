//! A real Kafka-protocol broker for the Kafka tests: tansu, in memory, on a free port, one per test,
//! killed when dropped. `scripts/test` builds it once per machine and names it in `TANSU_BIN`.

use crate::host::free_port;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Where `scripts/setup-toolchains` puts the broker when `TANSU_BIN` is not set.
fn tansu_bin() -> PathBuf {
    let bin = std::env::var_os("TANSU_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".cache/outbox-host/toolchains/tansu/bin/tansu"))
        });
    match bin {
        Some(bin) if bin.is_file() => bin,
        _ => panic!(
            "the Kafka tests need the tansu broker: run scripts/test (or `source scripts/setup && \
             ensure_tansu`), which builds it once per machine"
        ),
    }
}

pub struct KafkaBroker {
    child: Option<Child>,
    port: u16,
}

/// A record as a consumer read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Consumed {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_slice())
    }
}

impl KafkaBroker {
    pub async fn start() -> KafkaBroker {
        let mut broker = KafkaBroker {
            child: None,
            port: free_port(),
        };
        broker.resume().await;
        broker
    }

    /// `host:port`, as `[kafka] bootstrap_servers` takes it.
    pub fn bootstrap_servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// Kills the broker; what it stored is gone (its storage is memory).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the broker again on the same port, empty; returns once it accepts connections.
    pub async fn resume(&mut self) {
        let url = self.url();
        let child = Command::new(tansu_bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("tansu starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn create_topic(&self, topic: &str, partitions: u32) {
        let status = Command::new(tansu_bin())
            .args([
                "topic",
                "create",
                topic,
                "--partitions",
                &partitions.to_string(),
            ])
            .args(["--broker", &self.url()])
            .stdout(Stdio::null())
            .status()
            .await
            .expect("tansu topic create runs");
        assert!(status.success(), "tansu topic create {topic}: {status}");
    }

    /// Reads `topic` from the start until `count` records have come (or `timeout` passed: then
    /// whatever came), as a consumer group of its own.
    pub async fn consume(&self, topic: &str, count: usize, timeout: Duration) -> Vec<Consumed> {
        let (servers, topic) = (self.bootstrap_servers(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &servers)
                .set("group.id", format!("outbox-tests-{}", uuid::Uuid::now_v7()))
                .set("auto.offset.reset", "earliest")
                .set("enable.auto.commit", "false")
                .create()
                .expect("a consumer");
            consumer.subscribe(&[&topic]).expect("subscribed");
            let deadline = Instant::now() + timeout;
            let mut consumed = Vec::new();
            while consumed.len() < count && Instant::now() < deadline {
                let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) else {
                    continue;
                };
                let headers = message
                    .headers()
                    .map(|headers| {
                        headers
                            .iter()
                            .map(|header| {
                                (
                                    header.key.to_owned(),
                                    header.value.unwrap_or_default().to_vec(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                consumed.push(Consumed {
                    partition: message.partition(),
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
            consumed
        })
        .await
        .expect("the consumer thread ends")
    }
}
