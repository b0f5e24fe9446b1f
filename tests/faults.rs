//! Faults around the real `outbox-host` binary, each under a steady load and bounded in time: what
//! an operator's environment can do to the process must never lose or repeat a delivery.

use outbox_host::api::OutboxEntry;
use outbox_tests::binary::{HostProcess, write_config};
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::load::SteadyLoad;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
/// Rows a second of the steady load.
const LOAD: u64 = 1000;
/// Bound for the host to finish every row once the load stops.
const DRAIN: Duration = Duration::from_secs(180);
/// Bound for the host to exit after SIGTERM.
const EXIT: Duration = Duration::from_secs(30);

/// A plugins directory with a webhook posting to `receiver` (the well-behaved type) and the scripted
/// handler, which logs a line on every publish; and the host's configuration beside it.
fn setup(db: &TestDb, receiver: &StubServer, label: &str) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", plugins::WEBHOOK);
    // Generous call limits: a loaded machine must not turn a slow call into a retry.
    dir.add_manifest(
        "webhook",
        &format!(
            "[http]\nallowed_hosts = [\"{}\"]\n[limits]\ntimeout_ms = 20000\n",
            receiver.origin()
        ),
    );
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest("scripted", "[limits]\ntimeout_ms = 20000\n");
    let config_path = dir.path().join("host.conf");
    write_config(&host::config(db, dir.path()), &config_path);
    (dir, config_path)
}

/// Even rows go to the webhook, odd rows to the scripted handler.
fn mixed_load(db: &TestDb, receiver: &StubServer) -> SteadyLoad {
    let hook = receiver.url("/hook");
    SteadyLoad::start(db.pool.clone(), db.outbox(), LOAD, move |n| {
        let destination_type = if n % 2 == 0 { "WEBHOOK" } else { "SCRIPTED" };
        OutboxEntry::new(
            "test.event",
            destination_type,
            hook.clone(),
            serde_json::json!({"n": n}),
        )
    })
}

/// Waits until no row is left to relay.
async fn wait_for_every_row_to_settle(db: &TestDb) {
    wait_until("every row is settled", DRAIN, || async {
        db.scalar::<i64>("SELECT count(*) FROM {outbox} WHERE state IN ('PENDING', 'PROCESSING')")
            .await
            == 0
    })
    .await;
}

/// Every row published on its first attempt (no attempt spent, nothing dead-lettered), and every
/// webhook row received exactly once, counted at the receiver by carrier id.
async fn assert_every_row_delivered_once(db: &TestDb, receiver: &StubServer, rows: u64) {
    let published = db.count("PUBLISHED").await;
    let dead_lettered = db.count("DEAD_LETTER").await;
    let retried: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE attempt > 0")
        .await;
    println!(
        "rows {rows}, published {published}, dead-lettered {dead_lettered}, retried {retried}"
    );
    assert_eq!(dead_lettered, 0, "no row is dead-lettered");
    assert_eq!(retried, 0, "no attempt is spent");
    assert_eq!(published, rows as i64, "every row is published");
    let mut received: HashMap<String, u32> = HashMap::new();
    for request in receiver.requests() {
        let key = request.header("idempotency-key").unwrap_or("").to_owned();
        *received.entry(key).or_default() += 1;
    }
    let carrier_ids: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT carrier_id::text FROM {} WHERE destination_type = 'WEBHOOK'",
        db.tables.outbox()
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let missing = carrier_ids
        .iter()
        .filter(|id| !received.contains_key(*id))
        .count();
    let repeated = received.values().filter(|&&count| count > 1).count();
    println!(
        "webhook rows {}, received {}, missing {missing}, received more than once {repeated}",
        carrier_ids.len(),
        received.len()
    );
    assert_eq!(
        (missing, repeated),
        (0, 0),
        "every webhook row is received exactly once"
    );
}

#[tokio::test]
async fn closing_the_hosts_stdout_and_stderr_under_load_loses_no_row_and_sigterm_still_exits_0() {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    let (_dir, config) = setup(&db, &receiver, "closed-stdio");
    let mut process = HostProcess::run(BINARY, &config, "info", Stdio::piped(), Stdio::piped());
    let mut stdout = process.child().stdout.take().expect("piped");
    let mut stderr = process.child().stderr.take().expect("piped");
    let (close, closed) = tokio::sync::oneshot::channel::<()>();
    // Reads the host's output like a log shipper until told to die; its pipes close with it.
    let reader = tokio::spawn(async move {
        let mut sink = (tokio::io::sink(), tokio::io::sink());
        tokio::select! {
            _ = closed => {}
            _ = async {
                tokio::join!(
                    tokio::io::copy(&mut stdout, &mut sink.0),
                    tokio::io::copy(&mut stderr, &mut sink.1)
                )
            } => {}
        }
    });

    let load = mixed_load(&db, &receiver);
    wait_until("the host publishes", Duration::from_secs(60), || async {
        db.count("PUBLISHED").await >= 200
    })
    .await;
    close.send(()).expect("the reader is running");
    reader.await.unwrap();
    let published_at_close = db.count("PUBLISHED").await;
    wait_until(
        "the host publishes with its output closed",
        DRAIN,
        || async { db.count("PUBLISHED").await >= published_at_close + 1000 },
    )
    .await;
    let rows = load.stop().await;
    wait_for_every_row_to_settle(&db).await;
    assert_every_row_delivered_once(&db, &receiver, rows).await;

    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}

#[tokio::test]
async fn a_log_pipe_that_closes_during_start_up_does_not_stop_the_host() {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    let (_dir, config) = setup(&db, &receiver, "head-3");
    // `outbox-host run 2>&1 | head -n 3`: one pipe for both, whose reader leaves after three lines.
    let (pipe, writer) = std::io::pipe().expect("a pipe");
    let mut process = HostProcess::run(
        BINARY,
        &config,
        "info",
        Stdio::from(writer.try_clone().expect("a second end")),
        Stdio::from(writer),
    );
    let head = std::thread::spawn(move || BufReader::new(pipe).lines().take(3).count());
    let lines = tokio::task::spawn_blocking(move || head.join().expect("head does not panic"))
        .await
        .unwrap();
    assert_eq!(
        lines, 3,
        "the host logs at least three lines while starting"
    );

    let load = mixed_load(&db, &receiver);
    wait_until("the host publishes", Duration::from_secs(60), || async {
        db.count("PUBLISHED").await >= 1000
    })
    .await;
    let rows = load.stop().await;
    wait_for_every_row_to_settle(&db).await;
    assert_every_row_delivered_once(&db, &receiver, rows).await;

    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}
