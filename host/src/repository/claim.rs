//! Claiming rows: one short statement marks eligible PENDING rows PROCESSING for this node.

use super::claim_scope::{Bind, Eligibility, eligibility};
use super::{OutboxRecord, OutboxRepository, RelayCapabilities, RepositoryError};

impl OutboxRepository {
    /// Claims up to `batch_size` rows this node can deliver (`capabilities`), skipping rows other
    /// claimers hold, and returns them in id order. A misbehaving claim scope fails the whole cycle
    /// before any statement runs; a filter that can match nothing runs no statement at all.
    pub async fn claim_batch(
        &self,
        batch_size: u32,
        claimed_by: &str,
        capabilities: &RelayCapabilities,
    ) -> Result<Vec<OutboxRecord>, RepositoryError> {
        let Eligibility::Filter { sql: filter, binds } = eligibility(capabilities, 3)? else {
            return Ok(Vec::new());
        };
        let sql = self.sql.claim_template.replace("{eligibility}", &filter);
        let mut query =
            sqlx::query_as::<_, OutboxRecord>(&sql).bind(i64::from(batch_size)).bind(claimed_by);
        for bind in binds {
            query = match bind {
                Bind::Text(value) => query.bind(value),
                Bind::TextArray(values) => query.bind(values),
            };
        }
        let mut rows = query.fetch_all(&self.pool).await?;
        rows.sort_unstable_by_key(|row| row.id);
        Ok(rows)
    }
}
