//! The keep-alive connections of a plugin (`host/src/plugins/capabilities/http/connections.rs`),
//! against the hostile plugin's `wasi:http` and `outbox:relay/http` requests and a local server:
//! reused within one plugin, never shared between plugins, closed when idle, and never the cause
//! of a lost or doubled request when the server hangs up.

use std::time::{Duration, Instant};

use outbox_host::plugins::{Limits, PluginSet, PublishResult};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugin_engine::test_engine;
use outbox_tests::plugins::HOSTILE;
use outbox_tests::scratch::ScratchDir;

async fn hostile_allowed(dir: &ScratchDir, server: &StubServer) -> PluginSet {
    hostile_allowed_all(dir, std::slice::from_ref(server)).await
}

async fn hostile_allowed_all(dir: &ScratchDir, servers: &[StubServer]) -> PluginSet {
    let origins: Vec<String> = servers.iter().map(StubServer::origin).collect();
    dir.add_plugin("hostile", HOSTILE);
    dir.add_manifest("hostile", &format!("[http]\nallowed_hosts = {origins:?}\n"));
    PluginSet::load_dir(&test_engine(), dir.path()).await
}

async fn get(set: &PluginSet, action: &str, url: &str) -> PublishResult {
    let hostile = set
        .handler("HOSTILE")
        .expect("the hostile plugin is loaded");
    let mut envelope = outbox_host::plugins::mock::mock_envelope("HOSTILE");
    envelope.destination = action.into();
    envelope.payload = serde_json::json!({ "url": url, "timeout_ms": 2000 }).to_string();
    hostile.publish(&envelope).await.expect("the call returns")
}

#[tokio::test]
async fn a_plugins_requests_to_one_origin_share_one_connection() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("connections-reuse");
    let set = hostile_allowed(&dir, &server).await;
    for action in [
        "http-raw",
        "http-send",
        "http-send-encoded",
        "http-raw",
        "http-send",
    ] {
        assert_eq!(
            get(&set, action, &server.url("/")).await,
            PublishResult::Success
        );
    }
    assert_eq!(server.requests().len(), 5);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn two_plugins_never_send_on_each_others_connections() {
    let server = StubServer::start(200).await;
    let (first_dir, second_dir) = (
        ScratchDir::new("connections-first"),
        ScratchDir::new("connections-second"),
    );
    let first = hostile_allowed(&first_dir, &server).await;
    let second = hostile_allowed(&second_dir, &server).await;
    for _ in 0..3 {
        assert_eq!(
            get(&first, "http-send", &server.url("/")).await,
            PublishResult::Success
        );
        assert_eq!(
            get(&second, "http-send", &server.url("/")).await,
            PublishResult::Success
        );
    }
    assert_eq!(server.connections(), 2, "one connection for each plugin");
}

#[tokio::test]
async fn a_server_that_hangs_up_after_each_answer_still_gets_every_request_once() {
    let server = StubServer::start(200).await;
    server.hang_up_after_each_answer();
    let dir = ScratchDir::new("connections-hang-up");
    let set = hostile_allowed(&dir, &server).await;
    for round in 0..20 {
        let action = if round % 2 == 0 {
            "http-raw"
        } else {
            "http-send"
        };
        let path = format!("/{round}");
        assert_eq!(
            get(&set, action, &server.url(&path)).await,
            PublishResult::Success,
            "{round}"
        );
    }
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    let expected: Vec<String> = (0..20).map(|round| format!("/{round}")).collect();
    assert_eq!(
        paths, expected,
        "each request arrived exactly once, in order"
    );
}

#[tokio::test]
async fn a_response_left_half_read_closes_its_connection() {
    let server = StubServer::start(200).await;
    // Past the 4 MiB a one-call exchange reads: the rest is never read.
    server.set_body_size(5 * 1024 * 1024);
    let dir = ScratchDir::new("connections-half-read");
    let set = hostile_allowed(&dir, &server).await;
    get(&set, "http-send", &server.url("/")).await;
    server.set_body_size(0);
    assert_eq!(
        get(&set, "http-send", &server.url("/")).await,
        PublishResult::Success
    );
    assert_eq!(
        server.connections(),
        2,
        "the half-read connection was not reused"
    );
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let server = StubServer::start(200).await;
    let dir = ScratchDir::new("connections-idle");
    let set = hostile_allowed(&dir, &server).await;
    assert_eq!(
        get(&set, "http-send", &server.url("/")).await,
        PublishResult::Success
    );
    assert_eq!(server.open_connections(), 1, "kept for the next request");
    // The idle timeout is 4 s and the reaper looks every 2 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.open_connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(set);
}

#[tokio::test]
async fn a_plugin_keeps_at_most_as_many_idle_connections_as_it_may_run_calls() {
    let bound = Limits::MAX_CONCURRENCY as usize;
    let mut servers = Vec::new();
    for _ in 0..bound + 8 {
        servers.push(StubServer::start(200).await);
    }
    let dir = ScratchDir::new("connections-many-origins");
    let set = hostile_allowed_all(&dir, &servers).await;
    for server in &servers {
        assert_eq!(
            get(&set, "http-send", &server.url("/")).await,
            PublishResult::Success
        );
    }
    let open = || {
        servers
            .iter()
            .map(StubServer::open_connections)
            .sum::<usize>()
    };
    // Well before the 4 s idle timeout, so only the bound can have closed them.
    let deadline = Instant::now() + Duration::from_secs(2);
    while open() > bound {
        assert!(
            Instant::now() < deadline,
            "{} idle connections are still open",
            open()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept: Vec<usize> = servers.iter().map(StubServer::open_connections).collect();
    assert_eq!(kept[..8], [0; 8], "the 8 least recently used were closed");
    assert_eq!(kept.last(), Some(&1), "the most recent was kept");
    assert_eq!(
        get(&set, "http-send", &servers[0].url("/")).await,
        PublishResult::Success,
        "an origin whose connection was closed gets a new one"
    );
}

#[tokio::test]
async fn bytes_a_server_sends_on_an_idle_connection_never_answer_a_later_request() {
    let server = StubServer::start(200).await;
    server.write_after_each_answer(b"HTTP/1.1 503 Smuggled\r\ncontent-length: 0\r\n\r\n");
    let dir = ScratchDir::new("connections-unsolicited");
    let set = hostile_allowed(&dir, &server).await;
    for round in 0..3 {
        assert_eq!(
            get(&set, "http-send", &server.url("/")).await,
            PublishResult::Success,
            "round {round} got the server's answer to it, not the unsolicited one"
        );
        // The unsolicited bytes come 50 ms after each answer, while the connection is idle.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(server.requests().len(), 3);
    assert_eq!(
        server.connections(),
        3,
        "a connection that carried unsolicited bytes was not reused"
    );
}
