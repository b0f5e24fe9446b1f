//! What the mock envelope runner reports, as text for people and as JSON for tools.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::plugins::bindings::PublishResult;
use crate::plugins::capabilities::log::LogLine;
use crate::plugins::error::CallError;
use crate::plugins::handler::ScopeSummary;
use crate::plugins::loader::World;
use crate::plugins::mock::http::{DeniedRequest, RecordedRequest};
use crate::plugins::mock::kafka::ProducedRecord;

/// What `plugin inspect` prints: the claim scope as a summary, never its targets.
#[derive(Debug, Clone)]
pub struct InspectReport {
    pub file: PathBuf,
    /// The manifest enforced; `None`: nothing granted.
    pub manifest: Option<PathBuf>,
    pub world: World,
    pub imports: Vec<String>,
    pub destination_type: Option<String>,
    pub claim_scope: Option<ScopeSummary>,
}

impl InspectReport {
    pub fn to_json(&self) -> Value {
        json!({
            "file": self.file.display().to_string(),
            "manifest": self.manifest.as_ref().map(|path| path.display().to_string()),
            "world": self.world.as_str(),
            "imports": self.imports,
            "destination_type": self.destination_type,
            "claim_scope": self.claim_scope.map(|scope| scope.to_string()),
        })
    }
}

impl fmt::Display for InspectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "file:             {}", self.file.display())?;
        writeln!(
            f,
            "manifest:         {}",
            manifest_shown(self.manifest.as_ref())
        )?;
        writeln!(f, "world:            {}", self.world)?;
        if let Some(destination_type) = &self.destination_type {
            writeln!(f, "destination type: {destination_type}")?;
        }
        if let Some(scope) = self.claim_scope {
            writeln!(f, "claim scope:      {scope}")?;
        }
        writeln!(f, "imports:")?;
        self.imports
            .iter()
            .try_for_each(|import| writeln!(f, "  {import}"))
    }
}

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockOutcome {
    /// A handler returned a result.
    Published(PublishResult),
    /// An observer returned.
    Observed,
    /// The call did not return normally.
    Failed(CallError),
}

#[derive(Debug, Clone)]
pub struct MockCall {
    pub outcome: MockOutcome,
    pub elapsed: Duration,
}

impl MockCall {
    pub fn is_success(&self) -> bool {
        matches!(
            self.outcome,
            MockOutcome::Published(PublishResult::Success) | MockOutcome::Observed
        )
    }

    /// `success`, `retryable`, `permanent`, `unresolvable`, `observed`, or `failed`.
    pub fn outcome_name(&self) -> &'static str {
        match &self.outcome {
            MockOutcome::Published(PublishResult::Success) => "success",
            MockOutcome::Published(PublishResult::Retryable(_)) => "retryable",
            MockOutcome::Published(PublishResult::Permanent(_)) => "permanent",
            MockOutcome::Published(PublishResult::Unresolvable(_)) => "unresolvable",
            MockOutcome::Observed => "observed",
            MockOutcome::Failed(_) => "failed",
        }
    }

    pub fn error_type(&self) -> Option<&str> {
        match &self.outcome {
            MockOutcome::Published(PublishResult::Retryable(failure)) => {
                failure.error_type.as_deref()
            }
            MockOutcome::Published(PublishResult::Permanent(failure)) => {
                failure.error_type.as_deref()
            }
            MockOutcome::Failed(error) => Some(error.error_type().as_str()),
            _ => None,
        }
    }

    /// The `retry-after-ms` a retryable failure carried, as the plugin gave it.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match &self.outcome {
            MockOutcome::Published(PublishResult::Retryable(failure)) => failure.retry_after_ms,
            _ => None,
        }
    }

    pub fn message(&self) -> Option<String> {
        match &self.outcome {
            MockOutcome::Published(PublishResult::Retryable(failure)) => {
                Some(failure.message.clone())
            }
            MockOutcome::Published(PublishResult::Permanent(failure)) => {
                Some(failure.message.clone())
            }
            MockOutcome::Published(PublishResult::Unresolvable(reason)) => Some(reason.clone()),
            MockOutcome::Failed(error) => Some(error.to_string()),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "outcome": self.outcome_name(),
            "error_type": self.error_type(),
            "retry_after_ms": self.retry_after_ms(),
            "message": self.message(),
            "elapsed_micros": u64::try_from(self.elapsed.as_micros()).unwrap_or(u64::MAX),
        })
    }
}

/// What `plugin test` prints.
#[derive(Debug, Clone)]
pub struct TestReport {
    pub inspect: InspectReport,
    pub calls: Vec<MockCall>,
    pub logs: Vec<LogLine>,
    /// Lines logged past the ones kept in `logs`.
    pub logs_not_kept: u64,
    pub requests: Vec<RecordedRequest>,
    /// Requests the allow-list refused; they never left.
    pub denied: Vec<DeniedRequest>,
    /// Kafka records to granted topics (answered by the mock).
    pub produced: Vec<ProducedRecord>,
    /// The envelope the calls were made with, as `--envelope` reads it (`--show-envelope`).
    pub envelope: Option<Value>,
}

impl TestReport {
    /// Whether every call ended in success (or, for an observer, returned).
    pub fn succeeded(&self) -> bool {
        !self.calls.is_empty() && self.calls.iter().all(MockCall::is_success)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "file": self.inspect.file.display().to_string(),
            "manifest": self.inspect.manifest.as_ref().map(|path| path.display().to_string()),
            "envelope": self.envelope,
            "world": self.inspect.world.as_str(),
            "destination_type": self.inspect.destination_type,
            "claim_scope": self.inspect.claim_scope.map(|scope| scope.to_string()),
            "succeeded": self.succeeded(),
            "calls": self.calls.iter().map(MockCall::to_json).collect::<Vec<_>>(),
            "logs": self.logs.iter().map(|line| json!({
                "level": level_name(line),
                "source": line.source.as_str(),
                "message": line.message,
            })).collect::<Vec<_>>(),
            "logs_not_kept": self.logs_not_kept,
            "requests": self.requests.iter().map(|request| json!({
                "method": request.method,
                "url": request.url,
                "headers": request.headers,
                "body": request.body,
            })).collect::<Vec<_>>(),
            "denied": self.denied.iter().map(|request| json!({
                "method": request.method,
                "url": request.url,
                "reason": request.reason,
            })).collect::<Vec<_>>(),
            "produced": self.produced.iter().map(|record| json!({
                "topic": record.topic,
                "key": record.key,
                "headers": record.headers,
                "value_bytes": record.value_bytes,
            })).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for TestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plugin:           {} ({})",
            self.inspect.file.display(),
            self.inspect.world
        )?;
        writeln!(
            f,
            "manifest:         {}",
            manifest_shown(self.inspect.manifest.as_ref())
        )?;
        if let Some(destination_type) = &self.inspect.destination_type {
            writeln!(f, "destination type: {destination_type}")?;
        }
        if let Some(scope) = self.inspect.claim_scope {
            writeln!(f, "claim scope:      {scope}")?;
        }
        if let Some(envelope) = &self.envelope {
            writeln!(f, "envelope (an --envelope file may override any field):")?;
            for line in format!("{envelope:#}").lines() {
                writeln!(f, "  {line}")?;
            }
        }
        for (number, call) in self.calls.iter().enumerate() {
            write!(f, "call {}: {}", number + 1, call.outcome_name())?;
            if let Some(error_type) = call.error_type() {
                write!(f, " [{error_type}]")?;
            }
            if let Some(message) = call.message() {
                write!(f, ": {message}")?;
            }
            write!(f, " ({})", human_duration(call.elapsed))?;
            if let Some(ms) = call.retry_after_ms() {
                write!(f, "; asks to retry after {ms} ms")?;
            }
            writeln!(f)?;
        }
        if !self.logs.is_empty() {
            writeln!(f, "log:")?;
            for line in &self.logs {
                writeln!(
                    f,
                    "  [{} {}] {}",
                    level_name(line),
                    line.source.as_str(),
                    line.message
                )?;
            }
            if self.logs_not_kept > 0 {
                writeln!(f, "  … {} more lines not kept", self.logs_not_kept)?;
            }
        }
        if !self.requests.is_empty() {
            writeln!(f, "requests the plugin sent (answered by the mock):")?;
            self.requests
                .iter()
                .try_for_each(|request| write!(f, "  {request}"))?;
        }
        if !self.denied.is_empty() {
            writeln!(f, "requests denied (never sent):")?;
            self.denied
                .iter()
                .try_for_each(|request| write!(f, "  {request}"))?;
        }
        if !self.produced.is_empty() {
            writeln!(f, "kafka records produced (answered by the mock):")?;
            self.produced
                .iter()
                .try_for_each(|record| write!(f, "  {record}"))?;
        }
        Ok(())
    }
}

fn manifest_shown(manifest: Option<&PathBuf>) -> String {
    manifest.map_or_else(
        || "none (nothing granted)".to_owned(),
        |path| path.display().to_string(),
    )
}

fn level_name(line: &LogLine) -> &'static str {
    use crate::plugins::bindings::Level;
    match line.level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

fn human_duration(elapsed: Duration) -> String {
    let micros = elapsed.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else {
        format!("{:.1} ms", elapsed.as_secs_f64() * 1_000.0)
    }
}
