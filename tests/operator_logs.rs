//! What the real binary writes to its log, read from its stderr as an operator's log collector
//! would: a start-up summary, a line per dead letter and per retry, a periodic warning about rows
//! no plugin claims, plugin lines tagged with their entry, no routine noise at INFO, colours only on
//! a terminal, and never a payload or a header value.

use outbox_host::admin::client;
use outbox_host::config::{Config, LogFormat};
use outbox_tests::db::{self, TestDb};
use outbox_tests::host::{self, wait_until};
use outbox_tests::host_process::LoggedHost;
use outbox_tests::plugins::SCRIPTED;
use outbox_tests::scratch::ScratchDir;
use serde_json::{Value, json};
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
const PAYLOAD_MARKER: &str = "payloadMarker42";
const HEADER_MARKER: &str = "headerMarker42";

struct Setup {
    db: TestDb,
    config: Config,
    config_file: std::path::PathBuf,
    _plugins: ScratchDir,
    _files: ScratchDir,
}

/// A host configuration on a fresh schema with the scripted plugin (type `SCRIPTED`), logging JSON.
async fn setup(label: &str) -> Setup {
    let db = TestDb::new().await;
    let plugins = ScratchDir::new(&format!("{label}-plugins"));
    plugins.add_plugin("scripted", SCRIPTED);
    let files = ScratchDir::new(&format!("{label}-files"));
    let mut config = host::config(&db, plugins.path());
    config.log.format = LogFormat::Json;
    Setup {
        db,
        config,
        config_file: files.path().join("host.toml"),
        _plugins: plugins,
        _files: files,
    }
}

/// The JSON lines whose message is `message`.
fn with_message(host: &LoggedHost, message: &str) -> Vec<Value> {
    host.json_lines()
        .into_iter()
        .filter(|line| line["fields"]["message"] == message)
        .collect()
}

fn scripted(payload: Value) -> outbox_host::api::OutboxEntry {
    outbox_host::api::OutboxEntry::new("test.event", "SCRIPTED", "somewhere", payload)
}

#[tokio::test]
async fn start_up_is_summed_up_in_one_line() {
    let setup = setup("log-summary").await;
    let host = LoggedHost::start(BINARY, &setup.config, &setup.config_file, None).await;
    let summary = with_message(&host, "outbox-host started");
    assert_eq!(summary.len(), 1, "{:#?}", host.lines());
    let fields = &summary[0]["fields"];
    assert_eq!(fields["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(fields["config"], setup.config_file.display().to_string());
    assert_eq!(fields["strategy"], "LISTEN_NOTIFY");
    assert_eq!(fields["schema"], setup.db.schema.to_string());
    assert_eq!(fields["plugins"], "scripted.wasm loaded");
    assert_eq!(host.stop().await, Some(0));
}

/// The routine lines: PostgreSQL's notice when migrations find their table, and lease recovery
/// finding nothing.
const ROUTINE: [&str; 3] = [
    "already exists, skipping",
    "LeaseRecovery",
    "maintenance run finished",
];

/// Starts a host on an already migrated schema with lease recovery every second, at `log` (the
/// configuration's level when `None`), and waits for two recovery runs.
async fn host_after_routine_work(label: &str, log: Option<&str>) -> (Setup, LoggedHost) {
    let mut setup = setup(label).await;
    setup.config.database.migrate = true;
    setup.config.maintenance.stale_lease_recovery_cron = "* * * * * *".parse().unwrap();
    let host = LoggedHost::start(BINARY, &setup.config, &setup.config_file, log).await;
    let runs = "outbox_maintenance_runs_total{job=\"stale_lease_recovery\",result=\"ok\"}";
    wait_until(
        "lease recovery has run twice",
        Duration::from_secs(30),
        || async {
            let page = client::get(&host.admin_url("/metrics")).await.unwrap();
            String::from_utf8_lossy(&page).lines().any(|line| {
                line.starts_with(runs) && !line.ends_with(" 0") && !line.ends_with(" 1")
            })
        },
    )
    .await;
    (setup, host)
}

#[tokio::test]
async fn migrations_on_an_existing_schema_and_idle_lease_recovery_log_nothing_at_info() {
    let (_setup, host) = host_after_routine_work("log-noise", None).await;
    let lines = host.lines();
    for noise in ROUTINE {
        assert!(
            !lines.iter().any(|line| line.contains(noise)),
            "{noise:?} logged at INFO:\n{}",
            lines.join("\n")
        );
    }
    assert_eq!(host.stop().await, Some(0));
}

#[tokio::test]
async fn the_routine_lines_are_still_there_at_debug() {
    let (_setup, host) = host_after_routine_work("log-noise-debug", Some("debug")).await;
    let lines = host.lines();
    for routine in ROUTINE {
        assert!(
            lines.iter().any(|line| line.contains(routine)),
            "{routine:?} not logged at DEBUG"
        );
    }
    assert_eq!(host.stop().await, Some(0));
}

#[tokio::test]
async fn a_log_written_to_a_file_or_pipe_has_no_colours() {
    let mut setup = setup("log-colours").await;
    setup.config.log.format = LogFormat::Human;
    let host = LoggedHost::start(BINARY, &setup.config, &setup.config_file, None).await;
    let lines = host.lines();
    assert!(
        lines
            .iter()
            .any(|line| line.contains("outbox-host started")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains('\u{1b}')),
        "{lines:#?}"
    );
    assert_eq!(host.stop().await, Some(0));
}

#[tokio::test]
async fn dead_letters_warn_retries_debug_and_plugin_lines_carry_their_entry() {
    let setup = setup("log-outcomes").await;
    let db = &setup.db;
    let published = db
        .publish(
            scripted(json!({"outcome": "success", "secret": PAYLOAD_MARKER}))
                .header("trace", HEADER_MARKER),
        )
        .await;
    let rejected = db
        .publish(scripted(
            json!({"outcome": "permanent", "error_type": "bad-request", "secret": PAYLOAD_MARKER}),
        ))
        .await;
    let exhausted = db
        .publish(
            scripted(json!({"outcome": "retryable", "error_type": "busy"}))
                .header("trace", HEADER_MARKER)
                .max_attempts(2),
        )
        .await;
    let mut host = LoggedHost::start(
        BINARY,
        &setup.config,
        &setup.config_file,
        Some("info,outbox_host::relay=debug"),
    )
    .await;
    host.wait_for_line("the second dead letter", |line| {
        line.matches("entry dead-lettered").count() == 1
            && line.contains(&format!("\"entry_id\":{exhausted}"))
    })
    .await;

    let dead = with_message(&host, "entry dead-lettered");
    assert_eq!(dead.len(), 2, "{dead:#?}");
    let first = &dead[0];
    assert_eq!(first["level"], "WARN");
    assert_eq!(first["fields"]["entry_id"], rejected);
    assert_eq!(first["fields"]["destination_type"], "SCRIPTED");
    assert_eq!(first["fields"]["error_type"], "bad-request");
    assert_eq!(first["fields"]["error"], "scripted permanent failure");
    assert_eq!(first["fields"]["attempts"], 1);
    assert_eq!(dead[1]["fields"]["entry_id"], exhausted);
    assert_eq!(dead[1]["fields"]["attempts"], 2);
    assert_eq!(dead[1]["fields"]["error_type"], "busy");

    let retries = with_message(&host, "entry scheduled for another attempt");
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert_eq!(retries[0]["level"], "DEBUG");
    assert_eq!(retries[0]["fields"]["entry_id"], exhausted);
    assert_eq!(retries[0]["fields"]["attempts"], 1);
    assert_eq!(retries[0]["fields"]["error_type"], "busy");
    assert_eq!(retries[0]["fields"]["error"], "scripted retryable failure");

    let plugin_lines: Vec<Value> = host
        .json_lines()
        .into_iter()
        .filter(|line| line["fields"]["plugin"] == "scripted")
        .collect();
    let of_published = plugin_lines
        .iter()
        .find(|line| line["span"]["entry_id"] == published)
        .unwrap_or_else(|| panic!("no plugin line for entry {published}: {plugin_lines:#?}"));
    assert_eq!(
        of_published["fields"]["message"],
        format!("scripted version=none entry_id={published}").as_str()
    );
    assert_eq!(of_published["span"]["attempt"], 0);
    let attempts: Vec<&Value> = plugin_lines
        .iter()
        .filter(|line| line["span"]["entry_id"] == exhausted)
        .map(|line| &line["span"]["attempt"])
        .collect();
    assert_eq!(attempts, [&json!(0), &json!(1)]);

    let metrics = client::get(&host.admin_url("/metrics")).await.unwrap();
    let metrics = String::from_utf8_lossy(&metrics);
    for counted in [
        "outbox_dead_lettered_total{destination_type=\"SCRIPTED\",error_type=\"bad-request\"} 1",
        "outbox_dead_lettered_total{destination_type=\"SCRIPTED\",error_type=\"busy\"} 1",
        "outbox_retried_total{destination_type=\"SCRIPTED\",error_type=\"busy\"} 1",
    ] {
        assert!(
            metrics.lines().any(|line| line == counted),
            "{counted}\n{metrics}"
        );
    }
    let lines = host.lines();
    for marker in [PAYLOAD_MARKER, HEADER_MARKER] {
        assert!(
            !lines.iter().any(|line| line.contains(marker)),
            "{marker} logged:\n{}",
            lines.join("\n")
        );
    }
    assert_eq!(host.stop().await, Some(0));
}

#[tokio::test]
async fn pending_rows_no_loaded_plugin_claims_are_warned_about_by_type_and_count() {
    let setup = setup("log-unclaimed").await;
    let db = &setup.db;
    for _ in 0..3 {
        db.publish(db::entry("NOBODY", "somewhere")).await;
    }
    db.execute(
        "INSERT INTO {outbox} (carrier_id, event_type, destination, destination_type, payload) \
         VALUES (gen_random_uuid(), 'e', 'd', 'bad type!', '{}')",
    )
    .await;
    let mut host = LoggedHost::start(BINARY, &setup.config, &setup.config_file, None).await;
    let line = host
        .wait_for_line("the unclaimed type", |line| line.contains("NOBODY"))
        .await;
    let line: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["level"], "WARN");
    assert_eq!(
        line["fields"]["message"],
        "PENDING rows of a destination type that no loaded plugin claims"
    );
    assert_eq!(line["fields"]["destination_type"], "NOBODY");
    assert_eq!(line["fields"]["rows"], 3);
    let lines = host.lines();
    assert!(
        !lines.iter().any(|line| line.contains("bad type")),
        "a row's malformed type was logged:\n{}",
        lines.join("\n")
    );
    assert!(
        !lines
            .iter()
            .any(|line| line.contains("SCRIPTED") && line.contains("no loaded plugin")),
        "{lines:#?}"
    );
    assert_eq!(host.stop().await, Some(0));
}

#[tokio::test]
async fn a_log_written_to_a_terminal_is_coloured() {
    let setup = setup("log-terminal").await;
    let mut config = Config::default();
    config.database.url = Some(db::url());
    config.database.schema = Some(setup.db.schema.clone());
    std::fs::write(&setup.config_file, toml::to_string(&config).unwrap()).unwrap();
    // `script` runs the command on a pseudo-terminal and copies what it writes to stdout.
    let command = format!("{BINARY} migrate --config {}", setup.config_file.display());
    let output = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("script runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("migrations applied"), "{text}");
    assert!(
        text.contains("\u{1b}["),
        "no colours on a terminal:\n{text}"
    );
}
