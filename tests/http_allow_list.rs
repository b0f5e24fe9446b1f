//! `http.allowed_hosts` against the hostile plugin (`tests/plugins/hostile`), which builds its
//! requests with `wasi:http` directly (`http-raw`), past the SDK's own checks: user info in a
//! request authority is denied before any connection, and patterns wide enough to grant hosts the
//! operator never named fail the manifest.

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

async fn raw_get(set: &PluginSet, url: &str) -> PublishResult {
    let hostile = set
        .handler("HOSTILE")
        .expect("the hostile plugin is loaded");
    let mut envelope = outbox_host::plugins::mock::mock_envelope("HOSTILE");
    envelope.destination = "http-raw".into();
    envelope.payload = serde_json::json!({ "url": url }).to_string();
    hostile.publish(&envelope).await.expect("the call returns")
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
