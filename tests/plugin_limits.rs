//! A hostile plugin on a running host, with a well-behaved one (the webhook, posting to a local
//! receiver) under load beside it: whatever the hostile plugin does with instances, logs, its
//! allow-list or the size of what it hands back, every webhook row is delivered exactly once, on its
//! first attempt, and the host's own memory stays within the transfer limits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use outbox_host::api::OutboxEntry;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;

/// Counts the host's heap (wasm linear memories are mapped by wasmtime, not allocated here), so a
/// test can see what the host itself holds while a plugin misbehaves.
struct CountingAllocator;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const WEBHOOK_ROWS: usize = 400;
const SETTLE: Duration = Duration::from_secs(120);

/// The webhook plugin posting to `stub` with `webhook_limits`, and the hostile plugin as `stem`
/// with `hostile_manifest`.
fn plugins_dir(
    label: &str,
    stub: &StubServer,
    webhook_limits: &str,
    stem: &str,
    hostile_manifest: &str,
) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!(
            "[http]\nallowed_hosts = [\"{}\"]\n[limits]\n{webhook_limits}\n",
            stub.origin()
        ),
    );
    dir.add_plugin(stem, plugins::HOSTILE);
    dir.add_manifest(stem, hostile_manifest);
    dir
}

fn hostile_entry(action: &str, payload: serde_json::Value) -> OutboxEntry {
    OutboxEntry::new("attack", "HOSTILE", action, payload).max_attempts(2)
}

/// Publishes the webhook load and `hostile` rows interleaved, in one transaction.
async fn publish_load(db: &TestDb, stub: &StubServer, hostile: Vec<OutboxEntry>) {
    let mut tx = db.pool.begin().await.unwrap();
    let mut hostile = hostile.into_iter();
    for seq in 0..WEBHOOK_ROWS {
        let entry = OutboxEntry::new(
            "test.event",
            "WEBHOOK",
            stub.url("/hook"),
            serde_json::json!({"seq": seq}),
        )
        .aggregate("Order", (seq % 20).to_string());
        db.outbox().publish(&mut tx, entry).await.unwrap();
        if let Some(entry) = hostile.next() {
            db.outbox().publish(&mut tx, entry).await.unwrap();
        }
    }
    for entry in hostile {
        db.outbox().publish(&mut tx, entry).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// Every webhook row published on its first attempt, each delivered exactly once.
async fn assert_webhook_rows_untouched(db: &TestDb, stub: &StubServer) {
    wait_until("every webhook row is published", SETTLE, || async {
        db.scalar::<i64>(
            "SELECT count(*) FROM {outbox} WHERE destination_type = 'WEBHOOK' AND state = 'PUBLISHED'",
        )
        .await
            == WEBHOOK_ROWS as i64
    })
    .await;
    let retried: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE destination_type = 'WEBHOOK' AND attempt > 0")
        .await;
    assert_eq!(retried, 0, "no webhook row spent an attempt");
    let mut deliveries: HashMap<String, usize> = HashMap::new();
    for request in stub.requests() {
        let key = request
            .header("idempotency-key")
            .expect("the webhook sends an idempotency key")
            .to_owned();
        *deliveries.entry(key).or_default() += 1;
    }
    assert_eq!(deliveries.len(), WEBHOOK_ROWS, "every row delivered");
    assert!(
        deliveries.values().all(|&count| count == 1),
        "no row delivered twice"
    );
}

async fn hostile_rows_settled(db: &TestDb) -> bool {
    db.scalar::<i64>(
        "SELECT count(*) FROM {outbox} WHERE destination_type = 'HOSTILE' AND state NOT IN ('PUBLISHED', 'DEAD_LETTER')",
    )
    .await
        == 0
}

#[tokio::test]
async fn a_plugin_holding_its_instances_leaves_the_others_their_share_of_the_pool() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    // 12 instances in the whole engine: the webhook may hold 6 + 1, the hostile plugin 4 + 1.
    let dir = plugins_dir(
        "limits-pool",
        &stub,
        "max_concurrency = 6",
        "hoarder",
        "[limits]\nmax_concurrency = 4\ntimeout_ms = 2000\n",
    );
    let mut config = host::config(&db, dir.path());
    config.plugins.max_instances = 12;
    let host = TestHost::start(&config).await;
    let sleepers = (0..40)
        .map(|_| hostile_entry("sleep", serde_json::json!({"ms": 300})))
        .collect();
    publish_load(&db, &stub, sleepers).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    wait_until("the hostile rows settle", SETTLE, || {
        hostile_rows_settled(&db)
    })
    .await;
    assert_eq!(db.count("PUBLISHED").await, WEBHOOK_ROWS as i64 + 40);
    host.stop().await;
}

#[tokio::test]
async fn a_full_instance_pool_defers_calls_without_spending_attempts_and_warns_once() {
    log_capture::install();
    let db = TestDb::new().await;
    // Two instances in the whole engine for a plugin that may run four calls at once: the third
    // and fourth calls find no instance to run in. That is the host's capacity, not the row's
    // failure: with one attempt each, a row that spent one would be dead-lettered.
    let dir = ScratchDir::new("limits-pool-full");
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest("scripted", "[limits]\nmax_concurrency = 4\n");
    let mut config = host::config(&db, dir.path());
    config.plugins.max_instances = 2;
    let host = TestHost::start(&config).await;
    let mut tx = db.pool.begin().await.unwrap();
    for n in 0..4 {
        let payload = serde_json::json!({"outcome": "success", "delay_ms": 300, "n": n});
        let entry = OutboxEntry::new("test.event", "SCRIPTED", "anywhere", payload).max_attempts(1);
        db.outbox().publish(&mut tx, entry).await.unwrap();
    }
    tx.commit().await.unwrap();
    wait_until("every row settles", SETTLE, || async {
        db.scalar::<i64>("SELECT count(*) FROM {outbox} WHERE state IN ('PENDING', 'PROCESSING')")
            .await
            == 0
    })
    .await;
    assert_eq!(db.count("DEAD_LETTER").await, 0, "no row dead-lettered");
    let attempted: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE state = 'PUBLISHED' AND attempt = 0")
        .await;
    assert_eq!(attempted, 4, "every row published on its one attempt");
    let warnings = log_capture::lines_with("every instance of the engine's pool is taken");
    assert_eq!(
        warnings.len(),
        1,
        "warned once, not once a row: {warnings:?}"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_slow_plugin_holds_no_more_of_a_loops_publishes_than_it_may_run_at_once() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    // One call at a time, each a second long: 300 of them would hold every one of the loop's 64
    // publish slots for minutes if the relay kept claiming them while they wait for the plugin.
    let dir = plugins_dir(
        "limits-slots",
        &stub,
        "",
        "sloth",
        "[limits]\nmax_concurrency = 1\ntimeout_ms = 5000\n",
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let sleepers = (0..300)
        .map(|_| hostile_entry("sleep", serde_json::json!({"ms": 1000})))
        .collect();
    publish_load(&db, &stub, sleepers).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    host.stop().await;
}

#[tokio::test]
async fn a_log_flood_is_cut_to_the_plugin_budget_counted_and_summarised() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = plugins_dir(
        "limits-flood",
        &stub,
        "",
        "flooder",
        "[limits]\nlog_lines_per_second = 50\n",
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let started = Instant::now();
    let floods = (0..20)
        .map(|_| hostile_entry("log-flood", serde_json::json!({"lines": 1000})))
        .collect();
    publish_load(&db, &stub, floods).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    wait_until("the floods settle", SETTLE, || hostile_rows_settled(&db)).await;
    let seconds = started.elapsed().as_secs() + 1;
    let lines = log_capture::lines_of("flooder");
    let flood_lines = lines.iter().filter(|l| l.contains("flood line")).count();
    println!("20,000 lines asked for in {seconds} s; {flood_lines} written");
    assert!(
        flood_lines as u64 <= 50 * seconds,
        "{flood_lines} flood lines in {seconds} s exceed 50 a second"
    );
    assert!(
        lines.iter().any(|l| l.contains("over its log budget")),
        "a line says lines are being dropped"
    );
    let metrics = metrics_text(&host).await;
    let dropped = metric_value(
        &metrics,
        "outbox_plugin_log_lines_dropped_total{destination_type=\"HOSTILE\",plugin=\"flooder\"}",
    );
    assert!(
        dropped + flood_lines as f64 >= 20_000.0,
        "every line is written or counted as dropped ({dropped} dropped)"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_plugin_line_cannot_forge_another_line_or_carry_terminal_escapes() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = plugins_dir("limits-forge", &stub, "", "forger", "");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    publish_load(
        &db,
        &stub,
        vec![hostile_entry("log-forge", serde_json::json!({}))],
    )
    .await;
    assert_webhook_rows_untouched(&db, &stub).await;
    wait_until("the forger's row settles", SETTLE, || {
        hostile_rows_settled(&db)
    })
    .await;
    let lines = log_capture::lines_of("forger");
    assert!(
        lines.iter().all(|line| !line.chars().any(char::is_control)),
        "{lines:?}"
    );
    // The log interface takes one line: its newline stays inside it, escaped. Stdout is a stream
    // whose newlines end lines, so there the forged text is a line of its own, still tagged as the
    // plugin's stdout, its carriage return and escape sequence escaped.
    assert!(
        lines
            .iter()
            .any(|line| line.contains(r"hello\n2026-12-02") && line.contains("source=log")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains(r"forged\r\u{1b}[2K") && line.contains("source=stdout")),
        "{lines:?}"
    );
    host.stop().await;
}

#[tokio::test]
async fn oversized_strings_from_a_plugin_are_refused_before_the_host_copies_them() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = plugins_dir(
        "limits-bloat",
        &stub,
        "",
        "bloater",
        "[limits]\nmemory_mb = 512\nmax_concurrency = 4\n",
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let baseline = ALLOCATED.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let bloat = (0..8)
        .flat_map(|_| {
            [
                hostile_entry("huge-error", serde_json::json!({"mb": 100})),
                hostile_entry("huge-log", serde_json::json!({"mb": 100})),
            ]
        })
        .collect();
    publish_load(&db, &stub, bloat).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    wait_until("the bloated rows settle", SETTLE, || {
        hostile_rows_settled(&db)
    })
    .await;
    let growth_mb = PEAK.load(Ordering::Relaxed).saturating_sub(baseline) >> 20;
    println!("16 calls handing the host 100 MiB each: host heap peak grew by {growth_mb} MiB");
    // Four calls at once, each refused before copying more than its 2 MiB transfer limit, plus
    // the webhook load and the test's own bookkeeping.
    assert!(growth_mb < 64, "the host heap grew by {growth_mb} MiB");
    let refused: i64 = db
        .scalar(
            "SELECT count(*) FROM {outbox} WHERE destination_type = 'HOSTILE' \
             AND state = 'DEAD_LETTER' AND error_type = 'trap' \
             AND last_error LIKE '%more data in one transfer than it accepts%'",
        )
        .await;
    let errors: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(&format!(
        "SELECT destination, error_type, last_error FROM {} WHERE destination_type = 'HOSTILE'",
        db.tables.outbox()
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        refused, 16,
        "each oversized transfer fails its call with a clear error: {errors:?}"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_request_carrying_user_info_is_denied_on_a_running_host_and_never_connects() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let target = StubServer::start(200).await;
    let dir = plugins_dir(
        "limits-userinfo",
        &stub,
        "",
        "sneak",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", target.origin()),
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let url = format!("http://user:pw@127.0.0.1:{}/", target.port());
    let sneaks = (0..5)
        .map(|_| hostile_entry("http-raw", serde_json::json!({"url": url})))
        .collect();
    publish_load(&db, &stub, sneaks).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    wait_until("the sneaking rows settle", SETTLE, || {
        hostile_rows_settled(&db)
    })
    .await;
    let denied: i64 = db
        .scalar(
            "SELECT count(*) FROM {outbox} WHERE destination_type = 'HOSTILE' \
             AND state = 'DEAD_LETTER' AND error_type = 'denied'",
        )
        .await;
    assert_eq!(denied, 5, "each request with user info is denied");
    assert_eq!(
        target.connections(),
        0,
        "the denied host was never connected to"
    );
    host.stop().await;
}

#[tokio::test]
async fn credentials_in_an_allow_list_fail_that_plugin_alone_and_are_shown_nowhere() {
    const MARKER: &str = "pa55Marker";
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = plugins_dir(
        "limits-credentials",
        &stub,
        "",
        "leaky",
        &format!("[http]\nallowed_hosts = [\"https://svc:{MARKER}@hooks.example.com\"]\n"),
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    publish_load(&db, &stub, vec![hostile_entry("ok", serde_json::json!({}))]).await;
    assert_webhook_rows_untouched(&db, &stub).await;
    assert_eq!(
        db.scalar::<i64>(
            "SELECT count(*) FROM {outbox} WHERE destination_type = 'HOSTILE' AND state = 'PENDING'"
        )
        .await,
        1,
        "the plugin that failed to load claims nothing"
    );
    let page = outbox_host::admin::client::get(&host.admin_url("/plugins"))
        .await
        .expect("the admin endpoint answers");
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("http.allowed_hosts[0]"), "{page}");
    assert!(!page.contains(MARKER), "{page}");
    assert!(!metrics_text(&host).await.contains(MARKER));
    assert!(
        log_capture::lines_with(MARKER).is_empty(),
        "no log line shows it"
    );
    host.stop().await;
}

/// The host's `/metrics` text.
async fn metrics_text(host: &TestHost) -> String {
    let body = outbox_host::admin::client::get(&host.admin_url("/metrics"))
        .await
        .expect("the admin endpoint answers");
    String::from_utf8_lossy(&body).into_owned()
}

/// The value of one sample line, or 0 when the series is absent.
fn metric_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
