//! Destination type `WEBHOOK`: POSTs each row's JSON payload to the URL in its `destination`,
//! with the row's headers and `Idempotency-Key: <carrier id>` so the receiver can drop repeats.
//!
//! With `[config] signing_secrets` set, every request is signed per the Standard Webhooks
//! specification (see [`signing`]); a secret that cannot be used fails the row permanently rather
//! than sending it unsigned.
//!
//! A 429 or 503 with a `Retry-After` header (delta-seconds or an HTTP-date) is retried after that
//! delay (the host keeps it within its backoff maximum); 408, 429 and 5xx are retryable, any other
//! status permanent.
//!
//! Failure messages name the status and the host only, never the payload, a header value or a
//! secret.

mod signing;

use std::time::Duration;

use outbox_sdk::http::{self, Request};
use outbox_sdk::{Envelope, Handler, PublishResult};

use signing::{SECRETS_KEY, Secrets};

struct Webhook;

impl Handler for Webhook {
    fn destination_type() -> String {
        "WEBHOOK".to_string()
    }

    fn publish(envelope: Envelope) -> PublishResult {
        let secrets = match outbox_sdk::config::get(SECRETS_KEY).map(|value| Secrets::parse(&value))
        {
            None => None,
            Some(Ok(secrets)) => Some(secrets),
            Some(Err(error)) => {
                return PublishResult::permanent(error.to_string()).with_error_type("config");
            }
        };
        let host = http::authority(&envelope.destination)
            .unwrap_or("the webhook")
            .to_string();
        let mut request = Request::post(&envelope.destination);
        for (name, value) in envelope.headers {
            request = request.header(name, value);
        }
        request = request
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", &envelope.carrier_id);
        // Set after the row's own headers, so a row cannot bring signature headers of its own.
        if let Some(secrets) = secrets {
            let Some(timestamp) = signing::unix_seconds_now() else {
                return PublishResult::retryable("the wall clock reads before 1970")
                    .with_error_type("clock");
            };
            let signature =
                secrets.signature(&envelope.carrier_id, timestamp, envelope.payload.as_bytes());
            request = request
                .header("webhook-id", &envelope.carrier_id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature);
        }
        match request.body(envelope.payload).send() {
            Ok(response) => result_of_status(response.status, &host, response.retry_after()),
            Err(error) => error.into(),
        }
    }
}

/// 408 and 429 ask the client to come back later and a 5xx may pass on another try; any other
/// status fails the same way every time (a 3xx too, since redirects are not followed). A 429 or
/// 503 may say when to come back (`Retry-After`); other statuses' `Retry-After` is not asked for.
fn result_of_status(status: u16, host: &str, retry_after: Option<Duration>) -> PublishResult {
    let message = format!("{host} answered HTTP {status}");
    match (status, retry_after) {
        (200..=299, _) => PublishResult::success(),
        (429 | 503, Some(delay)) => PublishResult::retryable(message)
            .with_error_type("http-status")
            .with_retry_after(delay),
        (408 | 429 | 500..=599, _) => {
            PublishResult::retryable(message).with_error_type("http-status")
        }
        _ => PublishResult::permanent(message).with_error_type("http-status"),
    }
}

outbox_sdk::export_handler!(Webhook);
