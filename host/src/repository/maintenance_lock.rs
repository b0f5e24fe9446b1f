//! The session advisory lock a maintenance run holds, so the nodes of one deployment take turns.

use super::{OutboxRepository, RepositoryError};
use sqlx::Postgres;
use sqlx::pool::PoolConnection;

/// A held maintenance lock; [`MaintenanceLock::release`] gives it back.
pub struct MaintenanceLock {
    connection: PoolConnection<Postgres>,
    key: i64,
}

impl OutboxRepository {
    /// Takes the maintenance lock `key` without waiting: `None` when another node holds it.
    pub async fn try_maintenance_lock(
        &self,
        key: i64,
    ) -> Result<Option<MaintenanceLock>, RepositoryError> {
        let mut connection = self.pool.acquire().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut *connection)
            .await?;
        Ok(locked.then_some(MaintenanceLock { connection, key }))
    }
}

impl MaintenanceLock {
    /// Releases the lock. If that fails, the connection is closed rather than returned to the pool,
    /// where its session would keep the lock.
    pub async fn release(mut self) {
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(self.key)
            .execute(&mut *self.connection)
            .await;
        if unlocked.is_err() {
            drop(self.connection.detach());
        }
    }
}
