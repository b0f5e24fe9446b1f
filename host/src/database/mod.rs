//! Connecting to PostgreSQL, placing the objects in the configured schema, and applying migrations.

mod schema_name;

pub use schema_name::{InvalidSchemaName, SchemaName};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};
use std::str::FromStr;
use std::time::Duration;

/// The local server's `test` database: what a fresh machine has.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The migrations in `migrations/`, embedded so the binary applies exactly what it was built with.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Table names as every statement writes them: qualified with the schema when one is configured.
#[derive(Clone, Debug)]
pub struct Tables {
    schema: Option<SchemaName>,
    outbox: String,
    inbox: String,
}

impl Tables {
    pub fn new(schema: Option<SchemaName>) -> Self {
        let qualify = |table: &str| match &schema {
            Some(schema) => format!("{schema}.{table}"),
            None => table.to_owned(),
        };
        Tables {
            outbox: qualify("outbox"),
            inbox: qualify("inbox"),
            schema,
        }
    }

    pub fn schema(&self) -> Option<&SchemaName> {
        self.schema.as_ref()
    }

    pub fn outbox(&self) -> &str {
        &self.outbox
    }

    pub fn inbox(&self) -> &str {
        &self.inbox
    }
}

impl Default for Tables {
    fn default() -> Self {
        Tables::new(None)
    }
}

/// Parses a database URL. The error never echoes the URL: it may carry a password.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, DatabaseError> {
    PgConnectOptions::from_str(url)
        .map(|options| options.log_statements(tracing::log::LevelFilter::Trace))
        .map_err(|error| DatabaseError::InvalidUrl(error.to_string()))
}

/// A pool sized for the relay loops, the marks, maintenance and the admin endpoint.
pub async fn connect(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, DatabaseError> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(DatabaseError::Connect)
}

/// Applies every pending migration inside `schema` (created if missing), or the connection's default
/// schema. Runs on a connection of its own, so the `search_path` it sets never leaks into a pool.
pub async fn migrate(
    options: &PgConnectOptions,
    schema: Option<&SchemaName>,
) -> Result<(), DatabaseError> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .map_err(DatabaseError::Connect)?;
    if let Some(schema) = schema {
        sqlx::raw_sql(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema}"
        ))
        .execute(&mut conn)
        .await?;
    }
    MIGRATOR.run(&mut conn).await?;
    conn.close().await?;
    Ok(())
}
