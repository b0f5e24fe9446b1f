//! Claiming rows: one short statement marks eligible PENDING rows PROCESSING for this node.

use super::claim_scope::{Bind, Eligibility, eligibility};
use super::marks::record_marks;
use super::{
    ClaimScopeError, Mark, OutboxRecord, OutboxRepository, RelayCapabilities, RepositoryError,
    Statements,
};
use sqlx::PgConnection;

/// The result of [`OutboxRepository::mark_and_claim`]: the marks' owner answers, and the claim.
#[derive(Debug)]
pub struct MarkAndClaim {
    /// One answer per mark, in order: true when this node still owned the row.
    pub owned: Vec<bool>,
    /// The claimed rows in id order, or why the cycle claimed nothing.
    pub claimed: Result<Vec<OutboxRecord>, ClaimScopeError>,
}

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
        let Eligibility::Filter { sql, binds } = eligibility(capabilities, 3)? else {
            return Ok(Vec::new());
        };
        let mut conn = self.pool.acquire().await?;
        Ok(claim(&mut conn, &self.sql, &sql, binds, batch_size, claimed_by).await?)
    }

    /// Records `marks` and claims the next batch in one transaction: one commit instead of two, and
    /// the claim already sees the rows just marked, so the next row of each finished aggregate is
    /// claimable at once. A misbehaving claim scope still lets the marks through.
    pub async fn mark_and_claim(
        &self,
        claimed_by: &str,
        marks: &[Mark],
        batch_size: u32,
        capabilities: &RelayCapabilities,
    ) -> Result<MarkAndClaim, RepositoryError> {
        let filter = eligibility(capabilities, 3);
        let claims_nothing = batch_size == 0 || matches!(filter, Ok(Eligibility::Nothing) | Err(_));
        if claims_nothing && marks.is_empty() {
            return Ok(MarkAndClaim {
                owned: Vec::new(),
                claimed: filter.map(|_| Vec::new()),
            });
        }
        let mut tx = self.pool.begin().await?;
        let owned = record_marks(&mut tx, &self.sql, claimed_by, marks).await?;
        let claimed = match filter {
            Ok(Eligibility::Filter { sql, binds }) if batch_size > 0 => {
                Ok(claim(&mut tx, &self.sql, &sql, binds, batch_size, claimed_by).await?)
            }
            Ok(_) => Ok(Vec::new()),
            Err(error) => Err(error),
        };
        tx.commit().await?;
        Ok(MarkAndClaim { owned, claimed })
    }
}

async fn claim(
    conn: &mut PgConnection,
    statements: &Statements,
    filter: &str,
    binds: Vec<Bind<'_>>,
    batch_size: u32,
    claimed_by: &str,
) -> Result<Vec<OutboxRecord>, sqlx::Error> {
    let sql = statements.claim_template.replace("{eligibility}", filter);
    let mut query = sqlx::query_as::<_, OutboxRecord>(&sql)
        .bind(i64::from(batch_size))
        .bind(claimed_by);
    for bind in binds {
        query = match bind {
            Bind::Text(value) => query.bind(value),
            Bind::TextArray(values) => query.bind(values),
        };
    }
    let mut rows = query.fetch_all(conn).await?;
    rows.sort_unstable_by_key(|row| row.id);
    Ok(rows)
}
