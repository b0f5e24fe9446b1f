//! The relay end to end: a real host on real PostgreSQL with plugins built from source.

use outbox_host::api::OutboxEntry;
use outbox_host::config::Strategy;
use outbox_host::relay::LISTENER_APPLICATION_NAME;
use outbox_host::service::APPLICATION_NAME;
use outbox_host::signals::Signal;
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::collections::BTreeMap;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(30);

/// A plugins directory with the webhook plugin allowed to reach `stub`.
fn webhook_dir(label: &str, stub: &StubServer) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", stub.origin()),
    );
    dir
}

/// A row for the webhook plugin, identifying itself in its payload.
fn webhook_entry(stub: &StubServer, aggregate: &str, seq: usize) -> OutboxEntry {
    OutboxEntry::new(
        "test.event",
        "WEBHOOK",
        stub.url("/hook"),
        serde_json::json!({"aggregate": aggregate, "seq": seq}),
    )
    .aggregate("Order", aggregate)
}

/// A row for the scripted plugin, whose payload chooses the outcome.
fn scripted_entry(outcome: &str) -> OutboxEntry {
    OutboxEntry::new(
        "test.event",
        "SCRIPTED",
        "x",
        serde_json::json!({"outcome": outcome}),
    )
}

fn payload_of(request: &outbox_tests::http_stub::StubRequest) -> serde_json::Value {
    serde_json::from_slice(&request.body).expect("the webhook posts the payload as JSON")
}

#[tokio::test]
async fn noop_rows_all_end_published() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-noop");
    dir.add_plugin("noop", plugins::NOOP);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    for i in 0..200 {
        db.publish(entry("NOOP", "x").aggregate("A", (i % 10).to_string()))
            .await;
    }
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 200
    })
    .await;
    host.stop().await;
}

/// Every row received once, and each aggregate's rows in id order (`seq` follows the id), as the
/// receiver saw them arrive.
fn assert_each_aggregate_once_in_id_order(stub: &StubServer, aggregates: usize, rows: usize) {
    let mut delivered: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for request in stub.requests() {
        let payload = payload_of(&request);
        delivered
            .entry(payload["aggregate"].as_str().unwrap().to_owned())
            .or_default()
            .push(payload["seq"].as_u64().unwrap());
    }
    assert_eq!(delivered.len(), aggregates);
    for (aggregate, seqs) in &delivered {
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(
            seqs, &sorted,
            "aggregate {aggregate} was delivered out of id order"
        );
    }
    assert_eq!(
        delivered.values().map(Vec::len).sum::<usize>(),
        rows,
        "each row delivered once"
    );
}

#[tokio::test]
async fn webhook_rows_over_many_aggregates_all_end_published_each_aggregate_in_id_order() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = webhook_dir("relay-order", &stub);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let mut tx = db.pool.begin().await.unwrap();
    for seq in 0..2000 {
        let e = webhook_entry(&stub, &format!("agg-{}", seq % 50), seq);
        db.outbox().publish(&mut tx, e).await.unwrap();
    }
    tx.commit().await.unwrap();
    wait_until(
        "all 2,000 rows are published",
        Duration::from_secs(90),
        || async { db.count("PUBLISHED").await == 2000 },
    )
    .await;
    assert_each_aggregate_once_in_id_order(&stub, 50, 2000);
    host.stop().await;
}

#[tokio::test]
async fn an_endpoint_answering_500_dead_letters_its_row_after_max_attempts() {
    let db = TestDb::new().await;
    let stub = StubServer::start(500).await;
    let dir = webhook_dir("relay-500", &stub);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let id = db
        .publish(webhook_entry(&stub, "a", 0).max_attempts(3))
        .await;
    wait_until("the row is dead-lettered", SETTLE, || async {
        db.state_of(id).await == "DEAD_LETTER"
    })
    .await;
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.attempt, 3);
    assert_eq!(stub.requests().len(), 3);
    assert!(
        row.last_error.as_deref().unwrap().contains("500"),
        "{:?}",
        row.last_error
    );
    assert!(row.error_type.is_some());
    host.stop().await;
}

#[tokio::test]
async fn a_row_whose_type_has_no_plugin_stays_pending_and_its_younger_siblings_wait() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-missing");
    dir.add_plugin("noop", plugins::NOOP);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let head = db
        .publish(entry("MISSING", "x").aggregate("Order", "1"))
        .await;
    let sibling = db.publish(entry("NOOP", "x").aggregate("Order", "1")).await;
    let other = db.publish(entry("NOOP", "x").aggregate("Order", "2")).await;
    wait_until("the other aggregate's row is published", SETTLE, || async {
        db.state_of(other).await == "PUBLISHED"
    })
    .await;
    // Several turns later, the blocked aggregate has still not moved.
    host.wait_for_signals("three more relay turns", 3, SETTLE, |signal| {
        matches!(signal, Signal::RelayTurn { .. })
    })
    .await;
    assert_eq!(db.state_of(head).await, "PENDING");
    assert_eq!(db.state_of(sibling).await, "PENDING");
    assert_eq!(
        db.repository().find(head).await.unwrap().unwrap().attempt,
        0
    );
    host.stop().await;
}

#[tokio::test]
async fn an_unresolvable_result_defers_the_row_and_keeps_its_attempt_count() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-unresolvable");
    dir.add_plugin("scripted", plugins::SCRIPTED);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let id = db.publish(scripted_entry("unresolvable")).await;
    let marker = format!("entry_id={id} ");
    wait_until("the row is deferred twice", SETTLE, || async {
        log_capture::lines_of(&recorder)
            .iter()
            .filter(|l| l.contains(&marker) && l.contains("disposition=deferred"))
            .count()
            >= 2
    })
    .await;
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.attempt, 0);
    assert_ne!(db.state_of(id).await, "DEAD_LETTER");
    host.stop().await;
}

#[tokio::test]
async fn the_observer_sees_every_attempt_after_its_mark() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-observer");
    dir.add_plugin("scripted", plugins::SCRIPTED);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let failing = db
        .publish(scripted_entry("retryable").max_attempts(3))
        .await;
    let succeeding = db.publish(scripted_entry("success")).await;
    let permanent = db.publish(scripted_entry("permanent")).await;
    wait_until("all rows settle", SETTLE, || async {
        db.count("PUBLISHED").await == 1 && db.count("DEAD_LETTER").await == 2
    })
    .await;
    let seen = |id: i64| {
        let marker = format!("entry_id={id} ");
        log_capture::lines_of(&recorder)
            .into_iter()
            .filter(move |l| l.contains(&marker))
            .collect::<Vec<_>>()
    };
    wait_until(
        "the observer has seen all five attempts",
        SETTLE,
        || async {
            seen(failing).len() == 3 && seen(succeeding).len() == 1 && seen(permanent).len() == 1
        },
    )
    .await;
    let failing_lines = seen(failing);
    for (attempt, disposition) in [
        (0, "retry-scheduled"),
        (1, "retry-scheduled"),
        (2, "dead-lettered"),
    ] {
        assert!(
            failing_lines
                .iter()
                .any(|l| l.contains(&format!("attempt={attempt} "))
                    && l.contains(&format!("disposition={disposition} "))
                    && l.contains("outcome=retryable-failure")
                    && l.contains("disposition_recorded=true")),
            "attempt {attempt}: {failing_lines:#?}"
        );
    }
    assert!(
        seen(succeeding)[0]
            .contains("outcome=success disposition=published disposition_recorded=true")
    );
    assert!(seen(permanent)[0].contains("outcome=permanent-failure disposition=dead-lettered"));
    host.stop().await;
}

#[tokio::test]
async fn a_failing_observer_changes_nothing_for_the_entry() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-failing-observer");
    dir.add_plugin("noop", plugins::NOOP);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    dir.add_manifest(&recorder, "[config]\ntrap = \"true\"\n");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    for _ in 0..20 {
        db.publish(entry("NOOP", "x")).await;
    }
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 20
    })
    .await;
    let attempts = log_capture::lines_of(&recorder)
        .iter()
        .filter(|l| l.contains("publish-completed"))
        .count();
    assert_eq!(
        attempts, 20,
        "the trapping observer was still called for every attempt"
    );
    let rows: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE state = 'PUBLISHED' AND attempt = 0")
        .await;
    assert_eq!(rows, 20, "no entry was retried because of the observer");
    host.stop().await;
}

/// Inserts rows one at a time, each after the previous is published, and returns the median of
/// `published_at - created_at` (both from the database clock) in milliseconds.
async fn median_pickup_ms(db: &TestDb, rows: usize) -> f64 {
    let mut latencies = Vec::new();
    for _ in 0..rows {
        let id = db.publish(entry("NOOP", "x")).await;
        db.wait_until_published(id, SETTLE).await;
        let ms: f64 = db
            .scalar(&format!(
                "SELECT (EXTRACT(EPOCH FROM published_at - created_at) * 1000)::float8 FROM {{outbox}} WHERE id = {id}"
            ))
            .await;
        latencies.push(ms);
    }
    latencies.sort_by(f64::total_cmp);
    latencies[rows / 2]
}

#[tokio::test]
async fn with_listen_notify_a_new_row_is_picked_up_in_under_50_ms() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-listen");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval = Duration::from_millis(1000);
    let host = TestHost::start(&config).await;
    let listener = format!(
        "{LISTENER_APPLICATION_NAME} {}",
        config.relay.node_id.clone().unwrap()
    );
    wait_until("the host listens", SETTLE, || async {
        listener_pid(&db, &listener).await.is_some()
    })
    .await;
    let p50 = median_pickup_ms(&db, 21).await;
    assert!(p50 < 50.0, "p50 pickup {p50:.1} ms");
    host.stop().await;
}

#[tokio::test]
async fn with_polling_at_one_second_a_new_row_waits_for_the_poll() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-polling");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.strategy = Strategy::Polling;
    config.relay.polling_interval = Duration::from_millis(1000);
    // Each loop polls on its own clock: with two, a row inserted after one loop's poll waits only
    // for the other's, which may come a few milliseconds later (once seen here: p50 26.8 ms).
    config.relay.instances = 1;
    let host = TestHost::start(&config).await;
    let p50 = median_pickup_ms(&db, 5).await;
    assert!(
        p50 >= 50.0,
        "p50 pickup {p50:.1} ms: polling should not be this quick"
    );
    host.stop().await;
}

async fn listener_pid(db: &TestDb, application_name: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(application_name)
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_lost_listen_connection_falls_back_to_polling_then_listens_again() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-relisten");
    dir.add_plugin("noop", plugins::NOOP);
    let config = host::config(&db, dir.path());
    let node = config.relay.node_id.clone().unwrap();
    let listener = format!("{LISTENER_APPLICATION_NAME} {node}");
    let host = TestHost::start(&config).await;
    wait_until("the host listens", SETTLE, || async {
        listener_pid(&db, &listener).await.is_some()
    })
    .await;
    let first = listener_pid(&db, &listener).await.unwrap();
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(terminated);
    let lost = format!(" node={node} ");
    wait_until("the host logs the fallback to polling", SETTLE, || async {
        log_capture::lines_with(&lost)
            .iter()
            .any(|l| l.contains("falling back to polling"))
    })
    .await;
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, SETTLE).await;
    wait_until(
        "the host listens again on a new connection",
        SETTLE,
        || async {
            listener_pid(&db, &listener)
                .await
                .is_some_and(|pid| pid != first)
        },
    )
    .await;
    let connected = log_capture::lines_with(&lost)
        .iter()
        .filter(|l| l.contains("LISTEN connected"))
        .count();
    assert!(connected >= 2, "the reconnection is logged");
    host.stop().await;
}

#[tokio::test]
async fn two_hosts_of_two_loops_each_publish_every_row_once_and_each_aggregate_in_id_order() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = webhook_dir("relay-two-hosts", &stub);
    let mut first = host::config(&db, dir.path());
    first.relay.instances = 2;
    first.relay.node_id = Some(format!("{}-a", db.schema));
    let mut second = first.clone();
    second.relay.node_id = Some(format!("{}-b", db.schema));
    let (a, b) = (
        TestHost::start(&first).await,
        TestHost::start(&second).await,
    );
    let mut tx = db.pool.begin().await.unwrap();
    // More aggregates than a claim's batch, so every loop finds heads to claim.
    for seq in 0..2000 {
        let e = webhook_entry(&stub, &format!("agg-{}", seq % 200), seq);
        db.outbox().publish(&mut tx, e).await.unwrap();
    }
    tx.commit().await.unwrap();
    wait_until(
        "all rows are published",
        Duration::from_secs(90),
        || async { db.count("PUBLISHED").await == 2000 },
    )
    .await;
    assert_each_aggregate_once_in_id_order(&stub, 200, 2000);
    let (loops, hosts): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(DISTINCT claimed_by), count(DISTINCT regexp_replace(claimed_by, '-[0-9]+$', '')) FROM {}",
        db.tables.outbox()
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!("loops that claimed: {loops} of 4");
    assert_eq!(hosts, 2, "both hosts took part");
    a.stop().await;
    b.stop().await;
}

/// A delivery that outlives its lease is taken over by whichever host claims the row next; the
/// first call's late success is refused as a mark, and the aggregate's younger rows wait for the
/// takeover, so order holds. (A call is cut at two thirds of the lease, so here the lease is
/// recovered early, as it is when a call waited long for an instance before it started.)
#[tokio::test]
async fn a_lease_expiring_under_a_slow_endpoint_with_two_hosts_refuses_the_late_mark_and_keeps_order()
 {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    stub.script(&[(200, Duration::from_millis(6000))]);
    let dir = webhook_dir("relay-lease-two-hosts", &stub);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let mut first = host::config(&db, dir.path());
    first.relay.node_id = Some(format!("{}-a", db.schema));
    let mut second = first.clone();
    second.relay.node_id = Some(format!("{}-b", db.schema));
    let (a, b) = (
        TestHost::start(&first).await,
        TestHost::start(&second).await,
    );
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for seq in 0..5 {
        let e = webhook_entry(&stub, "a", seq);
        ids.push(db.outbox().publish(&mut tx, e).await.unwrap());
    }
    tx.commit().await.unwrap();
    wait_until("the first delivery has started", SETTLE, || async {
        stub.requests().len() == 1
    })
    .await;
    db.repository().reclaim_stale(Duration::ZERO).await.unwrap();
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 5
    })
    .await;
    let marker = format!("entry_id={} ", ids[0]);
    wait_until(
        "the observers have seen the stale call end",
        SETTLE,
        || async {
            log_capture::lines_of(&recorder)
                .iter()
                .any(|l| l.contains(&marker) && l.contains("disposition_recorded=false"))
        },
    )
    .await;
    assert_eq!(
        delivered_seqs(&stub),
        vec![0, 0, 1, 2, 3, 4],
        "the head is delivered again after its lease, then its siblings in order"
    );
    let head = db.repository().find(ids[0]).await.unwrap().unwrap();
    assert_eq!(head.attempt, 0, "the takeover spent no attempt");
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn the_relay_survives_losing_its_database_connections() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-connections-lost");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.lease_timeout = Duration::from_millis(1000);
    config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    let node = config.relay.node_id.clone().unwrap();
    let host = TestHost::start(&config).await;
    let mut terminated = 0;
    for round in 0..5 {
        let mut tx = db.pool.begin().await.unwrap();
        for i in 0..100 {
            let e = entry("NOOP", "x").aggregate("Order", format!("{round}-{}", i % 10));
            db.outbox().publish(&mut tx, e).await.unwrap();
        }
        tx.commit().await.unwrap();
        terminated += sqlx::query_scalar::<_, i64>(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(format!("{APPLICATION_NAME} {node}"))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    }
    assert!(terminated > 0, "the host's connections were cut");
    wait_until("every row is published all the same", SETTLE, || async {
        db.count("PUBLISHED").await == 500
    })
    .await;
    assert_eq!(db.count("DEAD_LETTER").await, 0);
    host.stop().await;
}

#[tokio::test]
async fn a_call_that_outlived_its_lease_cannot_record_against_the_same_nodes_next_claim() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    // The first delivery fails slowly; the second, made after the lease is recovered, succeeds
    // later still, so the stale failure lands while the row is in its second claim.
    stub.script(&[
        (500, Duration::from_millis(1500)),
        (200, Duration::from_millis(3000)),
    ]);
    let dir = webhook_dir("relay-stale-call", &stub);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let mut config = host::config(&db, dir.path());
    config.maintenance.stale_lease_recovery_cron = "0 0 0 1 1 *".parse().unwrap();
    let host = TestHost::start(&config).await;
    let id = db.publish(webhook_entry(&stub, "a", 0)).await;
    wait_until("the first delivery has started", SETTLE, || async {
        stub.requests().len() == 1
    })
    .await;
    db.repository().reclaim_stale(Duration::ZERO).await.unwrap();
    db.wait_until_published(id, SETTLE).await;
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.attempt, 0, "the stale call's failure spent no attempt");
    assert_eq!(row.last_error, None);
    assert_eq!(stub.requests().len(), 2);
    let marker = format!("entry_id={id} ");
    wait_until("the observer has seen both calls", SETTLE, || async {
        log_capture::lines_of(&recorder)
            .iter()
            .filter(|l| l.contains(&marker))
            .count()
            == 2
    })
    .await;
    let lines: Vec<String> = log_capture::lines_of(&recorder)
        .into_iter()
        .filter(|l| l.contains(&marker))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("outcome=retryable-failure")
                && l.contains("disposition_recorded=false")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("outcome=success") && l.contains("disposition_recorded=true")),
        "{lines:#?}"
    );
    host.stop().await;
}

/// However long a manifest lets a call run, it ends before its row's lease could pass to another
/// call: a plugin is held to two thirds of `relay.lease_timeout_ms`.
#[tokio::test]
async fn a_call_is_cut_at_two_thirds_of_the_lease_whatever_its_manifest_allows() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-call-within-lease");
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest("scripted", "[limits]\ntimeout_ms = 20000\n");
    let mut config = host::config(&db, dir.path());
    config.relay.lease_timeout = Duration::from_millis(1500);
    let host = TestHost::start(&config).await;
    let handler = host.service.plugins().borrow().handler("SCRIPTED");
    assert_eq!(
        handler.map(|handler| handler.limits().timeout_ms),
        Some(1000)
    );
    let slow = OutboxEntry::new(
        "test.event",
        "SCRIPTED",
        "x",
        serde_json::json!({"delay_ms": 10_000}),
    )
    .max_attempts(1);
    let id = db.publish(slow).await;
    wait_until("the call has ended", SETTLE, || async {
        !["PENDING", "PROCESSING"].contains(&db.state_of(id).await.as_str())
    })
    .await;
    assert_eq!(db.state_of(id).await, "DEAD_LETTER");
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.error_type.as_deref(), Some("timeout"));
    host.stop().await;
}

/// A turn may claim more rows of a type than its plugin runs at once, and the leases of those that
/// wait for a free call run meanwhile. A row whose call could no longer end well inside its lease
/// is handed back without a call and without spending an attempt, so no call outlives its lease:
/// every row is called once, and every outcome is recorded.
#[tokio::test]
async fn a_row_left_waiting_for_a_busy_plugin_is_handed_back_before_its_lease_runs_out() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-busy-plugin-lease");
    let scripted = format!("scripted_{}", db.schema);
    dir.add_plugin(&scripted, plugins::SCRIPTED);
    dir.add_manifest(
        &scripted,
        "[limits]\nmax_concurrency = 1\ntimeout_ms = 1000\n",
    );
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let mut config = host::config(&db, dir.path());
    // A call may start up to 1.5 s after its claim (3 s less the 1 s limit and a sixth of the
    // lease); the sixth row, called one after another at 700 ms each, would start after 3.5 s.
    config.relay.lease_timeout = Duration::from_millis(3000);
    config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    let host = TestHost::start(&config).await;
    let mut tx = db.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..6 {
        let slow = OutboxEntry::new(
            "test.event",
            "SCRIPTED",
            "x",
            serde_json::json!({"delay_ms": 700}),
        );
        ids.push(db.outbox().publish(&mut tx, slow).await.unwrap());
    }
    tx.commit().await.unwrap();
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 6
    })
    .await;
    wait_until(
        "the observer has seen every recorded outcome",
        SETTLE,
        || async {
            log_capture::lines_of(&recorder)
                .iter()
                .filter(|l| l.contains("disposition_recorded=true"))
                .count()
                == 6
        },
    )
    .await;
    let observed: Vec<String> = log_capture::lines_of(&recorder)
        .into_iter()
        .filter(|l| l.contains("publish-completed"))
        .collect();
    assert!(
        observed
            .iter()
            .all(|l| l.contains("outcome=success") && l.contains("disposition_recorded=true")),
        "no call outlived its lease: {observed:#?}"
    );
    for id in &ids {
        let marker = format!("entry_id={id}");
        let calls = log_capture::lines_of(&scripted)
            .iter()
            .filter(|l| l.ends_with(&marker) || l.contains(&format!("{marker} ")))
            .count();
        assert_eq!(calls, 1, "row {id} was called once");
        let row = db.repository().find(*id).await.unwrap().unwrap();
        assert_eq!(row.attempt, 0, "no attempt was spent");
    }
    assert!(
        host.metric("outbox_deferred_total{destination_type=\"SCRIPTED\"}")
            .await
            >= 1.0,
        "rows were handed back"
    );
    host.stop().await;
}

/// The `seq` of every webhook request the stub received, in arrival order.
fn delivered_seqs(stub: &StubServer) -> Vec<u64> {
    stub.requests()
        .iter()
        .map(|request| payload_of(request)["seq"].as_u64().unwrap())
        .collect()
}

/// What the relay guarantees is order among committed rows: a row it cannot see yet cannot hold
/// its younger siblings back. Two writers of one aggregate whose commits cross are delivered in
/// commit order, not id order (the README says how an application keeps id order).
#[tokio::test]
async fn a_younger_row_committed_first_is_delivered_before_an_older_row_still_uncommitted() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = webhook_dir("relay-crossed-commits", &stub);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let mut older = db.pool.begin().await.unwrap();
    let older_id = db
        .outbox()
        .publish(&mut older, webhook_entry(&stub, "crossed", 1))
        .await
        .unwrap();
    let younger_id = db.publish(webhook_entry(&stub, "crossed", 2)).await;
    assert!(older_id < younger_id);
    wait_until("the younger row is published", SETTLE, || async {
        db.state_of(younger_id).await == "PUBLISHED"
    })
    .await;
    older.commit().await.unwrap();
    wait_until("the older row is published", SETTLE, || async {
        db.state_of(older_id).await == "PUBLISHED"
    })
    .await;
    assert_eq!(delivered_seqs(&stub), [2, 1]);
    host.stop().await;
}

/// The application's side of ordering: writers of one aggregate that serialise on it (here a
/// transaction-scoped advisory lock on the aggregate, taken before inserting) commit in id order,
/// and the relay delivers in that order.
#[tokio::test]
async fn writers_that_lock_their_aggregate_before_inserting_are_delivered_in_id_order() {
    let db = TestDb::new().await;
    // A key of this test's own: other tests' locks never pass for the second writer's wait.
    let key = format!("hashtext('{}:Order:locked')", db.schema);
    let lock = format!("SELECT pg_advisory_xact_lock({key})");
    let stub = StubServer::start(200).await;
    let dir = webhook_dir("relay-locked-aggregate", &stub);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let mut first = db.pool.begin().await.unwrap();
    sqlx::query(&lock).execute(&mut *first).await.unwrap();
    let first_id = db
        .outbox()
        .publish(&mut first, webhook_entry(&stub, "locked", 1))
        .await
        .unwrap();
    let second = tokio::spawn({
        let (pool, outbox, entry, lock) = (
            db.pool.clone(),
            db.outbox(),
            webhook_entry(&stub, "locked", 2),
            lock.clone(),
        );
        async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(&lock).execute(&mut *tx).await.unwrap();
            let id = outbox.publish(&mut tx, entry).await.unwrap();
            tx.commit().await.unwrap();
            id
        }
    });
    wait_until(
        "the second writer waits for the aggregate",
        SETTLE,
        || async {
            let waiting = format!(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND objid::bigint = {key}::bigint & 4294967295"
            );
            db.scalar::<i64>(&waiting).await == 1
        },
    )
    .await;
    first.commit().await.unwrap();
    let second_id = second.await.unwrap();
    assert!(first_id < second_id);
    wait_until("both rows are published", SETTLE, || async {
        db.state_of(second_id).await == "PUBLISHED" && db.state_of(first_id).await == "PUBLISHED"
    })
    .await;
    assert_eq!(delivered_seqs(&stub), [1, 2]);
    host.stop().await;
}

#[tokio::test]
async fn a_head_answered_503_holds_its_siblings_until_its_retry_succeeds() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    stub.script(&[(503, Duration::ZERO), (503, Duration::ZERO)]);
    let dir = webhook_dir("relay-503-head", &stub);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let mut tx = db.pool.begin().await.unwrap();
    for seq in 1..=3 {
        db.outbox()
            .publish(&mut tx, webhook_entry(&stub, "head", seq))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 3
    })
    .await;
    assert_eq!(delivered_seqs(&stub), [1, 1, 1, 2, 3]);
    host.stop().await;
}

/// What the injected claim failure does to the relay's connection.
#[derive(Clone, Copy)]
enum ClaimFault {
    /// The claim runs past the connection's `statement_timeout`.
    StatementTimeout,
    /// The claim's connection is terminated mid-statement.
    KilledConnection,
}

/// Every other claim statement (one that moves rows to PROCESSING) that follows marks in its
/// transaction (rows this transaction moved out of PROCESSING) fails the way `fault` says; a
/// sequence counts those claims because it does not roll back with them.
async fn fail_every_other_claim(db: &TestDb, fault: ClaimFault) {
    let action = match fault {
        ClaimFault::StatementTimeout => "PERFORM pg_sleep(2)",
        ClaimFault::KilledConnection => "PERFORM pg_terminate_backend(pg_backend_pid())",
    };
    let schema = &db.schema;
    db.execute(&format!("CREATE SEQUENCE {schema}.claims_seen"))
        .await;
    db.execute(&format!(
        "CREATE FUNCTION {schema}.fail_every_other_claim() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF EXISTS (SELECT 1 FROM claimed WHERE state = 'PROCESSING')
                AND EXISTS (SELECT 1 FROM {{outbox}} WHERE xmin = pg_current_xact_id()::xid
                            AND state <> 'PROCESSING')
                AND nextval('{schema}.claims_seen') % 2 = 0 THEN
                 {action};
             END IF;
             RETURN NULL;
         END $$"
    ))
    .await;
    db.execute(&format!(
        "CREATE TRIGGER fail_every_other_claim AFTER UPDATE ON {{outbox}} \
         REFERENCING NEW TABLE AS claimed FOR EACH STATEMENT \
         EXECUTE FUNCTION {schema}.fail_every_other_claim()"
    ))
    .await;
}

/// Rows trickle in while claims fail after their turn's marks: each outcome is kept, recorded on a
/// later turn, and counted once, by the metrics and by the observers; every row is delivered once.
async fn claims_failing_after_their_turns_marks_lose_nothing_and_count_nothing_twice(
    fault: ClaimFault,
) {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = webhook_dir("relay-claim-fails", &stub);
    let recorder = format!("recorder_{}", db.schema);
    dir.add_plugin(&recorder, plugins::RECORDER);
    let mut config = host::config(&db, dir.path());
    config.database.url = Some(format!("{}?options[statement_timeout]=500", db.url));
    fail_every_other_claim(&db, fault).await;
    let host = TestHost::start(&config).await;
    // One aggregate's ten rows at a time: each turn marks a head and claims the next row of its
    // aggregate. Spaced so the observer's lines stay within a plugin's log budget (100 a second).
    let rows = 100;
    for aggregate in 0..10 {
        let mut tx = db.pool.begin().await.unwrap();
        for seq in aggregate * 10..aggregate * 10 + 10 {
            let e = webhook_entry(&stub, &format!("agg-{aggregate}"), seq);
            db.outbox().publish(&mut tx, e).await.unwrap();
        }
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_until(
        "every row is published",
        Duration::from_secs(90),
        || async { db.count("PUBLISHED").await == rows as i64 },
    )
    .await;
    let failed_claims: i64 = db
        .scalar(&format!(
            "SELECT last_value / 2 FROM {}.claims_seen",
            db.schema
        ))
        .await;
    println!("claim statements failed after their turn's marks: {failed_claims}");
    assert!(failed_claims >= 3, "claims failed ({failed_claims})");
    assert_each_aggregate_once_in_id_order(&stub, 10, rows);
    let published = host
        .metric("outbox_published_total{destination_type=\"WEBHOOK\"}")
        .await;
    assert_eq!(published, rows as f64, "each outcome is counted once");
    wait_until("the observer has seen every outcome", SETTLE, || async {
        log_capture::lines_of(&recorder)
            .iter()
            .filter(|l| l.contains("outcome=success"))
            .count()
            >= rows
    })
    .await;
    let told = log_capture::lines_of(&recorder)
        .iter()
        .filter(|l| l.contains("outcome=success"))
        .count();
    assert_eq!(told, rows, "observers are told of each outcome once");
    let retried: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE attempt > 0")
        .await;
    assert_eq!(retried, 0, "a failed claim spends no attempt");
    host.stop().await;
}

#[tokio::test]
async fn claims_timing_out_after_their_turns_marks_lose_nothing_and_count_nothing_twice() {
    claims_failing_after_their_turns_marks_lose_nothing_and_count_nothing_twice(
        ClaimFault::StatementTimeout,
    )
    .await;
}

#[tokio::test]
async fn claims_whose_connection_is_killed_after_their_turns_marks_lose_nothing_and_count_nothing_twice()
 {
    claims_failing_after_their_turns_marks_lose_nothing_and_count_nothing_twice(
        ClaimFault::KilledConnection,
    )
    .await;
}
