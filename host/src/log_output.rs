//! Where the host's log lines go: a bounded queue and a thread of their own that writes them to
//! standard error. Logging can then never fail, panic or block a task of the host, whatever
//! happens to the log pipe: a line that cannot be queued (the pipe's reader is slower than the
//! host) or written (the reader died, `outbox-host run | head`) is dropped and counted in
//! `outbox_log_lines_dropped_total`. (tracing-subscriber's own writers report a failed write with
//! `eprintln!`, which panics when standard error is closed.)

use prometheus::IntCounter;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting for the writer thread before new ones are dropped.
const QUEUE_LINES: usize = 8192;
/// How often a flush waiting for room in a full queue tries again.
const FLUSH_RETRY: Duration = Duration::from_millis(5);

/// The process's count of log lines dropped, registered in every service's metrics.
static DROPPED_LINES: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "outbox_log_lines_dropped_total",
        "Host log lines dropped because standard error did not take them",
    )
    .expect("a valid metric")
});

/// The counter of log lines the process's log output dropped.
pub fn dropped_lines() -> IntCounter {
    DROPPED_LINES.clone()
}

/// The process's standard error: one writer thread however often logging is set up.
static STDERR: OnceLock<LogOutput> = OnceLock::new();

/// Standard error, counting drops in [`dropped_lines`].
pub fn stderr() -> LogOutput {
    STDERR
        .get_or_init(|| LogOutput::new(io::stderr(), dropped_lines()))
        .clone()
}

/// Waits up to `timeout` for the lines queued for standard error to be written (see
/// [`LogOutput::flush`]); called before the process exits, so its last lines are not lost.
pub fn flush_stderr(timeout: Duration) {
    if let Some(output) = STDERR.get() {
        output.flush(timeout);
    }
}

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been handed to the writer.
    Flush(SyncSender<()>),
}

/// A [`MakeWriter`] for `tracing_subscriber::fmt` that never blocks and never fails. Cheap to
/// clone; every clone feeds the same thread.
#[derive(Clone)]
pub struct LogOutput {
    queue: SyncSender<Message>,
    dropped: IntCounter,
}

impl LogOutput {
    /// Lines written to `sink` by a thread of their own; what it refuses is counted in `dropped`.
    pub fn new(sink: impl Write + Send + 'static, dropped: IntCounter) -> LogOutput {
        let (queue, lines) = mpsc::sync_channel(QUEUE_LINES);
        let writer_dropped = dropped.clone();
        std::thread::Builder::new()
            .name("outbox-log".into())
            .spawn(move || write_lines(sink, lines, writer_dropped))
            .expect("the log writer thread starts");
        LogOutput { queue, dropped }
    }

    /// Waits up to `timeout` for the lines queued so far to be written; `false` when they were
    /// not (the sink blocks).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (done, written) = mpsc::sync_channel(1);
        let mut message = Message::Flush(done);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(FLUSH_RETRY);
                }
                Err(_) => return false,
            }
        }
        written
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

fn write_lines(mut sink: impl Write, lines: Receiver<Message>, dropped: IntCounter) {
    for message in lines {
        match message {
            Message::Line(line) => {
                if sink.write_all(&line).is_err() {
                    dropped.inc();
                }
            }
            Message::Flush(done) => {
                let _ = sink.flush();
                let _ = done.send(());
            }
        }
    }
}

/// `tracing_subscriber::fmt` formats a whole event, then writes it with one `write_all`: each
/// write is one line, queued whole or dropped whole.
impl Write for &LogOutput {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        if self.queue.try_send(Message::Line(line.to_vec())).is_err() {
            self.dropped.inc();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogOutput {
    type Writer = &'a LogOutput;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn counter() -> IntCounter {
        IntCounter::new("dropped", "test").unwrap()
    }

    fn log(output: &LogOutput, line: &str) {
        (&*output).write_all(line.as_bytes()).unwrap();
    }

    /// A sink whose reader died.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> io::Result<()> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
    }

    /// A sink whose reader stopped reading: every write waits for ever.
    struct StalledPipe;

    impl Write for StalledPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            loop {
                std::thread::park();
            }
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[derive(Clone, Default)]
    struct Collected(Arc<Mutex<Vec<u8>>>);

    impl Write for Collected {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_reach_the_sink_in_order() {
        let sink = Collected::default();
        let output = LogOutput::new(sink.clone(), counter());
        log(&output, "one\n");
        log(&output, "two\n");
        assert!(output.flush(Duration::from_secs(10)));
        assert_eq!(sink.0.lock().unwrap().as_slice(), b"one\ntwo\n");
    }

    #[test]
    fn lines_a_closed_pipe_refuses_are_dropped_and_counted() {
        let dropped = counter();
        let output = LogOutput::new(ClosedPipe, dropped.clone());
        for _ in 0..3 {
            log(&output, "line\n");
        }
        output.flush(Duration::from_secs(10));
        assert_eq!(dropped.get(), 3);
    }

    #[test]
    fn a_stalled_pipe_never_blocks_logging_and_what_it_cannot_take_is_counted() {
        let dropped = counter();
        let output = LogOutput::new(StalledPipe, dropped.clone());
        let lines = QUEUE_LINES as u64 + 100;
        for _ in 0..lines {
            log(&output, "line\n");
        }
        // One line is held by the stalled write, the queue is full, the rest were dropped.
        assert!(dropped.get() >= lines - QUEUE_LINES as u64 - 1);
        assert!(!output.flush(Duration::from_millis(50)));
    }
}
