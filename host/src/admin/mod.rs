//! The admin listener: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/plugins` and
//! `/destinations` (JSON) and the dead-letter operations under `/dlq`; and [`client`], how the command line asks it. With
//! `admin.token` set, every endpoint but `/healthz` requires it as a bearer token.

mod auth;
pub mod client;
mod dlq;
mod plugins_json;
mod readiness;
mod row_counts;

pub use plugins_json::{PluginStatusJson, PluginsPage};
pub use readiness::Readiness;

use crate::config::AdminToken;
use crate::metrics::Metrics;
use crate::plugins::{Compiling, PluginSet};
use crate::relay::{Destinations, DestinationsPage};
use crate::repository::OutboxRepository;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub struct AdminState {
    pub repository: OutboxRepository,
    pub plugins: watch::Receiver<Arc<PluginSet>>,
    pub compiling: Compiling,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub destinations: Arc<Destinations>,
    token: Option<AdminToken>,
    row_counts: Arc<row_counts::Sampler>,
}

impl AdminState {
    pub fn new(
        repository: OutboxRepository,
        plugins: watch::Receiver<Arc<PluginSet>>,
        compiling: Compiling,
        metrics: Metrics,
        readiness: Readiness,
        destinations: Arc<Destinations>,
        token: Option<AdminToken>,
    ) -> Self {
        AdminState {
            repository,
            plugins,
            compiling,
            metrics,
            readiness,
            destinations,
            token,
            row_counts: Arc::new(row_counts::Sampler::default()),
        }
    }
}

/// Serves until `shutdown`. The host cancels it only once the relay has drained, so operators keep
/// their view of a stopping host.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let token = state.token.clone();
    let router = Router::new()
        .route("/readyz", get(readiness::readyz))
        .route("/metrics", get(metrics))
        .route("/plugins", get(plugins))
        .route("/destinations", get(destinations))
        .route("/dlq", get(dlq::list))
        .route("/dlq/redrive", post(dlq::redrive))
        .route("/dlq/purge", post(dlq::purge))
        .route_layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_token,
        ))
        // Liveness needs no token: a probe that cannot hold a secret must still see the process.
        .route("/healthz", get(healthz))
        .with_state(state);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// The process is up and serving.
async fn healthz() -> &'static str {
    "ok\n"
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
    axum::Json(PluginsPage::of(&set, &state.compiling.files()))
}

/// This node's tracked destinations: breakers, calls running, rows held back.
async fn destinations(State(state): State<AdminState>) -> impl IntoResponse {
    axum::Json(DestinationsPage {
        destinations: state.destinations.snapshot(),
    })
}
