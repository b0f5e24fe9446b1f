//! Test-only publish observer: logs one `key=value` line per event, which the relay tests read
//! back to check what observers were told and when. With `[config] trap = "true"` it panics
//! after logging, so tests can show that a failing observer changes nothing.

use outbox_sdk::{Envelope, Observer, PublishCompleted};

struct Recorder;

impl Observer for Recorder {
    fn on_publish_completed(event: PublishCompleted, _envelope: Envelope) {
        outbox_sdk::log!(
            info,
            "publish-completed entry_id={} attempt={} outcome={} disposition={} disposition_recorded={} error_type={}",
            event.entry_id,
            event.attempt,
            event.outcome.as_str(),
            event.disposition.as_str(),
            event.disposition_recorded,
            event.error_type.as_deref().unwrap_or("none"),
        );
        if outbox_sdk::config::get("trap").as_deref() == Some("true") {
            panic!("recorder told to trap");
        }
    }
}

outbox_sdk::export_observer!(Recorder);
