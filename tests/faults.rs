//! Faults around the real `outbox-host` binary, each under a steady load and bounded in time: what
//! an operator's environment can do to the process must never lose or repeat a delivery.

use outbox_host::api::OutboxEntry;
use outbox_host::config::Config;
use outbox_host::relay::LISTENER_APPLICATION_NAME;
use outbox_tests::binary::{HostProcess, write_config};
use outbox_tests::db::TestDb;
use outbox_tests::fault_load::{DRAIN, EXIT, LOAD, webhook_host};
use outbox_tests::host::{self, free_port, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::load::SteadyLoad;
use outbox_tests::own_server::OwnServer;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");

/// The webhook posting to `receiver` (the well-behaved type) and the scripted handler, which logs
/// a line on every publish; and the host's configuration beside them.
fn setup(db: &TestDb, receiver: &StubServer, label: &str) -> (ScratchDir, PathBuf) {
    setup_with(db, receiver, label, |_| {})
}

/// [`setup`], with the configuration changed by `change`.
fn setup_with(
    db: &TestDb,
    receiver: &StubServer,
    label: &str,
    change: impl FnOnce(&mut Config),
) -> (ScratchDir, PathBuf) {
    let (dir, config) = webhook_host(db, receiver, label, change);
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest("scripted", "[limits]\ntimeout_ms = 20000\n");
    (dir, config)
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

/// Every row published on its first attempt (no attempt spent, nothing dead-lettered), and every
/// webhook row received exactly once, counted at the receiver by carrier id.
async fn assert_every_row_delivered_once(db: &TestDb, receiver: &StubServer, rows: u64) {
    let repeated = assert_every_row_delivered(db, receiver, rows).await;
    assert_eq!(repeated, 0, "no webhook row is received twice");
}

/// Every row published, nothing dead-lettered, every webhook row received at least once; returns
/// how many webhook rows were received more than once.
async fn assert_every_row_delivered(db: &TestDb, receiver: &StubServer, rows: u64) -> usize {
    let published = db.count("PUBLISHED").await;
    let dead_lettered = db.count("DEAD_LETTER").await;
    println!("rows {rows}, published {published}, dead-lettered {dead_lettered}");
    assert_eq!(dead_lettered, 0, "no row is dead-lettered");
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
    assert_eq!(missing, 0, "every webhook row is received");
    repeated
}

/// No attempt spent on any row: every row was published on its first try.
async fn assert_no_attempt_spent(db: &TestDb) {
    let retried: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE attempt > 0")
        .await;
    assert_eq!(retried, 0, "no attempt is spent");
}

/// Stops `load`, checks that every row it wrote was delivered exactly once without spending an
/// attempt, then that SIGTERM still stops the host with exit code 0.
async fn stop_the_load_then_the_host_losing_nothing(
    db: &TestDb,
    receiver: &StubServer,
    load: SteadyLoad,
    mut process: HostProcess,
) {
    let rows = load.stop().await;
    db.wait_until_settled(DRAIN).await;
    assert_every_row_delivered_once(db, receiver, rows).await;
    assert_no_attempt_spent(db).await;
    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}

#[tokio::test]
async fn closing_the_hosts_stdout_and_stderr_under_load_loses_no_row_and_sigterm_still_exits_0() {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    let admin_port = free_port();
    let (_dir, config) = setup_with(&db, &receiver, "closed-stdio", |config| {
        config.admin.listen = SocketAddr::from(([127, 0, 0, 1], admin_port));
    });
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
    let metrics = format!("http://127.0.0.1:{admin_port}/metrics");
    wait_until("the lost log lines are counted", DRAIN, || async {
        host::metric(&metrics, "outbox_log_lines_dropped_total")
            .await
            .expect("the metric is exposed")
            > 0.0
    })
    .await;
    stop_the_load_then_the_host_losing_nothing(&db, &receiver, load, process).await;
}

#[tokio::test]
async fn a_log_pipe_that_closes_during_start_up_does_not_stop_the_host() {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    let (_dir, config) = setup(&db, &receiver, "head-3");
    // `outbox-host run 2>&1 | head -n 3`: one pipe for both, whose reader leaves after three lines.
    let (pipe, writer) = std::io::pipe().expect("a pipe");
    let process = HostProcess::run(
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
    stop_the_load_then_the_host_losing_nothing(&db, &receiver, load, process).await;
}

#[tokio::test]
async fn kill_9_under_load_then_a_restart_publishes_every_row_repeating_at_most_those_in_flight() {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    // Slow enough answers that publishes are in flight at the kill.
    receiver.set_delay(Duration::from_millis(50));
    let (_dir, config) = setup_with(&db, &receiver, "kill-9", |config| {
        config.relay.lease_timeout = Duration::from_millis(10_000);
        config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    });
    let load = mixed_load(&db, &receiver);
    let mut first = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    wait_until("the host publishes", Duration::from_secs(60), || async {
        db.count("PUBLISHED").await >= 500
    })
    .await;
    first.signal("KILL");
    first.exit_code("SIGKILL", EXIT).await;
    // Nothing records an outcome now: the rows the host held are exactly those it had in flight.
    let in_flight = db.count("PROCESSING").await;
    let published_at_kill = db.count("PUBLISHED").await;

    let mut restarted = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    wait_until("the restarted host publishes", DRAIN, || async {
        db.count("PUBLISHED").await >= published_at_kill + 500
    })
    .await;
    let rows = load.stop().await;
    db.wait_until_settled(DRAIN).await;
    let repeated = assert_every_row_delivered(&db, &receiver, rows).await;
    println!("in flight at the kill {in_flight}, webhook rows received twice {repeated}");
    assert!(
        repeated as i64 <= in_flight,
        "only rows in flight at the kill are delivered again"
    );
    restarted.signal("TERM");
    assert_eq!(restarted.exit_code("SIGTERM", EXIT).await, Some(0));
}

#[tokio::test]
async fn three_hosts_under_load_deliver_once_run_maintenance_one_at_a_time_and_recover_a_killed_hosts_rows()
 {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    // Slow enough answers that the killed host has publishes in flight.
    receiver.set_delay(Duration::from_millis(200));
    let (dir, _) = setup(&db, &receiver, "three-hosts");
    let load = mixed_load(&db, &receiver);
    let mut hosts = Vec::new();
    for name in ["a", "b", "c"] {
        let mut config = host::config(&db, dir.path());
        config.relay.node_id = Some(format!("{}-{name}", db.schema));
        config.relay.lease_timeout = Duration::from_millis(5_000);
        config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
        config.admin.listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let path = dir.path().join(format!("host-{name}.conf"));
        write_config(&config, &path);
        let admin = format!("http://{}", config.admin.listen);
        let process = HostProcess::run(BINARY, &path, "warn", Stdio::null(), Stdio::inherit());
        hosts.push((config.relay.node_id.unwrap(), admin, process));
    }
    wait_until("every host publishes", DRAIN, || async {
        // A loop claims as `<node id>-<loop>`: count the nodes.
        let nodes: i64 = db
            .scalar(
                "SELECT count(DISTINCT regexp_replace(claimed_by, '-[0-9]+$', '')) FROM {outbox} \
                 WHERE state = 'PUBLISHED'",
            )
            .await;
        nodes == 3 && db.count("PUBLISHED").await >= 1000
    })
    .await;

    // Kill the host holding the most rows in flight, so the survivors have leases to recover.
    let busiest: String = sqlx::query_scalar(&format!(
        "SELECT claimed_by FROM {} WHERE state = 'PROCESSING' \
         GROUP BY claimed_by ORDER BY count(*) DESC LIMIT 1",
        db.tables.outbox()
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // A loop claims as `<node id>-<loop>`.
    let position = hosts
        .iter()
        .position(|(node, _, _)| busiest.starts_with(&format!("{node}-")))
        .expect("rows in flight are claimed by a host's loop");
    let (killed_node, _, mut killed) = hosts.remove(position);
    killed.signal("KILL");
    killed.exit_code("SIGKILL", EXIT).await;
    let held: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM {} WHERE state = 'PROCESSING' AND claimed_by LIKE $1 || '-%'",
        db.tables.outbox()
    ))
    .bind(&killed_node)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(!held.is_empty(), "the killed host held rows in flight");
    println!("rows the killed host held: {}", held.len());
    wait_until(
        "the others recover the killed host's rows",
        DRAIN,
        || async {
            let left: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {} WHERE id = ANY($1) AND state <> 'PUBLISHED'",
                db.tables.outbox()
            ))
            .bind(&held)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            left == 0
        },
    )
    .await;
    let rows = load.stop().await;
    db.wait_until_settled(DRAIN).await;
    let repeated = assert_every_row_delivered(&db, &receiver, rows).await;
    println!("webhook rows received twice {repeated}");
    assert!(
        repeated <= held.len(),
        "a row is delivered twice only when the killed host's lease on it expired"
    );

    let recovery = "outbox_maintenance_runs_total{job=\"stale_lease_recovery\",result=";
    let (mut ran, mut skipped) = (0.0, 0.0);
    for (_, admin, _) in &hosts {
        let metrics = format!("{admin}/metrics");
        ran += host::metric(&metrics, &format!("{recovery}\"ok\"}}"))
            .await
            .unwrap_or(0.0);
        skipped += host::metric(&metrics, &format!("{recovery}\"skipped\"}}"))
            .await
            .unwrap_or(0.0);
    }
    println!("lease recovery on the two survivors: {ran} runs, {skipped} skipped for the lock");
    assert!(ran >= 1.0, "lease recovery ran");
    assert!(
        skipped >= 1.0,
        "a node skips a run while another holds the job's lock"
    );
    for (_, _, mut process) in hosts {
        process.signal("TERM");
        assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
    }
}

/// The host's own connections (relay pool and listener), chosen by `application_name`: other
/// tests share the server.
async fn host_connections(db: &TestDb, node_id: &str) -> Vec<(i32, String)> {
    sqlx::query_as(
        "SELECT pid, application_name FROM pg_stat_activity \
         WHERE application_name LIKE 'outbox-host%' AND application_name LIKE '%' || $1",
    )
    .bind(node_id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn postgresql_restarted_under_load_the_host_reconnects_listens_again_and_loses_nothing() {
    let server = OwnServer::start();
    let db = TestDb::at(server.url()).await;
    let receiver = StubServer::start(200).await;
    receiver.set_delay(Duration::from_millis(20));
    let (_dir, config) = setup(&db, &receiver, "restarted");
    let node_id = format!("{}-node", db.schema);
    let load = mixed_load(&db, &receiver);
    let mut process = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    wait_until("the host publishes", Duration::from_secs(60), || async {
        db.count("PUBLISHED").await >= 500
    })
    .await;

    server.restart().await;
    let published_after_restart = db.count("PUBLISHED").await;
    println!("published when the server was back: {published_after_restart}");
    wait_until("the host listens again", DRAIN, || async {
        host_connections(&db, &node_id)
            .await
            .iter()
            .any(|(_, name)| name.starts_with(LISTENER_APPLICATION_NAME))
    })
    .await;
    wait_until("the host publishes again", DRAIN, || async {
        db.count("PUBLISHED").await >= published_after_restart + 500
    })
    .await;
    let committed = load.stop().await;
    // A commit cut by the restart may have landed without the load hearing so: count the table.
    let rows: i64 = db.scalar("SELECT count(*) FROM {outbox}").await;
    println!("rows the load saw committed {committed}, rows in the table {rows}");
    assert!(rows as u64 >= committed);
    db.wait_until_settled(DRAIN).await;
    assert_every_row_delivered_once(&db, &receiver, rows as u64).await;
    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}

#[tokio::test]
async fn every_host_connection_terminated_under_load_the_host_reconnects_listens_again_and_loses_nothing()
 {
    let db = TestDb::new().await;
    let receiver = StubServer::start(200).await;
    receiver.set_delay(Duration::from_millis(20));
    let (_dir, config) = setup(&db, &receiver, "terminated");
    let node_id = format!("{}-node", db.schema);
    let load = mixed_load(&db, &receiver);
    let mut process = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    wait_until("the host publishes", Duration::from_secs(60), || async {
        db.count("PUBLISHED").await >= 500
    })
    .await;
    let listener_before = host_connections(&db, &node_id)
        .await
        .into_iter()
        .find(|(_, name)| name.starts_with(LISTENER_APPLICATION_NAME))
        .expect("the host listens")
        .0;
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name LIKE 'outbox-host%' AND application_name LIKE '%' || $1",
    )
    .bind(&node_id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    println!("connections terminated: {}", terminated.len());
    assert!(terminated.len() >= 2, "the relay pool and the listener");
    let published_at_fault = db.count("PUBLISHED").await;

    wait_until("the host listens again", DRAIN, || async {
        host_connections(&db, &node_id)
            .await
            .iter()
            .any(|(pid, name)| {
                name.starts_with(LISTENER_APPLICATION_NAME) && *pid != listener_before
            })
    })
    .await;
    wait_until("the host publishes again", DRAIN, || async {
        db.count("PUBLISHED").await >= published_at_fault + 500
    })
    .await;
    let rows = load.stop().await;
    db.wait_until_settled(DRAIN).await;
    assert_every_row_delivered_once(&db, &receiver, rows).await;
    process.signal("TERM");
    assert_eq!(process.exit_code("SIGTERM", EXIT).await, Some(0));
}
