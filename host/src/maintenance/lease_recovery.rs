//! Stale-lease recovery: rows a node claimed and never finished go back to PENDING.

use super::JobReport;
use crate::repository::{OutboxRepository, RepositoryError};
use std::time::Duration;

pub(super) async fn run_once(
    repository: &OutboxRepository,
    lease: Duration,
) -> Result<JobReport, RepositoryError> {
    let reclaimed = repository.reclaim_stale(lease).await?;
    Ok(JobReport::LeaseRecovery { reclaimed })
}
