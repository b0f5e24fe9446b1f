//! Shared helpers for the integration tests and benchmarks: a fresh database schema per test, the
//! paths of the plugins built from source by this crate's build script, and small servers and
//! directories the tests need.

pub mod binary;
pub mod db;
pub mod drain;
pub mod fault_load;
pub mod host;
pub mod host_process;
pub mod http_stub;
pub mod kafka_broker;
pub mod latency;
pub mod load;
pub mod log_capture;
pub mod own_server;
pub mod plugin_engine;
pub mod plugins;
pub mod rounds;
pub mod scratch;
pub mod sdk_plugins;
pub mod tcp_proxy;
pub mod webhook_receiver;
