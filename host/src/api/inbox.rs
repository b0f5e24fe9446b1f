//! Deduplicating inbound messages: the work runs once per (message id, source).

use super::PersistenceError;
use crate::database::Tables;
use crate::repository::{Statements, insert_inbox};
use sqlx::PgConnection;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxResult<T> {
    /// A new message: the work ran and returned this.
    Processed(T),
    /// Seen before: the work did not run.
    Duplicate,
}

/// Records inbound messages in the configured schema. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Inbox {
    sql: Arc<Statements>,
}

impl Inbox {
    pub fn new(tables: Tables) -> Self {
        Inbox {
            sql: Arc::new(Statements::new(tables)),
        }
    }

    /// Records the message on `tx`, then runs `work` on the same transaction only if it is new. A
    /// failure from `work` comes back unchanged; a store failure arrives as `E::from(PersistenceError)`.
    /// If `tx` rolls back, the record goes with it and the message counts as new again.
    pub async fn process_once<T, E>(
        &self,
        tx: &mut PgConnection,
        message_id: &str,
        source: &str,
        work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
    ) -> Result<InboxResult<T>, E>
    where
        E: From<PersistenceError>,
    {
        let new = insert_inbox(tx, &self.sql, message_id, source)
            .await
            .map_err(PersistenceError::from)?;
        if !new {
            return Ok(InboxResult::Duplicate);
        }
        work(tx).await.map(InboxResult::Processed)
    }
}
