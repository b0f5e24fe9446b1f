//! Maintenance jobs: stale-lease recovery and retention cleanup. Each runs on a cron schedule with
//! seconds (seed defaults `*/30 * * * * *` and `0 0 */6 * * *`), on one node at a time: a run first
//! takes a PostgreSQL advisory lock, and a node that cannot get it skips that run.
//!
//! - `schedule.rs`: the loop shared by every job: wait for the next fire time, lock, `run_once`;
//! - `lease_recovery.rs` and `cleanup.rs`: the work of one run of each job.

mod cleanup;
mod lease_recovery;
mod schedule;

pub use cleanup::CleanupSettings;
pub use schedule::{Job, JobReport};

use crate::config::Config;
use crate::metrics::Metrics;
use crate::repository::OutboxRepository;
use crate::signals::Signals;
use tokio_util::sync::CancellationToken;

/// The maintenance jobs of one node.
pub struct Maintenance {
    repository: OutboxRepository,
    metrics: Metrics,
    signals: Signals,
    jobs: Vec<(cron::Schedule, Job)>,
}

impl Maintenance {
    pub fn from_config(
        repository: OutboxRepository,
        metrics: Metrics,
        signals: Signals,
        config: &Config,
    ) -> Self {
        let jobs = vec![
            (
                config
                    .maintenance
                    .stale_lease_recovery_cron
                    .schedule()
                    .clone(),
                Job::LeaseRecovery {
                    lease: config.relay.lease_timeout,
                },
            ),
            (
                config.maintenance.cleanup_cron.schedule().clone(),
                Job::Cleanup(CleanupSettings::from(&config.cleanup)),
            ),
        ];
        // Every series exists at zero from the start, not from the first run.
        for (_, job) in &jobs {
            metrics.maintenance_job(job.name());
            schedule::record(&metrics, job, &job.nothing_done());
        }
        Maintenance {
            repository,
            metrics,
            signals,
            jobs,
        }
    }

    /// Runs every job on its schedule until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let tasks: Vec<_> = self
            .jobs
            .into_iter()
            .map(|(cron, job)| {
                tokio::spawn(schedule::run_on_schedule(
                    cron,
                    job,
                    self.repository.clone(),
                    self.metrics.clone(),
                    self.signals.clone(),
                    shutdown.clone(),
                ))
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    }
}
