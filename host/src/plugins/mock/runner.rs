//! Loading one plugin the way the host does, with its log captured and, if asked, its HTTP answered
//! by the mock; then running it on an envelope.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::plugins::bindings::{EntryDisposition, Envelope, PublishCompleted, PublishOutcome};
use crate::plugins::capabilities::http::HttpTransport;
use crate::plugins::capabilities::kafka::KafkaBackend;
use crate::plugins::capabilities::log::{LogCapture, LogSink};
use crate::plugins::engine::PluginEngine;
use crate::plugins::error::LoadError;
use crate::plugins::handler::HandlerPlugin;
use crate::plugins::loader::{self, LoadedPlugin, Plugin, PluginSource};
use crate::plugins::mock::envelope::mock_envelope;
use crate::plugins::mock::http::{
    DeniedRequest, MockHttpHeader, MockHttpResponse, MockSender, RecordedRequest, RequestLog,
};
use crate::plugins::mock::kafka::{MockKafka, MockKafkaResponse, ProducedRecord};
use crate::plugins::mock::report::{InspectReport, MockCall, MockOutcome, TestReport};
use crate::plugins::sandbox::HostServices;

#[derive(Debug, Clone, Default)]
pub struct MockOptions {
    /// The manifest to enforce; without one, the `<stem>.toml` beside the component if present
    /// (as the host would), else none (nothing granted).
    pub manifest: Option<PathBuf>,
    /// Answer every allowed HTTP request with this instead of sending it; without it, allowed
    /// requests go to the network.
    pub http_response: Option<MockHttpResponse>,
    /// Headers of that response (a `Retry-After`, say).
    pub http_headers: Vec<MockHttpHeader>,
    /// Answer every granted Kafka record with this failure instead of `ok`.
    pub kafka_response: Option<MockKafkaResponse>,
}

/// One plugin, loaded for offline tests.
pub struct MockRunner {
    file: PathBuf,
    /// The manifest enforced, if any.
    manifest: Option<PathBuf>,
    loaded: LoadedPlugin,
    logs: LogCapture,
    requests: RequestLog<RecordedRequest>,
    denied: RequestLog<DeniedRequest>,
    produced: RequestLog<ProducedRecord>,
}

impl MockRunner {
    pub async fn load(
        engine: &PluginEngine,
        wasm: &Path,
        options: MockOptions,
    ) -> Result<Self, LoadError> {
        let logs = LogCapture::default();
        let requests = RequestLog::default();
        let denied = RequestLog::default();
        let mut services = HostServices {
            log: LogSink::Capture(logs.clone()),
            ..HostServices::default()
        };
        services.capabilities.http = HttpTransport(Some(Arc::new(MockSender::new(
            options.http_response,
            options.http_headers,
            requests.clone(),
            denied.clone(),
        ))));
        let produced = RequestLog::default();
        services.capabilities.kafka = Some(KafkaBackend::Mock(MockKafka::new(
            options.kafka_response,
            produced.clone(),
        )));
        let source = PluginSource::read(wasm, options.manifest.as_deref()).await?;
        let loaded = loader::load(engine, &source, &services).await?;
        Ok(Self {
            file: wasm.to_owned(),
            manifest: source.manifest.map(|manifest| manifest.path),
            loaded,
            logs,
            requests,
            denied,
            produced,
        })
    }

    /// The loaded handler, for calls of one's own; `None` for an observer.
    pub fn handler(&self) -> Option<&Arc<HandlerPlugin>> {
        match &self.loaded.plugin {
            Plugin::Handler(handler) => Some(handler),
            Plugin::Observer(_) => None,
        }
    }

    /// The default mock envelope for this plugin's destination type.
    pub fn mock_envelope(&self) -> Envelope {
        mock_envelope(
            self.handler()
                .map_or("MOCK", |handler| handler.destination_type()),
        )
    }

    /// Runs `publish` (or, for an observer, `on-publish-completed` with a successful attempt)
    /// `repeat` times on `envelope`, and reports every call with the lines logged and the requests
    /// recorded since the last report (the first report includes those of loading).
    pub async fn run(&self, envelope: &Envelope, repeat: u32) -> TestReport {
        let mut calls = Vec::new();
        for _ in 0..repeat {
            let started = Instant::now();
            let outcome = match &self.loaded.plugin {
                Plugin::Handler(handler) => match handler.publish(envelope).await {
                    Ok(result) => MockOutcome::Published(result),
                    Err(error) => MockOutcome::Failed(error),
                },
                Plugin::Observer(observer) => {
                    match observer
                        .on_publish_completed(&completed_event(envelope), envelope)
                        .await
                    {
                        Ok(()) => MockOutcome::Observed,
                        Err(error) => MockOutcome::Failed(error),
                    }
                }
            };
            calls.push(MockCall {
                outcome,
                elapsed: started.elapsed(),
            });
        }
        let logs = self.logs.take();
        TestReport {
            inspect: self.inspect(),
            calls,
            logs: logs.lines,
            logs_not_kept: logs.not_kept,
            requests: self.requests.take(),
            denied: self.denied.take(),
            produced: self.produced.take(),
            envelope: None,
        }
    }

    pub fn inspect(&self) -> InspectReport {
        InspectReport {
            file: self.file.clone(),
            manifest: self.manifest.clone(),
            world: self.loaded.plugin.world(),
            imports: self.loaded.imports.clone(),
            destination_type: self
                .handler()
                .map(|handler| handler.destination_type().to_owned()),
            claim_scope: self.loaded.claim_scope,
        }
    }
}

/// What an observer hears after `envelope` was published on its first try.
fn completed_event(envelope: &Envelope) -> PublishCompleted {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    PublishCompleted {
        entry_id: envelope.entry_id,
        destination_type: envelope.destination_type.clone(),
        destination: envelope.destination.clone(),
        attempt: envelope.attempt,
        max_attempts: envelope.max_attempts,
        outcome: PublishOutcome::Success,
        disposition: EntryDisposition::Published,
        disposition_recorded: true,
        next_attempt_at: None,
        error_type: None,
        elapsed_micros: 1_000,
        completed_at: i64::try_from(now_ms).unwrap_or(i64::MAX),
    }
}
