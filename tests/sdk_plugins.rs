//! The Python and JavaScript example plugins, built from source with the SDKs: each one tried
//! through `outbox-host plugin test` (success, retry, permanent failure, a host that is not
//! granted), each delivering rows through a running host on real PostgreSQL to a local HTTP
//! receiver, and one hot-reloaded under load with no row lost.

use outbox_host::admin::PluginsPage;
use outbox_host::api::OutboxEntry;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::load::SteadyLoad;
use outbox_tests::log_capture;
use outbox_tests::scratch::ScratchDir;
use outbox_tests::sdk_plugins::{CHAT_WEBHOOK, ROUTER, SdkPlugin, TYPE_COUNTER};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
/// A first load compiles a Python or JavaScript component (seconds, minutes in a debug build on a
/// busy machine); later ones come from the shared cache.
const LOAD: Duration = Duration::from_secs(300);
const DELIVERY: Duration = Duration::from_secs(60);

/// `outbox-host plugin test` on `component` with `manifest`, the mock answering every allowed
/// request with `status`: its exit code and what it printed.
fn plugin_test(component: &Path, manifest: &str, envelope: &str, status: u16) -> (i32, String) {
    plugin_test_with(component, manifest, envelope, status, &[])
}

/// [`plugin_test`] with more arguments (`--http-header`, say).
fn plugin_test_with(
    component: &Path,
    manifest: &str,
    envelope: &str,
    status: u16,
    more: &[&str],
) -> (i32, String) {
    let dir = ScratchDir::new("sdk-plugin-test");
    let manifest_path = dir.write("plugin.toml", manifest.as_bytes());
    let envelope_path = dir.write("envelope.json", envelope.as_bytes());
    let output = Command::new(BINARY)
        .args(["plugin", "test"])
        .arg(component)
        .arg("--manifest")
        .arg(&manifest_path)
        .arg("--envelope")
        .arg(&envelope_path)
        .args(["--http-response", &status.to_string()])
        .args(more)
        .arg("--cache-dir")
        .arg(cli_cache())
        .output()
        .expect("outbox-host runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().expect("an exit code"), text)
}

/// The test hosts' own cache (see `host::state_dir`), so a component compiled for one is not
/// compiled again for the other.
fn cli_cache() -> PathBuf {
    host::state_dir().join("cache")
}

/// Checks the four outcomes every HTTP example must give under `plugin test`, and that a 429 or 503
/// with a readable `Retry-After` asks for that delay.
fn assert_outcomes(plugin: SdkPlugin, granted: &str, denied: &str, envelope: &str) {
    let Some(component) = plugin.component() else {
        return;
    };
    let (code, text) = plugin_test(&component, granted, envelope, 200);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("call 1: success"), "{text}");
    for status in [503, 429, 408] {
        let (code, text) = plugin_test(&component, granted, envelope, status);
        assert_eq!(code, 1, "{text}");
        assert!(
            text.contains(&format!(
                "retryable [http-status]: 127.0.0.1:9 answered HTTP {status}"
            )),
            "{text}"
        );
    }
    for (status, retry_after, shown) in [
        (429, "2", Some("asks to retry after 2000 ms")),
        (
            503,
            "Sun, 06 Nov 1994 08:49:37 GMT",
            Some("asks to retry after 0 ms"),
        ),
        (503, "soon", None),
        (500, "2", None),
    ] {
        let header = format!("Retry-After: {retry_after}");
        let (code, text) = plugin_test_with(
            &component,
            granted,
            envelope,
            status,
            &["--http-header", &header],
        );
        assert_eq!(code, 1, "{text}");
        assert!(text.contains("retryable [http-status]"), "{text}");
        match shown {
            Some(shown) => assert!(text.contains(shown), "{status} {header}: {text}"),
            None => assert!(!text.contains("retry after"), "{status} {header}: {text}"),
        }
    }
    let (code, text) = plugin_test(&component, granted, envelope, 404);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("permanent [http-status]: 127.0.0.1:9 answered HTTP 404"),
        "{text}"
    );
    let (code, text) = plugin_test(&component, denied, envelope, 200);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("permanent [denied]"), "{text}");
    assert!(text.contains("requests denied (never sent)"), "{text}");
}

#[test]
fn the_python_chat_webhook_succeeds_retries_fails_and_is_denied_in_plugin_test() {
    let envelope = r#"{"destination": "http://127.0.0.1:9/hook", "event_type": "order.created",
        "payload": {"order_id": "A-17", "total": "12 EUR"}}"#;
    assert_outcomes(
        CHAT_WEBHOOK,
        "[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n[config]\nchannel = \"#orders\"\n",
        "[http]\nallowed_hosts = [\"http://127.0.0.1:10\"]\n",
        envelope,
    );
    let Some(component) = CHAT_WEBHOOK.component() else {
        return;
    };
    let granted =
        "[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n[config]\nchannel = \"#orders\"\n";
    let (_, text) = plugin_test(&component, granted, envelope, 200);
    assert!(
        text.contains(r#""text": ":package: New order *A-17* for 12 EUR""#),
        "the message is shaped by the event type:\n{text}"
    );
    assert!(text.contains(r##""channel": "#orders""##), "{text}");
}

#[test]
fn the_javascript_router_succeeds_retries_fails_and_is_denied_in_plugin_test() {
    let envelope = r#"{"event_type": "order.created", "headers": {"traceparent": "00-1"},
        "payload": {"order_id": "A-17"}}"#;
    let routes = "[config]\n\"route.order.created\" = \"http://127.0.0.1:9/orders\"\n";
    assert_outcomes(
        ROUTER,
        &format!("[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n{routes}"),
        &format!("[http]\nallowed_hosts = [\"http://127.0.0.1:10\"]\n{routes}"),
        envelope,
    );
    let Some(component) = ROUTER.component() else {
        return;
    };
    let granted = format!("[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n{routes}");
    let (_, text) = plugin_test(&component, &granted, envelope, 200);
    assert!(text.contains("POST http://127.0.0.1:9/orders"), "{text}");
    assert!(
        text.contains("idempotency-key: 01900000-0000-7000-8000-000000000001"),
        "the carrier id is the idempotency key:\n{text}"
    );
    assert!(text.contains("traceparent: 00-1"), "{text}");
    let (code, text) = plugin_test(
        &component,
        &granted,
        r#"{"event_type": "user.deleted"}"#,
        200,
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("permanent [no-route]"), "{text}");
}

#[test]
fn the_javascript_router_refuses_an_application_header_that_would_smuggle_in_another() {
    let Some(component) = ROUTER.component() else {
        return;
    };
    let granted = "[http]\nallowed_hosts = [\"http://127.0.0.1:9\"]\n\
                   [config]\n\"route.default\" = \"http://127.0.0.1:9/in\"\n";
    for header in [
        r#""x-app": "a\r\nx-injected: 1""#,
        r#""x-app\r\nx-injected": "1""#,
        r#""x-injected: 1\r\nx-app": "1""#,
        r#""x-app:x-injected": "1""#,
    ] {
        let envelope = format!(r#"{{"event_type": "order.created", "headers": {{{header}}}}}"#);
        let (code, text) = plugin_test(&component, granted, &envelope, 200);
        assert_eq!(code, 1, "{text}");
        assert!(text.contains("permanent [invalid-request]"), "{text}");
        assert!(!text.contains("x-injected"), "{text}");
        assert!(!text.contains("POST http"), "nothing is sent: {text}");
    }
}

#[test]
fn the_python_type_counter_logs_its_counts_every_n_events_in_plugin_test() {
    let Some(component) = TYPE_COUNTER.component() else {
        return;
    };
    let dir = ScratchDir::new("sdk-type-counter");
    let manifest = dir.write("plugin.toml", b"[config]\nevery = \"2\"\n");
    let output = Command::new(BINARY)
        .args(["plugin", "test"])
        .arg(&component)
        .arg("--manifest")
        .arg(&manifest)
        .args(["--repeat", "5", "--cache-dir"])
        .arg(cli_cache())
        .output()
        .expect("outbox-host runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("after 2 events: MOCK/success=2"), "{text}");
    assert!(text.contains("after 4 events: MOCK/success=4"), "{text}");
    assert!(!text.contains("after 5 events"), "{text}");
}

/// A plugins directory with the three examples, the two handlers granted `receiver`.
fn deploy_examples(receiver: &StubServer) -> Option<ScratchDir> {
    let chat = CHAT_WEBHOOK.component()?;
    let router = ROUTER.component()?;
    let counter = TYPE_COUNTER.component()?;
    let dir = ScratchDir::new("sdk-e2e");
    let limits = "[limits]\ntimeout_ms = 20000\n";
    dir.add_manifest(
        "chat-webhook",
        &format!(
            "[http]\nallowed_hosts = [\"{}\"]\n{limits}",
            receiver.origin()
        ),
    );
    dir.add_plugin("chat-webhook", path_str(&chat));
    dir.add_manifest("router", &router_manifest(receiver, "/routed", limits));
    dir.add_plugin("router", path_str(&router));
    dir.add_manifest(
        "type-counter",
        "[config]\nevery = \"10\"\n[limits]\nmax_concurrency = 1\n",
    );
    dir.add_plugin("type-counter", path_str(&counter));
    Some(dir)
}

fn router_manifest(receiver: &StubServer, path: &str, limits: &str) -> String {
    format!(
        "[http]\nallowed_hosts = [\"{}\"]\n[config]\n\"route.default\" = \"{}\"\n{limits}",
        receiver.origin(),
        receiver.url(path)
    )
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// A host on a fresh database with the three examples loaded, the handlers granted the returned
/// receiver; `None` where [`deploy_examples`] skips.
async fn examples_running() -> Option<(StubServer, ScratchDir, TestDb, TestHost)> {
    let receiver = StubServer::start(200).await;
    let plugins = deploy_examples(&receiver)?;
    let db = TestDb::new().await;
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    host.wait_for_plugins("the three examples are loaded", LOAD, |set| {
        set.handler("CHAT").is_some() && set.handler("ROUTER").is_some()
    })
    .await;
    Some((receiver, plugins, db, host))
}

fn row(destination_type: &str, destination: &str, n: u64) -> OutboxEntry {
    OutboxEntry::new(
        if n.is_multiple_of(2) {
            "order.created"
        } else {
            "order.cancelled"
        },
        destination_type,
        destination,
        serde_json::json!({"order_id": format!("A-{n}"), "total": format!("{n} EUR")}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_handlers_deliver_rows_through_a_running_host() {
    let Some((receiver, _plugins, db, host)) = examples_running().await else {
        return;
    };

    const ROWS: u64 = 20;
    for n in 0..ROWS {
        db.publish(row("CHAT", &receiver.url("/chat"), n)).await;
        db.publish(row("ROUTER", "anywhere", n)).await;
    }
    db.wait_until_settled(DELIVERY).await;
    assert_eq!(db.count("PUBLISHED").await, 2 * ROWS as i64);

    let requests = receiver.requests();
    let chat: Vec<_> = requests.iter().filter(|r| r.path == "/chat").collect();
    let routed: Vec<_> = requests.iter().filter(|r| r.path == "/routed").collect();
    assert_eq!(chat.len() as u64, ROWS, "one chat message a row");
    assert_eq!(routed.len() as u64, ROWS, "one forwarded payload a row");
    let carriers: HashSet<String> = db
        .scalar::<Vec<String>>(
            "SELECT array_agg(carrier_id::text) FROM {outbox} WHERE destination_type = 'ROUTER'",
        )
        .await
        .into_iter()
        .collect();
    let keys: HashSet<String> = routed
        .iter()
        .map(|r| {
            r.header("idempotency-key")
                .expect("an idempotency key")
                .to_owned()
        })
        .collect();
    assert_eq!(keys, carriers, "each row forwarded with its carrier id");
    let cancelled = chat
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains("was cancelled"))
        .count();
    assert_eq!(cancelled as u64, ROWS / 2, "messages shaped by event type");
    let forwarded: serde_json::Value =
        serde_json::from_slice(&routed[0].body).expect("the payload is forwarded as JSON");
    assert!(
        forwarded["order_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("A-")),
        "the payload is forwarded as it is: {forwarded}"
    );

    wait_until("the observer logged its counts", DELIVERY, || async {
        log_capture::lines_of("type-counter")
            .iter()
            .any(|line| line.contains("after 40 events"))
    })
    .await;
    host.stop().await;
}

/// The state of `file_name` on the host's `/plugins`, if it is listed.
async fn plugin_state(host: &TestHost, file_name: &str) -> Option<String> {
    let body = outbox_host::admin::client::get(&host.admin_url("/plugins"))
        .await
        .expect("/plugins answers");
    let page: PluginsPage = serde_json::from_slice(&body).expect("/plugins is JSON");
    page.plugins
        .into_iter()
        .find(|plugin| plugin.file.ends_with(file_name))
        .map(|plugin| plugin.state)
}

/// Compiling a Python component takes seconds. The relay goes on meanwhile, and `/plugins` shows
/// the file as compiling until it is loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_dropped_into_a_running_host_shows_as_compiling_while_the_relay_goes_on() {
    let receiver = StubServer::start(200).await;
    let Some(chat) = CHAT_WEBHOOK.component() else {
        return;
    };
    let db = TestDb::new().await;
    let plugins = ScratchDir::new("sdk-compiling");
    plugins.add_plugin("noop", outbox_tests::plugins::NOOP);
    // A state directory of its own: the component is not in the shared compiled-component cache.
    let state = ScratchDir::new("sdk-compiling-state");
    let mut config = host::config(&db, plugins.path());
    config.plugins.state_dir = Some(state.path().join("state"));
    let host = TestHost::start(&config).await;
    let load = SteadyLoad::start(db.pool.clone(), db.outbox(), 200, |n| {
        row("NOOP", "anywhere", n)
    });
    wait_until("the relay publishes", DELIVERY, || async {
        db.count("PUBLISHED").await > 0
    })
    .await;

    plugins.deploy(
        "chat-webhook.toml",
        format!(
            "[http]\nallowed_hosts = [\"{}\"]\n[limits]\ntimeout_ms = 20000\n",
            receiver.origin()
        )
        .as_bytes(),
    );
    plugins.deploy_plugin("chat-webhook", path_str(&chat));
    let deadline = tokio::time::Instant::now() + LOAD;
    let mut published_while_compiling: Option<(i64, i64)> = None;
    loop {
        match plugin_state(&host, "chat-webhook.wasm").await.as_deref() {
            Some("loaded") => break,
            Some("compiling") => {
                let published = db.count("PUBLISHED").await;
                let first = published_while_compiling.map_or(published, |(first, _)| first);
                published_while_compiling = Some((first, published));
            }
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the chat webhook is loaded within {LOAD:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (first, last) = published_while_compiling.expect("/plugins showed the file as compiling");
    println!(
        "NOOP rows published while the chat webhook compiled: {}",
        last - first
    );
    assert!(
        last > first,
        "the relay publishes while a component compiles"
    );

    db.publish(row("CHAT", &receiver.url("/chat"), 1)).await;
    let rows = load.stop().await;
    db.wait_until_settled(DELIVERY).await;
    assert_eq!(
        db.count("PUBLISHED").await,
        rows as i64 + 1,
        "every row published"
    );
    assert_eq!(
        receiver
            .requests()
            .iter()
            .filter(|r| r.path == "/chat")
            .count(),
        1,
        "the new plugin delivers"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_router_hot_reloads_under_load_without_losing_a_row() {
    let Some((receiver, plugins, db, host)) = examples_running().await else {
        return;
    };

    let load = SteadyLoad::start(db.pool.clone(), db.outbox(), 200, |n| {
        row("ROUTER", "anywhere", n)
    });
    wait_until("the first rows are routed", DELIVERY, || async {
        receiver.requests().len() >= 50
    })
    .await;
    // A new route: the reloaded plugin forwards to /reloaded.
    plugins.deploy(
        "router.toml",
        router_manifest(&receiver, "/reloaded", "[limits]\ntimeout_ms = 20000\n").as_bytes(),
    );
    wait_until("the reloaded router serves", LOAD, || async {
        receiver.requests().iter().any(|r| r.path == "/reloaded")
    })
    .await;
    wait_until("rows keep flowing after the reload", DELIVERY, || async {
        receiver
            .requests()
            .iter()
            .filter(|r| r.path == "/reloaded")
            .count()
            >= 50
    })
    .await;
    let rows = load.stop().await;
    db.wait_until_settled(DELIVERY).await;

    assert_eq!(db.count("DEAD_LETTER").await, 0, "nothing dead-lettered");
    assert_eq!(
        db.count("PUBLISHED").await,
        rows as i64,
        "every row published"
    );
    let carriers: HashSet<String> = db
        .scalar::<Vec<String>>("SELECT array_agg(carrier_id::text) FROM {outbox}")
        .await
        .into_iter()
        .collect();
    let received: HashSet<String> = receiver
        .requests()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(received, carriers, "every row reached the receiver");
    host.stop().await;
}
