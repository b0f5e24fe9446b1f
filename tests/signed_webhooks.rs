//! Signed webhooks, end to end: a running host on real PostgreSQL delivers rows through the
//! `webhook` plugin with `[config] signing_secrets`, and a receiver built on the `standardwebhooks`
//! package from PyPI (a verifier no one here wrote) checks every request it gets.
//!
//! No assertion prints a secret, a body or a header value: only counts and states.

use std::time::Duration;

use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost};
use outbox_tests::http_stub::{StubRequest, StubServer};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use outbox_tests::webhook_receiver::{WebhookReceiver, new_secret};

const ROWS: usize = 12;
const SETTLE: Duration = Duration::from_secs(30);

/// A host whose webhook may reach `origins` and signs with `secrets`.
async fn signing_host(
    db: &TestDb,
    label: &str,
    origins: &[String],
    secrets: &[&str],
) -> (ScratchDir, TestHost) {
    let dir = ScratchDir::new(label);
    dir.add_plugin("webhook", plugins::WEBHOOK);
    let origins: Vec<String> = origins.iter().map(|origin| format!("{origin:?}")).collect();
    dir.add_manifest(
        "webhook",
        &format!(
            "[http]\nallowed_hosts = [{}]\n[config]\nsigning_secrets = \"{}\"\n",
            origins.join(", "),
            secrets.join(" ")
        ),
    );
    let host = TestHost::start(&host::config(db, dir.path())).await;
    (dir, host)
}

/// Publishes `count` rows to `url`; returns their carrier ids.
async fn publish(db: &TestDb, url: &str, count: usize) -> Vec<String> {
    let mut carrier_ids = Vec::new();
    for _ in 0..count {
        let id = db.publish(entry("WEBHOOK", url)).await;
        carrier_ids.push(db.carrier_id(id).await);
    }
    carrier_ids
}

/// Whether the verified `webhook-id`s are exactly the rows' carrier ids, each once.
fn same_ids(mut verified: Vec<String>, mut carrier_ids: Vec<String>) -> bool {
    verified.sort();
    carrier_ids.sort();
    verified == carrier_ids
}

#[tokio::test]
async fn every_request_a_running_host_delivers_verifies_with_the_standardwebhooks_package() {
    let db = TestDb::new().await;
    let secret = new_secret("verify");
    let receiver = WebhookReceiver::start(&secret).await;
    let (_dir, host) = signing_host(&db, "signed-verify", &[receiver.origin()], &[&secret]).await;

    let carrier_ids = publish(&db, &receiver.url("/hook"), ROWS).await;
    db.wait_until_settled(SETTLE).await;

    let report = receiver.report().await;
    assert_eq!(
        (report.verified, report.rejected),
        (ROWS, 0),
        "verified and rejected requests"
    );
    assert_eq!(db.count("PUBLISHED").await, ROWS as i64);
    assert!(
        same_ids(report.verified_ids, carrier_ids),
        "each verified webhook-id is one row's carrier id"
    );
    host.stop().await;
}

#[tokio::test]
async fn during_a_rotation_receivers_knowing_only_the_old_or_only_the_new_secret_both_verify() {
    let db = TestDb::new().await;
    let (old, new) = (new_secret("rotation-old"), new_secret("rotation-new"));
    let knows_old = WebhookReceiver::start(&old).await;
    let knows_new = WebhookReceiver::start(&new).await;
    let (_dir, host) = signing_host(
        &db,
        "signed-rotation",
        &[knows_old.origin(), knows_new.origin()],
        &[&old, &new],
    )
    .await;

    let to_old = publish(&db, &knows_old.url("/hook"), ROWS).await;
    let to_new = publish(&db, &knows_new.url("/hook"), ROWS).await;
    db.wait_until_settled(SETTLE).await;

    for (who, receiver, carrier_ids) in [
        (
            "the receiver knowing only the old secret",
            &knows_old,
            to_old,
        ),
        (
            "the receiver knowing only the new secret",
            &knows_new,
            to_new,
        ),
    ] {
        let report = receiver.report().await;
        assert_eq!(
            (report.verified, report.rejected),
            (ROWS, 0),
            "{who}: verified and rejected requests"
        );
        assert!(
            same_ids(report.verified_ids, carrier_ids),
            "{who}: each verified webhook-id is one of its rows' carrier ids"
        );
    }
    assert_eq!(db.count("PUBLISHED").await, 2 * ROWS as i64);
    host.stop().await;
}

#[tokio::test]
async fn a_receiver_whose_secret_the_host_does_not_sign_with_rejects_and_the_row_is_dead_lettered()
{
    let db = TestDb::new().await;
    let receiver = WebhookReceiver::start(&new_secret("unknown-receiver")).await;
    let signing = new_secret("unknown-host");
    let (_dir, host) = signing_host(&db, "signed-unknown", &[receiver.origin()], &[&signing]).await;

    let id = db.publish(entry("WEBHOOK", &receiver.url("/hook"))).await;
    db.wait_until_settled(SETTLE).await;

    let report = receiver.report().await;
    assert_eq!((report.verified, report.rejected), (0, 1));
    assert_eq!(db.state_of(id).await, "DEAD_LETTER", "401 is permanent");
    host.stop().await;
}

/// One request a running host signed with `secret` and delivered, as a stub endpoint read it.
async fn a_delivered_signed_request(secret: &str) -> StubRequest {
    let db = TestDb::new().await;
    let stub = StubServer::start(200).await;
    let (_dir, host) = signing_host(&db, "signed-capture", &[stub.origin()], &[secret]).await;
    let id = db.publish(entry("WEBHOOK", &stub.url("/hook"))).await;
    db.wait_until_published(id, SETTLE).await;
    host.stop().await;
    let [request] = stub
        .requests()
        .try_into()
        .unwrap_or_else(|requests: Vec<_>| panic!("one request delivered, not {}", requests.len()));
    request
}

/// Replays `request` untouched (the receiver must verify it, or the tampered copy proves nothing),
/// then with `tamper` applied; returns the status the tampered copy was answered.
async fn replayed_tampered(
    receiver: &WebhookReceiver,
    request: &StubRequest,
    tamper: impl FnOnce(&mut Vec<(String, String)>, &mut Vec<u8>),
) -> u16 {
    let untouched = receiver.post(&request.headers, &request.body).await;
    assert_eq!(untouched, 204, "the untouched request verifies");
    let (mut headers, mut body) = (request.headers.clone(), request.body.clone());
    tamper(&mut headers, &mut body);
    let status = receiver.post(&headers, &body).await;
    let report = receiver.report().await;
    assert_eq!((report.verified, report.rejected), (1, 1));
    status
}

#[tokio::test]
async fn a_delivered_request_whose_body_was_changed_is_rejected() {
    let secret = new_secret("tamper-body");
    let request = a_delivered_signed_request(&secret).await;
    let receiver = WebhookReceiver::start(&secret).await;

    let status = replayed_tampered(&receiver, &request, |_, body| {
        // entry() publishes {"n": 1}: the same JSON, with n = 2.
        let one = body
            .iter()
            .position(|&byte| byte == b'1')
            .expect("the payload entry() publishes holds a 1");
        body[one] = b'2';
    })
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_delivered_request_whose_timestamp_was_changed_is_rejected() {
    let secret = new_secret("tamper-timestamp");
    let request = a_delivered_signed_request(&secret).await;
    let receiver = WebhookReceiver::start(&secret).await;

    // One second later: well inside the verifier's 5-minute tolerance, so only the signature,
    // which covers the timestamp, can reject it.
    let status = replayed_tampered(&receiver, &request, |headers, _| {
        let (_, timestamp) = headers
            .iter_mut()
            .find(|(name, _)| name == "webhook-timestamp")
            .expect("a signed request has a webhook-timestamp");
        let later: u64 = timestamp.parse::<u64>().expect("unix seconds") + 1;
        *timestamp = later.to_string();
    })
    .await;
    assert_eq!(status, 401);
}
