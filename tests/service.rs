//! The service as operators see it: the admin endpoint and the maintenance jobs, on a running host.

use outbox_host::admin::client;
use outbox_host::maintenance::{CleanupSettings, Job};
use outbox_host::metrics::RunResult;
use outbox_host::service::{self, Resources, StartError};
use outbox_host::signals::Signal;
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const SETTLE: Duration = Duration::from_secs(30);

/// The body of a 200 answer from the host's admin endpoint.
async fn get(path: &str, host: &TestHost) -> String {
    let body = client::get(&host.admin_url(path))
        .await
        .expect("the admin endpoint answers 200");
    String::from_utf8(body.to_vec()).expect("a text body")
}

fn noop_dir(label: &str) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("noop", plugins::NOOP);
    dir
}

#[tokio::test]
async fn healthz_answers_ok() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-healthz");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    assert_eq!(get("/healthz", &host).await, "ok\n");
    host.stop().await;
}

#[tokio::test]
async fn readyz_is_ready_once_the_database_answers_and_plugins_are_loaded() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-readyz");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    assert_eq!(get("/readyz", &host).await, "ready\n");
    host.stop().await;
}

#[tokio::test]
async fn metrics_count_outcomes_by_destination_type_in_prometheus_text() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-metrics");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    for _ in 0..5 {
        db.publish(entry("NOOP", "x")).await;
    }
    db.publish(entry("ELSEWHERE", "x")).await;
    wait_until("five rows are published", SETTLE, || async {
        db.count("PUBLISHED").await == 5
    })
    .await;
    let text = get("/metrics", &host).await;
    for expected in [
        "outbox_claimed_total{destination_type=\"NOOP\"} 5",
        "outbox_published_total{destination_type=\"NOOP\"} 5",
        "outbox_publish_duration_seconds_count{destination_type=\"NOOP\"} 5",
        "outbox_in_flight 0",
        "outbox_rows{destination_type=\"ELSEWHERE\",state=\"PENDING\"} 1",
        "outbox_listen_connected 1",
        "outbox_plugins{state=\"loaded\"} 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        text.contains("outbox_plugin_calls_total{destination_type=\"NOOP\",plugin=\"noop\"}"),
        "{text}"
    );
    host.stop().await;
}

#[tokio::test]
async fn plugins_lists_every_file_with_its_state() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-plugins");
    dir.write("broken.wasm", b"not a component");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let body = get("/plugins", &host).await;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let plugins = json["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 2);
    let broken = plugins
        .iter()
        .find(|p| p["file"].as_str().unwrap().ends_with("broken.wasm"))
        .unwrap();
    assert_eq!(broken["state"], "failed");
    assert!(broken["last_error"].as_str().is_some_and(|e| !e.is_empty()));
    let noop = plugins
        .iter()
        .find(|p| p["file"].as_str().unwrap().ends_with("noop.wasm"))
        .unwrap();
    assert_eq!(noop["state"], "loaded");
    assert_eq!(noop["world"], "destination-handler");
    assert_eq!(noop["destination_type"], "NOOP");
    assert_eq!(noop["claim_scope"], "all");
    assert_eq!(noop["content_hash"].as_str().unwrap().len(), 64);
    assert!(noop["loaded_at"].is_string());
    host.stop().await;
}

/// The settings of `synchronous_commit` the host's marks ran with, `relay.synchronous_commit` as given.
async fn synchronous_commit_of_the_hosts_marks(synchronous_commit: bool) -> Vec<String> {
    let db = TestDb::new().await;
    db.note_synchronous_commit_of_marks().await;
    let dir = noop_dir("turn-commit");
    let mut config = host::config(&db, dir.path());
    config.relay.synchronous_commit = synchronous_commit;
    let host = TestHost::start(&config).await;
    for _ in 0..5 {
        db.publish(entry("NOOP", "x")).await;
    }
    wait_until("every row is published", SETTLE, || async {
        db.count("PUBLISHED").await == 5
    })
    .await;
    host.stop().await;
    db.synchronous_commit_of_marks().await
}

#[tokio::test]
async fn the_relays_turns_commit_asynchronously_by_default() {
    assert_eq!(synchronous_commit_of_the_hosts_marks(false).await, ["off"]);
}

#[tokio::test]
async fn relay_synchronous_commit_makes_the_relays_turns_durable() {
    assert_eq!(synchronous_commit_of_the_hosts_marks(true).await, ["on"]);
}

#[tokio::test]
async fn stale_lease_recovery_runs_on_its_schedule() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("maintenance-lease");
    let mut config = host::config(&db, dir.path());
    config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    config.relay.lease_timeout = Duration::from_millis(1000);
    let id = db.publish(entry("NOOP", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PROCESSING', claimed_by = 'gone-0', claimed_at = NOW() - INTERVAL '1 hour' WHERE id = {id}"
    ))
    .await;
    let host = TestHost::start(&config).await;
    wait_until("the stale row is back to PENDING", SETTLE, || async {
        db.state_of(id).await == "PENDING"
    })
    .await;
    host.stop().await;
}

#[tokio::test]
async fn maintenance_skips_a_run_while_another_node_holds_its_lock() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("maintenance-lock");
    let mut config = host::config(&db, dir.path());
    config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    let id = db.publish(entry("NOOP", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PROCESSING', claimed_by = 'gone-0', claimed_at = NOW() - INTERVAL '1 hour' WHERE id = {id}"
    ))
    .await;
    let key = Job::LeaseRecovery {
        lease: config.relay.lease_timeout,
    }
    .lock_key(Some(&db.schema));
    let mut other_node = db.pool.acquire().await.unwrap();
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut *other_node)
        .await
        .unwrap();
    assert!(locked);
    let host = TestHost::start(&config).await;
    host.wait_for_signals("a lease recovery run is skipped", 2, SETTLE, |signal| {
        *signal
            == Signal::MaintenanceRun {
                job: "stale_lease_recovery",
                result: RunResult::Skipped,
            }
    })
    .await;
    assert_eq!(
        db.state_of(id).await,
        "PROCESSING",
        "no run while the lock is held elsewhere"
    );
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .execute(&mut *other_node)
        .await
        .unwrap();
    wait_until("the next run reclaims the row", SETTLE, || async {
        db.state_of(id).await == "PENDING"
    })
    .await;
    host.stop().await;
}

#[tokio::test]
async fn cleanup_runs_on_its_schedule_with_the_retention_settings() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("maintenance-cleanup");
    let mut config = host::config(&db, dir.path());
    config.maintenance.cleanup_cron = "* * * * * *".parse().unwrap();
    config.cleanup.published_retention_days = 7;
    let old = db.publish(entry("NOOP", "x")).await;
    let recent = db.publish(entry("NOOP", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PUBLISHED', published_at = NOW() - INTERVAL '8 days' WHERE id = {old}"
    ))
    .await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PUBLISHED', published_at = NOW() - INTERVAL '6 days' WHERE id = {recent}"
    ))
    .await;
    let host = TestHost::start(&config).await;
    wait_until("the old row is deleted", SETTLE, || async {
        db.scalar::<i64>(&format!("SELECT count(*) FROM {{outbox}} WHERE id = {old}"))
            .await
            == 0
    })
    .await;
    assert_eq!(db.state_of(recent).await, "PUBLISHED");
    host.stop().await;
}

#[tokio::test]
async fn a_run_of_cleanup_reports_what_it_deleted() {
    let db = TestDb::new().await;
    let id = db.publish(entry("NOOP", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'DEAD_LETTER', updated_at = NOW() - INTERVAL '31 days' WHERE id = {id}"
    ))
    .await;
    let settings = CleanupSettings {
        published_retention_days: 7,
        dead_letter_retention_days: 30,
        inbox_retention_days: 30,
        batch_size: 10,
    };
    let report = Job::Cleanup(settings)
        .run_once(&db.repository())
        .await
        .unwrap();
    assert_eq!(
        report,
        outbox_host::maintenance::JobReport::Cleanup {
            published: 0,
            dead_letter: 1,
            inbox: 0
        }
    );
}

/// An application embedding the service hands it its own pool, a listener it bound, and the token
/// that stops it.
#[tokio::test]
async fn the_service_runs_on_the_pool_and_listener_it_is_given_until_its_token_is_cancelled() {
    let db = TestDb::new().await;
    let dir = noop_dir("service-resources");
    let mut config = host::config(&db, dir.path());
    // Nothing answers there: only the pool given can deliver.
    config.database.url = Some("postgres://nobody@127.0.0.1:9/nowhere".to_owned());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let resources = Resources {
        pool: Some(db.pool.clone()),
        admin_listener: Some(listener),
    };
    let service = service::start(&config, resources, shutdown.clone())
        .await
        .expect("the service starts on what it is given");
    assert_eq!(service.admin_addr(), admin_addr);
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, SETTLE).await;

    shutdown.cancel();
    tokio::time::timeout(SETTLE, service.wait())
        .await
        .expect("the service stops once its token is cancelled");
}

#[tokio::test]
async fn a_bad_value_set_in_code_fails_the_start_naming_its_key() {
    let db = TestDb::new().await;
    let dir = noop_dir("service-bad-config");
    let mut config = host::config(&db, dir.path());
    config.relay.max_in_flight = config.relay.batch_size - 1;
    let error = service::start(&config, Resources::default(), CancellationToken::new())
        .await
        .err()
        .expect("the start is refused");
    assert!(
        matches!(&error, StartError::Config(_))
            && error.to_string().contains("relay.max_in_flight"),
        "{error}"
    );
}
