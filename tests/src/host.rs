//! A running host for end-to-end tests: the real service, in this process, on a schema of its own,
//! with its own plugins directory and its admin listener on a free port.

use crate::db::TestDb;
use outbox_host::config::{Config, Strategy};
use outbox_host::plugins::PluginSet;
use outbox_host::service::{self, Resources, RunningService};
use outbox_host::signals::Signal;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// The state directory every test host shares, as a real host keeps its own across restarts: the
/// compiled components of the test plugins are cached there across tests and runs. The host creates
/// it private to the user on first use.
pub fn state_dir() -> PathBuf {
    std::env::temp_dir().join("outbox-tests-state")
}

/// The value of the sample `series` (name and labels, as exposed) at `metrics_url`; `None` when the
/// series is absent.
pub async fn metric(metrics_url: &str, series: &str) -> Option<f64> {
    let body = outbox_host::admin::client::get(metrics_url)
        .await
        .expect("the admin endpoint answers");
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free local port")
        .port()
}

/// The shipped defaults, placed only: `db`'s schema (already migrated), plugins from `plugins_dir`,
/// the shared state directory, the admin listener on a free port. What benchmarks of the defaults run.
pub fn defaults(db: &TestDb, plugins_dir: &Path) -> Config {
    let mut config = Config::default();
    config.database.url = Some(db.url.clone());
    config.database.schema = Some(db.schema.clone());
    config.database.migrate = false;
    config.plugins.dir = plugins_dir.to_owned();
    config.plugins.state_dir = Some(state_dir());
    config.admin.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.relay.node_id = Some(format!("{}-node", db.schema));
    config
}

/// A configuration for a host on `db`'s schema, loading plugins from `plugins_dir`, tuned so tests
/// see retries and polls quickly.
pub fn config(db: &TestDb, plugins_dir: &Path) -> Config {
    let mut config = defaults(db, plugins_dir);
    config.database.max_connections = 6;
    config.plugins.max_instances = 128;
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval = Duration::from_millis(200);
    config.relay.backoff_base_delay = Duration::from_millis(10);
    config.relay.backoff_max_delay = Duration::from_millis(40);
    config.relay.unresolvable_delay = Duration::from_millis(100);
    config.relay.shutdown_grace = Duration::from_secs(2);
    // Tests of retries and dead letters see every attempt; the breaker has tests of its own
    // (`delivery_policies.rs`), which turn it on per destination type.
    config.relay.breaker_threshold = 0;
    config
}

pub struct TestHost {
    pub service: RunningService,
    /// Cancelling it stops the host, as [`TestHost::stop`] does.
    pub shutdown: CancellationToken,
}

impl TestHost {
    pub async fn start(config: &Config) -> TestHost {
        crate::log_capture::install();
        let shutdown = CancellationToken::new();
        let service = service::start(config, Resources::default(), shutdown.clone())
            .await
            .expect("the host starts");
        TestHost { service, shutdown }
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.service.admin_addr())
    }

    /// The value of the sample `series` (name and labels, as exposed) on this host's `/metrics`.
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.admin_url("/metrics"), series)
            .await
            .unwrap_or_else(|| panic!("no sample {series} on /metrics"))
    }

    pub async fn stop(self) {
        self.service.stop().await;
    }

    /// Waits until the plugin set in use satisfies `check` (it is checked on every swap); panics
    /// naming `what` after `timeout`.
    pub async fn wait_for_plugins(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&PluginSet) -> bool,
    ) {
        let mut plugins = self.service.plugins();
        match tokio::time::timeout(timeout, plugins.wait_for(|set| check(set))).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => panic!("the host stopped while waiting until {what}"),
            Err(_) => panic!("timed out after {timeout:?} waiting until {what}"),
        }
    }

    /// Waits for `count` signals that `wanted` accepts, among those the host sends from now on;
    /// panics naming `what` after `timeout`.
    pub async fn wait_for_signals(
        &self,
        what: &str,
        count: usize,
        timeout: Duration,
        wanted: impl Fn(&Signal) -> bool,
    ) {
        let mut signals = self.service.signals().subscribe();
        let waiting = async {
            let mut seen = 0;
            while seen < count {
                match signals.recv().await {
                    Ok(signal) if wanted(&signal) => seen += 1,
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => panic!("the host stopped while waiting until {what}"),
                }
            }
        };
        if tokio::time::timeout(timeout, waiting).await.is_err() {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
    }
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
