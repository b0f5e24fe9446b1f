//! The plugin runtime's errors. None of their messages carries a payload, a header value or a
//! claim-scope target: they name files, keys, limits and trap codes only.

use std::path::PathBuf;

use crate::error_type::HostErrorType;
use crate::plugins::manifest::ManifestError;

/// The plugin runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
    /// Without a watch the plugins would lag the files, so the host does not start.
    #[error("cannot watch the plugins directory {dir}: {source}")]
    Watch { dir: PathBuf, source: notify::Error },
}

/// A plugin file was not loaded; its destination type claims nothing.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest {path}: {source}")]
    Manifest {
        path: PathBuf,
        source: ManifestError,
    },
    #[error("not a WebAssembly component this host can compile: {0}")]
    Compile(String),
    #[error(
        "implements no known world: it exports neither `{}` nor `{}`",
        crate::plugins::World::HANDLER_EXPORT,
        crate::plugins::World::OBSERVER_EXPORT
    )]
    UnknownWorld,
    /// Built against another version of the WIT package: its types may differ, so it is not run.
    #[error(
        "was built for outbox:relay@{found}, and this host runs outbox:relay@{}: rebuild it \
         with outbox:relay@{} (this host's wit/ and sdk/)",
        crate::plugins::loader::WIT_VERSION,
        crate::plugins::loader::WIT_VERSION
    )]
    WitVersion { found: String },
    #[error(
        "exports both `{}` and `{}`; a component implements one world",
        crate::plugins::World::HANDLER_EXPORT,
        crate::plugins::World::OBSERVER_EXPORT
    )]
    TwoWorlds,
    #[error("the manifest grants `{capability}`, which the publish-observer world does not have")]
    CapabilityOutsideWorld { capability: &'static str },
    #[error("cannot be linked against the host: {0}")]
    Link(String),
    #[error("declares an {0}")]
    DestinationType(#[from] crate::destination_type::InvalidDestinationType),
    #[error("`{function}` failed while loading: {source}")]
    Call {
        function: &'static str,
        source: CallError,
    },
}

/// A call into a plugin did not return normally. Every kind is retryable for the relay: the
/// instance is retired and the next call runs on another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("the call ran past its time limit of {limit_ms} ms")]
    Timeout { limit_ms: u64 },
    #[error("the plugin trapped: {reason}")]
    Trap { reason: String },
    #[error("the plugin went past its memory limit of {limit_mb} MiB")]
    Memory { limit_mb: u32 },
    /// No instance could be made: the plugin failed while being instantiated.
    #[error("no instance of the plugin could be made: {reason}")]
    Instantiate { reason: String },
    /// No instance could be made because the engine's instance pool (`plugins.max_instances`) was
    /// full: the host's capacity, not the plugin's failure.
    #[error(
        "no instance of the plugin could be made: every instance of the engine's pool is taken (plugins.max_instances)"
    )]
    PoolFull,
}

impl CallError {
    /// The error type the relay records.
    pub fn error_type(&self) -> HostErrorType {
        match self {
            Self::Timeout { .. } => HostErrorType::Timeout,
            Self::Trap { .. } => HostErrorType::Trap,
            Self::Memory { .. } => HostErrorType::Memory,
            Self::Instantiate { .. } | Self::PoolFull => HostErrorType::Instantiate,
        }
    }
}
