//! Stopping the host as an operator does: SIGTERM to the real binary under load.

use outbox_host::api::OutboxEntry;
use outbox_tests::binary::HostProcess;
use outbox_tests::db::{self, TestDb};
use outbox_tests::host::wait_until;
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::process::Stdio;
use std::time::{Duration, Instant};

const GRACE_MS: u64 = 300;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");

fn start_host(config: &std::path::Path) -> HostProcess {
    HostProcess::run(BINARY, config, "warn", Stdio::null(), Stdio::inherit())
}

/// Sends SIGTERM and waits for the process to exit; returns its exit code and how long that took.
async fn terminate(host: &mut HostProcess) -> (Option<i32>, Duration) {
    host.signal("TERM");
    let started = Instant::now();
    let code = host.exit_code("SIGTERM", Duration::from_secs(20)).await;
    (code, started.elapsed())
}

#[tokio::test]
async fn sigterm_under_load_exits_0_within_the_grace_period_and_a_restart_finishes_every_row() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    stub.set_delay(Duration::from_millis(1500));
    let dir = ScratchDir::new("shutdown");
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", stub.origin()),
    );
    let config = dir.write(
        "host.conf",
        format!(
            "[database]\nurl = \"{}\"\nschema = \"{}\"\nmigrate = false\nmax_connections = 4\n\
             [plugins]\ndir = \"{}\"\nmax_instances = 64\n\
             [relay]\nshutdown_grace_ms = {GRACE_MS}\nlease_timeout_ms = 1000\npolling_interval_ms = 200\n\
             node_id = \"{}-node\"\n\
             [maintenance]\nstale_lease_recovery_cron = \"* * * * * *\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n",
            db::url(),
            db.schema,
            dir.path().display(),
            db.schema
        )
        .as_bytes(),
    );
    let mut tx = db.pool.begin().await.unwrap();
    for seq in 0..300 {
        let entry = OutboxEntry::new(
            "test.event",
            "WEBHOOK",
            stub.url("/hook"),
            serde_json::json!({"seq": seq}),
        )
        .aggregate("Order", (seq % 30).to_string());
        db.outbox().publish(&mut tx, entry).await.unwrap();
    }
    tx.commit().await.unwrap();

    let mut host = start_host(&config);
    wait_until(
        "publishes are in flight",
        Duration::from_secs(30),
        || async { db.count("PROCESSING").await >= 20 },
    )
    .await;
    let (code, took) = terminate(&mut host).await;
    assert_eq!(code, Some(0));
    assert!(
        took < Duration::from_millis(GRACE_MS + 1500),
        "took {took:?} to exit"
    );
    assert!(
        db.count("PROCESSING").await > 0,
        "publishes still running at the deadline stay PROCESSING"
    );

    stub.set_delay(Duration::ZERO);
    let mut restarted = start_host(&config);
    wait_until(
        "a restart finishes every row",
        Duration::from_secs(60),
        || async { db.count("PUBLISHED").await == 300 },
    )
    .await;
    assert_eq!(terminate(&mut restarted).await.0, Some(0));
}
