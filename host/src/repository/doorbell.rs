//! The doorbell lock of migration 0003: while an idle relay holds it, or waits for it, every
//! transaction that inserts outbox rows notifies at commit; while no relay does, inserts notify
//! no one. It is a session advisory lock, so it lives on a connection of its own, never one of the
//! pool's, and a relay that dies releases it with its connection.

use super::{OutboxRepository, RepositoryError};
use sqlx::{Connection, PgConnection};

/// The first half of the doorbell's advisory lock key ("obdr"); the second is `hashtext` of the
/// schema. Migration 0003 writes the same key into the trigger.
pub const DOORBELL_LOCK_CLASS: i32 = 0x6f62_6472;

/// The second half of the key: the configured schema, or the one unqualified names resolve to.
const KEY_SCHEMA: &str = "hashtext(coalesce($1, current_schema()))";

/// A connection that arms and disarms the doorbell.
pub struct DoorbellLock {
    connection: PgConnection,
    schema: Option<String>,
    backend_pid: i32,
}

impl OutboxRepository {
    /// Opens a doorbell connection, named `application_name` so operators can tell it apart.
    pub async fn doorbell_lock(
        &self,
        application_name: &str,
    ) -> Result<DoorbellLock, RepositoryError> {
        let options = self.own_connection(application_name);
        let mut connection = PgConnection::connect_with(&options).await?;
        let backend_pid = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut connection)
            .await?;
        Ok(DoorbellLock {
            connection,
            schema: self
                .tables()
                .schema()
                .map(|schema| schema.as_str().to_owned()),
            backend_pid,
        })
    }

    /// Cancels the lock request of the doorbell connection `backend_pid` (see
    /// [`DoorbellLock::arm`]), from one of the pool's connections. Harmless if it waits for nothing.
    pub async fn cancel_doorbell_wait(&self, backend_pid: i32) -> Result<(), RepositoryError> {
        sqlx::query("SELECT pg_cancel_backend($1)")
            .bind(backend_pid)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

impl DoorbellLock {
    /// The server process of this connection, for [`OutboxRepository::cancel_doorbell_wait`].
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Takes the doorbell lock, waiting for it as long as it takes: for the transactions that
    /// inserted before the request (they hold the lock shared until they end), or for another idle
    /// relay that holds it. Inserts notify from the moment the request is made, and when this
    /// returns every row committed before is visible. Returns early with an error only if the wait
    /// is cancelled ([`OutboxRepository::cancel_doorbell_wait`]) or the connection fails.
    pub async fn arm(&mut self) -> Result<(), RepositoryError> {
        self.call("pg_advisory_lock").await
    }

    /// Releases the lock: inserts stop notifying on this relay's behalf.
    pub async fn disarm(&mut self) -> Result<(), RepositoryError> {
        self.call("pg_advisory_unlock").await
    }

    /// Calls an advisory lock `function` with the doorbell's key.
    async fn call(&mut self, function: &str) -> Result<(), RepositoryError> {
        sqlx::query(&format!(
            "SELECT {function}({DOORBELL_LOCK_CLASS}, {KEY_SCHEMA})"
        ))
        .bind(&self.schema)
        .execute(&mut self.connection)
        .await?;
        Ok(())
    }

    /// Fails if the connection is lost (and with it the lock).
    pub async fn check(&mut self) -> Result<(), RepositoryError> {
        self.connection.ping().await?;
        Ok(())
    }

    /// Closes the connection, which releases the lock if it is held.
    pub async fn close(self) {
        let _ = self.connection.close().await;
    }
}
