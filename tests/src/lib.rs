//! Shared helpers for the integration tests and benchmarks: a fresh database schema per test, and the
//! paths of the plugins built from source by this crate's build script.

pub mod http_stub;
pub mod plugin_engine;
pub mod plugins;
pub mod scratch;
