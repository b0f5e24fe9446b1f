//! Retry-After (WIT `outbox:relay@0.2.0`): a retryable failure may ask for a delay before the next
//! attempt, which a running host honours within its backoff maximum; the webhook example asks for
//! what a 429 or 503 `Retry-After` says; `plugin test` shows the delay asked for; and a component
//! built for 0.1.0 is refused at load, naming the version to rebuild with.
//!
//! Times are read on the database's clock, from the rows themselves: the mark that scheduled the
//! retry (`updated_at`), the time it made the row due (`available_at`), and the claim of the next
//! attempt (`claimed_at`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Parser;
use outbox_host::api::OutboxEntry;
use outbox_host::cli::{self, Cli};
use outbox_host::plugins::PluginState;
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugins::{RELAY_V0_1, SCRIPTED, WEBHOOK};
use outbox_tests::scratch::ScratchDir;

const SETTLE: Duration = Duration::from_secs(30);

/// The mark that scheduled a row's retry, as the database recorded it.
#[derive(Debug, Clone, Copy)]
struct ScheduledRetry {
    attempt: i32,
    marked_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
}

impl ScheduledRetry {
    fn delay(&self) -> chrono::Duration {
        self.due_at - self.marked_at
    }
}

/// Waits until row `id` is back to PENDING after a failed attempt, and reads its retry mark.
async fn scheduled_retry(db: &TestDb, id: i64) -> ScheduledRetry {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let row = db.repository().find(id).await.unwrap().unwrap();
        if row.state.as_str() == "PENDING" && row.attempt >= 1 {
            return ScheduledRetry {
                attempt: row.attempt,
                marked_at: row.updated_at,
                due_at: row.available_at,
            };
        }
        assert!(
            std::time::Instant::now() < deadline,
            "row {id} was not scheduled for another attempt within {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn webhook_host(db: &TestDb, label: &str, origin: &str) -> (ScratchDir, TestHost) {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [{origin:?}]\n"),
    );
    let mut config = host::config(db, dir.path());
    // A backoff far shorter than the delay asked for, and a maximum far above it.
    config.relay.backoff_base_delay = Duration::from_millis(10);
    config.relay.backoff_max_delay = Duration::from_secs(60);
    let host = TestHost::start(&config).await;
    (dir, host)
}

#[tokio::test]
async fn retry_after_2_from_the_endpoint_delays_the_next_attempt_by_about_2_s() {
    let db = TestDb::new().await;
    let endpoint = StubServer::start(200).await;
    endpoint.add_header("Retry-After", "2");
    endpoint.script(&[(429, Duration::ZERO)]);
    let (_dir, host) = webhook_host(&db, "retry-after-2", &endpoint.origin()).await;

    let id = db.publish(entry("WEBHOOK", &endpoint.url("/hook"))).await;
    let retry = scheduled_retry(&db, id).await;
    db.wait_until_published(id, SETTLE).await;
    let row = db.repository().find(id).await.unwrap().unwrap();
    let next_claim = row
        .claimed_at
        .expect("a published row keeps its last claim");
    let waited = next_claim - retry.marked_at;
    println!(
        "retry mark asked for {} ms; the next attempt was claimed {} ms after the mark",
        retry.delay().num_milliseconds(),
        waited.num_milliseconds()
    );

    assert_eq!(retry.attempt, 1, "the 429 spent one attempt, as any retry");
    // Backoff alone would have made it due in at most 10 ms.
    assert_eq!(retry.delay(), chrono::Duration::seconds(2));
    assert!(
        (chrono::Duration::milliseconds(1_800)..=chrono::Duration::seconds(6)).contains(&waited),
        "the next attempt came {} ms after the retry mark",
        waited.num_milliseconds()
    );
    let answered: Vec<u16> = endpoint.requests().iter().map(|r| r.status).collect();
    assert_eq!(answered, [429, 200]);
    assert_eq!(row.attempt, 1);
    host.stop().await;
}

#[tokio::test]
async fn a_hostile_retry_after_is_cut_to_the_backoff_maximum_and_spends_attempts_as_any_retry() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("retry-after-hostile");
    dir.add_plugin("scripted", SCRIPTED);
    let mut config = host::config(&db, dir.path());
    config.relay.backoff_max_delay = Duration::from_secs(3);
    let host = TestHost::start(&config).await;

    let forever = serde_json::json!({"outcome": "retryable", "retry_after_ms": u64::MAX});
    let parked = db
        .publish(OutboxEntry::new("test.event", "SCRIPTED", "x", forever.clone()).max_attempts(5))
        .await;
    let last_try = db
        .publish(OutboxEntry::new("test.event", "SCRIPTED", "y", forever).max_attempts(1))
        .await;

    let retry = scheduled_retry(&db, parked).await;
    assert_eq!(retry.attempt, 1);
    assert_eq!(
        retry.delay(),
        chrono::Duration::seconds(3),
        "u64::MAX ms is cut to relay.backoff_max_delay"
    );
    wait_until("the one-attempt row is dead-lettered", SETTLE, || async {
        db.state_of(last_try).await == "DEAD_LETTER"
    })
    .await;
    let dead = db.repository().find(last_try).await.unwrap().unwrap();
    assert_eq!(
        dead.attempt, 1,
        "asking for a delay does not buy an attempt more"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_component_built_for_0_1_0_is_refused_naming_the_version_to_rebuild_with() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("retry-after-v0-1");
    let file = dir.add_plugin("old", RELAY_V0_1);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    host.wait_for_plugins("old.wasm has failed", SETTLE, |set| {
        set.statuses()
            .any(|status| status.file == file && status.state == PluginState::Failed)
    })
    .await;
    let error = host
        .service
        .plugins()
        .borrow()
        .statuses()
        .find(|status| status.file == file)
        .and_then(|status| status.last_error.clone())
        .expect("the failure is in the plugin status");
    assert!(
        error.contains("built for outbox:relay@0.1.0")
            && error.contains("rebuild it with outbox:relay@0.2.0"),
        "{error}"
    );
    assert!(
        host.service
            .plugins()
            .borrow()
            .handler("RELAY_V0_1")
            .is_none()
    );
    host.stop().await;

    let run = outbox_host(&["plugin", "inspect", RELAY_V0_1]).await;
    assert_eq!(run.code, 2, "{}", run.out);
    assert!(
        run.err.contains("rebuild it with outbox:relay@0.2.0"),
        "{}",
        run.err
    );
}

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

/// `plugin test` of the webhook, every request answered with `status` and `headers`.
async fn webhook_answered(label: &str, status: &str, headers: &[&str]) -> serde_json::Value {
    let dir = ScratchDir::new(label);
    let manifest = dir.write(
        "webhook.toml",
        b"[http]\nallowed_hosts = [\"https://hooks.example.com\"]\n",
    );
    let envelope = dir.write(
        "envelope.json",
        br#"{"destination": "https://hooks.example.com/x"}"#,
    );
    let mut args = vec![
        "plugin",
        "test",
        WEBHOOK,
        "--manifest",
        manifest.to_str().unwrap(),
        "--envelope",
        envelope.to_str().unwrap(),
        "--http-response",
        status,
        "--json",
    ];
    for header in headers {
        args.extend(["--http-header", header]);
    }
    let run = outbox_host(&args).await;
    assert_ne!(run.code, 2, "{}{}", run.out, run.err);
    let report: serde_json::Value = serde_json::from_str(&run.out).unwrap();
    report["calls"][0].clone()
}

#[tokio::test]
async fn plugin_test_shows_the_retry_after_the_webhook_asks_for() {
    let dir = ScratchDir::new("retry-after-cli");
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
        "429",
        "--http-header",
        "Retry-After: 2",
    ])
    .await;
    assert_eq!(run.code, 1, "{}{}", run.out, run.err);
    assert!(
        run.out.contains("retryable [http-status]") && run.out.contains("retry after 2000 ms"),
        "{}",
        run.out
    );
}

#[tokio::test]
async fn the_webhook_maps_statuses_and_retry_after_as_the_issue_says() {
    let cases: [(&str, &[&str], &str, Option<u64>); 8] = [
        ("429", &["Retry-After: 2"], "retryable", Some(2_000)),
        ("503", &["Retry-After: 120"], "retryable", Some(120_000)),
        // A date in the past asks for no wait (the host still waits its backoff).
        (
            "503",
            &["Retry-After: Sun, 06 Nov 1994 08:49:37 GMT"],
            "retryable",
            Some(0),
        ),
        ("429", &["Retry-After: soon"], "retryable", None),
        ("429", &[], "retryable", None),
        // Only 429 and 503 are asked to wait.
        ("500", &["Retry-After: 2"], "retryable", None),
        ("408", &[], "retryable", None),
        ("404", &["Retry-After: 2"], "permanent", None),
    ];
    for (number, (status, headers, outcome, retry_after_ms)) in cases.into_iter().enumerate() {
        let call = webhook_answered(&format!("retry-after-map-{number}"), status, headers).await;
        assert_eq!(call["outcome"], outcome, "{status} {headers:?}");
        assert_eq!(
            call["retry_after_ms"].as_u64(),
            retry_after_ms,
            "{status} {headers:?}"
        );
    }
}

#[tokio::test]
async fn an_http_date_in_the_future_asks_for_the_wait_until_then() {
    let in_a_minute = (Utc::now() + chrono::Duration::seconds(60))
        .format("Retry-After: %a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let call = webhook_answered("retry-after-date", "503", &[&in_a_minute]).await;
    let asked = call["retry_after_ms"].as_u64().expect("a delay asked for");
    assert!((55_000..=60_000).contains(&asked), "{asked}");
}
