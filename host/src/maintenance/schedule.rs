//! The loop every maintenance job shares: wait for the cron schedule's next fire time, take the job's
//! advisory lock (skip the run if another node holds it), run once, log what it did and signal it.

use super::{CleanupSettings, cleanup, lease_recovery};
use crate::database::SchemaName;
use crate::metrics::{Metrics, RunResult};
use crate::repository::{OutboxRepository, RepositoryError};
use crate::signals::{Signal, Signals};
use chrono::{DateTime, Utc};
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
    signals: Signals,
    shutdown: CancellationToken,
) {
    let mut fire_times = FireTimes::new(&schedule);
    while fire_times.next(&shutdown).await.is_some() {
        let result = run_and_report(&job, &repository, &metrics).await;
        metrics.maintenance_run(job.name(), result);
        signals.send(Signal::MaintenanceRun {
            job: job.name(),
            result,
        });
    }
}

/// A schedule's fire times as they come. Fire times that pass while a run is under way are
/// skipped, not made up. Wall time is read once and then advanced by tokio's clock, so a schedule
/// follows a paused clock in tests.
struct FireTimes<'a> {
    schedule: &'a cron::Schedule,
    wall: DateTime<Utc>,
    started: tokio::time::Instant,
}

impl<'a> FireTimes<'a> {
    fn new(schedule: &'a cron::Schedule) -> Self {
        FireTimes {
            schedule,
            wall: Utc::now(),
            started: tokio::time::Instant::now(),
        }
    }

    /// Waits for the next fire time and returns it; `None` at `shutdown` or when none is left.
    async fn next(&mut self, shutdown: &CancellationToken) -> Option<DateTime<Utc>> {
        let now =
            self.wall + chrono::Duration::from_std(self.started.elapsed()).unwrap_or_default();
        let next = self.schedule.after(&now).next()?;
        let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = shutdown.cancelled() => None,
            _ = tokio::time::sleep(wait) => Some(next),
        }
    }
}

/// One run, logged and counted in the job's row metrics; how it ended.
async fn run_and_report(job: &Job, repository: &OutboxRepository, metrics: &Metrics) -> RunResult {
    match run_locked(job, repository).await {
        Ok(Some(report)) => {
            record(metrics, job, &report);
            // A run that found nothing to do is the common case, every 30 s by default.
            if report.is_empty() {
                tracing::debug!(job = job.name(), ?report, "maintenance run finished");
            } else {
                tracing::info!(job = job.name(), ?report, "maintenance run finished");
            }
            RunResult::Ok
        }
        Ok(None) => {
            tracing::debug!(
                job = job.name(),
                "another node holds the maintenance lock; run skipped"
            );
            RunResult::Skipped
        }
        Err(error) => {
            tracing::warn!(job = job.name(), %error, "maintenance run failed; the next run tries again");
            RunResult::Failed
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;
    use std::str::FromStr;

    /// The fire times `run` was called with while `for_time` passed on tokio's (paused) clock.
    async fn fire_times(
        expression: &str,
        for_time: Duration,
        run_time: Duration,
    ) -> Vec<DateTime<Utc>> {
        let schedule = cron::Schedule::from_str(expression).unwrap();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(for_time).await;
            stop.cancel();
        });
        let mut fire_times = FireTimes::new(&schedule);
        let mut fired = Vec::new();
        while let Some(at) = fire_times.next(&shutdown).await {
            fired.push(at);
            tokio::time::sleep(run_time).await;
        }
        fired
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_runs_at_each_fire_time_of_its_schedule() {
        let fired = fire_times(
            "*/30 * * * * *",
            Duration::from_secs(10 * 60),
            Duration::ZERO,
        )
        .await;
        assert!(
            (19..=20).contains(&fired.len()),
            "{} runs in 10 minutes",
            fired.len()
        );
        assert!(
            fired
                .iter()
                .all(|at| at.second() % 30 == 0 && at.nanosecond() == 0)
        );
        assert!(
            fired
                .windows(2)
                .all(|pair| pair[1] - pair[0] == chrono::Duration::seconds(30))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fire_times_that_pass_during_a_long_run_are_skipped_not_made_up() {
        let fired = fire_times(
            "* * * * * *",
            Duration::from_secs(60),
            Duration::from_millis(3500),
        )
        .await;
        assert!(
            (14..=18).contains(&fired.len()),
            "{} runs of 3.5 s in a minute",
            fired.len()
        );
        assert!(
            fired
                .windows(2)
                .all(|pair| pair[1] - pair[0] == chrono::Duration::seconds(4))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait_for_the_next_fire_time() {
        let fired = fire_times("0 0 0 1 1 * 2099", Duration::from_secs(5), Duration::ZERO).await;
        assert!(fired.is_empty(), "{fired:?}");
    }
}
