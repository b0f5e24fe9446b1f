//! The Python and JavaScript example plugins, built from their sources in `plugins/` with the SDKs'
//! own one-command builds (`sdk/python/build`, `sdk/js/build`) on first use, and rebuilt only when a
//! source, the SDK or the WIT changed since.
//!
//! Their toolchains are installed by `scripts/setup`. On a machine where that install failed (no
//! network) a test asking for one of these plugins is told so and skips, printing why; under
//! `CI=true` the missing toolchain is a failure, so CI always builds and tests all three languages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    JavaScript,
}

impl Language {
    /// The SDK's folder under `sdk/`.
    pub fn folder(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::JavaScript => "js",
        }
    }

    fn source_file(self) -> &'static str {
        match self {
            Self::Python => "app.py",
            Self::JavaScript => "app.js",
        }
    }

    /// Whether the language's toolchain is installed; when it is not, says so and returns false
    /// outside CI, and panics under `CI=true`.
    pub fn toolchain_ready(self) -> bool {
        if self.toolchain_marker().exists() {
            return true;
        }
        let message = format!(
            "the {self:?} plugin toolchain is not installed ({} is missing; `source scripts/setup` installs it)",
            self.toolchain_marker().display()
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{message}: CI must build and test every language");
        }
        eprintln!("skipped: {message}");
        false
    }

    /// The file whose presence says the language's toolchain is installed.
    fn toolchain_marker(self) -> PathBuf {
        let toolchains = std::env::var_os("PLUGIN_TOOLCHAINS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/outbox-host/toolchains")
            });
        match self {
            Self::Python => toolchains.join("python/bin/componentize-py"),
            Self::JavaScript => toolchains.join("js/node_modules/.bin/esbuild"),
        }
    }
}

/// One example plugin of `plugins/<name>/`.
#[derive(Debug, Clone, Copy)]
pub struct SdkPlugin {
    pub name: &'static str,
    pub language: Language,
    pub observer: bool,
}

/// Python, destination type `CHAT`: a Slack-style chat-webhook formatter.
pub const CHAT_WEBHOOK: SdkPlugin = SdkPlugin {
    name: "chat-webhook",
    language: Language::Python,
    observer: false,
};

/// JavaScript, destination type `ROUTER`: forwards to the URL `[config]` names for the event type.
pub const ROUTER: SdkPlugin = SdkPlugin {
    name: "router",
    language: Language::JavaScript,
    observer: false,
};

/// Python publish observer: per-type counts logged every N events.
pub const TYPE_COUNTER: SdkPlugin = SdkPlugin {
    name: "type-counter",
    language: Language::Python,
    observer: true,
};

pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
        .to_owned()
}

/// One build at a time in a process: both tools take a core or two for 30–70 s.
static BUILDING: Mutex<()> = Mutex::new(());

impl SdkPlugin {
    pub fn source_dir(&self) -> PathBuf {
        repository().join("plugins").join(self.name)
    }

    /// The manifest template beside the source, `plugins/<name>/<name>.toml`.
    pub fn manifest_template(&self) -> String {
        std::fs::read_to_string(self.source_dir().join(format!("{}.toml", self.name)))
            .expect("the example has a manifest template")
    }

    /// The built component, or `None` (after printing why) when the language's toolchain is
    /// missing outside CI. Panics when the build fails, or under `CI=true` without the toolchain.
    pub fn component(&self) -> Option<PathBuf> {
        if !self.language.toolchain_ready() {
            return None;
        }
        let _building = BUILDING.lock().unwrap_or_else(|poison| poison.into_inner());
        let output = repository()
            .join("target/wasm/sdk")
            .join(format!("{}.wasm", self.name));
        if modified(&output) > Some(self.newest_input()) {
            return Some(output);
        }
        std::fs::create_dir_all(output.parent().expect("a parent")).expect("target is writable");
        let build = repository()
            .join("sdk")
            .join(self.language.folder())
            .join("build");
        let mut command = Command::new(&build);
        if self.observer {
            command.arg("--observer");
        }
        let result = command
            .arg(self.source_dir().join(self.language.source_file()))
            .arg("-o")
            .arg(&output)
            .output()
            .expect("the SDK's build command runs");
        assert!(
            result.status.success(),
            "{} failed for {}:\n{}{}",
            build.display(),
            self.name,
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
        Some(output)
    }

    /// The latest change among what the component is built from.
    fn newest_input(&self) -> SystemTime {
        let sdk = repository().join("sdk").join(self.language.folder());
        [self.source_dir(), sdk, repository().join("wit")]
            .iter()
            .filter_map(|dir| newest_in(dir))
            .max()
            .expect("the sources exist")
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The latest change of a file under `path` (bytecode caches left out: the build writes them).
fn newest_in(path: &Path) -> Option<SystemTime> {
    let Ok(entries) = std::fs::read_dir(path) else {
        return modified(path);
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name() != "__pycache__")
        .filter_map(|entry| newest_in(&entry.path()))
        .max()
}
