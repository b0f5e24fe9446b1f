//! Soak: a real host on a PostgreSQL server of its own under mixed load for `SOAK_MINUTES` (default
//! 30): webhook rows to a local receiver that fails 5% of requests, NOOP rows, the NOOP plugin
//! hot-reloaded every minute, and a fault every few minutes in turn (the host killed with `kill -9`
//! and restarted, PostgreSQL restarted, every host connection terminated). At the end it lets the
//! host drain and prints the ledger, which must balance: lost = inserted − published −
//! dead-lettered − pending = 0. It exits 1 when it does not.
//!
//! Run: `cargo bench -p outbox-tests --bench soak` (`SOAK_MINUTES=5` for a short run,
//! `SOAK_ROWS_PER_SECOND` for another rate than 500, `SOAK_HOST_BINARY` to restart a copy of the host
//! rather than the one in `target/`, which a build may replace; needs root for `pg_createcluster`, as
//! the fault tests do).

use outbox_host::api::OutboxEntry;
use outbox_tests::binary::HostProcess;
use outbox_tests::db::TestDb;
use outbox_tests::fault_load::webhook_host;
use outbox_tests::http_stub::StubServer;
use outbox_tests::load::SteadyLoad;
use outbox_tests::own_server::OwnServer;
use outbox_tests::plugins;
use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
/// Rows a second by default, half webhook over 100 aggregates, half NOOP.
const LOAD: u64 = 500;
const RELOAD_EVERY: Duration = Duration::from_secs(60);
const FAULT_EVERY: Duration = Duration::from_secs(150);
/// Bound for the host to finish every row once the load stops.
const DRAIN: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug)]
enum Fault {
    KillAndRestart,
    RestartPostgres,
    TerminateConnections,
}

const FAULTS: [Fault; 3] = [
    Fault::KillAndRestart,
    Fault::RestartPostgres,
    Fault::TerminateConnections,
];

#[tokio::main]
async fn main() {
    let minutes = setting("SOAK_MINUTES", 30);
    let rate = setting("SOAK_ROWS_PER_SECOND", LOAD);
    let binary = std::env::var("SOAK_HOST_BINARY").unwrap_or_else(|_| BINARY.to_owned());
    let server = OwnServer::start();
    let db = TestDb::at(server.url()).await;
    let receiver = StubServer::start(200).await;
    receiver.fail_every(20);
    let (dir, config_path) = webhook_host(&db, &receiver, "soak", |config| {
        config.relay.lease_timeout = Duration::from_millis(10_000);
        config.maintenance.stale_lease_recovery_cron = "*/5 * * * * *".parse().unwrap();
    });
    dir.add_plugin("noop", plugins::NOOP);

    let hook = receiver.url("/hook");
    let load = SteadyLoad::start(db.pool.clone(), db.outbox(), rate, move |n| {
        if n % 2 == 0 {
            OutboxEntry::new(
                "soak.event",
                "WEBHOOK",
                hook.clone(),
                serde_json::json!({"n": n}),
            )
            .aggregate("Order", format!("order-{}", n % 100))
        } else {
            OutboxEntry::new("soak.event", "NOOP", "x", serde_json::json!({"n": n}))
        }
    });
    let start_host = || {
        HostProcess::run(
            &binary,
            &config_path,
            "error",
            Stdio::null(),
            Stdio::inherit(),
        )
    };
    let mut process = start_host();
    let mut peak_kib = 0;
    let (mut reloads, mut faults) = (0u32, Vec::new());
    let started = Instant::now();
    let (mut next_reload, mut next_fault) = (RELOAD_EVERY, FAULT_EVERY);
    println!(
        "soak: {minutes} min at {rate} rows/s, a fault every {} s",
        FAULT_EVERY.as_secs()
    );
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        peak_kib = peak_kib.max(process.peak_resident_kib());
        if started.elapsed() >= next_reload {
            next_reload += RELOAD_EVERY;
            reloads += 1;
            dir.deploy(
                "noop.toml",
                format!("[config]\nround = \"{reloads}\"\n").as_bytes(),
            );
        }
        if started.elapsed() >= next_fault {
            next_fault += FAULT_EVERY;
            let fault = FAULTS[faults.len() % FAULTS.len()];
            println!("{:>6.0} s: {fault:?}", started.elapsed().as_secs_f64());
            match fault {
                Fault::KillAndRestart => {
                    process.signal("KILL");
                    let _ = process.exit_code("SIGKILL", Duration::from_secs(30)).await;
                    process = start_host();
                }
                Fault::RestartPostgres => server.restart().await,
                Fault::TerminateConnections => {
                    sqlx::query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name LIKE 'outbox-host%'",
                    )
                    .execute(&db.pool)
                    .await
                    .expect("the server answers");
                }
            }
            faults.push(fault);
        }
    }
    let committed = load.stop().await;
    let drained = Instant::now();
    while drained.elapsed() < DRAIN && pending(&db).await > 0 {
        peak_kib = peak_kib.max(process.peak_resident_kib());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    peak_kib = peak_kib.max(process.peak_resident_kib());
    process.signal("TERM");
    let exit = process.exit_code("SIGTERM", Duration::from_secs(60)).await;

    let inserted: i64 = db.scalar("SELECT count(*) FROM {outbox}").await;
    let published = db.count("PUBLISHED").await;
    let dead_lettered = db.count("DEAD_LETTER").await;
    let still_pending = pending(&db).await;
    let lost = inserted - published - dead_lettered - still_pending;
    let mut delivered: HashMap<String, u32> = HashMap::new();
    for request in receiver.requests() {
        if (200..300).contains(&request.status) {
            let key = request.header("idempotency-key").unwrap_or("").to_owned();
            *delivered.entry(key).or_default() += 1;
        }
    }
    let duplicates = delivered.values().filter(|&&times| times > 1).count();
    let requests = receiver.requests().len();
    let failed_on_purpose = receiver
        .requests()
        .iter()
        .filter(|r| r.status == 503)
        .count();
    println!();
    println!("minutes                     {minutes}");
    println!("faults                      {} ({faults:?})", faults.len());
    println!("hot reloads                 {reloads}");
    println!("rows the load committed     {committed}");
    println!("inserted                    {inserted}");
    println!("published                   {published}");
    println!("dead-lettered               {dead_lettered}");
    println!("still pending               {still_pending}");
    println!("webhook requests            {requests} ({failed_on_purpose} answered 503)");
    println!("duplicates delivered        {duplicates}");
    println!("lost                        {lost}");
    println!(
        "host peak resident memory   {:.1} MiB",
        peak_kib as f64 / 1024.0
    );
    println!("host exit code on SIGTERM   {exit:?}");
    if lost != 0 || still_pending != 0 || exit != Some(0) {
        std::process::exit(1);
    }
}

/// A whole number from the environment variable `name`, else `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Rows not settled yet.
async fn pending(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM {outbox} WHERE state IN ('PENDING', 'PROCESSING')")
        .await
}
