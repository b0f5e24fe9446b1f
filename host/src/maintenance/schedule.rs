//! The loop every maintenance job shares: wait for the cron schedule's next fire time, take the job's
//! advisory lock (skip the run if another node holds it), run once, log what it did.

use super::{CleanupSettings, cleanup, lease_recovery};
use crate::database::SchemaName;
use crate::metrics::{Metrics, RunResult};
use crate::repository::{OutboxRepository, RepositoryError};
use chrono::Utc;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy)]
pub enum Job {
    LeaseRecovery { lease: Duration },
    Cleanup(CleanupSettings),
}

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobReport {
    LeaseRecovery {
        reclaimed: u64,
        /// Rows dead-lettered for an invalid destination type.
        invalid: u64,
    },
    Cleanup {
        published: u64,
        dead_letter: u64,
        inbox: u64,
    },
}

impl JobReport {
    /// Rows reclaimed or deleted, by the `table` label of `outbox_maintenance_rows_total`.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        match *self {
            JobReport::LeaseRecovery { reclaimed, .. } => vec![("outbox", reclaimed)],
            JobReport::Cleanup {
                published,
                dead_letter,
                inbox,
            } => vec![
                ("outbox_published", published),
                ("outbox_dead_letter", dead_letter),
                ("inbox", inbox),
            ],
        }
    }

    /// The run reclaimed, dead-lettered or deleted nothing.
    pub fn is_empty(&self) -> bool {
        let invalid = match *self {
            JobReport::LeaseRecovery { invalid, .. } => invalid,
            JobReport::Cleanup { .. } => 0,
        };
        invalid == 0 && self.rows().iter().all(|(_, rows)| *rows == 0)
    }
}

impl Job {
    /// What a run that did nothing reports: its metric series exist at zero from the start.
    pub fn nothing_done(&self) -> JobReport {
        match self {
            Job::LeaseRecovery { .. } => JobReport::LeaseRecovery {
                reclaimed: 0,
                invalid: 0,
            },
            Job::Cleanup(_) => JobReport::Cleanup {
                published: 0,
                dead_letter: 0,
                inbox: 0,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Job::LeaseRecovery { .. } => "stale_lease_recovery",
            Job::Cleanup(_) => "cleanup",
        }
    }

    pub async fn run_once(
        &self,
        repository: &OutboxRepository,
    ) -> Result<JobReport, RepositoryError> {
        match *self {
            Job::LeaseRecovery { lease } => lease_recovery::run_once(repository, lease).await,
            Job::Cleanup(settings) => cleanup::run_once(repository, settings).await,
        }
    }

    /// The PostgreSQL advisory lock a run holds. One per job and schema: nodes of one deployment take
    /// turns, other deployments sharing the database are not held up.
    pub fn lock_key(&self, schema: Option<&SchemaName>) -> i64 {
        let schema = schema.map(|s| s.as_str()).unwrap_or("");
        let digest = Sha256::digest(format!("outbox-host maintenance/{schema}/{}", self.name()));
        i64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
    }
}

pub(super) async fn run_on_schedule(
    schedule: cron::Schedule,
    job: Job,
    repository: OutboxRepository,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    for next in schedule.upcoming(Utc) {
        let wait = (next - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match run_locked(&job, &repository).await {
            Ok(Some(report)) => {
                metrics.maintenance_run(job.name(), RunResult::Ok);
                record(&metrics, &job, &report);
                // A run that found nothing to do is the common case, every 30 s by default.
                if report.is_empty() {
                    tracing::debug!(job = job.name(), ?report, "maintenance run finished");
                } else {
                    tracing::info!(job = job.name(), ?report, "maintenance run finished");
                }
            }
            Ok(None) => {
                metrics.maintenance_run(job.name(), RunResult::Skipped);
                tracing::debug!(
                    job = job.name(),
                    "another node holds the maintenance lock; run skipped"
                );
            }
            Err(error) => {
                metrics.maintenance_run(job.name(), RunResult::Failed);
                tracing::warn!(job = job.name(), %error, "maintenance run failed; the next run tries again");
            }
        }
    }
}

/// Runs the job while holding its session advisory lock, or answers `None` if another node holds it.
async fn run_locked(
    job: &Job,
    repository: &OutboxRepository,
) -> Result<Option<JobReport>, RepositoryError> {
    let key = job.lock_key(repository.tables().schema());
    let Some(lock) = repository.try_maintenance_lock(key).await? else {
        return Ok(None);
    };
    let result = job.run_once(repository).await;
    lock.release().await;
    result.map(Some)
}

pub(super) fn record(metrics: &Metrics, job: &Job, report: &JobReport) {
    for (table, rows) in report.rows() {
        metrics.maintenance_rows(job.name(), table, rows);
    }
    if let JobReport::LeaseRecovery { invalid, .. } = *report {
        metrics.dead_lettered_invalid(invalid);
    }
}
