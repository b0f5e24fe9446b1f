//! Insert-to-publish latency for the benchmarks: `published_at - created_at`, both on the database
//! clock, so neither the harness's polling nor its clock counts.

use crate::db::TestDb;
use outbox_host::api::OutboxEntry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::time::MissedTickBehavior;

/// What [`under_steady_load`] measured.
pub struct SteadyLatency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rows: u64,
    /// The insert rate the writers achieved, which falls short of the one asked when they could not
    /// keep up.
    pub rows_per_second: f64,
}

/// Inserts NOOP rows (over 100 aggregates), one a transaction, at `rate` rows/s shared by `writers`
/// concurrent writers, for `duration`, into a host's `db`; waits until every row is published. A
/// writer that falls behind skips ticks instead of catching up in a burst, so the load stays steady
/// and [`SteadyLatency::rows_per_second`] tells how far it fell short.
pub async fn under_steady_load(
    db: &TestDb,
    rate: u64,
    writers: u64,
    duration: Duration,
) -> SteadyLatency {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (pool, outbox, next) = (db.pool.clone(), db.outbox(), next.clone());
            tokio::spawn(async move {
                let mut ticker =
                    tokio::time::interval(Duration::from_micros(1_000_000 * writers / rate));
                ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
                let mut inserted = 0;
                while started.elapsed() < duration {
                    ticker.tick().await;
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let entry = OutboxEntry::new("bench", "NOOP", "x", serde_json::json!({"n": n}))
                        .aggregate("Bench", (n % 100).to_string());
                    let mut tx = pool.begin().await.unwrap();
                    outbox.publish(&mut tx, entry).await.unwrap();
                    tx.commit().await.unwrap();
                    inserted += 1;
                }
                inserted
            })
        })
        .collect();
    let mut rows = 0;
    for task in tasks {
        rows += task.await.expect("a writer does not panic");
    }
    let rows_per_second = rows as f64 / started.elapsed().as_secs_f64();
    wait_until_all_published(db).await;
    let (p50_ms, p99_ms) = percentiles(db).await;
    SteadyLatency {
        p50_ms,
        p99_ms,
        rows,
        rows_per_second,
    }
}

/// Waits until no row of `db` is left unpublished. It polls the partial indexes' cheap probes, not
/// a count: a count scans the whole table, and 50 of them a second took a large share of the
/// database's CPU from the relay the benchmarks measure.
pub async fn wait_until_all_published(db: &TestDb) {
    db.wait_until_settled(Duration::from_secs(600)).await;
    let unpublished: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE state <> 'PUBLISHED'")
        .await;
    assert_eq!(unpublished, 0, "every row settled as published");
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
