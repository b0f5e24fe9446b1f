//! Marks (`repository/marks.rs`): every outcome is recorded only for the node that owns the claim,
//! and the answer says whether it did.

use super::{NODE, OTHER, all, claimed_row};
use chrono::{Duration as Delta, Utc};
use outbox_host::repository::{Claims, MAX_LAST_ERROR_CHARS, Mark, RepositoryError};
use outbox_tests::db::{TestDb, entry};
use std::time::Duration;

#[tokio::test]
async fn mark_published_records_the_time_for_the_owner() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(db.repository().mark_published(id, NODE).await.unwrap());
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(row.state, outbox_host::repository::OutboxState::Published);
    assert!(row.published_at.is_some());
}

#[tokio::test]
async fn mark_published_answers_false_for_a_row_another_node_owns() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(!db.repository().mark_published(id, OTHER).await.unwrap());
    assert_eq!(db.state_of(id).await, "PROCESSING");
}

#[tokio::test]
async fn mark_retry_records_attempt_backoff_and_error_for_the_owner() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    let delay = Duration::from_secs(30);
    assert!(
        db.repository()
            .mark_retry(id, NODE, 1, delay, "HTTP 503", Some("http_5xx"))
            .await
            .unwrap()
    );
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(db.state_of(id).await, "PENDING");
    assert_eq!(row.attempt, 1);
    assert_eq!(row.available_at - row.updated_at, Delta::seconds(30));
    assert_eq!(row.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(row.error_type.as_deref(), Some("http_5xx"));
}

#[tokio::test]
async fn mark_retry_answers_false_for_a_row_another_node_owns() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(
        !db.repository()
            .mark_retry(id, OTHER, 1, Duration::ZERO, "x", None)
            .await
            .unwrap()
    );
    assert_eq!(db.state_of(id).await, "PROCESSING");
}

#[tokio::test]
async fn mark_dead_letter_records_the_error_and_counts_the_attempt() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(
        db.repository()
            .mark_dead_letter(id, NODE, "HTTP 404", Some("http_4xx"))
            .await
            .unwrap()
    );
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(db.state_of(id).await, "DEAD_LETTER");
    assert_eq!(row.attempt, 1);
    assert_eq!(row.last_error.as_deref(), Some("HTTP 404"));
    assert_eq!(row.error_type.as_deref(), Some("http_4xx"));
}

#[tokio::test]
async fn a_hostile_error_is_stored_sanitized_and_cut() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    let message = format!("bad\0byte\r\nforged line{}", "x".repeat(10_000));
    assert!(
        db.repository()
            .mark_dead_letter(id, NODE, &message, Some("evil\0type"))
            .await
            .unwrap()
    );
    let row = db.repository().find(id).await.unwrap().unwrap();
    let last_error = row.last_error.unwrap();
    assert!(
        last_error.starts_with("bad?byte??forged line"),
        "{last_error:.40}"
    );
    assert_eq!(last_error.chars().count(), MAX_LAST_ERROR_CHARS);
    assert_eq!(row.error_type.as_deref(), Some("evil_type"));
}

#[tokio::test]
async fn mark_dead_letter_answers_false_for_a_row_another_node_owns() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(
        !db.repository()
            .mark_dead_letter(id, OTHER, "x", None)
            .await
            .unwrap()
    );
    assert_eq!(db.state_of(id).await, "PROCESSING");
}

#[tokio::test]
async fn mark_unresolvable_defers_without_spending_an_attempt() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(
        db.repository()
            .mark_unresolvable(id, NODE, Duration::from_secs(60))
            .await
            .unwrap()
    );
    let row = db.repository().find(id).await.unwrap().unwrap();
    assert_eq!(db.state_of(id).await, "PENDING");
    assert_eq!(row.attempt, 0);
    assert!(row.available_at > Utc::now() + Delta::seconds(50));
}

#[tokio::test]
async fn mark_unresolvable_answers_false_for_a_row_another_node_owns() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(
        !db.repository()
            .mark_unresolvable(id, OTHER, Duration::from_secs(1))
            .await
            .unwrap()
    );
    assert_eq!(db.state_of(id).await, "PROCESSING");
}

#[tokio::test]
async fn a_mark_answers_false_for_a_row_that_is_no_longer_processing() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    assert!(db.repository().mark_published(id, NODE).await.unwrap());
    assert!(!db.repository().mark_published(id, NODE).await.unwrap());
}

#[tokio::test]
async fn a_batch_of_marks_answers_per_row() {
    let db = TestDb::new().await;
    let mine = claimed_row(&db).await;
    let theirs = db.publish(entry("A", "x")).await;
    db.repository()
        .claim_batch(1, OTHER, &all(&["A"]))
        .await
        .unwrap();
    let marks = [Mark::Published { id: mine }, Mark::Published { id: theirs }];
    assert_eq!(
        db.repository().mark_batch(NODE, &marks).await.unwrap(),
        vec![true, false]
    );
}

#[tokio::test]
async fn marks_and_claims_of_different_lengths_are_refused() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    let error = db
        .repository()
        .mark_claims(NODE, &[Mark::Published { id }], Claims::At(&[]))
        .await
        .unwrap_err();
    assert!(matches!(error, RepositoryError::MarksWithoutClaims));
    assert_eq!(db.state_of(id).await, "PROCESSING");
}
