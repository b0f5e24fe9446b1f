//! Rows applications wrote with plain SQL that the relay cannot deliver as written. Each ends in a
//! defined state with an error that names the entry and never a value it holds, while a
//! well-behaved type keeps being delivered beside it.

use outbox_tests::db::{self, TestDb};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::load::SteadyLoad;
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;

/// Planted in every value of a bad row: it must appear in no stored error and no log line.
const SECRET: &str = "secret-marker-b4d-r0w";
/// Rows a second of the well-behaved type beside the bad row.
const LOAD: u64 = 200;
/// Bound for the bad row to settle, and for the load to be delivered after it.
const SETTLE: Duration = Duration::from_secs(60);

/// A host delivering a steady load of NOOP rows, with lease recovery running every second.
struct Beside {
    db: TestDb,
    host: TestHost,
    load: SteadyLoad,
    _plugins: ScratchDir,
}

impl Beside {
    async fn start() -> Beside {
        let db = TestDb::new().await;
        let dir = ScratchDir::new("bad-rows");
        dir.add_plugin("noop", plugins::NOOP);
        let mut config = host::config(&db, dir.path());
        config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
        let host = TestHost::start(&config).await;
        host.wait_for_plugins("NOOP is loaded", SETTLE, |set| {
            set.handler("NOOP").is_some()
        })
        .await;
        let load = SteadyLoad::start(db.pool.clone(), db.outbox(), LOAD, |_| {
            db::entry("NOOP", "x")
        });
        Beside {
            db,
            host,
            load,
            _plugins: dir,
        }
    }

    /// Inserts a row with plain SQL; each argument is an SQL expression.
    async fn insert(
        &self,
        destination_type: &str,
        payload: &str,
        headers: &str,
        metadata: &str,
        max_attempts: &str,
    ) -> i64 {
        self.db
            .scalar(&format!(
                "INSERT INTO {{outbox}} (carrier_id, event_type, destination, destination_type, \
                 payload, headers, metadata, max_attempts) \
                 VALUES (gen_random_uuid(), 'test.event', 'x', {destination_type}, {payload}, \
                 {headers}, {metadata}, {max_attempts}) RETURNING id"
            ))
            .await
    }

    /// A NOOP row with `headers`, `metadata` or `max_attempts` replaced.
    async fn insert_noop(&self, headers: &str, metadata: &str, max_attempts: &str) -> i64 {
        let payload = format!("'{{\"secret\": \"{SECRET}\"}}'");
        self.insert("'NOOP'", &payload, headers, metadata, max_attempts)
            .await
    }

    /// Waits until row `id` is in `state`; then stops the load and waits until every row of it is
    /// published. Returns the row's stored error, and checks it names the entry, where the relay
    /// refused it, and never the secret.
    async fn settle(self, id: i64, state: &str) -> (Option<String>, Option<String>) {
        let db = &self.db;
        wait_until(&format!("entry {id} is {state}"), SETTLE, || async {
            db.state_of(id).await == state
        })
        .await;
        let rows = self.load.stop().await;
        wait_until("the load beside it is delivered", SETTLE, || async {
            db.scalar::<i64>(
                "SELECT count(*) FROM {outbox} WHERE destination_type = 'NOOP' \
                 AND state = 'PUBLISHED' AND payload ? 'n'",
            )
            .await
                == rows as i64
        })
        .await;
        println!("{rows} rows of the load delivered beside entry {id}");
        let error: (Option<String>, Option<String>) = sqlx::query_as(&format!(
            "SELECT last_error, error_type FROM {} WHERE id = $1",
            db.tables.outbox()
        ))
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if let Some(message) = &error.0 {
            assert!(
                !message.contains(SECRET),
                "the error holds a value: {message}"
            );
        }
        assert_eq!(
            log_capture::lines_with(SECRET),
            Vec::<String>::new(),
            "no log line holds a value"
        );
        self.host.stop().await;
        error
    }
}

/// Dead-lettered as an invalid row, with an error containing `what` and naming the entry.
fn assert_refused(id: i64, error: (Option<String>, Option<String>), what: &str) {
    let (message, error_type) = error;
    let message = message.expect("a stored error");
    println!("entry {id}: {message}");
    assert!(message.contains(&format!("entry {id} ")), "{message}");
    assert!(message.contains(what), "{message}");
    assert_eq!(error_type.as_deref(), Some("invalid_row"));
}

#[tokio::test]
async fn an_invalid_destination_type_is_dead_lettered_instead_of_waiting_for_ever() {
    let beside = Beside::start().await;
    let id = beside
        .insert(
            "'bad type!'",
            &format!("'{{\"secret\": \"{SECRET}\"}}'"),
            "NULL",
            "'{}'",
            "20",
        )
        .await;
    let (message, error_type) = beside.settle(id, "DEAD_LETTER").await;
    let message = message.expect("a stored error");
    assert!(message.contains("invalid destination type"), "{message}");
    assert!(!message.contains("bad type!"), "{message}");
    assert_eq!(error_type.as_deref(), Some("invalid_row"));
    let warned = log_capture::lines_with("destination type is invalid");
    assert!(
        warned
            .iter()
            .any(|line| line.contains(&format!(" entry_id={id} "))),
        "{warned:?}"
    );
}

#[tokio::test]
async fn a_reserved_header_is_dead_lettered_naming_the_key() {
    let beside = Beside::start().await;
    let headers = format!("'{{\"outbox-forged\": \"{SECRET}\"}}'");
    let id = beside.insert_noop(&headers, "'{}'", "20").await;
    let error = beside.settle(id, "DEAD_LETTER").await;
    assert_refused(
        id,
        error,
        "header \"outbox-forged\" uses the reserved prefix",
    );
}

#[tokio::test]
async fn headers_that_are_not_an_object_are_dead_lettered() {
    let beside = Beside::start().await;
    let headers = format!("'[\"{SECRET}\"]'");
    let id = beside.insert_noop(&headers, "'{}'", "20").await;
    let error = beside.settle(id, "DEAD_LETTER").await;
    assert_refused(id, error, "headers are not a JSON object");
}

#[tokio::test]
async fn a_header_value_that_is_not_a_string_is_dead_lettered_naming_the_key() {
    let beside = Beside::start().await;
    let headers = format!("'{{\"tenant\": {{\"id\": \"{SECRET}\"}}}}'");
    let id = beside.insert_noop(&headers, "'{}'", "20").await;
    let error = beside.settle(id, "DEAD_LETTER").await;
    assert_refused(id, error, "header \"tenant\" is not a string");
}

#[tokio::test]
async fn a_null_header_value_is_dropped_with_one_warning_and_the_row_delivered() {
    let beside = Beside::start().await;
    let headers = format!("'{{\"gone\": null, \"kept\": \"{SECRET}\"}}'");
    let id = beside.insert_noop(&headers, "'{}'", "20").await;
    beside.settle(id, "PUBLISHED").await;
    // Ids restart in every test's schema: the message tells this warning from other tests' lines.
    let warned: Vec<_> = log_capture::lines_with("JSON null")
        .into_iter()
        .filter(|line| line.contains(&format!(" entry_id={id} ")))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains(" key=gone "), "{warned:?}");
}

#[tokio::test]
async fn metadata_that_is_not_an_object_is_dead_lettered() {
    let beside = Beside::start().await;
    let metadata = format!("'\"{SECRET}\"'");
    let id = beside.insert_noop("NULL", &metadata, "20").await;
    let error = beside.settle(id, "DEAD_LETTER").await;
    assert_refused(id, error, "metadata is not a JSON object");
}

#[tokio::test]
async fn max_attempts_of_zero_or_less_is_dead_lettered_without_a_delivery() {
    for max_attempts in ["0", "-5"] {
        let beside = Beside::start().await;
        let id = beside.insert_noop("NULL", "'{}'", max_attempts).await;
        let error = beside.settle(id, "DEAD_LETTER").await;
        assert_refused(id, error, "max_attempts must be at least 1");
    }
}

#[tokio::test]
async fn a_10_mb_payload_is_delivered() {
    let beside = Beside::start().await;
    let payload = "jsonb_build_object('blob', repeat('x', 10000000))";
    let id = beside.insert("'NOOP'", payload, "NULL", "'{}'", "20").await;
    beside.settle(id, "PUBLISHED").await;
}

#[tokio::test]
async fn a_100_mb_payload_is_refused_without_being_read() {
    let beside = Beside::start().await;
    let payload = "jsonb_build_object('blob', repeat('x', 100000000))";
    let id = beside.insert("'NOOP'", payload, "NULL", "'{}'", "20").await;
    let error = beside.settle(id, "DEAD_LETTER").await;
    assert_refused(
        id,
        error,
        "is larger than the relay's limit of 16777216 bytes",
    );
}
