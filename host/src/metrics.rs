//! The service's Prometheus metrics: one registry, filled by the relay, the maintenance jobs and the
//! plugin runtime, read by the admin endpoint.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

use crate::destination_type;
use crate::log_output;

/// The `destination_type` label of rows whose destination type is not a valid id.
pub const INVALID_TYPE_LABEL: &str = "(invalid)";
use crate::plugins::PluginSet;

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
    listening: IntGauge,
    cycle_failures: IntCounterVec,
    claim_scope_failures: IntCounterVec,
    maintenance_runs: IntCounterVec,
    maintenance_rows: IntCounterVec,
    plugin_reloads: IntCounter,
    plugin_reload_failures: IntCounter,
    publish_panics: IntCounter,
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
                    Opts::new("outbox_retried_total", "Rows scheduled for another attempt"),
                    by_type,
                ),
            ),
            dead_lettered: register(
                &registry,
                IntCounterVec::new(
                    Opts::new("outbox_dead_lettered_total", "Rows dead-lettered"),
                    by_type,
                ),
            ),
            deferred: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_deferred_total",
                        "Rows deferred (unresolvable or no handler)",
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
            listening: register(
                &registry,
                IntGauge::new(
                    "outbox_listen_connected",
                    "1 while LISTEN is connected, 0 while polling only",
                ),
            ),
            cycle_failures: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "outbox_cycle_failures_total",
                        "Relay cycles that failed, by reason",
                    ),
                    &["reason"],
                ),
            ),
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
            registry,
        };
        Metrics {
            inner: Arc::new(inner),
        }
    }

    pub fn claimed(&self, destination_type: &str) {
        self.inner
            .claimed
            .with_label_values(&[destination_type])
            .inc();
    }

    pub fn published(&self, destination_type: &str) {
        self.inner
            .published
            .with_label_values(&[destination_type])
            .inc();
    }

    pub fn retried(&self, destination_type: &str) {
        self.inner
            .retried
            .with_label_values(&[destination_type])
            .inc();
    }

    pub fn dead_lettered(&self, destination_type: &str) {
        self.inner
            .dead_lettered
            .with_label_values(&[destination_type])
            .inc();
    }

    /// Rows dead-lettered for an invalid destination type, under one label rather than the value.
    pub fn dead_lettered_invalid(&self, rows: u64) {
        self.inner
            .dead_lettered
            .with_label_values(&[INVALID_TYPE_LABEL])
            .inc_by(rows);
    }

    pub fn deferred(&self, destination_type: &str) {
        self.inner
            .deferred
            .with_label_values(&[destination_type])
            .inc();
    }

    pub fn publish_duration(&self, destination_type: &str, seconds: f64) {
        self.inner
            .publish_duration
            .with_label_values(&[destination_type])
            .observe(seconds);
    }

    pub fn in_flight(&self, delta: i64) {
        self.inner.in_flight.add(delta);
    }

    pub fn listening(&self, connected: bool) {
        self.inner.listening.set(i64::from(connected));
    }

    pub fn cycle_failed(&self, reason: &str) {
        self.inner.cycle_failures.with_label_values(&[reason]).inc();
    }

    pub fn claim_scope_failed(&self, destination_type: &str, reason: &str) {
        self.inner
            .claim_scope_failures
            .with_label_values(&[destination_type, reason])
            .inc();
    }

    pub fn maintenance_run(&self, job: &str, ok: bool) {
        self.inner
            .maintenance_runs
            .with_label_values(&[job, if ok { "ok" } else { "failed" }])
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

    /// Replaces the sampled row counts. Rows written with plain SQL may hold any destination type:
    /// an invalid one is counted under one label, never as a label of its own.
    pub fn set_rows(&self, counts: &[(String, String, i64)]) {
        self.inner.rows.reset();
        for (state, destination_type, count) in counts {
            let label = match destination_type::validate(destination_type) {
                Ok(()) => destination_type.as_str(),
                Err(_) => INVALID_TYPE_LABEL,
            };
            self.inner
                .rows
                .with_label_values(&[state, label])
                .add(*count);
        }
    }

    /// Reports per-plugin call counts and plugins by state from whatever set is current when scraped.
    pub fn watch_plugins(&self, plugins: watch::Receiver<Arc<PluginSet>>) {
        let collector = PluginCollector {
            plugins: RwLock::new(plugins),
        };
        self.inner
            .registry
            .register(Box::new(collector))
            .expect("registered once");
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
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
        let calls = IntCounterVec::new(
            Opts::new("outbox_plugin_calls_total", "Calls into each plugin"),
            &["plugin"],
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_call_errors_total",
                "Failed calls into each plugin, by error type",
            ),
            &["plugin", "error_type"],
        )
        .expect("valid metric");
        let seconds = prometheus::CounterVec::new(
            Opts::new(
                "outbox_plugin_call_seconds_total",
                "Time spent in calls into each plugin",
            ),
            &["plugin"],
        )
        .expect("valid metric");
        let log_dropped = IntCounterVec::new(
            Opts::new(
                "outbox_plugin_log_lines_dropped_total",
                "Log lines of each plugin dropped over its log budget",
            ),
            &["plugin"],
        )
        .expect("valid metric");
        let states = IntGaugeVec::new(
            Opts::new("outbox_plugins", "Plugin files by state"),
            &["state"],
        )
        .expect("valid metric");
        for state in ["loaded", "failed", "conflicting"] {
            states.with_label_values(&[state]).set(0);
        }
        for status in set.statuses() {
            states.with_label_values(&[status.state.as_str()]).inc();
        }
        let handlers = set.handlers().map(|h| (h.name().to_owned(), h.stats()));
        let observers = set
            .observers()
            .iter()
            .map(|o| (o.name().to_owned(), o.stats()));
        for (name, stats) in handlers.chain(observers) {
            calls.with_label_values(&[&name]).inc_by(stats.calls);
            log_dropped
                .with_label_values(&[&name])
                .inc_by(stats.log_lines_dropped);
            seconds
                .with_label_values(&[&name])
                .inc_by(stats.total_duration.as_secs_f64());
            for (error_type, count) in [
                ("timeout", stats.timeouts),
                ("trap", stats.traps),
                ("memory", stats.memory),
                ("instantiate", stats.instantiate),
            ] {
                errors.with_label_values(&[&name, error_type]).inc_by(count);
            }
        }
        [
            calls.collect(),
            errors.collect(),
            seconds.collect(),
            log_dropped.collect(),
            states.collect(),
        ]
        .concat()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_destination_type_is_never_a_label_of_its_own() {
        let metrics = Metrics::new();
        metrics.set_rows(&[
            ("PENDING".into(), "NOOP".into(), 2),
            ("PENDING".into(), "bad type!".into(), 3),
            ("PENDING".into(), "evil\n# forged".into(), 4),
        ]);
        let text = metrics.render();
        assert!(
            !text.contains("bad type!") && !text.contains("forged"),
            "{text}"
        );
        assert!(
            text.contains(r#"outbox_rows{destination_type="(invalid)",state="PENDING"} 7"#),
            "{text}"
        );
    }
}
