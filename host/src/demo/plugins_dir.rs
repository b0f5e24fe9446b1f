//! The demo's plugins directory: a temporary one with copies of the built example plugins and a
//! webhook manifest granting exactly the demo's receiver, so the demo never edits `plugins/`.

use super::DemoError;
use crate::database::SchemaName;
use std::fs;
use std::path::{Path, PathBuf};

/// The example plugins the demo runs: two destination handlers and the logging observer.
const EXAMPLES: [&str; 3] = ["webhook", "noop", "stats"];

/// Removed when dropped.
pub struct DemoPlugins {
    dir: PathBuf,
}

impl DemoPlugins {
    /// Copies `<built>/<example>.wasm` for every example and writes `webhook.toml` allowing
    /// `receiver_origin` only, in a directory named after the demo's schema (one demo per schema).
    pub fn prepare(
        built: &Path,
        schema: &SchemaName,
        receiver_origin: &str,
    ) -> Result<DemoPlugins, DemoError> {
        let sources = EXAMPLES.map(|stem| built.join(format!("{stem}.wasm")));
        if let Some(missing) = sources.iter().find(|source| !source.is_file()) {
            return Err(DemoError::PluginMissing {
                path: missing.clone(),
            });
        }
        let plugins = DemoPlugins {
            dir: std::env::temp_dir().join(format!("outbox-demo-{schema}")),
        };
        let io_error = |action: &'static str| move |source| DemoError::Io { action, source };
        // Left behind only by a run that was interrupted; this one starts afresh.
        let _ = fs::remove_dir_all(&plugins.dir);
        fs::create_dir_all(&plugins.dir)
            .map_err(io_error("create the demo's plugins directory"))?;
        for (stem, source) in EXAMPLES.iter().zip(&sources) {
            fs::copy(source, plugins.dir.join(format!("{stem}.wasm")))
                .map_err(io_error("copy an example plugin"))?;
        }
        let manifest = format!(
            "# Written by outbox-host demo: the webhook plugin may reach the demo's receiver, nothing else.\n\
             [http]\nallowed_hosts = [\"{receiver_origin}\"]\n"
        );
        fs::write(plugins.dir.join("webhook.toml"), manifest)
            .map_err(io_error("write the webhook manifest"))?;
        Ok(plugins)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DemoPlugins {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
