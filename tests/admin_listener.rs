//! The admin listener as operators use it: the bearer token, dead letters over HTTP, readiness on a
//! stuck relay and without its database, and answering while the host drains.

use outbox_host::admin::client::AdminRequest;
use outbox_host::config::AdminToken;
use outbox_tests::db::{self, TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use outbox_tests::tcp_proxy::TcpProxy;
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(30);
const TOKEN: &str = "test-admin-token-0123456789";

/// Status and body of `request`.
async fn send(request: AdminRequest) -> (u16, String) {
    let (status, body) = request.send().await.expect("the admin listener answers");
    (status.as_u16(), String::from_utf8(body.to_vec()).unwrap())
}

fn noop_dir(label: &str) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("noop", plugins::NOOP);
    dir
}

/// Waits until `/readyz` answers `status` with a body containing `reason`.
async fn wait_for_readyz(host: &TestHost, token: Option<&str>, status: u16, reason: &str) {
    let url = host.admin_url("/readyz");
    let token = token.map(AdminToken::new);
    wait_until(
        &format!("/readyz answers {status} {reason}"),
        SETTLE,
        || {
            let request = AdminRequest::get(&url).token(token.clone());
            async move {
                let (got, body) = send(request).await;
                got == status && body.contains(reason)
            }
        },
    )
    .await;
}

#[tokio::test]
async fn with_a_token_every_endpoint_but_healthz_requires_it_as_a_bearer_token() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-token");
    let mut config = host::config(&db, dir.path());
    config.admin.token = Some(AdminToken::new(TOKEN));
    let host = TestHost::start(&config).await;

    let (status, body) = send(AdminRequest::get(host.admin_url("/healthz"))).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let wrong = Some(AdminToken::new("not-the-admin-token-at-all"));
    for path in ["/readyz", "/metrics", "/plugins", "/dlq"] {
        let url = host.admin_url(path);
        let (status, body) = send(AdminRequest::get(&url)).await;
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(!body.contains(TOKEN), "{body}");
        let (status, _) = send(AdminRequest::get(&url).token(wrong.clone())).await;
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    for path in ["/dlq/redrive", "/dlq/purge"] {
        let request =
            AdminRequest::post_json(host.admin_url(path), &serde_json::json!({"ids": [1]}));
        assert_eq!(send(request).await.0, 401, "{path} without a token");
    }

    wait_for_readyz(&host, Some(TOKEN), 200, "ready").await;
    let token = Some(AdminToken::new(TOKEN));
    for path in ["/metrics", "/plugins", "/dlq"] {
        let request = AdminRequest::get(host.admin_url(path)).token(token.clone());
        assert_eq!(send(request).await.0, 200, "{path} with the token");
    }
    let request = AdminRequest::post_json(
        host.admin_url("/dlq/redrive"),
        &serde_json::json!({"ids": [1]}),
    )
    .token(token);
    assert_eq!(send(request).await, (200, r#"{"redriven":0}"#.to_owned()));
    host.stop().await;
}

#[tokio::test]
async fn dead_letters_are_listed_redriven_and_purged_over_http() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("admin-dlq");
    // No plugin: redriven rows stay PENDING for the test to see.
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let first = db
        .publish(entry("WEBHOOK", "https://hooks.example.com/a"))
        .await;
    let second = db
        .publish(entry("WEBHOOK", "https://hooks.example.com/b"))
        .await;
    let other = db.publish(entry("KAFKA", "orders")).await;
    db.dead_letter(first, "http-status", "HTTP 404", 120).await;
    db.dead_letter(second, "http-status", "HTTP 410", 60).await;
    db.dead_letter(other, "denied", "topic not granted", 30)
        .await;

    let (status, body) = send(AdminRequest::get(
        host.admin_url("/dlq?type=WEBHOOK&limit=10"),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<i64> = page["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [second, first]);
    assert_eq!(page["dead_letters"][0]["last_error"], "HTTP 410");
    assert!(
        !body.contains("payload") && !body.contains("headers"),
        "{body}"
    );

    let redrive = AdminRequest::post_json(
        host.admin_url("/dlq/redrive"),
        &serde_json::json!({"ids": [first]}),
    );
    assert_eq!(send(redrive).await, (200, r#"{"redriven":1}"#.to_owned()));
    assert_eq!(db.state_of(first).await, "PENDING");
    let attempt: i32 = db
        .scalar(&format!(
            "SELECT attempt FROM {{outbox}} WHERE id = {first}"
        ))
        .await;
    assert_eq!(attempt, 0);

    let purge = AdminRequest::post_json(
        host.admin_url("/dlq/purge"),
        &serde_json::json!({"type": "WEBHOOK", "since": "1h"}),
    );
    assert_eq!(send(purge).await, (200, r#"{"purged":1}"#.to_owned()));
    assert_eq!(db.count("DEAD_LETTER").await, 1);
    assert_eq!(db.state_of(other).await, "DEAD_LETTER");
    host.stop().await;
}

#[tokio::test]
async fn a_dead_letter_request_without_a_selection_or_with_a_bad_since_is_refused() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("admin-dlq-bad");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let id = db
        .publish(entry("WEBHOOK", "https://hooks.example.com/a"))
        .await;
    db.dead_letter(id, "http-status", "HTTP 404", 60).await;

    for body in [
        serde_json::json!({}),
        serde_json::json!({"ids": [id], "type": "WEBHOOK"}),
        serde_json::json!({"since": "1h"}),
        serde_json::json!({"type": "WEBHOOK", "since": "yesterday"}),
        serde_json::json!({"ids": "all"}),
    ] {
        for path in ["/dlq/redrive", "/dlq/purge"] {
            let (status, answer) = send(AdminRequest::post_json(host.admin_url(path), &body)).await;
            assert_eq!(status, 400, "{path} {body}: {answer}");
            assert!(answer.contains("\"error\""), "{answer}");
        }
    }
    let (status, _) = send(AdminRequest::get(host.admin_url("/dlq?since=soon"))).await;
    assert_eq!(status, 400);
    let (status, _) = send(AdminRequest::get(host.admin_url("/dlq?limit=0"))).await;
    assert_eq!(status, 400);
    assert_eq!(db.state_of(id).await, "DEAD_LETTER");
    host.stop().await;
}

#[tokio::test]
async fn readyz_fails_while_the_relay_is_stuck_and_recovers_when_it_turns_again() {
    let db = TestDb::new().await;
    let dir = noop_dir("admin-stuck");
    let mut config = host::config(&db, dir.path());
    config.relay.stalled_after = Duration::from_millis(1000);
    let host = TestHost::start(&config).await;
    wait_for_readyz(&host, None, 200, "ready").await;

    // A lock the claim statement waits behind: the relay cannot complete a turn, while the
    // database itself still answers.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query(&format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        db.tables.outbox()
    ))
    .execute(&mut *blocker)
    .await
    .unwrap();
    wait_for_readyz(&host, None, 503, "no relay turn completed in the last").await;

    blocker.rollback().await.unwrap();
    wait_for_readyz(&host, None, 200, "ready").await;
    host.stop().await;
}

#[tokio::test]
async fn readyz_fails_while_the_database_is_unreachable() {
    let db = TestDb::new().await;
    let options = db::options();
    let proxy = TcpProxy::start((options.get_host().to_owned(), options.get_port())).await;
    let dir = noop_dir("admin-no-database");
    let mut config = host::config(&db, dir.path());
    config.database.url = Some(format!(
        "postgres://{}@{}/{}",
        options.get_username(),
        proxy.address(),
        options.get_database().unwrap_or("test")
    ));
    let host = TestHost::start(&config).await;
    wait_for_readyz(&host, None, 200, "ready").await;

    proxy.cut();
    wait_for_readyz(&host, None, 503, "the database does not answer").await;
    let (status, _) = send(AdminRequest::get(host.admin_url("/healthz"))).await;
    assert_eq!(status, 200, "liveness does not depend on the database");

    proxy.restore();
    wait_for_readyz(&host, None, 200, "ready").await;
    host.stop().await;
}

#[tokio::test]
async fn the_admin_listener_answers_while_the_host_drains_and_stops_after() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    stub.set_delay(Duration::from_secs(4));
    let dir = ScratchDir::new("admin-drain");
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", stub.origin()),
    );
    let mut config = host::config(&db, dir.path());
    config.relay.shutdown_grace = Duration::from_millis(20_000);
    let host = TestHost::start(&config).await;
    db.publish(entry("WEBHOOK", &stub.url("/hook"))).await;
    wait_until("the publish is in flight", SETTLE, || async {
        !stub.requests().is_empty()
    })
    .await;

    let admin = host.admin_url("");
    host.shutdown.cancel();
    let stopped = tokio::spawn(host.service.wait());
    let (status, body) = send(AdminRequest::get(format!("{admin}/healthz"))).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = send(AdminRequest::get(format!("{admin}/readyz"))).await;
    assert_eq!((status, body.as_str()), (503, "not ready: stopping\n"));
    let (status, body) = send(AdminRequest::get(format!("{admin}/metrics"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(!stopped.is_finished(), "the publish was still draining");

    tokio::time::timeout(SETTLE, stopped)
        .await
        .expect("the host stops once the publish finished")
        .unwrap();
    assert_eq!(db.count("PUBLISHED").await, 1);
    assert!(
        AdminRequest::get(format!("{admin}/healthz"))
            .send()
            .await
            .is_err(),
        "the listener is closed once the host has stopped"
    );
}
