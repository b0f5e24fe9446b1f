//! A loaded destination handler: the relay's view of one `destination-handler` component.

use std::fmt;
use std::time::Instant;

use crate::plugins::bindings::{DestinationHandlerPre, Envelope, PublishResult, Scope};
use crate::plugins::error::{CallError, LoadError};
use crate::plugins::manifest::Limits;
use crate::plugins::pool::{CallKind, InstancePool, NotStarted};
use crate::plugins::sandbox::StoreState;
use crate::plugins::stats::CallStatsSnapshot;

pub struct HandlerPlugin {
    name: String,
    destination_type: String,
    pool: InstancePool<DestinationHandlerPre<StoreState>>,
}

impl HandlerPlugin {
    /// Asks the component for its destination type, once: it is fixed for the plugin's lifetime.
    pub(crate) async fn start(
        name: String,
        pool: InstancePool<DestinationHandlerPre<StoreState>>,
    ) -> Result<Self, LoadError> {
        let destination_type = pool
            .call(CallKind::Control, async |store, handler| {
                handler
                    .outbox_relay_handler()
                    .call_destination_type(store)
                    .await
            })
            .await
            .map_err(|source| LoadError::Call {
                function: "destination-type",
                source,
            })?;
        crate::destination_type::validate(&destination_type)?;
        Ok(Self {
            name,
            destination_type,
            pool,
        })
    }

    /// The file stem the plugin was loaded from.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn destination_type(&self) -> &str {
        &self.destination_type
    }

    pub fn limits(&self) -> Limits {
        self.pool.limits()
    }

    /// Publish calls.
    pub fn stats(&self) -> CallStatsSnapshot {
        self.pool.stats()
    }

    /// `claim-scope` calls (one a relay turn) and the `destination-type` call at load.
    pub fn scope_stats(&self) -> CallStatsSnapshot {
        self.pool.control_stats()
    }

    /// Which rows this handler may claim; asked once per claim cycle.
    pub async fn claim_scope(&self) -> Result<Scope, CallError> {
        self.pool
            .call(CallKind::Control, async |store, handler| {
                handler.outbox_relay_handler().call_claim_scope(store).await
            })
            .await
    }

    /// Waits while the plugin already runs `max_concurrency` calls.
    pub async fn publish(&self, envelope: &Envelope) -> Result<PublishResult, CallError> {
        self.pool
            .call(CallKind::Work, async |store, handler| {
                handler
                    .outbox_relay_handler()
                    .call_publish(store, envelope)
                    .await
            })
            .await
    }

    /// As [`HandlerPlugin::publish`], but gives up without calling when the plugin's calls keep
    /// every permit taken until `start_by`.
    pub async fn publish_starting_by(
        &self,
        envelope: &Envelope,
        start_by: Instant,
    ) -> Result<Result<PublishResult, CallError>, NotStarted> {
        self.pool
            .call_starting_by(CallKind::Work, start_by, async |store, handler| {
                handler
                    .outbox_relay_handler()
                    .call_publish(store, envelope)
                    .await
            })
            .await
    }
}

/// What the admin endpoint shows of a claim scope: never its target values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeSummary {
    All,
    Destinations(usize),
}

impl ScopeSummary {
    pub fn of(scope: &Scope) -> Self {
        match scope {
            Scope::All => Self::All,
            Scope::Destinations(targets) => Self::Destinations(targets.len()),
        }
    }
}

impl fmt::Display for ScopeSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Destinations(count) => write!(f, "destinations ({count})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_summary_counts_destinations_without_naming_them() {
        let scope = Scope::Destinations(vec!["secret-target".into(), "other".into()]);
        assert_eq!(ScopeSummary::of(&scope).to_string(), "destinations (2)");
        assert_eq!(ScopeSummary::of(&Scope::All).to_string(), "all");
    }
}
