//! Waiting for the sample rows to settle (published or dead-lettered), drawn as a progress bar from
//! the table's own row counts.

use crate::repository::{OutboxRepository, OutboxState, RepositoryError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// `wide_msg` is cut to the terminal's width, so the bar stays on one line.
const TEMPLATE: &str = "[{bar:16}] {pos}/{len} settled  {wide_msg}";

/// Rows by state, from [`OutboxRepository::count_by_state`] (which leaves out PUBLISHED).
#[derive(Debug, Default)]
struct RowCounts {
    /// Waiting to be claimed, for the first time or for a retry.
    pending: u64,
    processing: u64,
    dead_lettered: u64,
}

impl RowCounts {
    fn of(by_state_and_type: &[(OutboxState, String, i64)]) -> Self {
        let mut counts = RowCounts::default();
        for (state, _destination_type, count) in by_state_and_type {
            let count = u64::try_from(*count).unwrap_or(0);
            match state {
                OutboxState::Pending => counts.pending += count,
                OutboxState::Processing => counts.processing += count,
                OutboxState::DeadLetter => counts.dead_lettered += count,
                OutboxState::Published => {}
            }
        }
        counts
    }
}

/// Polls until all of the schema's `rows` rows have settled or `timeout` has passed; returns how many
/// settled.
pub async fn wait_until_settled(
    repository: &OutboxRepository,
    rows: u64,
    timeout: Duration,
    draw_target: ProgressDrawTarget,
) -> Result<u64, RepositoryError> {
    let bar = ProgressBar::with_draw_target(Some(rows), draw_target);
    bar.set_style(
        ProgressStyle::with_template(TEMPLATE)
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let deadline = Instant::now() + timeout;
    loop {
        let counts = RowCounts::of(&repository.count_by_state().await?);
        let settled = rows.saturating_sub(counts.pending + counts.processing);
        bar.set_position(settled);
        bar.set_message(format!(
            "{} waiting, {} claimed, {} dead-lettered",
            counts.pending, counts.processing, counts.dead_lettered
        ));
        if settled == rows || Instant::now() >= deadline {
            bar.finish();
            return Ok(settled);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
