//! `/plugins`: every plugin file and what became of it. Claim scopes show their kind and size only.

use crate::plugins::PluginSet;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

pub fn plugin_statuses_json(set: &PluginSet) -> Value {
    let plugins: Vec<Value> = set
        .statuses()
        .map(|status| {
            json!({
                "file": status.file.display().to_string(),
                "content_hash": status.content_hash.map(|hash| hash.to_string()),
                "world": status.world.map(|world| world.as_str()),
                "destination_type": status.destination_type,
                "claim_scope": status.claim_scope.map(|scope| scope.to_string()),
                "state": status.state.as_str(),
                "last_error": status.last_error,
                "loaded_at": DateTime::<Utc>::from(status.loaded_at).to_rfc3339(),
            })
        })
        .collect();
    json!({ "plugins": plugins })
}
