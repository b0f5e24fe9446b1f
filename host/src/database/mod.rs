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
    /// Something answered at the database address, but not in PostgreSQL's protocol: the URL most
    /// likely names another service's port (sqlx alone reports a nonsense message length).
    #[error(
        "the server at {address} does not speak the PostgreSQL protocol: is the database URL \
         pointing at another service (an HTTP server, say)?"
    )]
    NotPostgres {
        address: String,
        #[source]
        source: sqlx::Error,
    },
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

/// The query parameters sqlx 0.8 reads from a PostgreSQL URL (besides `options[NAME]`).
const URL_PARAMETERS: [&str; 17] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
];

/// The URL schemes sqlx reads as PostgreSQL.
const URL_SCHEMES: [&str; 2] = ["postgres", "postgresql"];

/// Parses a database URL. The error never echoes the URL: it may carry a password.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, DatabaseError> {
    refuse_unknown_scheme(url)?;
    refuse_unknown_parameters(url)?;
    PgConnectOptions::from_str(url)
        .map(|options| options.log_statements(tracing::log::LevelFilter::Trace))
        .map_err(|error| DatabaseError::InvalidUrl(error.to_string()))
}

/// sqlx takes any scheme, so a typo such as `postgress://` would otherwise go unnoticed. The scheme
/// is quoted only when it looks like one: text before `://` that is not may be part of a password.
fn refuse_unknown_scheme(url: &str) -> Result<(), DatabaseError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if scheme.is_some_and(|scheme| URL_SCHEMES.contains(&scheme)) {
        return Ok(());
    }
    let looks_like_a_scheme = |scheme: &&str| {
        scheme.len() <= 32
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let found = match scheme.filter(looks_like_a_scheme) {
        Some(scheme) => format!("unknown URL scheme `{scheme}://`"),
        None => "not a URL".to_owned(),
    };
    Err(DatabaseError::InvalidUrl(format!(
        "{found}: it must start with postgres:// or postgresql://"
    )))
}

/// sqlx logs the value of a query parameter it does not know, so a misspelt `Password=` would put a
/// password in the log: such a URL is refused first, naming the parameter by position only (in a URL
/// it cannot parse, what looks like a name may be part of a password).
fn refuse_unknown_parameters(url: &str) -> Result<(), DatabaseError> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    let query = query.split('#').next().unwrap_or_default();
    let unknown = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .position(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            !(URL_PARAMETERS.contains(&name) || name.starts_with("options[") && name.ends_with(']'))
        });
    match unknown {
        Some(index) => Err(DatabaseError::InvalidUrl(format!(
            "query parameter {} is not one PostgreSQL connections take (names are case-sensitive: \
             `password`, `sslmode`, ...)",
            index + 1
        ))),
        None => Ok(()),
    }
}

/// A pool sized for the relay loops, the marks, maintenance and the admin endpoint.
pub async fn connect(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, DatabaseError> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options.clone())
        .await
        .map_err(|error| connect_error(&options, error))
}

/// A failed connection attempt. A peer that answers in another protocol shows up in sqlx as a
/// truncated or malformed message during the start-up exchange; it is reported as what it is.
pub fn connect_error(options: &PgConnectOptions, error: sqlx::Error) -> DatabaseError {
    let foreign = match &error {
        sqlx::Error::Protocol(_) => true,
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    };
    if foreign {
        DatabaseError::NotPostgres {
            address: format!("{}:{}", options.get_host(), options.get_port()),
            source: error,
        }
    } else {
        DatabaseError::Connect(error)
    }
}

/// Applies every pending migration inside `schema` (created if missing), or the connection's default
/// schema. Runs on a connection of its own, so the `search_path` it sets never leaks into a pool.
pub async fn migrate(
    options: &PgConnectOptions,
    schema: Option<&SchemaName>,
) -> Result<(), DatabaseError> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .map_err(|error| connect_error(options, error))?;
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

/// Drops `schema` and everything in it, if it exists (the demo starts each run afresh).
pub async fn drop_schema(
    options: &PgConnectOptions,
    schema: &SchemaName,
) -> Result<(), DatabaseError> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .map_err(|error| connect_error(options, error))?;
    sqlx::raw_sql(&format!(
        "SET client_min_messages = warning; DROP SCHEMA IF EXISTS {schema} CASCADE"
    ))
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_the_parameters_postgres_takes_is_accepted() {
        let url =
            "postgres://app@db/x?sslmode=disable&password=pw&options[search_path]=a&port=5433";
        assert!(connect_options(url).is_ok());
    }

    #[test]
    fn a_misspelt_scheme_is_refused_naming_it() {
        let error = connect_options("postgress://app@db/x")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("unknown URL scheme `postgress://`"),
            "{error}"
        );
        assert!(connect_options("postgresql://app@db/x").is_ok());
    }

    #[test]
    fn text_that_is_not_a_url_is_refused_without_quoting_it() {
        let error = connect_options("app:hunter2@db/x").unwrap_err().to_string();
        assert!(error.contains("not a URL"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn an_unknown_parameter_is_refused_by_position_without_its_value() {
        let error = connect_options("postgres://app@db/x?sslmode=disable&Password=hunter2")
            .unwrap_err()
            .to_string();
        assert!(error.contains("query parameter 2"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
