//! Per-plugin call statistics for the admin endpoint: plain atomics, updated once per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::plugins::error::CallError;

#[derive(Debug, Default)]
pub(crate) struct CallStats {
    calls: AtomicU64,
    timeouts: AtomicU64,
    traps: AtomicU64,
    memory: AtomicU64,
    instantiate: AtomicU64,
    total_micros: AtomicU64,
}

/// Counts since the plugin was loaded. A call cancelled by its caller is not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStatsSnapshot {
    pub calls: u64,
    pub timeouts: u64,
    pub traps: u64,
    pub memory: u64,
    pub instantiate: u64,
    /// Summed over all calls, from taking an instance to the result.
    pub total_duration: Duration,
    /// Log lines over the plugin's log budget, dropped.
    pub log_lines_dropped: u64,
    /// Instances the plugin's pool made, for any kind of call.
    pub instances_started: u64,
}

impl CallStatsSnapshot {
    pub fn errors(&self) -> u64 {
        self.timeouts + self.traps + self.memory + self.instantiate
    }
}

impl CallStats {
    pub(crate) fn record(&self, error: Option<&CallError>, elapsed: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.total_micros.fetch_add(micros, Ordering::Relaxed);
        let counter = match error {
            None => return,
            Some(CallError::Timeout { .. }) => &self.timeouts,
            Some(CallError::Trap { .. }) => &self.traps,
            Some(CallError::Memory { .. }) => &self.memory,
            Some(CallError::Instantiate { .. } | CallError::PoolFull) => &self.instantiate,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CallStatsSnapshot {
        CallStatsSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            traps: self.traps.load(Ordering::Relaxed),
            memory: self.memory.load(Ordering::Relaxed),
            instantiate: self.instantiate.load(Ordering::Relaxed),
            total_duration: Duration::from_micros(self.total_micros.load(Ordering::Relaxed)),
            log_lines_dropped: 0,
            instances_started: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_is_counted_with_its_error_type_and_duration() {
        let stats = CallStats::default();
        stats.record(None, Duration::from_micros(5));
        stats.record(
            Some(&CallError::Timeout { limit_ms: 1 }),
            Duration::from_micros(7),
        );
        stats.record(
            Some(&CallError::Memory { limit_mb: 1 }),
            Duration::from_micros(1),
        );
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.calls, 3);
        assert_eq!(
            (snapshot.timeouts, snapshot.traps, snapshot.memory),
            (1, 0, 1)
        );
        assert_eq!(snapshot.errors(), 2);
        assert_eq!(snapshot.total_duration, Duration::from_micros(13));
    }
}
