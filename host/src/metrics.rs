//! The service's Prometheus metrics: one registry, filled by the relay, the maintenance jobs and the
//! plugin runtime, read by the admin endpoint.
//!
//! Dashboard-ready by construction: every per-type series exists at zero for each loaded destination
//! type before its first event, per-type metrics are labelled `destination_type` and per-plugin ones
//! `plugin` and `destination_type` (empty for an observer), and no label value is taken from a row
//! or a plugin unchecked: a destination type that is not well-formed is labelled `invalid`, and a
//! plugin's error types are bounded in number.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use tokio::sync::watch;

use crate::log_output;

use crate::error_type::HostErrorType;
use crate::plugins::PluginSet;
use crate::plugins::PluginState;
use crate::relay::HoldReason;
use crate::repository::{COUNTED_STATES, ClaimScopeFailure, OutboxState};

/// The one reason a relay turn fails: the database.
const CYCLE_FAILURE_DATABASE: &str = "database";
/// The label of a destination type that is not well-formed (it came from a row).
pub const INVALID_TYPE_LABEL: &str = "invalid";
/// The `error_type` label of a failure that named none.
pub const NO_ERROR_TYPE_LABEL: &str = "none";
/// The `error_type` label of error types past [`MAX_ERROR_TYPES`] for one destination type.
pub const OTHER_ERROR_TYPE_LABEL: &str = "other";
/// Distinct error types kept as labels per destination type: a plugin names its error types, so a
/// hostile one could otherwise make a series per failure.
pub const MAX_ERROR_TYPES: usize = 20;

/// What the relay recorded, over every destination type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeTotals {
    pub published: u64,
    /// Attempts that failed and were scheduled again.
    pub retried: u64,
    pub dead_lettered: u64,
    pub deferred: u64,
}

/// Cheap to clone; every clone records into the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    claimed: IntCounterVec,
    published: IntCounterVec,
    retried: IntCounterVec,
    dead_lettered: IntCounterVec,
    deferred: IntCounterVec,
    publish_duration: HistogramVec,
    in_flight: IntGauge,
    rows: IntGaugeVec,
    oldest_pending_age: GaugeVec,
    /// The error types labelled so far, per destination type.
    error_types: Mutex<HashMap<String, HashSet<String>>>,
    /// The plugin set in use, once the service watches one: its types get their series at zero.
    plugins: OnceLock<watch::Receiver<Arc<PluginSet>>>,
    listening: IntGauge,
    cycle_failures: IntCounterVec,
    claim_scope_failures: IntCounterVec,
    maintenance_runs: IntCounterVec,
    maintenance_rows: IntCounterVec,
    plugin_reloads: IntCounter,
    plugin_reload_failures: IntCounter,
    publish_panics: IntCounter,
    destination_held: IntCounterVec,
    breaker_openings: IntCounterVec,
    breakers_open: IntGaugeVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let by_type = &["destination_type"];
        let publish_duration = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "outbox_publish_duration_seconds",
                    "Time from calling a handler's publish to its result",
                )
                .buckets(vec![
                    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
                by_type,
            ),
        );
        let rows = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "outbox_rows",
                    "Rows by state and destination type, sampled when scraped",
                ),
                &["state", "destination_type"],
            ),
        );
        // Process-wide, as the log output is: every service's registry shows the same count.
        register(&registry, Ok(log_output::dropped_lines()));
        let oldest_pending_age = register(
            &registry,
            GaugeVec::new(
                Opts::new(
                    "outbox_oldest_pending_age_seconds",
                    "Seconds since the oldest due PENDING row of each destination type became due \
                     (0 when none waits), sampled when scraped",
                ),
                by_type,
            ),
        );
        let build_info = register(
            &registry,
            IntGaugeVec::new(
                Opts::new("outbox_build_info", "Always 1; the running host's version"),
                &["version"],
            ),
        );
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let cycle_failures = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "outbox_cycle_failures_total",
                    "Relay cycles that failed, by reason",
                ),
                &["reason"],
            ),
        );
        cycle_failures.with_label_values(&[CYCLE_FAILURE_DATABASE]);
        let by_type_and_error = &["destination_type", "error_type"];
        let inner = Inner {
            claimed: register(
                &registry,
                IntCounterVec::new(Opts::new("outbox_claimed_total", "Rows claimed"), by_type),
            ),
            published: register(
                &registry,
                IntCounterVec::new(
                    Opts::new("outbox_published_total", "Rows marked published"),
                    by_type,
                ),
            ),
            retried: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_retried_total",
                        "Rows scheduled for another attempt, by the failure's error type",
                    ),
                    by_type_and_error,
                ),
            ),
            dead_lettered: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_dead_lettered_total",
                        "Rows dead-lettered, by the failure's error type",
                    ),
                    by_type_and_error,
                ),
            ),
            deferred: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_deferred_total",
                        "Rows deferred (unresolvable, no handler, or held by a delivery policy)",
                    ),
                    by_type,
                ),
            ),
            publish_duration,
            in_flight: register(
                &registry,
                IntGauge::new("outbox_in_flight", "Publishes in flight"),
            ),
            rows,
            oldest_pending_age,
            error_types: Mutex::new(HashMap::new()),
            plugins: OnceLock::new(),
            listening: register(
                &registry,
                IntGauge::new(
                    "outbox_listen_connected",
                    "1 while LISTEN is connected, 0 while polling only",
                ),
            ),
            cycle_failures,
            claim_scope_failures: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_claim_scope_failures_total",
                        "Claim-scope calls that failed closed for their destination type, by reason",
                    ),
                    &["destination_type", "reason"],
                ),
            ),
            maintenance_runs: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_maintenance_runs_total",
                        "Maintenance runs by job and result",
                    ),
                    &["job", "result"],
                ),
            ),
            maintenance_rows: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_maintenance_rows_total",
                        "Rows reclaimed or deleted by maintenance",
                    ),
                    &["job", "table"],
                ),
            ),
            plugin_reloads: register(
                &registry,
                IntCounter::new("outbox_plugin_reloads_total", "Plugin directory reloads"),
            ),
            plugin_reload_failures: register(
                &registry,
                IntCounter::new(
                    "outbox_plugin_reload_failures_total",
                    "Plugin files that failed to load on a reload",
                ),
            ),
            publish_panics: register(
                &registry,
                IntCounter::new(
                    "outbox_publish_panics_total",
                    "Publish tasks that panicked inside the host; their rows are retried without spending an attempt",
                ),
            ),
            destination_held: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_destination_held_total",
                        "Rows deferred by a delivery policy before any call, attempt unspent, by reason \
                         (breaker_open, rate_limited, concurrency, too_many_destinations)",
                    ),
                    &["destination_type", "reason"],
                ),
            ),
            breaker_openings: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_breaker_openings_total",
                        "Circuit breakers opened (again after a failed probe, too)",
                    ),
                    by_type,
                ),
            ),
            breakers_open: register(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "outbox_breakers_open",
                        "Destinations whose circuit breaker is open or half-open on this node",
                    ),
                    by_type,
                ),
            ),
            registry,
        };
        Metrics {
            inner: Arc::new(inner),
        }
    }

    pub fn claimed(&self, destination_type: &str) {
        self.inner
            .claimed
            .with_label_values(&[type_label(destination_type)])
            .inc();
    }

    pub fn published(&self, destination_type: &str) {
        self.inner
            .published
            .with_label_values(&[type_label(destination_type)])
            .inc();
    }

    /// `error_type` as stored with the row (already a short token), or `None`.
    pub fn retried(&self, destination_type: &str, error_type: Option<&str>) {
        let destination_type = type_label(destination_type);
        let error_type = self.error_type_label(destination_type, error_type);
        self.inner
            .retried
            .with_label_values(&[destination_type, &error_type])
            .inc();
    }

    /// `error_type` as stored with the row (already a short token), or `None`.
    pub fn dead_lettered(&self, destination_type: &str, error_type: Option<&str>) {
        let destination_type = type_label(destination_type);
        let error_type = self.error_type_label(destination_type, error_type);
        self.inner
            .dead_lettered
            .with_label_values(&[destination_type, &error_type])
            .inc();
    }

    /// Rows dead-lettered for an invalid destination type, under one label rather than the value.
    pub fn dead_lettered_invalid(&self, rows: u64) {
        self.inner
            .dead_lettered
            .with_label_values(&[INVALID_TYPE_LABEL, HostErrorType::InvalidRow.as_str()])
            .inc_by(rows);
    }

    pub fn deferred(&self, destination_type: &str) {
        self.inner
            .deferred
            .with_label_values(&[type_label(destination_type)])
            .inc();
    }

    /// The first [`MAX_ERROR_TYPES`] error types of a destination type are labels of their own; later
    /// ones count as `other`.
    fn error_type_label(&self, destination_type: &str, error_type: Option<&str>) -> String {
        let Some(error_type) = error_type else {
            return NO_ERROR_TYPE_LABEL.to_owned();
        };
        let mut known = self
            .inner
            .error_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let seen = known.entry(destination_type.to_owned()).or_default();
        if seen.contains(error_type) || seen.len() < MAX_ERROR_TYPES {
            seen.insert(error_type.to_owned());
            error_type.to_owned()
        } else {
            OTHER_ERROR_TYPE_LABEL.to_owned()
        }
    }

    pub fn publish_duration(&self, destination_type: &str, seconds: f64) {
        self.inner
            .publish_duration
            .with_label_values(&[type_label(destination_type)])
            .observe(seconds);
    }

    pub fn in_flight(&self, delta: i64) {
        self.inner.in_flight.add(delta);
    }

    pub fn listening(&self, connected: bool) {
        self.inner.listening.set(i64::from(connected));
    }

    /// A relay turn failed because the database did not answer.
    pub fn cycle_failed(&self) {
        self.inner
            .cycle_failures
            .with_label_values(&[CYCLE_FAILURE_DATABASE])
            .inc();
    }

    pub fn claim_scope_failed(&self, destination_type: &str, reason: ClaimScopeFailure) {
        self.inner
            .claim_scope_failures
            .with_label_values(&[type_label(destination_type), reason.as_str()])
            .inc();
    }

    /// Creates a job's run counters at zero.
    pub fn maintenance_job(&self, job: &str) {
        for result in [RunResult::Ok, RunResult::Failed, RunResult::Skipped] {
            self.inner
                .maintenance_runs
                .with_label_values(&[job, result.as_str()]);
        }
    }

    pub fn maintenance_run(&self, job: &str, result: RunResult) {
        self.inner
            .maintenance_runs
            .with_label_values(&[job, result.as_str()])
            .inc();
    }

    pub fn maintenance_rows(&self, job: &str, table: &str, rows: u64) {
        self.inner
            .maintenance_rows
            .with_label_values(&[job, table])
            .inc_by(rows);
    }

    pub fn plugin_reload(&self, failures: u64) {
        self.inner.plugin_reloads.inc();
        self.inner.plugin_reload_failures.inc_by(failures);
    }

    /// A row held back by its destination's policy (`crate::relay` destinations).
    pub fn destination_held(&self, destination_type: &str, reason: HoldReason) {
        self.inner
            .destination_held
            .with_label_values(&[type_label(destination_type), reason.as_str()])
            .inc();
    }

    /// A breaker opened; `from_closed` unless a failed probe opened it again.
    pub fn breaker_opened(&self, destination_type: &str, from_closed: bool) {
        let destination_type = type_label(destination_type);
        self.inner
            .breaker_openings
            .with_label_values(&[destination_type])
            .inc();
        if from_closed {
            self.inner
                .breakers_open
                .with_label_values(&[destination_type])
                .inc();
        }
    }

    pub fn breaker_closed(&self, destination_type: &str) {
        self.inner
            .breakers_open
            .with_label_values(&[type_label(destination_type)])
            .dec();
    }

    pub fn publish_panicked(&self) {
        self.inner.publish_panics.inc();
    }

    /// The outcome counters summed over every destination type.
    pub fn outcome_totals(&self) -> OutcomeTotals {
        let sum = |counter: &IntCounterVec| -> u64 {
            counter
                .collect()
                .iter()
                .flat_map(|family| family.get_metric())
                .map(|metric| metric.get_counter().get_value() as u64)
                .sum()
        };
        OutcomeTotals {
            published: sum(&self.inner.published),
            retried: sum(&self.inner.retried),
            dead_lettered: sum(&self.inner.dead_lettered),
            deferred: sum(&self.inner.deferred),
        }
    }

    /// Replaces the sampled row counts: (state, destination type, rows), for the states
    /// [`OutboxRepository::count_by_state`](crate::repository::OutboxRepository::count_by_state)
    /// counts.
    pub fn set_rows(&self, counts: &[(OutboxState, String, i64)]) {
        self.inner.rows.reset();
        for (state, destination_type, count) in counts {
            if COUNTED_STATES.contains(state) {
                self.inner
                    .rows
                    .with_label_values(&[state.as_str(), type_label(destination_type)])
                    .add(*count);
            }
        }
    }

    /// Replaces the sampled ages of the oldest due PENDING row: (destination type, seconds).
    pub fn set_oldest_pending_age(&self, ages: &[(String, f64)]) {
        self.inner.oldest_pending_age.reset();
        for (destination_type, seconds) in ages {
            let gauge = self
                .inner
                .oldest_pending_age
                .with_label_values(&[type_label(destination_type)]);
            gauge.set(gauge.get().max(*seconds));
        }
    }

    /// Reports per-plugin call counts and plugins by state from whatever set is current when scraped,
    /// and gives every loaded destination type its series at zero.
    pub fn watch_plugins(&self, plugins: watch::Receiver<Arc<PluginSet>>) {
        let collector = PluginCollector {
            plugins: RwLock::new(plugins.clone()),
        };
        self.inner
            .registry
            .register(Box::new(collector))
            .expect("registered once");
        let _ = self.inner.plugins.set(plugins);
    }

    /// Creates, at zero, every per-type series of each loaded destination type that has none yet,
    /// so a dashboard shows 0 rather than "No data" before the first event.
    fn zero_loaded_types(&self) {
        let Some(plugins) = self.inner.plugins.get() else {
            return;
        };
        let set = plugins.borrow().clone();
        let inner = &self.inner;
        for handler in set.handlers() {
            let destination_type = type_label(handler.destination_type());
            for counter in [&inner.claimed, &inner.published, &inner.deferred] {
                counter.with_label_values(&[destination_type]);
            }
            for counter in [&inner.retried, &inner.dead_lettered] {
                counter.with_label_values(&[destination_type, NO_ERROR_TYPE_LABEL]);
            }
            for reason in ClaimScopeFailure::ALL {
                inner
                    .claim_scope_failures
                    .with_label_values(&[destination_type, reason.as_str()]);
            }
            for reason in HoldReason::ALL {
                inner
                    .destination_held
                    .with_label_values(&[destination_type, reason.as_str()]);
            }
            inner
                .breaker_openings
                .with_label_values(&[destination_type]);
            inner.breakers_open.with_label_values(&[destination_type]);
            inner
                .publish_duration
                .with_label_values(&[destination_type]);
            inner
                .oldest_pending_age
                .with_label_values(&[destination_type]);
            for state in COUNTED_STATES {
                inner
                    .rows
                    .with_label_values(&[state.as_str(), destination_type]);
            }
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.zero_loaded_types();
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.inner.registry.gather(), &mut buffer)
            .expect("text encoding cannot fail");
        String::from_utf8(buffer).expect("the text format is UTF-8")
    }
}

/// Plugin figures live in the plugins themselves (atomics updated on every call); this turns the
/// current set into metric families at scrape time, so a reloaded plugin starts from zero.
struct PluginCollector {
    plugins: RwLock<watch::Receiver<Arc<PluginSet>>>,
}

impl Collector for PluginCollector {
    /// Unchecked: its families appear and vanish with the plugins.
    fn desc(&self) -> Vec<&Desc> {
        Vec::new()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let set = self.plugins.read().expect("not poisoned").borrow().clone();
        let by_plugin = &["plugin", "destination_type"];
        let calls = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_calls_total",
                "Publish calls into each plugin (on-publish-completed for an observer)",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_call_errors_total",
                "Failed publish calls into each plugin, by error type",
            ),
            &["plugin", "destination_type", "error_type"],
        )
        .expect("valid metric");
        let seconds = prometheus::CounterVec::new(
            Opts::new(
                "outbox_plugin_call_seconds_total",
                "Time spent in publish calls into each plugin",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let scope_calls = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_claim_scope_calls_total",
                "Claim-scope calls into each handler (one a relay turn), apart from its publishes",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let scope_seconds = prometheus::CounterVec::new(
            Opts::new(
                "outbox_plugin_claim_scope_call_seconds_total",
                "Time spent in claim-scope calls into each handler",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let log_dropped = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_log_lines_dropped_total",
                "Log lines of each plugin dropped over its log budget",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let instances = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_instances_started_total",
                "Instances started for each plugin (an instance is retired after 1,000 calls)",
            ),
            by_plugin,
        )
        .expect("valid metric");
        let states = IntGaugeVec::new(
            Opts::new("outbox_plugins", "Plugin files by state"),
            &["state"],
        )
        .expect("valid metric");
        for state in PluginState::ALL {
            states.with_label_values(&[state.as_str()]).set(0);
        }
        for status in set.statuses() {
            states.with_label_values(&[status.state.as_str()]).inc();
        }
        for handler in set.handlers() {
            let labels = [handler.name(), handler.destination_type()];
            let stats = handler.scope_stats();
            scope_calls.with_label_values(&labels).inc_by(stats.calls);
            scope_seconds
                .with_label_values(&labels)
                .inc_by(stats.total_duration.as_secs_f64());
        }
        let handlers = set
            .handlers()
            .map(|h| (h.name(), h.destination_type(), h.stats()));
        let observers = set.observers().iter().map(|o| (o.name(), "", o.stats()));
        for (name, destination_type, stats) in handlers.chain(observers) {
            let labels = [name, destination_type];
            calls.with_label_values(&labels).inc_by(stats.calls);
            log_dropped
                .with_label_values(&labels)
                .inc_by(stats.log_lines_dropped);
            instances
                .with_label_values(&labels)
                .inc_by(stats.instances_started);
            seconds
                .with_label_values(&labels)
                .inc_by(stats.total_duration.as_secs_f64());
            for (error_type, count) in [
                (HostErrorType::Timeout, stats.timeouts),
                (HostErrorType::Trap, stats.traps),
                (HostErrorType::Memory, stats.memory),
                (HostErrorType::Instantiate, stats.instantiate),
            ] {
                errors
                    .with_label_values(&[name, destination_type, error_type.as_str()])
                    .inc_by(count);
            }
        }
        [
            calls.collect(),
            errors.collect(),
            seconds.collect(),
            scope_calls.collect(),
            scope_seconds.collect(),
            log_dropped.collect(),
            instances.collect(),
            states.collect(),
        ]
        .concat()
    }
}

/// A destination type as a label: itself when well-formed (a loaded plugin's type always is),
/// else [`INVALID_TYPE_LABEL`], so no label value comes from a row unchecked.
fn type_label(destination_type: &str) -> &str {
    if crate::destination_type::validate(destination_type).is_ok() {
        destination_type
    } else {
        INVALID_TYPE_LABEL
    }
}

/// Registers a metric and hands it back; every metric of the service is registered exactly once.
fn register<M: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("valid metric");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric");
    metric
}

/// How a scheduled maintenance run ended, as the `result` label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunResult {
    Ok,
    Failed,
    /// Another node held the job's lock: at most one node runs a job at a time.
    Skipped,
}

impl RunResult {
    fn as_str(self) -> &'static str {
        match self {
            RunResult::Ok => "ok",
            RunResult::Failed => "failed",
            RunResult::Skipped => "skipped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(metrics: &Metrics, name: &str) -> Vec<String> {
        metrics
            .render()
            .lines()
            .filter(|line| line.starts_with(name))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn build_info_names_the_version() {
        let expected = format!(
            "outbox_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(lines_of(&Metrics::new(), "outbox_build_info{"), [expected]);
    }

    #[test]
    fn a_destination_type_that_is_not_well_formed_is_labelled_invalid() {
        let metrics = Metrics::new();
        metrics.set_rows(&[
            (OutboxState::Pending, "bad\ntype\"}".into(), 2),
            (OutboxState::Pending, "other bad".into(), 3),
            (OutboxState::Pending, "WEBHOOK".into(), 1),
        ]);
        metrics.set_oldest_pending_age(&[("bad\ntype".into(), 7.0), ("a b".into(), 9.0)]);
        metrics.claimed("x\u{1b}[31m");
        assert_eq!(
            lines_of(&metrics, "outbox_rows{"),
            [
                "outbox_rows{destination_type=\"WEBHOOK\",state=\"PENDING\"} 1",
                "outbox_rows{destination_type=\"invalid\",state=\"PENDING\"} 5",
            ]
        );
        assert_eq!(
            lines_of(&metrics, "outbox_oldest_pending_age_seconds{"),
            ["outbox_oldest_pending_age_seconds{destination_type=\"invalid\"} 9"]
        );
        assert_eq!(
            lines_of(&metrics, "outbox_claimed_total{"),
            ["outbox_claimed_total{destination_type=\"invalid\"} 1"]
        );
    }

    #[test]
    fn retries_and_dead_letters_are_counted_by_error_type() {
        let metrics = Metrics::new();
        metrics.retried("WEBHOOK", Some("http-status"));
        metrics.retried("WEBHOOK", Some("http-status"));
        metrics.dead_lettered("WEBHOOK", None);
        assert_eq!(
            lines_of(&metrics, "outbox_retried_total{"),
            ["outbox_retried_total{destination_type=\"WEBHOOK\",error_type=\"http-status\"} 2"]
        );
        assert_eq!(
            lines_of(&metrics, "outbox_dead_lettered_total{"),
            ["outbox_dead_lettered_total{destination_type=\"WEBHOOK\",error_type=\"none\"} 1"]
        );
    }

    #[test]
    fn error_types_past_the_limit_of_one_type_count_as_other() {
        let metrics = Metrics::new();
        for n in 0..MAX_ERROR_TYPES + 5 {
            metrics.retried("WEBHOOK", Some(&format!("kind-{n}")));
        }
        metrics.retried("WEBHOOK", Some("kind-0"));
        metrics.retried("OTHER", Some("kind-99"));
        let lines = lines_of(&metrics, "outbox_retried_total{");
        assert_eq!(lines.len(), MAX_ERROR_TYPES + 2, "{lines:#?}");
        assert!(lines.contains(
            &"outbox_retried_total{destination_type=\"WEBHOOK\",error_type=\"other\"} 5".to_owned()
        ));
        assert!(
            lines.contains(
                &"outbox_retried_total{destination_type=\"WEBHOOK\",error_type=\"kind-0\"} 2"
                    .to_owned()
            )
        );
        assert!(lines.contains(
            &"outbox_retried_total{destination_type=\"OTHER\",error_type=\"kind-99\"} 1".to_owned()
        ));
    }
}
