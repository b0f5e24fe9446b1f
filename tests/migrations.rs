//! Migrations on real PostgreSQL: the seed schema exactly, with the doorbell trigger of migration 0003
//! in place of the seed's per-row notify trigger (0002's doorbell table gone again); idempotent, and
//! placed in the configured schema with every statement qualified.

use outbox_host::api::{Inbox, Outbox};
use outbox_host::database::{self, SchemaName, Tables};
use outbox_host::relay::CHANNEL;
use outbox_host::repository::{ClaimScope, ClaimScopes, OutboxRepository};
use outbox_tests::db::{self, entry};
use sqlx::postgres::{PgConnectOptions, PgListener, PgNotification};
use sqlx::{Connection, PgConnection, PgPool};
use std::time::Duration;

/// An empty database of its own, dropped at the end of the test.
struct FreshDatabase {
    name: String,
    options: PgConnectOptions,
}

impl FreshDatabase {
    async fn new() -> FreshDatabase {
        let name = format!("t_mig_{}", uuid::Uuid::now_v7().simple());
        let admin = database::connect(db::options(), 1).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let options = db::options().database(&name);
        FreshDatabase { name, options }
    }

    async fn pool(&self) -> PgPool {
        database::connect(self.options.clone(), 2).await.unwrap()
    }

    async fn drop(self) {
        let admin = database::connect(db::options(), 1).await.unwrap();
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&admin)
            .await
            .unwrap();
    }
}

async fn rows(pool: &PgPool, sql: &str, schema: &str) -> Vec<String> {
    sqlx::query_scalar(sql)
        .bind(schema)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Every column, index, trigger, function and sequence in `schema`, as text lines.
async fn catalog(pool: &PgPool, schema: &str) -> Vec<String> {
    let mut lines = rows(
        pool,
        "SELECT table_name || '.' || column_name || ' ' || data_type || \
                coalesce('(' || character_maximum_length || ')', '') || \
                ' nullable=' || is_nullable || ' default=' || coalesce(column_default, '-') \
         FROM information_schema.columns WHERE table_schema = $1 AND table_name IN ('outbox', 'inbox', 'outbox_doorbell') \
         ORDER BY table_name, ordinal_position",
        schema,
    )
    .await;
    lines.extend(
        rows(
            pool,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
            schema,
        )
        .await,
    );
    lines.extend(
        rows(
            pool,
            "SELECT trigger_name || ' ' || action_timing || ' ' || event_manipulation || ' ON ' || \
                    event_object_table || ' FOR EACH ' || action_orientation || \
                    coalesce(' WHEN ' || action_condition, '') || ' ' || action_statement \
             FROM information_schema.triggers WHERE trigger_schema = $1 ORDER BY trigger_name",
            schema,
        )
        .await,
    );
    lines.extend(
        rows(
            pool,
            "SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = $1 ORDER BY p.proname",
            schema,
        )
        .await,
    );
    lines.extend(
        rows(pool, "SELECT 'sequence ' || sequence_name FROM information_schema.sequences WHERE sequence_schema = $1", schema)
            .await,
    );
    lines
}

/// The seed's tables and indexes (migration 0001), the doorbell trigger that replaced its trigger
/// (0003), the index of rows whose destination type is invalid (0004), the index of PENDING rows
/// without an aggregate (0005), and the index of live rows by id (0006).
const SCHEMA: &[&str] = &[
    "inbox.message_id character varying(255) nullable=NO default=-",
    "inbox.source character varying(255) nullable=NO default=-",
    "inbox.processed_at timestamp with time zone nullable=NO default=now()",
    "outbox.id bigint nullable=NO default=nextval('outbox_id_seq'::regclass)",
    "outbox.carrier_id uuid nullable=NO default=-",
    "outbox.aggregate_type character varying(255) nullable=YES default=-",
    "outbox.aggregate_id character varying(255) nullable=YES default=-",
    "outbox.event_type character varying(255) nullable=NO default=-",
    "outbox.destination character varying(255) nullable=NO default=-",
    "outbox.destination_type character varying(32) nullable=NO default=-",
    "outbox.payload jsonb nullable=NO default=-",
    "outbox.headers jsonb nullable=YES default=-",
    "outbox.metadata jsonb nullable=NO default='{}'::jsonb",
    "outbox.scheduled_at timestamp with time zone nullable=YES default=-",
    "outbox.available_at timestamp with time zone nullable=NO default=now()",
    "outbox.state character varying(32) nullable=NO default='PENDING'::character varying",
    "outbox.attempt integer nullable=NO default=0",
    "outbox.max_attempts integer nullable=NO default=20",
    "outbox.claimed_at timestamp with time zone nullable=YES default=-",
    "outbox.claimed_by character varying(255) nullable=YES default=-",
    "outbox.published_at timestamp with time zone nullable=YES default=-",
    "outbox.last_error text nullable=YES default=-",
    "outbox.error_type character varying(500) nullable=YES default=-",
    "outbox.created_at timestamp with time zone nullable=NO default=now()",
    "outbox.updated_at timestamp with time zone nullable=NO default=now()",
    "CREATE INDEX idx_inbox_processed_at ON public.inbox USING btree (processed_at)",
    "CREATE INDEX idx_outbox_aggregate ON public.outbox USING btree (aggregate_id, id) WHERE (((state)::text = ANY ((ARRAY['PENDING'::character varying, 'PROCESSING'::character varying])::text[])) AND (aggregate_id IS NOT NULL))",
    "CREATE INDEX idx_outbox_dead_letter ON public.outbox USING btree (updated_at) WHERE ((state)::text = 'DEAD_LETTER'::text)",
    "CREATE INDEX idx_outbox_invalid_destination_type ON public.outbox USING btree (id) WHERE (((state)::text = 'PENDING'::text) AND ((destination_type)::text !~ '^[A-Za-z0-9_-]{1,32}$'::text))",
    "CREATE INDEX idx_outbox_live ON public.outbox USING btree (id) WHERE ((state)::text = ANY ((ARRAY['PENDING'::character varying, 'PROCESSING'::character varying])::text[]))",
    "CREATE INDEX idx_outbox_pending ON public.outbox USING btree (available_at, id) WHERE ((state)::text = 'PENDING'::text)",
    "CREATE INDEX idx_outbox_pending_without_aggregate ON public.outbox USING btree (available_at, id) WHERE (((state)::text = 'PENDING'::text) AND (aggregate_id IS NULL))",
    "CREATE INDEX idx_outbox_processing ON public.outbox USING btree (claimed_at) WHERE ((state)::text = 'PROCESSING'::text)",
    "CREATE INDEX idx_outbox_published ON public.outbox USING btree (published_at) WHERE ((state)::text = 'PUBLISHED'::text)",
    "CREATE UNIQUE INDEX inbox_pkey ON public.inbox USING btree (message_id, source)",
    "CREATE UNIQUE INDEX outbox_carrier_id_key ON public.outbox USING btree (carrier_id)",
    "CREATE UNIQUE INDEX outbox_pkey ON public.outbox USING btree (id)",
    "transactional_outbox_doorbell AFTER INSERT ON outbox FOR EACH STATEMENT \
     WHEN (NOT pg_try_advisory_xact_lock_shared(1868719218, hashtext('public'::text))) \
     EXECUTE FUNCTION ring_outbox_doorbell()",
    "function ring_outbox_doorbell",
    "sequence outbox_id_seq",
];

#[tokio::test]
async fn migrate_on_an_empty_database_yields_the_seed_tables_and_the_doorbell() {
    let fresh = FreshDatabase::new().await;
    database::migrate(&fresh.options, None).await.unwrap();
    let pool = fresh.pool().await;
    let mut found = catalog(&pool, "public").await;
    found.retain(|line| !line.contains("_sqlx_migrations"));
    assert_eq!(found, SCHEMA);
    pool.close().await;
    fresh.drop().await;
}

/// A migrated empty database of its own (no other test's notifications reach it) and a listener on
/// the outbox channel.
async fn listening_database() -> (PgPool, PgListener, FreshDatabase) {
    let fresh = FreshDatabase::new().await;
    database::migrate(&fresh.options, None).await.unwrap();
    let mut listener = PgListener::connect_with(&fresh.pool().await).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    (fresh.pool().await, listener, fresh)
}

/// Publishes one entry in a transaction of its own on a connection of its own; returns that
/// connection's backend pid, which the notifications it causes carry.
async fn publish_from_own_connection(fresh: &FreshDatabase) -> u32 {
    let mut conn = PgConnection::connect_with(&fresh.options).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    Outbox::new(Tables::default())
        .publish(&mut tx, entry("A", "x"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    conn.close().await.unwrap();
    pid as u32
}

async fn next_notification(listener: &mut PgListener) -> PgNotification {
    tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification within 10 s")
        .unwrap()
}

#[tokio::test]
async fn an_insert_notifies_only_while_a_relay_holds_the_doorbell_and_with_an_empty_payload() {
    let (pool, mut listener, fresh) = listening_database().await;
    let repo = OutboxRepository::new(pool.clone(), Tables::default());
    let unarmed = publish_from_own_connection(&fresh).await;
    let mut lock = repo.doorbell_lock("test doorbell").await.unwrap();
    lock.arm().await.unwrap();
    let armed = publish_from_own_connection(&fresh).await;
    let notification = next_notification(&mut listener).await;
    assert_ne!(
        notification.process_id(),
        unarmed,
        "an unarmed insert notified"
    );
    assert_eq!(notification.process_id(), armed);
    assert_eq!(notification.payload(), "");
    lock.close().await;
    drop(listener);
    pool.close().await;
    fresh.drop().await;
}

#[tokio::test]
async fn a_released_doorbell_rings_nothing() {
    let (pool, mut listener, fresh) = listening_database().await;
    let repo = OutboxRepository::new(pool.clone(), Tables::default());
    let mut lock = repo.doorbell_lock("test doorbell").await.unwrap();
    lock.arm().await.unwrap();
    lock.disarm().await.unwrap();
    let silent = publish_from_own_connection(&fresh).await;
    lock.arm().await.unwrap();
    let rung = publish_from_own_connection(&fresh).await;
    let notification = next_notification(&mut listener).await;
    assert_ne!(notification.process_id(), silent);
    assert_eq!(notification.process_id(), rung);
    lock.close().await;
    drop(listener);
    pool.close().await;
    fresh.drop().await;
}

/// A second idle relay waits behind the first; while it waits inserts notify, and when the first
/// gets busy and releases the doorbell, the second holds it and inserts keep notifying.
#[tokio::test]
async fn a_relay_waiting_for_the_doorbell_is_rung_and_holds_it_when_the_holder_lets_go() {
    let (pool, mut listener, fresh) = listening_database().await;
    let repo = OutboxRepository::new(pool.clone(), Tables::default());
    let mut first = repo.doorbell_lock("test doorbell 1").await.unwrap();
    first.arm().await.unwrap();
    let mut second = repo.doorbell_lock("test doorbell 2").await.unwrap();
    let waiting = tokio::spawn(async move {
        second.arm().await.unwrap();
        second
    });
    wait_for_doorbell_waiters(&pool, 1).await;
    let pid = publish_from_own_connection(&fresh).await;
    assert_eq!(next_notification(&mut listener).await.process_id(), pid);
    first.disarm().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting relay holds the doorbell once the first lets go")
        .unwrap();
    let pid = publish_from_own_connection(&fresh).await;
    assert_eq!(next_notification(&mut listener).await.process_id(), pid);
    first.close().await;
    second.close().await;
    drop(listener);
    pool.close().await;
    fresh.drop().await;
}

/// A transaction that inserted before the relay asked for the doorbell holds the relay back until
/// it commits, and rings nothing: when the relay holds the doorbell, that row is visible to its
/// next claim. Every insert after the request notifies.
#[tokio::test]
async fn arming_waits_for_transactions_that_inserted_before_it() {
    let (pool, mut listener, fresh) = listening_database().await;
    let repo = OutboxRepository::new(pool.clone(), Tables::default());
    let mut open = PgConnection::connect_with(&fresh.options).await.unwrap();
    let mut tx = open.begin().await.unwrap();
    Outbox::new(Tables::default())
        .publish(&mut tx, entry("A", "x"))
        .await
        .unwrap();
    let mut lock = repo.doorbell_lock("test doorbell").await.unwrap();
    let arming = tokio::spawn(async move {
        lock.arm().await.unwrap();
        lock
    });
    wait_for_doorbell_waiters(&pool, 1).await;
    let during = publish_from_own_connection(&fresh).await;
    assert_eq!(next_notification(&mut listener).await.process_id(), during);
    assert!(
        !arming.is_finished(),
        "arming waits for the open transaction"
    );
    tx.commit().await.unwrap();
    let lock = tokio::time::timeout(Duration::from_secs(10), arming)
        .await
        .expect("arming ends once the transaction committed")
        .unwrap();
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE state = 'PENDING'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        pending, 2,
        "both rows are visible to the claim after arming"
    );
    let after = publish_from_own_connection(&fresh).await;
    assert_eq!(
        next_notification(&mut listener).await.process_id(),
        after,
        "the transaction open while arming rang nothing"
    );
    lock.close().await;
    open.close().await.unwrap();
    drop(listener);
    pool.close().await;
    fresh.drop().await;
}

/// Waits until `waiters` requests for an advisory lock wait in the database.
async fn wait_for_doorbell_waiters(pool: &PgPool, waiters: i64) {
    let sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
    for _ in 0..1000 {
        let found: i64 = sqlx::query_scalar(sql).fetch_one(pool).await.unwrap();
        if found == waiters {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{waiters} doorbell requests never waited");
}

#[tokio::test]
async fn a_second_migrate_changes_nothing() {
    let fresh = FreshDatabase::new().await;
    let schema = SchemaName::parse("messaging").unwrap();
    database::migrate(&fresh.options, Some(&schema))
        .await
        .unwrap();
    let pool = fresh.pool().await;
    let history = "SELECT version::text || ' ' || checksum::text FROM messaging._sqlx_migrations WHERE $1 <> ''";
    let before = (
        catalog(&pool, "messaging").await,
        rows(&pool, history, "x").await,
    );
    database::migrate(&fresh.options, Some(&schema))
        .await
        .unwrap();
    let after = (
        catalog(&pool, "messaging").await,
        rows(&pool, history, "x").await,
    );
    assert_eq!(before, after);
    pool.close().await;
    fresh.drop().await;
}

#[tokio::test]
async fn with_a_schema_every_object_lands_in_it() {
    let fresh = FreshDatabase::new().await;
    let schema = SchemaName::parse("messaging").unwrap();
    database::migrate(&fresh.options, Some(&schema))
        .await
        .unwrap();
    let pool = fresh.pool().await;
    let mut found = catalog(&pool, "messaging").await;
    found.retain(|line| !line.contains("_sqlx_migrations"));
    let expected: Vec<String> = SCHEMA
        .iter()
        .map(|line| {
            line.replace("public.", "messaging.")
                .replace(
                    "nextval('outbox_id_seq'",
                    "nextval('messaging.outbox_id_seq'",
                )
                .replace("FUNCTION ring", "FUNCTION messaging.ring")
                .replace("hashtext('public'", "hashtext('messaging'")
        })
        .collect();
    assert_eq!(found, expected);
    assert!(
        catalog(&pool, "public").await.is_empty(),
        "nothing lands in public"
    );
    pool.close().await;
    fresh.drop().await;
}

#[tokio::test]
async fn with_a_schema_every_statement_is_qualified() {
    let fresh = FreshDatabase::new().await;
    let schema = SchemaName::parse("messaging").unwrap();
    database::migrate(&fresh.options, Some(&schema))
        .await
        .unwrap();
    // Connections that would find nothing unqualified: the tables resolve only through the schema.
    let pool = database::connect(
        fresh
            .options
            .clone()
            .options([("search_path", "pg_catalog")]),
        2,
    )
    .await
    .unwrap();
    let tables = Tables::new(Some(schema));
    let repo = OutboxRepository::new(pool.clone(), tables.clone());
    // The relay and the trigger agree on the schema's doorbell: held, it makes the insert notify.
    let mut listener = PgListener::connect_with(&fresh.pool().await).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    let mut lock = repo.doorbell_lock("test doorbell").await.unwrap();
    lock.arm().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let id = Outbox::new(tables.clone())
        .publish(&mut tx, entry("A", "x"))
        .await
        .unwrap();
    let inbox = Inbox::new(tables.clone());
    inbox
        .process_once(&mut tx, "m", "s", async |_: &mut sqlx::PgConnection| {
            Ok::<_, outbox_host::api::PersistenceError>(())
        })
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(next_notification(&mut listener).await.payload(), "");
    let scopes = ClaimScopes::new().with("A", ClaimScope::All);
    assert_eq!(repo.claim_batch(10, "n", &scopes).await.unwrap().len(), 1);
    assert!(
        repo.mark_retry(id, "n", 1, Duration::ZERO, "e", None)
            .await
            .unwrap()
    );
    repo.claim_batch(10, "n", &scopes).await.unwrap();
    assert!(
        repo.mark_unresolvable(id, "n", Duration::ZERO)
            .await
            .unwrap()
    );
    repo.claim_batch(10, "n", &scopes).await.unwrap();
    assert!(repo.mark_dead_letter(id, "n", "e", None).await.unwrap());
    repo.reclaim_stale(Duration::from_secs(1)).await.unwrap();
    repo.cleanup_published(1, 10).await.unwrap();
    repo.cleanup_dead_letter(1, 10).await.unwrap();
    repo.cleanup_inbox(1, 10).await.unwrap();
    lock.disarm().await.unwrap();
    lock.close().await;
    assert!(repo.find(id).await.unwrap().is_some());
    pool.close().await;
    fresh.drop().await;
}
