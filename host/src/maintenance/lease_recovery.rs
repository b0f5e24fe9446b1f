//! Stale-lease recovery: rows a node claimed and never finished go back to PENDING; rows whose
//! destination type is invalid, which no node can ever claim, are dead-lettered.

use super::JobReport;
use crate::repository::{OutboxRepository, RepositoryError};
use std::time::Duration;

pub(super) async fn run_once(
    repository: &OutboxRepository,
    lease: Duration,
) -> Result<JobReport, RepositoryError> {
    let reclaimed = repository.reclaim_stale(lease).await?;
    let invalid = repository.dead_letter_invalid_destination_types().await?;
    for entry_id in &invalid {
        tracing::warn!(
            entry_id,
            "dead-lettered a row whose destination type is invalid (must match ^[A-Za-z0-9_-]{{1,32}}$)"
        );
    }
    Ok(JobReport::LeaseRecovery {
        reclaimed,
        invalid: invalid.len() as u64,
    })
}
