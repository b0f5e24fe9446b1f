//! The relay end to end: a real host on real PostgreSQL with plugins built from source.

use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;

async fn count(db: &TestDb, state: &str) -> i64 {
    db.scalar(&format!("SELECT count(*) FROM {{outbox}} WHERE state = '{state}'")).await
}

#[tokio::test]
async fn noop_rows_all_end_published() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("relay-noop");
    dir.add_plugin("noop", plugins::NOOP);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    for i in 0..200 {
        db.publish(entry("NOOP", "x").aggregate("A", (i % 10).to_string())).await;
    }
    wait_until("every row is published", Duration::from_secs(20), || async { count(&db, "PUBLISHED").await == 200 }).await;
    host.stop().await;
}
