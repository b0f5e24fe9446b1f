//! Row states are decoded once, in the repository: a state this version does not know is a typed
//! error, never a panic and never a row read with a state it does not have.

use outbox_host::repository::{OutboxState, RepositoryError, UnknownState};
use outbox_tests::db::{TestDb, entry};

#[tokio::test]
async fn a_row_in_a_state_this_version_does_not_know_is_a_typed_error() {
    let db = TestDb::new().await;
    let id = db.publish(entry("A", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'ARCHIVED' WHERE id = {id}"
    ))
    .await;
    let error = db.repository().find(id).await.unwrap_err();
    let RepositoryError::Database(sqlx::Error::ColumnDecode { index, source }) = error else {
        panic!("expected a column that failed to decode, not {error:?}")
    };
    assert!(index.contains("state"), "{index}");
    assert_eq!(
        source
            .downcast_ref::<UnknownState>()
            .map(ToString::to_string),
        Some("the row state ARCHIVED is not one this version knows".to_owned())
    );
}

#[tokio::test]
async fn rows_are_counted_by_typed_state_and_only_in_the_counted_states() {
    let db = TestDb::new().await;
    db.publish(entry("A", "x")).await;
    let published = db.publish(entry("A", "x")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PUBLISHED' WHERE id = {published}"
    ))
    .await;
    assert_eq!(
        db.repository().count_by_state().await.unwrap(),
        [(OutboxState::Pending, "A".to_owned(), 1)]
    );
}
