//! `/metrics` of a running host, as a dashboard reads it: every series of a loaded destination type
//! exists at zero before any event, claim-scope calls are counted apart from publishes, and the age
//! of the oldest due row is there for the one outbox alert.

use outbox_host::admin::client;
use outbox_tests::db::{self, TestDb};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins::SCRIPTED;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;

async fn scrape(host: &TestHost) -> String {
    let page = client::get(&host.admin_url("/metrics")).await.unwrap();
    String::from_utf8(page.to_vec()).unwrap()
}

/// The value of the sample `series` (name and labels exactly as rendered).
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn every_series_of_a_loaded_type_is_at_zero_before_any_event() {
    let db = TestDb::new().await;
    let plugins = ScratchDir::new("metrics-zero");
    plugins.add_plugin("scripted", SCRIPTED);
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let page = scrape(&host).await;
    let t = "destination_type=\"SCRIPTED\"";
    let mut zero = vec![
        format!("outbox_claimed_total{{{t}}}"),
        format!("outbox_published_total{{{t}}}"),
        format!("outbox_retried_total{{{t},error_type=\"none\"}}"),
        format!("outbox_dead_lettered_total{{{t},error_type=\"none\"}}"),
        format!("outbox_deferred_total{{{t}}}"),
        format!("outbox_publish_duration_seconds_count{{{t}}}"),
        format!("outbox_oldest_pending_age_seconds{{{t}}}"),
        format!("outbox_plugin_calls_total{{{t},plugin=\"scripted\"}}"),
        format!("outbox_plugin_call_seconds_total{{{t},plugin=\"scripted\"}}"),
        format!("outbox_plugin_log_lines_dropped_total{{{t},plugin=\"scripted\"}}"),
    ];
    zero.extend(
        [
            "outbox_cycle_failures_total{reason=\"database\"}",
            "outbox_maintenance_runs_total{job=\"cleanup\",result=\"ok\"}",
            "outbox_maintenance_runs_total{job=\"cleanup\",result=\"failed\"}",
            "outbox_maintenance_rows_total{job=\"cleanup\",table=\"inbox\"}",
        ]
        .map(String::from),
    );
    for state in ["PENDING", "PROCESSING", "DEAD_LETTER"] {
        zero.push(format!("outbox_rows{{{t},state=\"{state}\"}}"));
    }
    for reason in [
        "call_failed",
        "timeout",
        "blank",
        "too_long",
        "too_many",
        "control_character",
    ] {
        zero.push(format!(
            "outbox_claim_scope_failures_total{{{t},reason=\"{reason}\"}}"
        ));
    }
    for error_type in ["timeout", "trap", "memory", "instantiate"] {
        zero.push(format!(
            "outbox_plugin_call_errors_total{{{t},error_type=\"{error_type}\",plugin=\"scripted\"}}"
        ));
    }
    for series in &zero {
        assert_eq!(value(&page, series), Some(0.0), "{series}\n{page}");
    }
    let build_info = format!(
        "outbox_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&page, &build_info), Some(1.0), "{page}");
    host.stop().await;
}

#[tokio::test]
async fn claim_scope_calls_are_counted_apart_from_publishes() {
    let db = TestDb::new().await;
    let plugins = ScratchDir::new("metrics-scope");
    plugins.add_plugin("scripted", SCRIPTED);
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let labels = "{destination_type=\"SCRIPTED\",plugin=\"scripted\"}";
    let scope_calls = format!("outbox_plugin_claim_scope_calls_total{labels}");
    wait_until(
        "the idle relay has asked the claim scope a few times",
        Duration::from_secs(30),
        || async { value(&scrape(&host).await, &scope_calls).is_some_and(|calls| calls >= 3.0) },
    )
    .await;
    let page = scrape(&host).await;
    assert_eq!(
        value(&page, &format!("outbox_plugin_calls_total{labels}")),
        Some(0.0),
        "{page}"
    );

    let id = db.publish(db::entry("SCRIPTED", "somewhere")).await;
    db.wait_until_published(id, Duration::from_secs(30)).await;
    let page = scrape(&host).await;
    assert_eq!(
        value(&page, &format!("outbox_plugin_calls_total{labels}")),
        Some(1.0),
        "{page}"
    );
    host.stop().await;
}

#[tokio::test]
async fn the_oldest_due_pending_row_gives_its_type_s_age() {
    let db = TestDb::new().await;
    for (age_s, scheduled_in_s) in [(120, None), (30, None), (600, Some(3600))] {
        let id = db.publish(db::entry("WAITING", "somewhere")).await;
        let scheduled = scheduled_in_s.map_or("NULL".to_owned(), |s| {
            format!("NOW() + make_interval(secs => {s})")
        });
        db.execute(&format!(
            "UPDATE {{outbox}} SET created_at = NOW() - make_interval(secs => {age_s}), \
             scheduled_at = {scheduled} WHERE id = {id}"
        ))
        .await;
    }
    let published = db.publish(db::entry("DONE", "somewhere")).await;
    db.execute(&format!(
        "UPDATE {{outbox}} SET state = 'PUBLISHED', created_at = NOW() - interval '1 day' \
         WHERE id = {published}"
    ))
    .await;
    let plugins = ScratchDir::new("metrics-age");
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let page = scrape(&host).await;
    let age = value(
        &page,
        "outbox_oldest_pending_age_seconds{destination_type=\"WAITING\"}",
    )
    .unwrap_or_else(|| panic!("no age for WAITING:\n{page}"));
    assert!((120.0..600.0).contains(&age), "{age}");
    assert_eq!(
        value(
            &page,
            "outbox_oldest_pending_age_seconds{destination_type=\"DONE\"}"
        ),
        None,
        "{page}"
    );
    host.stop().await;
}
