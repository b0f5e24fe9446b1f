//! `outbox-host demo`: the whole service at work on the local database, in one command.
//!
//! It resets a schema of its own, starts the host in this process with the example plugins and a
//! local webhook receiver, publishes sample rows through the application API, shows them settle,
//! and prints what the host counted. In the order it runs:
//! - `receiver.rs`: the local webhook receiver, which also checks each aggregate's order;
//! - `plugins_dir.rs`: a temporary plugins directory with a manifest granting that receiver;
//! - `sample_rows.rs`: the rows and where each goes (accepted, retried once, refused, `NOOP`);
//! - `progress.rs`: waiting for the rows to settle, with a progress bar;
//! - `host_counters.rs`: the host's outcome counters, once they have caught up;
//! - `summary.rs`: the report.

mod host_counters;
mod plugins_dir;
mod progress;
mod receiver;
mod sample_rows;
mod summary;

pub use receiver::ReceiverReport;
pub use summary::Summary;

use crate::api::PublishError;
use crate::config::Config;
use crate::database::{self, DatabaseError, SchemaName};
use crate::plugins::PluginState;
use crate::repository::RepositoryError;
use crate::service::{self, Resources, RunningService, StartError};
use indicatif::ProgressDrawTarget;
use plugins_dir::DemoPlugins;
use receiver::Receiver;
use sqlx::PgPool;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The schema `outbox-host demo` resets and uses; nothing else lives there.
pub const SCHEMA: &str = "outbox_demo";
pub const DEFAULT_ROWS: u32 = 2000;

/// No `Debug`: the database URL may carry a password.
pub struct DemoOptions {
    pub database_url: String,
    /// Dropped and migrated afresh: it must hold nothing worth keeping.
    pub schema: SchemaName,
    /// Where the built example plugins are: `webhook.wasm`, `noop.wasm`, `stats.wasm`.
    pub plugins: PathBuf,
    /// Where their compiled code is cached (`plugins.cache_dir()`, shared with `outbox-host run`);
    /// `None` compiles them on every run.
    pub cache_dir: Option<PathBuf>,
    pub rows: u32,
    /// Draw the progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{} is missing: build the example plugins with scripts/build-plugins", path.display())]
    PluginMissing { path: PathBuf },
    #[error("the example plugin {file} did not load: {error}")]
    PluginNotLoaded { file: String, error: String },
    #[error("cannot {action}: {source}")]
    Io {
        action: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error(transparent)]
    Repository(#[from] RepositoryError),
}

/// Runs the demo, writing what it does and the summary to `out`. `Ok` whenever it ran to the end;
/// [`Summary::succeeded`] says whether everything settled in order.
pub async fn run(options: &DemoOptions, out: &mut dyn Write) -> Result<Summary, DemoError> {
    let receiver = Receiver::start().await.map_err(|source| DemoError::Io {
        action: "start the webhook receiver",
        source,
    })?;
    let plugins = DemoPlugins::prepare(&options.plugins, &options.schema, &receiver.origin())?;
    let db_options = database::connect_options(&options.database_url)?;
    database::drop_schema(&db_options, &options.schema).await?;
    let config = service_config(options, &plugins);
    // The demo is the application too: one pool writes its rows and serves the host.
    let pool = database::connect(db_options, config.database.max_connections).await?;
    let resources = Resources {
        pool: Some(pool.clone()),
        ..Resources::default()
    };
    let service = service::start(&config, resources, CancellationToken::new()).await?;
    let result = deliver(options, &service, &pool, &receiver, out).await;
    service.stop().await;
    result
}

/// The service as the demo runs it: its schema and plugins, the admin listener on a free port, and
/// retries that come back within a tenth of a second so they show.
fn service_config(options: &DemoOptions, plugins: &DemoPlugins) -> Config {
    let mut config = Config::default();
    config.database.url = Some(options.database_url.clone());
    config.database.schema = Some(options.schema.clone());
    config.plugins.dir = plugins.path().to_owned();
    config.plugins.cache_dir = options.cache_dir.clone();
    config.admin.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.relay.polling_interval = Duration::from_millis(100);
    config.relay.backoff_base_delay = Duration::from_millis(50);
    config.relay.backoff_max_delay = Duration::from_secs(1);
    // `/flaky` fails every row's first try, so its breaker opens: a short cool-down keeps the
    // demo's retries as quick as its backoff.
    config.relay.breaker_cool_down = Duration::from_millis(500);
    config
}

/// Rows that take longer than this to settle mean something is wrong: the host publishes hundreds
/// of rows a second even in a debug build.
fn settle_timeout(rows: u32) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(10).saturating_mul(rows)
}

async fn deliver(
    options: &DemoOptions,
    service: &RunningService,
    pool: &PgPool,
    receiver: &Receiver,
    out: &mut dyn Write,
) -> Result<Summary, DemoError> {
    ensure_plugins_loaded(service)?;
    let rows = options.rows;
    let _ = writeln!(
        out,
        "outbox-host demo: {rows} order events over {} orders into schema {}\n  \
         webhook receiver  {}  ({} answers 200, {} 503 on a first try, {} 404)\n  \
         admin endpoint    http://{}/metrics",
        sample_rows::AGGREGATES,
        options.schema,
        receiver.origin(),
        receiver::ACCEPTING_PATH,
        receiver::FLAKY_PATH,
        receiver::GONE_PATH,
        service.admin_addr(),
    );
    let started = Instant::now();
    sample_rows::publish(pool, service.repository().tables(), receiver, rows).await?;
    let timeout = settle_timeout(rows);
    let draw_target = if options.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let settled =
        progress::wait_until_settled(service.repository(), u64::from(rows), timeout, draw_target)
            .await?;
    let elapsed = started.elapsed();
    let host = host_counters::read_when_caught_up(service.metrics(), settled).await;
    let summary = Summary {
        rows: u64::from(rows),
        settled,
        elapsed,
        timeout,
        host,
        receiver: receiver.report(),
    };
    let _ = write!(out, "\n{summary}");
    Ok(summary)
}

/// Each example must load: a plugin that did not would leave its rows pending until the timeout.
fn ensure_plugins_loaded(service: &RunningService) -> Result<(), DemoError> {
    let plugins = service.plugins().borrow().clone();
    match plugins
        .statuses()
        .find(|status| status.state != PluginState::Loaded)
    {
        Some(status) => Err(DemoError::PluginNotLoaded {
            file: status
                .file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            error: status
                .last_error
                .clone()
                .unwrap_or_else(|| status.state.as_str().to_owned()),
        }),
        None => Ok(()),
    }
}
