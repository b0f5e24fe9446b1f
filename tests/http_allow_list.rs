//! `http.allowed_hosts` and the limits of an exchange, against the hostile plugin
//! (`tests/plugins/hostile`), which builds its requests with `wasi:http` directly (`http-raw`) or
//! calls `outbox:relay/http` as it likes (`http-send`), past the SDK's own checks: user info in a
//! request authority is denied before any connection, patterns wide enough to grant hosts the
//! operator never named fail the manifest, and a one-call exchange keeps every rule a `wasi:http`
//! request keeps.

use outbox_host::plugins::{PluginSet, PluginState, PublishResult};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugin_engine::test_engine;
use outbox_tests::plugins::HOSTILE;
use outbox_tests::scratch::ScratchDir;

/// The hostile plugin, allowed to reach `allowed_hosts` only.
async fn hostile_allowed(dir: &ScratchDir, allowed_hosts: &str) -> PluginSet {
    dir.add_plugin("hostile", HOSTILE);
    dir.add_manifest(
        "hostile",
        &format!("[http]\nallowed_hosts = [{allowed_hosts:?}]\n"),
    );
    PluginSet::load_dir(&test_engine(), dir.path()).await
}

async fn hostile_call(set: &PluginSet, action: &str, payload: serde_json::Value) -> PublishResult {
    let hostile = set
        .handler("HOSTILE")
        .expect("the hostile plugin is loaded");
    let mut envelope = outbox_host::plugins::mock::mock_envelope("HOSTILE");
    envelope.destination = action.into();
    envelope.payload = payload.to_string();
    hostile.publish(&envelope).await.expect("the call returns")
}

async fn raw_get(set: &PluginSet, url: &str) -> PublishResult {
    hostile_call(set, "http-raw", serde_json::json!({ "url": url })).await
}

/// A GET through `outbox:relay/http`, with these headers.
async fn one_call_get(set: &PluginSet, url: &str, headers: &[(&str, &str)]) -> PublishResult {
    let payload = serde_json::json!({ "url": url, "headers": headers, "timeout_ms": 500 });
    hostile_call(set, "http-send", payload).await
}

/// The message of a permanent failure (what `http-send` reports), or "" for any other result.
fn message(result: &PublishResult) -> &str {
    match result {
        PublishResult::Permanent(failure) => &failure.message,
        _ => "",
    }
}

fn error_type(result: &PublishResult) -> Option<&str> {
    match result {
        PublishResult::Permanent(failure) => failure.error_type.as_deref(),
        PublishResult::Retryable(failure) => failure.error_type.as_deref(),
        PublishResult::Success | PublishResult::Unresolvable(_) => None,
    }
}

#[tokio::test]
async fn a_request_to_an_allowed_host_without_user_info_goes_through() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("allow-list-plain");
    let set = hostile_allowed(&dir, &server.origin()).await;
    assert_eq!(
        raw_get(&set, &server.url("/")).await,
        PublishResult::Success
    );
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_request_with_user_info_is_denied_and_never_connects() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("allow-list-userinfo");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let port = server.port();
    for url in [
        format!("http://user@127.0.0.1:{port}/"),
        format!("http://user:secret@127.0.0.1:{port}/"),
    ] {
        let result = raw_get(&set, &url).await;
        assert_eq!(error_type(&result), Some("denied"), "{url}: {result:?}");
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_wildcard_on_an_ip_address_fails_the_manifest_and_never_connects() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("allow-list-ip-wildcard");
    let pattern = format!("http://*.0.0.1:{}", server.port());
    let set = hostile_allowed(&dir, &pattern).await;

    assert!(set.handler("HOSTILE").is_none());
    let status = set.statuses().next().expect("a status for hostile.wasm");
    assert_eq!(status.state, PluginState::Failed);
    let error = status.last_error.as_deref().unwrap_or_default();
    assert!(error.contains("`http.allowed_hosts[0]`"), "{error}");
    assert!(!error.contains("0.0.1"), "{error}");
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_wildcard_on_a_top_level_domain_fails_the_manifest() {
    let dir = ScratchDir::new("allow-list-tld-wildcard");
    let set = hostile_allowed(&dir, "https://*.com").await;
    assert!(set.handler("HOSTILE").is_none());
    let status = set.statuses().next().expect("a status for hostile.wasm");
    assert_eq!(status.state, PluginState::Failed);
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("`http.allowed_hosts[0]` may use a wildcard only")),
        "{:?}",
        status.last_error
    );
}

#[tokio::test]
async fn a_one_call_exchange_with_an_allowed_host_returns_the_response() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("one-call-allowed");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let result = one_call_get(&set, &server.url("/hook?a=1"), &[("x-token", "t")]).await;
    assert_eq!(result, PublishResult::Success);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/hook?a=1");
    assert_eq!(requests[0].header("x-token"), Some("t"));
    assert_eq!(
        requests[0].header("host"),
        Some(server.origin().trim_start_matches("http://"))
    );
}

#[tokio::test]
async fn a_one_call_exchange_with_a_host_not_granted_is_denied_and_never_connects() {
    let granted = StubServer::start(200).await;
    let other = StubServer::start(200).await;
    let dir = ScratchDir::new("one-call-denied");
    let set = hostile_allowed(&dir, &granted.origin()).await;
    for url in [
        other.url("/"),
        format!("http://user:secret@127.0.0.1:{}/", granted.port()),
    ] {
        let result = one_call_get(&set, &url, &[]).await;
        assert_eq!(error_type(&result), Some("denied"), "{result:?}");
    }
    assert_eq!(other.connections() + granted.connections(), 0);
}

#[tokio::test]
async fn a_one_call_exchange_refuses_headers_only_the_host_may_set_before_connecting() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("one-call-forbidden-header");
    let set = hostile_allowed(&dir, &server.origin()).await;
    for header in [
        ("host", "evil.example"),
        ("transfer-encoding", "chunked"),
        ("connection", "upgrade"),
        ("x-smuggle", "a\r\nx-injected: 1"),
        ("bad name", "v"),
    ] {
        let result = one_call_get(&set, &server.url("/"), &[header]).await;
        assert_eq!(error_type(&result), Some("invalid-request"), "{result:?}");
        assert!(!message(&result).contains(header.1), "{result:?}");
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_one_call_exchange_refuses_an_oversized_header_section_before_connecting() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("one-call-header-section");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let value = "v".repeat(64 * 1024);
    let headers = [
        ("x-a", value.as_str()),
        ("x-b", value.as_str()),
        ("x-c", value.as_str()),
    ];
    let result = one_call_get(&set, &server.url("/"), &headers).await;
    assert_eq!(error_type(&result), Some("invalid-request"), "{result:?}");
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_one_call_exchange_fails_on_a_response_body_past_four_mebibytes() {
    let server = StubServer::start(200).await;
    server.set_body_size(5 * 1024 * 1024);
    let dir = ScratchDir::new("one-call-huge-body");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let result = one_call_get(&set, &server.url("/"), &[]).await;
    assert_eq!(error_type(&result), Some("protocol"), "{result:?}");
    assert_eq!(message(&result), "HTTP-response-body-size");
}

#[tokio::test]
async fn a_one_call_exchange_hands_back_a_body_under_the_limit() {
    let server = StubServer::start(200).await;
    server.set_body_size(1024 * 1024);
    let dir = ScratchDir::new("one-call-body");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let result = one_call_get(&set, &server.url("/"), &[]).await;
    assert_eq!(result, PublishResult::Success);
}

#[tokio::test]
async fn a_one_call_exchange_never_follows_a_redirect() {
    let elsewhere = StubServer::start(200).await;
    let server = StubServer::start(302).await;
    server.add_header("location", &elsewhere.url("/"));
    let dir = ScratchDir::new("one-call-redirect");
    let origins = format!("{:?}, {:?}", server.origin(), elsewhere.origin());
    dir.add_plugin("hostile", HOSTILE);
    dir.add_manifest("hostile", &format!("[http]\nallowed_hosts = [{origins}]\n"));
    let set = PluginSet::load_dir(&test_engine(), dir.path()).await;
    let result = one_call_get(&set, &server.url("/"), &[]).await;
    assert_eq!(error_type(&result), Some("status"), "{result:?}");
    assert_eq!(message(&result), "302");
    assert_eq!(elsewhere.connections(), 0);
}

#[tokio::test]
async fn a_one_call_exchange_times_out_at_the_timeout_it_asked_for() {
    let server = StubServer::start(200).await;
    server.set_delay(std::time::Duration::from_secs(5));
    let dir = ScratchDir::new("one-call-timeout");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let started = std::time::Instant::now();
    let result = one_call_get(&set, &server.url("/"), &[]).await;
    assert_eq!(error_type(&result), Some("timeout"), "{result:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
}

/// A GET through `send-encoded`, with this header section as it stands.
async fn encoded_get(
    set: &PluginSet,
    url: &str,
    section: &str,
    expect_line: Option<&str>,
) -> PublishResult {
    let payload = serde_json::json!({ "url": url, "section": section, "expect_line": expect_line, "timeout_ms": 500 });
    hostile_call(set, "http-send-encoded", payload).await
}

#[tokio::test]
async fn an_encoded_exchange_sends_each_line_of_its_section_and_hands_back_the_response_headers() {
    let server = StubServer::start(200).await;
    server.add_header("x-answer", "42");
    let dir = ScratchDir::new("encoded-allowed");
    let set = hostile_allowed(&dir, &server.origin()).await;
    let section = "x-token: t\r\nx-trace:  a b \r\n";
    let result = encoded_get(&set, &server.url("/hook"), section, Some("x-answer: 42")).await;
    assert_eq!(result, PublishResult::Success);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-token"), Some("t"));
    assert_eq!(requests[0].header("x-trace"), Some("a b"));
    assert_eq!(
        requests[0].header("host"),
        Some(server.origin().trim_start_matches("http://"))
    );
}

#[tokio::test]
async fn an_encoded_exchange_with_a_host_not_granted_is_denied_and_never_connects() {
    let granted = StubServer::start(200).await;
    let other = StubServer::start(200).await;
    let dir = ScratchDir::new("encoded-denied");
    let set = hostile_allowed(&dir, &granted.origin()).await;
    let result = encoded_get(&set, &other.url("/"), "", None).await;
    assert_eq!(error_type(&result), Some("denied"), "{result:?}");
    assert_eq!(other.connections() + granted.connections(), 0);
}

#[tokio::test]
async fn an_encoded_section_that_smuggles_forbidden_or_malformed_lines_is_refused_before_connecting()
 {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("encoded-smuggling");
    let set = hostile_allowed(&dir, &server.origin()).await;
    for section in [
        "host: evil.example\r\n",
        "x-a: 1\r\ntransfer-encoding: chunked\r\n",
        "connection: upgrade\r\n",
        "x-smuggle: secret-a\nx-injected: 1\r\n",
        "x-smuggle: secret-b\rx-injected: 1\r\n",
        "bad name: secret-c\r\n",
        "no-colon-secret-d\r\n",
        "x-unended: secret-e",
        "x-nul: secret-f\0x\r\n",
        "x-control: secret-g\u{1b}[2K\r\n",
        "x-del: secret-h\u{7f}\r\n",
        "x-nul\0name: secret-i\r\n",
    ] {
        let result = encoded_get(&set, &server.url("/"), section, None).await;
        assert_eq!(
            error_type(&result),
            Some("invalid-request"),
            "{section:?}: {result:?}"
        );
        assert!(!message(&result).contains("secret"), "{result:?}");
        assert!(!message(&result).contains("evil"), "{result:?}");
    }
    let huge = format!("x-a: {}\r\n", "v".repeat(200 * 1024));
    let result = encoded_get(&set, &server.url("/"), &huge, None).await;
    assert_eq!(error_type(&result), Some("invalid-request"), "{result:?}");
    assert_eq!(server.connections(), 0);
}
