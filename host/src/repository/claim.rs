//! Claiming rows: one short statement marks eligible PENDING rows PROCESSING for this node.

use super::claim_scope::{Bind, Eligibility, eligibility};
use super::marks::{Claims, record_marks};
use super::{ClaimScopes, Mark, OutboxRecord, OutboxRepository, RepositoryError, Statements};
use sqlx::PgConnection;

/// The result of [`OutboxRepository::mark_and_claim`]: the marks' owner answers, and the claim.
#[derive(Debug)]
pub struct MarkAndClaim {
    /// One answer per mark, in order: true when this node still owned the row.
    pub owned: Vec<bool>,
    /// The claimed rows in id order.
    pub claimed: Vec<OutboxRecord>,
}

impl OutboxRepository {
    /// Claims up to `batch_size` rows this node can deliver (`scopes`), skipping rows other
    /// claimers hold, and returns them in id order. A scope that fails [`ClaimScope::check`] leaves
    /// out its own destination type only; a filter that can match nothing runs no statement at all.
    ///
    /// [`ClaimScope::check`]: super::ClaimScope::check
    pub async fn claim_batch(
        &self,
        batch_size: u32,
        claimed_by: &str,
        scopes: &ClaimScopes,
    ) -> Result<Vec<OutboxRecord>, RepositoryError> {
        let Eligibility::Filter { sql, binds } = eligibility(scopes, 3) else {
            return Ok(Vec::new());
        };
        let mut conn = self.pool.acquire().await?;
        Ok(claim(&mut conn, &self.sql, &sql, binds, batch_size, claimed_by).await?)
    }

    /// Records `marks` and claims the next batch in one transaction: one commit instead of two, and
    /// the claim already sees the rows just marked, so the next row of each finished aggregate is
    /// claimable at once. If any mark is refused, nothing of the turn is recorded or claimed: the
    /// caller then records the marks on their own ([`OutboxRepository::mark_batch`]). Commits as
    /// [`OutboxRepository::with_turn_commit`] set.
    pub async fn mark_and_claim(
        &self,
        claimed_by: &str,
        marks: &[Mark],
        claims: Claims<'_>,
        batch_size: u32,
        scopes: &ClaimScopes,
    ) -> Result<MarkAndClaim, RepositoryError> {
        let filter = match eligibility(scopes, 3) {
            Eligibility::Filter { sql, binds } if batch_size > 0 => Some((sql, binds)),
            _ => None,
        };
        if filter.is_none() && marks.is_empty() {
            return Ok(MarkAndClaim {
                owned: Vec::new(),
                claimed: Vec::new(),
            });
        }
        let mut tx = self.begin(self.turn_commit).await?;
        let owned = record_marks(&mut tx, &self.sql, claimed_by, marks, claims).await?;
        let claimed = match filter {
            Some((sql, binds)) => {
                claim(&mut tx, &self.sql, &sql, binds, batch_size, claimed_by).await?
            }
            None => Vec::new(),
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
