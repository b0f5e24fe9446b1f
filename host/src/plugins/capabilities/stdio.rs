//! A plugin's stdout and stderr: split into lines and written to its log, tagged with the stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::plugins::bindings::Level;
use crate::plugins::capabilities::log::{LogSource, PluginLog};

/// A line longer than this is written in pieces, so a guest cannot grow the buffer without bound.
const MAX_PENDING_BYTES: usize = 16 * 1024;

/// How much a guest may write in one call; WASI streams commonly allow about this much.
const WRITE_PERMIT_BYTES: usize = 64 * 1024;

/// The stdout or stderr of a plugin's WASI context.
pub struct GuestStdio {
    log: PluginLog,
    source: LogSource,
}

impl GuestStdio {
    pub fn stdout(log: PluginLog) -> Self {
        Self {
            log,
            source: LogSource::Stdout,
        }
    }

    pub fn stderr(log: PluginLog) -> Self {
        Self {
            log,
            source: LogSource::Stderr,
        }
    }

    fn lines(&self) -> LineWriter {
        LineWriter {
            log: self.log.clone(),
            source: self.source,
            pending: Vec::new(),
        }
    }
}

impl IsTerminal for GuestStdio {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStdio {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.lines())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.lines())
    }
}

/// Buffers bytes until a newline; a partial line is written when the stream is dropped.
struct LineWriter {
    log: PluginLog,
    source: LogSource,
    pending: Vec<u8>,
}

impl LineWriter {
    fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.emit();
            } else {
                self.pending.push(byte);
                if self.pending.len() >= MAX_PENDING_BYTES {
                    self.emit();
                }
            }
        }
    }

    fn emit(&mut self) {
        let line = std::mem::take(&mut self.pending);
        let line = String::from_utf8_lossy(&line);
        let level = match self.source {
            LogSource::Stderr => Level::Warn,
            LogSource::Log | LogSource::Stdout | LogSource::Host => Level::Info,
        };
        self.log
            .write(level, self.source, line.trim_end_matches('\r'));
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.emit();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT_BYTES)
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::capabilities::log::{LogCapture, LogLine, LogSink};

    fn captured_stdout() -> (GuestStdio, LogCapture) {
        let capture = LogCapture::default();
        let log = PluginLog::new(
            "p".into(),
            LogSink::Capture(capture.clone()),
            &Default::default(),
        );
        (GuestStdio::stdout(log), capture)
    }

    fn messages(capture: &LogCapture) -> Vec<String> {
        capture
            .take()
            .lines
            .into_iter()
            .map(|LogLine { message, .. }| message)
            .collect()
    }

    #[test]
    fn each_newline_ends_one_log_line() {
        let (stdio, capture) = captured_stdout();
        let mut stream = stdio.lines();
        stream.push(b"one\ntw");
        stream.push(b"o\r\nthree\n");
        assert_eq!(messages(&capture), ["one", "two", "three"]);
    }

    #[test]
    fn a_partial_line_is_written_when_the_stream_is_dropped() {
        let (stdio, capture) = captured_stdout();
        let mut stream = stdio.lines();
        stream.push(b"no newline");
        drop(stream);
        assert_eq!(messages(&capture), ["no newline"]);
    }

    #[test]
    fn a_line_without_end_is_written_in_pieces() {
        let (stdio, capture) = captured_stdout();
        let mut stream = stdio.lines();
        stream.push(&vec![b'x'; MAX_PENDING_BYTES * 2]);
        assert_eq!(messages(&capture).len(), 2);
    }

    #[test]
    fn stderr_lines_are_warnings() {
        let capture = LogCapture::default();
        let log = PluginLog::new(
            "p".into(),
            LogSink::Capture(capture.clone()),
            &Default::default(),
        );
        let mut stream = GuestStdio::stderr(log).lines();
        stream.push(b"oops\n");
        let lines = capture.take().lines;
        assert_eq!(lines[0].level, Level::Warn);
        assert_eq!(lines[0].source, LogSource::Stderr);
    }
}
