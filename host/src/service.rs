//! The service `outbox-host run` starts: the database, the plugins and their watcher, the relay loops,
//! maintenance and the admin listener, all stopped by one cancellation token.

use crate::admin::{self, AdminState, Readiness};
use crate::config::{Config, ConfigError};
use crate::database::{self, DatabaseError, Tables};
use crate::maintenance::Maintenance;
use crate::metrics::Metrics;
use crate::plugins::capabilities::kafka::{KafkaProducer, KafkaSetupError};
use crate::plugins::{
    EngineConfig, PluginEngine, PluginError, PluginSet, PluginWatcher, WatchSettings, watcher,
};
use crate::relay::{DeliveryPolicies, Destinations, Relay, RelayProgress, RelaySettings};
use crate::repository::{OutboxRepository, TurnCommit};
use crate::signals::Signals;
use sqlx::PgPool;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// The `application_name` of the service's database connections, followed by the node id.
pub const APPLICATION_NAME: &str = "outbox-host";

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Plugins(#[from] PluginError),
    #[error(transparent)]
    Kafka(#[from] KafkaSetupError),
    #[error(
        "the plugins directory {} (plugins.dir) does not exist or is not a directory: create it, \
         or set plugins.dir to the directory that holds the .wasm files", dir.display()
    )]
    PluginsDirMissing { dir: PathBuf },
    #[error("cannot listen on admin.listen {addr}: {source}")]
    AdminListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What the service can be given instead of making it from the configuration, as an application
/// embedding it (or a test) may hold these already.
#[derive(Default)]
pub struct Resources {
    /// Used instead of a pool connected to `database.url` (`database.max_connections` is then the
    /// pool's own business). Migrations, when `database.migrate` is on, still run on a connection
    /// of their own to `database.url`.
    pub pool: Option<PgPool>,
    /// Served instead of binding `admin.listen`.
    pub admin_listener: Option<TcpListener>,
}

/// A started service. Dropping it does not stop it: call [`RunningService::stop`], or cancel the
/// token it was started with and [`RunningService::wait`].
pub struct RunningService {
    admin_addr: SocketAddr,
    repository: OutboxRepository,
    metrics: Metrics,
    signals: Signals,
    plugins: watch::Receiver<Arc<PluginSet>>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    /// Stopped after `tasks`, so the admin listener answers during the drain.
    admin: JoinHandle<()>,
    admin_shutdown: CancellationToken,
}

/// Connects, migrates (unless `database.migrate = false`), loads the plugins and starts everything;
/// it all stops once `shutdown` is cancelled.
pub async fn start(
    config: &Config,
    resources: Resources,
    shutdown: CancellationToken,
) -> Result<RunningService, StartError> {
    // However the configuration was built: the admin listener, for one, refuses to expose its
    // endpoints beyond loopback without a token.
    config.validate()?;
    // Checked first: a mistyped path must not look like a host with no plugins.
    if !config.plugins.dir.is_dir() {
        return Err(StartError::PluginsDirMissing {
            dir: config.plugins.dir.clone(),
        });
    }
    let options = database::connect_options(config.database_url())?;
    let schema = config.database.schema.clone();
    if config.database.migrate {
        database::migrate(&options, schema.as_ref()).await?;
    }
    let relay_settings = RelaySettings::from_config(&config.relay);
    // Operators see which node a connection belongs to in pg_stat_activity.
    let node_options =
        options.application_name(&format!("{APPLICATION_NAME} {}", relay_settings.node_id));
    let pool = match resources.pool {
        Some(pool) => pool,
        None => database::connect(node_options, config.database.max_connections).await?,
    };
    let turn_commit = if config.relay.synchronous_commit {
        TurnCommit::Durable
    } else {
        TurnCommit::Asynchronous
    };
    let repository = OutboxRepository::new(pool, Tables::new(schema)).with_turn_commit(turn_commit);
    let metrics = Metrics::new();
    let destinations = Destinations::new(DeliveryPolicies::from_config(config), metrics.clone());
    let cache_dir = config.plugins.cache_dir();
    if cache_dir.is_none() {
        tracing::warn!(
            "no state directory (set plugins.state_dir, or HOME): every plugin is compiled when it loads"
        );
    }
    let kafka = config
        .kafka
        .as_ref()
        .map(|kafka| KafkaProducer::new(kafka, config.relay.max_call_time()))
        .transpose()?;
    let engine = PluginEngine::new(EngineConfig {
        cache_dir,
        max_instances: config.plugins.max_instances,
        max_call_time: Some(config.relay.max_call_time()),
        kafka,
        ..EngineConfig::default()
    })?;
    let (plugins_tx, plugins) = watch::channel(Arc::new(PluginSet::default()));
    metrics.watch_plugins(plugins.clone());
    let signals = Signals::default();
    let mut tasks = JoinSet::new();

    let addr = config.admin.listen;
    let listener = match resources.admin_listener {
        Some(listener) => listener,
        None => TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::AdminListen { addr, source })?,
    };
    let admin_addr = listener
        .local_addr()
        .map_err(|source| StartError::AdminListen { addr, source })?;
    let plugins_loaded = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(RelayProgress::new(relay_settings.instances));
    let readiness = Readiness {
        plugins_loaded: plugins_loaded.clone(),
        relay: progress.clone(),
        stalled_after: config.relay.stalled_after,
        stopping: shutdown.clone(),
    };
    let admin_state = AdminState::new(
        repository.clone(),
        plugins.clone(),
        engine.compiling().clone(),
        metrics.clone(),
        readiness,
        destinations.clone(),
        config.admin.token.clone(),
    );
    let admin_shutdown = CancellationToken::new();
    let admin_stopped = admin_shutdown.clone();
    let admin = tokio::spawn(async move {
        if let Err(error) = admin::serve(listener, admin_state, admin_stopped).await {
            tracing::error!(%error, "the admin listener stopped");
        }
    });
    tracing::info!(%admin_addr, token = config.admin.token.is_some(), "admin listener up: /healthz /readyz /metrics /plugins /destinations /dlq");

    let watch_settings = WatchSettings {
        debounce: config.plugins.watch_debounce,
        settle: config.plugins.settle,
        rescan_interval: config.plugins.rescan_interval,
    };
    let watcher = match PluginWatcher::start(&config.plugins.dir, watch_settings).await {
        Ok(watcher) => watcher,
        Err(error) => {
            admin_shutdown.cancel();
            return Err(error.into());
        }
    };
    let set = PluginSet::load_dir(&engine, &config.plugins.dir).await;
    tracing::info!(dir = %config.plugins.dir.display(), plugins = %watcher::summary(&set), "plugins loaded");
    if let Err(error) = check_destination_types(config, &set) {
        admin_shutdown.cancel();
        return Err(error.into());
    }
    plugins_tx.send_replace(Arc::new(set));
    plugins_loaded.store(true, Ordering::Release);

    let relay = Relay {
        repository: repository.clone(),
        plugins: plugins.clone(),
        metrics: metrics.clone(),
        settings: Arc::new(relay_settings),
        destinations,
        progress,
        signals: signals.clone(),
    };
    tasks.spawn(relay.run(shutdown.clone()));
    tasks.spawn(
        Maintenance::from_config(repository.clone(), metrics.clone(), signals.clone(), config)
            .run(shutdown.clone()),
    );
    tasks.spawn(watcher.run(engine, plugins_tx, metrics.clone(), shutdown.clone()));
    Ok(RunningService {
        admin_addr,
        repository,
        metrics,
        signals,
        plugins,
        shutdown,
        tasks,
        admin,
        admin_shutdown,
    })
}

/// Every `[destinations.<TYPE>]` must name the type of a plugin in the plugins directory (loaded
/// or not), so a misspelt type is refused rather than silently never applied.
fn check_destination_types(config: &Config, set: &PluginSet) -> Result<(), ConfigError> {
    let known: std::collections::BTreeSet<&str> = set
        .statuses()
        .filter_map(|status| status.destination_type.as_deref())
        .collect();
    match config
        .destinations
        .keys()
        .find(|destination_type| !known.contains(destination_type.as_str()))
    {
        Some(unknown) => Err(ConfigError::key(
            format!("destinations.{unknown}"),
            format!(
                "no plugin in {} handles this destination type (known: {})",
                config.plugins.dir.display(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.into_iter().collect::<Vec<_>>().join(", ")
                }
            ),
        )),
        None => Ok(()),
    }
}

impl RunningService {
    /// Where the admin listener is bound (useful with `admin.listen = "127.0.0.1:0"`).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    pub fn repository(&self) -> &OutboxRepository {
        &self.repository
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// What the service does from now on: maintenance runs, relay turns.
    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// The plugin set in use; it changes when the plugins directory does.
    pub fn plugins(&self) -> watch::Receiver<Arc<PluginSet>> {
        self.plugins.clone()
    }

    /// Stops claiming, lets publishes in flight finish within the grace period, and returns when
    /// everything has stopped.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.wait().await;
    }

    /// Returns once the service has stopped (after its token was cancelled). The admin listener
    /// stops last, once everything else has drained.
    pub async fn wait(mut self) {
        while let Some(result) = self.tasks.join_next().await {
            if let Err(error) = result {
                tracing::error!(%error, "a service task ended abnormally");
            }
        }
        self.admin_shutdown.cancel();
        if let Err(error) = self.admin.await {
            tracing::error!(%error, "the admin listener ended abnormally");
        }
    }
}
