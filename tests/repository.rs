//! The store's rules on real PostgreSQL: what a claim takes, what the marks answer, lease recovery and
//! retention. Each test runs in a schema of its own.

use chrono::{Duration as Delta, Utc};
use outbox_host::repository::{
    ClaimScope, ClaimScopeError, ClaimScopeFailure, ClaimScopes, Claims, MAX_LAST_ERROR_CHARS,
    Mark, RepositoryError, TurnCommit,
};
use outbox_tests::db::{TestDb, entry};
use std::collections::HashSet;
use std::time::Duration;

const NODE: &str = "node-a-0";
const OTHER: &str = "node-b-0";

fn all(types: &[&str]) -> ClaimScopes {
    types.iter().fold(ClaimScopes::new(), |scopes, t| {
        scopes.with(*t, ClaimScope::All)
    })
}

fn destinations(destination_type: &str, targets: &[&str]) -> ClaimScopes {
    let targets = targets.iter().map(|t| t.to_string()).collect();
    ClaimScopes::new().with(destination_type, ClaimScope::Destinations(targets))
}

fn ids(records: &[outbox_host::repository::OutboxRecord]) -> Vec<i64> {
    records.iter().map(|r| r.id).collect()
}

/// Why `scopes` refuses the scope of `destination_type`.
fn scope_failure(scopes: &ClaimScopes, destination_type: &str) -> ClaimScopeFailure {
    let (_, scope) = scopes
        .iter()
        .find(|(t, _)| *t == destination_type)
        .expect("the type has a scope");
    scope.check().expect_err("the scope is refused")
}

// --- claim scopes ---------------------------------------------------------------------------------

#[tokio::test]
async fn all_scope_claims_every_row_of_its_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    let b = db.publish(entry("A", "y")).await;
    db.publish(entry("B", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a, b]);
}

#[tokio::test]
async fn destinations_scope_claims_only_listed_destinations() {
    let db = TestDb::new().await;
    let listed = db.publish(entry("A", "x")).await;
    db.publish(entry("A", "y")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &destinations("A", &["x"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![listed]);
}

#[tokio::test]
async fn empty_destinations_scope_claims_nothing_of_its_type() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x")).await;
    let other = db.publish(entry("B", "x")).await;
    let scopes = destinations("A", &[]).with("B", ClaimScope::All);
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![other]);
}

#[tokio::test]
async fn no_scopes_claim_nothing() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &ClaimScopes::new())
        .await
        .unwrap();
    assert!(claimed.is_empty());
}

#[tokio::test]
async fn only_empty_destination_scopes_claim_nothing() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x")).await;
    let scopes = destinations("A", &[]).with("B", ClaimScope::Destinations(vec![]));
    assert!(
        db.repository()
            .claim_batch(10, NODE, &scopes)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_blank_target_fails_closed_for_its_own_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    db.publish(entry("B", "ok")).await;
    let scopes = destinations("B", &["ok", "  "]).with("A", ClaimScope::All);
    assert_eq!(scope_failure(&scopes, "B"), ClaimScopeFailure::BlankElement);
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a]);
    assert_eq!(db.count("PENDING").await, 1);
}

#[tokio::test]
async fn a_target_over_255_characters_fails_closed_for_its_own_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    let long = "t".repeat(256);
    db.publish(entry("B", "t")).await;
    let scopes = destinations("B", &["t", &long]).with("A", ClaimScope::All);
    assert_eq!(
        scope_failure(&scopes, "B"),
        ClaimScopeFailure::ElementTooLong
    );
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a]);
    assert_eq!(db.count("PENDING").await, 1);
}

#[tokio::test]
async fn a_target_with_a_nul_byte_fails_closed_for_its_own_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    db.publish(entry("B", "ok")).await;
    let scopes = destinations("B", &["ok", "bad\0target"]).with("A", ClaimScope::All);
    assert_eq!(
        scope_failure(&scopes, "B"),
        ClaimScopeFailure::ControlCharacter
    );
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a]);
    assert_eq!(db.count("PENDING").await, 1);
}

#[tokio::test]
async fn a_target_of_exactly_255_characters_is_accepted() {
    let db = TestDb::new().await;
    let long = "t".repeat(255);
    let id = db.publish(entry("A", &long)).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &destinations("A", &[&long]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![id]);
}

#[tokio::test]
async fn more_than_10000_targets_fail_closed_for_their_own_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    db.publish(entry("B", "t1")).await;
    let targets: Vec<String> = (0..10_001).map(|i| format!("t{i}")).collect();
    let scopes = ClaimScopes::new()
        .with("B", ClaimScope::Destinations(targets))
        .with("A", ClaimScope::All);
    assert_eq!(
        scope_failure(&scopes, "B"),
        ClaimScopeFailure::TooManyTargets
    );
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a]);
}

#[tokio::test]
async fn exactly_10000_targets_are_accepted() {
    let db = TestDb::new().await;
    let id = db.publish(entry("A", "t9999")).await;
    let targets: Vec<String> = (0..10_000).map(|i| format!("t{i}")).collect();
    let scopes = ClaimScopes::new().with("A", ClaimScope::Destinations(targets));
    assert_eq!(
        ids(&db
            .repository()
            .claim_batch(10, NODE, &scopes)
            .await
            .unwrap()),
        vec![id]
    );
}

#[tokio::test]
async fn an_unavailable_scope_fails_closed_for_its_own_type_only() {
    let db = TestDb::new().await;
    let a = db.publish(entry("A", "x")).await;
    db.publish(entry("B", "x")).await;
    let scopes = all(&["A"]).with("B", ClaimScope::Unavailable);
    assert_eq!(
        scope_failure(&scopes, "B"),
        ClaimScopeFailure::SupplierFailed
    );
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &scopes)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![a]);
}

#[tokio::test]
async fn a_claim_scope_error_names_the_type_and_reason_but_never_a_target() {
    let secret = format!("tenant-secret-{}", "z".repeat(250));
    let scopes = destinations("WEBHOOK", &[&secret]);
    let error = ClaimScopeError {
        destination_type: "WEBHOOK".into(),
        reason: scope_failure(&scopes, "WEBHOOK"),
    };
    let message = error.to_string();
    assert!(message.contains("WEBHOOK"), "{message}");
    assert!(
        message.contains("element exceeds maximum length of 255"),
        "{message}"
    );
    assert!(!message.contains("tenant-secret"), "{message}");
}

#[tokio::test]
async fn target_values_are_bound_not_spliced() {
    let db = TestDb::new().await;
    let hostile = "x') OR TRUE OR ('";
    db.publish(entry("A", "y")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &destinations("A", &[hostile]))
        .await
        .unwrap();
    assert!(claimed.is_empty());
}

// --- eligibility ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_claim_marks_rows_processing_for_the_claimer() {
    let db = TestDb::new().await;
    let id = db.publish(entry("A", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(claimed[0].claimed_by.as_deref(), Some(NODE));
    assert!(claimed[0].claimed_at.is_some());
    assert_eq!(db.state_of(id).await, "PROCESSING");
    assert!(
        db.repository()
            .claim_batch(10, OTHER, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_claim_takes_at_most_the_batch_size_oldest_first() {
    let db = TestDb::new().await;
    let mut published = Vec::new();
    for _ in 0..5 {
        published.push(db.publish(entry("A", "x")).await);
    }
    let claimed = db
        .repository()
        .claim_batch(3, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), published[..3]);
}

#[tokio::test]
async fn a_row_scheduled_in_the_future_waits() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x").scheduled_at(Utc::now() + Delta::hours(1)))
        .await;
    let due = db
        .publish(entry("A", "x").scheduled_at(Utc::now() - Delta::seconds(1)))
        .await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![due]);
}

#[tokio::test]
async fn a_row_available_in_the_future_waits() {
    let db = TestDb::new().await;
    let mut later = entry("A", "x");
    later.available_at = Some(Utc::now() + Delta::hours(1));
    db.publish(later).await;
    let now = db.publish(entry("A", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![now]);
}

#[tokio::test]
async fn rows_in_other_states_are_not_claimed() {
    let db = TestDb::new().await;
    for state in ["PUBLISHED", "DEAD_LETTER", "PROCESSING"] {
        let id = db.publish(entry("A", "x")).await;
        db.execute(&format!(
            "UPDATE {{outbox}} SET state = '{state}' WHERE id = {id}"
        ))
        .await;
    }
    assert!(
        db.repository()
            .claim_batch(10, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
}

// --- head-of-line ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_younger_sibling_waits_behind_its_processing_head() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let repo = db.repository();
    assert_eq!(
        ids(&repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap()),
        vec![head]
    );
    assert!(
        repo.claim_batch(10, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(repo.mark_published(head, NODE).await.unwrap());
    assert_eq!(
        ids(&repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap()),
        vec![sibling]
    );
}

#[tokio::test]
async fn one_claim_takes_only_the_head_of_each_aggregate() {
    let db = TestDb::new().await;
    let head_1 = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let head_2 = db.publish(entry("A", "x").aggregate("Order", "2")).await;
    db.publish(entry("A", "x").aggregate("Order", "1")).await;
    db.publish(entry("A", "x").aggregate("Order", "2")).await;
    let free = db.publish(entry("A", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![head_1, head_2, free]);
}

#[tokio::test]
async fn a_dead_lettered_head_no_longer_blocks() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let repo = db.repository();
    repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap();
    assert!(
        repo.mark_dead_letter(head, NODE, "gone", Some("permanent"))
            .await
            .unwrap()
    );
    assert_eq!(
        ids(&repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap()),
        vec![sibling]
    );
}

#[tokio::test]
async fn a_head_in_retry_backoff_still_blocks() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let repo = db.repository();
    repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap();
    let an_hour = Duration::from_secs(3600);
    assert!(
        repo.mark_retry(head, NODE, 1, an_hour, "boom", None)
            .await
            .unwrap()
    );
    assert!(
        repo.claim_batch(10, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_head_this_node_cannot_deliver_blocks_its_siblings() {
    let db = TestDb::new().await;
    db.publish(entry("UNKNOWN", "x").aggregate("Order", "1"))
        .await;
    db.publish(entry("A", "x").aggregate("Order", "1")).await;
    assert!(
        db.repository()
            .claim_batch(10, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
}

// --- concurrency ----------------------------------------------------------------------------------

#[tokio::test]
async fn two_concurrent_claimers_never_get_the_same_row() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..600 {
        let e = entry("A", "x").aggregate("Order", (i % 40).to_string());
        db.outbox().publish(&mut tx, e).await.unwrap();
    }
    for _ in 0..400 {
        db.outbox().publish(&mut tx, entry("A", "x")).await.unwrap();
    }
    tx.commit().await.unwrap();
    let claimer = |name: &'static str| {
        let repo = db.repository();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let batch = repo.claim_batch(25, name, &all(&["A"])).await.unwrap();
                if batch.is_empty() {
                    let pending: i64 = sqlx::query_scalar(&format!(
                        "SELECT count(*) FROM {} WHERE state <> 'PUBLISHED'",
                        repo.tables().outbox()
                    ))
                    .fetch_one(repo.pool())
                    .await
                    .unwrap();
                    if pending == 0 {
                        return seen;
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                let marks: Vec<_> = batch.iter().map(|r| Mark::Published { id: r.id }).collect();
                assert!(
                    repo.mark_batch(name, &marks)
                        .await
                        .unwrap()
                        .into_iter()
                        .all(|owned| owned)
                );
                seen.extend(batch.into_iter().map(|r| r.id));
            }
        })
    };
    let (first, second) = tokio::join!(claimer("c1"), claimer("c2"));
    let (first, second) = (first.unwrap(), second.unwrap());
    let first_set: HashSet<i64> = first.iter().copied().collect();
    assert!(
        second.iter().all(|id| !first_set.contains(id)),
        "a row was claimed twice"
    );
    assert_eq!(first.len() + second.len(), 1000);
}

#[tokio::test]
async fn concurrent_claimers_keep_one_aggregate_in_order() {
    let db = TestDb::new().await;
    for _ in 0..30 {
        db.publish(entry("A", "x").aggregate("Order", "1")).await;
    }
    let claimer = |name: &'static str| {
        let repo = db.repository();
        tokio::spawn(async move {
            let mut order = Vec::new();
            while order.len() < 30 {
                let batch = repo.claim_batch(5, name, &all(&["A"])).await.unwrap();
                assert!(batch.len() <= 1, "two rows of one aggregate in flight");
                for row in batch {
                    order.push((row.id, chrono::Utc::now()));
                    repo.mark_published(row.id, name).await.unwrap();
                }
                let left: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM {} WHERE state <> 'PUBLISHED'",
                    repo.tables().outbox()
                ))
                .fetch_one(repo.pool())
                .await
                .unwrap();
                if left == 0 {
                    break;
                }
            }
            order
        })
    };
    let (a, b) = tokio::join!(claimer("c1"), claimer("c2"));
    let mut all_claims = a.unwrap();
    all_claims.extend(b.unwrap());
    all_claims.sort_by_key(|(_, at)| *at);
    let order: Vec<i64> = all_claims.iter().map(|(id, _)| *id).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(
        order, sorted,
        "one aggregate's rows were claimed out of id order"
    );
}

// --- marks ----------------------------------------------------------------------------------------

async fn claimed_row(db: &TestDb) -> i64 {
    let id = db.publish(entry("A", "x")).await;
    db.repository()
        .claim_batch(1, NODE, &all(&["A"]))
        .await
        .unwrap();
    id
}

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
async fn mark_and_claim_claims_the_next_row_of_a_just_finished_aggregate() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let repo = db.repository();
    repo.claim_batch(10, NODE, &all(&["A"])).await.unwrap();
    let cycle = repo
        .mark_and_claim(
            NODE,
            &[Mark::Published { id: head }],
            Claims::OfOwner,
            10,
            &all(&["A"]),
        )
        .await
        .unwrap();
    assert_eq!(cycle.owned, vec![true]);
    assert_eq!(ids(&cycle.claimed), vec![sibling]);
}

#[tokio::test]
async fn mark_and_claim_records_marks_and_claims_other_types_when_a_claim_scope_fails() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    let a = db.publish(entry("A", "x")).await;
    db.publish(entry("B", "x")).await;
    let scopes = all(&["A"]).with("B", ClaimScope::Unavailable);
    let cycle = db
        .repository()
        .mark_and_claim(
            NODE,
            &[Mark::Published { id }],
            Claims::OfOwner,
            10,
            &scopes,
        )
        .await
        .unwrap();
    assert_eq!(cycle.owned, vec![true]);
    assert_eq!(ids(&cycle.claimed), vec![a]);
    assert_eq!(db.state_of(id).await, "PUBLISHED");
    assert_eq!(db.count("PENDING").await, 1);
}

/// `synchronous_commit` as a turn of `mark_and_claim` saw it.
async fn synchronous_commit_in_a_turn(turn_commit: TurnCommit) -> String {
    let db = TestDb::new().await;
    db.note_synchronous_commit_of_marks().await;
    let id = claimed_row(&db).await;
    let cycle = db
        .repository()
        .with_turn_commit(turn_commit)
        .mark_and_claim(
            NODE,
            &[Mark::Published { id }],
            Claims::OfOwner,
            10,
            &all(&["A"]),
        )
        .await
        .unwrap();
    assert_eq!(cycle.owned, vec![true]);
    db.synchronous_commit_of_marks().await.remove(0)
}

#[tokio::test]
async fn an_asynchronous_turn_commits_without_waiting_for_the_disk() {
    assert_eq!(
        synchronous_commit_in_a_turn(TurnCommit::Asynchronous).await,
        "off"
    );
}

#[tokio::test]
async fn a_durable_turn_commits_as_the_server_says() {
    assert_eq!(
        synchronous_commit_in_a_turn(TurnCommit::Durable).await,
        "on"
    );
}

// --- lease recovery -------------------------------------------------------------------------------

#[tokio::test]
async fn reclaim_stale_takes_only_rows_past_the_lease_and_keeps_their_attempt() {
    let db = TestDb::new().await;
    let stale = db.publish(entry("A", "x")).await;
    let fresh = db.publish(entry("A", "x")).await;
    db.repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    db.execute(&format!(
        "UPDATE {{outbox}} SET claimed_at = NOW() - INTERVAL '10 minutes', attempt = 3 WHERE id = {stale}"
    ))
    .await;
    let reclaimed = db
        .repository()
        .reclaim_stale(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(reclaimed, 1);
    assert_eq!(db.state_of(stale).await, "PENDING");
    assert_eq!(db.state_of(fresh).await, "PROCESSING");
    assert_eq!(
        db.repository().find(stale).await.unwrap().unwrap().attempt,
        3
    );
}

#[tokio::test]
async fn the_old_owner_cannot_complete_a_reclaimed_row() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET claimed_at = NOW() - INTERVAL '1 hour' WHERE id = {id}"
    ))
    .await;
    db.repository()
        .reclaim_stale(Duration::from_secs(60))
        .await
        .unwrap();
    db.repository()
        .claim_batch(1, OTHER, &all(&["A"]))
        .await
        .unwrap();
    assert!(!db.repository().mark_published(id, NODE).await.unwrap());
    assert!(db.repository().mark_published(id, OTHER).await.unwrap());
}

#[tokio::test]
async fn a_mark_for_an_earlier_claim_is_refused_even_when_the_same_owner_claimed_the_row_again() {
    let db = TestDb::new().await;
    let id = claimed_row(&db).await;
    let repo = db.repository();
    let first_claim = repo.find(id).await.unwrap().unwrap().claimed_at;
    db.execute(&format!(
        "UPDATE {{outbox}} SET claimed_at = NOW() - INTERVAL '1 hour' WHERE id = {id}"
    ))
    .await;
    repo.reclaim_stale(Duration::from_secs(60)).await.unwrap();
    repo.claim_batch(1, NODE, &all(&["A"])).await.unwrap();
    let second_claim = repo.find(id).await.unwrap().unwrap().claimed_at;
    assert_ne!(first_claim, second_claim);
    let published = [Mark::Published { id }];
    assert_eq!(
        repo.mark_claims(NODE, &published, Claims::At(&[first_claim]))
            .await
            .unwrap(),
        vec![false],
        "the stale call's outcome is not recorded against the new claim"
    );
    assert_eq!(db.state_of(id).await, "PROCESSING");
    assert_eq!(
        repo.mark_claims(NODE, &published, Claims::At(&[second_claim]))
            .await
            .unwrap(),
        vec![true]
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

// --- retention ------------------------------------------------------------------------------------

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
