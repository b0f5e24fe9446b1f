//! The relay: claims committed rows, hands each to the plugin for its destination type, records the
//! outcome, and tells the observers (seed 000 "Relay cycle", steps 1–10).
//!
//! - `cycle.rs`: one relay loop: mark finished rows and claim the next batch, dispatch publishes;
//! - `record.rs`: after a failed turn, recording its outcomes apart from the claim;
//! - `envelope.rs`: a claimed row as the envelope plugins receive;
//! - `outcome.rs`: what a publish result means for the row (published, retry, dead letter, deferred);
//! - `backoff.rs`: the retry delay;
//! - `policy.rs`: each destination type's delivery policy (`[destinations.<TYPE>]` over `[relay]`);
//! - `destinations.rs`: per-destination breakers and limits, admitting or holding each claimed row;
//! - `breaker.rs`: one destination's circuit breaker;
//! - `rate_limit.rs`: one destination's rate limit;
//! - `claim_scopes.rs`: the claim scopes of the loaded handlers, asked each turn, failing closed per
//!   destination type;
//! - `observers.rs`: publish observers, notified once per attempt after the mark settles;
//! - `wakeup.rs`: LISTEN/NOTIFY wake-ups with polling as the safety net;
//! - `progress.rs`: when each loop last completed a turn, for readiness.
//! - `unclaimed.rs`: a periodic warning about rows of types no loaded plugin claims.
//! - `doorbell.rs`: with LISTEN_NOTIFY, the doorbell lock a host holds while all of its loops wait,
//!   so inserting commits notify only then.

mod backoff;
mod breaker;
mod claim_scopes;
mod cycle;
mod destinations;
mod doorbell;
mod envelope;
mod observers;
mod outcome;
mod policy;
mod progress;
mod rate_limit;
mod record;
mod unclaimed;
mod wakeup;

pub use crate::repository::CHANNEL;
pub use backoff::Backoff;
pub use destinations::{
    DestinationView, Destinations, DestinationsPage, HoldReason, MAX_TRACKED, fingerprint,
};
pub use doorbell::DOORBELL_APPLICATION_NAME;
pub use policy::{DeliveryPolicies, DeliveryPolicy};
pub use progress::RelayProgress;
pub use wakeup::LISTENER_APPLICATION_NAME;

use crate::config::{RelayConfig, Strategy};
use crate::metrics::Metrics;
use crate::plugins::PluginSet;
use crate::repository::OutboxRepository;
use crate::signals::Signals;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How the relay loops behave; built from `[relay]`.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub node_id: String,
    pub instances: u32,
    pub strategy: Strategy,
    pub polling_interval: Duration,
    pub batch_size: u32,
    pub max_in_flight: u32,
    pub lease_timeout: Duration,
    pub shutdown_grace: Duration,
}

impl RelaySettings {
    pub fn from_config(config: &RelayConfig) -> Self {
        RelaySettings {
            node_id: config.node_id(),
            instances: config.instances,
            strategy: config.strategy,
            polling_interval: config.polling_interval,
            batch_size: config.batch_size,
            max_in_flight: config.max_in_flight,
            lease_timeout: config.lease_timeout,
            shutdown_grace: config.shutdown_grace,
        }
    }
}

/// Everything the relay loops share.
#[derive(Clone)]
pub struct Relay {
    pub repository: OutboxRepository,
    pub plugins: watch::Receiver<Arc<PluginSet>>,
    pub metrics: Metrics,
    pub settings: Arc<RelaySettings>,
    /// Per-destination breakers and limits, with each type's delivery policy.
    pub destinations: Arc<Destinations>,
    /// Sized for `settings.instances` loops.
    pub progress: Arc<RelayProgress>,
    /// Told of every completed turn.
    pub signals: Signals,
}

impl Relay {
    /// Runs `instances` relay loops (and, with LISTEN_NOTIFY, the listener that wakes them and the
    /// doorbell that makes inserts notify while all of them wait) until
    /// `shutdown`; then stops claiming and lets publishes in flight finish within the grace period.
    pub async fn run(self, shutdown: CancellationToken) {
        let wakeups = wakeup::Wakeups::new(self.settings.instances as usize);
        let listening = self.settings.strategy == Strategy::ListenNotify;
        let (idle_loops, idle_watch) = doorbell::idle_loops();
        let listener = listening.then(|| {
            tokio::spawn(wakeup::listen(
                self.repository.clone(),
                self.settings.node_id.clone(),
                wakeups.clone(),
                self.metrics.clone(),
                shutdown.clone(),
            ))
        });
        let doorbell = listening.then(|| {
            tokio::spawn(doorbell::ring_while_idle(
                self.repository.clone(),
                self.settings.node_id.clone(),
                self.settings.instances as usize,
                idle_watch,
                wakeups.clone(),
                shutdown.clone(),
            ))
        });
        let unclaimed = tokio::spawn(unclaimed::warn_periodically(
            self.repository.clone(),
            self.plugins.clone(),
            shutdown.clone(),
        ));
        let loops: Vec<_> = (0..self.settings.instances)
            .map(|index| {
                let claimed_by = format!("{}-{index}", self.settings.node_id);
                let wake = wakeups.get(index as usize);
                let heartbeat = progress::Heartbeat::new(
                    self.progress.clone(),
                    self.signals.clone(),
                    index as usize,
                );
                let doorbell = listening.then(|| {
                    doorbell::LoopDoorbell::new(idle_loops.clone(), wakeups.clone(), index as usize)
                });
                tokio::spawn(cycle::run_loop(
                    self.clone(),
                    claimed_by,
                    wake,
                    doorbell,
                    heartbeat,
                    shutdown.clone(),
                ))
            })
            .collect();
        for relay_loop in loops {
            if let Err(error) = relay_loop.await {
                tracing::error!(%error, "a relay loop ended abnormally");
            }
        }
        drop(idle_loops);
        for task in [listener, doorbell].into_iter().flatten() {
            let _ = task.await;
        }
        let _ = unclaimed.await;
    }
}

/// The span of one call about one entry: every line the plugin logs during the call (its log,
/// stdout, stderr, a denied request) carries the entry id and attempt. At ERROR level, so it is
/// enabled whenever any of those lines is.
fn entry_span(entry_id: i64, attempt: u32) -> tracing::Span {
    tracing::error_span!("entry", entry_id, attempt)
}
