//! Write destination handlers and publish observers for outbox-host in Rust.
//!
//! A tour: implement [`Handler`] and call [`export_handler!`] (or [`Observer`] and
//! [`export_observer!`]); read the row through [`Envelope`]; answer with [`PublishResult`]. The
//! host's capabilities are in [`log`](mod@log) (with the [`log!`] macro), [`config`], [`http`]
//! and [`kafka`]; each works only as far as the plugin's manifest grants.
//!
//! ```ignore
//! use outbox_sdk::{Envelope, Handler, PublishResult};
//!
//! struct Audit;
//!
//! impl Handler for Audit {
//!     fn destination_type() -> String {
//!         "AUDIT".into()
//!     }
//!
//!     fn publish(envelope: Envelope) -> PublishResult {
//!         outbox_sdk::log!(info, "entry {} received", envelope.entry_id);
//!         PublishResult::success()
//!     }
//! }
//!
//! outbox_sdk::export_handler!(Audit);
//! ```

#[doc(hidden)]
pub mod bindings;
pub mod config;
mod envelope;
mod export;
pub mod http;
pub mod kafka;
pub mod log;
mod result;
mod retry_after;

pub use envelope::{Envelope, PayloadError};
pub use export::{Handler, Observer};
/// Re-exported so a plugin can build and read JSON without its own dependency.
pub use serde_json;

pub use bindings::destination_handler::outbox::relay::types::{
    EntryDisposition, Failure, PublishCompleted, PublishOutcome, PublishResult, RetryableFailure,
    Scope,
};

/// Exports a type implementing [`Handler`] as this component's `destination-handler`.
///
/// Call it once, at the top level of the plugin crate, with the type's name.
#[macro_export]
macro_rules! export_handler {
    ($handler:ident) => {
        $crate::bindings::destination_handler::export!(
            $handler with_types_in $crate::bindings::destination_handler
        );
    };
}

/// Exports a type implementing [`Observer`] as this component's `publish-observer`.
///
/// Call it once, at the top level of the plugin crate, with the type's name.
#[macro_export]
macro_rules! export_observer {
    ($observer:ident) => {
        $crate::bindings::publish_observer::export!(
            $observer with_types_in $crate::bindings::publish_observer
        );
    };
}

/// Formats a line and sends it to the host's log at the given level:
/// `outbox_sdk::log!(warn, "retrying entry {}", id)`. Levels: `trace`, `debug`, `info`, `warn`,
/// `error`. Keep payloads and header values out of log lines.
#[macro_export]
macro_rules! log {
    ($level:ident, $($format:tt)+) => {
        $crate::log::$level(&::std::format!($($format)+))
    };
}
