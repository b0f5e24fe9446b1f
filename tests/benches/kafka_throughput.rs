//! Outbox to Kafka end to end on this machine: the real service in-process, the `kafka` example
//! plugin built from source producing through the host's producer to a real Kafka-protocol broker
//! (tansu, in memory, built by `scripts/test`), beside the `noop` plugin draining the same rows in the
//! same run. Each round drains 50,000 pre-inserted rows over 1,000 aggregates at the default
//! settings, first to NOOP, then to KAFKA; reported are the medians and the median of the rounds'
//! ratios (goal: KAFKA at least 0.7 of NOOP).
//!
//! Run: `cargo bench -p outbox-tests --bench kafka_throughput`

use outbox_host::config::KafkaConfig;
use outbox_tests::db::TestDb;
use outbox_tests::drain;
use outbox_tests::host::{self, TestHost};
use outbox_tests::kafka_broker::KafkaBroker;
use outbox_tests::latency;
use outbox_tests::plugins;
use outbox_tests::rounds::median;
use outbox_tests::scratch::ScratchDir;

const ROWS: u64 = 50_000;
const AGGREGATES: u32 = 1_000;
const ROUNDS: usize = 5;
const TOPIC: &str = "orders";

#[tokio::main]
async fn main() {
    let broker = KafkaBroker::start().await;
    broker.create_topic(TOPIC, 3).await;
    println!("end-to-end drain of {ROWS} pre-inserted rows over {AGGREGATES} aggregates, defaults");
    // Each round's ratio compares two drains run back to back, so the machine's drift over the
    // run moves both alike.
    let (mut noop, mut kafka, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let (noop_rate, kafka_rate) = (drain("NOOP", &broker).await, drain("KAFKA", &broker).await);
        println!(
            "round {round}: NOOP {noop_rate:>8.0} rows/s, KAFKA {kafka_rate:>8.0} rows/s, KAFKA/NOOP {:.2}",
            kafka_rate / noop_rate
        );
        noop.push(noop_rate);
        kafka.push(kafka_rate);
        ratios.push(kafka_rate / noop_rate);
    }
    println!(
        "median: NOOP {:.0} rows/s, KAFKA {:.0} rows/s; median of the rounds' KAFKA/NOOP {:.2} (goal >= 0.70)",
        median(&noop),
        median(&kafka),
        median(&ratios)
    );
}

/// Rows/s from the first claim to the last publish (database clock) of `ROWS` rows of
/// `destination_type`.
async fn drain(destination_type: &str, broker: &KafkaBroker) -> f64 {
    let db = TestDb::new().await;
    db.execute(&format!(
        "INSERT INTO {{outbox}} (carrier_id, aggregate_type, aggregate_id, event_type, destination, destination_type, payload) \
         SELECT gen_random_uuid(), 'Order', 'order-' || floor(random() * {AGGREGATES})::int, 'order.updated', '{TOPIC}', \
         '{destination_type}', '{{\"n\": 1}}' FROM generate_series(1, {ROWS})"
    ))
    .await;
    db.execute("VACUUM ANALYZE {outbox}").await;
    let dir = ScratchDir::new("bench-kafka");
    dir.add_plugin("noop", plugins::NOOP);
    dir.add_plugin("kafka", plugins::KAFKA);
    dir.add_manifest("kafka", &plugins::kafka_manifest(&[TOPIC]));
    let mut config = host::defaults(&db, dir.path());
    config.kafka = Some(KafkaConfig {
        bootstrap_servers: broker.bootstrap_servers(),
        ..KafkaConfig::default()
    });
    let host = TestHost::start(&config).await;
    latency::wait_until_all_published(&db).await;
    let rate = drain::published_rate(&db).await;
    host.stop().await;
    db.pool.close().await;
    rate
}
