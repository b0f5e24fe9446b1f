//! The mock envelope runner: its Rust API for plugin authors' own tests, and the
//! `outbox-host plugin test` / `plugin inspect` commands (parsed and run in-process, with their
//! output captured).

use clap::Parser;
use outbox_host::cli::{self, Cli};
use outbox_host::plugins::PublishResult;
use outbox_host::plugins::capabilities::log::{LogSource, MAX_CAPTURED_LINES};
use outbox_host::plugins::mock::{
    MockHttpResponse, MockOptions, MockOutcome, MockRunner, TestReport,
};
use outbox_tests::plugin_engine::test_engine;
use outbox_tests::plugins::{HOSTILE, KAFKA, NOOP, SCRIPTED, STATS, WEBHOOK};
use outbox_tests::scratch::ScratchDir;
use outbox_tests::webhook_receiver::new_secret;

struct Run {
    code: u8,
    out: String,
    err: String,
}

async fn outbox_host(args: &[&str]) -> Run {
    let cli = Cli::try_parse_from(std::iter::once("outbox-host").chain(args.iter().copied()))
        .expect("valid arguments");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = cli::run(cli, &mut out, &mut err).await;
    Run {
        code,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    }
}

#[tokio::test]
async fn the_rust_api_runs_noop_on_the_mock_envelope_and_reports_success() {
    let runner = MockRunner::load(&test_engine(), NOOP.as_ref(), MockOptions::default())
        .await
        .unwrap();
    let envelope = runner.mock_envelope();
    assert_eq!(envelope.destination_type, "NOOP");
    let report = runner.run(&envelope, 3).await;
    assert!(report.succeeded());
    assert_eq!(report.calls.len(), 3);
    assert!(
        report
            .calls
            .iter()
            .all(|call| call.outcome == MockOutcome::Published(PublishResult::Success))
    );
}

#[tokio::test]
async fn the_rust_api_captures_the_plugins_log_lines() {
    let dir = ScratchDir::new("mock-log");
    let manifest = dir.write("scripted.toml", b"[config]\nversion = \"7\"\n");
    let options = MockOptions {
        manifest: Some(manifest),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), SCRIPTED.as_ref(), options)
        .await
        .unwrap();
    let report = runner.run(&runner.mock_envelope(), 1).await;
    assert!(
        report
            .logs
            .iter()
            .any(|line| line.message.starts_with("scripted version=7 ")),
        "{:?}",
        report.logs
    );
}

#[tokio::test]
async fn the_mock_answers_allowed_requests_and_records_them() {
    let dir = ScratchDir::new("mock-http");
    let manifest = dir.write(
        "webhook.toml",
        b"[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n",
    );
    let options = MockOptions {
        manifest: Some(manifest),
        http_response: Some(MockHttpResponse {
            status: 503,
            body: String::new(),
        }),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), WEBHOOK.as_ref(), options)
        .await
        .unwrap();
    let mut envelope = runner.mock_envelope();
    envelope.destination = "https://hooks.example.com/orders".into();
    let report = runner.run(&envelope, 1).await;
    assert_eq!(report.calls[0].outcome_name(), "retryable");
    let [request] = report.requests.as_slice() else {
        panic!("one request: {:?}", report.requests)
    };
    assert_eq!(
        (request.method.as_str(), request.url.as_str()),
        ("POST", "https://hooks.example.com/orders")
    );
    assert_eq!(request.body, r#"{"mock":true}"#);
}

#[tokio::test]
async fn the_mock_enforces_the_manifest_and_lists_the_denied_request_apart() {
    let options = MockOptions {
        manifest: None,
        http_response: Some(MockHttpResponse {
            status: 200,
            body: String::new(),
        }),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), WEBHOOK.as_ref(), options)
        .await
        .unwrap();
    let mut envelope = runner.mock_envelope();
    envelope.destination = "https://hooks.example.com/orders".into();
    let report = runner.run(&envelope, 1).await;
    assert_eq!(
        (report.calls[0].outcome_name(), report.calls[0].error_type()),
        ("permanent", Some("denied"))
    );
    assert!(report.requests.is_empty());
    assert_eq!(report.denied.len(), 1, "{:?}", report.denied);
    assert_eq!(
        (
            report.denied[0].method.as_str(),
            report.denied[0].url.as_str()
        ),
        ("POST", "https://hooks.example.com/orders")
    );
    assert!(
        report
            .logs
            .iter()
            .any(|line| line.source == LogSource::Host && line.message.contains("denied")),
        "{:?}",
        report.logs
    );
}

#[tokio::test]
async fn plugin_test_prints_a_success_and_exits_0_for_noop() {
    let run = outbox_host(&["plugin", "test", NOOP]).await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    assert!(run.out.contains("destination type: NOOP"), "{}", run.out);
    assert!(run.out.contains("call 1: success"), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_exits_1_for_an_outcome_other_than_success() {
    let dir = ScratchDir::new("cli-envelope");
    let envelope = dir.write(
        "envelope.json",
        br#"{"payload": {"outcome": "retryable", "error_type": "busy"}}"#,
    );
    let run = outbox_host(&[
        "plugin",
        "test",
        SCRIPTED,
        "--envelope",
        envelope.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    assert!(run.out.contains("call 1: retryable [busy]"), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_exits_1_when_a_call_fails_in_the_sandbox() {
    let dir = ScratchDir::new("cli-trap");
    let envelope = dir.write("envelope.json", br#"{"destination": "trap"}"#);
    let run = outbox_host(&[
        "plugin",
        "test",
        HOSTILE,
        "--envelope",
        envelope.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    assert!(run.out.contains("call 1: failed [trap]"), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_prints_json_with_every_call_when_asked() {
    let run = outbox_host(&["plugin", "test", NOOP, "--repeat", "2", "--json"]).await;
    assert_eq!(run.code, 0);
    let report: serde_json::Value = serde_json::from_str(&run.out).unwrap();
    assert_eq!(report["succeeded"], true);
    assert_eq!(report["calls"].as_array().unwrap().len(), 2);
    assert_eq!(report["calls"][0]["outcome"], "success");
}

#[tokio::test]
async fn plugin_test_with_http_response_prints_the_recorded_request() {
    let dir = ScratchDir::new("cli-http");
    let manifest = dir.write(
        "webhook.toml",
        b"[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n",
    );
    let envelope = dir.write(
        "envelope.json",
        br#"{"destination": "https://hooks.example.com/x"}"#,
    );
    let run = outbox_host(&[
        "plugin",
        "test",
        WEBHOOK,
        "--manifest",
        manifest.to_str().unwrap(),
        "--envelope",
        envelope.to_str().unwrap(),
        "--http-response",
        "200",
    ])
    .await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    assert!(
        run.out.contains("POST https://hooks.example.com/x"),
        "{}",
        run.out
    );
}

/// `plugin test` on the kafka plugin granted `orders`, with the mock envelope sent to `topic`.
async fn kafka_plugin_test(label: &str, topic: &str, extra: &[&str]) -> Run {
    let dir = ScratchDir::new(label);
    let manifest = dir.write("kafka.toml", b"[kafka]\ntopics = [\"orders\"]\n");
    let envelope = dir.write(
        "envelope.json",
        format!(r#"{{"destination": "{topic}", "aggregate_id": "42", "headers": {{"traceparent": "t-1"}}}}"#)
            .as_bytes(),
    );
    let mut args = vec![
        "plugin",
        "test",
        KAFKA,
        "--manifest",
        manifest.to_str().unwrap(),
        "--envelope",
        envelope.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    outbox_host(&args).await
}

#[tokio::test]
async fn plugin_test_records_what_the_kafka_plugin_produces_to_a_granted_topic() {
    let run = kafka_plugin_test("cli-kafka", "orders", &[]).await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    assert!(
        run.out
            .contains("kafka records produced (answered by the mock):")
            && run
                .out
                .contains("orders key=\"42\" traceparent=\"t-1\" outbox-message-id=")
            && run.out.contains("outbox-event-type="),
        "{}",
        run.out
    );
}

#[tokio::test]
async fn plugin_test_denies_a_topic_the_manifest_does_not_grant_and_produces_nothing() {
    let run = kafka_plugin_test("cli-kafka-denied", "payroll", &[]).await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    assert!(run.out.contains("not granted"), "{}", run.out);
    assert!(!run.out.contains("kafka records produced"), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_answers_kafka_records_as_kafka_response_says() {
    let run = kafka_plugin_test(
        "cli-kafka-retry",
        "orders",
        &["--kafka-response", "retryable"],
    )
    .await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    assert!(run.out.contains("retryable"), "{}", run.out);
    assert!(run.out.contains("kafka records produced"), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_names_the_manifest_shows_the_envelope_and_lists_denied_requests() {
    let dir = ScratchDir::new("cli-show");
    let manifest = dir.write(
        "webhook.toml",
        b"[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n",
    );
    let envelope = dir.write(
        "envelope.json",
        br#"{"destination": "https://other.example.org/x", "payload": {"order": 42}}"#,
    );
    let run = outbox_host(&[
        "plugin",
        "test",
        WEBHOOK,
        "--manifest",
        manifest.to_str().unwrap(),
        "--envelope",
        envelope.to_str().unwrap(),
        "--show-envelope",
    ])
    .await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    for expected in [
        format!("manifest:         {}", manifest.display()),
        "envelope (an --envelope file may override any field):".to_owned(),
        "    \"destination\": \"https://other.example.org/x\",".to_owned(),
        "    \"entry_id\": 1,".to_owned(),
        "    \"max_attempts\": 5,".to_owned(),
        "      \"order\": 42".to_owned(),
        "call 1: permanent [denied]".to_owned(),
        "requests denied (never sent):".to_owned(),
        "  POST https://other.example.org/x (no entry of http.allowed_hosts matches)".to_owned(),
    ] {
        assert!(
            run.out.lines().any(|line| line.starts_with(&expected)),
            "{expected}\n{}",
            run.out
        );
    }
}

#[tokio::test]
async fn plugin_test_says_when_no_manifest_grants_anything() {
    let run = outbox_host(&["plugin", "test", NOOP]).await;
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    assert!(
        run.out
            .lines()
            .any(|line| line == "manifest:         none (nothing granted)"),
        "{}",
        run.out
    );
    assert!(!run.out.contains("envelope ("), "{}", run.out);
}

#[tokio::test]
async fn plugin_test_exits_2_when_the_plugin_cannot_be_loaded() {
    let dir = ScratchDir::new("cli-bad");
    let garbage = dir.write("garbage.wasm", b"not a component");
    let run = outbox_host(&["plugin", "test", garbage.to_str().unwrap()]).await;
    assert_eq!(run.code, 2);
    assert!(run.err.contains("garbage.wasm"), "{}", run.err);
}

#[tokio::test]
async fn plugin_test_exits_2_for_a_malformed_envelope() {
    let dir = ScratchDir::new("cli-bad-envelope");
    let envelope = dir.write("envelope.json", br#"{"unknown_field": 1}"#);
    let run = outbox_host(&[
        "plugin",
        "test",
        NOOP,
        "--envelope",
        envelope.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 2);
    assert!(run.err.contains("unknown_field"), "{}", run.err);
}

#[test]
fn a_usage_error_exits_2() {
    let error = Cli::try_parse_from([
        "outbox-host",
        "plugin",
        "test",
        NOOP,
        "--http-response",
        "abc",
    ])
    .unwrap_err();
    assert_eq!(error.exit_code(), 2);
}

#[tokio::test]
async fn plugin_inspect_prints_world_imports_destination_type_and_claim_scope() {
    let run = outbox_host(&["plugin", "inspect", WEBHOOK]).await;
    assert_eq!(run.code, 0, "{}", run.err);
    assert!(
        run.out.contains("world:            destination-handler"),
        "{}",
        run.out
    );
    assert!(run.out.contains("destination type: WEBHOOK"), "{}", run.out);
    assert!(run.out.contains("claim scope:      all"), "{}", run.out);
    assert!(
        run.out.contains("wasi:http/outgoing-handler@0.2.12"),
        "{}",
        run.out
    );
}

#[tokio::test]
async fn plugin_inspect_tells_an_observer() {
    let run = outbox_host(&["plugin", "inspect", STATS, "--json"]).await;
    assert_eq!(run.code, 0, "{}", run.err);
    let report: serde_json::Value = serde_json::from_str(&run.out).unwrap();
    assert_eq!(report["world"], "publish-observer");
    assert_eq!(report["destination_type"], serde_json::Value::Null);
}

/// One `log-flood` call of `lines` lines by the hostile plugin under `limits` (a `[limits]` table).
async fn flood_report(label: &str, limits: &str, lines: u32) -> TestReport {
    let dir = ScratchDir::new(label);
    let manifest = dir.write("hostile.toml", format!("[limits]\n{limits}").as_bytes());
    let options = MockOptions {
        manifest: Some(manifest),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), HOSTILE.as_ref(), options)
        .await
        .unwrap();
    let mut envelope = runner.mock_envelope();
    envelope.destination = "log-flood".into();
    envelope.payload = format!(r#"{{"lines": {lines}}}"#);
    runner.run(&envelope, 1).await
}

#[tokio::test]
async fn a_flooding_plugin_keeps_a_bounded_number_of_lines_in_the_report() {
    let limits = "log_lines_per_second = 10000\nlog_bytes_per_second = 16777216\n";
    let report = flood_report("mock-flood", limits, 5000).await;
    assert!(report.succeeded());
    assert_eq!(report.logs.len(), MAX_CAPTURED_LINES);
    assert_eq!(report.logs_not_kept, 5000 - MAX_CAPTURED_LINES as u64);
    assert!(report.to_string().contains("more lines not kept"));
}

#[tokio::test]
async fn the_mock_runner_enforces_the_log_budget_as_the_host_does() {
    let report = flood_report("mock-budget", "log_lines_per_second = 20\n", 500).await;
    let flood_lines = report
        .logs
        .iter()
        .filter(|line| line.message.starts_with("flood line"))
        .count();
    assert!(
        flood_lines <= 20,
        "{flood_lines} lines passed a budget of 20"
    );
    assert!(
        report
            .logs
            .iter()
            .any(|line| line.source == LogSource::Host && line.message.contains("log budget"))
    );
}

/// The webhook's mock report with `signing_secrets` set to `secrets`, answered 200.
async fn signed_webhook_report(label: &str, secrets: &str) -> TestReport {
    let dir = ScratchDir::new(label);
    let manifest = dir.write(
        "webhook.toml",
        format!(
            "[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n\
             [config]\nsigning_secrets = \"{secrets}\"\n"
        )
        .as_bytes(),
    );
    let options = MockOptions {
        manifest: Some(manifest),
        http_response: Some(MockHttpResponse {
            status: 200,
            body: String::new(),
        }),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), WEBHOOK.as_ref(), options)
        .await
        .unwrap();
    let mut envelope = runner.mock_envelope();
    envelope.destination = "https://hooks.example.com/orders".into();
    runner.run(&envelope, 1).await
}

#[tokio::test]
async fn plugin_test_shows_the_webhooks_signature_headers_one_signature_per_secret() {
    let dir = ScratchDir::new("cli-signed");
    let (old, new) = (new_secret("cli-old"), new_secret("cli-new"));
    let manifest = dir.write(
        "webhook.toml",
        format!(
            "[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n\
             [config]\nsigning_secrets = \"{old} {new}\"\n"
        )
        .as_bytes(),
    );
    let envelope = dir.write(
        "envelope.json",
        br#"{"destination": "https://hooks.example.com/x", "carrier_id": "01900000-0000-7000-8000-0000000000aa"}"#,
    );
    let before = unix_seconds();
    let run = outbox_host(&[
        "plugin",
        "test",
        WEBHOOK,
        "--manifest",
        manifest.to_str().unwrap(),
        "--envelope",
        envelope.to_str().unwrap(),
        "--http-response",
        "200",
    ])
    .await;
    let after = unix_seconds();
    assert_eq!(run.code, 0, "{}{}", run.out, run.err);
    let header = |name: &str| {
        run.out
            .lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(": "))
            .unwrap_or_else(|| panic!("the report shows {name}:\n{}", run.out))
    };
    assert_eq!(
        header("webhook-id"),
        "01900000-0000-7000-8000-0000000000aa",
        "the carrier id"
    );
    let timestamp: u64 = header("webhook-timestamp").parse().expect("unix seconds");
    assert!(
        (before..=after).contains(&timestamp),
        "the sandbox's wall clock at send time"
    );
    let signatures: Vec<&str> = header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2, "one signature per secret");
    assert!(
        signatures.iter().all(|signature| signature
            .strip_prefix("v1,")
            .is_some_and(|mac| mac.len() == 44)),
        "v1,<base64 of 32 bytes>"
    );
    for secret in [&old, &new] {
        let key = secret.strip_prefix("whsec_").unwrap();
        assert!(
            !run.out.contains(key) && !run.err.contains(key),
            "the report never shows a secret"
        );
    }
}

#[tokio::test]
async fn the_webhook_sends_no_signature_headers_without_signing_secrets() {
    let dir = ScratchDir::new("mock-unsigned");
    let manifest = dir.write(
        "webhook.toml",
        b"[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n",
    );
    let options = MockOptions {
        manifest: Some(manifest),
        http_response: Some(MockHttpResponse {
            status: 200,
            body: String::new(),
        }),
        ..MockOptions::default()
    };
    let runner = MockRunner::load(&test_engine(), WEBHOOK.as_ref(), options)
        .await
        .unwrap();
    let mut envelope = runner.mock_envelope();
    envelope.destination = "https://hooks.example.com/orders".into();
    let report = runner.run(&envelope, 1).await;
    assert!(report.succeeded());
    let [request] = report.requests.as_slice() else {
        panic!("one request: {:?}", report.requests)
    };
    let names: Vec<&str> = request
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(names.contains(&"idempotency-key"), "{names:?}");
    assert!(
        !names.iter().any(|name| name.starts_with("webhook-")),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_malformed_signing_secret_fails_the_row_permanently_naming_it_by_position_only() {
    let good = new_secret("malformed-good");
    let good_key = good.trim_start_matches("whsec_").to_owned();
    // Valid base64 of 12 bytes, not base64 at all, no prefix, and a key that lists nothing.
    for (secrets, says, bad_key) in [
        (
            format!("{good} whsec_c2hvcnRzZWNyZXQx"),
            "secret 2 is 12 bytes",
            Some("c2hvcnRzZWNyZXQx"),
        ),
        (
            format!("{good} whsec_not*base64*at*all"),
            "secret 2 is not base64",
            Some("not*base64*at*all"),
        ),
        (
            format!("c2VjcmV0IHdpdGhvdXQgdGhlIHByZWZpeCAxMjM0 {good}"),
            "secret 1 does not start with `whsec_`",
            Some("c2VjcmV0IHdpdGhvdXQgdGhlIHByZWZpeCAxMjM0"),
        ),
        ("  ".to_owned(), "set but lists no secret", None),
    ] {
        let report = signed_webhook_report("mock-malformed", &secrets).await;
        let call = &report.calls[0];
        assert_eq!(
            (call.outcome_name(), call.error_type()),
            ("permanent", Some("config"))
        );
        let message = call.message().unwrap();
        assert!(
            bad_key.is_none_or(|key| !message.contains(key)),
            "the message never quotes the bad secret"
        );
        assert!(!message.contains(&good_key), "nor a good one");
        assert!(
            message.contains(&format!("[config] signing_secrets: {says}")),
            "{message}"
        );
        assert!(
            report.requests.is_empty() && report.denied.is_empty(),
            "nothing is sent unsigned"
        );
    }
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
