//! The plugin files being loaded right now. Compiling a Python or JavaScript component takes
//! seconds, during which the previous version (if any) keeps serving; `/plugins` shows it so an
//! operator knows a new version is on its way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

/// Shared by the engine and the admin listener; cheap to clone.
#[derive(Clone, Default)]
pub struct Compiling {
    files: Arc<Mutex<BTreeMap<PathBuf, SystemTime>>>,
}

impl Compiling {
    /// Marks `file` as compiling until the returned guard is dropped.
    pub(crate) fn start(&self, file: &Path) -> CompilingGuard {
        self.lock().insert(file.to_owned(), SystemTime::now());
        CompilingGuard {
            compiling: self.clone(),
            file: file.to_owned(),
        }
    }

    /// Each file being compiled, with when its compile began.
    pub fn files(&self) -> BTreeMap<PathBuf, SystemTime> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, SystemTime>> {
        // The map is consistent after every statement; a panic elsewhere leaves nothing half-done.
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes its file from [`Compiling`] when the load ends, however it ends.
pub(crate) struct CompilingGuard {
    compiling: Compiling,
    file: PathBuf,
}

impl Drop for CompilingGuard {
    fn drop(&mut self) {
        self.compiling.lock().remove(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_compiling_while_its_guard_lives() {
        let compiling = Compiling::default();
        let guard = compiling.start(Path::new("/plugins/router.wasm"));
        assert!(
            compiling
                .files()
                .contains_key(Path::new("/plugins/router.wasm"))
        );
        drop(guard);
        assert!(compiling.files().is_empty());
    }
}
