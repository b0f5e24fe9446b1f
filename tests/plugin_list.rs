//! `outbox-host plugin list` against a running host, and against none.

use clap::Parser;
use outbox_host::cli::{self, Cli};
use outbox_host::config::AdminToken;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost};
use outbox_tests::log_capture;
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;

/// Runs `outbox-host plugin list --admin <admin>` in this process: exit code, stdout, stderr.
async fn plugin_list(admin: &str) -> (u8, String, String) {
    plugin_list_with(&["--admin", admin]).await
}

/// Runs `outbox-host plugin list <args>` in this process: exit code, stdout, stderr.
async fn plugin_list_with(args: &[&str]) -> (u8, String, String) {
    // The command would install its own log subscriber; this test process keeps the quiet one.
    log_capture::install();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let cli = Cli::parse_from(["outbox-host", "plugin", "list"].iter().chain(args));
    let code = cli::run(cli, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[tokio::test]
async fn plugin_list_prints_a_row_per_plugin_file_with_its_state() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("plugin-list");
    dir.add_plugin("noop", plugins::NOOP);
    dir.write("broken.wasm", b"not a component");
    let host = TestHost::start(&host::config(&db, dir.path())).await;

    let (code, out, err) = plugin_list(&host.admin_url("")).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[0],
        [
            "FILE",
            "HASH",
            "WORLD",
            "TYPE",
            "SCOPE",
            "STATE",
            "LOADED AT",
            "LAST ERROR"
        ]
    );
    assert_eq!(lines[1][0], "broken.wasm");
    assert_eq!(&lines[1][2..6], ["-", "-", "-", "failed"], "{out}");
    assert!(lines[1][7].contains("not a WebAssembly component"), "{out}");
    assert_eq!(lines[2][0], "noop.wasm");
    assert_eq!(lines[2][1].len(), 12, "a short content hash: {out}");
    assert_eq!(
        &lines[2][2..6],
        ["destination-handler", "NOOP", "all", "loaded"],
        "{out}"
    );
    assert_eq!(lines[2][7], "-");
    host.stop().await;
}

#[tokio::test]
async fn plugin_list_exits_1_naming_the_url_when_the_admin_endpoint_cannot_be_reached() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);

    let (code, out, err) = plugin_list(&admin).await;
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(&format!("{admin}/plugins")), "{err}");
    assert!(
        err.contains("no host answers there: start one with `outbox-host run --config FILE`"),
        "{err}"
    );
}

#[tokio::test]
async fn plugin_list_takes_the_address_as_admin_listen_writes_it() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("plugin-list-addr");
    dir.add_plugin("noop", plugins::NOOP);
    let host = TestHost::start(&host::config(&db, dir.path())).await;

    let address = host.service.admin_addr().to_string();
    let (code, out, err) = plugin_list(&address).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("noop.wasm"), "{out}");
    host.stop().await;
}

#[tokio::test]
async fn plugin_list_reads_the_address_and_the_token_from_the_configuration_file() {
    let db = TestDb::new().await;
    let dir = ScratchDir::new("plugin-list-token");
    dir.add_plugin("noop", plugins::NOOP);
    let token = "plugin-list-token-0123456789";
    let mut config = host::config(&db, dir.path());
    config.admin.token = Some(AdminToken::new(token));
    let host = TestHost::start(&config).await;
    let address = host.service.admin_addr().to_string();

    let (code, _, err) = plugin_list(&address).await;
    assert_eq!(code, 1);
    assert!(err.contains("HTTP 401"), "{err}");
    assert!(err.contains("the host requires its admin.token"), "{err}");
    assert!(!err.contains(token), "{err}");

    let file = dir.write(
        "host.conf",
        format!("[admin]\nlisten = \"{address}\"\ntoken = \"{token}\"\n").as_bytes(),
    );
    let (code, out, err) = plugin_list_with(&["--config", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("noop.wasm"), "{out}");
    host.stop().await;
}
