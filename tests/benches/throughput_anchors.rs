//! The relay beside two anchors, in one run on this machine, each figure with its ratio:
//!
//! 1. graphile-worker 0.18 in batched mode, the fastest PostgreSQL job queue we know (no ordering at
//!    all), on a database of its own (`graphile_worker.mjs`; installed from npm once per machine into
//!    `~/.cache/outbox-host/toolchains/graphile-worker` by `scripts/setup-toolchains`, which this
//!    benchmark runs): 100,000 jobs, a task that does nothing, concurrency 16, a local queue of 500,
//!    completions and failures batched without delay.
//! 2. Plain SQL, what PostgreSQL itself can do with seed 000's state machine: pgbench, 2 clients, each
//!    claiming 200 rows with the host's head-of-line claim (SKIP LOCKED) and then marking them
//!    PUBLISHED, over 100,000 rows in 1,000 aggregates.
//! 3. The relay, `outbox-host run` as a child process at the shipped defaults (nothing tuned): 100,000
//!    rows over 1,000 aggregates; 1,000,000 rows over 10,000 aggregates, with the process's peak
//!    resident memory; 100,000 rows while an unrelated transaction stays open, holding back vacuum;
//!    10,000 rows over 10 aggregates, fewer than the relay keeps in flight, so most rows wait behind
//!    a head; and insert-to-publish latency under a steady 5,000 rows/s with LISTEN_NOTIFY.
//!
//! A figure counts only rows the database accepted: PUBLISHED rows (completed jobs for
//! graphile-worker) from the first claim to the last publish, on the database clock.
//!
//! Run: `cargo bench -p outbox-tests --bench throughput_anchors` (`ANCHORS_SCALE=0.1` multiplies every
//! row count, and the latency run's length, by 0.1 for a quick look; with `ANCHORS_RELAY_ONLY=N`,
//! `ANCHORS_AGGREGATES=A` spreads the relay's rows over `A` aggregates instead, and
//! `ANCHORS_HELD_OPEN=1` holds a transaction open through every drain).

use outbox_tests::binary::{self, HostProcess};
use outbox_tests::db::TestDb;
use outbox_tests::drain;
use outbox_tests::host::{self, wait_until};
use outbox_tests::latency;
use outbox_tests::plugins;
use outbox_tests::rounds;
use outbox_tests::scratch::ScratchDir;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
const SETUP_TOOLCHAINS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/setup-toolchains");
const GRAPHILE_WORKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/graphile_worker.mjs");
const ROWS: u64 = 100_000;
const AGGREGATES: u64 = 1_000;
/// The backlog that must not slow the relay down: ten times the rows, the same rows per aggregate.
const LARGE_ROWS: u64 = 1_000_000;
const LARGE_AGGREGATES: u64 = 10_000;
/// A backlog over fewer aggregates than the relay keeps in flight: most rows wait behind a head.
const FEW_AGGREGATES_ROWS: u64 = 10_000;
const FEW_AGGREGATES: u64 = 10;
const LATENCY_RATE: u64 = 5_000;
/// Applications insert concurrently; one connection alone could not commit 5,000 rows/s here.
const LATENCY_WRITERS: u64 = 8;
const LATENCY_DURATION: Duration = Duration::from_secs(10);
/// Bound for any one drain.
const DRAIN_BOUND: Duration = Duration::from_secs(900);

#[tokio::main]
async fn main() {
    let scale: f64 = std::env::var("ANCHORS_SCALE")
        .ok()
        .map(|value| value.parse().expect("ANCHORS_SCALE is a number"))
        .unwrap_or(1.0);
    let scaled = |n: u64| ((n as f64 * scale).round() as u64).max(10);
    let (rows, aggregates) = (scaled(ROWS), scaled(AGGREGATES));
    let (large_rows, large_aggregates) = (scaled(LARGE_ROWS), scaled(LARGE_AGGREGATES));
    println!("throughput anchors (scale {scale}), NOOP rows, PostgreSQL on the same machine");
    if let Some(rounds) = rounds::from_env("ANCHORS_LATENCY_ONLY") {
        // The latency under load only, so wake-up changes can be compared back to back.
        for _ in 0..rounds {
            print_latency(scale).await;
        }
        return;
    }
    if let Some(rounds) = rounds::from_env("ANCHORS_RELAY_ONLY") {
        // Settings compared back to back (`OUTBOX_RELAY_*` reach the child): the relay's drains only.
        let aggregates = std::env::var("ANCHORS_AGGREGATES").map_or(aggregates, |value| {
            value.parse().expect("ANCHORS_AGGREGATES is a number")
        });
        let holdback = match std::env::var("ANCHORS_HELD_OPEN").as_deref() {
            Ok("1") => Holdback::OpenTransaction,
            _ => Holdback::None,
        };
        for _ in 0..rounds {
            let relay = relay_drain(rows, aggregates, holdback).await;
            println!(
                "relay, {rows} rows / {aggregates} aggregates{}: {:.0} rows/s",
                if holdback == Holdback::None {
                    ""
                } else {
                    ", a transaction held open"
                },
                relay.rate
            );
        }
        return;
    }

    let (graphile, node) = graphile_worker(rows).await;
    println!(
        "{:<62} {graphile:>8.0} jobs/s",
        format!("graphile-worker batched, {rows} jobs (node {node})")
    );
    let plain = plain_sql(rows, aggregates).await;
    println!(
        "{:<62} {plain:>8.0} rows/s  {:.2}x graphile-worker",
        format!("plain SQL, pgbench 2 clients, {rows} rows / {aggregates} aggregates"),
        plain / graphile
    );

    let relay = relay_drain(rows, aggregates, Holdback::None).await;
    println!(
        "{:<62} {:>8.0} rows/s  {:.2}x graphile-worker (goal >= 2.0), {:.2}x plain SQL (goal >= 0.7)",
        format!("relay defaults, {rows} rows / {aggregates} aggregates"),
        relay.rate,
        relay.rate / graphile,
        relay.rate / plain
    );
    let large = relay_drain(large_rows, large_aggregates, Holdback::None).await;
    println!(
        "{:<62} {:>8.0} rows/s  {:.2}x the {rows}-row figure (goal >= 0.8); host peak RSS {:.0} MiB",
        format!("relay defaults, {large_rows} rows / {large_aggregates} aggregates"),
        large.rate,
        large.rate / relay.rate,
        large.peak_kib as f64 / 1024.0
    );
    let held = relay_drain(rows, aggregates, Holdback::OpenTransaction).await;
    println!(
        "{:<62} {:>8.0} rows/s  {:.2}x without it (goal >= 0.7); open {:.0} s",
        format!("relay defaults, {rows} rows, a transaction held open"),
        held.rate,
        held.rate / relay.rate,
        held.held_open.as_secs_f64()
    );
    let few = relay_drain(scaled(FEW_AGGREGATES_ROWS), FEW_AGGREGATES, Holdback::None).await;
    println!(
        "{:<62} {:>8.0} rows/s  {:.2}x the {rows}-row figure",
        format!(
            "relay defaults, {} rows / {FEW_AGGREGATES} aggregates",
            scaled(FEW_AGGREGATES_ROWS)
        ),
        few.rate,
        few.rate / relay.rate
    );
    println!(
        "(relay: `outbox-host run` as a child process; peak RSS is its VmHWM, read after the drain)"
    );

    print_latency(scale).await;
}

async fn print_latency(scale: f64) {
    let duration = LATENCY_DURATION.mul_f64(scale).max(Duration::from_secs(2));
    let measured = latency_under_load(duration).await;
    println!(
        "insert-to-publish latency, LISTEN_NOTIFY, {LATENCY_RATE} rows/s asked by {LATENCY_WRITERS} \
         writers, {:.0} achieved ({} rows): p50 {:.2} ms, p99 {:.2} ms (goal p50 <= 5, p99 <= 25)",
        measured.rows_per_second, measured.rows, measured.p50_ms, measured.p99_ms
    );
}

/// Completed jobs/s of graphile-worker on a fresh database of its own, and the node version it ran on.
async fn graphile_worker(jobs: u64) -> (f64, String) {
    let install = Command::new("bash")
        .args(["-c", "source \"$1\" && ensure_graphile_worker", "bash"])
        .arg(SETUP_TOOLCHAINS)
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("bash runs");
    assert!(
        install.status.success(),
        "graphile-worker could not be installed"
    );
    let install = String::from_utf8(install.stdout).expect("a UTF-8 path");
    let db = TestDb::in_a_database_of_its_own().await;
    let run = Command::new("node")
        .arg(GRAPHILE_WORKER)
        .arg(install.trim())
        .arg(&db.url)
        .arg(jobs.to_string())
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("node runs");
    assert!(
        run.status.success(),
        "graphile-worker failed: {}",
        run.status
    );
    let result: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("graphile_worker.mjs prints one JSON line");
    let completed = result["completed"].as_f64().expect("jobs completed");
    let seconds = result["seconds"].as_f64().expect("seconds");
    let node = result["node"].as_str().unwrap_or("?").to_owned();
    db.pool.close().await;
    (completed / seconds, node)
}

/// Published rows/s of pgbench running seed 000's claim-then-mark in plain SQL: each client claims
/// up to 200 rows as the host does (two commits a batch, as the seed's relay makes them), then marks
/// what it owns PUBLISHED. pgbench runs until every row is settled, then is stopped.
async fn plain_sql(rows: u64, aggregates: u64) -> f64 {
    let db = TestDb::new().await;
    drain::fill(&db, rows, Some(aggregates as u32)).await;
    let dir = ScratchDir::new("bench-anchors-pgbench");
    let outbox = db.tables.outbox();
    // host/src/repository/sql.rs's claim with one destination type claimable in full, returning the
    // whole row as the relay needs it.
    let script = format!(
        "WITH candidates AS ( \
           SELECT o.id FROM {outbox} o \
           WHERE o.state = 'PENDING' AND o.available_at <= NOW() \
             AND (o.scheduled_at IS NULL OR o.scheduled_at <= NOW()) \
             AND o.destination_type = 'NOOP' \
             AND (o.aggregate_id IS NULL OR NOT EXISTS ( \
                   SELECT 1 FROM {outbox} h WHERE h.aggregate_id = o.aggregate_id \
                     AND h.state IN ('PENDING', 'PROCESSING') AND h.id < o.id)) \
           ORDER BY o.available_at, o.id LIMIT 200 FOR UPDATE SKIP LOCKED) \
         UPDATE {outbox} AS o SET state = 'PROCESSING', claimed_by = 'pgbench-' || :client_id, \
           claimed_at = NOW(), updated_at = NOW() \
         FROM candidates c WHERE o.id = c.id RETURNING o.*;\n\
         UPDATE {outbox} SET state = 'PUBLISHED', published_at = NOW(), updated_at = NOW() \
         WHERE state = 'PROCESSING' AND claimed_by = 'pgbench-' || :client_id;\n"
    );
    let script = dir.write("claim_then_mark.sql", script.as_bytes());
    let mut pgbench = Command::new("pgbench")
        .args([
            "--no-vacuum",
            "--client=2",
            "--jobs=2",
            "--time=900",
            "--file",
        ])
        .arg(&script)
        .arg(&db.url)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("pgbench runs");
    tokio::select! {
        status = pgbench.wait() => panic!("pgbench ended before every row was published: {status:?}"),
        () = db.wait_until_settled(DRAIN_BOUND) => {}
    }
    pgbench.kill().await.expect("pgbench is stopped");
    let rate = drain::published_rate(&db).await;
    db.pool.close().await;
    rate
}

#[derive(Clone, Copy, PartialEq)]
enum Holdback {
    None,
    /// One transaction of another session, with a transaction id, open from before the host starts
    /// until every row is settled: no row version the relay leaves behind can be vacuumed meanwhile.
    OpenTransaction,
}

struct Drained {
    rate: f64,
    /// The host process's peak resident set over its whole life, read once every row was settled.
    peak_kib: u64,
    /// From just before the host started until every row was settled.
    held_open: Duration,
}

/// Drains `rows` pre-inserted NOOP rows over `aggregates` with the host binary at the shipped
/// defaults, as an operator runs it.
async fn relay_drain(rows: u64, aggregates: u64, holdback: Holdback) -> Drained {
    let db = TestDb::new().await;
    drain::fill(&db, rows, Some(aggregates as u32)).await;
    let (plugins_dir, config_dir) = (
        ScratchDir::new("bench-anchors"),
        ScratchDir::new("bench-anchors-config"),
    );
    plugins_dir.add_plugin("noop", plugins::NOOP);
    let config = config_dir.path().join("outbox.toml");
    binary::write_config(&host::defaults(&db, plugins_dir.path()), &config);
    let opened = Instant::now();
    let holder = match holdback {
        Holdback::None => None,
        Holdback::OpenTransaction => {
            let mut holder = db.pool.begin().await.unwrap();
            sqlx::query("SELECT txid_current()")
                .execute(&mut *holder)
                .await
                .unwrap();
            Some(holder)
        }
    };
    let mut process = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    tokio::select! {
        status = process.child().wait() => panic!("the host exited before every row was published: {status:?}"),
        () = db.wait_until_settled(DRAIN_BOUND) => {}
    }
    let peak_kib = process.peak_resident_kib();
    let held_open = opened.elapsed();
    if let Some(holder) = holder {
        holder.rollback().await.unwrap();
    }
    process.signal("TERM");
    let exit = process.exit_code("SIGTERM", Duration::from_secs(60)).await;
    assert_eq!(exit, Some(0), "the host exits cleanly");
    let rate = drain::published_rate(&db).await;
    db.pool.close().await;
    Drained {
        rate,
        peak_kib,
        held_open,
    }
}

/// Insert-to-publish latency with the host binary at the shipped defaults (LISTEN_NOTIFY), on a
/// database of its own so no other inserts wake it, under a steady load started once it waits idle.
async fn latency_under_load(duration: Duration) -> latency::SteadyLatency {
    let db = TestDb::in_a_database_of_its_own().await;
    let (plugins_dir, config_dir) = (
        ScratchDir::new("bench-anchors-latency"),
        ScratchDir::new("bench-anchors-config"),
    );
    plugins_dir.add_plugin("noop", plugins::NOOP);
    let config = config_dir.path().join("outbox.toml");
    binary::write_config(&host::defaults(&db, plugins_dir.path()), &config);
    let mut process = HostProcess::run(BINARY, &config, "warn", Stdio::null(), Stdio::inherit());
    wait_until(
        "the idle relay holds the doorbell",
        Duration::from_secs(60),
        || async { db.doorbell_requests().await.held > 0 },
    )
    .await;
    let measured = latency::under_steady_load(&db, LATENCY_RATE, LATENCY_WRITERS, duration).await;
    process.signal("TERM");
    process.exit_code("SIGTERM", Duration::from_secs(60)).await;
    db.pool.close().await;
    measured
}
