//! Test-only: a working destination handler (type `RELAY_V0_1`), built against the 0.1.0 WIT kept
//! beside it rather than the SDK, so it exports `outbox:relay/handler@0.1.0` and imports
//! `outbox:relay/log@0.1.0`, as every plugin built before 0.2.0 does. The host must refuse it at
//! load, naming the version to rebuild with.

wit_bindgen::generate!({
    world: "outbox:relay/destination-handler",
    path: "wit",
});

use exports::outbox::relay::handler::Guest;
use outbox::relay::log::{Level, log};
use outbox::relay::types::{Envelope, PublishResult, Scope};

struct RelayV01;

impl Guest for RelayV01 {
    fn destination_type() -> String {
        "RELAY_V0_1".to_string()
    }

    fn claim_scope() -> Scope {
        Scope::All
    }

    fn publish(envelope: Envelope) -> PublishResult {
        log(
            Level::Info,
            &format!("entry {} published", envelope.entry_id),
        );
        PublishResult::Success
    }
}

export!(RelayV01);
