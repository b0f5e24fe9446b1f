//! `/readyz`: ready while the database answers, the plugins are loaded, the relay keeps turning and
//! the host is not stopping.

use super::AdminState;
use crate::relay::RelayProgress;
use axum::extract::State;
use axum::http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/readyz` looks at besides the database.
#[derive(Clone)]
pub struct Readiness {
    /// Set once the plugins directory has been loaded for the first time.
    pub plugins_loaded: Arc<AtomicBool>,
    pub relay: Arc<RelayProgress>,
    /// `relay.stalled_after_ms`.
    pub stalled_after: Duration,
    /// Cancelled when the host starts draining.
    pub stopping: CancellationToken,
}

pub(super) async fn readyz(State(state): State<AdminState>) -> (StatusCode, String) {
    let not_ready = |reason: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
    };
    let readiness = &state.readiness;
    if readiness.stopping.is_cancelled() {
        return not_ready("stopping".to_owned());
    }
    let ping = state.repository.ping();
    if !matches!(
        tokio::time::timeout(DATABASE_CHECK_TIMEOUT, ping).await,
        Ok(Ok(()))
    ) {
        return not_ready("the database does not answer".to_owned());
    }
    if !readiness.plugins_loaded.load(Ordering::Acquire) {
        return not_ready("the plugins are not loaded yet".to_owned());
    }
    let stalest = readiness.relay.stalest();
    if stalest > readiness.stalled_after {
        return not_ready(format!(
            "no relay turn completed in the last {} ms (relay.stalled_after_ms = {})",
            stalest.as_millis(),
            readiness.stalled_after.as_millis()
        ));
    }
    (StatusCode::OK, "ready\n".to_owned())
}
