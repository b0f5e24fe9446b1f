//! A loaded publish observer: told about every publish attempt once its state change has settled.

use crate::plugins::bindings::{Envelope, PublishCompleted, PublishObserverPre};
use crate::plugins::error::CallError;
use crate::plugins::manifest::Limits;
use crate::plugins::pool::{CallKind, InstancePool};
use crate::plugins::sandbox::StoreState;
use crate::plugins::stats::CallStatsSnapshot;

pub struct ObserverPlugin {
    name: String,
    pool: InstancePool<PublishObserverPre<StoreState>>,
}

impl ObserverPlugin {
    pub(crate) fn new(name: String, pool: InstancePool<PublishObserverPre<StoreState>>) -> Self {
        Self { name, pool }
    }

    /// The file stem the plugin was loaded from.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limits(&self) -> Limits {
        self.pool.limits()
    }

    pub fn stats(&self) -> CallStatsSnapshot {
        self.pool.stats()
    }

    pub async fn on_publish_completed(
        &self,
        event: &PublishCompleted,
        envelope: &Envelope,
    ) -> Result<(), CallError> {
        self.pool
            .call(CallKind::Work, async |store, observer| {
                observer
                    .outbox_relay_observer()
                    .call_on_publish_completed(store, event, envelope)
                    .await
            })
            .await
    }
}
