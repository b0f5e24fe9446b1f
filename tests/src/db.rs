//! A fresh schema per test, migrated, so tests run in parallel on one database.

use outbox_host::api::{Inbox, Outbox, OutboxEntry};
use outbox_host::database::{self, SchemaName, Tables};
use outbox_host::repository::{DOORBELL_LOCK_CLASS, OutboxRepository};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::OnceCell;

/// `DATABASE_URL`, else the local server's `test` database.
pub fn url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| database::DEFAULT_URL.to_owned())
}

pub fn options() -> PgConnectOptions {
    database::connect_options(&url()).expect("a valid DATABASE_URL")
}

/// Who holds or waits for a schema's doorbell lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doorbell {
    pub held: i64,
    pub waiting: i64,
}

/// One migrated schema of its own.
pub struct TestDb {
    pub pool: PgPool,
    pub schema: SchemaName,
    pub tables: Tables,
    /// The URL of the database the schema is in.
    pub url: String,
}

static SWEPT: OnceCell<()> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "t_";
/// Databases of their own are named `t_db_<secs>_<pid>_<n>`.
const DATABASE_PREFIX: &str = "t_db_";

impl TestDb {
    /// A schema of its own in the shared `DATABASE_URL` database.
    pub async fn new() -> TestDb {
        TestDb::create(url()).await
    }

    /// A schema in a database of its own. Notifications go to every listener of a database, so a
    /// relay here is woken by no other test's inserts. A later run drops it once it is an hour old.
    pub async fn in_a_database_of_its_own() -> TestDb {
        let admin = database::connect(options(), 1)
            .await
            .expect("PostgreSQL is reachable");
        let name = unique_name(DATABASE_PREFIX);
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("a test database can be created");
        admin.close().await;
        let shared = url();
        let (address, query) = shared.split_once('?').unwrap_or((&shared, ""));
        let (server, _) = address.rsplit_once('/').expect("a URL with a database");
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        TestDb::create(format!("{server}/{name}{query}")).await
    }

    /// A schema of its own in the database at `url` (a server of the test's own, say).
    pub async fn at(url: String) -> TestDb {
        TestDb::create(url).await
    }

    async fn create(url: String) -> TestDb {
        let options = database::connect_options(&url).expect("a valid test database URL");
        let admin = database::connect(options.clone(), 2)
            .await
            .expect("PostgreSQL is reachable");
        SWEPT.get_or_init(|| sweep_old_schemas(&admin)).await;
        let schema = SchemaName::parse(&unique_name(PREFIX)).unwrap();
        database::migrate(&options, Some(&schema))
            .await
            .expect("migrations apply");
        admin.close().await;
        let pool = database::connect(options, 8)
            .await
            .expect("PostgreSQL is reachable");
        let tables = Tables::new(Some(schema.clone()));
        TestDb {
            pool,
            schema,
            tables,
            url,
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

    /// Relays holding the doorbell lock of this schema (migration 0003), and relays waiting for it.
    pub async fn doorbell_requests(&self) -> Doorbell {
        let (held, waiting) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) \
             FROM pg_locks \
             WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND objsubid = 2 \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND classid = $1::oid AND objid = hashtext($2)::oid",
        )
        .bind(i64::from(DOORBELL_LOCK_CLASS))
        .bind(self.schema.as_str())
        .fetch_one(&self.pool)
        .await
        .unwrap();
        Doorbell { held, waiting }
    }

    /// Installs a trigger noting `synchronous_commit` as each mark that publishes a row sees it
    /// (read back with [`TestDb::synchronous_commit_of_marks`]).
    pub async fn note_synchronous_commit_of_marks(&self) {
        let schema = &self.schema;
        self.execute(&format!(
            "CREATE TABLE {schema}.synchronous_commit_seen (setting text)"
        ))
        .await;
        self.execute(&format!(
            "CREATE FUNCTION {schema}.note_synchronous_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               INSERT INTO {schema}.synchronous_commit_seen VALUES (current_setting('synchronous_commit')); \
               RETURN NEW; END; $$"
        ))
        .await;
        self.execute(&format!(
            "CREATE TRIGGER note_synchronous_commit BEFORE UPDATE ON {{outbox}} FOR EACH ROW \
             WHEN (NEW.state = 'PUBLISHED') EXECUTE FUNCTION {schema}.note_synchronous_commit()"
        ))
        .await;
    }

    /// The distinct settings the marks noted since [`TestDb::note_synchronous_commit_of_marks`].
    pub async fn synchronous_commit_of_marks(&self) -> Vec<String> {
        self.scalar(&format!(
            "SELECT coalesce(array_agg(DISTINCT setting), '{{}}') FROM {}.synchronous_commit_seen",
            self.schema
        ))
        .await
    }

    /// Waits, at most `bound`, until row `id` is PUBLISHED.
    pub async fn wait_until_published(&self, id: i64, bound: Duration) {
        crate::host::wait_until("the row is published", bound, || async {
            self.state_of(id).await == "PUBLISHED"
        })
        .await;
    }

    /// Row `id`'s carrier id, as text.
    pub async fn carrier_id(&self, id: i64) -> String {
        self.scalar(&format!(
            "SELECT carrier_id::text FROM {{outbox}} WHERE id = {id}"
        ))
        .await
    }

    /// Waits, at most `bound`, until no row is left to relay (none PENDING or PROCESSING). Each look
    /// is two probes of the partial indexes, so polling a large backlog costs it next to nothing.
    pub async fn wait_until_settled(&self, bound: Duration) {
        crate::host::wait_until("every row is settled", bound, || async {
            !self
                .scalar::<bool>(
                    "SELECT EXISTS (SELECT 1 FROM {outbox} WHERE state = 'PENDING') \
                     OR EXISTS (SELECT 1 FROM {outbox} WHERE state = 'PROCESSING')",
                )
                .await
        })
        .await;
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

/// `prefix`, the time in seconds, the process id and a counter: unique across parallel runs, and
/// old ones can be told by their name.
fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}{}_{}_{}",
        now_secs(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Schemas (in this database) and databases of their own that earlier runs left behind: dropped once
/// they are an hour old, so parallel runs keep theirs.
async fn sweep_old_schemas(pool: &PgPool) {
    let cutoff = now_secs() - 3600;
    let created_before_cutoff = |name: &str, prefix: &str| {
        name.trim_start_matches(prefix)
            .split('_')
            .next()
            .and_then(|secs| secs.parse::<u64>().ok())
            .is_some_and(|secs| secs < cutoff)
    };
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 't\\_%\\_%\\_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    for name in schemas {
        if created_before_cutoff(&name, PREFIX) {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .execute(pool)
                .await;
        }
    }
    let databases: Vec<String> = sqlx::query_scalar(
        "SELECT datname::text FROM pg_database WHERE datname LIKE 't\\_db\\_%\\_%\\_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    for name in databases {
        if created_before_cutoff(&name, DATABASE_PREFIX) {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
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
