//! Wake-ups with LISTEN_NOTIFY and the doorbell (migration 0002), on a real host. Each test has a
//! database of its own, so no other test's inserts notify its relays, and a polling interval of ten
//! minutes, so a row published within a minute can only have been picked up by a wake-up.

use outbox_host::config::{Config, Strategy};
use outbox_tests::db::{TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use std::time::Duration;

const POLL: u64 = 600_000;
/// Far below the polling interval, far above any wake-up on a loaded machine.
const WOKEN: Duration = Duration::from_secs(60);

fn listening_config(db: &TestDb, dir: &ScratchDir, node: &str) -> Config {
    let mut config = host::config(db, dir.path());
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval_ms = POLL;
    config.relay.node_id = Some(format!("{}-{node}", db.schema));
    config
}

fn noop_dir(label: &str) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("noop", plugins::NOOP);
    dir
}

/// Waits until `relays` doorbells are armed: those relays have nothing to do and wait.
async fn wait_until_armed(db: &TestDb, relays: i64) {
    let sql = format!(
        "SELECT count(*) FROM {}.outbox_doorbell WHERE armed_until > clock_timestamp()",
        db.schema
    );
    wait_until("the idle relays arm their doorbells", WOKEN, || async {
        db.scalar::<i64>(&sql).await == relays
    })
    .await;
}

#[tokio::test]
async fn an_idle_relay_is_woken_by_the_first_insert() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-first");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    wait_until_armed(&db, 1).await;
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, WOKEN).await;
    host.stop().await;
}

#[tokio::test]
async fn a_relay_is_woken_by_each_insert_once_idle_again() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-rearm");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    for _ in 0..3 {
        wait_until_armed(&db, 1).await;
        let id = db.publish(entry("NOOP", "x")).await;
        db.wait_until_published(id, WOKEN).await;
    }
    host.stop().await;
}

#[tokio::test]
async fn a_relay_that_stops_leaves_its_doorbell_disarmed() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-stop");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    wait_until_armed(&db, 1).await;
    host.stop().await;
    let doorbells: i64 = db
        .scalar(&format!(
            "SELECT count(*) FROM {}.outbox_doorbell",
            db.schema
        ))
        .await;
    assert_eq!(
        doorbells, 0,
        "inserts would keep notifying until the lease ends"
    );
}

/// A row wakes the relay; a second row follows after a pause that varies from round to round, so in
/// some rounds it commits after the relay's claim found nothing and before its doorbell was armed
/// again. That row rang nothing: the claim the relay makes after arming must find it, or it would
/// wait ten minutes for the poll.
#[tokio::test]
async fn rows_committed_while_the_relay_arms_are_not_left_for_the_poll() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-arming");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    for round in 0..60u64 {
        wait_until_armed(&db, 1).await;
        let first = db.publish(entry("NOOP", "x")).await;
        // Once the relay has claimed the first row, it disarms, looks again, finds nothing and
        // arms: the second row commits somewhere in there.
        while db.state_of(first).await == "PENDING" {}
        tokio::time::sleep(Duration::from_micros(round % 16 * 250)).await;
        let second = db.publish(entry("NOOP", "x")).await;
        db.wait_until_published(first, WOKEN).await;
        db.wait_until_published(second, WOKEN).await;
    }
    host.stop().await;
}

/// One relay drains a backlog (it never arms, and disarms its own doorbell on every claim) while
/// the other, whose plugin's type has no rows, waits armed: the busy one must not silence it.
#[tokio::test]
async fn two_relays_on_one_database_both_keep_working_while_one_is_idle() {
    let db = TestDb::in_a_database_of_its_own().await;
    let busy_dir = noop_dir("wakeup-busy");
    let idle_dir = ScratchDir::new("wakeup-idle");
    idle_dir.add_plugin("scripted", plugins::SCRIPTED);
    idle_dir.add_manifest("scripted", "[config]\ndestination_type = \"WAKE\"\n");
    let idle = TestHost::start(&listening_config(&db, &idle_dir, "idle")).await;
    let busy = TestHost::start(&listening_config(&db, &busy_dir, "busy")).await;
    wait_until_armed(&db, 2).await;
    db.execute(
        "INSERT INTO {outbox} (carrier_id, event_type, destination, destination_type, payload) \
         SELECT gen_random_uuid(), 'backlog', 'x', 'NOOP', '{\"n\": 1}' FROM generate_series(1, 50000)",
    )
    .await;
    wait_until("the busy relay is draining", WOKEN, || async {
        db.count("PUBLISHED").await > 0
    })
    .await;
    // The busy relay has disarmed its doorbell; the idle one's stays armed.
    wait_until_armed(&db, 1).await;
    for _ in 0..5 {
        let id = db.publish(entry("WAKE", "x")).await;
        db.wait_until_published(id, WOKEN).await;
    }
    let backlog: i64 = db
        .scalar("SELECT count(*) FROM {outbox} WHERE destination_type = 'NOOP' AND state <> 'PUBLISHED'")
        .await;
    assert!(backlog > 0, "the busy relay was still draining its backlog");
    wait_until(
        "the backlog is drained",
        Duration::from_secs(300),
        || async { db.count("PENDING").await == 0 && db.count("PROCESSING").await == 0 },
    )
    .await;
    wait_until_armed(&db, 2).await;
    let idle_row = db.publish(entry("WAKE", "x")).await;
    let busy_row = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(idle_row, WOKEN).await;
    db.wait_until_published(busy_row, WOKEN).await;
    idle.stop().await;
    busy.stop().await;
}

#[tokio::test]
async fn with_the_doorbell_trigger_dropped_an_idle_relay_still_delivers_at_the_polling_interval() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-no-trigger");
    let mut config = listening_config(&db, &dir, "a");
    config.relay.polling_interval_ms = 1_000;
    let host = TestHost::start(&config).await;
    wait_until_armed(&db, 1).await;
    db.execute(&format!(
        "DROP TRIGGER transactional_outbox_doorbell ON {}.outbox",
        db.schema
    ))
    .await;
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, WOKEN).await;
    host.stop().await;
}
