//! A publish observer that logs one line per publish attempt: the row, how it went, where it
//! ended up and how long it took. It never logs the payload, the headers or the destination (a
//! webhook URL may carry a secret).

use outbox_sdk::{Envelope, Observer, PublishCompleted};

struct Stats;

impl Observer for Stats {
    fn on_publish_completed(event: PublishCompleted, _envelope: Envelope) {
        let recorded = if event.disposition_recorded {
            "recorded"
        } else {
            "not recorded"
        };
        outbox_sdk::log!(
            info,
            "{} entry {}: {}, {} ({recorded}) in {}.{:03} ms",
            event.destination_type,
            event.entry_id,
            event.outcome.as_str(),
            event.disposition.as_str(),
            event.elapsed_micros / 1000,
            event.elapsed_micros % 1000,
        );
    }
}

outbox_sdk::export_observer!(Stats);
