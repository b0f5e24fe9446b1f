//! The plugin set: every plugin of one plugins directory, as an immutable snapshot.
//!
//! The set is a pure function of the directory's contents, so a reload equals a restart:
//! [`PluginSet::reload`] looks at every `<stem>.wasm` afresh, reuses a plugin already loaded from
//! the same wasm and manifest bytes (the same bytes load to the same plugin; reuse only skips the work
//! and keeps its instances warm), loads everything else from scratch, and settles destination-type
//! conflicts over the whole directory again. Plugins in flight keep running on the old set's objects.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::plugins::cache::{CompileSource, ContentHash};
use crate::plugins::engine::PluginEngine;
use crate::plugins::handler::{HandlerPlugin, ScopeSummary};
use crate::plugins::loader::{self, LoadedPlugin, Plugin, PluginSource, World};
use crate::plugins::observer::ObserverPlugin;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginState {
    Loaded,
    Failed,
    /// Loaded, but another file declares the same destination type: neither is used.
    Conflicting,
}

impl PluginState {
    pub const ALL: [PluginState; 3] = [Self::Loaded, Self::Failed, Self::Conflicting];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Failed => "failed",
            Self::Conflicting => "conflicting",
        }
    }
}

/// What the admin endpoint shows for one `.wasm` file of the directory.
#[derive(Debug, Clone)]
pub struct PluginStatus {
    pub file: PathBuf,
    /// SHA-256 of the `.wasm` bytes; `None` if the file could not be read.
    pub content_hash: Option<ContentHash>,
    pub world: Option<World>,
    pub destination_type: Option<String>,
    pub claim_scope: Option<ScopeSummary>,
    pub compiled: Option<CompileSource>,
    pub state: PluginState,
    pub last_error: Option<String>,
    /// When this file's current contents were loaded (or failed to).
    pub loaded_at: SystemTime,
}

/// How one file's plugin differs between an earlier set and a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChange {
    Added,
    Removed,
    /// New wasm or manifest bytes: a new plugin object, used from the next call.
    Replaced,
    /// The same bytes in another state or with another error: a conflict appeared or was settled.
    StateChanged,
}

impl FileChange {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Replaced => "replaced",
            Self::StateChanged => "state changed",
        }
    }
}

/// The bytes a plugin was loaded from; equal fingerprints load to equal plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    wasm: ContentHash,
    manifest: Option<ContentHash>,
}

#[derive(Clone)]
struct Entry {
    status: PluginStatus,
    fingerprint: Option<Fingerprint>,
    loaded: Option<LoadedPlugin>,
}

/// An immutable snapshot of the plugins in use.
#[derive(Clone, Default)]
pub struct PluginSet {
    handlers: BTreeMap<String, Arc<HandlerPlugin>>,
    observers: Vec<Arc<ObserverPlugin>>,
    entries: Vec<Entry>,
}

impl PluginSet {
    /// Loads every plugin of `dir`. Never fails as a whole: a file that does not load is a
    /// `failed` status and claims nothing.
    pub async fn load_dir(engine: &PluginEngine, dir: &Path) -> PluginSet {
        PluginSet::default().reload(engine, dir).await
    }

    /// The set `dir` holds now, reusing this set's plugins whose files are unchanged. `engine` must
    /// be the engine this set was loaded with.
    pub async fn reload(&self, engine: &PluginEngine, dir: &Path) -> PluginSet {
        let files = match wasm_files(dir).await {
            Ok(files) => files,
            Err(error) => {
                tracing::error!(dir = %dir.display(), %error, "cannot list the plugins directory; no plugin is loaded");
                return PluginSet::default();
            }
        };
        let previous: HashMap<&Path, &Entry> = self
            .entries
            .iter()
            .filter(|entry| entry.loaded.is_some())
            .map(|entry| (entry.status.file.as_path(), entry))
            .collect();
        let mut entries = Vec::with_capacity(files.len());
        for file in files {
            entries.push(load_entry(engine, file, &previous).await);
        }
        settle_conflicts(&mut entries);
        Self::from_entries(entries)
    }

    fn from_entries(entries: Vec<Entry>) -> Self {
        let mut handlers = BTreeMap::new();
        let mut observers = Vec::new();
        for entry in entries
            .iter()
            .filter(|entry| entry.status.state == PluginState::Loaded)
        {
            match entry.loaded.as_ref().map(|loaded| &loaded.plugin) {
                Some(Plugin::Handler(handler)) => {
                    handlers.insert(handler.destination_type().to_owned(), handler.clone());
                }
                Some(Plugin::Observer(observer)) => observers.push(observer.clone()),
                None => {}
            }
        }
        Self {
            handlers,
            observers,
            entries,
        }
    }

    /// The handler serving `destination_type`, if exactly one loaded file declares it.
    pub fn handler(&self, destination_type: &str) -> Option<Arc<HandlerPlugin>> {
        self.handlers.get(destination_type).cloned()
    }

    /// The handlers in use, ordered by destination type.
    pub fn handlers(&self) -> impl Iterator<Item = &Arc<HandlerPlugin>> {
        self.handlers.values()
    }

    pub fn observers(&self) -> &[Arc<ObserverPlugin>] {
        &self.observers
    }

    /// One status per `.wasm` file, ordered by file name.
    pub fn statuses(&self) -> impl Iterator<Item = &PluginStatus> {
        self.entries.iter().map(|entry| &entry.status)
    }

    /// The files whose plugin differs from `earlier`'s, ordered by file; empty when the two sets
    /// behave alike.
    pub fn changes_since(&self, earlier: &PluginSet) -> Vec<(PathBuf, FileChange)> {
        fn by_file(set: &PluginSet) -> BTreeMap<&Path, &Entry> {
            set.entries
                .iter()
                .map(|entry| (entry.status.file.as_path(), entry))
                .collect()
        }
        let (before, after) = (by_file(earlier), by_file(self));
        let mut changes = Vec::new();
        for (file, entry) in &after {
            let change = match before.get(file) {
                None => Some(FileChange::Added),
                Some(old) if old.fingerprint != entry.fingerprint => Some(FileChange::Replaced),
                Some(old)
                    if old.status.state != entry.status.state
                        || old.status.last_error != entry.status.last_error =>
                {
                    Some(FileChange::StateChanged)
                }
                Some(_) => None,
            };
            changes.extend(change.map(|change| (file.to_path_buf(), change)));
        }
        changes.extend(
            before
                .keys()
                .filter(|file| !after.contains_key(*file))
                .map(|file| (file.to_path_buf(), FileChange::Removed)),
        );
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        changes
    }
}

/// Whether `path` names a plugin's component or manifest: `<stem>.wasm` or `<stem>.toml`, not
/// hidden. Hidden names are where a deploy writes a file before renaming it into place.
pub(crate) fn is_plugin_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_none_or(|name| name.as_encoded_bytes().starts_with(b"."));
    let extension = path.extension().and_then(|extension| extension.to_str());
    !hidden && matches!(extension, Some("wasm" | "toml"))
}

/// The `.wasm` files at the top level of `dir`, by name.
async fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut listing = tokio::fs::read_dir(dir).await?;
    while let Some(item) = listing.next_entry().await? {
        let path = item.path();
        let is_wasm = is_plugin_file(&path)
            && path
                .extension()
                .is_some_and(|extension| extension == "wasm");
        if is_wasm
            && tokio::fs::metadata(&path)
                .await
                .is_ok_and(|metadata| metadata.is_file())
        {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

async fn load_entry(
    engine: &PluginEngine,
    file: PathBuf,
    previous: &HashMap<&Path, &Entry>,
) -> Entry {
    let source = match PluginSource::read(&file, None).await {
        Ok(source) => source,
        Err(error) => return failed(file, None, None, error.to_string()),
    };
    let fingerprint = Fingerprint {
        wasm: source.wasm_hash,
        manifest: source.manifest.as_ref().map(|m| m.hash),
    };
    if let Some(entry) = previous
        .get(file.as_path())
        .filter(|entry| entry.fingerprint == Some(fingerprint))
    {
        let mut entry = (*entry).clone();
        entry.status.state = PluginState::Loaded;
        entry.status.last_error = None;
        return entry;
    }
    let _compiling = engine.compiling().start(&file);
    match loader::load(engine, &source, engine.host_services()).await {
        Ok(loaded) => {
            let status = PluginStatus {
                file,
                content_hash: Some(source.wasm_hash),
                world: Some(loaded.plugin.world()),
                destination_type: match &loaded.plugin {
                    Plugin::Handler(handler) => Some(handler.destination_type().to_owned()),
                    Plugin::Observer(_) => None,
                },
                claim_scope: loaded.claim_scope,
                compiled: Some(loaded.compiled),
                state: PluginState::Loaded,
                last_error: None,
                loaded_at: SystemTime::now(),
            };
            tracing::info!(
                file = %status.file.display(),
                world = %loaded.plugin.world(),
                destination_type = status.destination_type.as_deref().unwrap_or("-"),
                compiled = %loaded.compiled,
                "plugin loaded"
            );
            Entry {
                status,
                fingerprint: Some(fingerprint),
                loaded: Some(loaded),
            }
        }
        Err(error) => failed(
            file,
            Some(source.wasm_hash),
            Some(fingerprint),
            error.to_string(),
        ),
    }
}

fn failed(
    file: PathBuf,
    content_hash: Option<ContentHash>,
    fingerprint: Option<Fingerprint>,
    error: String,
) -> Entry {
    tracing::warn!(file = %file.display(), %error, "plugin not loaded; its destination type claims nothing");
    let status = PluginStatus {
        file,
        content_hash,
        world: None,
        destination_type: None,
        claim_scope: None,
        compiled: None,
        state: PluginState::Failed,
        last_error: Some(error),
        loaded_at: SystemTime::now(),
    };
    Entry {
        status,
        fingerprint,
        loaded: None,
    }
}

/// Marks every loaded handler whose destination type another loaded file also declares as
/// `conflicting`: until that is resolved, the type claims nothing.
fn settle_conflicts(entries: &mut [Entry]) {
    let mut files_by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in entries
        .iter()
        .filter(|entry| entry.status.state == PluginState::Loaded)
    {
        if let Some(destination_type) = &entry.status.destination_type {
            let file = entry
                .status
                .file
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            files_by_type
                .entry(destination_type.clone())
                .or_default()
                .push(file);
        }
    }
    for entry in entries.iter_mut() {
        let Some(files) = entry
            .status
            .destination_type
            .as_ref()
            .and_then(|t| files_by_type.get(t))
        else {
            continue;
        };
        if files.len() > 1 && entry.status.state == PluginState::Loaded {
            let destination_type = entry.status.destination_type.as_deref().unwrap_or_default();
            let error = format!(
                "destination type `{destination_type}` is declared by {}; neither is used",
                files.join(", ")
            );
            tracing::error!(file = %entry.status.file.display(), "{error}");
            entry.status.state = PluginState::Conflicting;
            entry.status.last_error = Some(error);
        }
    }
}
