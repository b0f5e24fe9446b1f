//! Publishing: an outbox row written in the caller's transaction.

use super::{InvalidEntry, OutboxEntry, PersistenceError};
use crate::database::Tables;
use crate::repository::{Statements, insert_outbox};
use sqlx::PgConnection;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("outbox entry refused: {0}")]
    Invalid(#[from] InvalidEntry),
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
}

/// Writes outbox rows into the configured schema. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Outbox {
    sql: Arc<Statements>,
}

impl Outbox {
    pub fn new(tables: Tables) -> Self {
        Outbox {
            sql: Arc::new(Statements::new(tables)),
        }
    }

    /// Validates the entry, gives it a fresh UUIDv7 carrier id and inserts it on `tx`; returns the
    /// row's id. The relay sees the row only once `tx` commits, and never if it rolls back.
    pub async fn publish(
        &self,
        tx: &mut PgConnection,
        entry: OutboxEntry,
    ) -> Result<i64, PublishError> {
        entry.validate()?;
        let carrier_id = uuid::Uuid::now_v7();
        Ok(insert_outbox(tx, &self.sql, &entry, carrier_id)
            .await
            .map_err(PersistenceError::from)?)
    }
}
