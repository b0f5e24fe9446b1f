//! Lease recovery (`repository/lease.rs`): rows claimed too long ago go back to PENDING, and the
//! node that lost them can no longer complete them.

use super::{NODE, OTHER, all, claimed_row};
use outbox_host::repository::{Claims, Mark};
use outbox_tests::db::{TestDb, entry};
use std::time::Duration;

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
