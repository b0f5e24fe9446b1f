//! The `outbox-host` command line as an operator runs it: exit codes and what it prints.

use std::process::Command;

fn outbox_host() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-host"));
    command.env_remove("RUST_LOG");
    command
}

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| outbox_host::database::DEFAULT_URL.to_owned())
}

async fn schema_exists(name: &str) -> bool {
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(name)
        .fetch_one(&pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_invalid_schema_setting_exits_2_naming_the_setting_and_creates_nothing() {
    let output = outbox_host()
        .args(["migrate", "--database-url", &database_url()])
        .env("OUTBOX_DATABASE_SCHEMA", "select")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("database.schema"), "{stderr}");
    assert!(!schema_exists("select").await);
}

#[tokio::test]
async fn a_schema_from_the_config_file_receives_the_tables() {
    let schema = format!("t_cli_{}", uuid::Uuid::now_v7().simple());
    let dir = std::env::temp_dir().join(&schema);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("outbox.toml");
    std::fs::write(&config, format!("[database]\nschema = \"{schema}\"\n")).unwrap();
    for _ in 0..2 {
        let status = outbox_host()
            .args([
                "migrate",
                "--config",
                config.to_str().unwrap(),
                "--database-url",
                &database_url(),
            ])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('outbox', 'inbox')",
    )
    .bind(&schema)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(tables, 2);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn write_config(text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("outbox.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn run_with_an_unknown_key_exits_2_naming_the_key() {
    let config = write_config("[relay]\nbatch_sise = 10\n");
    let output = outbox_host()
        .args(["run", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("relay.batch_sise"), "{stderr}");
}

#[test]
fn run_with_a_bad_value_from_the_environment_exits_2_naming_the_key() {
    let output = outbox_host()
        .args(["run"])
        .env("OUTBOX_RELAY_STRATEGY", "PUSH")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("relay.strategy")
    );
}

#[test]
fn config_print_shows_the_effective_configuration_with_the_password_masked() {
    let config = write_config(
        "[database]\nurl = \"postgres://app:s3cret@db:5432/orders\"\n[relay]\nbatch_size = 200\nmax_in_flight = 200\n",
    );
    let output = outbox_host()
        .args(["config", "print", "--config", config.to_str().unwrap()])
        .env("OUTBOX_RELAY_INSTANCES", "3")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(
        printed.contains("postgres://app:****@db:5432/orders"),
        "{printed}"
    );
    assert!(!printed.contains("s3cret"));
    assert!(
        printed.contains("batch_size = 200") && printed.contains("instances = 3"),
        "{printed}"
    );
    assert!(
        printed.contains("stale_lease_recovery_cron = \"*/30 * * * * *\""),
        "{printed}"
    );
}

/// Runs `outbox-host <args>` and returns its exit code and stderr.
fn run_for_error(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let output = outbox_host()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let (code, stderr) = run_for_error(&["config", "print"], &[("OUTBOX_RELAY_BATCH_SIZE", "abc")]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains(
            "environment variable OUTBOX_RELAY_BATCH_SIZE (configuration key relay.batch_size)"
        ),
        "{stderr}"
    );
}

#[test]
fn a_misspelt_url_scheme_is_refused_naming_the_scheme() {
    let (code, stderr) = run_for_error(
        &[
            "migrate",
            "--database-url",
            "postgress://postgres@127.0.0.1:5432/test",
        ],
        &[],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("unknown URL scheme `postgress://`"),
        "{stderr}"
    );
}

#[test]
fn an_http_server_at_the_database_address_is_reported_as_not_postgresql() {
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = server.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        // Answers whatever it reads as a web server answers a request it cannot parse.
        while let Ok((mut stream, _)) = server.accept() {
            let _ = stream.read(&mut [0; 1024]);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let url = format!("postgres://postgres@{address}/test");
    let (code, stderr) = run_for_error(&["migrate", "--database-url", &url], &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!(
            "the server at {address} does not speak the PostgreSQL protocol"
        )),
        "{stderr}"
    );
}

#[test]
fn run_with_a_missing_plugins_directory_exits_naming_it() {
    let config = write_config("");
    let missing = config.parent().unwrap().join("no-such-plugins");
    std::fs::write(
        &config,
        format!(
            "[plugins]\ndir = {:?}\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            missing
        ),
    )
    .unwrap();
    let (code, stderr) = run_for_error(&["run", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!(
            "the plugins directory {} (plugins.dir) does not exist",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!missing.exists());
}

#[test]
fn run_on_a_non_loopback_admin_address_without_a_token_exits_2_naming_admin_token() {
    let (code, stderr) = run_for_error(&["run"], &[("OUTBOX_ADMIN_LISTEN", "0.0.0.0:0")]);
    assert_eq!(code, Some(2));
    assert!(
        stderr
            .contains("environment variable OUTBOX_ADMIN_LISTEN (configuration key admin.listen)"),
        "{stderr}"
    );
    assert!(stderr.contains("set admin.token"), "{stderr}");
}

#[test]
fn malformed_configuration_files_exit_2_naming_the_file_and_the_key_or_line() {
    let cases = [
        ("[relay\nbatch_size = 10\n", "line 1"),
        ("[relay]\nbatch_size = \"ten\"\n", "relay.batch_size"),
        ("[relay]\nbatch_size = 0\n", "relay.batch_size"),
        ("[relay]\nstrategy = \"PUSH\"\n", "relay.strategy"),
        (
            "[maintenance]\ncleanup_cron = \"every day\"\n",
            "maintenance.cleanup_cron",
        ),
        ("[admin]\nlisten = \"not an address\"\n", "admin.listen"),
        (
            "[relay]\nbatch_size = 10\n[relay]\ninstances = 2\n",
            "line 3",
        ),
        ("\u{0}\u{1}binary", "line 1"),
    ];
    for (text, named) in cases {
        let config = write_config(text);
        let (code, stderr) = run_for_error(&["run", "--config", config.to_str().unwrap()], &[]);
        assert_eq!(code, Some(2), "{text:?}: {stderr}");
        assert!(
            stderr.contains(config.to_str().unwrap()) && stderr.contains(named),
            "{text:?} must name the file and {named}: {stderr}"
        );
    }
    let missing = std::env::temp_dir().join("outbox-cli-no-such-config.toml");
    let (code, stderr) = run_for_error(&["run", "--config", missing.to_str().unwrap()], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
}
