//! Destination type `NOOP`: accepts every row and does nothing else, so a benchmark through it
//! measures the relay and the plugin runtime alone.

use outbox_sdk::{Envelope, Handler, PublishResult};

struct Noop;

impl Handler for Noop {
    fn destination_type() -> String {
        "NOOP".to_string()
    }

    fn publish(_envelope: Envelope) -> PublishResult {
        PublishResult::success()
    }
}

outbox_sdk::export_handler!(Noop);
