//! The one place WIT bindings are generated. Both worlds share the `types`, `log` and `config`
//! modules of the first, so an `Envelope` is one Rust type whichever world a plugin exports.

/// Bindings for the `destination-handler` world (also the home of the shared interfaces).
pub mod destination_handler {
    wit_bindgen::generate!({
        world: "outbox:relay/destination-handler",
        path: "../../wit",
        // The export macro is invoked by plugin crates, through `outbox_sdk::export_handler!`.
        pub_export_macro: true,
        default_bindings_module: "outbox_sdk::bindings::destination_handler",
        // The WASI interfaces that `wasi:http` depends on (io, clocks) are generated here too.
        generate_all,
    });
}

/// Bindings for the `publish-observer` world, reusing the shared interfaces above.
pub mod publish_observer {
    wit_bindgen::generate!({
        world: "outbox:relay/publish-observer",
        path: "../../wit",
        pub_export_macro: true,
        default_bindings_module: "outbox_sdk::bindings::publish_observer",
        with: {
            "outbox:relay/types@0.2.0": crate::bindings::destination_handler::outbox::relay::types,
            "outbox:relay/log@0.2.0": crate::bindings::destination_handler::outbox::relay::log,
            "outbox:relay/config@0.2.0": crate::bindings::destination_handler::outbox::relay::config,
        },
    });
}
