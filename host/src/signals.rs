//! What the service has done, as events anyone may wait on: a test waits for "a maintenance run was
//! skipped" or "a relay turn completed" instead of sleeping and hoping (River's test signals), and an
//! application embedding the service can follow the same events.
//!
//! A broadcast channel: with nobody subscribed, sending costs next to nothing; a subscriber that
//! falls behind loses the oldest events (and is told so), never slows the service.

use crate::metrics::RunResult;
use tokio::sync::broadcast;

/// Events kept for a subscriber that has not read them yet.
const CAPACITY: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A maintenance job's scheduled run ended: it ran, it failed, or it was skipped because
    /// another node held the job's lock.
    MaintenanceRun {
        job: &'static str,
        result: RunResult,
    },
    /// Relay loop `relay_loop` completed a turn: what had landed is recorded and its claim committed.
    RelayTurn { relay_loop: usize },
}

#[derive(Clone)]
pub struct Signals(broadcast::Sender<Signal>);

impl Default for Signals {
    fn default() -> Self {
        Signals(broadcast::channel(CAPACITY).0)
    }
}

impl Signals {
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.0.subscribe()
    }

    pub(crate) fn send(&self, signal: Signal) {
        // No subscriber is the usual case, not an error.
        let _ = self.0.send(signal);
    }
}
