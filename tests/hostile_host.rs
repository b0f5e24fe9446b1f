//! A running host with a hostile plugin (`tests/plugins/scripted`, told what to do by its manifest)
//! beside a well-behaved one under load (issue 8): whatever the hostile plugin returns or however
//! slowly it answers, the well-behaved plugin's rows all publish, each delivered exactly once, none
//! spending an attempt, and the hostile plugin's own rows end in a defined state.

use outbox_host::api::OutboxEntry;
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Rows of the well-behaved plugin published beside the hostile ones.
const LOAD: usize = 300;
/// Rows of the hostile plugin.
const HOSTILE: usize = 5;
/// A guard against a test hanging forever; far above what any case needs.
const GUARD: Duration = Duration::from_secs(60);

/// A host running the webhook plugin (posting to a stub that counts deliveries) and the scripted
/// plugin with `scripted_config` as its `[config]`.
struct Scene {
    db: TestDb,
    stub: StubServer,
    host: TestHost,
    _dir: ScratchDir,
}

impl Scene {
    async fn start(label: &str, scripted_config: &str) -> Scene {
        Scene::start_on(TestDb::new().await, label, scripted_config).await
    }

    async fn start_on(db: TestDb, label: &str, scripted_config: &str) -> Scene {
        let stub = StubServer::start(200).await;
        let dir = ScratchDir::new(label);
        dir.add_plugin("webhook", plugins::WEBHOOK);
        dir.add_manifest(
            "webhook",
            &format!("[http]\nallowed_hosts = [\"{}\"]\n", stub.origin()),
        );
        dir.add_plugin("scripted", plugins::SCRIPTED);
        dir.add_manifest("scripted", &format!("[config]\n{scripted_config}\n"));
        let host = TestHost::start(&host::config(&db, dir.path())).await;
        Scene {
            db,
            stub,
            host,
            _dir: dir,
        }
    }

    /// Publishes the webhook rows and `hostile` rows for the scripted plugin, interleaved, in one
    /// transaction, so both plugins' rows share the relay's turns.
    async fn publish(&self, hostile: impl Fn() -> OutboxEntry) {
        let mut tx = self.db.pool.begin().await.unwrap();
        for seq in 0..LOAD {
            let row = OutboxEntry::new(
                "test.event",
                "WEBHOOK",
                self.stub.url("/hook"),
                serde_json::json!({"seq": seq}),
            );
            self.db.outbox().publish(&mut tx, row).await.unwrap();
            if seq % (LOAD / HOSTILE) == 0 {
                self.db.outbox().publish(&mut tx, hostile()).await.unwrap();
            }
        }
        tx.commit().await.unwrap();
    }

    async fn count(&self, destination_type: &str, state: &str) -> i64 {
        self.db
            .scalar(&format!(
                "SELECT count(*) FROM {{outbox}} \
                 WHERE destination_type = '{destination_type}' AND state = '{state}'"
            ))
            .await
    }

    /// Every webhook row is published, was claimed once, spent no attempt, and reached the stub once.
    async fn assert_the_webhook_rows_each_published_once(&self) {
        wait_until("every webhook row is published", GUARD, || async {
            self.count("WEBHOOK", "PUBLISHED").await == LOAD as i64
        })
        .await;
        let attempts: i64 = self
            .db
            .scalar(
                "SELECT count(*) FROM {outbox} WHERE destination_type = 'WEBHOOK' AND attempt <> 0",
            )
            .await;
        assert_eq!(attempts, 0, "no webhook row spent an attempt");
        assert_eq!(
            self.metric("outbox_claimed_total{destination_type=\"WEBHOOK\"}"),
            LOAD as u64,
            "each webhook row was claimed once"
        );
        let mut deliveries: BTreeMap<u64, usize> = BTreeMap::new();
        for request in self.stub.requests() {
            let payload: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            *deliveries
                .entry(payload["seq"].as_u64().unwrap())
                .or_default() += 1;
        }
        assert_eq!(deliveries.len(), LOAD, "every webhook row was delivered");
        assert!(
            deliveries.values().all(|&count| count == 1),
            "no webhook row was delivered twice"
        );
    }

    /// One sample of the host's metrics, 0 when absent.
    fn metric(&self, sample: &str) -> u64 {
        metric(&self.host, sample)
    }

    async fn stop(self) {
        self.host.stop().await;
    }
}

fn metric(host: &TestHost, sample: &str) -> u64 {
    host.service
        .metrics()
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

fn scripted(outcome: &str, destination: &str) -> OutboxEntry {
    OutboxEntry::new(
        "test.event",
        "SCRIPTED",
        destination,
        serde_json::json!({"outcome": outcome}),
    )
}

// --- hostile error text (item 2) --------------------------------------------------------------------

#[tokio::test]
async fn an_error_with_nul_and_control_characters_is_stored_sanitized_and_dead_letters_after_max_attempts()
 {
    let scene = Scene::start("hostile-error-text", "").await;
    scene
        .publish(|| scripted("hostile-error", "x").max_attempts(3))
        .await;
    scene.assert_the_webhook_rows_each_published_once().await;
    wait_until("every hostile row is dead-lettered", GUARD, || async {
        scene.count("SCRIPTED", "DEAD_LETTER").await == HOSTILE as i64
    })
    .await;
    assert_eq!(
        scene.metric("outbox_claimed_total{destination_type=\"SCRIPTED\"}"),
        3 * HOSTILE as u64,
        "each hostile row was claimed once per attempt, never again after a lease"
    );
    let rows: Vec<(i32, String, String)> = sqlx::query_as(&format!(
        "SELECT attempt, last_error, error_type FROM {} WHERE destination_type = 'SCRIPTED'",
        scene.db.tables.outbox()
    ))
    .fetch_all(&scene.db.pool)
    .await
    .unwrap();
    for (attempt, last_error, error_type) in rows {
        assert_eq!(attempt, 3);
        assert!(
            last_error
                .starts_with("hostile?error ?[31mred??2024-01-01T00:00:00Z INFO forged line x"),
            "{last_error:.80}"
        );
        assert!(!last_error.chars().any(char::is_control));
        assert_eq!(
            last_error.chars().count(),
            outbox_host::repository::MAX_LAST_ERROR_CHARS
        );
        assert_eq!(error_type, "evil_type__forged");
    }
    scene.stop().await;
}

/// Runs the scene on a table where `refuse` (DDL statements) makes PostgreSQL refuse any mark with error type
/// `unstorable`, standing in for any outcome it will not store (NUL is sanitized away now); checks
/// that each such row is dead-lettered with SQLSTATE `code`, and delivered only once.
async fn a_refused_outcome_dead_letters_its_row(label: &str, refuse: &[&str], code: &str) {
    let db = TestDb::new().await;
    for statement in refuse {
        db.execute(statement).await;
    }
    let scene = Scene::start_on(db, label, "").await;
    scene
        .publish(|| {
            OutboxEntry::new(
                "test.event",
                "SCRIPTED",
                "x",
                serde_json::json!({"outcome": "retryable", "error_type": "unstorable"}),
            )
        })
        .await;
    scene.assert_the_webhook_rows_each_published_once().await;
    wait_until("every refused row is dead-lettered", GUARD, || async {
        scene.count("SCRIPTED", "DEAD_LETTER").await == HOSTILE as i64
    })
    .await;
    assert_eq!(
        scene.metric("outbox_claimed_total{destination_type=\"SCRIPTED\"}"),
        HOSTILE as u64,
        "a refused outcome is not delivered again"
    );
    let rows: Vec<(i32, String, String)> = sqlx::query_as(&format!(
        "SELECT attempt, last_error, error_type FROM {} WHERE destination_type = 'SCRIPTED'",
        scene.db.tables.outbox()
    ))
    .fetch_all(&scene.db.pool)
    .await
    .unwrap();
    for (attempt, last_error, error_type) in rows {
        assert_eq!(attempt, 1);
        assert_eq!(error_type, "unrecordable");
        assert!(
            last_error.contains(&format!("SQLSTATE {code}")),
            "{last_error}"
        );
    }
    scene.stop().await;
}

#[tokio::test]
async fn an_outcome_whose_values_the_database_refuses_dead_letters_its_row_at_once() {
    a_refused_outcome_dead_letters_its_row(
        "hostile-refused-values",
        &["ALTER TABLE {outbox} ADD CONSTRAINT refuse_unstorable \
           CHECK (error_type IS DISTINCT FROM 'unstorable')"],
        "23514",
    )
    .await;
}

#[tokio::test]
async fn an_outcome_the_database_keeps_refusing_dead_letters_its_row_after_a_few_tries() {
    a_refused_outcome_dead_letters_its_row(
        "hostile-refused-trigger",
        &[
            "CREATE FUNCTION {outbox}_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF NEW.error_type = 'unstorable' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; \
               RETURN NEW; \
             END $$",
            "CREATE TRIGGER refuse_unstorable BEFORE UPDATE ON {outbox} \
             FOR EACH ROW EXECUTE FUNCTION {outbox}_refuse()",
        ],
        "P0001",
    )
    .await;
}

// --- hostile claim scopes (items 3 and 7) ------------------------------------------------------------

#[tokio::test]
async fn a_claim_scope_with_a_nul_target_leaves_only_its_own_type_waiting() {
    let scene = Scene::start("hostile-scope-nul", "claim_scope = \"nul\"").await;
    scene.publish(|| scripted("success", "ok")).await;
    scene.assert_the_webhook_rows_each_published_once().await;
    assert_eq!(scene.count("SCRIPTED", "PENDING").await, HOSTILE as i64);
    let failures = scene.metric(
        "outbox_claim_scope_failures_total{destination_type=\"SCRIPTED\",reason=\"control_character\"}",
    );
    assert!(failures >= 1, "the refused scope is counted");
    let logged = log_capture::lines_with("reason=control_character");
    assert!(
        !logged.is_empty() && (logged.len() as u64) < failures.max(2),
        "logged once, not on every turn: {} lines for {failures} failures",
        logged.len()
    );
    assert!(logged.iter().all(|line| line.contains("SCRIPTED")));
    assert!(
        log_capture::lines_with("secret").is_empty(),
        "no log line names a target"
    );
    scene.stop().await;
}

async fn noop_published(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) FROM {outbox} WHERE destination_type = 'NOOP' AND state = 'PUBLISHED'",
    )
    .await
}

/// Publishes 200 NOOP rows beside the scripted plugin configured with `scripted_config`, and answers
/// how long they took to be published. One NOOP row is published first, so the figure is the steady
/// state: a scope that turns slow costs one turn up to the scope time limit (500 ms), once.
async fn noop_publish_time(scripted_config: &str) -> (Duration, TestHost, TestDb) {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("hostile-scope-slow");
    dir.add_plugin("noop", plugins::NOOP);
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest("scripted", &format!("[config]\n{scripted_config}\n"));
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    for _ in 0..HOSTILE {
        db.publish(scripted("success", "x")).await;
    }
    db.publish(entry("NOOP", "warm-up")).await;
    wait_until("the warm-up row is published", GUARD, || async {
        noop_published(&db).await == 1
    })
    .await;
    let started = Instant::now();
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..200 {
        let row = entry("NOOP", "x").aggregate("A", (i % 10).to_string());
        db.outbox().publish(&mut tx, row).await.unwrap();
    }
    tx.commit().await.unwrap();
    wait_until("every NOOP row is published", GUARD, || async {
        noop_published(&db).await == 201
    })
    .await;
    (started.elapsed(), host, db)
}

#[tokio::test]
async fn a_claim_scope_taking_2_5_s_does_not_slow_other_types() {
    let (quick, host, _db) = noop_publish_time("").await;
    host.stop().await;
    let (beside_slow, host, db) = noop_publish_time("claim_scope_delay_ms = \"2500\"").await;
    println!(
        "200 NOOP rows published in {:.0} ms beside a quick claim scope, {:.0} ms beside one taking 2.5 s",
        quick.as_secs_f64() * 1000.0,
        beside_slow.as_secs_f64() * 1000.0
    );
    assert_eq!(
        metric(&host, "outbox_claimed_total{destination_type=\"NOOP\"}"),
        201
    );
    let pending: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE destination_type = 'SCRIPTED' AND state = 'PENDING'")
        .await;
    assert_eq!(pending, HOSTILE as i64, "the slow scope's own rows wait");
    assert!(
        metric(
            &host,
            "outbox_claim_scope_failures_total{destination_type=\"SCRIPTED\",reason=\"timeout\"}"
        ) >= 1
    );
    host.stop().await;
}
