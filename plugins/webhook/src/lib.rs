//! Destination type `WEBHOOK`: POSTs each row's JSON payload to the URL in its `destination`,
//! with the row's headers and `Idempotency-Key: <carrier id>` so the receiver can drop repeats.
//!
//! Failure messages name the status and the host only, never the payload or a header value.

use outbox_sdk::http::{self, Request};
use outbox_sdk::{Envelope, Handler, PublishResult};

struct Webhook;

impl Handler for Webhook {
    fn destination_type() -> String {
        "WEBHOOK".to_string()
    }

    fn publish(envelope: Envelope) -> PublishResult {
        let host = http::authority(&envelope.destination)
            .unwrap_or("the webhook")
            .to_string();
        let mut request = Request::post(&envelope.destination);
        for (name, value) in envelope.headers {
            request = request.header(name, value);
        }
        let request = request
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", envelope.carrier_id)
            .body(envelope.payload);
        match request.send() {
            Ok(response) => result_of_status(response.status, &host),
            Err(error) => error.into(),
        }
    }
}

/// 408 and 429 ask the client to come back later and a 5xx may pass on another try; any other
/// status fails the same way every time (a 3xx too, since redirects are not followed).
fn result_of_status(status: u16, host: &str) -> PublishResult {
    let message = format!("{host} answered HTTP {status}");
    match status {
        200..=299 => PublishResult::success(),
        408 | 429 | 500..=599 => PublishResult::retryable(message).with_error_type("http-status"),
        _ => PublishResult::permanent(message).with_error_type("http-status"),
    }
}

outbox_sdk::export_handler!(Webhook);
