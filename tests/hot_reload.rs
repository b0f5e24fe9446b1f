//! Hot reload (DESIGN §6) against a running host on real PostgreSQL: plugin files are added,
//! replaced, broken and removed while the host runs, and it behaves as a restart with the same
//! directory would.

use outbox_host::api::OutboxEntry;
use outbox_host::plugins::{PluginSet, PluginState};
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::http_stub::StubServer;
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Long enough for a reload on a busy machine; a reload normally takes a few hundred milliseconds.
const RELOAD: Duration = Duration::from_secs(10);
const DELIVERY: Duration = Duration::from_secs(10);

/// A manifest for the scripted plugin: it serves `destination_type` and logs `version` on each
/// publish.
fn scripted(destination_type: &str, version: &str) -> String {
    format!("[config]\ndestination_type = \"{destination_type}\"\nversion = \"{version}\"\n")
}

/// The scripted plugin as `<stem>.wasm` serving `destination_type`.
fn add_scripted(dir: &ScratchDir, stem: &str, destination_type: &str) {
    dir.add_manifest(stem, &scripted(destination_type, "v1"));
    dir.add_plugin(stem, plugins::SCRIPTED);
}

async fn publish_rows(db: &TestDb, destination_type: &str, rows: usize) {
    for _ in 0..rows {
        db.publish(entry(destination_type, "somewhere")).await;
    }
}

async fn count(db: &TestDb, destination_type: &str, condition: &str) -> i64 {
    db.scalar(&format!(
        "SELECT count(*) FROM {{outbox}} WHERE destination_type = '{destination_type}' AND ({condition})"
    ))
    .await
}

async fn published(db: &TestDb, destination_type: &str) -> i64 {
    count(db, destination_type, "state = 'PUBLISHED'").await
}

/// Rows that wait as PENDING and no relay ever claimed.
async fn never_claimed(db: &TestDb, destination_type: &str) -> i64 {
    count(
        db,
        destination_type,
        "state = 'PENDING' AND claimed_at IS NULL",
    )
    .await
}

fn state_of(set: &PluginSet, file: &Path) -> Option<PluginState> {
    set.statuses()
        .find(|status| status.file == file)
        .map(|status| status.state)
}

/// A host serving NOOP (`noop.wasm`) and OTHER (the scripted plugin as `other.wasm`).
async fn noop_and_other(db: &TestDb, dir: &ScratchDir) -> TestHost {
    dir.add_plugin("noop", plugins::NOOP);
    add_scripted(dir, "other", "OTHER");
    TestHost::start(&host::config(db, dir.path())).await
}

/// Removes `noop.wasm` and waits until the relay claims with the set that has dropped NOOP: an OTHER
/// row published after the swap has been claimed and then recorded, so the turn that recorded it,
/// and every turn after, started after the swap.
async fn remove_noop(host: &TestHost, dir: &ScratchDir, db: &TestDb) {
    dir.remove("noop.wasm");
    host.wait_for_plugins("NOOP has no handler", RELOAD, |set| {
        set.handler("NOOP").is_none()
    })
    .await;
    let before = published(db, "OTHER").await;
    publish_rows(db, "OTHER", 1).await;
    wait_until(
        "the relay has turned with the new set",
        DELIVERY,
        || async { published(db, "OTHER").await == before + 1 },
    )
    .await;
}

/// OTHER rows published at once, while the `waiting` NOOP rows published before them stay
/// unclaimed: a relay turn that claimed the OTHER rows did not claim NOOP.
async fn assert_noop_waits_while_other_goes_on(db: &TestDb, waiting: i64) {
    let before = published(db, "OTHER").await;
    publish_rows(db, "OTHER", 5).await;
    wait_until("the OTHER rows are published", DELIVERY, || async {
        published(db, "OTHER").await == before + 5
    })
    .await;
    assert_eq!(never_claimed(db, "NOOP").await, waiting);
}

#[tokio::test]
async fn removing_a_plugin_leaves_its_rows_pending_while_other_types_go_on() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-remove");
    let host = noop_and_other(&db, &dir).await;
    remove_noop(&host, &dir, &db).await;

    publish_rows(&db, "NOOP", 5).await;
    assert_noop_waits_while_other_goes_on(&db, 5).await;
    host.stop().await;
}

#[tokio::test]
async fn adding_a_removed_plugin_back_delivers_its_waiting_rows_within_two_seconds() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-add-back");
    let host = noop_and_other(&db, &dir).await;
    remove_noop(&host, &dir, &db).await;
    publish_rows(&db, "NOOP", 5).await;
    assert_noop_waits_while_other_goes_on(&db, 5).await;

    dir.deploy_plugin("noop", plugins::NOOP);
    wait_until(
        "the waiting NOOP rows are published",
        Duration::from_secs(2),
        || async { published(&db, "NOOP").await == 5 },
    )
    .await;
    host.stop().await;
}

#[tokio::test]
async fn replacing_v1_by_v2_under_load_delivers_every_row_exactly_once() {
    let db = Arc::new(TestDb::new().await);
    let dir = ScratchDir::new("reload-replace");
    dir.add_manifest("swap", &scripted("SWAP", "v1"));
    dir.add_plugin("swap", plugins::SCRIPTED);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let v1 = host
        .service
        .plugins()
        .borrow()
        .handler("SWAP")
        .expect("v1 is loaded");

    // One row every 5 ms until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (db, stop) = (db.clone(), stop.clone());
        async move {
            let mut inserted = 0;
            while !stop.load(Ordering::SeqCst) {
                db.publish(entry("SWAP", "somewhere")).await;
                inserted += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            inserted
        }
    });
    wait_until("v1 has published some rows", DELIVERY, || async {
        published(&db, "SWAP").await >= 20
    })
    .await;
    dir.deploy("swap.toml", scripted("SWAP", "v2").as_bytes());
    host.wait_for_plugins("v2 is in use", RELOAD, |set| {
        set.handler("SWAP")
            .is_some_and(|handler| !Arc::ptr_eq(&handler, &v1))
    })
    .await;
    let after_swap = db.scalar::<i64>("SELECT count(*) FROM {outbox}").await;
    wait_until(
        "rows inserted after the swap are published",
        DELIVERY,
        || async { published(&db, "SWAP").await >= after_swap + 20 },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let inserted: i64 = load.await.expect("the load task ends");
    wait_until("every row is published", DELIVERY, || async {
        published(&db, "SWAP").await == inserted
    })
    .await;

    let versions: Vec<String> = log_capture::lines_of("swap")
        .into_iter()
        .filter_map(|line| {
            line.split_whitespace()
                .find(|word| word.starts_with("version="))
                .map(str::to_owned)
        })
        .collect();
    let by_v1 = versions
        .iter()
        .filter(|version| *version == "version=v1")
        .count() as i64;
    let by_v2 = versions
        .iter()
        .filter(|version| *version == "version=v2")
        .count() as i64;
    assert!(
        by_v1 > 0 && by_v2 > 0,
        "v1 published {by_v1} rows, v2 {by_v2}"
    );
    assert_eq!(
        by_v1 + by_v2,
        inserted,
        "each of the {inserted} rows is published exactly once"
    );
    assert_eq!(
        count(&db, "SWAP", "state = 'DEAD_LETTER' OR attempt > 0").await,
        0
    );
    host.stop().await;
}

/// The `version=` each publish of the scripted plugin `stem` logged, with its entry id, in the
/// order the calls started.
fn versions_by_entry(stem: &str) -> Vec<(i64, String)> {
    log_capture::lines_of(stem)
        .iter()
        .filter_map(|line| {
            let entry = line.split("entry_id=").nth(1)?;
            let id = entry
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()?;
            let version = line.split("version=").nth(1)?.split_whitespace().next()?;
            Some((id, version.trim_matches('"').to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn a_call_in_flight_at_a_swap_finishes_on_the_old_version_and_no_old_call_starts_after() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-in-flight");
    dir.add_manifest("in_flight", &scripted("SWAP", "v1"));
    dir.add_plugin("in_flight", plugins::SCRIPTED);
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let v1 = host
        .service
        .plugins()
        .borrow()
        .handler("SWAP")
        .expect("v1 is loaded");
    let slow = db
        .publish(OutboxEntry::new(
            "test.event",
            "SWAP",
            "somewhere",
            serde_json::json!({"delay_ms": 3000}),
        ))
        .await;
    wait_until("the slow call has started", DELIVERY, || async {
        versions_by_entry("in_flight")
            .iter()
            .any(|(id, _)| *id == slow)
    })
    .await;
    dir.deploy("in_flight.toml", scripted("SWAP", "v2").as_bytes());
    host.wait_for_plugins("v2 is in use", RELOAD, |set| {
        set.handler("SWAP")
            .is_some_and(|handler| !Arc::ptr_eq(&handler, &v1))
    })
    .await;
    assert_ne!(
        db.state_of(slow).await,
        "PUBLISHED",
        "the swap happened while the slow call was in flight"
    );
    let mut after = Vec::new();
    for _ in 0..10 {
        after.push(db.publish(entry("SWAP", "somewhere")).await);
    }
    wait_until("every row is published", DELIVERY, || async {
        published(&db, "SWAP").await == 11
    })
    .await;

    // Rows without an aggregate may be called concurrently, so their calls start in any order.
    let mut calls = versions_by_entry("in_flight");
    calls.sort();
    assert_eq!(
        calls,
        std::iter::once((slow, "v1".to_owned()))
            .chain(after.iter().map(|id| (*id, "v2".to_owned())))
            .collect::<Vec<_>>(),
        "one call per entry: the slow one on v1, every later one on v2"
    );
    let attempt: i32 = db
        .scalar(&format!("SELECT attempt FROM {{outbox}} WHERE id = {slow}"))
        .await;
    assert_eq!(
        (db.state_of(slow).await.as_str(), attempt),
        ("PUBLISHED", 0),
        "the old version's outcome is recorded"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_corrupt_file_fails_its_type_closed_while_other_types_go_on() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-corrupt");
    let host = noop_and_other(&db, &dir).await;
    let noop = dir.deploy("noop.wasm", b"\0asm but not a component");
    host.wait_for_plugins("noop.wasm has failed", RELOAD, |set| {
        state_of(set, &noop) == Some(PluginState::Failed)
    })
    .await;
    assert!(host.service.plugins().borrow().handler("NOOP").is_none());

    publish_rows(&db, "NOOP", 5).await;
    assert_noop_waits_while_other_goes_on(&db, 5).await;
    assert_eq!(host.metric("outbox_plugins{state=\"failed\"}").await, 1.0);
    assert!(host.metric("outbox_plugin_reload_failures_total").await >= 1.0);
    host.stop().await;
}

#[tokio::test]
async fn fixing_a_corrupt_file_resumes_its_type() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-fix");
    dir.write("noop.wasm", b"\0asm but not a component");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    publish_rows(&db, "NOOP", 5).await;

    dir.deploy_plugin("noop", plugins::NOOP);
    wait_until("the NOOP rows are published", DELIVERY, || async {
        published(&db, "NOOP").await == 5
    })
    .await;
    assert_eq!(host.metric("outbox_plugins{state=\"failed\"}").await, 0.0);
    assert!(host.metric("outbox_plugin_reloads_total").await >= 1.0);
    host.stop().await;
}

#[tokio::test]
async fn two_files_declaring_one_type_disable_it_until_resolved() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-conflict");
    add_scripted(&dir, "first", "DUP");
    add_scripted(&dir, "other", "OTHER");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    assert!(host.service.plugins().borrow().handler("DUP").is_some());

    dir.add_manifest("second", &scripted("DUP", "v1"));
    let second = dir.deploy_plugin("second", plugins::SCRIPTED);
    let first = dir.path().join("first.wasm");
    host.wait_for_plugins("both files conflict", RELOAD, |set| {
        state_of(set, &first) == Some(PluginState::Conflicting)
            && state_of(set, &second) == Some(PluginState::Conflicting)
    })
    .await;
    assert!(host.service.plugins().borrow().handler("DUP").is_none());

    publish_rows(&db, "DUP", 5).await;
    publish_rows(&db, "OTHER", 5).await;
    wait_until("the OTHER rows are published", DELIVERY, || async {
        published(&db, "OTHER").await == 5
    })
    .await;
    assert_eq!(never_claimed(&db, "DUP").await, 5);
    host.stop().await;
}

#[tokio::test]
async fn resolving_a_conflict_resumes_the_type() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-resolve");
    add_scripted(&dir, "kept", "DUP");
    add_scripted(&dir, "dropped", "DUP");
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    assert!(
        host.service.plugins().borrow().handler("DUP").is_none(),
        "two files declare DUP"
    );
    publish_rows(&db, "DUP", 5).await;

    dir.remove("dropped.wasm");
    wait_until("the DUP rows are published", DELIVERY, || async {
        published(&db, "DUP").await == 5
    })
    .await;
    assert_eq!(
        log_capture::lines_of("kept").len(),
        5,
        "kept.wasm published them"
    );
    host.stop().await;
}

#[tokio::test]
async fn removing_a_host_from_allowed_hosts_denies_the_next_call_to_it() {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let dir = ScratchDir::new("reload-narrow");
    dir.add_plugin("webhook", plugins::WEBHOOK);
    dir.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", stub.origin()),
    );
    let host = TestHost::start(&host::config(&db, dir.path())).await;
    let allowed = db.publish(entry("WEBHOOK", &stub.url("/allowed"))).await;
    wait_until("the first row is published", DELIVERY, || async {
        db.state_of(allowed).await == "PUBLISHED"
    })
    .await;
    let connections = stub.connections();
    let wide = host
        .service
        .plugins()
        .borrow()
        .handler("WEBHOOK")
        .expect("the webhook is loaded");

    dir.deploy("webhook.toml", b"[http]\nallowed_hosts = []\n");
    host.wait_for_plugins("the narrowed manifest is in use", RELOAD, |set| {
        set.handler("WEBHOOK")
            .is_some_and(|handler| !Arc::ptr_eq(&handler, &wide))
    })
    .await;
    let denied = db.publish(entry("WEBHOOK", &stub.url("/denied"))).await;
    wait_until("the second row is dead-lettered", DELIVERY, || async {
        db.state_of(denied).await == "DEAD_LETTER"
    })
    .await;

    let error_type: String = db
        .scalar(&format!(
            "SELECT error_type FROM {{outbox}} WHERE id = {denied}"
        ))
        .await;
    assert_eq!(error_type, "denied");
    assert_eq!(
        stub.connections(),
        connections,
        "the denied call never reached the server"
    );
    host.stop().await;
}

#[tokio::test]
async fn a_half_written_plugin_file_is_never_loaded() {
    const PIECES: usize = 20;
    const PAUSE: Duration = Duration::from_millis(30);
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-half-written");
    dir.add_manifest("late", &scripted("LATE", "v1"));
    let mut config = host::config(&db, dir.path());
    // Ten times the pause between pieces: a slow scheduler must not make a pause look like the end.
    config.plugins.settle = Duration::from_millis(300);
    let host = TestHost::start(&config).await;
    publish_rows(&db, "LATE", 3).await;
    let late = dir.path().join("late.wasm");
    let states_seen = tokio::spawn({
        let (mut plugins, late) = (host.service.plugins(), late.clone());
        async move {
            let mut states = Vec::new();
            while plugins.changed().await.is_ok() {
                let state = state_of(&plugins.borrow_and_update(), &late);
                states.extend(state);
                if state == Some(PluginState::Loaded) {
                    break;
                }
            }
            states
        }
    });

    let component = std::fs::read(plugins::SCRIPTED).unwrap();
    let mut file = std::fs::File::create(&late).unwrap();
    for (index, piece) in component
        .chunks(component.len().div_ceil(PIECES))
        .enumerate()
    {
        if index > 0 {
            tokio::time::sleep(PAUSE).await;
            assert!(
                host.service.plugins().borrow().handler("LATE").is_none(),
                "loaded after {index} pieces"
            );
            assert_eq!(never_claimed(&db, "LATE").await, 3);
        }
        file.write_all(piece).unwrap();
    }
    drop(file);

    wait_until("the LATE rows are published", DELIVERY, || async {
        published(&db, "LATE").await == 3
    })
    .await;
    assert_eq!(
        states_seen.await.unwrap(),
        [PluginState::Loaded],
        "late.wasm was never in another state"
    );
    assert_eq!(
        host.metric("outbox_plugin_reload_failures_total").await,
        0.0
    );
    host.stop().await;
}

#[tokio::test]
async fn a_hidden_file_is_never_loaded() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-hidden");
    let host = TestHost::start(&host::config(&db, dir.path())).await;

    dir.write(".noop.wasm", &std::fs::read(plugins::NOOP).unwrap());
    // A reload that starts after the hidden file is complete, and that the test can see.
    dir.add_manifest("marker", &scripted("MARKER", "v1"));
    dir.deploy_plugin("marker", plugins::SCRIPTED);
    host.wait_for_plugins("marker.wasm is loaded", RELOAD, |set| {
        set.handler("MARKER").is_some()
    })
    .await;

    let set = host.service.plugins().borrow().clone();
    let files: Vec<_> = set.statuses().map(|status| status.file.clone()).collect();
    assert_eq!(files, [dir.path().join("marker.wasm")]);
    assert!(set.handler("NOOP").is_none());
    host.stop().await;
}

#[tokio::test]
async fn the_periodic_rescan_finds_a_change_no_event_reported() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("reload-rescan");
    let mut config = host::config(&db, dir.path());
    // Filesystem events would wake the watcher only after an hour: only the re-scan can notice.
    config.plugins.watch_debounce = Duration::from_millis(3_600_000);
    config.plugins.rescan_interval = Duration::from_millis(200);
    let host = TestHost::start(&config).await;
    publish_rows(&db, "NOOP", 5).await;

    dir.deploy_plugin("noop", plugins::NOOP);
    wait_until("the NOOP rows are published", DELIVERY, || async {
        published(&db, "NOOP").await == 5
    })
    .await;
    host.stop().await;
}
