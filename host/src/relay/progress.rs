//! When each relay loop last completed a turn, so readiness can tell a stuck relay (a claim blocked
//! on a lock, a loop that stopped) from an idle one: an idle loop still turns every polling interval.

use crate::signals::{Signal, Signals};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct RelayProgress {
    origin: Instant,
    /// Per loop: milliseconds after `origin` of its start or its last completed turn.
    last_turn_ms: Vec<AtomicU64>,
}

impl RelayProgress {
    /// Progress for `loops` loops, counted as turned now.
    pub fn new(loops: u32) -> Self {
        RelayProgress {
            origin: Instant::now(),
            last_turn_ms: (0..loops).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The longest any loop has gone without completing a turn (or since it started).
    pub fn stalest(&self) -> Duration {
        let now = self.elapsed_ms();
        let oldest = self
            .last_turn_ms
            .iter()
            .map(|last| last.load(Ordering::Acquire))
            .min()
            .unwrap_or(now);
        Duration::from_millis(now.saturating_sub(oldest))
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One loop's entry in [`RelayProgress`], and its turns signalled.
pub(super) struct Heartbeat {
    progress: Arc<RelayProgress>,
    signals: Signals,
    index: usize,
}

impl Heartbeat {
    pub fn new(progress: Arc<RelayProgress>, signals: Signals, index: usize) -> Self {
        Heartbeat {
            progress,
            signals,
            index,
        }
    }

    /// The loop started: readiness counts from now.
    pub fn started(&self) {
        if let Some(last) = self.progress.last_turn_ms.get(self.index) {
            last.store(self.progress.elapsed_ms(), Ordering::Release);
        }
    }

    /// The loop completed a turn.
    pub fn beat(&self) {
        self.started();
        self.signals.send(Signal::RelayTurn {
            relay_loop: self.index,
        });
    }
}
