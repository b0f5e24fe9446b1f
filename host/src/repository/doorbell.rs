//! The doorbells idle relays arm so that inserting transactions notify them (migration 0002): one
//! row per relay loop, so one loop disarming never silences another that waits. A doorbell change
//! commits without waiting for the disk: losing one in a crash only means the relay waits for its
//! poll until it arms again.

use super::{OutboxRepository, RepositoryError, TurnCommit};
use std::time::Duration;

/// How long arming waits for the commits that looked at the doorbell before it was armed. Those are
/// past their insert and only finishing their commit; one held open longer (its constraints made
/// immediate) is not waited for, and its rows wait for the poll.
const ARMING_WAIT: &str = "500ms";

impl OutboxRepository {
    /// Arms `relay`'s doorbell until `lease` from now: until then, every commit that inserted outbox
    /// rows notifies the channel. A relay that dies armed stops costing those notifications once the
    /// lease ends.
    ///
    /// The doorbell is locked first, which waits for every commit that already looked at it (each
    /// holds its lookup's lock until it ends) and holds back those that have yet to look until it is
    /// armed. So when this returns, every row is either visible to the relay's next claim or rings.
    pub async fn arm_doorbell(&self, relay: &str, lease: Duration) -> Result<(), RepositoryError> {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let mut tx = self.begin(TurnCommit::Asynchronous).await?;
        sqlx::query(&format!("SET LOCAL lock_timeout = '{ARMING_WAIT}'"))
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql.lock_doorbell)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql.arm_doorbell)
            .bind(relay)
            .bind(lease_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Disarms `relay`'s doorbell: commits stop notifying on its behalf.
    pub async fn disarm_doorbell(&self, relay: &str) -> Result<(), RepositoryError> {
        let mut tx = self.begin(TurnCommit::Asynchronous).await?;
        sqlx::query(&self.sql.disarm_doorbell)
            .bind(relay)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
