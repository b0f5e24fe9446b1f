//! The application API on real PostgreSQL: publish inside the caller's transaction with the header
//! rules, and process-once deduplication.

use outbox_host::api::{InboxResult, InvalidEntry, OutboxEntry, PersistenceError, PublishError};
use outbox_tests::db::{TestDb, entry};
use sqlx::PgConnection;
use std::sync::atomic::{AtomicU32, Ordering};

async fn outbox_count(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM {outbox}").await
}

async fn publish_refused(db: &TestDb, entry: OutboxEntry) -> InvalidEntry {
    let mut tx = db.pool.begin().await.unwrap();
    let error = db.outbox().publish(&mut tx, entry).await.unwrap_err();
    tx.commit().await.unwrap();
    match error {
        PublishError::Invalid(invalid) => invalid,
        other => panic!("expected a refusal, got {other}"),
    }
}

// --- publish --------------------------------------------------------------------------------------

#[tokio::test]
async fn publish_commits_with_the_callers_transaction() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let id = db
        .outbox()
        .publish(&mut tx, entry("A", "x").aggregate("Order", "7"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.destination_type, "A");
    assert_eq!(row.aggregate_id.as_deref(), Some("7"));
    assert_eq!(row.attempt, 0);
    assert_eq!(row.max_attempts, 20);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(row.payload.as_deref().unwrap()).unwrap(),
        serde_json::json!({"n": 1})
    );
}

#[tokio::test]
async fn publish_rolls_back_with_the_callers_transaction() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox().publish(&mut tx, entry("A", "x")).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(outbox_count(&db).await, 0);
}

#[tokio::test]
async fn publish_gives_each_row_a_fresh_uuid_v7_carrier_id() {
    let db = TestDb::new().await;
    let first = db
        .repository()
        .find(db.publish(entry("A", "x")).await)
        .await
        .unwrap()
        .unwrap();
    let second = db
        .repository()
        .find(db.publish(entry("A", "x")).await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.carrier_id.get_version_num(), 7);
    assert_ne!(first.carrier_id, second.carrier_id);
}

#[tokio::test]
async fn publish_stores_headers_as_one_object_and_context_in_metadata() {
    let db = TestDb::new().await;
    let e = entry("A", "x")
        .header("traceparent", "00-abc")
        .header("tenant", "t1")
        .context(serde_json::json!({"locale": "fr"}));
    let row = db
        .repository()
        .find(db.publish(e).await)
        .await
        .unwrap()
        .unwrap();
    let headers: serde_json::Value = serde_json::from_str(row.headers.as_deref().unwrap()).unwrap();
    assert_eq!(
        headers,
        serde_json::json!({"tenant": "t1", "traceparent": "00-abc"})
    );
    let metadata: serde_json::Value = serde_json::from_str(&row.metadata).unwrap();
    assert_eq!(metadata, serde_json::json!({"context": {"locale": "fr"}}));
}

#[tokio::test]
async fn a_malformed_destination_type_is_refused_and_nothing_inserted() {
    let db = TestDb::new().await;
    for bad in ["", "has space", "dotted.type", &"X".repeat(33)] {
        let refused = publish_refused(&db, entry(bad, "x")).await;
        assert!(
            matches!(refused, InvalidEntry::DestinationType(_)),
            "{bad:?}"
        );
    }
    assert_eq!(outbox_count(&db).await, 0);
}

#[tokio::test]
async fn a_blank_event_type_or_destination_is_refused() {
    let db = TestDb::new().await;
    let blank_event = OutboxEntry::new(" ", "A", "x", serde_json::json!({}));
    assert_eq!(
        publish_refused(&db, blank_event).await,
        InvalidEntry::Blank {
            field: "event_type"
        }
    );
    assert_eq!(
        publish_refused(&db, entry("A", "")).await,
        InvalidEntry::Blank {
            field: "destination"
        }
    );
    assert_eq!(outbox_count(&db).await, 0);
}

#[tokio::test]
async fn a_column_longer_than_255_characters_is_refused_by_name() {
    let db = TestDb::new().await;
    let long = entry("A", "x").aggregate("Order", "k".repeat(256));
    assert_eq!(
        publish_refused(&db, long).await,
        InvalidEntry::TooLong {
            field: "aggregate_id"
        }
    );
}

#[tokio::test]
async fn zero_max_attempts_is_refused() {
    let db = TestDb::new().await;
    assert_eq!(
        publish_refused(&db, entry("A", "x").max_attempts(0)).await,
        InvalidEntry::MaxAttempts
    );
}

// --- headers --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_reserved_header_is_refused_naming_the_key_but_not_the_value() {
    let db = TestDb::new().await;
    let refused = publish_refused(
        &db,
        entry("A", "x").header("outbox-attempt", "top-secret-value"),
    )
    .await;
    let message = refused.to_string();
    assert!(message.contains("outbox-attempt"), "{message}");
    assert!(!message.contains("top-secret-value"), "{message}");
    assert_eq!(outbox_count(&db).await, 0);
}

#[tokio::test]
async fn the_reserved_prefix_matches_in_any_case() {
    let db = TestDb::new().await;
    let refused = publish_refused(&db, entry("A", "x").header("Outbox-Id", "v")).await;
    assert!(matches!(refused, InvalidEntry::ReservedHeader { .. }));
}

#[tokio::test]
async fn a_reserved_key_in_the_message_has_control_characters_replaced_and_is_cut_to_128() {
    let db = TestDb::new().await;
    let key = format!("outbox-\n\u{1b}[31m{}", "k".repeat(300));
    let InvalidEntry::ReservedHeader { key: shown } =
        publish_refused(&db, entry("A", "x").header(key, "v")).await
    else {
        panic!("expected a reserved-header refusal");
    };
    assert_eq!(shown.chars().count(), 128);
    assert!(shown.starts_with("outbox-??[31m"), "{shown}");
    assert!(!shown.chars().any(char::is_control));
}

#[tokio::test]
async fn a_header_merely_containing_outbox_is_accepted() {
    let db = TestDb::new().await;
    db.publish(
        entry("A", "x")
            .header("x-outbox-trace", "v")
            .header("outbox", "v"),
    )
    .await;
    assert_eq!(outbox_count(&db).await, 1);
}

#[tokio::test]
async fn an_empty_header_key_is_refused() {
    let db = TestDb::new().await;
    assert_eq!(
        publish_refused(&db, entry("A", "x").header("", "v")).await,
        InvalidEntry::EmptyHeaderKey
    );
}

#[tokio::test]
async fn a_nul_in_a_header_is_refused_naming_the_key_only() {
    let db = TestDb::new().await;
    let refused = publish_refused(&db, entry("A", "x").header("k", "secret\0value")).await;
    assert_eq!(refused, InvalidEntry::NulInHeader { key: "k".into() });
    assert!(!refused.to_string().contains("secret"));
}

#[tokio::test]
async fn an_entrys_debug_form_never_shows_payload_or_header_values() {
    let shown = format!("{:?}", entry("A", "x").header("auth", "s3cr3t"));
    assert!(
        shown.contains("auth") && !shown.contains("s3cr3t") && !shown.contains("\"n\""),
        "{shown}"
    );
}

// --- process once ---------------------------------------------------------------------------------

#[derive(Debug)]
enum AppError {
    Business(&'static str),
    Store(PersistenceError),
}

impl From<PersistenceError> for AppError {
    fn from(error: PersistenceError) -> Self {
        AppError::Store(error)
    }
}

#[tokio::test]
async fn a_new_message_runs_its_work_and_returns_its_value() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let result = db
        .inbox()
        .process_once(&mut tx, "m-1", "payments", async |_: &mut PgConnection| {
            Ok::<_, AppError>(42)
        })
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(result, InboxResult::Processed(42));
}

#[tokio::test]
async fn a_duplicate_message_runs_its_work_once() {
    let db = TestDb::new().await;
    let runs = AtomicU32::new(0);
    for expected in [InboxResult::Processed(()), InboxResult::Duplicate] {
        let mut tx = db.pool.begin().await.unwrap();
        let result = db
            .inbox()
            .process_once(&mut tx, "m-1", "payments", async |_: &mut PgConnection| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, AppError>(())
            })
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(result, expected);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_same_message_id_from_another_source_is_new() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    for source in ["payments", "orders"] {
        let result = db
            .inbox()
            .process_once(&mut tx, "m-1", source, async |_: &mut PgConnection| {
                Ok::<_, AppError>(())
            })
            .await;
        assert_eq!(result.unwrap(), InboxResult::Processed(()));
    }
}

#[tokio::test]
async fn the_work_writes_in_the_same_transaction() {
    let db = TestDb::new().await;
    let outbox = db.outbox();
    let mut tx = db.pool.begin().await.unwrap();
    db.inbox()
        .process_once(&mut tx, "m-1", "payments", async |tx: &mut PgConnection| {
            outbox
                .publish(tx, entry("A", "x"))
                .await
                .map_err(|_| AppError::Business("publish"))
        })
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(outbox_count(&db).await, 0);
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM {inbox}").await, 0);
}

#[tokio::test]
async fn a_business_failure_propagates_unchanged() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let result = db
        .inbox()
        .process_once(&mut tx, "m-1", "payments", async |_: &mut PgConnection| {
            Err::<(), _>(AppError::Business("card declined"))
        })
        .await;
    assert!(matches!(result, Err(AppError::Business("card declined"))));
}

#[tokio::test]
async fn a_rolled_back_message_counts_as_new_again() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let _ = db
        .inbox()
        .process_once(&mut tx, "m-1", "p", async |_: &mut PgConnection| {
            Err::<(), _>(AppError::Business("no"))
        })
        .await;
    tx.rollback().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let again = db
        .inbox()
        .process_once(&mut tx, "m-1", "p", async |_: &mut PgConnection| {
            Ok::<_, AppError>(1)
        })
        .await;
    assert_eq!(again.unwrap(), InboxResult::Processed(1));
}

#[tokio::test]
async fn a_lock_timeout_is_a_retryable_persistence_failure() {
    let db = TestDb::new().await;
    let mut holder = db.pool.begin().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let lock = format!("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", db.tables.inbox());
    sqlx::query(&lock).execute(&mut *holder).await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '50ms'")
        .execute(&mut *tx)
        .await
        .unwrap();
    let result = db
        .inbox()
        .process_once(&mut tx, "m-1", "p", async |_: &mut PgConnection| {
            Ok::<_, AppError>(())
        })
        .await;
    let Err(AppError::Store(error)) = result else {
        panic!("expected a store failure")
    };
    assert!(error.retryable(), "{error}");
    assert_eq!(error.sqlstate().as_deref(), Some("55P03"));
}

#[tokio::test]
async fn a_deadlock_is_a_retryable_persistence_failure() {
    let db = TestDb::new().await;
    let outbox = db.tables.outbox().to_owned();
    let inbox = db.tables.inbox().to_owned();
    let mut first = db.pool.begin().await.unwrap();
    let mut second = db.pool.begin().await.unwrap();
    sqlx::query(&format!("LOCK TABLE {outbox} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *first)
        .await
        .unwrap();
    sqlx::query(&format!("LOCK TABLE {inbox} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *second)
        .await
        .unwrap();
    let inbox_api = db.inbox();
    let blocked_first = async {
        inbox_api
            .process_once(&mut first, "m-1", "p", async |_: &mut PgConnection| {
                Ok::<_, AppError>(())
            })
            .await
    };
    // Each waits for the lock the other holds, in whichever order the requests arrive.
    let outbox_api = db.outbox();
    let blocked_second = outbox_api.publish(&mut second, entry("A", "x"));
    let (first_result, second_result) = tokio::join!(blocked_first, blocked_second);
    let retryable = match (first_result, second_result) {
        (Err(AppError::Store(error)), _) => {
            error.retryable() && error.sqlstate().as_deref() == Some("40P01")
        }
        (_, Err(PublishError::Persistence(error))) => {
            error.retryable() && error.sqlstate().as_deref() == Some("40P01")
        }
        _ => false,
    };
    assert!(retryable, "one side must fail with a retryable deadlock");
}

#[tokio::test]
async fn a_value_too_long_for_its_column_is_not_retryable() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let long_id = "m".repeat(300);
    let result = db
        .inbox()
        .process_once(&mut tx, &long_id, "p", async |_: &mut PgConnection| {
            Ok::<_, AppError>(())
        })
        .await;
    let Err(AppError::Store(error)) = result else {
        panic!("expected a store failure")
    };
    assert!(!error.retryable());
}
