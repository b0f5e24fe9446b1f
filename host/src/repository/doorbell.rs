//! The doorbells idle relays arm so that inserting transactions notify them (migration 0002): one
//! row per relay loop, so one loop disarming never silences another that waits.

use super::{OutboxRepository, RepositoryError};
use std::time::Duration;

impl OutboxRepository {
    /// Arms `relay`'s doorbell until `lease` from now: until then, every commit that inserted outbox
    /// rows notifies the channel. A relay that dies armed stops costing those notifications once the
    /// lease ends.
    pub async fn arm_doorbell(&self, relay: &str, lease: Duration) -> Result<(), RepositoryError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        self.change_doorbell(&self.sql.arm_doorbell, relay, Some(lease_ms))
            .await
    }

    /// Disarms `relay`'s doorbell: commits stop notifying on its behalf.
    pub async fn disarm_doorbell(&self, relay: &str) -> Result<(), RepositoryError> {
        self.change_doorbell(&self.sql.disarm_doorbell, relay, None)
            .await
    }

    /// A doorbell change commits without waiting for the disk: losing one in a crash only means the
    /// relay waits for its poll until it arms again.
    async fn change_doorbell(
        &self,
        sql: &str,
        relay: &str,
        lease_ms: Option<i64>,
    ) -> Result<(), RepositoryError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
        let mut query = sqlx::query(sql).bind(relay);
        if let Some(lease_ms) = lease_ms {
            query = query.bind(lease_ms);
        }
        query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}
