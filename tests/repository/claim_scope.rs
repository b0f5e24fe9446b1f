//! Claim scopes (`repository/claim_scope.rs`): which rows of each destination type a claim may take,
//! and how a scope that cannot be used fails closed for its own type only.

use super::{NODE, all, ids};
use outbox_host::repository::{ClaimScope, ClaimScopeError, ClaimScopeFailure, ClaimScopes};
use outbox_tests::db::{TestDb, entry};

fn destinations(destination_type: &str, targets: &[&str]) -> ClaimScopes {
    let targets = targets.iter().map(|t| t.to_string()).collect();
    ClaimScopes::new().with(destination_type, ClaimScope::Destinations(targets))
}

/// Why `scopes` refuses the scope of `destination_type`.
fn scope_failure(scopes: &ClaimScopes, destination_type: &str) -> ClaimScopeFailure {
    let (_, scope) = scopes
        .iter()
        .find(|(t, _)| *t == destination_type)
        .expect("the type has a scope");
    scope.check().expect_err("the scope is refused")
}

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
