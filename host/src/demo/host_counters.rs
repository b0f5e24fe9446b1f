//! The host's own account of what it did: its outcome counters, so the summary reports what the
//! relay recorded rather than re-counting the table.

use crate::metrics::{Metrics, OutcomeTotals};
use std::time::{Duration, Instant};

/// How long the counters may trail the table: each moves just after its row's mark commits.
const CATCH_UP: Duration = Duration::from_secs(2);

/// The counters once they account for `settled` rows, or as they are after [`CATCH_UP`].
pub async fn read_when_caught_up(metrics: &Metrics, settled: u64) -> OutcomeTotals {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let totals = metrics.outcome_totals();
        if totals.published + totals.dead_lettered >= settled || Instant::now() >= deadline {
            return totals;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
