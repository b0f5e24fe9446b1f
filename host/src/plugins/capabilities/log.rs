//! `outbox:relay/log`: a plugin's log lines, routed into the host's `tracing` tagged with the
//! plugin's name, or captured for the mock envelope runner's report.

use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::component::{HasSelf, Linker};

use crate::plugins::bindings::Level;
use crate::plugins::bindings::handler::outbox::relay::log;
use crate::plugins::sandbox::StoreState;

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

/// Lines captured instead of logged, shared between the instances of one plugin.
#[derive(Debug, Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<LogLine>>>,
}

impl LogCapture {
    /// Takes the lines captured so far.
    pub fn take(&self) -> Vec<LogLine> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, line: LogLine) {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
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

/// The log capability of one plugin: its name and where its lines go.
#[derive(Debug, Clone)]
pub struct PluginLog {
    plugin: Arc<str>,
    sink: LogSink,
}

impl PluginLog {
    pub fn new(plugin: Arc<str>, sink: LogSink) -> Self {
        Self { plugin, sink }
    }

    pub fn write(&self, level: Level, source: LogSource, mut message: String) {
        truncate_at_char_boundary(&mut message, MAX_LINE_BYTES);
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

fn truncate_at_char_boundary(text: &mut String, max_bytes: usize) {
    if text.len() > max_bytes {
        let cut = (0..=max_bytes)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
}

impl log::Host for PluginLog {
    fn log(&mut self, level: Level, message: String) {
        self.write(level, LogSource::Log, message);
    }
}

pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    log::add_to_linker::<StoreState, HasSelf<PluginLog>>(linker, |state| &mut state.log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_captured_line_keeps_level_source_and_message() {
        let capture = LogCapture::default();
        let log = PluginLog::new("noop".into(), LogSink::Capture(capture.clone()));
        log.write(Level::Warn, LogSource::Stderr, "careful".to_owned());
        assert_eq!(
            capture.take(),
            vec![LogLine {
                level: Level::Warn,
                source: LogSource::Stderr,
                message: "careful".into()
            }]
        );
        assert!(capture.take().is_empty());
    }

    #[test]
    fn an_overlong_line_is_cut_on_a_character_boundary() {
        let mut text = "é".repeat(MAX_LINE_BYTES);
        truncate_at_char_boundary(&mut text, MAX_LINE_BYTES);
        assert!(text.len() <= MAX_LINE_BYTES + '…'.len_utf8());
        assert!(text.ends_with('…'));
    }
}
