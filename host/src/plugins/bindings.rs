//! The host's one set of generated types for the `outbox:relay` WIT package.
//!
//! Exactly one `bindgen!` per world: the observer world maps the interfaces it shares with the handler
//! world (`types`, `log`, `config`) onto the handler world's modules with `with`, so an `Envelope` is
//! one Rust type whichever world hands it over. WASI and `wasi:http` map onto the wasmtime crates'
//! bindings, whose host implementations we link.

/// Bindings of the `destination-handler` world; also the home of the shared interfaces.
pub mod handler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "outbox:relay/destination-handler",
        imports: {
            "outbox:relay/kafka.produce": async,
            "outbox:relay/http.send": async,
            "outbox:relay/http.send-encoded": async,
        },
        exports: { default: async },
        require_store_data_send: true,
        additional_derives: [PartialEq, Eq],
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Bindings of the `publish-observer` world.
pub mod observer {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "outbox:relay/publish-observer",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "outbox:relay/types": super::handler::outbox::relay::types,
            "outbox:relay/log": super::handler::outbox::relay::log,
            "outbox:relay/config": super::handler::outbox::relay::config,
        },
    });
}

pub use handler::outbox::relay::kafka::{KafkaRecord, ProduceResult};
pub use handler::outbox::relay::log::Level;
pub use handler::outbox::relay::types::{
    EntryDisposition, Envelope, Failure, PublishCompleted, PublishOutcome, PublishResult,
    RetryableFailure, Scope,
};
pub use handler::{DestinationHandler, DestinationHandlerPre};
pub use observer::{PublishObserver, PublishObserverPre};
