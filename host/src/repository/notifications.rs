//! The relay's LISTEN connection: one of its own (outside the pool), named so operators can find it
//! in `pg_stat_activity`, subscribed to the channel the doorbell trigger notifies.

use super::{OutboxRepository, RepositoryError};
use sqlx::postgres::{PgListener, PgPoolOptions};

/// The channel inserting commits notify while a relay holds or waits for the doorbell (the payload
/// means nothing).
pub const CHANNEL: &str = "transactional_outbox_channel";

impl OutboxRepository {
    /// A new connection named `application_name`, listening on [`CHANNEL`].
    pub async fn listen(&self, application_name: &str) -> Result<PgListener, RepositoryError> {
        let options = self.own_connection(application_name);
        // A listener makes its connection through a pool; this one exists only to make it.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(listener)
    }
}
