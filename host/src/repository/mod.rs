//! The PostgreSQL store: every statement on the outbox and inbox tables.
//!
//! Relay-side operations run on the repository's pool: [`OutboxRepository::claim_batch`] (claim.rs),
//! the owner-guarded marks (marks.rs), lease recovery (lease.rs), retention deletes (cleanup.rs),
//! the doorbell lock idle relays hold (doorbell.rs) and the LISTEN connection it rings
//! (notifications.rs), and the lock a maintenance run holds (maintenance_lock.rs). Operators list, redrive and purge dead letters (dead_letters.rs).
//! Application-side inserts run on the caller's transaction (insert.rs), through [`crate::api`].

mod claim;
mod claim_scope;
mod cleanup;
mod dead_letters;
mod doorbell;
mod insert;
mod lease;
mod maintenance_lock;
mod marks;
mod notifications;
mod record;
mod sql;

pub use claim::{FULL_SCAN_EVERY, MarkAndClaim, QUIET_AFTER_EMPTY_HEADS};
pub use claim_scope::{
    ClaimScope, ClaimScopeError, ClaimScopeFailure, ClaimScopes, MAX_TARGET_CHARS, MAX_TARGETS,
};
pub use cleanup::CleanupReport;
pub use dead_letters::{DeadLetter, DeadLetterSelection};
pub use doorbell::{DOORBELL_LOCK_CLASS, DoorbellLock};
pub(crate) use insert::{insert_inbox, insert_outbox};
pub use maintenance_lock::MaintenanceLock;
pub use marks::{
    Claims, MAX_ERROR_TYPE_CHARS, MAX_LAST_ERROR_CHARS, Mark, stored_error, stored_error_type,
};
pub use notifications::CHANNEL;
pub use record::{MAX_PAYLOAD_BYTES, OutboxRecord, OutboxState, UnknownState};
pub(crate) use sql::Statements;

use crate::database::Tables;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("a batch of marks names the claims of a different number of rows")]
    MarksWithoutClaims,
}

/// The states [`OutboxRepository::count_by_state`] counts: all but PUBLISHED, whose rows only wait
/// for retention.
pub const COUNTED_STATES: [OutboxState; 3] = [
    OutboxState::Pending,
    OutboxState::Processing,
    OutboxState::DeadLetter,
];

/// Whether the relay's own bookkeeping transactions wait for the disk at commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnCommit {
    /// `synchronous_commit` as the server sets it.
    Durable,
    /// `SET LOCAL synchronous_commit = off`: a crash of PostgreSQL may lose the last turns, whose
    /// rows are then delivered again; the host's own crash loses nothing more.
    Asynchronous,
}

/// The relay's view of the store. Cheap to clone; statements are built once for the schema.
#[derive(Clone, Debug)]
pub struct OutboxRepository {
    pool: PgPool,
    sql: Arc<Statements>,
    turn_commit: TurnCommit,
    /// Where each claimer's next claim may start scanning, and whether it may search for heads
    /// (`claim.rs`).
    hints: claim::Hints,
}

impl OutboxRepository {
    /// A repository whose relay turns commit durably; see [`OutboxRepository::with_turn_commit`].
    pub fn new(pool: PgPool, tables: Tables) -> Self {
        OutboxRepository {
            pool,
            sql: Arc::new(Statements::new(tables)),
            turn_commit: TurnCommit::Durable,
            hints: claim::Hints::default(),
        }
    }

    /// How [`OutboxRepository::mark_and_claim`] commits.
    pub fn with_turn_commit(self, turn_commit: TurnCommit) -> Self {
        OutboxRepository {
            turn_commit,
            ..self
        }
    }

    /// A transaction committing as `commit` says. The setting rides on the `BEGIN` itself (one
    /// simple query), so it costs no round trip of its own on every turn.
    async fn begin(
        &self,
        commit: TurnCommit,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        match commit {
            TurnCommit::Durable => self.pool.begin().await,
            TurnCommit::Asynchronous => {
                self.pool
                    .begin_with("BEGIN; SET LOCAL synchronous_commit = off")
                    .await
            }
        }
    }

    /// Where a connection of its own goes (the pool's database and settings), named
    /// `application_name` so operators can tell it apart in `pg_stat_activity`.
    fn own_connection(&self, application_name: &str) -> PgConnectOptions {
        self.pool
            .connect_options()
            .as_ref()
            .clone()
            .application_name(application_name)
    }

    pub fn tables(&self) -> &Tables {
        &self.sql.tables
    }

    /// Rows by (state, destination type), for the [`COUNTED_STATES`].
    pub async fn count_by_state(&self) -> Result<Vec<(OutboxState, String, i64)>, RepositoryError> {
        Ok(sqlx::query_as(&self.sql.count_by_state)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Whether the database answers a trivial statement (for readiness).
    pub async fn ping(&self) -> Result<(), RepositoryError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Per destination type, the seconds since its oldest due PENDING row became due (created, or
    /// scheduled): how late the outbox runs. Types with no due row are absent.
    pub async fn oldest_pending_age(&self) -> Result<Vec<(String, f64)>, RepositoryError> {
        Ok(sqlx::query_as(&self.sql.oldest_pending_age)
            .fetch_all(&self.pool)
            .await?)
    }

    /// One row by id, for tools and tests.
    pub async fn find(&self, id: i64) -> Result<Option<OutboxRecord>, RepositoryError> {
        Ok(sqlx::query_as(&self.sql.select_by_id)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }
}
