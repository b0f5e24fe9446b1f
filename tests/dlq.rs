//! `outbox-host dlq list | redrive | purge` as an operator runs them: the real binary on a schema of
//! its own, with rows the relay dead-lettered.

use outbox_host::api::OutboxEntry;
use outbox_tests::db::{self, TestDb};
use std::process::Command;

/// A payload and a header value that must never be printed.
const PAYLOAD_MARKER: &str = "payloadS3cret";
const HEADER_MARKER: &str = "headerS3cret";

struct Dlq<'a> {
    db: &'a TestDb,
}

impl Dlq<'_> {
    /// Runs `outbox-host dlq <args> --database-url <db>` on the test's schema: exit code, stdout,
    /// stderr.
    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_outbox-host-under-test"))
            .arg("dlq")
            .args(args)
            .args(["--database-url", &db::url()])
            .env("OUTBOX_DATABASE_SCHEMA", self.db.schema.as_str())
            .env("RUST_LOG", "info")
            .output()
            .expect("the binary runs");
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    }
}

/// Publishes a row of `destination_type` with a secret payload and header.
async fn publish(db: &TestDb, destination_type: &str, destination: &str) -> i64 {
    db.publish(
        OutboxEntry::new(
            "order.confirmed",
            destination_type,
            destination,
            serde_json::json!({"card": PAYLOAD_MARKER}),
        )
        .header("authorization", HEADER_MARKER),
    )
    .await
}

fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .collect()
}

#[tokio::test]
async fn list_prints_one_line_per_dead_letter_most_recent_first_without_payloads_or_headers() {
    // A control character in a stored error (the relay replaces them; a hand edit may not) is
    // shown as `?`, so a row stays one line.
    let db = TestDb::new().await;
    let older = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    let newer = publish(&db, "WEBHOOK", "https://hooks.example.com/b").await;
    publish(&db, "WEBHOOK", "https://hooks.example.com/c").await;
    db.dead_letter(older, "http-status", "HTTP 404 from the hook", 120)
        .await;
    db.dead_letter(newer, "timeout", "no answer within\n10 s", 60)
        .await;

    let (code, out, err) = Dlq { db: &db }.run(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        cells(lines[0]),
        [
            "ID",
            "TYPE",
            "DESTINATION",
            "ATTEMPTS",
            "ERROR TYPE",
            "LAST ERROR",
            "UPDATED AT"
        ]
    );
    let first = cells(lines[1]);
    assert_eq!(
        first[..6],
        [
            newer.to_string().as_str(),
            "WEBHOOK",
            "https://hooks.example.com/b",
            "3/3",
            "timeout",
            "no answer within?10 s"
        ],
        "{out}"
    );
    assert!(first[6].ends_with(" UTC"), "{out}");
    assert_eq!(cells(lines[2])[0], older.to_string());
    assert!(
        !out.contains(PAYLOAD_MARKER) && !out.contains(HEADER_MARKER),
        "{out}"
    );
    assert!(
        !err.contains(PAYLOAD_MARKER) && !err.contains(HEADER_MARKER),
        "{err}"
    );
}

#[tokio::test]
async fn list_filters_by_type_since_and_limit_and_prints_json() {
    let db = TestDb::new().await;
    let old_hook = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    let new_hook = publish(&db, "WEBHOOK", "https://hooks.example.com/b").await;
    let newest_hook = publish(&db, "WEBHOOK", "https://hooks.example.com/c").await;
    let kafka = publish(&db, "KAFKA", "orders").await;
    db.dead_letter(old_hook, "http-status", "gone", 3 * 86_400)
        .await;
    db.dead_letter(new_hook, "http-status", "gone", 60).await;
    db.dead_letter(newest_hook, "http-status", "gone", 30).await;
    db.dead_letter(kafka, "denied", "topic not granted", 10)
        .await;
    let dlq = Dlq { db: &db };

    let (code, out, err) = dlq.run(&["list", "--type", "WEBHOOK", "--since", "1d", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let page: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<i64> = page["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [newest_hook, new_hook]);
    let row = &page["dead_letters"][0];
    assert_eq!(row["type"], "WEBHOOK");
    assert_eq!(row["destination"], "https://hooks.example.com/c");
    assert_eq!(
        (row["attempts"].as_i64(), row["max_attempts"].as_i64()),
        (Some(3), Some(3))
    );
    assert_eq!(row["error_type"], "http-status");
    assert_eq!(row["last_error"], "gone");
    assert!(row["updated_at"].as_str().unwrap().contains('T'), "{row}");

    let (code, out, _) = dlq.run(&["list", "--limit", "1", "--json"]);
    assert_eq!(code, Some(0));
    let page: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["dead_letters"].as_array().unwrap().len(), 1);
    assert_eq!(page["dead_letters"][0]["id"].as_i64(), Some(kafka));

    let (code, out, _) = dlq.run(&["list", "--type", "NOOP"]);
    assert_eq!((code, out.as_str()), (Some(0), "no dead letters\n"));
}

#[tokio::test]
async fn redrive_by_id_sends_the_rows_back_to_pending_with_attempt_0_available_now() {
    let db = TestDb::new().await;
    let first = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    let second = publish(&db, "WEBHOOK", "https://hooks.example.com/b").await;
    let untouched = publish(&db, "WEBHOOK", "https://hooks.example.com/c").await;
    let pending = publish(&db, "WEBHOOK", "https://hooks.example.com/d").await;
    for id in [first, second, untouched] {
        db.dead_letter(id, "http-status", "gone", 60).await;
    }
    db.execute(&format!(
        "UPDATE {{outbox}} SET available_at = NOW() + INTERVAL '1 hour' WHERE id = {first}"
    ))
    .await;

    let (code, out, err) = Dlq { db: &db }.run(&[
        "redrive",
        "--id",
        &first.to_string(),
        &second.to_string(),
        "--id",
        &pending.to_string(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "2 dead letters back to PENDING (1 of the ids given is not a dead letter)\n"
    );
    assert!(
        err.contains("dead letters redriven"),
        "the redrive is logged: {err}"
    );
    for id in [first, second] {
        assert_eq!(db.state_of(id).await, "PENDING");
        let (attempt, available_now): (i32, bool) = (
            db.scalar(&format!("SELECT attempt FROM {{outbox}} WHERE id = {id}"))
                .await,
            db.scalar(&format!(
                "SELECT available_at <= NOW() FROM {{outbox}} WHERE id = {id}"
            ))
            .await,
        );
        assert_eq!((attempt, available_now), (0, true), "row {id}");
    }
    assert_eq!(db.state_of(untouched).await, "DEAD_LETTER");
}

#[tokio::test]
async fn redrive_by_type_and_since_leaves_older_dead_letters_and_other_types() {
    let db = TestDb::new().await;
    let old = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    let recent = publish(&db, "WEBHOOK", "https://hooks.example.com/b").await;
    let other = publish(&db, "KAFKA", "orders").await;
    db.dead_letter(old, "http-status", "gone", 2 * 3600).await;
    db.dead_letter(recent, "http-status", "gone", 60).await;
    db.dead_letter(other, "denied", "topic not granted", 60)
        .await;

    let (code, out, err) = Dlq { db: &db }.run(&["redrive", "--type", "WEBHOOK", "--since", "1h"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1 dead letter back to PENDING\n");
    assert_eq!(db.state_of(recent).await, "PENDING");
    assert_eq!(db.state_of(old).await, "DEAD_LETTER");
    assert_eq!(db.state_of(other).await, "DEAD_LETTER");
}

#[tokio::test]
async fn redrive_needs_ids_or_a_type_and_refuses_a_bad_since() {
    let db = TestDb::new().await;
    let dlq = Dlq { db: &db };
    let (code, _, err) = dlq.run(&["redrive"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = dlq.run(&["redrive", "--id", "1", "--type", "WEBHOOK"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = dlq.run(&["redrive", "--since", "1h"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = dlq.run(&["redrive", "--type", "WEBHOOK", "--since", "yesterday"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("`since` must be an RFC 3339 time"), "{err}");
}

#[tokio::test]
async fn purge_deletes_the_selected_dead_letters_only_with_yes() {
    let db = TestDb::new().await;
    let hook = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    let kafka = publish(&db, "KAFKA", "orders").await;
    let pending = publish(&db, "WEBHOOK", "https://hooks.example.com/b").await;
    db.dead_letter(hook, "http-status", "gone", 60).await;
    db.dead_letter(kafka, "denied", "topic not granted", 60)
        .await;
    let dlq = Dlq { db: &db };

    let (code, out, err) = dlq.run(&["purge", "--type", "WEBHOOK"]);
    assert_eq!(code, Some(2));
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("add --yes to confirm"), "{err}");
    assert_eq!(db.count("DEAD_LETTER").await, 2);

    let (code, out, err) = dlq.run(&["purge", "--type", "WEBHOOK", "--yes"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1 dead letter purged\n");
    assert!(
        err.contains("dead letters purged"),
        "the purge is logged: {err}"
    );
    let remaining: i64 = db.scalar("SELECT count(*) FROM {outbox}").await;
    assert_eq!(remaining, 2);
    assert_eq!(db.state_of(kafka).await, "DEAD_LETTER");
    assert_eq!(db.state_of(pending).await, "PENDING");
}

#[tokio::test]
async fn dlq_reads_the_database_and_schema_from_a_config_file() {
    let db = TestDb::new().await;
    let id = publish(&db, "WEBHOOK", "https://hooks.example.com/a").await;
    db.dead_letter(id, "http-status", "gone", 60).await;
    let dir = outbox_tests::scratch::ScratchDir::new("dlq-config");
    let config = dir.write(
        "outbox.toml",
        format!(
            "[database]\nurl = \"{}\"\nschema = \"{}\"\n",
            db::url(),
            db.schema
        )
        .as_bytes(),
    );
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-host-under-test"))
        .args([
            "dlq",
            "list",
            "--json",
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let page: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(page["dead_letters"][0]["id"].as_i64(), Some(id));
}
