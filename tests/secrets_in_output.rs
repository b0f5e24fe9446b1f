//! Secrets never come back out: a marker planted in every place an operator may put one (credentials
//! in an allow-list entry, an oversized integer in a plugin's `[config]`, a password in the database
//! URL's user info or query, Kafka credentials, the admin token, a bad configuration value) appears
//! in no error,
//! status page, listing, log line or printed configuration.

use clap::Parser;
use outbox_host::admin::client::AdminRequest;
use outbox_host::cli::{self, Cli};
use outbox_host::config::AdminToken;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost};
use outbox_tests::log_capture;
use outbox_tests::plugins::{HOSTILE, NOOP};
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
