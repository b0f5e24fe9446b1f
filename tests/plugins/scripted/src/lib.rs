//! Test-only destination handler whose behaviour the test sets: the manifest's `[config]` gives
//! its destination type (`destination_type`, default `SCRIPTED`), its claim scope (`claim_scope`)
//! and a `version` it logs on each publish (to tell a reloaded plugin from the old one); the
//! payload `{"outcome": …, "error_type": …}` gives each publish's result.

use outbox_sdk::{Envelope, Handler, PublishResult, Scope, config};

struct Scripted;

impl Handler for Scripted {
    fn destination_type() -> String {
        config::get("destination_type").unwrap_or_else(|| "SCRIPTED".to_string())
    }

    /// `all` (or no key), a comma-separated list of destinations, or one of the invalid scopes
    /// the host must reject: `blank`, `too-long`, `too-many`, `trap`.
    fn claim_scope() -> Scope {
        match config::get("claim_scope").as_deref() {
            None | Some("all") => Scope::All,
            Some("blank") => Scope::Destinations(vec![" ".to_string()]),
            Some("too-long") => Scope::Destinations(vec!["d".repeat(256)]),
            Some("too-many") => Scope::Destinations((0..10_001).map(|i| format!("d{i}")).collect()),
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
            "scripted version={}",
            version.as_deref().unwrap_or("none")
        );
        let payload = match envelope.payload_value() {
            Ok(payload) => payload,
            Err(error) => return error.into(),
        };
        let result = match payload["outcome"].as_str() {
            None | Some("success") => PublishResult::success(),
            Some("retryable") => PublishResult::retryable("scripted retryable failure"),
            Some("permanent") => PublishResult::permanent("scripted permanent failure"),
            Some("unresolvable") => PublishResult::unresolvable("scripted unresolvable"),
            Some(_) => PublishResult::permanent("unknown scripted outcome"),
        };
        match payload["error_type"].as_str() {
            Some(error_type) => result.with_error_type(error_type),
            None => result,
        }
    }
}

outbox_sdk::export_handler!(Scripted);
