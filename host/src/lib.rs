//! outbox-host: a transactional-outbox relay for PostgreSQL whose destination handlers are sandboxed
//! WebAssembly components.
//!
//! A tour, in the order a row travels:
//! - [`api`]: applications write outbox rows (and deduplicate inbox messages) in their own transaction.
//! - [`database`]: connecting, the configured schema, migrations.
//! - [`repository`]: every statement on the tables: claim, owner-guarded marks, lease recovery, cleanup.
//! - [`config`] and [`cli`]: the service's configuration and the `outbox-host` command line.

pub mod api;
pub mod cli;
pub mod config;
pub mod database;
pub mod destination_type;
pub mod repository;
pub mod text;
