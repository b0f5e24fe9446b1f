//! Secrets never come back out: a marker planted in every place an operator may put one (credentials
//! in an allow-list entry, an oversized integer in a plugin's `[config]`, a password in the database
//! URL's user info or query, Kafka credentials, the admin token, a bad configuration value) appears
//! in no error,
//! status page, listing, log line or printed configuration.

use clap::Parser;
use outbox_host::admin::client::AdminRequest;
use outbox_host::api::OutboxEntry;
use outbox_host::cli::{self, Cli};
use outbox_host::config::AdminToken;
use outbox_host::config::LogFormat;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::host_process::LoggedHost;
use outbox_tests::http_stub::StubServer;
use outbox_tests::log_capture;
use outbox_tests::plugins::{HOSTILE, NOOP, SCRIPTED, WEBHOOK};
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_outbox-host-under-test");
use outbox_tests::scratch::ScratchDir;

const MARKER: &str = "s3cr3tMarker";
/// A `[config]` value too large for TOML's integers: the parser's message used to quote it.
const NUMERIC_MARKER: &str = "98765432109876543210";

/// Runs `outbox-host <args>` in this process: exit code and everything it wrote to stdout and
/// stderr.
async fn run_cli(args: &[&str]) -> (u8, String) {
    let cli = Cli::parse_from(std::iter::once("outbox-host").chain(args.iter().copied()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = cli::run(cli, &mut out, &mut err).await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    (code, text)
}

fn assert_no_marker(place: &str, text: &str) {
    for marker in [MARKER, NUMERIC_MARKER] {
        assert!(!text.contains(marker), "{place} shows a secret:\n{text}");
    }
}

#[tokio::test]
async fn a_planted_secret_appears_in_no_error_status_listing_log_or_printed_configuration() {
    log_capture::install();
    let plugins = ScratchDir::new("secrets-plugins");
    plugins.add_plugin("hostile", HOSTILE);
    plugins.add_manifest(
        "hostile",
        &format!("[http]\nallowed_hosts = [\"https://svc:{MARKER}@hooks.example.com\"]\n"),
    );
    plugins.add_plugin("noop", NOOP);
    plugins.add_manifest("noop", &format!("[config]\ntoken = {NUMERIC_MARKER}\n"));

    let db = TestDb::new().await;
    let admin_token = format!("{MARKER}-admin-token");
    let mut host_config = host::config(&db, plugins.path());
    host_config.admin.token = Some(AdminToken::new(&admin_token));
    let host = TestHost::start(&host_config).await;
    let page = AdminRequest::get(host.admin_url("/plugins"))
        .token(Some(AdminToken::new(&admin_token)))
        .ok()
        .await
        .unwrap();
    let page = String::from_utf8_lossy(&page).into_owned();
    assert!(page.contains("http.allowed_hosts[0]"), "{page}");
    assert_no_marker("/plugins", &page);
    let (_, refused) = run_cli(&["plugin", "list", "--admin", &host.admin_url("")]).await;
    assert_no_marker("plugin list without the token", &refused);
    let admin_config = ScratchDir::new("secrets-admin");
    let with_token = admin_config.write(
        "host.conf",
        format!(
            "[admin]\nlisten = \"{}\"\ntoken = \"{admin_token}\"\n",
            host.service.admin_addr()
        )
        .as_bytes(),
    );
    let (code, listing) =
        run_cli(&["plugin", "list", "--config", with_token.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{listing}");
    assert_no_marker("plugin list", &listing);
    host.stop().await;

    for stem in ["hostile", "noop"] {
        let wasm = plugins.path().join(format!("{stem}.wasm"));
        let (code, output) = run_cli(&["plugin", "inspect", wasm.to_str().unwrap()]).await;
        assert_eq!(code, 2, "{output}");
        assert_no_marker("plugin inspect", &output);
    }

    let config = ScratchDir::new("secrets-config");
    let good = config.write(
        "good.toml",
        format!(
            "[database]\nurl = \"postgres://app:{MARKER}@db:5432/x?sslmode=disable&password={MARKER}\"\n\
             [kafka]\nbootstrap_servers = \"sasl_ssl://svc:{MARKER}@broker:9093?Password={MARKER}\"\n\
             [admin]\ntoken = \"{MARKER}-admin-token\"\n"
        )
        .as_bytes(),
    );
    let (code, printed) = run_cli(&["config", "print", "--config", good.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{printed}");
    assert!(
        printed.contains("postgres://app:****@db:5432/x"),
        "{printed}"
    );
    assert_no_marker("config print", &printed);
    for (name, text) in [
        (
            "strategy.toml",
            format!("[relay]\nstrategy = \"{MARKER}\"\n"),
        ),
        (
            "batch.toml",
            format!("[relay]\nbatch_size = {NUMERIC_MARKER}\n"),
        ),
        (
            "url.toml",
            format!("[database]\nurl = \"postgres://app:{MARKER}@db:notaport/x\"\n"),
        ),
        (
            "admin_token.toml",
            format!("[admin]\ntoken = \"{MARKER} spaced\"\n"),
        ),
        (
            "parameter.toml",
            format!("[database]\nurl = \"postgres://app@db/x?Password={MARKER}\"\n"),
        ),
    ] {
        let bad = config.write(name, text.as_bytes());
        let (code, error) = run_cli(&["config", "print", "--config", bad.to_str().unwrap()]).await;
        assert_eq!(code, 2, "{error}");
        assert_no_marker(name, &error);
    }

    for marker in [MARKER, NUMERIC_MARKER] {
        assert_eq!(log_capture::lines_with(marker), Vec::<String>::new());
    }
}

/// What a row carries is the application's: a marker in payloads, header values, destinations
/// (claim-scope targets) and a claim scope's own targets goes through every publish failure path
/// (retry, dead letter, trap, timeout, memory, a failing claim scope) of the real binary logging at
/// its most verbose, and appears in no log line, metric, admin response or `dlq list` output.
#[tokio::test]
async fn a_marker_in_rows_and_claim_scopes_appears_in_no_log_metric_or_admin_response_on_any_failure_path()
 {
    let receiver = StubServer::start(500).await;
    let plugins = ScratchDir::new("secrets-rows");
    plugins.add_plugin("webhook", WEBHOOK);
    plugins.add_manifest(
        "webhook",
        &format!("[http]\nallowed_hosts = [\"{}\"]\n", receiver.origin()),
    );
    plugins.add_plugin("hostile", HOSTILE);
    plugins.add_manifest("hostile", "[limits]\ntimeout_ms = 500\nmemory_mb = 32\n");
    plugins.add_plugin("scoped", SCRIPTED);
    plugins.add_manifest(
        "scoped",
        &format!(
            "[config]\ndestination_type = \"SCOPED\"\nclaim_scope = \"ok,{MARKER}\\u0000target\"\n"
        ),
    );
    let db = TestDb::new().await;
    let mut config = host::config(&db, plugins.path());
    config.log.format = LogFormat::Json;
    let logged = LoggedHost::start(
        BINARY,
        &config,
        &plugins.path().join("host.conf"),
        Some("debug,outbox_host=trace"),
    )
    .await;

    let carrying = |destination_type: &str, destination: String| {
        OutboxEntry::new(
            "secret.event",
            destination_type,
            destination,
            serde_json::json!({"card": MARKER}),
        )
        .header("authorization", format!("Bearer {MARKER}"))
        .aggregate("Order", format!("order-{MARKER}"))
        .max_attempts(2)
    };
    db.publish(carrying(
        "WEBHOOK",
        receiver.url(&format!("/hook?token={MARKER}")),
    ))
    .await;
    for destination in ["trap", "loop", "alloc"] {
        db.publish(carrying("HOSTILE", destination.to_owned()))
            .await;
    }
    db.publish(carrying("SCOPED", "ok".to_owned())).await;
    wait_until(
        "every deliverable row is dead-lettered",
        Duration::from_secs(60),
        || async { db.count("DEAD_LETTER").await == 4 },
    )
    .await;

    let admin = |path: &str| logged.admin_url(path);
    for path in ["/metrics", "/plugins", "/dlq", "/healthz", "/readyz"] {
        let body = outbox_host::admin::client::get(&admin(path)).await;
        let text = match body {
            Ok(body) => String::from_utf8_lossy(&body).into_owned(),
            Err(error) => error.to_string(),
        };
        assert_no_marker(path, &text);
    }
    let host_conf = plugins.path().join("host.conf");
    let (code, listed) = run_cli(&["dlq", "list", "--config", host_conf.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{listed}");
    assert_no_marker("dlq list", &listed);
    let lines = logged.lines();
    assert!(
        lines.iter().any(|line| line.contains("claim scope")),
        "the failing claim scope is logged"
    );
    assert!(
        lines.iter().any(|line| line.contains("dead")),
        "dead letters are logged"
    );
    assert_no_marker("the host's log", &lines.join("\n"));
    logged.stop().await;
}
