//! `/plugins`: every plugin file and what became of it. Claim scopes show their kind and size only.
//! `outbox-host plugin list` reads the same types back.

use crate::plugins::PluginSet;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The body of `/plugins`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginsPage {
    pub plugins: Vec<PluginStatusJson>,
}

/// One `.wasm` file of the plugins directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginStatusJson {
    pub file: String,
    /// SHA-256 of the `.wasm` bytes, in hex.
    pub content_hash: Option<String>,
    pub world: Option<String>,
    pub destination_type: Option<String>,
    /// `all` or `destinations (<count>)`.
    pub claim_scope: Option<String>,
    /// `loaded`, `failed` or `conflicting`.
    pub state: String,
    pub last_error: Option<String>,
    /// RFC 3339.
    pub loaded_at: String,
}

impl PluginsPage {
    pub fn of(set: &PluginSet) -> Self {
        let plugins = set
            .statuses()
            .map(|status| PluginStatusJson {
                file: status.file.display().to_string(),
                content_hash: status.content_hash.map(|hash| hash.to_string()),
                world: status.world.map(|world| world.as_str().to_owned()),
                destination_type: status.destination_type.clone(),
                claim_scope: status.claim_scope.map(|scope| scope.to_string()),
                state: status.state.as_str().to_owned(),
                last_error: status.last_error.clone(),
                loaded_at: DateTime::<Utc>::from(status.loaded_at).to_rfc3339(),
            })
            .collect();
        PluginsPage { plugins }
    }
}
