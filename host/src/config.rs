//! The service configuration: one TOML file, every key optional, `OUTBOX_<SECTION>_<KEY>` environment
//! overrides, and `DATABASE_URL`. An unknown key or a bad value is an error that names the key and
//! never quotes the value (values may be secrets).

use crate::database::{self, SchemaName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub database: DatabaseConfig,
    pub plugins: PluginsConfig,
    pub relay: RelayConfig,
    pub cleanup: CleanupConfig,
    pub maintenance: MaintenanceConfig,
    pub admin: AdminConfig,
    /// Absent: the Kafka capability answers "not configured".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaConfig>,
    pub log: LogConfig,
    /// `[destinations.<TYPE>]`: one destination type's delivery policies; unset keys fall back to
    /// `[relay]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub destinations: BTreeMap<String, DestinationTypeConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// Else `DATABASE_URL`, else the local server's `test` database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Places every object in this schema and qualifies every statement with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<SchemaName>,
    /// Apply migrations on `run`.
    pub migrate: bool,
    pub max_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: None,
            schema: None,
            migrate: true,
            max_connections: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    pub dir: PathBuf,
    /// The host's own state directory, written by the host alone: the compiled-component cache
    /// and its key live in its `cache/`. Default `$XDG_STATE_HOME/outbox-host`, else
    /// `$HOME/.local/state/outbox-host` (see [`default_state_dir`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// Where compiled components are cached; default `<state_dir>/cache`. Never inside `dir`: the
    /// cache holds native code, which whoever deploys plugins must not be able to plant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Plugin instances alive at once, across all plugins (each reserves address space, not memory).
    pub max_instances: u32,
    /// Filesystem events closer together than this wake the watcher once.
    #[serde(rename = "watch_debounce_ms", with = "millis")]
    pub watch_debounce: Duration,
    /// A changed file is loaded only once the directory has stayed unchanged (sizes, times) this
    /// long, so a file still being written is never loaded half-way.
    #[serde(rename = "settle_ms", with = "millis")]
    pub settle: Duration,
    /// The directory is also re-read this often, in case the watcher missed an event.
    #[serde(rename = "rescan_interval_ms", with = "millis")]
    pub rescan_interval: Duration,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            dir: PathBuf::from("./plugins"),
            state_dir: None,
            cache_dir: None,
            max_instances: 1000,
            watch_debounce: Duration::from_millis(50),
            settle: Duration::from_millis(150),
            rescan_interval: Duration::from_secs(30),
        }
    }
}

impl PluginsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(cache_dir) = self.cache_dir()
            && path_is_within(&cache_dir, &self.dir)
        {
            let key = match self.cache_dir {
                Some(_) => "plugins.cache_dir",
                None => "plugins.state_dir",
            };
            return Err(ConfigError::key(
                key,
                "must not be inside plugins.dir: the compiled-component cache holds native code, \
                 which whoever deploys plugins must not be able to plant",
            ));
        }
        at_least_one("plugins.max_instances", u64::from(self.max_instances))?;
        at_least_one("plugins.watch_debounce_ms", millis_of(self.watch_debounce))?;
        at_least_one("plugins.settle_ms", millis_of(self.settle))?;
        at_least_one(
            "plugins.rescan_interval_ms",
            millis_of(self.rescan_interval),
        )
    }

    /// `None` when neither `cache_dir` nor `state_dir` is known: every plugin is then compiled.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        self.cache_dir
            .clone()
            .or_else(|| self.state_dir.as_ref().map(|dir| dir.join("cache")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    Polling,
    ListenNotify,
}

impl Strategy {
    /// As the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Polling => "POLLING",
            Strategy::ListenNotify => "LISTEN_NOTIFY",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    pub strategy: Strategy,
    #[serde(rename = "polling_interval_ms", with = "millis")]
    pub polling_interval: Duration,
    pub batch_size: u32,
    /// A claimed row is reclaimed by lease recovery after this long; a plugin call may use at most
    /// two thirds of it (see [`RelayConfig::max_call_time`]).
    #[serde(rename = "lease_timeout_ms", with = "millis")]
    pub lease_timeout: Duration,
    #[serde(rename = "backoff_base_delay_ms", with = "millis")]
    pub backoff_base_delay: Duration,
    #[serde(rename = "backoff_max_delay_ms", with = "millis")]
    pub backoff_max_delay: Duration,
    /// How long an unresolvable row waits before it may be claimed again (attempt unchanged).
    #[serde(rename = "unresolvable_delay_ms", with = "millis")]
    pub unresolvable_delay: Duration,
    pub instances: u32,
    /// Publishes running at once in one relay loop; a turn claims at most this many rows.
    pub max_in_flight: u32,
    #[serde(rename = "shutdown_grace_ms", with = "millis")]
    pub shutdown_grace: Duration,
    /// `/readyz` fails when a relay loop has completed no turn for this long (an idle loop still
    /// turns every polling interval, so this must exceed `polling_interval_ms`).
    #[serde(rename = "stalled_after_ms", with = "millis")]
    pub stalled_after: Duration,
    /// Whether a relay turn (its marks and its claim) waits for its commit to reach the disk. Off:
    /// the application's row was committed durably already, and a turn lost in a PostgreSQL crash
    /// only means its rows are delivered again, which at-least-once allows.
    pub synchronous_commit: bool,
    /// The attempt limit of a row that carries the table's default (20); a row inserted with
    /// another `max_attempts` keeps its own.
    pub max_attempts: u32,
    /// Consecutive retryable failures of one destination, within `breaker_window_ms`, that open its
    /// circuit breaker; 0 turns breakers off.
    pub breaker_threshold: u32,
    #[serde(rename = "breaker_window_ms", with = "millis")]
    pub breaker_window: Duration,
    /// How long an open breaker defers its destination's rows before one probe is let through.
    #[serde(rename = "breaker_cool_down_ms", with = "millis")]
    pub breaker_cool_down: Duration,
    /// Calls per second to one destination, evenly spaced; 0: no limit.
    pub rate_limit_per_second: f64,
    /// Calls to one destination running at once on this node; 0: no limit.
    pub max_concurrency_per_destination: u32,
    /// This node's identity in `claimed_by`; default: host name and process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            strategy: Strategy::ListenNotify,
            polling_interval: Duration::from_secs(1),
            batch_size: 50,
            lease_timeout: Duration::from_secs(30),
            backoff_base_delay: Duration::from_secs(1),
            backoff_max_delay: Duration::from_secs(300),
            unresolvable_delay: Duration::from_secs(1),
            // Two loops: one's claim runs while the other's publishes land (1.38× the rows/s of one
            // loop at the seed's batch of 50, `throughput_anchors`); more added little on 2 cores.
            instances: 2,
            max_in_flight: 64,
            shutdown_grace: Duration::from_secs(10),
            stalled_after: Duration::from_secs(30),
            synchronous_commit: false,
            max_attempts: crate::api::DEFAULT_MAX_ATTEMPTS,
            breaker_threshold: 5,
            breaker_window: Duration::from_secs(60),
            breaker_cool_down: Duration::from_secs(15),
            rate_limit_per_second: 0.0,
            max_concurrency_per_destination: 0,
            node_id: None,
        }
    }
}

impl RelayConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        at_least_one(
            "relay.polling_interval_ms",
            millis_of(self.polling_interval),
        )?;
        at_least_one("relay.batch_size", u64::from(self.batch_size))?;
        at_least_one("relay.lease_timeout_ms", millis_of(self.lease_timeout))?;
        // Zero would claim an unresolvable row again at once, over and over.
        at_least_one(
            "relay.unresolvable_delay_ms",
            millis_of(self.unresolvable_delay),
        )?;
        at_least_one("relay.instances", u64::from(self.instances))?;
        self.delivery().validate("relay", "relay")?;
        if self.max_in_flight < self.batch_size {
            return Err(ConfigError::key(
                "relay.max_in_flight",
                "must be at least relay.batch_size: a turn claims no more rows than it may have \
                 in flight",
            ));
        }
        if self.stalled_after <= self.polling_interval {
            return Err(ConfigError::key(
                "relay.stalled_after_ms",
                "must be greater than relay.polling_interval_ms: an idle relay turns once per \
                 polling interval",
            ));
        }
        if let Some(node_id) = &self.node_id
            && (node_id.trim().is_empty() || node_id.len() > 200)
        {
            return Err(ConfigError::key(
                "relay.node_id",
                "must be 1 to 200 characters",
            ));
        }
        Ok(())
    }

    /// The longest a plugin call may run: two thirds of the lease, so a call ends (and its outcome
    /// is recorded) before lease recovery could hand its row to another call. A plugin whose
    /// `limits.timeout_ms` is longer is held to this.
    pub fn max_call_time(&self) -> Duration {
        self.lease_timeout * 2 / 3
    }

    /// The delivery policy of every destination type without a `[destinations.<TYPE>]` key.
    pub fn delivery(&self) -> DeliveryPolicyConfig {
        DeliveryPolicyConfig {
            max_attempts: self.max_attempts,
            backoff_base_delay: self.backoff_base_delay,
            backoff_max_delay: self.backoff_max_delay,
            breaker_threshold: self.breaker_threshold,
            breaker_window: self.breaker_window,
            breaker_cool_down: self.breaker_cool_down,
            rate_limit_per_second: self.rate_limit_per_second,
            max_concurrency_per_destination: self.max_concurrency_per_destination,
        }
    }

    pub fn node_id(&self) -> String {
        self.node_id.clone().unwrap_or_else(|| {
            let host = gethostname::gethostname().to_string_lossy().into_owned();
            format!("{host}-{}", std::process::id())
        })
    }
}

/// The delivery policy keys, as `[relay]` sets them for every destination type and
/// `[destinations.<TYPE>]` for one (see [`RelayConfig`] for each key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeliveryPolicyConfig {
    pub max_attempts: u32,
    pub backoff_base_delay: Duration,
    pub backoff_max_delay: Duration,
    pub breaker_threshold: u32,
    pub breaker_window: Duration,
    pub breaker_cool_down: Duration,
    pub rate_limit_per_second: f64,
    pub max_concurrency_per_destination: u32,
}

/// The slowest and fastest rate limits accepted: one call in 1,000 s, a million a second.
const RATE_LIMIT_RANGE: std::ops::RangeInclusive<f64> = 0.001..=1_000_000.0;

impl DeliveryPolicyConfig {
    /// `section` prefixes the keys named in errors; `max_section` is where the backoff maximum
    /// was set (a type's own key, or `[relay]`'s it falls back to).
    fn validate(&self, section: &str, max_section: &str) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{section}.{name}");
        if self.max_attempts == 0 || i32::try_from(self.max_attempts).is_err() {
            return Err(ConfigError::key(
                key("max_attempts"),
                "must be between 1 and 2147483647",
            ));
        }
        if self.backoff_base_delay > self.backoff_max_delay {
            return Err(ConfigError::key(
                key("backoff_base_delay_ms"),
                format!("must not exceed {max_section}.backoff_max_delay_ms"),
            ));
        }
        at_least_one(&key("breaker_window_ms"), millis_of(self.breaker_window))?;
        at_least_one(
            &key("breaker_cool_down_ms"),
            millis_of(self.breaker_cool_down),
        )?;
        let rate = self.rate_limit_per_second;
        if rate != 0.0 && !RATE_LIMIT_RANGE.contains(&rate) {
            return Err(ConfigError::key(
                key("rate_limit_per_second"),
                "must be 0 (no limit) or between 0.001 and 1000000",
            ));
        }
        Ok(())
    }
}

/// `[destinations.<TYPE>]`: every key optional; an unset one is `[relay]`'s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DestinationTypeConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(
        rename = "backoff_base_delay_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_base_delay: Option<Duration>,
    #[serde(
        rename = "backoff_max_delay_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_max_delay: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_threshold: Option<u32>,
    #[serde(
        rename = "breaker_window_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub breaker_window: Option<Duration>,
    #[serde(
        rename = "breaker_cool_down_ms",
        with = "optional_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub breaker_cool_down: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency_per_destination: Option<u32>,
}

impl DestinationTypeConfig {
    /// This type's policy: its own keys over `relay`'s.
    pub fn over(&self, relay: DeliveryPolicyConfig) -> DeliveryPolicyConfig {
        DeliveryPolicyConfig {
            max_attempts: self.max_attempts.unwrap_or(relay.max_attempts),
            backoff_base_delay: self.backoff_base_delay.unwrap_or(relay.backoff_base_delay),
            backoff_max_delay: self.backoff_max_delay.unwrap_or(relay.backoff_max_delay),
            breaker_threshold: self.breaker_threshold.unwrap_or(relay.breaker_threshold),
            breaker_window: self.breaker_window.unwrap_or(relay.breaker_window),
            breaker_cool_down: self.breaker_cool_down.unwrap_or(relay.breaker_cool_down),
            rate_limit_per_second: self
                .rate_limit_per_second
                .unwrap_or(relay.rate_limit_per_second),
            max_concurrency_per_destination: self
                .max_concurrency_per_destination
                .unwrap_or(relay.max_concurrency_per_destination),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanupConfig {
    pub published_retention_days: u32,
    pub dead_letter_retention_days: u32,
    pub inbox_retention_days: u32,
    pub cleanup_batch_size: u32,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            published_retention_days: 7,
            dead_letter_retention_days: 30,
            inbox_retention_days: 30,
            cleanup_batch_size: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MaintenanceConfig {
    pub stale_lease_recovery_cron: CronSchedule,
    pub cleanup_cron: CronSchedule,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        let seed = |expression: &str| CronSchedule::from_str(expression).expect("a seed default");
        MaintenanceConfig {
            stale_lease_recovery_cron: seed("*/30 * * * * *"),
            cleanup_cron: seed("0 0 */6 * * *"),
        }
    }
}

/// A cron expression with seconds (six fields, seconds first), parsed when it is read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CronSchedule {
    expression: String,
    schedule: cron::Schedule,
}

impl CronSchedule {
    pub fn schedule(&self) -> &cron::Schedule {
        &self.schedule
    }
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
    }
}

impl FromStr for CronSchedule {
    type Err = String;

    fn from_str(expression: &str) -> Result<Self, String> {
        let fields = expression.split_whitespace().count();
        if fields != 6 {
            return Err(format!(
                "must have 6 fields (seconds first), found {fields}"
            ));
        }
        let schedule = cron::Schedule::from_str(expression)
            .map_err(|error| format!("invalid cron expression: {error}"))?;
        Ok(CronSchedule {
            expression: expression.to_owned(),
            schedule,
        })
    }
}

impl TryFrom<String> for CronSchedule {
    type Error = String;

    fn try_from(expression: String) -> Result<Self, String> {
        expression.parse()
    }
}

impl From<CronSchedule> for String {
    fn from(cron: CronSchedule) -> String {
        cron.expression
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    #[serde(deserialize_with = "socket_address")]
    pub listen: SocketAddr,
    /// When set, every endpoint but `/healthz` requires `Authorization: Bearer <token>`. Required
    /// to listen on anything but a loopback address: the listener can redrive and purge rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<AdminToken>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            token: None,
        }
    }
}

/// Shortest `admin.token` accepted: long enough not to be guessed over the network.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// `admin.listen`, with a message that shows the expected form.
fn socket_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    String::deserialize(deserializer)?
        .parse()
        .map_err(|_| serde::de::Error::custom("must be an address such as 127.0.0.1:9464"))
}

impl AdminConfig {
    /// The token is usable as a bearer token, and a non-loopback address has one.
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(token) = &self.token {
            let usable = token.0.len() >= MIN_ADMIN_TOKEN_CHARS
                && token.0.bytes().all(|b| b.is_ascii_graphic());
            if !usable {
                return Err(ConfigError::key(
                    "admin.token",
                    format!(
                        "must be at least {MIN_ADMIN_TOKEN_CHARS} visible ASCII characters, \
                         without spaces"
                    ),
                ));
            }
        } else if !self.listen.ip().is_loopback() {
            return Err(ConfigError::key(
                "admin.listen",
                "is not a loopback address, and the admin listener can redrive and purge rows: \
                 set admin.token (or OUTBOX_ADMIN_TOKEN) to require it as a bearer token, or \
                 listen on 127.0.0.1",
            ));
        }
        Ok(())
    }
}

/// The admin listener's bearer token. Its `Debug` shows a mask, so it cannot reach a log line
/// through a printed configuration; `config print` masks it as a key naming a token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn new(token: impl Into<String>) -> Self {
        AdminToken(token.into())
    }

    /// The token itself, to compare or to send; never to print.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminToken({MASK})")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    /// librdkafka properties passed through as they are (`"security.protocol" = "SASL_SSL"`,
    /// `"sasl.password" = "…"`), so TLS and SASL need no code here. Not `bootstrap.servers`,
    /// `enable.idempotence` or `acks`: the producer is always idempotent with `acks = all`.
    #[serde(skip_serializing_if = "KafkaClientSettings::is_empty")]
    pub client: KafkaClientSettings,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            bootstrap_servers: "127.0.0.1:9092".to_owned(),
            client: KafkaClientSettings::default(),
        }
    }
}

/// The properties the host sets itself, which `[kafka.client]` may not.
const KAFKA_HOST_PROPERTIES: [&str; 3] = ["bootstrap.servers", "enable.idempotence", "acks"];

impl KafkaConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(ConfigError::key(
                "kafka.bootstrap_servers",
                "must name at least one broker (host:port)",
            ));
        }
        if let Some(key) = self
            .client
            .0
            .keys()
            .find(|key| KAFKA_HOST_PROPERTIES.contains(&key.as_str()))
        {
            return Err(ConfigError::key(
                format!("kafka.client.{key}"),
                "is set by the host: use kafka.bootstrap_servers; the producer is always \
                 idempotent with acks = all",
            ));
        }
        Ok(())
    }
}

/// `[kafka.client]`: property → value, numbers and booleans read as librdkafka's text. Its `Debug`
/// shows the properties only, as values may be passwords.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KafkaClientSettings(BTreeMap<String, ClientValue>);

impl KafkaClientSettings {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each property with its value as librdkafka reads it.
    pub fn properties(&self) -> impl Iterator<Item = (&str, String)> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_str(), value.to_string()))
    }
}

impl std::fmt::Debug for KafkaClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// One `[kafka.client]` value: librdkafka takes text, TOML may give a number or a boolean.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ClientValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
}

impl std::fmt::Display for ClientValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientValue::Text(text) => f.write_str(text),
            ClientValue::Integer(number) => write!(f, "{number}"),
            ClientValue::Float(number) => write!(f, "{number}"),
            ClientValue::Boolean(flag) => write!(f, "{flag}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `outbox_host=debug`; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".to_owned(),
        }
    }
}

/// A configuration that cannot be used. The message names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path} is not valid TOML{}: {message}", line.map(|n| format!(" (line {n})")).unwrap_or_default())]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    /// `variable` names the environment variable the value came from, when it did; else `file`
    /// the configuration file it came from, when there was one.
    #[error("{}{message}", source_of(key, variable.as_deref(), file.as_deref()))]
    Key {
        key: String,
        variable: Option<String>,
        file: Option<PathBuf>,
        message: String,
    },
}

fn source_of(key: &str, variable: Option<&str>, file: Option<&Path>) -> String {
    match (variable, file) {
        (Some(variable), _) => {
            format!("environment variable {variable} (configuration key {key}): ")
        }
        (None, Some(file)) => format!("configuration key {key} in {}: ", file.display()),
        (None, None) => format!("configuration key {key}: "),
    }
}

impl ConfigError {
    pub(crate) fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Key {
            key: key.into(),
            variable: None,
            file: None,
            message: message.into(),
        }
    }

    /// Names where the offending key was set: the environment variable, if one set it, else the
    /// configuration file. That is where the operator has to look.
    fn naming_source(self, variables: &BTreeMap<String, String>, file: Option<&Path>) -> Self {
        match self {
            ConfigError::Key {
                key,
                variable: None,
                file: None,
                message,
            } => {
                let variable = variables.get(&key).cloned();
                ConfigError::Key {
                    file: file.filter(|_| variable.is_none()).map(Path::to_owned),
                    variable,
                    key,
                    message,
                }
            }
            other => other,
        }
    }
}

/// The sections `OUTBOX_<SECTION>_<KEY>` may name.
const SECTIONS: &[&str] = &[
    "database",
    "plugins",
    "relay",
    "cleanup",
    "maintenance",
    "admin",
    "kafka",
    "log",
];
const ENV_PREFIX: &str = "OUTBOX_";

impl Config {
    /// Reads `file` (if any), applies the process environment, and validates the result.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(file, std::env::vars())
    }

    /// As [`Config::load`], with the environment given, so callers and tests control it.
    pub fn load_with_env(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(path) => read_table(path)?,
            None => toml::Table::new(),
        };
        let (mut database_url, mut xdg_state_home, mut home) = (None, None, None);
        // Key → the environment variable that set it.
        let mut variables = BTreeMap::new();
        // Key → the variable's text, where it was read as a TOML literal other than a string.
        let mut literals = BTreeMap::new();
        for (name, value) in env {
            match name.as_str() {
                "DATABASE_URL" => database_url = Some(value),
                "XDG_STATE_HOME" => xdg_state_home = Some(value),
                "HOME" => home = Some(value),
                _ => {
                    if let Some(rest) = name.strip_prefix(ENV_PREFIX) {
                        let (key, literal) = apply_env_override(&mut table, &name, rest, &value)?;
                        if literal {
                            literals.insert(key.clone(), value);
                        }
                        variables.insert(key, name);
                    }
                }
            }
        }
        let mut config = loop {
            match serde_path_to_error::deserialize::<_, Config>(table.clone()) {
                Ok(config) => break config,
                Err(error) => {
                    let key = error.path().to_string();
                    // `OUTBOX_RELAY_NODE_ID=42` reads as a number; a key that wants text gets the
                    // variable's text instead.
                    if let Some(text) = literals.remove(&key)
                        && let Some((section, name)) = key.split_once('.')
                        && let Some(toml::Value::Table(section)) = table.get_mut(section)
                    {
                        section.insert(name.to_owned(), toml::Value::String(text));
                        continue;
                    }
                    return Err(
                        ConfigError::key(key, value_free(error.into_inner().message()))
                            .naming_source(&variables, file),
                    );
                }
            }
        };
        if config.database.url.is_none() && database_url.is_some() {
            config.database.url = database_url;
            variables.insert("database.url".to_owned(), "DATABASE_URL".to_owned());
        }
        if config.plugins.state_dir.is_none() {
            config.plugins.state_dir =
                default_state_dir(xdg_state_home.as_deref(), home.as_deref());
        }
        config
            .validate()
            .map_err(|error| error.naming_source(&variables, file))?;
        Ok(config)
    }

    pub fn database_url(&self) -> &str {
        self.database
            .url
            .as_deref()
            .unwrap_or(database::DEFAULT_URL)
    }

    /// The rules a parsed value alone cannot carry (ranges, keys that depend on each other), one
    /// section at a time. [`crate::service::start`] checks them again, however the configuration
    /// was built.
    pub fn validate(&self) -> Result<(), ConfigError> {
        database::connect_options(self.database_url())
            .map_err(|error| ConfigError::key("database.url", mask_secrets(&error.to_string())))?;
        at_least_one(
            "database.max_connections",
            u64::from(self.database.max_connections),
        )?;
        self.plugins.validate()?;
        self.relay.validate()?;
        for (destination_type, policy) in &self.destinations {
            let section = format!("destinations.{destination_type}");
            crate::destination_type::validate(destination_type).map_err(|_| {
                ConfigError::key(
                    &section,
                    "is not a destination type: must match ^[A-Za-z0-9_-]{1,32}$",
                )
            })?;
            let max_section = if policy.backoff_max_delay.is_some() {
                section.as_str()
            } else {
                "relay"
            };
            policy
                .over(self.relay.delivery())
                .validate(&section, max_section)?;
        }
        at_least_one(
            "cleanup.cleanup_batch_size",
            u64::from(self.cleanup.cleanup_batch_size),
        )?;
        self.admin.validate()?;
        if let Some(kafka) = &self.kafka {
            kafka.validate()?;
        }
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|error| ConfigError::key("log.level", error.to_string()))?;
        Ok(())
    }

    /// The effective configuration as TOML, with every password masked (see `mask_secrets`).
    pub fn to_masked_toml(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = Some(self.database_url().to_owned());
        let text = toml::to_string_pretty(&shown).expect("the configuration always serializes");
        text.lines().map(|line| mask_secrets(line) + "\n").collect()
    }
}

/// Where the host keeps its own state when `plugins.state_dir` is not set, following the XDG base
/// directory rules: `$XDG_STATE_HOME/outbox-host` (only an absolute path counts), else
/// `$HOME/.local/state/outbox-host`; `None` without either.
pub fn default_state_dir(xdg_state_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    const NAME: &str = "outbox-host";
    let absolute = |value: Option<&str>| value.map(PathBuf::from).filter(|path| path.is_absolute());
    absolute(xdg_state_home)
        .map(|state| state.join(NAME))
        .or_else(|| absolute(home).map(|home| home.join(".local/state").join(NAME)))
}

/// Whether `path` is `dir` or lies below it, after making both absolute, resolving symbolic links
/// in the part of each that exists, and `.` and `..` in the rest.
pub(crate) fn path_is_within(path: &Path, dir: &Path) -> bool {
    resolved(path).starts_with(resolved(dir))
}

fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut lexical = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    lexical
        .ancestors()
        .find_map(|ancestor| {
            let canonical = ancestor.canonicalize().ok()?;
            Some(canonical.join(lexical.strip_prefix(ancestor).ok()?))
        })
        .unwrap_or(lexical)
}

/// A parser's complaint without the offending value: serde's messages quote it (`invalid type:
/// string "…", expected u32`, `unknown variant `…``), and the value may be a secret. Only what was
/// expected is kept of those; other messages name keys and syntax, never values.
pub(crate) fn value_free(message: &str) -> String {
    let quotes_the_value = ["invalid type", "invalid value", "unknown variant"]
        .iter()
        .any(|prefix| message.starts_with(prefix));
    if !quotes_the_value {
        return message.trim_end().to_owned();
    }
    match message.split_once(", expected ") {
        Some((_, expected)) => format!("invalid value, expected {expected}"),
        None => "invalid value".to_owned(),
    }
}

fn at_least_one(key: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::key(key, "must be at least 1"));
    }
    Ok(())
}

fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Durations are written in milliseconds, under keys ending in `_ms`, and held as [`Duration`].
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(super::millis_of(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// As [`millis`], for a key that may be unset.
mod optional_millis {
    use serde::{Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => super::millis::serialize(duration, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::millis::deserialize(deserializer).map(Some)
    }
}

fn read_table(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|error| ConfigError::Syntax {
        path: path.to_owned(),
        line: error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1),
        message: value_free(error.message()),
    })
}

/// `OUTBOX_RELAY_BATCH_SIZE=500` sets `relay.batch_size` (the key it returns). The value is read as a
/// TOML literal when it is one (`500`, `false`; then it also returns `true`), else as text, so
/// `OUTBOX_DATABASE_SCHEMA=messaging` needs no quotes.
fn apply_env_override(
    table: &mut toml::Table,
    name: &str,
    rest: &str,
    value: &str,
) -> Result<(String, bool), ConfigError> {
    let lower = rest.to_ascii_lowercase();
    let Some((section, key)) = lower
        .split_once('_')
        .filter(|(section, key)| SECTIONS.contains(section) && !key.is_empty())
    else {
        return Err(ConfigError::key(
            name,
            "is not a known configuration key (OUTBOX_<SECTION>_<KEY>)",
        ));
    };
    let parsed = toml::from_str::<BTreeMap<String, toml::Value>>(&format!("v = {value}"))
        .ok()
        .and_then(|mut literal| literal.remove("v"))
        .filter(|literal| !matches!(literal, toml::Value::Table(_)))
        .unwrap_or_else(|| toml::Value::String(value.to_owned()));
    let literal = !parsed.is_str();
    let section_table = table
        .entry(section)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| ConfigError::key(section, "must be a table"))?;
    section_table.insert(key.to_owned(), parsed);
    Ok((format!("{section}.{key}"), literal))
}

/// The mask that replaces a secret.
const MASK: &str = "****";

/// One line of text with every password masked: the password of each URL's user info
/// (`postgres://user:secret@host` → `postgres://user:****@host`), the value of each query
/// parameter whose name contains `password` (any case: `?password=`, `&sslpassword=`), and the whole
/// value of a TOML `key = value` line whose key names a password, secret or token (a `[kafka]`
/// SASL password, say). Where a boundary is unclear it masks more, never less.
fn mask_secrets(line: &str) -> String {
    if let Some((key, _value)) = line.split_once(" = ")
        && names_a_secret(key)
    {
        return format!("{key} = \"{MASK}\"");
    }
    mask_query_passwords(&mask_userinfo_passwords(line))
}

fn names_a_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    // `key`, `jaas` and `oauthbearer` for librdkafka's `ssl.key.pem`, `sasl.jaas.config` and
    // `sasl.oauthbearer.config`, which hold credentials under other names.
    ["password", "secret", "token", "key", "jaas", "oauthbearer"]
        .iter()
        .any(|word| key.contains(word))
}

fn mask_userinfo_passwords(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (before, after) = rest.split_at(start + 3);
        masked.push_str(before);
        // The user info ends at the authority's last `@`; its password starts at its first `:`.
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let Some(at) = after[..authority_end].rfind('@') else {
            rest = after;
            continue;
        };
        let userinfo = &after[..at];
        match userinfo.find(':') {
            Some(colon) => {
                masked.push_str(&userinfo[..=colon]);
                masked.push_str(MASK);
            }
            None => masked.push_str(userinfo),
        }
        masked.push('@');
        rest = &after[at + 1..];
    }
    masked.push_str(rest);
    masked
}

fn mask_query_passwords(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(equals) = rest.find('=') {
        let (before, after) = rest.split_at(equals + 1);
        masked.push_str(before);
        rest = after;
        let name = before[..equals]
            .rfind(['?', '&'])
            .map(|start| &before[start + 1..equals]);
        if !name.is_some_and(|name| name.to_ascii_lowercase().contains("password")) {
            continue;
        }
        // The value runs to the next parameter or fragment; at the end of a line, up to the
        // closing quote of a TOML string.
        let end = after
            .find(['&', '#'])
            .unwrap_or_else(|| after.len() - usize::from(after.ends_with('"')));
        masked.push_str(MASK);
        rest = &after[end..];
    }
    masked.push_str(rest);
    masked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file_text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("outbox-config-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("outbox.toml");
        std::fs::write(&path, file_text).unwrap();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let config = Config::load_with_env(Some(&path), env);
        std::fs::remove_dir_all(&dir).unwrap();
        config
    }

    fn key_of(error: ConfigError) -> String {
        match error {
            ConfigError::Key { key, .. } => key,
            other => panic!("expected a key error, got {other}"),
        }
    }

    #[test]
    fn an_empty_file_gives_the_seed_defaults_but_two_relay_loops() {
        let config = load("", &[]).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.relay.batch_size, 50);
        assert_eq!(config.relay.instances, 2);
        assert_eq!(config.cleanup.cleanup_batch_size, 1000);
        assert_eq!(config.database_url(), database::DEFAULT_URL);
    }

    #[test]
    fn an_unknown_key_is_named_with_its_section() {
        let error = load("[relay]\nbatchsize = 5\n", &[]).unwrap_err();
        assert_eq!(key_of(error), "relay.batchsize");
    }

    #[test]
    fn a_bad_value_is_named() {
        assert_eq!(
            key_of(load("[relay]\nstrategy = \"PUSH\"\n", &[]).unwrap_err()),
            "relay.strategy"
        );
        assert_eq!(
            key_of(load("[relay]\nbatch_size = 0\n", &[]).unwrap_err()),
            "relay.batch_size"
        );
        assert_eq!(
            key_of(load("[database]\nschema = \"select\"\n", &[]).unwrap_err()),
            "database.schema"
        );
        assert_eq!(
            key_of(load("[maintenance]\ncleanup_cron = \"0 */6 * * *\"\n", &[]).unwrap_err()),
            "maintenance.cleanup_cron"
        );
    }

    #[test]
    fn a_destinations_section_sets_a_type_s_policy_over_the_relay_s() {
        let config = load(
            "[relay]\nbreaker_threshold = 3\n\n[destinations.WEBHOOK]\nmax_attempts = 5\n\
             rate_limit_per_second = 20\nbreaker_cool_down_ms = 2000\n",
            &[],
        )
        .unwrap();
        let webhook = config.destinations["WEBHOOK"].over(config.relay.delivery());
        assert_eq!(webhook.max_attempts, 5);
        assert_eq!(webhook.rate_limit_per_second, 20.0);
        assert_eq!(webhook.breaker_cool_down, Duration::from_secs(2));
        assert_eq!(webhook.breaker_threshold, 3, "unset: the relay's");
        assert!(config.to_masked_toml().contains("[destinations.WEBHOOK]"));
    }

    #[test]
    fn a_bad_destinations_key_or_value_is_named() {
        let cases = [
            (
                "[destinations.WEBHOOK]\nbreaker_treshold = 3\n",
                "destinations.WEBHOOK.breaker_treshold",
            ),
            (
                "[destinations.\"WEB HOOK\"]\nmax_attempts = 3\n",
                "destinations.WEB HOOK",
            ),
            (
                "[destinations.WEBHOOK]\nmax_attempts = 0\n",
                "destinations.WEBHOOK.max_attempts",
            ),
            (
                "[destinations.WEBHOOK]\nbreaker_window_ms = 0\n",
                "destinations.WEBHOOK.breaker_window_ms",
            ),
            (
                "[destinations.WEBHOOK]\nrate_limit_per_second = 1e-9\n",
                "destinations.WEBHOOK.rate_limit_per_second",
            ),
            (
                "[destinations.WEBHOOK]\nrate_limit_per_second = -1\n",
                "destinations.WEBHOOK.rate_limit_per_second",
            ),
            (
                "[destinations.WEBHOOK]\nbackoff_base_delay_ms = 600000\n",
                "destinations.WEBHOOK.backoff_base_delay_ms",
            ),
            ("[relay]\nmax_attempts = 0\n", "relay.max_attempts"),
        ];
        for (text, key) in cases {
            let error = load(text, &[]).unwrap_err();
            let message = error.to_string();
            let named = match error {
                ConfigError::Key { key, .. } => key,
                other => panic!("{text}: expected a key error, got {other}"),
            };
            assert!(
                named == key
                    || (named == "destinations.WEBHOOK"
                        && message.contains(key.rsplit('.').next().unwrap())),
                "{text}: named {named} ({message}), expected {key}"
            );
        }
        let message = load(
            "[destinations.WEBHOOK]\nbackoff_base_delay_ms = 600000\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(message.contains("relay.backoff_max_delay_ms"), "{message}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let config = load(
            "[relay]\nbatch_size = 5\n",
            &[
                ("OUTBOX_RELAY_BATCH_SIZE", "60"),
                ("OUTBOX_DATABASE_SCHEMA", "messaging"),
                ("OUTBOX_DATABASE_MIGRATE", "false"),
            ],
        )
        .unwrap();
        assert_eq!(config.relay.batch_size, 60);
        assert_eq!(
            config.database.schema.as_ref().map(SchemaName::as_str),
            Some("messaging")
        );
        assert!(!config.database.migrate);
    }

    #[test]
    fn an_unknown_environment_key_is_named() {
        let error = load("", &[("OUTBOX_RELAY_BATCHSIZE", "5")]).unwrap_err();
        assert_eq!(key_of(error), "relay.batchsize");
        let error = load("", &[("OUTBOX_NOPE", "5")]).unwrap_err();
        assert_eq!(key_of(error), "OUTBOX_NOPE");
    }

    #[test]
    fn a_bad_value_from_the_environment_names_the_variable_and_the_key() {
        let error = message_of(load("", &[("OUTBOX_RELAY_BATCH_SIZE", "abc")]));
        assert!(
            error.starts_with(
                "environment variable OUTBOX_RELAY_BATCH_SIZE (configuration key relay.batch_size): "
            ),
            "{error}"
        );
        let error = message_of(load("", &[("OUTBOX_RELAY_BATCH_SIZE", "0")]));
        assert!(error.contains("OUTBOX_RELAY_BATCH_SIZE"), "{error}");
        let error = message_of(load("", &[("DATABASE_URL", "postgress://db/x")]));
        assert!(
            error.starts_with("environment variable DATABASE_URL (configuration key database.url)"),
            "{error}"
        );
        let error = message_of(load("[relay]\nbatch_size = 0\n", &[]));
        assert!(
            error.starts_with("configuration key relay.batch_size in /")
                && error.contains("outbox.toml: must be at least 1"),
            "{error}"
        );
    }

    #[test]
    fn database_url_comes_from_the_file_then_database_url_then_the_default() {
        let from_env = load("", &[("DATABASE_URL", "postgres://a@h/d")]).unwrap();
        assert_eq!(from_env.database_url(), "postgres://a@h/d");
        let from_file = load(
            "[database]\nurl = \"postgres://f@h/d\"\n",
            &[("DATABASE_URL", "postgres://a@h/d")],
        )
        .unwrap();
        assert_eq!(from_file.database_url(), "postgres://f@h/d");
    }

    #[test]
    fn an_environment_value_that_looks_like_a_number_is_text_where_the_key_wants_text() {
        let config = load(
            "",
            &[
                ("OUTBOX_RELAY_NODE_ID", "42"),
                ("OUTBOX_ADMIN_TOKEN", "12345678901234567"),
                ("OUTBOX_RELAY_BATCH_SIZE", "42"),
            ],
        )
        .unwrap();
        assert_eq!(config.relay.node_id.as_deref(), Some("42"));
        assert_eq!(
            config.admin.token.as_ref().map(AdminToken::expose),
            Some("12345678901234567")
        );
        assert_eq!(config.relay.batch_size, 42);
        let error = message_of(load("", &[("OUTBOX_RELAY_BATCH_SIZE", "4.5")]));
        assert!(error.contains("OUTBOX_RELAY_BATCH_SIZE"), "{error}");
    }

    #[test]
    fn a_zero_unresolvable_delay_is_refused() {
        let error = message_of(load("[relay]\nunresolvable_delay_ms = 0\n", &[]));
        assert!(error.contains("relay.unresolvable_delay_ms"), "{error}");
        assert!(error.ends_with("must be at least 1"), "{error}");
    }

    #[test]
    fn a_backoff_base_above_its_maximum_is_refused() {
        let text = "[relay]\nbackoff_base_delay_ms = 5000\nbackoff_max_delay_ms = 1000\n";
        assert_eq!(
            key_of(load(text, &[]).unwrap_err()),
            "relay.backoff_base_delay_ms"
        );
    }

    #[test]
    fn max_in_flight_below_the_batch_size_is_refused() {
        let text = "[relay]\nbatch_size = 100\nmax_in_flight = 64\n";
        assert_eq!(key_of(load(text, &[]).unwrap_err()), "relay.max_in_flight");
        let text = "[relay]\nbatch_size = 64\nmax_in_flight = 64\n";
        assert!(load(text, &[]).is_ok());
    }

    #[test]
    fn a_plugin_call_may_use_two_thirds_of_the_lease() {
        let config = load("[relay]\nlease_timeout_ms = 1500\n", &[]).unwrap();
        assert_eq!(config.relay.max_call_time(), Duration::from_millis(1000));
        assert_eq!(
            Config::default().relay.max_call_time(),
            Duration::from_millis(crate::plugins::Limits::MAX_TIMEOUT_MS),
            "the default lease leaves the longest time limit a manifest may ask"
        );
    }

    #[test]
    fn durations_are_read_and_printed_in_milliseconds() {
        let config = load("[relay]\npolling_interval_ms = 250\n", &[]).unwrap();
        assert_eq!(config.relay.polling_interval, Duration::from_millis(250));
        assert!(
            config
                .to_masked_toml()
                .contains("polling_interval_ms = 250\n"),
            "{}",
            config.to_masked_toml()
        );
    }

    #[test]
    fn a_value_set_in_code_is_checked_by_validate() {
        let mut config = Config::default();
        config.relay.batch_size = 0;
        assert_eq!(key_of(config.validate().unwrap_err()), "relay.batch_size");
    }

    /// Planted in every place a secret may hide; it must never come back in an error or a print.
    const MARKER: &str = "s3cr3tMarker";

    fn message_of(result: Result<Config, ConfigError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_key_without_quoting_it() {
        let error = message_of(load(&format!("[relay]\nstrategy = \"{MARKER}\"\n"), &[]));
        assert!(error.contains("relay.strategy"), "{error}");
        assert!(!error.contains(MARKER), "{error}");
        let error = message_of(load("", &[("OUTBOX_RELAY_BATCH_SIZE", MARKER)]));
        assert!(error.contains("relay.batch_size"), "{error}");
        assert!(!error.contains(MARKER), "{error}");
        let error = message_of(load(&format!("[admin]\nlisten = [\"{MARKER}\"]\n"), &[]));
        assert!(error.contains("admin.listen"), "{error}");
        assert!(!error.contains(MARKER), "{error}");
    }

    #[test]
    fn an_oversized_integer_is_rejected_without_quoting_it() {
        let error = message_of(load("[relay]\nbatch_size = 98765432109876543210\n", &[]));
        assert!(!error.contains("98765432109876543210"), "{error}");
        let error = message_of(load("[relay]\nbatch_size = 9876543210\n", &[]));
        assert!(error.contains("relay.batch_size"), "{error}");
        assert!(!error.contains("9876543210"), "{error}");
    }

    #[test]
    fn a_bad_database_url_is_named_without_its_password() {
        let url = format!("postgres://app:{MARKER}@db:notaport/x?password={MARKER}");
        let error = load("", &[("OUTBOX_DATABASE_URL", url.as_str())]).unwrap_err();
        let message = error.to_string();
        assert_eq!(key_of(error), "database.url");
        assert!(!message.contains(MARKER), "{message}");
    }

    #[test]
    fn the_state_dir_defaults_to_xdg_state_home_then_home() {
        let from_xdg = load("", &[("XDG_STATE_HOME", "/xdg/state"), ("HOME", "/home/u")]).unwrap();
        assert_eq!(
            from_xdg.plugins.state_dir.as_deref(),
            Some(Path::new("/xdg/state/outbox-host"))
        );
        let from_home = load("", &[("HOME", "/home/u")]).unwrap();
        assert_eq!(
            from_home.plugins.cache_dir().as_deref(),
            Some(Path::new("/home/u/.local/state/outbox-host/cache"))
        );
        let relative_xdg = load("", &[("XDG_STATE_HOME", "state"), ("HOME", "/home/u")]).unwrap();
        assert_eq!(
            relative_xdg.plugins.state_dir.as_deref(),
            Some(Path::new("/home/u/.local/state/outbox-host"))
        );
        let neither = load("", &[]).unwrap();
        assert_eq!(neither.plugins.cache_dir(), None);
    }

    #[test]
    fn the_default_cache_dir_is_not_under_the_plugins_dir() {
        let config = load(
            "[plugins]\ndir = \"/srv/plugins\"\n",
            &[("HOME", "/home/u")],
        )
        .unwrap();
        let cache_dir = config.plugins.cache_dir().unwrap();
        assert!(
            !path_is_within(&cache_dir, &config.plugins.dir),
            "{cache_dir:?}"
        );
    }

    #[test]
    fn a_cache_dir_inside_the_plugins_dir_is_refused() {
        for cache_dir in ["./plugins/.cache", "plugins", "./x/../plugins/deep/cache"] {
            let error =
                load(&format!("[plugins]\ncache_dir = \"{cache_dir}\"\n"), &[]).unwrap_err();
            assert_eq!(key_of(error), "plugins.cache_dir", "{cache_dir}");
        }
        let error = load("[plugins]\nstate_dir = \"plugins/state\"\n", &[]).unwrap_err();
        assert_eq!(key_of(error), "plugins.state_dir");
        assert!(load("[plugins]\ncache_dir = \"./plugins-cache\"\n", &[]).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn a_cache_dir_reaching_the_plugins_dir_through_a_symbolic_link_is_refused() {
        let root =
            std::env::temp_dir().join(format!("outbox-config-link-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(root.join("plugins")).unwrap();
        std::os::unix::fs::symlink(root.join("plugins"), root.join("link")).unwrap();
        let text = format!(
            "[plugins]\ndir = {:?}\ncache_dir = {:?}\n",
            root.join("plugins"),
            root.join("link/cache")
        );
        let result = load(&text, &[]);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(key_of(result.unwrap_err()), "plugins.cache_dir");
    }

    #[test]
    fn masking_hides_user_info_passwords_and_password_parameters() {
        for (text, shown) in [
            ("postgres://app:pw@db/x", "postgres://app:****@db/x"),
            (
                "postgres://app:p@ss w@db:5432",
                "postgres://app:****@db:5432",
            ),
            (
                "postgres://app@db/x?password=pw",
                "postgres://app@db/x?password=****",
            ),
            (
                "postgres://db/x?sslmode=require&PassWord=pw&a=b",
                "postgres://db/x?sslmode=require&PassWord=****&a=b",
            ),
            (
                "postgres://db/x?sslpassword=pw#f",
                "postgres://db/x?sslpassword=****#f",
            ),
            (
                "sasl://u:a@h1:9092,sasl://v:b@h2:9092",
                "sasl://u:****@h1:9092,sasl://v:****@h2:9092",
            ),
            (
                "url = \"postgres://db/x?password=p\\\"w\"",
                "url = \"postgres://db/x?password=****\"",
            ),
            ("sasl_password = \"pw\"", "sasl_password = \"****\""),
            (
                "postgres://app@db/x?user=password",
                "postgres://app@db/x?user=password",
            ),
        ] {
            assert_eq!(mask_secrets(text), shown, "{text}");
        }
    }

    #[test]
    fn printing_masks_a_password_parameter_and_kafka_secrets() {
        let config = load(
            &format!(
                "[database]\nurl = \"postgres://app@db/x?password={MARKER}\"\n\
                 [kafka]\nbootstrap_servers = \"sasl_ssl://svc:{MARKER}@broker:9093?PassWord={MARKER}\"\n"
            ),
            &[],
        )
        .unwrap();
        let printed = config.to_masked_toml();
        assert!(printed.contains("password=****"), "{printed}");
        assert!(
            printed.contains("sasl_ssl://svc:****@broker:9093?PassWord=****"),
            "{printed}"
        );
        assert!(!printed.contains(MARKER), "{printed}");
    }

    #[test]
    fn kafka_client_credentials_are_masked_in_print_and_debug() {
        let config = load(
            &format!(
                "[kafka]\nbootstrap_servers = \"broker:9093\"\n[kafka.client]\n\
                 \"security.protocol\" = \"SASL_SSL\"\n\"sasl.password\" = \"{MARKER}\"\n\
                 \"ssl.key.pem\" = \"{MARKER}\"\n\"sasl.jaas.config\" = \"{MARKER}\"\n\
                 \"linger.ms\" = 5\n"
            ),
            &[],
        )
        .unwrap();
        let kafka = config.kafka.as_ref().unwrap();
        let properties: Vec<_> = kafka.client.properties().collect();
        assert!(properties.contains(&("linger.ms", "5".to_owned())));
        let printed = config.to_masked_toml();
        assert!(
            printed.contains("\"security.protocol\" = \"SASL_SSL\""),
            "{printed}"
        );
        assert!(!printed.contains(MARKER), "{printed}");
        let debug = format!("{config:?}");
        assert!(!debug.contains(MARKER), "{debug}");
    }

    #[test]
    fn kafka_client_may_not_set_what_the_host_sets() {
        for property in ["bootstrap.servers", "enable.idempotence", "acks"] {
            let text = format!("[kafka]\n[kafka.client]\n\"{property}\" = \"x\"\n");
            assert_eq!(
                key_of(load(&text, &[]).unwrap_err()),
                format!("kafka.client.{property}")
            );
        }
    }

    #[test]
    fn printing_masks_the_password_of_database_url_from_the_environment() {
        let url = format!("postgres://app:{MARKER}@db/x");
        let printed = load("", &[("DATABASE_URL", url.as_str())])
            .unwrap()
            .to_masked_toml();
        assert!(printed.contains("postgres://app:****@db/x"), "{printed}");
        assert!(!printed.contains(MARKER), "{printed}");
    }

    #[test]
    fn a_non_loopback_admin_address_needs_a_token() {
        let error = load("[admin]\nlisten = \"0.0.0.0:9464\"\n", &[]).unwrap_err();
        let message = error.to_string();
        assert_eq!(key_of(error), "admin.listen");
        assert!(message.contains("set admin.token"), "{message}");
        let token = "0123456789abcdefXYZ";
        let config = load(
            "[admin]\nlisten = \"0.0.0.0:9464\"\n",
            &[("OUTBOX_ADMIN_TOKEN", token)],
        )
        .unwrap();
        assert_eq!(
            config.admin.token.as_ref().map(AdminToken::expose),
            Some(token)
        );
        assert!(load("[admin]\nlisten = \"[::1]:9464\"\n", &[]).is_ok());
    }

    #[test]
    fn a_short_or_spaced_admin_token_is_refused_without_quoting_it() {
        for token in ["short", "sixteen chars but spaced"] {
            let error = message_of(load("", &[("OUTBOX_ADMIN_TOKEN", token)]));
            assert!(
                error.contains("OUTBOX_ADMIN_TOKEN (configuration key admin.token)"),
                "{error}"
            );
            assert!(!error.contains(token), "{error}");
        }
    }

    #[test]
    fn the_admin_token_is_masked_in_print_and_debug() {
        let config = load(&format!("[admin]\ntoken = \"{MARKER}{MARKER}\"\n"), &[]).unwrap();
        let printed = config.to_masked_toml();
        assert!(printed.contains("token = \"****\""), "{printed}");
        assert!(!printed.contains(MARKER), "{printed}");
        let debug = format!("{config:?}");
        assert!(!debug.contains(MARKER), "{debug}");
    }

    #[test]
    fn printing_masks_the_password() {
        let config = load(
            "[database]\nurl = \"postgres://app:hunter2@db:5432/x\"\n",
            &[],
        )
        .unwrap();
        let printed = config.to_masked_toml();
        assert!(
            printed.contains("postgres://app:****@db:5432/x"),
            "{printed}"
        );
        assert!(!printed.contains("hunter2"));
    }
}
