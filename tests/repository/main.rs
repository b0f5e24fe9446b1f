//! The store's rules on real PostgreSQL: what a claim takes, what the marks answer, lease recovery and
//! retention. Each test runs in a schema of its own.
//!
//! One module per file of `host/src/repository/` whose rules it states, all in one test binary so CI
//! links it once.

mod claim;
mod claim_scope;
mod cleanup;
mod lease;
mod marks;

use outbox_host::repository::{ClaimScope, ClaimScopes};
use outbox_tests::db::{TestDb, entry};

const NODE: &str = "node-a-0";
const OTHER: &str = "node-b-0";

fn all(types: &[&str]) -> ClaimScopes {
    types.iter().fold(ClaimScopes::new(), |scopes, t| {
        scopes.with(*t, ClaimScope::All)
    })
}

fn ids(records: &[outbox_host::repository::OutboxRecord]) -> Vec<i64> {
    records.iter().map(|r| r.id).collect()
}

/// A fresh row of type `A`, claimed by [`NODE`].
async fn claimed_row(db: &TestDb) -> i64 {
    let id = db.publish(entry("A", "x")).await;
    db.repository()
        .claim_batch(1, NODE, &all(&["A"]))
        .await
        .unwrap();
    id
}
