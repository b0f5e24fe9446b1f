//! Scratch directories for tests that need files: a plugins directory, a compiled-component cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory under the system's temporary directory, removed when dropped.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn new(label: &str) -> Self {
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let unique = CREATED.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir()
            .join("outbox-tests")
            .join(format!("{label}-{}-{unique}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a writable temporary directory");
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the component at `component` in as `<stem>.wasm`.
    pub fn add_plugin(&self, stem: &str, component: &str) -> PathBuf {
        let target = self.path.join(format!("{stem}.wasm"));
        std::fs::copy(component, &target).expect("the plugin component is readable");
        target
    }

    /// Writes `<stem>.toml` beside the plugin.
    pub fn add_manifest(&self, stem: &str, text: &str) -> PathBuf {
        self.write(&format!("{stem}.toml"), text.as_bytes())
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let target = self.path.join(name);
        std::fs::write(&target, bytes).expect("the scratch directory is writable");
        target
    }

    /// Puts `bytes` in as `name` the way the README deploys a plugin: written under a hidden
    /// temporary name, then renamed into place, so the host never sees the file half-written.
    pub fn deploy(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let temporary = self.path.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, bytes).expect("the scratch directory is writable");
        let target = self.path.join(name);
        std::fs::rename(&temporary, &target).expect("a rename within the directory");
        target
    }

    /// Deploys the component at `component` as `<stem>.wasm` (see [`ScratchDir::deploy`]).
    pub fn deploy_plugin(&self, stem: &str, component: &str) -> PathBuf {
        let bytes = std::fs::read(component).expect("the plugin component is readable");
        self.deploy(&format!("{stem}.wasm"), &bytes)
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.path.join(name)).expect("the file exists");
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
