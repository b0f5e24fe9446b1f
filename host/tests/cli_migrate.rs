//! `outbox-host migrate` as an operator runs it.

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
