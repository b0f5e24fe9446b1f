//! A fresh schema per test, migrated, so tests run in parallel on one database.

use outbox_host::api::{Inbox, Outbox, OutboxEntry};
use outbox_host::database::{self, SchemaName, Tables};
use outbox_host::repository::OutboxRepository;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::OnceCell;

/// `DATABASE_URL`, else the local server's `test` database.
pub fn url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| database::DEFAULT_URL.to_owned())
}

pub fn options() -> PgConnectOptions {
    database::connect_options(&url()).expect("a valid DATABASE_URL")
}

/// One migrated schema of its own.
pub struct TestDb {
    pub pool: PgPool,
    pub schema: SchemaName,
    pub tables: Tables,
}

static SWEPT: OnceCell<()> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "t_";

impl TestDb {
    pub async fn new() -> TestDb {
        let admin = database::connect(options(), 2)
            .await
            .expect("PostgreSQL is reachable");
        SWEPT.get_or_init(|| sweep_old_schemas(&admin)).await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let name = format!(
            "{PREFIX}{now}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let schema = SchemaName::parse(&name).unwrap();
        database::migrate(&options(), Some(&schema))
            .await
            .expect("migrations apply");
        admin.close().await;
        let pool = database::connect(options(), 8)
            .await
            .expect("PostgreSQL is reachable");
        let tables = Tables::new(Some(schema.clone()));
        TestDb {
            pool,
            schema,
            tables,
        }
    }

    pub fn repository(&self) -> OutboxRepository {
        OutboxRepository::new(self.pool.clone(), self.tables.clone())
    }

    pub fn outbox(&self) -> Outbox {
        Outbox::new(self.tables.clone())
    }

    pub fn inbox(&self) -> Inbox {
        Inbox::new(self.tables.clone())
    }

    /// Publishes one entry in a transaction of its own and returns its id.
    pub async fn publish(&self, entry: OutboxEntry) -> i64 {
        let mut tx = self.pool.begin().await.unwrap();
        let id = self
            .outbox()
            .publish(&mut tx, entry)
            .await
            .expect("entry is valid");
        tx.commit().await.unwrap();
        id
    }

    /// Runs one statement with `{outbox}` and `{inbox}` replaced by the qualified table names.
    pub async fn execute(&self, sql: &str) -> u64 {
        let sql = self.qualify(sql);
        sqlx::query(&sql)
            .execute(&self.pool)
            .await
            .unwrap()
            .rows_affected()
    }

    /// One scalar from a statement with `{outbox}` and `{inbox}` replaced.
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        let sql = self.qualify(sql);
        sqlx::query_scalar(&sql)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Rows in `state`.
    pub async fn count(&self, state: &str) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM {{outbox}} WHERE state = '{state}'"
        ))
        .await
    }

    /// Puts row `id` in the state the relay leaves a dead letter in: three attempts made, the error
    /// recorded, dead-lettered `age_secs` ago.
    pub async fn dead_letter(&self, id: i64, error_type: &str, last_error: &str, age_secs: u32) {
        let updated = sqlx::query(&self.qualify(
            "UPDATE {outbox} SET state = 'DEAD_LETTER', attempt = 3, max_attempts = 3, \
             error_type = $2, last_error = $3, claimed_by = 'relay-0', \
             updated_at = NOW() - $4 * INTERVAL '1 second' WHERE id = $1",
        ))
        .bind(id)
        .bind(error_type)
        .bind(last_error)
        .bind(i64::from(age_secs))
        .execute(&self.pool)
        .await
        .unwrap()
        .rows_affected();
        assert_eq!(updated, 1, "row {id} exists");
    }

    pub async fn state_of(&self, id: i64) -> String {
        self.scalar(&format!("SELECT state FROM {{outbox}} WHERE id = {id}"))
            .await
    }

    fn qualify(&self, sql: &str) -> String {
        sql.replace("{outbox}", self.tables.outbox())
            .replace("{inbox}", self.tables.inbox())
    }
}

/// Schemas that earlier runs left behind: dropped once they are an hour old, so parallel runs keep theirs.
async fn sweep_old_schemas(pool: &PgPool) {
    let cutoff = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 't\\_%\\_%\\_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    for name in names {
        let created = name
            .trim_start_matches(PREFIX)
            .split('_')
            .next()
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|secs| secs < cutoff) {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .execute(pool)
                .await;
        }
    }
}

/// An entry for `destination_type`/`destination` with a small payload.
pub fn entry(destination_type: &str, destination: &str) -> OutboxEntry {
    OutboxEntry::new(
        "test.event",
        destination_type,
        destination,
        serde_json::json!({"n": 1}),
    )
}
