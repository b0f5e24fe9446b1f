//! The relay end to end on this machine: the real service in-process, the `noop` plugin built from
//! source, PostgreSQL on the same 2 cores.
//!
//! 1. Drain rate: 100,000 pre-inserted NOOP rows, with one and with two relay loops, at batch sizes
//!    50 (the default) and 500, with no aggregate and with rows spread over 1,000 aggregates.
//! 2. Latency: insert-to-publish p50 and p99 (`published_at - created_at`, both on the database clock)
//!    under a steady 1,000 rows/s insert load, with LISTEN_NOTIFY.
//!
//! Run: `cargo bench -p outbox-tests --bench relay_throughput`

use outbox_host::config::Strategy;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost};
use outbox_tests::latency;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::{Duration, Instant};

const ROWS: u64 = 100_000;

#[tokio::main]
async fn main() {
    println!("end-to-end drain of {ROWS} pre-inserted NOOP rows");
    println!(
        "{:<12} {:>10} {:>6} {:>10}",
        "aggregates", "loops", "batch", "rows/s"
    );
    for aggregates in [None, Some(1_000)] {
        for instances in [1, 2] {
            for batch in [50, 500] {
                let rate = drain(aggregates, instances, batch).await;
                let label = aggregates.map_or("none".to_owned(), |n| n.to_string());
                println!("{label:<12} {instances:>10} {batch:>6} {rate:>10.0}");
            }
        }
    }
    println!("goal: >= 10000 rows/s end to end");
    let (p50, p99, inserted) = latency_under_load(1_000, Duration::from_secs(10)).await;
    println!(
        "\ninsert-to-publish latency at 1,000 rows/s ({inserted} rows, LISTEN_NOTIFY): p50 {p50:.2} ms, p99 {p99:.2} ms"
    );
    println!("goal: p50 <= 5 ms, p99 <= 25 ms");
}

async fn drain(aggregates: Option<u32>, instances: u32, batch: u32) -> f64 {
    let db = TestDb::new().await;
    let aggregate = aggregates.map_or("NULL".to_owned(), |n| {
        format!("'agg-' || floor(random() * {n})::int")
    });
    db.execute(&format!(
        "INSERT INTO {{outbox}} (carrier_id, aggregate_type, aggregate_id, event_type, destination, destination_type, payload) \
         SELECT gen_random_uuid(), 'Bench', {aggregate}, 'bench', 'x', 'NOOP', '{{\"n\": 1}}' FROM generate_series(1, {ROWS})"
    ))
    .await;
    db.execute("VACUUM ANALYZE {outbox}").await;
    let dir = ScratchDir::new("bench-relay");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.instances = instances;
    config.relay.batch_size = batch;
    config.relay.max_in_flight = batch.max(64);
    config.database.max_connections = 4 + instances;
    let started = Instant::now();
    let host = TestHost::start(&config).await;
    latency::wait_until_all_published(&db).await;
    let elapsed = published_span(&db)
        .await
        .unwrap_or_else(|| started.elapsed().as_secs_f64());
    host.stop().await;
    db.pool.close().await;
    ROWS as f64 / elapsed
}

/// Seconds from the first claim to the last publish, on the database clock, so host start-up and the
/// polling of this harness do not count.
async fn published_span(db: &TestDb) -> Option<f64> {
    db.scalar::<Option<f64>>(
        "SELECT EXTRACT(EPOCH FROM max(published_at) - min(claimed_at))::float8 FROM {outbox}",
    )
    .await
}

async fn latency_under_load(rate: u64, duration: Duration) -> (f64, f64, usize) {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("bench-latency");
    dir.add_plugin("noop", plugins::NOOP);
    let mut config = host::config(&db, dir.path());
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval_ms = 1000;
    let host = TestHost::start(&config).await;
    let measured = latency::under_steady_load(&db, rate, duration).await;
    host.stop().await;
    measured
}
