//! Wake-ups with LISTEN_NOTIFY and the doorbell lock (migration 0003), on a real host. Each test has a
//! database of its own, so no other test's inserts notify its relays, and a polling interval of ten
//! minutes, so a row published within a minute can only have been picked up by a wake-up.

use outbox_host::api::OutboxEntry;
use outbox_host::config::{Config, Strategy};
use outbox_host::relay::CHANNEL;
use outbox_tests::db::{Doorbell, TestDb, entry};
use outbox_tests::host::{self, TestHost, wait_until};
use outbox_tests::plugins;
use outbox_tests::scratch::ScratchDir;
use sqlx::postgres::PgListener;
use std::time::{Duration, Instant};

const POLL: u64 = 600_000;
/// Far below the polling interval, far above any wake-up on a loaded machine.
const WOKEN: Duration = Duration::from_secs(60);

fn listening_config(db: &TestDb, dir: &ScratchDir, node: &str) -> Config {
    let mut config = host::config(db, dir.path());
    config.relay.strategy = Strategy::ListenNotify;
    config.relay.polling_interval = Duration::from_millis(POLL);
    config.relay.stalled_after = Duration::from_millis(2 * POLL);
    config.relay.node_id = Some(format!("{}-{node}", db.schema));
    config
}

fn noop_dir(label: &str) -> ScratchDir {
    let dir = ScratchDir::new(label);
    dir.add_plugin("noop", plugins::NOOP);
    dir
}

/// Waits until one relay holds the doorbell and at least `relays - 1` more wait for it: that many
/// hosts have nothing to do, and inserts notify. (A host that got busy while its request waited
/// leaves it waiting until it is granted.)
async fn wait_until_armed(db: &TestDb, relays: i64) {
    wait_until("the idle relays ask for the doorbell", WOKEN, || async {
        let requests = db.doorbell_requests().await;
        requests.held == 1 && requests.waiting >= relays - 1
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
    assert_eq!(
        db.doorbell_requests().await,
        Doorbell {
            held: 0,
            waiting: 0
        },
        "inserts would keep notifying"
    );
}

/// A row wakes the relay; a second row follows after a pause that varies from round to round. A
/// loop that found rows looks again for 20 ms before it waits, so the pauses sweep the end of that
/// linger in steps of 0.2 ms: in some rounds the second row commits after the relay's last look and
/// before it holds the doorbell again. That row rang nothing: the claim the relay makes once it
/// holds the doorbell must find it, or it would wait ten minutes for the poll.
#[tokio::test]
async fn rows_committed_while_the_relay_arms_are_not_left_for_the_poll() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-arming");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    for round in 0..80u64 {
        wait_until_armed(&db, 1).await;
        let first = db.publish(entry("NOOP", "x")).await;
        while db.state_of(first).await == "PENDING" {}
        // Timers have a resolution of a millisecond: spin, letting the host's tasks run.
        let resume = Instant::now() + Duration::from_micros(16_000 + round * 200);
        while Instant::now() < resume {
            tokio::task::yield_now().await;
        }
        let second = db.publish(entry("NOOP", "x")).await;
        db.wait_until_published(first, WOKEN).await;
        db.wait_until_published(second, WOKEN).await;
    }
    host.stop().await;
}

/// Rows trickle in at 100 a second to a host of two loops. One loop following them finds each
/// within milliseconds; the other, whose claims now find nothing, must not make its host hold the
/// doorbell, or every insert would pay for a notification the following loop does not need.
#[tokio::test]
async fn a_host_following_a_steady_trickle_leaves_the_inserts_silent() {
    const ROWS: u32 = 300;
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-trickle");
    let mut config = listening_config(&db, &dir, "a");
    config.relay.instances = 2;
    let host = TestHost::start(&config).await;
    wait_until_armed(&db, 1).await;
    let mut listener = PgListener::connect_with(&db.pool).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    for _ in 0..ROWS {
        ticker.tick().await;
        db.publish(entry("NOOP", "x")).await;
    }
    db.wait_until_settled(WOKEN).await;
    let mut notified = 0;
    while let Ok(received) = tokio::time::timeout(Duration::from_millis(200), listener.recv()).await
    {
        received.unwrap();
        notified += 1;
    }
    host.stop().await;
    // The first insert rings the idle host, and a few more may while it lets the doorbell go.
    assert!(
        notified <= ROWS / 20,
        "{notified} of {ROWS} inserts notified while a loop was following them"
    );
}

/// A row of another type published while the host's only plugin call slot of a slow type is
/// taken: the loop that claimed the slow row finds nothing else to claim, and must end up waiting
/// with the doorbell held rather than sleep until the slow call lands.
async fn other_types_are_not_held_up_by_a_saturated_plugin(loops: u32) {
    const SLOW_MS: u64 = 12_000;
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir(&format!("wakeup-saturated-{loops}"));
    dir.add_plugin("scripted", plugins::SCRIPTED);
    dir.add_manifest(
        "scripted",
        "[limits]\nmax_concurrency = 1\ntimeout_ms = 15000\n",
    );
    let mut config = listening_config(&db, &dir, "a");
    config.relay.instances = loops;
    let host = TestHost::start(&config).await;
    wait_until_armed(&db, 1).await;
    let slow = OutboxEntry::new(
        "test.event",
        "SCRIPTED",
        "slow",
        serde_json::json!({"delay_ms": SLOW_MS}),
    );
    db.publish(slow).await;
    wait_until("the slow row is claimed", WOKEN, || async {
        db.count("PROCESSING").await == 1
    })
    .await;
    let published = Instant::now();
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, WOKEN).await;
    let waited = published.elapsed();
    host.stop().await;
    assert!(
        waited < Duration::from_millis(SLOW_MS / 2),
        "the NOOP row waited {waited:?}, as if for the slow call to land"
    );
}

#[tokio::test]
async fn a_single_loop_busy_with_a_slow_plugin_still_wakes_for_other_types() {
    other_types_are_not_held_up_by_a_saturated_plugin(1).await;
}

#[tokio::test]
async fn two_loops_one_busy_with_a_slow_plugin_still_wake_for_other_types() {
    other_types_are_not_held_up_by_a_saturated_plugin(2).await;
}

/// One relay drains a backlog (it never asks for the doorbell) while the other, whose plugin's type
/// has no rows, holds it: the busy one must not silence it.
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
    // The idle relay holds the doorbell: the busy one let it go, or never got it.
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
    config.relay.polling_interval = Duration::from_millis(1_000);
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

/// The doorbell's connection is killed while the relay waits: the host opens another and holds
/// the doorbell again, and an insert still wakes it.
#[tokio::test]
async fn a_relay_whose_doorbell_connection_is_lost_takes_the_doorbell_again() {
    let db = TestDb::in_a_database_of_its_own().await;
    let dir = noop_dir("wakeup-lost");
    let host = TestHost::start(&listening_config(&db, &dir, "a")).await;
    // The host lets go of the doorbell whenever its loop wakes up to claim, so the holder is read
    // in one statement, and may be none at that moment.
    let holder = || async {
        sqlx::query_scalar::<_, Option<i32>>(
            "SELECT max(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let deadline = Instant::now() + WOKEN;
    let killed = loop {
        if let Some(pid) = holder().await {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the host never held the doorbell"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    db.execute(&format!("SELECT pg_terminate_backend({killed})"))
        .await;
    wait_until("the host holds the doorbell again", WOKEN, || async {
        holder().await.is_some_and(|pid| pid != killed)
    })
    .await;
    let id = db.publish(entry("NOOP", "x")).await;
    db.wait_until_published(id, WOKEN).await;
    host.stop().await;
}
