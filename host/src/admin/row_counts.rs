//! The pending, processing and dead-letter gauges and the age of the oldest due row: sampled at most
//! once per interval, however often `/metrics` is scraped.

use crate::metrics::Metrics;
use crate::repository::OutboxRepository;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(super) struct Sampler {
    last: Mutex<Option<Instant>>,
}

impl Sampler {
    pub async fn refresh(&self, repository: &OutboxRepository, metrics: &Metrics) {
        let mut last = self.last.lock().await;
        if last.is_some_and(|at| at.elapsed() < SAMPLE_INTERVAL) {
            return;
        }
        match repository.count_by_state().await {
            Ok(counts) => metrics.set_rows(&counts),
            Err(error) => tracing::warn!(%error, "sampling row counts for /metrics failed"),
        }
        match repository.oldest_pending_age().await {
            Ok(ages) => metrics.set_oldest_pending_age(&ages),
            Err(error) => {
                tracing::warn!(%error, "sampling the oldest pending row for /metrics failed")
            }
        }
        *last = Some(Instant::now());
    }
}
