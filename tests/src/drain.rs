//! Drain rates for the benchmarks: rows PUBLISHED in the database, from the first claim to the last
//! publish on the database clock, so host start-up, the harness's polling and any mark the
//! database refused do not count.

use crate::db::TestDb;

/// Inserts `rows` PENDING NOOP rows in one statement, each in one of `aggregates` aggregates picked
/// at random (none when `None`), then refreshes statistics as a settled table would have them.
pub async fn fill(db: &TestDb, rows: u64, aggregates: Option<u32>) {
    let aggregate = aggregates.map_or("NULL".to_owned(), |n| {
        format!("'agg-' || floor(random() * {n})::int")
    });
    db.execute(&format!(
        "INSERT INTO {{outbox}} (carrier_id, aggregate_type, aggregate_id, event_type, destination, \
                                 destination_type, payload) \
         SELECT gen_random_uuid(), 'Bench', {aggregate}, 'bench', 'x', 'NOOP', '{{\"n\": 1}}' \
         FROM generate_series(1, {rows})"
    ))
    .await;
    db.execute("VACUUM ANALYZE {outbox}").await;
}

/// Rows PUBLISHED per second from the first claim to the last publish (database clock).
pub async fn published_rate(db: &TestDb) -> f64 {
    let (published, seconds): (i64, Option<f64>) = sqlx::query_as(&format!(
        "SELECT count(*) FILTER (WHERE state = 'PUBLISHED'), \
                EXTRACT(EPOCH FROM max(published_at) - min(claimed_at))::float8 \
         FROM {}",
        db.tables.outbox()
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let seconds = seconds.expect("rows were claimed and published");
    published as f64 / seconds
}
