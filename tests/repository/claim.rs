//! Claiming (`repository/claim.rs`): which rows a claim takes, in what order, how one aggregate's
//! rows wait behind their head, what concurrent claimers get, and a relay turn that records marks and
//! claims in one transaction.

use super::{NODE, OTHER, all, claimed_row, ids};
use chrono::{Duration as Delta, Utc};
use outbox_host::repository::{ClaimScope, Claims, Mark, TurnCommit};
use outbox_tests::db::{TestDb, entry};
use std::collections::HashSet;
use std::time::Duration;

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

// --- beyond a front of blocked rows ---------------------------------------------------------------

/// Aggregate "hot": its head in flight for another claimer, then rows waiting behind it, many times
/// more than a claim of 2 reads in front, so the oldest due rows hold no head at all and the rows a
/// claim may take lie beyond them.
async fn a_hot_aggregate_in_flight(db: &TestDb) {
    db.publish(entry("A", "x").aggregate("Order", "hot")).await;
    db.repository()
        .claim_batch(1, OTHER, &all(&["A"]))
        .await
        .unwrap();
    for _ in 0..40 {
        db.publish(entry("A", "x").aggregate("Order", "hot")).await;
    }
}

#[tokio::test]
async fn heads_beyond_a_front_of_blocked_rows_are_claimed() {
    let db = TestDb::new().await;
    a_hot_aggregate_in_flight(&db).await;
    let cold_head = db.publish(entry("A", "x").aggregate("Order", "cold")).await;
    db.publish(entry("A", "x").aggregate("Order", "cold")).await;
    let free = db.publish(entry("A", "x")).await;
    let claimed = db
        .repository()
        .claim_batch(2, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![cold_head, free]);
}

#[tokio::test]
async fn beyond_a_blocked_front_a_head_not_due_still_blocks_its_aggregate() {
    let db = TestDb::new().await;
    a_hot_aggregate_in_flight(&db).await;
    let cold_head = db.publish(entry("A", "x").aggregate("Order", "cold")).await;
    db.publish(entry("A", "x").aggregate("Order", "cold")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET available_at = NOW() + INTERVAL '1 hour' WHERE id = {cold_head}"
    ))
    .await;
    assert!(
        db.repository()
            .claim_batch(2, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn beyond_a_blocked_front_only_types_this_node_can_deliver_are_claimed() {
    let db = TestDb::new().await;
    a_hot_aggregate_in_flight(&db).await;
    let cold_head = db.publish(entry("B", "x").aggregate("Order", "cold")).await;
    let free = db.publish(entry("B", "x")).await;
    let repo = db.repository();
    assert!(
        repo.claim_batch(2, NODE, &all(&["A"]))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&repo.claim_batch(2, NODE, &all(&["A", "B"])).await.unwrap()),
        vec![cold_head, free]
    );
}

/// The heads are found by stepping from one aggregate id to the next in the index's order, so ids
/// at its ends or made of odd characters must not end the walk early.
#[tokio::test]
async fn beyond_a_blocked_front_heads_are_found_whatever_their_aggregate_ids() {
    let db = TestDb::new().await;
    a_hot_aggregate_in_flight(&db).await;
    let odd_ids = [
        String::new(),
        " ".to_owned(),
        "\u{1}\t\r\n\u{7f}".to_owned(),
        "'; DROP TABLE outbox; --".to_owned(),
        "ü\u{202e}漢字".to_owned(),
        "z".repeat(255),
    ];
    let mut heads = Vec::new();
    for aggregate_id in &odd_ids {
        heads.push(
            db.publish(entry("A", "x").aggregate("Order", aggregate_id))
                .await,
        );
        db.publish(entry("A", "x").aggregate("Order", aggregate_id))
            .await;
    }
    let claimed = db
        .repository()
        .claim_batch(10, NODE, &all(&["A"]))
        .await
        .unwrap();
    assert_eq!(ids(&claimed), heads);
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
        let (repo, pool) = (db.repository(), db.pool.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let batch = repo.claim_batch(25, name, &all(&["A"])).await.unwrap();
                if batch.is_empty() {
                    let pending: i64 = sqlx::query_scalar(&format!(
                        "SELECT count(*) FROM {} WHERE state <> 'PUBLISHED'",
                        repo.tables().outbox()
                    ))
                    .fetch_one(&pool)
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
        let (repo, pool) = (db.repository(), db.pool.clone());
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
                .fetch_one(&pool)
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

// --- mark and claim: one relay turn ---------------------------------------------------------------

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

/// Ten rows of type A, more than a claim of 2 reads in front of anything published after them.
async fn a_front_of_type_a(db: &TestDb) {
    for aggregate in 0..10 {
        db.publish(entry("A", "x").aggregate("Order", aggregate.to_string()))
            .await;
    }
}

/// A and B delivered here, A's plugin busy: a turn claims B alone.
fn a_busy() -> outbox_host::repository::ClaimScopes {
    let mut scopes = all(&["A", "B"]);
    scopes.leave_out_busy(&HashSet::from(["A".to_owned()]));
    scopes
}

/// A turn claiming type B alone (A's plugin calls all taken) in front of a backlog of A: its search
/// for B's heads beyond that front finds none, so the next turns do not search again at once, and
/// a B row that arrives meanwhile is found once the quiet time is over (at least
/// `QUIET_AFTER_EMPTY_HEADS`; 20 times the search's own time when that is longer).
#[tokio::test]
async fn after_an_empty_search_for_heads_a_narrowed_turn_searches_again_only_after_a_quiet_time() {
    // A machine too loaded to publish a row within the quiet time cannot tell: try again.
    for _ in 0..5 {
        let db = TestDb::new().await;
        a_front_of_type_a(&db).await;
        let repo = db.repository();
        let turn = || async {
            repo.mark_and_claim(NODE, &[], Claims::OfOwner, 2, &a_busy())
                .await
                .unwrap()
                .claimed
        };
        assert!(turn().await.is_empty());
        let searched = std::time::Instant::now();
        let b = db.publish(entry("B", "x").aggregate("Order", "b")).await;
        let again = turn().await;
        if searched.elapsed() >= outbox_host::repository::QUIET_AFTER_EMPTY_HEADS {
            continue;
        }
        assert!(
            again.is_empty(),
            "the B row beyond the front was searched for again at once"
        );
        // The quiet time is at least QUIET_AFTER_EMPTY_HEADS, longer after a slow search (a
        // loaded machine): look until it is over, within a bound no quiet time reaches here.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            tokio::time::sleep(outbox_host::repository::QUIET_AFTER_EMPTY_HEADS).await;
            let found = turn().await;
            if !found.is_empty() {
                assert_eq!(ids(&found), vec![b]);
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the B row was never found after the quiet time"
            );
        }
    }
    panic!("no try published a row within the quiet time");
}

/// A turn that left no type out and found nothing lets its loop wait for the doorbell: the next
/// turn, woken by a B row beyond the front, must search for it at once.
#[tokio::test]
async fn a_turn_that_left_no_type_out_searches_for_heads_every_time() {
    let db = TestDb::new().await;
    a_front_of_type_a(&db).await;
    let repo = db.repository();
    let turn = || async {
        repo.mark_and_claim(NODE, &[], Claims::OfOwner, 2, &all(&["B"]))
            .await
            .unwrap()
            .claimed
    };
    assert!(turn().await.is_empty());
    let b = db.publish(entry("B", "x").aggregate("Order", "b")).await;
    assert_eq!(ids(&turn().await), vec![b]);
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

// --- the floor: where a turn's claim starts while a backlog lasts ---------------------------------

/// One relay turn of `repo` for `NODE`: records `published` and claims up to `batch` rows of `A`.
async fn turn(
    repo: &outbox_host::repository::OutboxRepository,
    published: &[i64],
    batch: u32,
) -> Vec<i64> {
    let marks: Vec<Mark> = published.iter().map(|&id| Mark::Published { id }).collect();
    let cycle = repo
        .mark_and_claim(NODE, &marks, Claims::OfOwner, batch, &all(&["A"]))
        .await
        .unwrap();
    assert!(cycle.owned.iter().all(|owned| *owned));
    ids(&cycle.claimed)
}

#[tokio::test]
async fn a_reclaimed_head_below_the_floor_still_holds_its_aggregate_back_and_is_claimed_again() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let mut free = Vec::new();
    for _ in 0..4 {
        free.push(db.publish(entry("A", "x")).await);
    }
    let repo = db.repository();
    // Full claims: the next one starts from the oldest PENDING row this one saw.
    assert_eq!(turn(&repo, &[], 2).await, vec![head, free[0]]);
    assert_eq!(turn(&repo, &[free[0]], 2).await, vec![free[1], free[2]]);
    // The head's lease ends: PENDING again, below where the next claim starts (its sibling).
    db.execute(&format!(
        "UPDATE {{outbox}} SET claimed_at = NOW() - INTERVAL '1 hour' WHERE id = {head}"
    ))
    .await;
    assert_eq!(
        repo.reclaim_stale(Duration::from_secs(60)).await.unwrap(),
        1
    );
    // From the floor the sibling is met first, and waits behind its head; the claim comes back
    // short, so the rows below the floor are claimed too: the head, never its sibling.
    assert_eq!(
        turn(&repo, &[free[1], free[2]], 2).await,
        vec![head, free[3]]
    );
    assert_eq!(db.state_of(sibling).await, "PENDING");
    assert_eq!(turn(&repo, &[head, free[3]], 2).await, vec![sibling]);
}

#[tokio::test]
async fn a_head_in_flight_holds_its_aggregate_back_while_claims_start_past_it() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let mut free = Vec::new();
    for _ in 0..6 {
        free.push(db.publish(entry("A", "x")).await);
    }
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let last = db.publish(entry("A", "x")).await;
    let repo = db.repository();
    assert_eq!(turn(&repo, &[], 2).await, vec![head, free[0]]);
    // Full claims, each starting where the last one left off: the head stays in flight, and the
    // lowest live row every probe starts from stays at it.
    assert_eq!(turn(&repo, &[free[0]], 2).await, free[1..3]);
    assert_eq!(turn(&repo, &free[1..3], 2).await, free[3..5]);
    assert_eq!(turn(&repo, &free[3..5], 2).await, vec![free[5], last]);
    assert_eq!(db.state_of(sibling).await, "PENDING");
    assert_eq!(turn(&repo, &[head, free[5], last], 2).await, vec![sibling]);
}

#[tokio::test]
async fn a_row_committed_late_with_an_older_available_at_is_claimed_below_the_floor() {
    let db = TestDb::new().await;
    let mut rows = Vec::new();
    for _ in 0..3 {
        rows.push(db.publish(entry("A", "x")).await);
    }
    let repo = db.repository();
    assert_eq!(turn(&repo, &[], 2).await, rows[..2]);
    // A transaction that began before the claims commits its row now: its available_at (the
    // transaction's NOW()) lies below where the next claim starts.
    let mut late = entry("A", "x");
    late.available_at = Some(Utc::now() - Delta::hours(1));
    let late = db.publish(late).await;
    assert_eq!(turn(&repo, &rows[..2], 2).await, vec![rows[2], late]);
}

#[tokio::test]
async fn a_row_scheduled_before_the_floor_moved_on_is_claimed_once_due() {
    let db = TestDb::new().await;
    let scheduled = db
        .publish(entry("A", "x").scheduled_at(Utc::now() + Delta::hours(1)))
        .await;
    let mut free = Vec::new();
    for _ in 0..4 {
        free.push(db.publish(entry("A", "x")).await);
    }
    let repo = db.repository();
    assert_eq!(turn(&repo, &[], 2).await, free[..2]);
    db.execute(&format!(
        "UPDATE {{outbox}} SET scheduled_at = NOW() - INTERVAL '1 second' WHERE id = {scheduled}"
    ))
    .await;
    assert_eq!(turn(&repo, &free[..2], 2).await, vec![scheduled, free[2]]);
}

#[tokio::test]
async fn a_head_retried_behind_its_siblings_available_at_is_still_delivered_first() {
    let db = TestDb::new().await;
    let head = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let sibling = db.publish(entry("A", "x").aggregate("Order", "1")).await;
    let mut free = Vec::new();
    for _ in 0..6 {
        free.push(db.publish(entry("A", "x")).await);
    }
    let repo = db.repository();
    assert_eq!(turn(&repo, &[], 2).await, vec![head, free[0]]);
    // Retried at once: due again after every row here, so the scan meets its sibling (lower
    // available_at, higher id) first; the sibling still waits for it.
    assert!(
        repo.mark_retry(head, NODE, 1, Duration::ZERO, "boom", None)
            .await
            .unwrap()
    );
    assert_eq!(turn(&repo, &[free[0]], 2).await, vec![free[1], free[2]]);
    assert_eq!(
        turn(&repo, &[free[1], free[2]], 4).await,
        vec![head, free[3], free[4], free[5]]
    );
    assert_eq!(db.state_of(sibling).await, "PENDING");
    assert_eq!(
        turn(&repo, &[head, free[3], free[4], free[5]], 4).await,
        vec![sibling]
    );
}
