//! The plugin runtime with real plugins built from source: the example plugins (webhook, noop,
//! stats) loaded from a plugins directory as the relay loads them, manifests, destination-type
//! conflicts and reloads. The compiled-component cache has its own suite (`compiled_cache.rs`).

use std::io::Write;
use std::sync::{Arc, Mutex};

use outbox_host::plugins::mock::mock_envelope;
use outbox_host::plugins::{
    EntryDisposition, Envelope, PluginSet, PluginState, PublishCompleted, PublishOutcome,
    PublishResult, ScopeSummary, World,
};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugin_engine::{status, test_engine};
use outbox_tests::plugins::{NOOP, SCRIPTED, STATS, WEBHOOK};
use outbox_tests::scratch::ScratchDir;

/// The mock runner's envelope, with the header the webhook must forward.
fn envelope(destination_type: &str, destination: &str) -> Envelope {
    Envelope {
        destination: destination.into(),
        headers: vec![("x-tenant".into(), "acme".into())],
        ..mock_envelope(destination_type)
    }
}

/// A plugins directory holding the webhook plugin, allowed to reach `allowed_hosts`.
async fn webhook_set(dir: &ScratchDir, allowed_hosts: &[String]) -> PluginSet {
    dir.add_plugin("webhook", WEBHOOK);
    let hosts = allowed_hosts
        .iter()
        .map(|host| format!("{host:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    dir.add_manifest("webhook", &format!("[http]\nallowed_hosts = [{hosts}]\n"));
    PluginSet::load_dir(&test_engine(), dir.path()).await
}

async fn publish_to_webhook(server_status: u16) -> (PublishResult, StubServer) {
    let server = StubServer::start(server_status).await;
    let dir = ScratchDir::new("webhook");
    let set = webhook_set(&dir, &[server.origin()]).await;
    let handler = set
        .handler("WEBHOOK")
        .expect("the webhook handler is loaded");
    let result = handler
        .publish(&envelope("WEBHOOK", &server.url("/hook")))
        .await
        .expect("the call returns");
    (result, server)
}

fn failure_of(result: &PublishResult) -> (&'static str, Option<&str>) {
    match result {
        PublishResult::Retryable(failure) => ("retryable", failure.error_type.as_deref()),
        PublishResult::Permanent(failure) => ("permanent", failure.error_type.as_deref()),
        PublishResult::Success => ("success", None),
        PublishResult::Unresolvable(_) => ("unresolvable", None),
    }
}

#[tokio::test]
async fn webhook_posts_the_payload_with_the_headers_and_an_idempotency_key_and_succeeds_on_2xx() {
    let (result, server) = publish_to_webhook(204).await;
    assert_eq!(result, PublishResult::Success);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/hook")
    );
    assert_eq!(request.body, br#"{"mock":true}"#);
    assert_eq!(request.header("x-tenant"), Some("acme"));
    assert_eq!(
        request.header("idempotency-key"),
        Some("01900000-0000-7000-8000-000000000001")
    );
}

#[tokio::test]
async fn webhook_answers_408_429_and_5xx_as_retryable() {
    for server_status in [408, 429, 500, 503] {
        let (result, _server) = publish_to_webhook(server_status).await;
        assert_eq!(failure_of(&result).0, "retryable", "HTTP {server_status}");
    }
}

#[tokio::test]
async fn webhook_answers_other_4xx_as_permanent() {
    for server_status in [400, 401, 404, 422] {
        let (result, _server) = publish_to_webhook(server_status).await;
        assert_eq!(failure_of(&result).0, "permanent", "HTTP {server_status}");
    }
}

#[tokio::test]
async fn webhook_answers_a_connection_error_as_retryable() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let origin = format!("http://127.0.0.1:{closed_port}");
    let dir = ScratchDir::new("webhook-refused");
    let set = webhook_set(&dir, std::slice::from_ref(&origin)).await;
    let handler = set.handler("WEBHOOK").unwrap();
    let result = handler
        .publish(&envelope("WEBHOOK", &format!("{origin}/hook")))
        .await
        .unwrap();
    assert_eq!(failure_of(&result).0, "retryable");
}

#[tokio::test]
async fn webhook_to_a_host_not_allowed_is_permanent_denied_and_never_connects() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("webhook-denied");
    let set = webhook_set(&dir, &["http://127.0.0.1:1".to_owned()]).await;
    let handler = set.handler("WEBHOOK").unwrap();
    let result = handler
        .publish(&envelope("WEBHOOK", &server.url("/hook")))
        .await
        .unwrap();
    assert_eq!(failure_of(&result), ("permanent", Some("denied")));
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn webhook_without_a_manifest_reaches_no_host() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("webhook-no-manifest");
    dir.add_plugin("webhook", WEBHOOK);
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let result = set
        .handler("WEBHOOK")
        .unwrap()
        .publish(&envelope("WEBHOOK", &server.url("/")))
        .await
        .unwrap();
    assert_eq!(failure_of(&result), ("permanent", Some("denied")));
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn noop_is_loaded_under_its_destination_type_and_publishes_success() {
    let dir = ScratchDir::new("noop");
    dir.add_plugin("noop", NOOP);
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let handler = set.handler("NOOP").expect("noop is loaded");
    assert_eq!(
        (handler.name(), handler.destination_type()),
        ("noop", "NOOP")
    );
    assert_eq!(
        handler.publish(&envelope("NOOP", "anywhere")).await,
        Ok(PublishResult::Success)
    );
    let status = status(&set, "noop.wasm");
    assert_eq!(status.state, PluginState::Loaded);
    assert_eq!(status.world, Some(World::DestinationHandler));
    assert_eq!(status.claim_scope, Some(ScopeSummary::All));
}

/// Collects what `tracing` writes while a test runs on the current thread.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn stats_receives_each_completed_publish_and_logs_it_tagged_with_its_name() {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = ScratchDir::new("stats");
    dir.add_plugin("stats", STATS);
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let [observer] = set.observers() else {
        panic!("one observer is loaded")
    };
    let event = PublishCompleted {
        entry_id: 42,
        destination_type: "NOOP".into(),
        destination: "anywhere".into(),
        attempt: 0,
        max_attempts: 5,
        outcome: PublishOutcome::Success,
        disposition: EntryDisposition::Published,
        disposition_recorded: true,
        next_attempt_at: None,
        error_type: None,
        elapsed_micros: 1_250,
        completed_at: 1_700_000_000_001,
    };
    observer
        .on_publish_completed(&event, &envelope("NOOP", "anywhere"))
        .await
        .unwrap();

    let text = log.text();
    let line = text
        .lines()
        .find(|line| line.contains("entry 42"))
        .unwrap_or_else(|| panic!("no line for entry 42 in:\n{text}"));
    assert!(line.contains("plugin=\"stats\""), "{line}");
    assert!(
        line.contains("NOOP entry 42: success, published (recorded) in 1.250 ms"),
        "{line}"
    );
}

#[tokio::test]
async fn manifest_config_values_reach_the_plugin() {
    let dir = ScratchDir::new("config");
    dir.add_plugin("scripted", SCRIPTED);
    dir.add_manifest("scripted", "[config]\ndestination_type = \"ORDERS\"\n");
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert!(set.handler("ORDERS").is_some());
    assert!(set.handler("SCRIPTED").is_none());
}

#[tokio::test]
async fn a_claim_scope_shows_as_a_count_of_destinations_never_their_values() {
    let dir = ScratchDir::new("scope");
    dir.add_plugin("scripted", SCRIPTED);
    dir.add_manifest(
        "scripted",
        "[config]\nclaim_scope = \"secret-a, secret-b, secret-c\"\n",
    );
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let summary = status(&set, "scripted.wasm")
        .claim_scope
        .expect("a claim scope");
    assert_eq!(summary.to_string(), "destinations (3)");
    let scope = set
        .handler("SCRIPTED")
        .unwrap()
        .claim_scope()
        .await
        .unwrap();
    assert_eq!(ScopeSummary::of(&scope), summary);
}

#[tokio::test]
async fn a_manifest_with_an_unknown_key_fails_the_plugin_and_its_type_claims_nothing() {
    let dir = ScratchDir::new("unknown-key");
    dir.add_plugin("noop", NOOP);
    dir.add_manifest(
        "noop",
        "[http]\nallowed_hosts = []\nfollow_redirects = true\n",
    );
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert!(set.handler("NOOP").is_none());
    let status = status(&set, "noop.wasm");
    assert_eq!(status.state, PluginState::Failed);
    let error = status.last_error.as_deref().unwrap();
    assert!(
        error.contains("unknown key `http.follow_redirects`"),
        "{error}"
    );
}

#[tokio::test]
async fn a_malformed_manifest_fails_the_plugin_without_quoting_it() {
    let dir = ScratchDir::new("malformed");
    dir.add_plugin("noop", NOOP);
    dir.add_manifest("noop", "[config]\ntoken = \"s3cr3t\n");
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert!(set.handler("NOOP").is_none());
    let error = status(&set, "noop.wasm").last_error.clone().unwrap();
    assert!(error.contains("not valid TOML (line 2)"), "{error}");
    assert!(!error.contains("s3cr3t"), "{error}");
}

#[tokio::test]
async fn an_observer_whose_manifest_grants_http_is_not_loaded() {
    let dir = ScratchDir::new("observer-http");
    dir.add_plugin("stats", STATS);
    dir.add_manifest(
        "stats",
        "[http]\nallowed_hosts = [\"https://example.com\"]\n",
    );
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert!(set.observers().is_empty());
    assert_eq!(status(&set, "stats.wasm").state, PluginState::Failed);
}

#[tokio::test]
async fn a_file_that_is_not_a_component_fails_and_the_others_still_load() {
    let dir = ScratchDir::new("garbage");
    dir.write("garbage.wasm", b"not webassembly");
    dir.add_plugin("noop", NOOP);
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert_eq!(status(&set, "garbage.wasm").state, PluginState::Failed);
    assert!(set.handler("NOOP").is_some());
}

#[tokio::test]
async fn a_component_implementing_no_known_world_is_not_loaded() {
    let dir = ScratchDir::new("no-world");
    // The smallest valid component: the preamble alone, exporting nothing.
    dir.write("empty.wasm", b"\0asm\x0d\0\x01\0");
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let status = status(&set, "empty.wasm");
    assert_eq!(status.state, PluginState::Failed);
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("implements no known world")
    );
}

#[tokio::test]
async fn a_destination_type_outside_the_allowed_pattern_is_not_loaded() {
    let dir = ScratchDir::new("bad-type");
    dir.add_plugin("scripted", SCRIPTED);
    dir.add_manifest("scripted", "[config]\ndestination_type = \"not valid!\"\n");
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert_eq!(set.handlers().count(), 0);
    assert_eq!(status(&set, "scripted.wasm").state, PluginState::Failed);
}

#[tokio::test]
async fn two_files_declaring_one_destination_type_are_both_conflicting_and_neither_is_used() {
    let dir = ScratchDir::new("conflict");
    dir.add_plugin("noop", NOOP);
    dir.add_plugin("noop-copy", NOOP);
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    assert!(set.handler("NOOP").is_none());
    for file in ["noop.wasm", "noop-copy.wasm"] {
        assert_eq!(status(&set, file).state, PluginState::Conflicting, "{file}");
    }
}

#[tokio::test]
async fn a_reload_reuses_unchanged_plugins_and_reloads_changed_ones() {
    let engine = test_engine();
    let dir = ScratchDir::new("reload");
    dir.add_plugin("noop", NOOP);
    dir.add_plugin("scripted", SCRIPTED);
    let first = PluginSet::load_dir(&engine, dir.path()).await;
    dir.add_manifest("scripted", "[config]\nversion = \"2\"\n");
    let second = first.reload(&engine, dir.path()).await;
    assert!(Arc::ptr_eq(
        &first.handler("NOOP").unwrap(),
        &second.handler("NOOP").unwrap()
    ));
    assert!(!Arc::ptr_eq(
        &first.handler("SCRIPTED").unwrap(),
        &second.handler("SCRIPTED").unwrap()
    ));
}

#[tokio::test]
async fn a_reload_after_a_conflict_is_resolved_uses_the_remaining_file() {
    let engine = test_engine();
    let dir = ScratchDir::new("reload-conflict");
    dir.add_plugin("noop", NOOP);
    dir.add_plugin("noop-copy", NOOP);
    let conflicting = PluginSet::load_dir(&engine, dir.path()).await;
    dir.remove("noop-copy.wasm");
    let resolved = conflicting.reload(&engine, dir.path()).await;
    assert!(resolved.handler("NOOP").is_some());
    assert_eq!(resolved.statuses().count(), 1);
}

#[tokio::test]
async fn a_removed_file_removes_its_destination_type_on_reload() {
    let engine = test_engine();
    let dir = ScratchDir::new("reload-remove");
    dir.add_plugin("noop", NOOP);
    let before = PluginSet::load_dir(&engine, dir.path()).await;
    dir.remove("noop.wasm");
    let after = before.reload(&engine, dir.path()).await;
    assert!(after.handler("NOOP").is_none());
    assert_eq!(after.statuses().count(), 0);
}
