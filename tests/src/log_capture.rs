//! Captures the log events of this test process, so tests can read what plugins logged.

use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

/// Installs the capturing subscriber once per process (also printing to stderr when `RUST_LOG` is set).
pub fn install() {
    LINES.get_or_init(|| {
        let printing = std::env::var("RUST_LOG").ok().map(|filter| {
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(EnvFilter::new(filter))
        });
        let _ = tracing_subscriber::registry()
            .with(Capture.with_filter(EnvFilter::new("info")))
            .with(printing)
            .try_init();
        Mutex::new(Vec::new())
    });
}

/// Every captured line (`message key=value ...`) logged with `plugin = <plugin>`.
pub fn lines_of(plugin: &str) -> Vec<String> {
    lines_with(&format!(" plugin={plugin} "))
}

/// Every captured line that contains `marker`.
pub fn lines_with(marker: &str) -> Vec<String> {
    LINES
        .get()
        .expect("log_capture::install() was called")
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|line| line.contains(marker))
        .cloned()
        .collect()
}

struct Capture;

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        if let Some(lines) = LINES.get() {
            lines
                .lock()
                .expect("not poisoned")
                .push(format!("{} {}", line.message, line.fields));
        }
    }
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?} ", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value} ", field.name());
        }
    }
}
