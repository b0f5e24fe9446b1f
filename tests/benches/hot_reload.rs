//! Hot reload on this machine, with a real host on real PostgreSQL and plugins built from source:
//! - latency: from renaming a plugin file into the plugins directory to the first claim of a row
//!   that waited for its type (p50 over 20 runs; goal: at most 1 s), once with bytes the host has
//!   compiled before (the compiled-component cache answers) and once with new bytes;
//! - throughput: NOOP rows/s end to end over a 10 s window of a large backlog, steady and while the
//!   NOOP plugin itself is reloaded every 2 s (a new manifest each time, so a new plugin object with
//!   cold instances), as a ratio measured in the same run (goal: at least 0.9).
//!
//! Run: `cargo bench -p outbox-tests --bench hot_reload`

use chrono::{DateTime, Utc};
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::{Duration, SystemTime};

const LATENCY_RUNS: usize = 20;
const BACKLOG: u64 = 150_000;
const WINDOW: Duration = Duration::from_secs(10);
const RELOAD_EVERY: Duration = Duration::from_secs(2);
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() {
    println!("rename to first claim, {LATENCY_RUNS} runs each");
    println!(
        "{:<28} {:>8} {:>8} {:>8}",
        "plugin bytes", "p50 ms", "min ms", "max ms"
    );
    for fresh_bytes in [false, true] {
        let mut samples = rename_to_first_claim(fresh_bytes).await;
        samples.sort();
        let label = if fresh_bytes {
            "new (compiled on load)"
        } else {
            "seen before (cache)"
        };
        let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
        let (p50, min, max) = (
            samples[samples.len() / 2],
            samples[0],
            samples[samples.len() - 1],
        );
        println!(
            "{label:<28} {:>8.0} {:>8.0} {:>8.0}",
            ms(p50),
            ms(min),
            ms(max)
        );
    }
    println!("goal: p50 <= 1000 ms");
    println!();

    println!(
        "NOOP rows/s end to end over {} s of a {BACKLOG}-row backlog",
        WINDOW.as_secs()
    );
    println!(
        "{:<8} {:>10} {:>12} {:>8} {:>8}",
        "round", "steady", "reloading", "reloads", "ratio"
    );
    let (mut steady_total, mut reloading_total) = (0.0, 0.0);
    for round in 1..=ROUNDS {
        let (steady, _) = throughput(false).await;
        let (reloading, reloads) = throughput(true).await;
        steady_total += steady;
        reloading_total += reloading;
        println!(
            "{round:<8} {steady:>10.0} {reloading:>12.0} {reloads:>8} {:>8.2}",
            reloading / steady
        );
    }
    println!(
        "all rounds: ratio {:.2} (goal: >= 0.9)",
        reloading_total / steady_total
    );
}

/// The scripted plugin's manifest serving `destination_type`.
fn scripted_manifest(destination_type: &str) -> String {
    format!("[config]\ndestination_type = \"{destination_type}\"\n")
}

/// `component` with a custom section naming `tag` appended: other bytes, the same behaviour, so the
/// host has to compile it.
fn retagged(component: &[u8], tag: &str) -> Vec<u8> {
    let name = b"outbox-bench";
    let content_len = 1 + name.len() + tag.len();
    assert!(content_len < 128, "one-byte LEB128 lengths");
    let mut bytes = component.to_vec();
    bytes.extend([0, content_len as u8, name.len() as u8]);
    bytes.extend(name);
    bytes.extend(tag.as_bytes());
    bytes
}

/// For each run, a row waits for a type no plugin serves; the plugin for it is written under a
/// hidden name and renamed into place; the time is from the rename to the row's `claimed_at`.
async fn rename_to_first_claim(fresh_bytes: bool) -> Vec<Duration> {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("bench-reload-latency");
    let types: Vec<String> = (0..LATENCY_RUNS).map(|run| format!("LATE{run}")).collect();
    for (run, destination_type) in types.iter().enumerate() {
        dir.add_manifest(&format!("late{run}"), &scripted_manifest(destination_type));
    }
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let component = std::fs::read(plugins::SCRIPTED).expect("the scripted plugin is built");
    if !fresh_bytes {
        // Compile it once, so that every run finds it in the cache.
        dir.deploy("warm.wasm", &component);
        host.wait_for_plugins(
            "the warm-up plugin is loaded",
            Duration::from_secs(60),
            |set| set.handler("SCRIPTED").is_some(),
        )
        .await;
    }
    let mut samples = Vec::with_capacity(LATENCY_RUNS);
    for (run, destination_type) in types.iter().enumerate() {
        let id = db.publish(entry(destination_type, "somewhere")).await;
        let bytes = if fresh_bytes {
            retagged(&component, &format!("run-{run}"))
        } else {
            component.clone()
        };
        let hidden = dir.write(&format!(".late{run}.wasm.tmp"), &bytes);
        let renamed_at = DateTime::<Utc>::from(SystemTime::now());
        std::fs::rename(hidden, dir.path().join(format!("late{run}.wasm")))
            .expect("a rename within the directory");
        let claimed_at = first_claim(&db, id).await;
        samples.push((claimed_at - renamed_at).to_std().unwrap_or_default());
    }
    host.stop().await;
    samples
}

async fn first_claim(db: &TestDb, id: i64) -> DateTime<Utc> {
    let query = format!("SELECT claimed_at FROM {{outbox}} WHERE id = {id}");
    loop {
        if let Some(claimed_at) = db.scalar::<Option<DateTime<Utc>>>(&query).await {
            return claimed_at;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// NOOP rows/s over [`WINDOW`] while the host drains a backlog, and how many reloads happened in it.
async fn throughput(reloading: bool) -> (f64, u32) {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("bench-reload-throughput");
    dir.add_plugin("noop", plugins::NOOP);
    dir.add_manifest("noop", "[config]\ngeneration = \"0\"\n");
    db.execute(&format!(
        "INSERT INTO {{outbox}} (carrier_id, event_type, destination_type, destination, payload) \
         SELECT gen_random_uuid(), 'bench', 'NOOP', 'x', '{{\"n\": 1}}' FROM generate_series(1, {BACKLOG})"
    ))
    .await;
    db.execute("VACUUM ANALYZE {outbox}").await;
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    wait_until(
        "the relay is under way",
        Duration::from_secs(60),
        || async { published(&db).await >= 1_000 },
    )
    .await;

    let start = published(&db).await;
    let window = tokio::time::sleep(WINDOW);
    tokio::pin!(window);
    let mut reload =
        tokio::time::interval_at(tokio::time::Instant::now() + RELOAD_EVERY / 2, RELOAD_EVERY);
    let mut reloads = 0;
    loop {
        tokio::select! {
            _ = &mut window => break,
            _ = reload.tick(), if reloading => {
                reloads += 1;
                dir.deploy("noop.toml", format!("[config]\ngeneration = \"{reloads}\"\n").as_bytes());
            }
        }
    }
    let end = published(&db).await;
    assert!(
        end < BACKLOG as i64,
        "the backlog ran out inside the window; make it larger"
    );
    host.stop().await;
    ((end - start) as f64 / WINDOW.as_secs_f64(), reloads)
}

async fn published(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM {outbox} WHERE state = 'PUBLISHED'")
        .await
}
