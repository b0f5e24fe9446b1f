//! Misbehaving plugins (an endless loop, a memory bomb, a trap, a slow call, a failing observer)
//! beside a steady load of a well-behaved type, on the real `outbox-host` binary. A test binary of
//! its own, so no other test shares the two cores while the well-behaved type's pace is measured.

use outbox_host::api::OutboxEntry;
use outbox_tests::binary::HostProcess;
use outbox_tests::db::TestDb;
use outbox_tests::fault_load::{DRAIN, EXIT, LOAD, webhook_host};
use outbox_tests::host::wait_until;
use outbox_tests::http_stub::StubServer;
use outbox_tests::load::SteadyLoad;
use outbox_tests::plugins;
use std::process::Stdio;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");

/// Webhook rows published in `window`, a second at a time.
async fn webhook_rows_per_second(db: &TestDb, window: Duration) -> f64 {
    let published = || {
        db.scalar::<i64>(
            "SELECT count(*) FROM {outbox} WHERE destination_type = 'WEBHOOK' AND state = 'PUBLISHED'",
        )
    };
    let before = published().await;
    tokio::time::sleep(window).await;
    (published().await - before) as f64 / window.as_secs_f64()
}

#[tokio::test]
async fn plugin_faults_beside_a_steady_load_retry_only_their_own_rows_and_the_other_type_keeps_its_pace()
 {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    let (dir, config) = webhook_host(&db, &receiver, "plugin-faults", |_| {});
    dir.add_plugin("hostile", plugins::HOSTILE);
    // The memory bomb touches every page it grows, and on a loaded virtual machine each fresh
    // page can cost tens of microseconds: a small limit keeps it far inside its time limit, so it
    // ends as `memory` however busy the machine is, not as `timeout`.
    dir.add_manifest("hostile", "[limits]\ntimeout_ms = 500\nmemory_mb = 8\n");
    // A failing observer beside them: it must change nothing either.
    dir.add_plugin("recorder", plugins::RECORDER);
    dir.add_manifest("recorder", "[config]\ntrap = \"true\"\n");
    let hook = receiver.url("/hook");
    let load = SteadyLoad::start(db.pool.clone(), db.outbox(), LOAD, move |n| {
        OutboxEntry::new(
            "test.event",
            "WEBHOOK",
            hook.clone(),
            serde_json::json!({"n": n}),
        )
    });
    let mut process = HostProcess::run(BINARY, &config, "error", Stdio::null(), Stdio::inherit());
    // The pace without faults is measured once the host has caught up with the load, so it is the
    // load's pace, not a start-up backlog being drained.
    wait_until(
        "the host keeps up with the load",
        Duration::from_secs(60),
        || async {
            db.count("PUBLISHED").await >= 500 && db.count("PENDING").await < (LOAD / 5) as i64
        },
    )
    .await;
    let window = Duration::from_secs(8);
    let without_faults = webhook_rows_per_second(&db, window).await;

    let faulty = ["loop", "alloc", "trap", "sleep"];
    let faults = {
        let (db_pool, outbox) = (db.pool.clone(), db.outbox());
        tokio::spawn(async move {
            loop {
                let mut tx = db_pool.begin().await.unwrap();
                for destination in faulty {
                    let entry = OutboxEntry::new(
                        "test.event",
                        "HOSTILE",
                        destination,
                        serde_json::json!({"ms": 200}),
                    )
                    .max_attempts(2);
                    outbox.publish(&mut tx, entry).await.unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let with_faults = webhook_rows_per_second(&db, window).await;
    faults.abort();
    println!(
        "webhook rows/s: {without_faults:.0} without faults, {with_faults:.0} beside them ({:.2}x)",
        with_faults / without_faults
    );
    // The pace beside the faults is a figure to read (goal: at least 0.8 of the pace without
    // them), not a timed assertion. This binary runs alone, and the sandbox throttles a looping
    // call to a quarter of a core, so the figure shows what the faults cost, not the machine.
    assert!(
        with_faults > 0.0,
        "the well-behaved type is still delivered beside the faults"
    );

    let rows = load.stop().await;
    db.wait_until_settled(DRAIN).await;
    let hostile: Vec<(String, String, i32, Option<String>)> = sqlx::query_as(&format!(
        "SELECT destination, state, attempt, error_type FROM {} WHERE destination_type = 'HOSTILE'",
        db.tables.outbox()
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(hostile.len() >= faulty.len());
    for (destination, state, attempt, error_type) in &hostile {
        let expected = match destination.as_str() {
            "loop" => Some("timeout"),
            "alloc" => Some("memory"),
            "trap" => Some("trap"),
            _ => None,
        };
        match expected {
            Some(error_type_expected) => {
                assert_eq!(
                    (state.as_str(), *attempt, error_type.as_deref()),
                    ("DEAD_LETTER", 2, Some(error_type_expected)),
                    "a {destination} row is retried, then dead-lettered"
                );
            }
            None => assert_eq!(state, "PUBLISHED", "a slow call within its limit succeeds"),
        }
    }
    let webhook_rows: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE destination_type = 'WEBHOOK' AND state = 'PUBLISHED' AND attempt = 0")
        .await;
    assert_eq!(
        webhook_rows as u64, rows,
        "every webhook row is published on its first attempt"
    );
    let received: std::collections::HashSet<String> = receiver
        .requests()
        .iter()
        .filter_map(|request| request.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(received.len() as u64, rows, "every webhook row is received");
    assert_eq!(receiver.requests().len() as u64, rows, "and received once");
    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}
