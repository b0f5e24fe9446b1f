//! Rows that no loaded plugin claims: a destination type with no handler claims nothing and its rows
//! wait as PENDING without a sound, so the relay says so every [`CHECK_INTERVAL`], by type and count.

use crate::destination_type;
use crate::plugins::PluginSet;
use crate::repository::{OutboxRepository, OutboxState};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the check runs; the first runs as the relay starts.
const CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// PENDING rows by destination type, of the types no loaded handler serves.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Unclaimed {
    /// Well-formed types, each with its rows.
    pub by_type: BTreeMap<String, i64>,
    /// Rows whose destination type is not well-formed (never named: it came from a row unchecked).
    pub malformed: i64,
}

impl Unclaimed {
    /// From (state, destination type, rows) counts.
    pub fn of(counts: &[(OutboxState, String, i64)], plugins: &PluginSet) -> Self {
        let mut unclaimed = Unclaimed::default();
        for (state, destination_type, rows) in counts {
            if *state != OutboxState::Pending || plugins.handler(destination_type).is_some() {
                continue;
            }
            if destination_type::validate(destination_type).is_ok() {
                *unclaimed
                    .by_type
                    .entry(destination_type.clone())
                    .or_default() += rows;
            } else {
                unclaimed.malformed += rows;
            }
        }
        unclaimed
    }

    fn log(&self) {
        for (destination_type, rows) in &self.by_type {
            tracing::warn!(
                destination_type = destination_type.as_str(),
                rows,
                "PENDING rows of a destination type that no loaded plugin claims"
            );
        }
        if self.malformed > 0 {
            tracing::warn!(
                rows = self.malformed,
                "PENDING rows whose destination type is not well-formed; no plugin can claim them"
            );
        }
    }
}

pub(super) async fn warn_periodically(
    repository: OutboxRepository,
    plugins: watch::Receiver<Arc<PluginSet>>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(CHECK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        match repository.count_by_state().await {
            Ok(counts) => Unclaimed::of(&counts, &plugins.borrow().clone()).log(),
            Err(error) => {
                tracing::debug!(%error, "counting rows no plugin claims failed; tried again later")
            }
        }
    }
}
