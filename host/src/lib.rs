//! outbox-host: a transactional-outbox relay for PostgreSQL whose destination handlers are sandboxed
//! WebAssembly components.
//!
//! A tour, in the order a row travels:
//! - [`api`]: applications write outbox rows (and deduplicate inbox messages) in their own transaction.
//! - [`database`]: connecting, the configured schema, migrations.
//! - [`repository`]: every statement on the tables: claim, owner-guarded marks, lease recovery, cleanup.
//! - [`plugins`]: the WebAssembly runtime: engine, loading, sandbox, capabilities, the plugin set.
//! - [`relay`]: the loops that claim rows, call plugins and record outcomes; [`maintenance`]: lease
//!   recovery and retention on cron schedules.
//! - [`service`]: everything `outbox-host run` starts; [`signals`]: its events, to wait on;
//!   [`admin`] and [`metrics`]: what operators see;
//!   [`dlq`]: dead letters listed, redriven and purged.
//! - [`log_output`]: where log lines go, so that logging can never fail or block the host.
//! - [`config`] and [`cli`]: the service's configuration and the `outbox-host` command line.
//! - [`demo`]: `outbox-host demo`, the whole service at work on sample rows; start here to watch it run.

pub mod admin;
pub mod api;
pub mod cli;
pub mod config;
pub mod database;
pub mod demo;
pub mod destination_type;
pub mod dlq;
pub mod error_type;
pub mod log_output;
pub mod maintenance;
pub mod metrics;
pub mod plugins;
pub mod relay;
pub mod repository;
pub mod service;
pub mod signals;
pub mod text;
