//! Destination type `KAFKA`: produces each row to the topic named by its `destination`, keyed by its
//! `aggregate_id` (so one aggregate's rows share a partition and keep their order), with the
//! payload as the value and the row's headers plus `outbox-message-id` (the carrier id, for
//! consumers to drop repeats) and `outbox-event-type`.
//!
//! The relay hands over one row of an aggregate at a time and the host waits for the broker's
//! acknowledgement before this call returns, so per-aggregate order holds on the broker.

use outbox_sdk::kafka::{self, Record};
use outbox_sdk::{Envelope, Handler, PublishResult};

struct Kafka;

impl Handler for Kafka {
    fn destination_type() -> String {
        "KAFKA".to_string()
    }

    fn publish(envelope: Envelope) -> PublishResult {
        let mut headers: Vec<(String, Vec<u8>)> = envelope
            .headers
            .into_iter()
            .map(|(name, value)| (name, value.into_bytes()))
            .collect();
        headers.push(("outbox-message-id".into(), envelope.carrier_id.into_bytes()));
        headers.push(("outbox-event-type".into(), envelope.event_type.into_bytes()));
        let record = Record {
            topic: envelope.destination,
            key: envelope.aggregate_id.map(String::into_bytes),
            value: Some(envelope.payload.into_bytes()),
            headers,
        };
        match kafka::produce(&record) {
            Ok(()) => PublishResult::success(),
            Err(error) => error.into(),
        }
    }
}

outbox_sdk::export_handler!(Kafka);
