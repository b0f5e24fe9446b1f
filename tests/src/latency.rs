//! Insert-to-publish latency for the benchmarks: `published_at - created_at`, both on the database
//! clock, so neither the harness's polling nor its clock counts.

use crate::db::TestDb;
use crate::host::wait_until;
use outbox_host::api::OutboxEntry;
use std::time::{Duration, Instant};

/// Inserts NOOP rows (over 100 aggregates) at `rate` rows/s for `duration` into a host's `db`, waits
/// until every row is published and returns the p50 and p99 latency in ms and the rows inserted.
pub async fn under_steady_load(db: &TestDb, rate: u64, duration: Duration) -> (f64, f64, usize) {
    let outbox = db.outbox();
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut inserted = 0usize;
    while started.elapsed() < duration {
        ticker.tick().await;
        let mut tx = db.pool.begin().await.unwrap();
        let entry = OutboxEntry::new("bench", "NOOP", "x", serde_json::json!({"n": inserted}))
            .aggregate("Bench", (inserted % 100).to_string());
        outbox.publish(&mut tx, entry).await.unwrap();
        tx.commit().await.unwrap();
        inserted += 1;
    }
    wait_until_all_published(db).await;
    let (p50, p99) = percentiles(db).await;
    (p50, p99, inserted)
}

/// Waits until no row of `db` is left unpublished.
pub async fn wait_until_all_published(db: &TestDb) {
    wait_until(
        "every row is published",
        Duration::from_secs(600),
        || async {
            db.scalar::<i64>("SELECT count(*) FROM {outbox} WHERE state <> 'PUBLISHED'")
                .await
                == 0
        },
    )
    .await;
}

/// p50 and p99 insert-to-publish latency of every row of `db`, in ms.
pub async fn percentiles(db: &TestDb) -> (f64, f64) {
    let percentile = |fraction: f64| {
        format!(
            "SELECT (percentile_cont({fraction}) WITHIN GROUP \
             (ORDER BY EXTRACT(EPOCH FROM published_at - created_at)) * 1000)::float8 FROM {{outbox}}"
        )
    };
    (
        db.scalar(&percentile(0.5)).await,
        db.scalar(&percentile(0.99)).await,
    )
}
