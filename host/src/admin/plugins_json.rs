//! `/plugins`: every plugin file and what became of it. Claim scopes show their kind and size only.
//! `outbox-host plugin list` reads the same types back.

use crate::plugins::PluginSet;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

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
    /// `loaded`, `failed`, `conflicting`, or `compiling` for a file that has no version in use yet.
    pub state: String,
    pub last_error: Option<String>,
    /// RFC 3339; for a `compiling` file, when its compile began.
    pub loaded_at: String,
    /// RFC 3339: when the compile of this file's new contents began, while the version described
    /// by the other fields keeps serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiling_since: Option<String>,
}

impl PluginsPage {
    /// The files of `set`, and the files being compiled (`compiling`) that are not in it yet.
    pub fn of(set: &PluginSet, compiling: &BTreeMap<PathBuf, SystemTime>) -> Self {
        let mut plugins: Vec<PluginStatusJson> = set
            .statuses()
            .map(|status| PluginStatusJson {
                file: status.file.display().to_string(),
                content_hash: status.content_hash.map(|hash| hash.to_string()),
                world: status.world.map(|world| world.as_str().to_owned()),
                destination_type: status.destination_type.clone(),
                claim_scope: status.claim_scope.map(|scope| scope.to_string()),
                state: status.state.as_str().to_owned(),
                last_error: status.last_error.clone(),
                loaded_at: rfc3339(status.loaded_at),
                compiling_since: compiling.get(&status.file).copied().map(rfc3339),
            })
            .collect();
        let in_set: Vec<PathBuf> = set.statuses().map(|status| status.file.clone()).collect();
        for (file, since) in compiling.iter().filter(|(file, _)| !in_set.contains(file)) {
            plugins.push(PluginStatusJson {
                file: file.display().to_string(),
                content_hash: None,
                world: None,
                destination_type: None,
                claim_scope: None,
                state: "compiling".to_owned(),
                last_error: None,
                loaded_at: rfc3339(*since),
                compiling_since: Some(rfc3339(*since)),
            });
        }
        plugins.sort_by(|a, b| a.file.cmp(&b.file));
        PluginsPage { plugins }
    }
}

fn rfc3339(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).to_rfc3339()
}
