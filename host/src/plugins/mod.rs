//! The plugin runtime: destination handlers and publish observers as sandboxed WebAssembly
//! components (DESIGN §4–§5).
//!
//! A tour, in the order a plugin meets it:
//! - [`engine`]: the wasmtime engine (pooling allocator, epoch interruption, the linker with every
//!   host capability) and [`cache`], the compiled-component cache on disk;
//! - [`loader`]: one `<stem>.wasm` plus its [`manifest`], classified by world and pre-instantiated;
//! - [`registry`]: a whole plugins directory as an immutable [`PluginSet`], and [`watcher`],
//!   which swaps in a new set when the directory changes (hot reload); [`compiling`] tells which
//!   files are loading meanwhile;
//! - [`handler`] and [`observer`]: what the relay calls; each call runs on an instance from the
//!   plugin's `pool`, inside the `sandbox` (memory and time limits), with the host
//!   [`capabilities`] the manifest grants;
//! - [`mock`]: the mock envelope runner behind `outbox-host plugin test` and `plugin inspect`;
//! - [`bindings`]: the one set of types generated from `wit/relay.wit`.

pub mod bindings;
pub mod cache;
pub mod capabilities;
pub mod compiling;
pub mod engine;
pub mod error;
pub mod handler;
pub mod loader;
pub mod manifest;
pub mod mock;
pub mod observer;
mod pool;
pub mod registry;
mod sandbox;
pub mod stats;
pub mod watcher;

pub use bindings::{
    EntryDisposition, Envelope, Failure, KafkaRecord, Level, ProduceResult, PublishCompleted,
    PublishOutcome, PublishResult, RetryableFailure, Scope,
};
pub use cache::{CompileSource, ContentHash};
pub use compiling::Compiling;
pub use engine::{ComponentCaps, EngineConfig, PluginEngine};
pub use error::{CallError, LoadError, PluginError};
pub use handler::{HandlerPlugin, ScopeSummary};
pub use loader::{LoadedPlugin, Plugin, World};
pub use manifest::{Limits, Manifest, ManifestError};
pub use observer::ObserverPlugin;
pub use pool::{NotStarted, PoolPolicy};
pub use registry::{FileChange, PluginSet, PluginState, PluginStatus};
pub use stats::CallStatsSnapshot;
pub use watcher::{PluginWatcher, WatchSettings};
