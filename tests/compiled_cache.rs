//! The compiled-component cache with real plugins built from source, tried as an attacker who can
//! write files would: an entry is native code the host runs, so only what the host itself wrote,
//! authenticated under its own key, in a directory and a file private to its user, is ever loaded.
//! Everything else is compiled afresh, and the plugin still works as its own bytes say.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;
use outbox_host::cli::{self, Cli};
use outbox_host::plugins::mock::mock_envelope;
use outbox_host::plugins::{CompileSource, ContentHash, PluginSet, PublishResult};
use outbox_tests::log_capture;
use outbox_tests::plugin_engine::{status, test_engine_with_cache};
use outbox_tests::plugins::{NOOP, WEBHOOK};
use outbox_tests::scratch::ScratchDir;
use sha2::{Digest, Sha256};

/// The entry layout the cache documents: magic (16), component hash (32), engine key (32), code
/// length (8), tag (32), code. [`Entry::read`] checks this reading of it against a real entry.
const MAGIC: &[u8] = b"outbox-cwasm-v2\n";
const FIELDS_LEN: usize = 16 + 32 + 32 + 8;
const HEADER_LEN: usize = FIELDS_LEN + 32;

/// A cache directory the host creates itself (inside a scratch directory, outside any plugins
/// directory).
struct Cache {
    scratch: ScratchDir,
}

impl Cache {
    fn new(label: &str) -> Self {
        Self {
            scratch: ScratchDir::new(label),
        }
    }

    fn dir(&self) -> PathBuf {
        self.scratch.path().join("cache")
    }

    /// Loads `plugins` with a fresh engine on this cache, as a restarted host would.
    async fn load(&self, plugins: &ScratchDir) -> PluginSet {
        PluginSet::load_dir(&test_engine_with_cache(&self.dir()), plugins.path()).await
    }

    /// The entry of the component at `component`.
    fn entry_path(&self, component: &str) -> PathBuf {
        let hash = ContentHash::of(&std::fs::read(component).unwrap()).to_string();
        let entries: Vec<PathBuf> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                let name = path.file_name().unwrap().to_string_lossy();
                name.starts_with(&hash) && name.ends_with(".cwasm")
            })
            .collect();
        let [entry] = entries.try_into().expect("one entry for the component");
        entry
    }

    fn entry_count(&self) -> usize {
        std::fs::read_dir(self.dir())
            .unwrap()
            .filter(|entry| entry.as_ref().unwrap().path().extension() == Some("cwasm".as_ref()))
            .count()
    }
}

/// A cache entry taken apart along the documented layout.
struct Entry {
    fields: Vec<u8>,
    code: Vec<u8>,
}

impl Entry {
    fn read(path: &Path) -> Self {
        let bytes = std::fs::read(path).unwrap();
        let (header, code) = bytes.split_at(HEADER_LEN);
        assert!(header.starts_with(MAGIC), "the layout this suite forges");
        let length = u64::from_le_bytes(header[FIELDS_LEN - 8..FIELDS_LEN].try_into().unwrap());
        assert_eq!(length, code.len() as u64, "the layout this suite forges");
        Self {
            fields: header[..FIELDS_LEN].to_vec(),
            code: code.to_vec(),
        }
    }

    /// This entry's header with `code` in place of its own, under a checksum anyone can compute
    /// (SHA-256 of the fields and the code): what an attacker without the key can write.
    fn forge_with(&self, code: &[u8]) -> Vec<u8> {
        let mut fields = self.fields.clone();
        fields[FIELDS_LEN - 8..].copy_from_slice(&(code.len() as u64).to_le_bytes());
        let checksum = Sha256::new()
            .chain_update(&fields)
            .chain_update(code)
            .finalize();
        [fields.as_slice(), checksum.as_slice(), code].concat()
    }
}

/// Where the section `name` of a 64-bit little-endian ELF file lies in it.
fn elf_section(elf: &[u8], name: &str) -> std::ops::Range<usize> {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()));
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..4], b"\x7fELF");
    let (table, entry_size, count) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let header = |index: usize| table + index * entry_size;
    let names = u64_at(header(u16_at(0x3e)) + 24);
    (0..count)
        .map(header)
        .find(|&section| {
            let start = names + u32_at(section);
            elf[start..].starts_with(name.as_bytes()) && elf[start + name.len()] == 0
        })
        .map(|section| {
            let offset = u64_at(section + 24);
            offset..offset + u64_at(section + 32)
        })
        .unwrap_or_else(|| panic!("no {name} section"))
}

fn plugins_with(label: &str, plugins: &[(&str, &str)]) -> ScratchDir {
    let dir = ScratchDir::new(label);
    for (stem, component) in plugins {
        dir.add_plugin(stem, component);
    }
    dir
}

fn compiled(set: &PluginSet, file_name: &str) -> Option<CompileSource> {
    status(set, file_name).compiled
}

async fn assert_noop_publishes(set: &PluginSet) {
    let noop = set
        .handler("NOOP")
        .expect("noop is loaded under its own type");
    assert_eq!(
        noop.publish(&mock_envelope("NOOP")).await,
        Ok(PublishResult::Success)
    );
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Gives `path` to the `nobody` user; `false` when this process may not (it is not root).
fn give_away(path: &Path) -> bool {
    const NOBODY: u32 = 65534;
    match std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)) {
        Ok(()) => true,
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("not checked: changing a file's owner needs root");
            false
        }
        Err(error) => panic!("chown {}: {error}", path.display()),
    }
}

#[tokio::test]
async fn a_second_load_of_an_unchanged_component_comes_from_the_cache() {
    let cache = Cache::new("cache-hit");
    let plugins = plugins_with("cache-hit-plugins", &[("noop", NOOP)]);
    let first = cache.load(&plugins).await;
    let second = cache.load(&plugins).await;
    assert_eq!(compiled(&first, "noop.wasm"), Some(CompileSource::Compiled));
    assert_eq!(compiled(&second, "noop.wasm"), Some(CompileSource::Cache));
    assert_noop_publishes(&second).await;
}

#[tokio::test]
async fn an_entry_forged_with_another_plugins_code_is_refused_and_recompiled() {
    log_capture::install();
    let cache = Cache::new("cache-forged");
    let plugins = plugins_with(
        "cache-forged-plugins",
        &[("noop", NOOP), ("webhook", WEBHOOK)],
    );
    cache.load(&plugins).await;
    let noop_entry = cache.entry_path(NOOP);
    let webhook_code = Entry::read(&cache.entry_path(WEBHOOK)).code;
    std::fs::write(
        &noop_entry,
        Entry::read(&noop_entry).forge_with(&webhook_code),
    )
    .unwrap();

    let set = cache.load(&plugins).await;
    assert_eq!(compiled(&set, "noop.wasm"), Some(CompileSource::Compiled));
    assert_eq!(
        status(&set, "noop.wasm").destination_type.as_deref(),
        Some("NOOP")
    );
    assert_noop_publishes(&set).await;
    let warnings = log_capture::lines_with(&noop_entry.display().to_string());
    assert!(
        warnings
            .iter()
            .any(|line| line.contains("refusing a compiled-component cache entry")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn an_entry_forged_full_of_int3_is_refused_and_the_plugin_runs() {
    let cache = Cache::new("cache-int3");
    let plugins = plugins_with("cache-int3-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    let entry_path = cache.entry_path(NOOP);
    let entry = Entry::read(&entry_path);
    // Keep the ELF structure so the entry still deserializes; trap in every instruction.
    let mut code = entry.code.clone();
    let text = elf_section(&code, ".text");
    assert!(!text.is_empty(), "compiled code has a .text section");
    code[text].fill(0xcc);
    std::fs::write(&entry_path, entry.forge_with(&code)).unwrap();

    let set = cache.load(&plugins).await;
    assert_eq!(compiled(&set, "noop.wasm"), Some(CompileSource::Compiled));
    assert_noop_publishes(&set).await;
}

#[tokio::test]
async fn plugin_inspect_reports_the_components_own_type_over_a_forged_entry() {
    log_capture::install();
    let cache = Cache::new("cache-inspect");
    let plugins = plugins_with(
        "cache-inspect-plugins",
        &[("noop", NOOP), ("webhook", WEBHOOK)],
    );
    let inspect = |stem: &str| {
        let wasm = plugins.path().join(format!("{stem}.wasm"));
        let cache_dir = cache.dir();
        async move {
            let mut args: Vec<std::ffi::OsString> =
                ["outbox-host", "plugin", "inspect", "--json", "--cache-dir"]
                    .map(Into::into)
                    .into();
            args.extend([cache_dir.into_os_string(), wasm.into_os_string()]);
            let cli = Cli::parse_from(args);
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = cli::run(cli, &mut out, &mut err).await;
            assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()["destination_type"].clone()
        }
    };
    inspect("noop").await;
    inspect("webhook").await;
    let noop_entry = cache.entry_path(NOOP);
    let webhook_code = Entry::read(&cache.entry_path(WEBHOOK)).code;
    std::fs::write(
        &noop_entry,
        Entry::read(&noop_entry).forge_with(&webhook_code),
    )
    .unwrap();

    assert_eq!(inspect("noop").await, "NOOP");
}

#[tokio::test]
async fn plugin_test_refuses_a_cache_dir_inside_the_plugins_directory() {
    log_capture::install();
    let plugins = plugins_with("cache-inside-plugins", &[("noop", NOOP)]);
    let wasm = plugins.path().join("noop.wasm");
    let cache_dir = plugins.path().join(".cache");
    let cli = Cli::parse_from([
        "outbox-host".as_ref(),
        "plugin".as_ref(),
        "test".as_ref(),
        "--cache-dir".as_ref(),
        cache_dir.as_os_str(),
        wasm.as_os_str(),
    ] as [&std::ffi::OsStr; 6]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(cli::run(cli, &mut out, &mut err).await, 2);
    let err = String::from_utf8_lossy(&err);
    assert!(
        err.contains("--cache-dir must not be inside the plugin's directory"),
        "{err}"
    );
    assert!(!cache_dir.exists());
}

#[tokio::test]
async fn an_entry_others_may_read_or_write_is_refused_and_rewritten_private() {
    let cache = Cache::new("cache-entry-mode");
    let plugins = plugins_with("cache-entry-mode-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    let entry = cache.entry_path(NOOP);
    for mode in [0o640, 0o604, 0o620, 0o666] {
        set_mode(&entry, mode);
        let set = cache.load(&plugins).await;
        assert_eq!(
            compiled(&set, "noop.wasm"),
            Some(CompileSource::Compiled),
            "mode {mode:o}"
        );
        assert_noop_publishes(&set).await;
        let rewritten = std::fs::metadata(&entry).unwrap().permissions().mode() & 0o777;
        assert_eq!(rewritten, 0o600);
    }
}

#[tokio::test]
async fn an_entry_owned_by_another_user_is_refused() {
    let cache = Cache::new("cache-entry-owner");
    let plugins = plugins_with("cache-entry-owner-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    if !give_away(&cache.entry_path(NOOP)) {
        return;
    }
    let set = cache.load(&plugins).await;
    assert_eq!(compiled(&set, "noop.wasm"), Some(CompileSource::Compiled));
    assert_noop_publishes(&set).await;
}

#[tokio::test]
async fn a_cache_directory_others_may_write_is_never_used() {
    let cache = Cache::new("cache-dir-mode");
    let plugins = plugins_with("cache-dir-mode-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    set_mode(&cache.dir(), 0o770);
    for _ in 0..2 {
        let set = cache.load(&plugins).await;
        assert_eq!(compiled(&set, "noop.wasm"), Some(CompileSource::Compiled));
        assert_noop_publishes(&set).await;
    }
}

#[tokio::test]
async fn a_cache_directory_owned_by_another_user_is_never_used() {
    let cache = Cache::new("cache-dir-owner");
    let plugins = plugins_with("cache-dir-owner-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    if !give_away(&cache.dir()) {
        return;
    }
    let set = cache.load(&plugins).await;
    assert_eq!(compiled(&set, "noop.wasm"), Some(CompileSource::Compiled));
}

#[tokio::test]
async fn a_corrupted_entry_is_recompiled_and_replaced() {
    let cache = Cache::new("cache-corrupted");
    let plugins = plugins_with("cache-corrupted-plugins", &[("noop", NOOP)]);
    cache.load(&plugins).await;
    let entry = cache.entry_path(NOOP);
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, bytes).unwrap();

    let recompiled = cache.load(&plugins).await;
    assert_eq!(
        compiled(&recompiled, "noop.wasm"),
        Some(CompileSource::Compiled)
    );
    assert_noop_publishes(&recompiled).await;
    let next = cache.load(&plugins).await;
    assert_eq!(compiled(&next, "noop.wasm"), Some(CompileSource::Cache));
    assert_eq!(cache.entry_count(), 1);
}

#[tokio::test]
async fn another_components_entry_under_this_ones_name_is_never_trusted() {
    let cache = Cache::new("cache-stale");
    let noop_only = plugins_with("cache-stale-noop", &[("noop", NOOP)]);
    cache.load(&noop_only).await;
    let noop_entry = cache.entry_path(NOOP);
    // noop's own entry, authentic under the host's key, where webhook's entry belongs.
    let noop_name = noop_entry
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let engine_part = noop_name.split_once('-').unwrap().1;
    let webhook_hash = ContentHash::of(&std::fs::read(WEBHOOK).unwrap());
    std::fs::copy(
        &noop_entry,
        cache.dir().join(format!("{webhook_hash}-{engine_part}")),
    )
    .unwrap();

    let webhook_only = plugins_with("cache-stale-webhook", &[("webhook", WEBHOOK)]);
    let set = cache.load(&webhook_only).await;
    assert_eq!(
        compiled(&set, "webhook.wasm"),
        Some(CompileSource::Compiled)
    );
    assert!(set.handler("WEBHOOK").is_some());
    assert!(set.handler("NOOP").is_none());
}
