//! One clock: every time a mark writes to a row is the database's. A retry or a deferral carries a
//! delay, never a time, and its row is due exactly that delay after the statement's `NOW()` (the
//! transaction's time), not after whatever the host's clock said when it decided.

use chrono::Duration as Delta;
use outbox_host::repository::{ClaimScope, ClaimScopes, Claims, Mark, OutboxRecord};
use outbox_tests::db::{TestDb, entry};
use std::time::Duration;

const NODE: &str = "node-a-0";

fn all_of_a() -> ClaimScopes {
    ClaimScopes::new().with("A", ClaimScope::All)
}

fn retry(id: i64, delay: Duration) -> Mark {
    Mark::Retry {
        id,
        new_attempt: 1,
        delay,
        last_error: "HTTP 503".into(),
        error_type: None,
    }
}

async fn row(db: &TestDb, id: i64) -> OutboxRecord {
    db.repository().find(id).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_batch_of_marks_dates_its_rows_from_the_statements_now_plus_the_delay() {
    let db = TestDb::new().await;
    let (retried, deferred, published) = (
        db.publish(entry("A", "x")).await,
        db.publish(entry("A", "x")).await,
        db.publish(entry("A", "x")).await,
    );
    let repo = db.repository();
    assert_eq!(
        repo.claim_batch(10, NODE, &all_of_a()).await.unwrap().len(),
        3
    );
    // Sub-millisecond parts too: a timestamp keeps microseconds.
    let backoff = Duration::from_micros(1_234_567);
    let deferral = Duration::from_secs(60);
    let marks = [
        retry(retried, backoff),
        Mark::Unresolvable {
            id: deferred,
            delay: deferral,
        },
        Mark::Published { id: published },
    ];
    assert_eq!(
        repo.mark_batch(NODE, &marks).await.unwrap(),
        [true, true, true]
    );

    // `updated_at` is the same statement's NOW().
    let retried = row(&db, retried).await;
    assert_eq!(
        retried.available_at - retried.updated_at,
        Delta::microseconds(1_234_567)
    );
    let deferred = row(&db, deferred).await;
    assert_eq!(
        deferred.available_at - deferred.updated_at,
        Delta::seconds(60)
    );
    let published = row(&db, published).await;
    assert_eq!(published.published_at, Some(published.updated_at));
    assert_eq!(retried.updated_at, deferred.updated_at);
    assert_eq!(retried.updated_at, published.updated_at);
}

#[tokio::test]
async fn a_turn_dates_its_retries_from_the_time_of_its_own_transaction() {
    let db = TestDb::new().await;
    let failed = db.publish(entry("A", "x")).await;
    let next = db.publish(entry("A", "x")).await;
    let repo = db.repository();
    assert_eq!(
        repo.claim_batch(1, NODE, &all_of_a()).await.unwrap().len(),
        1
    );
    let backoff = Duration::from_millis(2_500);
    let turn = repo
        .mark_and_claim(
            NODE,
            &[retry(failed, backoff)],
            Claims::OfOwner,
            10,
            &all_of_a(),
        )
        .await
        .unwrap();
    assert_eq!(turn.owned, [true]);
    let [claimed] = turn.claimed.as_slice() else {
        panic!("the retried row is not due yet, the next one is claimed")
    };
    assert_eq!(claimed.id, next);
    // The claim sets `claimed_at` to the transaction's NOW(): the retry is due 2.5 s after it.
    let claimed_at = claimed
        .claimed_at
        .expect("a claimed row has its claim time");
    assert_eq!(
        row(&db, failed).await.available_at - claimed_at,
        Delta::milliseconds(2_500)
    );
}
