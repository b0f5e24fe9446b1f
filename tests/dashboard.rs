//! The Grafana dashboard in `deploy/grafana/` charts only what the host exports: every metric name
//! it mentions is a series in `/metrics` of a running host with one plugin loaded.

use outbox_host::admin::client;
use outbox_tests::db::TestDb;
use outbox_tests::host::{self, TestHost};
use outbox_tests::plugins::SCRIPTED;
use outbox_tests::scratch::ScratchDir;
use std::collections::BTreeSet;
use std::path::Path;

const DASHBOARD: &str = "../deploy/grafana/outbox-host.json";

/// Every `outbox_…` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("outbox_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_charts_is_exported_by_a_running_host() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD);
    let text = std::fs::read_to_string(&path).expect("the dashboard is in the repository");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(
        dashboard["panels"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    );
    let charted = metric_names(&text);
    assert!(charted.len() >= 20, "{charted:?}");

    let db = TestDb::new().await;
    let plugins = ScratchDir::new("dashboard");
    plugins.add_plugin("scripted", SCRIPTED);
    let host = TestHost::start(&host::config(&db, plugins.path())).await;
    let page = client::get(&host.admin_url("/metrics")).await.unwrap();
    let page = String::from_utf8(page.to_vec()).unwrap();
    host.stop().await;
    let exported: BTreeSet<String> = page
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = charted.difference(&exported).collect();
    assert!(missing.is_empty(), "not in /metrics: {missing:?}\n{page}");
}
