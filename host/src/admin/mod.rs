//! The admin listener: `/healthz`, `/readyz`, `/metrics` (Prometheus text) and `/plugins` (JSON);
//! and [`client`], how the command line asks it.

pub mod client;
mod plugins_json;
mod row_counts;

pub use plugins_json::{PluginStatusJson, PluginsPage};

use crate::metrics::Metrics;
use crate::plugins::PluginSet;
use crate::repository::OutboxRepository;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct AdminState {
    pub repository: OutboxRepository,
    pub plugins: watch::Receiver<Arc<PluginSet>>,
    pub metrics: Metrics,
    /// Set once the plugins directory has been loaded for the first time.
    pub plugins_loaded: Arc<AtomicBool>,
    row_counts: Arc<row_counts::Sampler>,
}

impl AdminState {
    pub fn new(
        repository: OutboxRepository,
        plugins: watch::Receiver<Arc<PluginSet>>,
        metrics: Metrics,
        plugins_loaded: Arc<AtomicBool>,
    ) -> Self {
        AdminState {
            repository,
            plugins,
            metrics,
            plugins_loaded,
            row_counts: Arc::new(row_counts::Sampler::default()),
        }
    }
}

/// Serves until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/plugins", get(plugins))
        .with_state(state);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// The process is up and serving.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the database answers and the plugins directory has been loaded.
async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let ping = sqlx::query("SELECT 1").execute(state.repository.pool());
    let database = matches!(
        tokio::time::timeout(DATABASE_CHECK_TIMEOUT, ping).await,
        Ok(Ok(_))
    );
    let plugins_loaded = state.plugins_loaded.load(Ordering::Acquire);
    match (database, plugins_loaded) {
        (true, true) => (StatusCode::OK, "ready\n"),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the database does not answer\n",
        ),
        (true, false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the plugins are not loaded yet\n",
        ),
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    state
        .row_counts
        .refresh(&state.repository, &state.metrics)
        .await;
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        state.metrics.render(),
    )
}

async fn plugins(State(state): State<AdminState>) -> impl IntoResponse {
    let set = state.plugins.borrow().clone();
    axum::Json(PluginsPage::of(&set))
}
