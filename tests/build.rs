//! Builds every plugin crate into a WebAssembly component, so the tests run real plugins built
//! from the sources beside them, and writes their paths for `outbox_tests::plugins`.
//!
//! A plugin is a crate in `plugins/<name>/` or `tests/plugins/<name>/` whose package is `<name>`:
//! the folders are the list, read here and by `scripts/build-plugins` alike.

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "plugin";
const PLUGIN_FOLDERS: [&str; 2] = ["plugins", "tests/plugins"];

/// Settings of the outer build that must not shape the nested one: its target, target and build
/// dirs and flags are for the host, its jobserver and wrappers (clippy's, for one) are for its own
/// rustc. Profile overrides (`CARGO_PROFILE_*`) are cleared too, so the plugin profile is the
/// workspace's.
const OUTER_BUILD_VARS: [&str; 13] = [
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_BUILD_DIR",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_PRIMARY_PACKAGE",
];

fn main() {
    let tests_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = tests_dir
        .parent()
        .expect("the tests crate sits in the workspace root");
    let plugins = plugin_sources(workspace);

    // A new plugin is a new workspace member, so watching Cargo.toml notices it.
    for watched in ["Cargo.toml", "Cargo.lock", "sdk/rust", "wit"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    for source in plugins.values() {
        println!("cargo:rerun-if-changed={}", source.display());
    }

    require_target();
    let target_dir = workspace.join("target").join("wasm");
    build_plugins(workspace, &target_dir, &plugins);
    write_paths(&target_dir.join(TARGET).join(PROFILE), &plugins);
}

/// The crate folders under `plugins/` and `tests/plugins/`, by name.
fn plugin_sources(workspace: &Path) -> BTreeMap<String, PathBuf> {
    let mut sources = BTreeMap::new();
    for folder in PLUGIN_FOLDERS {
        let entries = fs::read_dir(workspace.join(folder))
            .unwrap_or_else(|error| panic!("cannot list {folder}/: {error}"));
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            if path.join("Cargo.toml").is_file() {
                let name = path
                    .file_name()
                    .expect("a folder name")
                    .to_string_lossy()
                    .into_owned();
                if let Some(other) = sources.insert(name, path.clone()) {
                    panic!(
                        "two plugin crates share a name: {} and {}",
                        other.display(),
                        path.display()
                    );
                }
            }
        }
    }
    sources
}

fn require_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc runs");
    let sysroot = String::from_utf8(output.stdout).expect("a UTF-8 sysroot path");
    let target_lib = Path::new(sysroot.trim())
        .join("lib")
        .join("rustlib")
        .join(TARGET);
    if !target_lib.is_dir() {
        panic!(
            "the {TARGET} target is not installed, and the tests need it to build their plugins; \
             install it with `rustup target add {TARGET}`"
        );
    }
}

/// A nested cargo with its own target dir: the outer build holds the lock on its own.
fn build_plugins(workspace: &Path, target_dir: &Path, plugins: &BTreeMap<String, PathBuf>) {
    let cargo = env::var_os("CARGO").expect("cargo sets CARGO");
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args([
            "build",
            "--target",
            TARGET,
            "--profile",
            PROFILE,
            "--target-dir",
        ])
        .arg(target_dir)
        .stdout(Stdio::from(std::io::stderr()));
    for name in plugins.keys() {
        command.args(["-p", name]);
    }
    for var in OUTER_BUILD_VARS {
        command.env_remove(var);
    }
    for (var, _) in env::vars_os() {
        if var.to_string_lossy().starts_with("CARGO_PROFILE_") {
            command.env_remove(var);
        }
    }
    let status = command.status().expect("cargo runs");
    if !status.success() {
        panic!("building the plugins for {TARGET} failed ({status}); cargo's output is above");
    }
}

/// One constant per plugin, `NOOP` for `noop`, holding its component's absolute path.
fn write_paths(artifacts: &Path, plugins: &BTreeMap<String, PathBuf>) {
    let mut source = String::new();
    for name in plugins.keys() {
        // Cargo names the artifact after the library, whose name has underscores for dashes.
        let file_stem = name.replace('-', "_");
        let component = artifacts.join(format!("{file_stem}.wasm"));
        assert!(
            component.is_file(),
            "cargo built no {}",
            component.display()
        );
        writeln!(source, "/// The `{name}` plugin, built from source.").unwrap();
        writeln!(
            source,
            "pub const {}: &str = {:?};",
            file_stem.to_uppercase(),
            component.display().to_string()
        )
        .unwrap();
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out_dir.join("plugins.rs"), source).expect("OUT_DIR is writable");
}
