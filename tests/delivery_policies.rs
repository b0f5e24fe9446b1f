//! Delivery policies on a running host, per destination (`destination_type`, `destination`): a
//! circuit breaker that stops hammering an endpoint that is down without spending the rows'
//! attempts, rate and concurrency limits, and `[destinations.<TYPE>]` settings over `[relay]`.
//! The endpoints are local HTTP servers reached through the webhook example; two destinations of
//! the same type are two servers.

use std::time::{Duration, Instant};

use clap::Parser;
use outbox_host::cli::{self, Cli};
use outbox_host::config::{Config, DestinationTypeConfig};
use outbox_host::relay::DestinationsPage;
use outbox_host::service::{self, Resources, StartError};
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::plugins::WEBHOOK;
use outbox_tests::scratch::ScratchDir;
use tokio_util::sync::CancellationToken;

const SETTLE: Duration = Duration::from_secs(60);

fn webhook_dir(label: &str, origins: &[String]) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", WEBHOOK);
    dir.add_manifest("webhook", &format!("[http]\nallowed_hosts = {origins:?}\n"));
    dir
}

fn with_webhook_policy(mut config: Config, policy: DestinationTypeConfig) -> Config {
    config.destinations.insert("WEBHOOK".into(), policy);
    config
}

/// Inserts `rows` rows for `url` in one statement (no aggregate: they may all run at once).
async fn backlog(db: &TestDb, url: &str, rows: u32) {
    db.execute(&format!(
        "INSERT INTO {{outbox}} (carrier_id, event_type, destination, destination_type, payload) \
         SELECT gen_random_uuid(), 'test.event', '{url}', 'WEBHOOK', '{{\"n\": 1}}' \
         FROM generate_series(1, {rows})"
    ))
    .await;
}

async fn count_for(db: &TestDb, url: &str, state: &str) -> i64 {
    db.scalar(&format!(
        "SELECT count(*) FROM {{outbox}} WHERE destination = '{url}' AND state = '{state}'"
    ))
    .await
}

/// Rows of `url` published per second, from its first publish to its last, on the database clock.
async fn published_rate(db: &TestDb, url: &str) -> f64 {
    db.scalar(&format!(
        "SELECT (count(*) - 1) / GREATEST(EXTRACT(EPOCH FROM max(published_at) - min(published_at)), 0.001)::float8 \
         FROM {{outbox}} WHERE destination = '{url}' AND state = 'PUBLISHED'"
    ))
    .await
}

struct OutageRun {
    /// Requests that reached the failing endpoint while it was down.
    requests_while_down: usize,
    healthy_rows_per_second: Option<f64>,
    _host: TestHost,
    _dir: ScratchDir,
    db: TestDb,
    down: Option<StubServer>,
    down_url: Option<String>,
}

const OUTAGE: Duration = Duration::from_secs(30);
const DOWN_ROWS: u32 = 100;
const HEALTHY_ROWS: u32 = 2_000;

/// A host delivering `HEALTHY_ROWS` to a healthy endpoint and, when `with_failing`, `DOWN_ROWS`
/// to an endpoint answering 503 for `OUTAGE`, then 200; the breaker on or off.
async fn outage_run(label: &str, with_failing: bool, breaker_threshold: u32) -> OutageRun {
    let db = TestDb::new().await;
    let healthy = StubServer::start(200).await;
    let down = StubServer::start(503).await;
    let dir = webhook_dir(label, &[healthy.origin(), down.origin()]);
    let mut config = host::config(&db, dir.path());
    // Realistic retries: without a breaker a down endpoint is tried again every few seconds.
    config.relay.backoff_base_delay = Duration::from_millis(250);
    config.relay.backoff_max_delay = Duration::from_secs(5);
    let config = with_webhook_policy(
        config,
        DestinationTypeConfig {
            breaker_threshold: Some(breaker_threshold),
            breaker_cool_down: Some(Duration::from_secs(5)),
            ..DestinationTypeConfig::default()
        },
    );
    let (healthy_url, down_url) = (healthy.url("/hook"), down.url("/hook"));
    if with_failing {
        backlog(&db, &down_url, DOWN_ROWS).await;
    }
    backlog(&db, &healthy_url, HEALTHY_ROWS).await;
    let host = TestHost::start(&config).await;
    let outage_started = Instant::now();
    wait_until(
        "the healthy endpoint's rows are published",
        OUTAGE,
        || async { count_for(&db, &healthy_url, "PUBLISHED").await == i64::from(HEALTHY_ROWS) },
    )
    .await;
    let healthy_rows_per_second = Some(published_rate(&db, &healthy_url).await);
    tokio::time::sleep(OUTAGE.saturating_sub(outage_started.elapsed())).await;
    let requests_while_down = down.requests().len();
    down.set_status(200);
    OutageRun {
        requests_while_down,
        healthy_rows_per_second,
        _host: host,
        _dir: dir,
        db,
        down: with_failing.then_some(down),
        down_url: with_failing.then_some(down_url),
    }
}

#[tokio::test]
async fn an_endpoint_down_for_30_s_is_spared_by_its_breaker_and_every_row_is_published() {
    let (with_breaker, without_breaker, healthy_alone) = tokio::join!(
        outage_run("breaker-on", true, 5),
        outage_run("breaker-off", true, 0),
        outage_run("healthy-alone", false, 5),
    );
    let (db, down_url) = (&with_breaker.db, with_breaker.down_url.clone().unwrap());
    wait_until(
        "every row of the recovered endpoint is published",
        SETTLE,
        || async { count_for(db, &down_url, "PUBLISHED").await == i64::from(DOWN_ROWS) },
    )
    .await;
    let down = with_breaker.down.as_ref().unwrap();
    let attempts: i64 = db
        .scalar(&format!(
            "SELECT COALESCE(max(attempt), 0)::bigint FROM {{outbox}} WHERE destination = '{down_url}'"
        ))
        .await;
    println!(
        "requests to the endpoint while it was down for {} s: {} with the breaker, {} without; \
         after it came back, {} more with the breaker; most attempts spent by one row: {attempts}",
        OUTAGE.as_secs(),
        with_breaker.requests_while_down,
        without_breaker.requests_while_down,
        down.requests().len() - with_breaker.requests_while_down,
    );
    println!(
        "the healthy destination of the same type drained {:.0} rows/s beside the failing one \
         (breaker on), {:.0} rows/s beside it with the breaker off, {:.0} rows/s alone",
        with_breaker.healthy_rows_per_second.unwrap(),
        without_breaker.healthy_rows_per_second.unwrap(),
        healthy_alone.healthy_rows_per_second.unwrap(),
    );
    assert_eq!(db.count("DEAD_LETTER").await, 0, "nothing is dead-lettered");
    assert!(
        with_breaker.requests_while_down * 3 < without_breaker.requests_while_down,
        "the breaker must spare the endpoint: {} requests with it, {} without",
        with_breaker.requests_while_down,
        without_breaker.requests_while_down
    );
}

#[tokio::test]
async fn a_per_destination_rate_limit_holds_within_10_percent_over_10_s() {
    const RATE: f64 = 20.0;
    let db = TestDb::new().await;
    let (first, second) = (StubServer::start(200).await, StubServer::start(200).await);
    let dir = webhook_dir("rate-limit", &[first.origin(), second.origin()]);
    let config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig {
            rate_limit_per_second: Some(RATE),
            ..DestinationTypeConfig::default()
        },
    );
    backlog(&db, &first.url("/hook"), 300).await;
    backlog(&db, &second.url("/hook"), 300).await;
    let host = TestHost::start(&config).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    host.stop().await;
    for (name, endpoint) in [("first", &first), ("second", &second)] {
        let requests = endpoint.requests();
        let start = requests.first().expect("requests arrived").arrived_at;
        let window = Duration::from_secs(10);
        let in_window = requests
            .iter()
            .filter(|request| request.arrived_at.duration_since(start) < window)
            .count();
        let expected = RATE * window.as_secs_f64();
        println!(
            "{name} destination: {in_window} requests in the first 10 s at a limit of {RATE}/s \
             (expected {expected:.0})"
        );
        assert!(
            (in_window as f64 - expected).abs() <= expected * 0.1,
            "{name}: {in_window} requests in 10 s against {expected:.0}"
        );
    }
}

#[tokio::test]
async fn a_per_destination_concurrency_limit_caps_the_calls_running_at_once() {
    let db = TestDb::new().await;
    let slow = StubServer::start(200).await;
    slow.set_delay(Duration::from_millis(300));
    let other = StubServer::start(200).await;
    other.set_delay(Duration::from_millis(300));
    let dir = webhook_dir("concurrency", &[slow.origin(), other.origin()]);
    let config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig {
            max_concurrency_per_destination: Some(2),
            ..DestinationTypeConfig::default()
        },
    );
    backlog(&db, &slow.url("/hook"), 20).await;
    backlog(&db, &other.url("/hook"), 20).await;
    let host = TestHost::start(&config).await;
    db.wait_until_settled(SETTLE).await;
    assert_eq!(db.count("PUBLISHED").await, 40);
    assert_eq!(
        slow.most_at_once(),
        2,
        "the limit is reached and never passed"
    );
    assert_eq!(
        other.most_at_once(),
        2,
        "each destination has a limit of its own"
    );
    let attempts: i64 = db.scalar("SELECT max(attempt)::bigint FROM {outbox}").await;
    assert_eq!(attempts, 0, "rows held back spend no attempt");
    host.stop().await;
}

#[tokio::test]
async fn permanent_failures_never_open_the_breaker() {
    let db = TestDb::new().await;
    let refusing = StubServer::start(400).await;
    let dir = webhook_dir("breaker-permanent", &[refusing.origin()]);
    let config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig {
            breaker_threshold: Some(2),
            ..DestinationTypeConfig::default()
        },
    );
    backlog(&db, &refusing.url("/hook"), 30).await;
    let host = TestHost::start(&config).await;
    db.wait_until_settled(SETTLE).await;
    assert_eq!(db.count("DEAD_LETTER").await, 30);
    assert_eq!(refusing.requests().len(), 30, "every row was tried");
    assert_eq!(
        host.metric("outbox_breaker_openings_total{destination_type=\"WEBHOOK\"}")
            .await,
        0.0
    );
    host.stop().await;
}

#[tokio::test]
async fn an_open_breaker_shows_on_destinations_in_metrics_and_in_the_cli() {
    let db = TestDb::new().await;
    let down = StubServer::start(503).await;
    let dir = webhook_dir("breaker-view", &[down.origin()]);
    let config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig {
            breaker_threshold: Some(3),
            breaker_cool_down: Some(Duration::from_secs(60)),
            ..DestinationTypeConfig::default()
        },
    );
    let url = down.url("/hook?token=secret");
    backlog(&db, &url, 10).await;
    let host = TestHost::start(&config).await;
    let page_url = host.admin_url("/destinations");
    wait_until("the breaker is open", SETTLE, || async {
        let body = outbox_host::admin::client::get(&page_url).await.unwrap();
        let page: DestinationsPage = serde_json::from_slice(&body).unwrap();
        page.destinations.iter().any(|view| view.breaker == "open")
    })
    .await;
    let body = outbox_host::admin::client::get(&page_url).await.unwrap();
    let page: DestinationsPage = serde_json::from_slice(&body).unwrap();
    let view = &page.destinations[0];
    assert_eq!(view.destination_type, "WEBHOOK");
    assert_eq!(
        view.destination,
        down.url("/hook?****"),
        "its query is masked"
    );
    assert!(!body.windows(6).any(|w| w == b"secret"));
    assert!(view.consecutive_failures >= 3);
    assert!(view.next_probe_at.is_some() && view.opened_at.is_some());
    assert_eq!(
        host.metric("outbox_breakers_open{destination_type=\"WEBHOOK\"}")
            .await,
        1.0
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let admin = host.service.admin_addr().to_string();
    let cli = Cli::parse_from(["outbox-host", "destinations", "--admin", &admin]);
    let code = cli::run(cli, &mut out, &mut err).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(code, 0, "{out}{}", String::from_utf8_lossy(&err));
    assert!(
        out.contains("open") && out.contains(&view.destination_ref),
        "{out}"
    );
    assert!(!out.contains("secret"), "{out}");
    let requests_when_open = down.requests().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        down.requests().len(),
        requests_when_open,
        "no call while the breaker is open"
    );
    assert_eq!(db.count("DEAD_LETTER").await, 0);
    host.stop().await;
}

#[tokio::test]
async fn a_type_s_attempt_limit_and_backoff_come_from_its_destinations_section() {
    let db = TestDb::new().await;
    let down = StubServer::start(503).await;
    let dir = webhook_dir("type-policy", &[down.origin()]);
    let config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig {
            max_attempts: Some(2),
            breaker_threshold: Some(0),
            backoff_base_delay: Some(Duration::from_millis(5)),
            backoff_max_delay: Some(Duration::from_millis(5)),
            ..DestinationTypeConfig::default()
        },
    );
    let url = down.url("/hook");
    let defaulted = db.publish(entry("WEBHOOK", &url)).await;
    let own = db.publish(entry("WEBHOOK", &url).max_attempts(4)).await;
    let host = TestHost::start(&config).await;
    db.wait_until_settled(SETTLE).await;
    let attempts = |id| {
        let db = &db;
        async move { db.repository().find(id).await.unwrap().unwrap().attempt }
    };
    assert_eq!(db.state_of(defaulted).await, "DEAD_LETTER");
    assert_eq!(attempts(defaulted).await, 2, "the type's max_attempts");
    assert_eq!(db.state_of(own).await, "DEAD_LETTER");
    assert_eq!(attempts(own).await, 4, "a row's own limit wins");
    host.stop().await;
}

#[tokio::test]
async fn a_destinations_section_for_a_type_no_plugin_handles_is_refused_at_start() {
    let db = TestDb::new().await;
    let dir = webhook_dir("unknown-type", &[]);
    let mut config = with_webhook_policy(
        host::config(&db, dir.path()),
        DestinationTypeConfig::default(),
    );
    config
        .destinations
        .insert("WEBHOK".into(), DestinationTypeConfig::default());
    let error = service::start(&config, Resources::default(), CancellationToken::new())
        .await
        .err()
        .expect("the start is refused");
    assert!(matches!(error, StartError::Config(_)), "{error}");
    let message = error.to_string();
    assert!(message.contains("destinations.WEBHOK"), "{message}");
    assert!(
        message.contains("WEBHOOK"),
        "names the known types: {message}"
    );
}
