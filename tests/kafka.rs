//! The kafka example plugin through the host's producer to a real Kafka-protocol broker (tansu),
//! each test consuming back what was produced.

use outbox_host::api::OutboxEntry;
use outbox_host::config::{Config, KafkaConfig};
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::kafka_broker::KafkaBroker;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(60);

/// A plugins directory with the kafka plugin granted `topics`.
fn kafka_dir(label: &str, topics: &[&str]) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("kafka", plugins::KAFKA);
    dir.add_manifest("kafka", &plugins::kafka_manifest(topics));
    dir
}

fn kafka_config(db: &TestDb, dir: &ScratchDir, broker: &KafkaBroker) -> Config {
    let mut config = host::config(db, dir.path());
    config.kafka = Some(KafkaConfig {
        bootstrap_servers: broker.bootstrap_servers(),
        ..KafkaConfig::default()
    });
    config
}

fn order_event(topic: &str, aggregate: u32, seq: u32) -> OutboxEntry {
    OutboxEntry::new(
        "order.updated",
        "KAFKA",
        topic,
        serde_json::json!({"order": aggregate, "seq": seq}),
    )
    .aggregate("Order", aggregate.to_string())
    .header("traceparent", format!("trace-{aggregate}-{seq}"))
}

#[tokio::test]
async fn rows_arrive_in_aggregate_order_with_their_keys_and_headers() {
    let broker = KafkaBroker::start().await;
    broker.create_topic("orders", 3).await;
    let db = TestDb::new().await;
    let dir = kafka_dir("kafka-order", &["orders"]);
    let host = TestHost::start(&kafka_config(&db, &dir, &broker)).await;
    let (rows, aggregates) = (1000, 50);
    let mut ids = Vec::new();
    for batch in 0..10 {
        let mut tx = db.pool.begin().await.unwrap();
        for n in batch * 100..batch * 100 + 100 {
            let e = order_event("orders", n % aggregates, n / aggregates);
            ids.push(db.outbox().publish(&mut tx, e).await.unwrap());
        }
        tx.commit().await.unwrap();
    }
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == rows as i64
    })
    .await;
    let consumed = broker.consume("orders", rows as usize, SETTLE).await;
    assert_eq!(consumed.len(), rows as usize, "one record per row");

    let mut carriers = Vec::new();
    for id in &ids {
        carriers.push(db.carrier_id(*id).await);
    }
    let mut by_aggregate: BTreeMap<String, Vec<(i32, i64, u64)>> = BTreeMap::new();
    for record in &consumed {
        let key = String::from_utf8(record.key.clone().expect("a key")).unwrap();
        let value: serde_json::Value =
            serde_json::from_slice(record.value.as_deref().expect("a value")).unwrap();
        assert_eq!(value["order"].to_string(), key, "keyed by the aggregate id");
        let seq = value["seq"].as_u64().unwrap();
        assert_eq!(
            record.header("traceparent"),
            Some(format!("trace-{key}-{seq}").as_bytes())
        );
        assert_eq!(
            record.header("outbox-event-type"),
            Some(&b"order.updated"[..])
        );
        let carrier = String::from_utf8(record.header("outbox-message-id").unwrap().to_vec());
        assert!(carriers.contains(&carrier.unwrap()), "the row's carrier id");
        by_aggregate
            .entry(key)
            .or_default()
            .push((record.partition, record.offset, seq));
    }
    assert_eq!(by_aggregate.len(), aggregates as usize);
    for (key, mut records) in by_aggregate {
        let partitions: Vec<_> = records.iter().map(|(p, _, _)| *p).collect();
        assert!(
            partitions.windows(2).all(|pair| pair[0] == pair[1]),
            "aggregate {key} stays on one partition"
        );
        records.sort();
        let seqs: Vec<_> = records.iter().map(|(_, _, seq)| *seq).collect();
        assert_eq!(
            seqs,
            (0..20).collect::<Vec<_>>(),
            "aggregate {key} in order"
        );
    }
    host.stop().await;
}

#[tokio::test]
async fn a_topic_not_granted_dead_letters_the_row_and_nothing_reaches_it() {
    let broker = KafkaBroker::start().await;
    broker.create_topic("orders", 1).await;
    broker.create_topic("payroll", 1).await;
    let db = TestDb::new().await;
    let dir = kafka_dir("kafka-denied", &["orders"]);
    let host = TestHost::start(&kafka_config(&db, &dir, &broker)).await;
    let denied = db.publish(order_event("payroll", 1, 0)).await;
    let granted = db.publish(order_event("orders", 2, 0)).await;
    db.wait_until_published(granted, SETTLE).await;
    wait_until("the denied row is dead-lettered", SETTLE, || async {
        db.state_of(denied).await == "DEAD_LETTER"
    })
    .await;
    let row = db.repository().find(denied).await.unwrap().unwrap();
    assert_eq!(row.error_type.as_deref(), Some("denied"));
    assert_eq!(
        broker
            .consume("payroll", 1, Duration::from_secs(3))
            .await
            .len(),
        0,
        "nothing was produced to the topic not granted"
    );
    host.stop().await;
}

#[tokio::test]
async fn rows_are_retried_while_the_broker_is_down_and_delivered_once_it_is_back() {
    let mut broker = KafkaBroker::start().await;
    let db = TestDb::new().await;
    let dir = kafka_dir("kafka-down", &["orders"]);
    let mut config = kafka_config(&db, &dir, &broker);
    // librdkafka gives up on a record after two thirds of the lease: two seconds here.
    config.relay.lease_timeout = Duration::from_secs(3);
    broker.stop().await;
    let host = TestHost::start(&config).await;
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(db.publish(order_event("orders", n % 4, n / 4)).await);
    }
    wait_until("a row has been retried", SETTLE, || async {
        db.scalar::<i64>("SELECT count(*) FROM {outbox} WHERE attempt > 0")
            .await
            > 0
    })
    .await;
    assert_eq!(db.count("PUBLISHED").await, 0);

    broker.resume().await;
    broker.create_topic("orders", 3).await;
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 20
    })
    .await;
    let consumed = broker.consume("orders", 20, SETTLE).await;
    let mut carriers = HashMap::new();
    for record in &consumed {
        let carrier = record.header("outbox-message-id").unwrap().to_vec();
        *carriers.entry(carrier).or_insert(0) += 1;
    }
    for id in ids {
        let carrier = db.carrier_id(id).await.into_bytes();
        assert!(
            carriers.contains_key(&carrier),
            "row {id} reached the broker"
        );
    }
    assert_eq!(db.count("DEAD_LETTER").await, 0, "none lost");
    host.stop().await;
}

#[tokio::test]
async fn a_broker_that_is_down_holds_up_neither_other_plugins_nor_shutdown() {
    let mut broker = KafkaBroker::start().await;
    let db = TestDb::new().await;
    let dir = kafka_dir("kafka-down-others", &["orders"]);
    dir.add_plugin("noop", plugins::NOOP);
    let config = kafka_config(&db, &dir, &broker);
    broker.stop().await;
    let host = TestHost::start(&config).await;
    for n in 0..5 {
        db.publish(order_event("orders", n, 0)).await;
    }
    for _ in 0..20 {
        db.publish(entry("NOOP", "x")).await;
    }
    wait_until("the NOOP rows are published", SETTLE, || async {
        db.count("PUBLISHED").await == 20
    })
    .await;
    tokio::time::timeout(
        config.relay.shutdown_grace + Duration::from_secs(5),
        host.stop(),
    )
    .await
    .expect("the host stops while the broker is down");
}

#[tokio::test]
async fn a_hot_reload_that_narrows_the_topics_denies_the_next_call() {
    let broker = KafkaBroker::start().await;
    broker.create_topic("orders", 1).await;
    broker.create_topic("audit", 1).await;
    let db = TestDb::new().await;
    let dir = kafka_dir("kafka-narrowed", &["orders", "audit"]);
    let host = TestHost::start(&kafka_config(&db, &dir, &broker)).await;
    let before = host.service.plugins().borrow().handler("KAFKA").unwrap();
    let first = db.publish(order_event("audit", 1, 0)).await;
    db.wait_until_published(first, SETTLE).await;

    dir.deploy(
        "kafka.toml",
        plugins::kafka_manifest(&["orders"]).as_bytes(),
    );
    host.wait_for_plugins("the narrowed manifest is in use", SETTLE, |set| {
        set.handler("KAFKA")
            .is_some_and(|handler| !Arc::ptr_eq(&handler, &before))
    })
    .await;
    let second = db.publish(order_event("audit", 2, 0)).await;
    wait_until("the audit row is dead-lettered", SETTLE, || async {
        db.state_of(second).await == "DEAD_LETTER"
    })
    .await;
    let orders = db.publish(order_event("orders", 3, 0)).await;
    db.wait_until_published(orders, SETTLE).await;
    assert_eq!(
        broker
            .consume("audit", 2, Duration::from_secs(5))
            .await
            .len(),
        1
    );
    host.stop().await;
}
