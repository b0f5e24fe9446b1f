//! outbox-host: a transactional-outbox relay for PostgreSQL.
//!
//! A short tour:
//! - [`plugins`]: the WebAssembly plugin runtime: engine, loader, registry of a plugins directory,
//!   the sandbox and host capabilities, and the mock envelope runner;
//! - [`cli`]: the `outbox-host` command line.

pub mod cli;
pub mod plugins;
