//! Test-only destination handler whose behaviour the test sets: the manifest's `[config]` gives
//! its destination type (`destination_type`, default `SCRIPTED`), its claim scope (`claim_scope`,
//! answered after `claim_scope_delay_ms` when set) and a `version` it logs with the entry id on each
//! publish (to tell a reloaded plugin from the old one); the payload
//! `{"outcome": …, "error_type": …, "retry_after_ms": …, "delay_ms": …}` gives each publish's
//! result, after `delay_ms` when set, asking for `retry_after_ms` when retryable (outcome `hostile-error`: a retryable failure whose message and error type hold NUL and
//! other control characters).

use std::time::Duration;

use outbox_sdk::{Envelope, Handler, PublishResult, Scope, config};

/// The hostile error of the `hostile-error` outcome: NUL, terminal escapes, a forged log line, and
/// far more text than a row keeps.
fn hostile_message() -> String {
    format!(
        "hostile\0error \u{1b}[31mred\r\n2024-01-01T00:00:00Z INFO forged line {}",
        "x".repeat(100_000)
    )
}

struct Scripted;

impl Handler for Scripted {
    fn destination_type() -> String {
        config::get("destination_type").unwrap_or_else(|| "SCRIPTED".to_string())
    }

    /// `all` (or no key), a comma-separated list of destinations, or one of the invalid scopes
    /// the host must reject: `blank`, `too-long`, `too-many`, `nul` (`ok` and a target holding a
    /// NUL byte), `trap`.
    fn claim_scope() -> Scope {
        if let Some(ms) = config::get("claim_scope_delay_ms").and_then(|ms| ms.parse().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        match config::get("claim_scope").as_deref() {
            None | Some("all") => Scope::All,
            Some("blank") => Scope::Destinations(vec![" ".to_string()]),
            Some("too-long") => Scope::Destinations(vec!["d".repeat(256)]),
            Some("too-many") => Scope::Destinations((0..10_001).map(|i| format!("d{i}")).collect()),
            Some("nul") => {
                Scope::Destinations(vec!["ok".to_string(), "secret\0target".to_string()])
            }
            Some("trap") => panic!("the scripted plugin traps in claim-scope on purpose"),
            Some(list) => {
                Scope::Destinations(list.split(',').map(|d| d.trim().to_string()).collect())
            }
        }
    }

    fn publish(envelope: Envelope) -> PublishResult {
        let version = config::get("version");
        outbox_sdk::log!(
            info,
            "scripted version={} entry_id={}",
            version.as_deref().unwrap_or("none"),
            envelope.entry_id
        );
        let payload = match envelope.payload_value() {
            Ok(payload) => payload,
            Err(error) => return error.into(),
        };
        if let Some(ms) = payload["delay_ms"].as_u64() {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let result = match payload["outcome"].as_str() {
            None | Some("success") => PublishResult::success(),
            Some("retryable") => PublishResult::retryable("scripted retryable failure"),
            Some("permanent") => PublishResult::permanent("scripted permanent failure"),
            Some("unresolvable") => PublishResult::unresolvable("scripted unresolvable"),
            Some("hostile-error") => {
                PublishResult::retryable(hostile_message()).with_error_type("evil\0type\r\nforged")
            }
            Some(_) => PublishResult::permanent("unknown scripted outcome"),
        };
        let result = match payload["retry_after_ms"].as_u64() {
            Some(ms) => result.with_retry_after(Duration::from_millis(ms)),
            None => result,
        };
        match payload["error_type"].as_str() {
            Some(error_type) => result.with_error_type(error_type),
            None => result,
        }
    }
}

outbox_sdk::export_handler!(Scripted);
