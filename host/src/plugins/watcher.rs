//! Hot reload (DESIGN §6): watches the plugins directory and, after each change, swaps in the set
//! the directory now holds.
//!
//! Filesystem events (debounced), and a periodic re-scan in case one was missed, wake the watcher.
//! It waits until the directory has settled, so a file still being written is never loaded
//! half-way, then reloads with [`PluginSet::reload`]: the set is a pure function of the directory's
//! contents, so it is the set a restart would load. One `send_replace` swaps it in. The relay reads
//! the set at the start of each claim cycle: publishes in flight finish on the plugin they started
//! on, the next cycle claims with the new set.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::plugins::engine::PluginEngine;
use crate::plugins::error::PluginError;
use crate::plugins::registry::{self, PluginSet, PluginState};

/// How the watcher paces itself; built from `[plugins]`.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings {
    /// Events closer together than this wake the watcher once.
    pub debounce: Duration,
    /// How long the directory must stay unchanged before it is loaded.
    pub settle: Duration,
    /// How often the directory is re-read even without an event.
    pub rescan_interval: Duration,
}

/// Watches one plugins directory; dropping it stops the filesystem watch.
pub struct PluginWatcher {
    dir: PathBuf,
    settings: WatchSettings,
    woken: Arc<Notify>,
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    /// The directory as the set in use was read from it.
    loaded_from: DirSnapshot,
}

impl PluginWatcher {
    /// Starts watching `dir`. Start it before loading the first set, so that no change can fall
    /// between that load and the watch.
    pub async fn start(dir: &Path, settings: WatchSettings) -> Result<Self, PluginError> {
        let woken = Arc::new(Notify::new());
        let wake = woken.clone();
        let watched = dir.to_owned();
        let watch_error = |source| PluginError::Watch {
            dir: dir.to_owned(),
            source,
        };
        let mut debouncer = new_debouncer(
            settings.debounce,
            None,
            move |events: DebounceEventResult| {
                if concerns_plugins(&watched, &events) {
                    wake.notify_one();
                }
            },
        )
        .map_err(watch_error)?;
        debouncer
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        Ok(Self {
            dir: dir.to_owned(),
            settings,
            woken,
            _debouncer: debouncer,
            loaded_from: DirSnapshot::read(dir).await,
        })
    }

    /// Reloads after every change until `shutdown`, swapping each new set into `plugins` and
    /// counting reloads in `metrics`.
    pub async fn run(
        mut self,
        engine: PluginEngine,
        plugins: watch::Sender<Arc<PluginSet>>,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) {
        let period = self.settings.rescan_interval;
        let mut rescan = tokio::time::interval_at(Instant::now() + period, period);
        rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.woken.notified() => {}
                _ = rescan.tick() => {}
            }
            let settled = tokio::select! {
                _ = shutdown.cancelled() => return,
                settled = self.settled() => settled,
            };
            if settled == self.loaded_from {
                continue;
            }
            self.loaded_from = settled;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = reload(&engine, &self.dir, &plugins, &metrics) => {}
            }
        }
    }

    /// The directory once two reads `settle` apart agree: no plugin file is being written.
    async fn settled(&self) -> DirSnapshot {
        let mut last = DirSnapshot::read(&self.dir).await;
        loop {
            tokio::time::sleep(self.settings.settle).await;
            let now = DirSnapshot::read(&self.dir).await;
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

/// Whether a batch of events may concern a plugin: a plugin file, the directory itself, a rescan
/// request or a watch error (the watcher may have missed something).
fn concerns_plugins(dir: &Path, events: &DebounceEventResult) -> bool {
    match events {
        Ok(events) => events.iter().any(|event| {
            event.need_rescan()
                || event
                    .paths
                    .iter()
                    .any(|path| path == dir || registry::is_plugin_file(path))
        }),
        Err(errors) => {
            for error in errors {
                tracing::warn!(dir = %dir.display(), %error, "watching the plugins directory failed; re-reading it");
            }
            true
        }
    }
}

/// Reads the directory again; when any plugin differs, swaps the new set in and logs what changed.
async fn reload(
    engine: &PluginEngine,
    dir: &Path,
    plugins: &watch::Sender<Arc<PluginSet>>,
    metrics: &Metrics,
) {
    let started = Instant::now();
    let current = plugins.borrow().clone();
    let next = Arc::new(current.reload(engine, dir).await);
    let failures = next
        .statuses()
        .filter(|status| status.state == PluginState::Failed)
        .count();
    metrics.plugin_reload(failures as u64);
    let changes = next.changes_since(&current);
    if changes.is_empty() {
        tracing::debug!(dir = %dir.display(), "plugins directory re-read; no plugin changed");
        return;
    }
    plugins.send_replace(next.clone());
    let changes: Vec<String> = changes
        .iter()
        .map(|(file, change)| format!("{} {}", file_name(file), change.as_str()))
        .collect();
    tracing::info!(
        dir = %dir.display(),
        changes = %changes.join(", "),
        plugins = %summary(&next),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "plugins reloaded"
    );
}

/// Each file of `set` and its state, e.g. `noop.wasm loaded, webhook.wasm failed`.
pub fn summary(set: &PluginSet) -> String {
    let files: Vec<String> = set
        .statuses()
        .map(|status| format!("{} {}", file_name(&status.file), status.state.as_str()))
        .collect();
    if files.is_empty() {
        "none".to_owned()
    } else {
        files.join(", ")
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What writing or replacing a file changes: its size, its times and (on a rename) its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    inode: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

/// The plugin files of a directory and their stamps: equal snapshots, equal contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DirSnapshot(BTreeMap<PathBuf, FileStamp>);

impl DirSnapshot {
    /// An unreadable directory reads as an empty one: both load no plugin.
    async fn read(dir: &Path) -> Self {
        let mut files = BTreeMap::new();
        let Ok(mut listing) = tokio::fs::read_dir(dir).await else {
            return Self(files);
        };
        while let Ok(Some(item)) = listing.next_entry().await {
            let path = item.path();
            if !registry::is_plugin_file(&path) {
                continue;
            }
            if let Ok(metadata) = tokio::fs::metadata(&path).await {
                let stamp = FileStamp {
                    len: metadata.len(),
                    inode: metadata.ino(),
                    modified: (metadata.mtime(), metadata.mtime_nsec()),
                    changed: (metadata.ctime(), metadata.ctime_nsec()),
                };
                files.insert(path, stamp);
            }
        }
        Self(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(label: &str) -> PathBuf {
        let name = format!("outbox-watcher-{label}-{}", uuid::Uuid::now_v7());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn renaming_bytes_of_the_same_size_over_a_file_changes_the_snapshot() {
        let dir = scratch_dir("rename");
        std::fs::write(dir.join("a.toml"), "version = 1").unwrap();
        let before = DirSnapshot::read(&dir).await;
        std::fs::write(dir.join("b.toml"), "version = 2").unwrap();
        std::fs::rename(dir.join("b.toml"), dir.join("a.toml")).unwrap();
        let after = DirSnapshot::read(&dir).await;
        assert_eq!(after.0.keys().collect::<Vec<_>>(), [&dir.join("a.toml")]);
        assert_ne!(after, before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn hidden_and_other_files_are_not_in_the_snapshot() {
        let dir = scratch_dir("hidden");
        std::fs::write(dir.join("a.wasm"), "component").unwrap();
        let before = DirSnapshot::read(&dir).await;
        std::fs::write(dir.join(".a.wasm.tmp"), "half a component").unwrap();
        std::fs::write(dir.join(".b.wasm"), "hidden").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a plugin").unwrap();
        std::fs::create_dir(dir.join(".cache")).unwrap();
        assert_eq!(DirSnapshot::read(&dir).await, before);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
