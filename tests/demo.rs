//! `outbox-host demo` in this process, on plugins built from source and a schema of its own: every
//! sample row settles, and what the summary reports agrees with the table.

use outbox_host::demo::{self, DemoError, DemoOptions};
use outbox_tests::db::{self, TestDb};
use outbox_tests::host;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;

fn options(db: &TestDb, plugins_dir: &ScratchDir, rows: u32) -> DemoOptions {
    DemoOptions {
        database_url: db::url(),
        schema: db.schema.clone(),
        plugins: plugins_dir.path().to_owned(),
        cache_dir: host::config(db, plugins_dir.path()).plugins.cache_dir(),
        rows,
        progress: false,
    }
}

async fn count(db: &TestDb, condition: &str) -> u64 {
    let count: i64 = db
        .scalar(&format!(
            "SELECT count(*) FROM {{outbox}} WHERE {condition}"
        ))
        .await;
    count as u64
}

#[tokio::test]
async fn every_row_settles_and_the_summary_agrees_with_the_table() {
    let db = TestDb::new().await;
    let plugins_dir = ScratchDir::new("demo-plugins");
    for (stem, component) in [
        ("webhook", plugins::WEBHOOK),
        ("noop", plugins::NOOP),
        ("stats", plugins::STATS),
    ] {
        plugins_dir.add_plugin(stem, component);
    }
    let rows = 400;
    let mut out = Vec::new();
    let summary = demo::run(&options(&db, &plugins_dir, rows), &mut out)
        .await
        .expect("the demo runs");
    let printed = String::from_utf8(out).unwrap();

    assert!(summary.succeeded(), "{printed}");
    assert_eq!(summary.settled, u64::from(rows));
    let published = count(&db, "state = 'PUBLISHED'").await;
    let dead_lettered = count(&db, "state = 'DEAD_LETTER'").await;
    let retries: i64 = db
        .scalar("SELECT COALESCE(sum(attempt), 0)::bigint FROM {outbox} WHERE state = 'PUBLISHED'")
        .await;
    assert_eq!(published + dead_lettered, u64::from(rows));
    assert_eq!(summary.host.published, published, "{printed}");
    assert_eq!(summary.host.dead_lettered, dead_lettered, "{printed}");
    assert_eq!(summary.host.retried, retries as u64, "{printed}");
    assert_eq!(
        summary.receiver.accepted,
        count(&db, "state = 'PUBLISHED' AND destination_type = 'WEBHOOK'").await
    );
    assert!(
        dead_lettered > 0 && retries > 0,
        "the sample has rows to retry and to dead-letter: {printed}"
    );
    assert!(
        printed.contains(&format!("{rows} rows settled")),
        "{printed}"
    );
}

#[tokio::test]
async fn missing_plugins_are_named_with_the_command_that_builds_them() {
    let db = TestDb::new().await;
    let empty = ScratchDir::new("demo-no-plugins");
    let error = demo::run(&options(&db, &empty, 10), &mut Vec::new())
        .await
        .expect_err("no plugins to run");
    assert!(matches!(error, DemoError::PluginMissing { .. }), "{error}");
    assert!(
        error.to_string().contains("scripts/build-plugins"),
        "{error}"
    );
}
