//! Retention (`repository/cleanup.rs`): old finished rows are deleted in bounded batches, rows still
//! in flight never.

use outbox_tests::db::{TestDb, entry};

async fn rows_in_state(db: &TestDb, state: &str, count: usize, age_column: &str, age: &str) {
    for _ in 0..count {
        let id = db.publish(entry("A", "x")).await;
        db.execute(&format!(
            "UPDATE {{outbox}} SET state = '{state}', {age_column} = NOW() - INTERVAL '{age}' WHERE id = {id}"
        ))
        .await;
    }
}

#[tokio::test]
async fn cleanup_published_deletes_only_rows_past_retention_in_batches() {
    let db = TestDb::new().await;
    rows_in_state(&db, "PUBLISHED", 25, "published_at", "8 days").await;
    rows_in_state(&db, "PUBLISHED", 3, "published_at", "6 days").await;
    rows_in_state(&db, "DEAD_LETTER", 2, "updated_at", "60 days").await;
    let report = db.repository().cleanup_published(7, 10).await.unwrap();
    assert_eq!((report.deleted, report.batches), (25, 3));
    assert_eq!(db.count("PUBLISHED").await, 3);
    assert_eq!(db.count("DEAD_LETTER").await, 2);
}

#[tokio::test]
async fn cleanup_dead_letter_deletes_only_rows_past_retention_in_batches() {
    let db = TestDb::new().await;
    rows_in_state(&db, "DEAD_LETTER", 12, "updated_at", "31 days").await;
    rows_in_state(&db, "DEAD_LETTER", 2, "updated_at", "29 days").await;
    rows_in_state(&db, "PUBLISHED", 2, "published_at", "90 days").await;
    let report = db.repository().cleanup_dead_letter(30, 5).await.unwrap();
    assert_eq!((report.deleted, report.batches), (12, 3));
    assert_eq!(db.count("DEAD_LETTER").await, 2);
    assert_eq!(db.count("PUBLISHED").await, 2);
}

#[tokio::test]
async fn cleanup_inbox_deletes_only_records_past_retention_in_batches() {
    let db = TestDb::new().await;
    db.execute(
        "INSERT INTO {inbox} (message_id, source, processed_at) \
         SELECT 'old-' || i, 'src', NOW() - INTERVAL '31 days' FROM generate_series(1, 7) i",
    )
    .await;
    db.execute("INSERT INTO {inbox} (message_id, source) VALUES ('new', 'src')")
        .await;
    let report = db.repository().cleanup_inbox(30, 3).await.unwrap();
    assert_eq!((report.deleted, report.batches), (7, 3));
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM {inbox}").await, 1);
}

#[tokio::test]
async fn cleanup_never_touches_pending_or_processing_rows() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x")).await;
    db.execute("UPDATE {outbox} SET created_at = NOW() - INTERVAL '400 days', updated_at = NOW() - INTERVAL '400 days'").await;
    let repo = db.repository();
    assert_eq!(repo.cleanup_published(0, 10).await.unwrap().deleted, 0);
    assert_eq!(repo.cleanup_dead_letter(0, 10).await.unwrap().deleted, 0);
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM {outbox}").await, 1);
}
