//! What the demo reports at the end: the host's counters, the rate, and whether each aggregate's
//! deliveries kept their order.

use super::receiver::ReceiverReport;
use crate::metrics::OutcomeTotals;
use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Summary {
    pub rows: u64,
    /// Rows published or dead-lettered before the timeout.
    pub settled: u64,
    /// From the first row written to the last row settled.
    pub elapsed: Duration,
    pub timeout: Duration,
    pub host: OutcomeTotals,
    pub receiver: ReceiverReport,
}

impl Summary {
    /// Every row settled and every aggregate's deliveries arrived in id order.
    pub fn succeeded(&self) -> bool {
        self.settled == self.rows && self.receiver.out_of_order == 0
    }

    pub fn rows_per_second(&self) -> f64 {
        self.settled as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.elapsed.as_secs_f64();
        if self.settled == self.rows {
            writeln!(
                f,
                "{} rows settled in {seconds:.2} s: {:.0} rows/s",
                self.rows,
                self.rows_per_second()
            )?;
        } else {
            writeln!(
                f,
                "only {} of {} rows settled within {} s; the rest are still pending or in flight",
                self.settled,
                self.rows,
                self.timeout.as_secs()
            )?;
        }
        let (host, receiver) = (&self.host, &self.receiver);
        writeln!(
            f,
            "  published     {:>6}  (the receiver accepted {}; the rest went to NOOP)",
            host.published, receiver.accepted
        )?;
        writeln!(
            f,
            "  retried       {:>6}  (the receiver answered 503 to {} first tries)",
            host.retried, receiver.unavailable
        )?;
        writeln!(
            f,
            "  dead-lettered {:>6}  (the receiver answered 404 {} times)",
            host.dead_lettered, receiver.not_found
        )?;
        if receiver.out_of_order == 0 {
            writeln!(
                f,
                "  ordering        held  (each of {} orders received its rows in id order)",
                receiver.aggregates
            )
        } else {
            writeln!(
                f,
                "  ordering      BROKEN  ({} of {} orders received a row after a later one)",
                receiver.out_of_order, receiver.aggregates
            )
        }
    }
}
