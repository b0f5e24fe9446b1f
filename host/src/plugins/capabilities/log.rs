//! `outbox:relay/log`: a plugin's log lines, routed into the host's `tracing` tagged with the
//! plugin's name, or captured for the mock envelope runner's report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};

use crate::plugins::bindings::Level;
use crate::plugins::bindings::handler::outbox::relay::log;
use crate::plugins::capabilities::Capability;
use crate::plugins::manifest::Limits;
use crate::plugins::sandbox::StoreState;

/// The `log` interface of both worlds, writing to the plugin's [`PluginLog`], which the sandbox
/// makes for every plugin (stdout, stderr and the host's notes about the plugin go there too).
/// Nothing to grant: every plugin may log, within its log budget (`[limits]`).
pub(crate) enum Log {}

impl Capability for Log {
    type Grant = ();
    type Services = ();
    type PluginState = PluginLog;
    type InstanceState = PluginLog;

    fn plugin_state(_: &(), _: &(), log: &PluginLog) -> PluginLog {
        log.clone()
    }

    fn instance_state(log: &PluginLog) -> PluginLog {
        log.clone()
    }

    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
        log::add_to_linker::<StoreState, HasSelf<PluginLog>>(linker, |state| {
            &mut state.capabilities.log
        })
    }
}

/// Longest message kept from one line; a plugin cannot flood the host's log with one giant line.
const MAX_LINE_BYTES: usize = 16 * 1024;

/// Which channel a plugin's line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `outbox:relay/log` interface.
    Log,
    Stdout,
    Stderr,
    /// The host, about the plugin (a denied request).
    Host,
}

impl LogSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::Host => "host",
        }
    }
}

/// One line a plugin wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: Level,
    pub source: LogSource,
    pub message: String,
}

/// Lines captured instead of logged, shared between the instances of one plugin. At most
/// [`MAX_CAPTURED_LINES`] are kept between two takes; the rest are counted.
#[derive(Debug, Clone, Default)]
pub struct LogCapture {
    captured: Arc<Mutex<CapturedLines>>,
}

/// Lines a capture kept, and how many more it did not keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedLines {
    pub lines: Vec<LogLine>,
    pub not_kept: u64,
}

/// A mock run keeps this many lines per report, so a flooding plugin cannot fill the memory of
/// `outbox-host plugin test`.
pub const MAX_CAPTURED_LINES: usize = 1_000;

impl LogCapture {
    /// Takes the lines captured so far.
    pub fn take(&self) -> CapturedLines {
        std::mem::take(&mut *self.captured.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, line: LogLine) {
        let mut captured = self.captured.lock().unwrap_or_else(PoisonError::into_inner);
        if captured.lines.len() < MAX_CAPTURED_LINES {
            captured.lines.push(line);
        } else {
            captured.not_kept += 1;
        }
    }
}

/// Where a plugin's lines go.
#[derive(Debug, Clone, Default)]
pub enum LogSink {
    /// Into `tracing`, the host's log.
    #[default]
    Tracing,
    /// Into a capture the caller reads (the mock envelope runner).
    Capture(LogCapture),
}

/// The log capability of one plugin: its name, where its lines go, and its budget.
#[derive(Debug, Clone)]
pub struct PluginLog {
    plugin: Arc<str>,
    sink: LogSink,
    budget: Arc<LogBudget>,
}

impl PluginLog {
    pub fn new(plugin: Arc<str>, sink: LogSink, limits: &Limits) -> Self {
        Self {
            plugin,
            sink,
            budget: Arc::new(LogBudget::new(
                limits.log_lines_per_second,
                limits.log_bytes_per_second,
            )),
        }
    }

    /// Lines dropped by the budget since the plugin was loaded.
    pub fn dropped(&self) -> u64 {
        self.budget.dropped_total.load(Ordering::Relaxed)
    }

    /// Writes one line, control characters escaped so it cannot forge another, if the plugin's
    /// budget allows. The first line dropped in a second says so at once; the first line of a
    /// later second reports how many were dropped in all.
    pub fn write(&self, level: Level, source: LogSource, message: impl AsRef<str>) {
        let message = escape_controls(message.as_ref(), MAX_LINE_BYTES);
        let admitted = self.budget.admit(message.len(), Instant::now());
        if let Some(dropped) = admitted.report_dropped {
            self.emit(
                Level::Warn,
                LogSource::Host,
                format!("{dropped} lines from this plugin were dropped: over its log budget"),
            );
        }
        match admitted.line {
            Admission::Written => self.emit(level, source, message),
            Admission::FirstDropped => self.emit(
                Level::Warn,
                LogSource::Host,
                format!(
                    "this plugin is over its log budget ({} lines, {} bytes a second); dropping lines",
                    self.budget.lines_per_window, self.budget.bytes_per_window
                ),
            ),
            Admission::Dropped => {}
        }
    }

    fn emit(&self, level: Level, source: LogSource, message: String) {
        match &self.sink {
            LogSink::Capture(capture) => capture.push(LogLine {
                level,
                source,
                message,
            }),
            LogSink::Tracing => {
                let plugin = &*self.plugin;
                let source = source.as_str();
                match level {
                    Level::Trace => tracing::trace!(plugin, source, "{message}"),
                    Level::Debug => tracing::debug!(plugin, source, "{message}"),
                    Level::Info => tracing::info!(plugin, source, "{message}"),
                    Level::Warn => tracing::warn!(plugin, source, "{message}"),
                    Level::Error => tracing::error!(plugin, source, "{message}"),
                }
            }
        }
    }
}

/// Lines and bytes a plugin may log in each one-second window; what is over is dropped and counted.
#[derive(Debug)]
struct LogBudget {
    lines_per_window: u32,
    bytes_per_window: u64,
    window: Mutex<Window>,
    dropped_total: AtomicU64,
}

#[derive(Debug)]
struct Window {
    started: Option<Instant>,
    lines: u32,
    bytes: u64,
    /// Dropped in this window and those before it, not yet reported.
    dropped: u64,
}

/// Whether a line may be written, and a count of dropped lines to report first.
#[derive(Debug, PartialEq, Eq)]
struct Admitted {
    line: Admission,
    report_dropped: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Written,
    /// The first line dropped in this window.
    FirstDropped,
    Dropped,
}

const WINDOW: Duration = Duration::from_secs(1);

impl LogBudget {
    fn new(lines_per_second: u32, bytes_per_second: u32) -> Self {
        Self {
            lines_per_window: lines_per_second,
            bytes_per_window: u64::from(bytes_per_second),
            window: Mutex::new(Window {
                started: None,
                lines: 0,
                bytes: 0,
                dropped: 0,
            }),
            dropped_total: AtomicU64::new(0),
        }
    }

    fn admit(&self, bytes: usize, now: Instant) -> Admitted {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut report_dropped = None;
        if window
            .started
            .is_none_or(|started| now.duration_since(started) >= WINDOW)
        {
            window.started = Some(now);
            window.lines = 0;
            window.bytes = 0;
            if window.dropped > 0 {
                report_dropped = Some(std::mem::take(&mut window.dropped));
            }
        }
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let fits = window.lines < self.lines_per_window
            && window.bytes.saturating_add(bytes) <= self.bytes_per_window;
        let line = if fits {
            window.lines += 1;
            window.bytes += bytes;
            Admission::Written
        } else {
            window.dropped += 1;
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            if window.dropped == 1 {
                Admission::FirstDropped
            } else {
                Admission::Dropped
            }
        };
        Admitted {
            line,
            report_dropped,
        }
    }
}

/// At most `max_bytes` of `text` (cut on a character boundary, marked with `…`), with every control
/// character written as an escape (`\n`, `\u{1b}`): a plugin's line stays one line, and cannot
/// carry terminal escape sequences.
fn escape_controls(text: &str, max_bytes: usize) -> String {
    let mut escaped = String::with_capacity(text.len().min(max_bytes));
    for c in text.chars() {
        let before = escaped.len();
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
        if escaped.len() > max_bytes {
            escaped.truncate(before);
            escaped.push('…');
            break;
        }
    }
    escaped
}

impl log::Host for PluginLog {
    fn log(&mut self, level: Level, message: String) {
        self.write(level, LogSource::Log, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(limits: &Limits) -> (PluginLog, LogCapture) {
        let capture = LogCapture::default();
        let log = PluginLog::new("noop".into(), LogSink::Capture(capture.clone()), limits);
        (log, capture)
    }

    #[test]
    fn a_captured_line_keeps_level_source_and_message() {
        let (log, capture) = captured(&Limits::default());
        log.write(Level::Warn, LogSource::Stderr, "careful");
        assert_eq!(
            capture.take().lines,
            vec![LogLine {
                level: Level::Warn,
                source: LogSource::Stderr,
                message: "careful".into()
            }]
        );
        assert!(capture.take().lines.is_empty());
    }

    #[test]
    fn a_line_cannot_forge_another_or_carry_terminal_escapes() {
        let (log, capture) = captured(&Limits::default());
        log.write(
            Level::Info,
            LogSource::Log,
            "ok\n2026-01-01T00:00:00Z ERROR outbox_host: forged\r\u{1b}[31m",
        );
        let message = &capture.take().lines[0].message;
        assert!(!message.chars().any(char::is_control), "{message:?}");
        assert!(message.contains("ok\\n2026") && message.contains("\\u{1b}[31m"));
    }

    #[test]
    fn an_overlong_line_is_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_LINE_BYTES);
        let cut = escape_controls(&text, MAX_LINE_BYTES);
        assert!(cut.len() <= MAX_LINE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn lines_over_the_budget_are_dropped_counted_and_summarised_next_second() {
        let budget = LogBudget::new(2, 1_000);
        let start = Instant::now();
        let admitted: Vec<Admission> = (0..5).map(|_| budget.admit(10, start).line).collect();
        use Admission::*;
        assert_eq!(admitted, [Written, Written, FirstDropped, Dropped, Dropped]);
        assert_eq!(budget.dropped_total.load(Ordering::Relaxed), 3);
        assert_eq!(
            budget.admit(10, start + WINDOW),
            Admitted {
                line: Admission::Written,
                report_dropped: Some(3)
            }
        );
    }

    #[test]
    fn bytes_over_the_budget_are_dropped() {
        let budget = LogBudget::new(100, 25);
        let start = Instant::now();
        assert_eq!(budget.admit(20, start).line, Admission::Written);
        assert_eq!(budget.admit(10, start).line, Admission::FirstDropped);
        assert_eq!(budget.admit(5, start).line, Admission::Written);
    }

    #[test]
    fn a_capture_keeps_a_bounded_number_of_lines_and_counts_the_rest() {
        let limits = Limits {
            log_lines_per_second: 10_000,
            log_bytes_per_second: 16 * 1024 * 1024,
            ..Limits::default()
        };
        let (log, capture) = captured(&limits);
        for _ in 0..MAX_CAPTURED_LINES + 7 {
            log.write(Level::Info, LogSource::Stdout, "line");
        }
        let taken = capture.take();
        assert_eq!((taken.lines.len(), taken.not_kept), (MAX_CAPTURED_LINES, 7));
    }
}
