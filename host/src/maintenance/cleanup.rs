//! Retention cleanup: old published and dead-lettered rows and inbox records, deleted in batches.

use super::JobReport;
use crate::config::CleanupConfig;
use crate::repository::{OutboxRepository, RepositoryError};

#[derive(Debug, Clone, Copy)]
pub struct CleanupSettings {
    pub published_retention_days: u32,
    pub dead_letter_retention_days: u32,
    pub inbox_retention_days: u32,
    pub batch_size: u32,
}

impl From<&CleanupConfig> for CleanupSettings {
    fn from(config: &CleanupConfig) -> Self {
        CleanupSettings {
            published_retention_days: config.published_retention_days,
            dead_letter_retention_days: config.dead_letter_retention_days,
            inbox_retention_days: config.inbox_retention_days,
            batch_size: config.cleanup_batch_size,
        }
    }
}

pub(super) async fn run_once(
    repository: &OutboxRepository,
    settings: CleanupSettings,
) -> Result<JobReport, RepositoryError> {
    let published = repository
        .cleanup_published(settings.published_retention_days, settings.batch_size)
        .await?;
    let dead_letter = repository
        .cleanup_dead_letter(settings.dead_letter_retention_days, settings.batch_size)
        .await?;
    let inbox = repository
        .cleanup_inbox(settings.inbox_retention_days, settings.batch_size)
        .await?;
    Ok(JobReport::Cleanup {
        published: published.deleted,
        dead_letter: dead_letter.deleted,
        inbox: inbox.deleted,
    })
}
