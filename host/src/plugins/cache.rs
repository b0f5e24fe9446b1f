//! The compiled-component cache on disk, so a restart (or a reload of an unchanged file) does not
//! recompile: Cranelift takes about 10 s for a Python component, reading the cache milliseconds.
//!
//! An entry is native code the host will run, so it is trusted only when the host itself wrote it:
//! - The directory lives where only the host writes (by default under its state directory, never
//!   inside the plugins directory) and is created `0700`. Every read and write first checks that
//!   the directory and the entry are owned by the host's user with no group or other permissions.
//! - Every entry is authenticated with HMAC-SHA256 under a random key the host generates on first
//!   start into the directory (`key`, `0600`). Whoever can drop plugins cannot see the key, so
//!   cannot forge an entry, whatever checksum they recompute.
//! - An entry is named by the SHA-256 of the component's bytes and the engine's compatibility hash
//!   (`Engine::precompile_compatibility_hash`: wasmtime version, target, compiler settings); its
//!   header repeats both and the code's length, all under the tag.
//!
//! Any doubt (a missing key, a wrong owner or mode, a tag that does not verify, a stale, truncated
//! or foreign entry) means the component is compiled afresh, with a warning that names the file but
//! never its contents. Entries are written to a temporary file and renamed into place, so a reader
//! never sees a half-written one.
//!
//! An entry's layout: [`MAGIC`] (16 bytes), the component's SHA-256 (32), the engine key (32), the
//! code's length (8, little-endian), the tag over all of these and the code (32), then the code.

use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Identifies this file format; bump the version when the layout changes.
const MAGIC: &[u8; 16] = b"outbox-cwasm-v2\n";
/// The authenticated fields before the tag: magic, component hash, engine key, code length.
const FIELDS_LEN: usize = MAGIC.len() + 32 + 32 + 8;
const TAG_LEN: usize = 32;
const HEADER_LEN: usize = FIELDS_LEN + TAG_LEN;
const KEY_LEN: usize = 32;
/// The key's file name inside the cache directory; entries end in `.cwasm`, so never clash with it.
const KEY_FILE: &str = "key";

type HmacSha256 = Hmac<Sha256>;

/// The SHA-256 of a file's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

/// Where a loaded component's native code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    Cache,
    Compiled,
}

impl fmt::Display for CompileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cache => "cache",
            Self::Compiled => "compiled",
        })
    }
}

/// Why a cache directory, key or entry is not trusted. Never carries a file's contents.
#[derive(Debug, thiserror::Error)]
pub enum Doubt {
    #[error("it is not owned by the host's user")]
    Owner,
    #[error("group or other users have permissions on it (mode {0:o}); it must be private")]
    Mode(u32),
    #[error("it is not a directory")]
    NotADirectory,
    #[error("it is not a regular file")]
    NotAFile,
    #[error("its owner and permissions cannot be checked on this platform")]
    Unverifiable,
    #[error("it is not {KEY_LEN} bytes long")]
    KeyLength,
    #[error("its header names another format, component, engine or code length")]
    Header,
    #[error("its authentication tag does not verify (tampered with, or written under another key)")]
    Tag,
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Doubt {
    fn is_missing(&self) -> bool {
        matches!(self, Self::Io(error) if error.kind() == io::ErrorKind::NotFound)
    }
}

/// The cache directory cannot be used; the host then compiles every component it loads.
#[derive(Debug, thiserror::Error)]
#[error("{}: {doubt}", path.display())]
pub struct CacheError {
    pub path: PathBuf,
    pub doubt: Doubt,
}

/// The HMAC key. No `Debug` output of its bytes.
struct Key([u8; KEY_LEN]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Feeds `Hash` output into SHA-256, for a digest that is stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
    }
}

#[derive(Debug)]
pub(crate) struct ComponentCache {
    dir: PathBuf,
    engine_key: ContentHash,
    key: Key,
}

impl ComponentCache {
    /// Creates `dir` (`0700`) if missing, checks that it is private to the host's user, and reads
    /// its key, generating one on first use (or replacing one that is not private).
    pub(crate) fn open(dir: &Path, engine: &Engine) -> Result<Self, CacheError> {
        let untrusted = |path: &Path| {
            let path = path.to_owned();
            move |doubt| CacheError { path, doubt }
        };
        create_private_dir(dir).map_err(|error| untrusted(dir)(Doubt::Io(error)))?;
        check_dir(dir).map_err(untrusted(dir))?;
        let key_path = dir.join(KEY_FILE);
        let key = load_or_create_key(&key_path).map_err(untrusted(&key_path))?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = ContentHash(hasher.0.finalize().into());
        Ok(Self {
            dir: dir.to_owned(),
            engine_key,
            key,
        })
    }

    /// The component for `wasm`, from a verified cache entry or freshly compiled (then cached).
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        wasm_hash: ContentHash,
    ) -> wasmtime::Result<(Component, CompileSource)> {
        let path = self.entry_path(wasm_hash);
        if let Some(component) = self.read(engine, &path, wasm_hash) {
            return Ok((component, CompileSource::Cache));
        }
        let component = Component::from_binary(engine, wasm)?;
        let written = component
            .serialize()
            .map_err(|error| Doubt::Io(io::Error::other(error.to_string())))
            .and_then(|code| self.write(&path, wasm_hash, &code));
        if let Err(doubt) = written {
            tracing::warn!(path = %path.display(), %doubt, "cannot write the compiled-component cache entry");
        }
        Ok((component, CompileSource::Compiled))
    }

    fn entry_path(&self, wasm_hash: ContentHash) -> PathBuf {
        self.dir
            .join(format!("{wasm_hash}-{}.cwasm", self.engine_key))
    }

    /// Everything the tag covers before the code.
    fn fields(&self, wasm_hash: ContentHash, code_len: usize) -> [u8; FIELDS_LEN] {
        let mut fields = [0; FIELDS_LEN];
        let parts: [&[u8]; 4] = [
            MAGIC,
            &wasm_hash.0,
            &self.engine_key.0,
            &(code_len as u64).to_le_bytes(),
        ];
        let mut at = 0;
        for part in parts {
            fields[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        fields
    }

    fn mac(&self, fields: &[u8], code: &[u8]) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.key.0).expect("HMAC takes a key of any length");
        mac.update(fields);
        mac.update(code);
        mac
    }

    fn read(&self, engine: &Engine, path: &Path, wasm_hash: ContentHash) -> Option<Component> {
        let entry = match self.verified_entry(path, wasm_hash) {
            Ok(entry) => entry,
            Err(doubt) if doubt.is_missing() => return None,
            Err(doubt) => {
                tracing::warn!(path = %path.display(), %doubt, "refusing a compiled-component cache entry; compiling the component instead");
                return None;
            }
        };
        // SAFETY: `deserialize` runs native code from these bytes. They are exactly what
        // `Component::serialize` produced in this host: the entry and its directory are private to
        // the host's user, and its tag verified under the host's secret key over this format, the
        // same component bytes, the same engine configuration and the code itself.
        match unsafe { Component::deserialize(engine, &entry[HEADER_LEN..]) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %format!("{error:#}"), "cannot use a compiled-component cache entry; compiling the component instead");
                None
            }
        }
    }

    /// The whole entry at `path`, once every check passed.
    fn verified_entry(&self, path: &Path, wasm_hash: ContentHash) -> Result<Vec<u8>, Doubt> {
        check_dir(&self.dir)?;
        let entry = read_private_file(path)?;
        let (header, code) = entry.split_at_checked(HEADER_LEN).ok_or(Doubt::Header)?;
        let (fields, tag) = header.split_at(FIELDS_LEN);
        if fields != self.fields(wasm_hash, code.len()) {
            return Err(Doubt::Header);
        }
        self.mac(fields, code)
            .verify_slice(tag)
            .map_err(|_| Doubt::Tag)?;
        Ok(entry)
    }

    fn write(&self, path: &Path, wasm_hash: ContentHash, code: &[u8]) -> Result<(), Doubt> {
        check_dir(&self.dir)?;
        let fields = self.fields(wasm_hash, code.len());
        let tag = self.mac(&fields, code).finalize().into_bytes();
        let temporary = temporary_path(path);
        write_private_file(&temporary, &[&fields, &tag, code])?;
        fs::rename(&temporary, path).map_err(|error| {
            let _ = fs::remove_file(&temporary);
            Doubt::Io(error)
        })
    }
}

/// The key at `path`; a new random one if there is none, or if the one there is not private (it
/// may have been read, so entries made under it are no longer trusted).
fn load_or_create_key(path: &Path) -> Result<Key, Doubt> {
    match read_key(path) {
        Ok(key) => Ok(key),
        Err(doubt) if doubt.is_missing() => create_key(path, false),
        Err(doubt) => {
            tracing::warn!(path = %path.display(), %doubt, "replacing the compiled-component cache key; entries made under the old one will be recompiled");
            create_key(path, true)
        }
    }
}

fn read_key(path: &Path) -> Result<Key, Doubt> {
    let bytes = read_private_file(path)?;
    bytes.try_into().map(Key).map_err(|_| Doubt::KeyLength)
}

/// Writes a fresh key beside `path` and moves it into place: over the old key when `replace`,
/// else only if there is still none (a host starting at the same moment may have made one: that
/// one is then used).
fn create_key(path: &Path, replace: bool) -> Result<Key, Doubt> {
    let mut key = [0; KEY_LEN];
    getrandom::fill(&mut key).map_err(io::Error::from)?;
    let temporary = temporary_path(path);
    write_private_file(&temporary, &[&key])?;
    let placed = if replace {
        fs::rename(&temporary, path)
    } else {
        fs::hard_link(&temporary, path)
    };
    if !(replace && placed.is_ok()) {
        let _ = fs::remove_file(&temporary);
    }
    match placed {
        Ok(()) => Ok(Key(key)),
        Err(error) if !replace && error.kind() == io::ErrorKind::AlreadyExists => read_key(path),
        Err(error) => Err(error.into()),
    }
}

/// A name beside `path` no other writer uses.
fn temporary_path(path: &Path) -> PathBuf {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let unique = WRITES.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp-{}-{unique}", std::process::id()));
    path.with_file_name(name)
}

fn check_dir(dir: &Path) -> Result<(), Doubt> {
    let metadata = fs::metadata(dir)?;
    if !metadata.is_dir() {
        return Err(Doubt::NotADirectory);
    }
    check_private(&metadata)
}

/// Reads a regular file after checking, on the open file itself, that it is private.
fn read_private_file(path: &Path) -> Result<Vec<u8>, Doubt> {
    let mut file = fs::File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(Doubt::NotAFile);
    }
    check_private(&metadata)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or_default());
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Creates `path` (which must not exist) private to the host's user, writes `parts` and syncs.
fn write_private_file(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let mut file = create_private_file(path)?;
    let written = parts
        .iter()
        .try_for_each(|part| file.write_all(part))
        .and_then(|()| file.sync_all());
    if written.is_err() {
        let _ = fs::remove_file(path);
    }
    written
}

#[cfg(unix)]
fn check_private(metadata: &fs::Metadata) -> Result<(), Doubt> {
    use std::os::unix::fs::MetadataExt;
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(Doubt::Owner);
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Doubt::Mode(mode));
    }
    Ok(())
}

/// Without owners and modes to check, nothing on disk is trusted: every load compiles.
#[cfg(not(unix))]
fn check_private(_metadata: &fs::Metadata) -> Result<(), Doubt> {
    Err(Doubt::Unverifiable)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

#[cfg(unix)]
fn create_private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private_file(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The smallest valid component, and one that differs from it only by a custom section.
    const EMPTY: &[u8] = b"\0asm\x0d\0\x01\0";
    const EMPTY_WITH_SECTION: &[u8] = b"\0asm\x0d\0\x01\0\x00\x04\x03abc";

    /// A directory that does not exist yet (the cache creates it), removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(label: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("outbox-cache-test-{label}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            Self(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn source(cache: &ComponentCache, engine: &Engine, wasm: &[u8]) -> CompileSource {
        cache
            .load_or_compile(engine, wasm, ContentHash::of(wasm))
            .unwrap()
            .1
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn set_mode(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_compiled_component_is_read_back_from_its_entry() {
        let dir = Scratch::new("hit");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Cache);
    }

    #[test]
    fn an_entry_written_by_an_engine_with_other_settings_is_recompiled() {
        let dir = Scratch::new("foreign");
        let ours = Engine::default();
        let mut config = wasmtime::Config::new();
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        let theirs = Engine::new(&config).unwrap();
        let our_cache = ComponentCache::open(&dir.0, &ours).unwrap();
        let their_cache = ComponentCache::open(&dir.0, &theirs).unwrap();
        assert_ne!(our_cache.engine_key, their_cache.engine_key);

        source(&their_cache, &theirs, EMPTY);
        let hash = ContentHash::of(EMPTY);
        fs::copy(their_cache.entry_path(hash), our_cache.entry_path(hash)).unwrap();
        assert_eq!(source(&our_cache, &ours, EMPTY), CompileSource::Compiled);
    }

    #[test]
    fn an_entry_of_another_component_under_this_ones_name_is_recompiled() {
        let dir = Scratch::new("stale");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        source(&cache, &engine, EMPTY);
        let other = cache.entry_path(ContentHash::of(EMPTY_WITH_SECTION));
        fs::copy(cache.entry_path(ContentHash::of(EMPTY)), &other).unwrap();
        assert_eq!(
            source(&cache, &engine, EMPTY_WITH_SECTION),
            CompileSource::Compiled
        );
    }

    #[test]
    fn a_truncated_entry_is_recompiled_and_rewritten() {
        let dir = Scratch::new("truncated");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        source(&cache, &engine, EMPTY);
        let path = cache.entry_path(ContentHash::of(EMPTY));
        let entry = fs::read(&path).unwrap();
        fs::write(&path, &entry[..entry.len() - 1]).unwrap();
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Cache);
    }

    #[test]
    fn an_entry_whose_tag_does_not_verify_is_recompiled() {
        let dir = Scratch::new("tag");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        source(&cache, &engine, EMPTY);
        let path = cache.entry_path(ContentHash::of(EMPTY));
        let mut entry = fs::read(&path).unwrap();
        entry[FIELDS_LEN] ^= 1;
        fs::write(&path, &entry).unwrap();
        assert!(matches!(
            cache.verified_entry(&path, ContentHash::of(EMPTY)),
            Err(Doubt::Tag)
        ));
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
    }

    #[test]
    fn entries_written_under_another_key_are_recompiled() {
        let engine = Engine::default();
        let (first, second) = (Scratch::new("key-a"), Scratch::new("key-b"));
        let cache = ComponentCache::open(&first.0, &engine).unwrap();
        let other = ComponentCache::open(&second.0, &engine).unwrap();
        source(&other, &engine, EMPTY);
        let hash = ContentHash::of(EMPTY);
        fs::copy(other.entry_path(hash), cache.entry_path(hash)).unwrap();
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
    }

    #[test]
    fn the_directory_is_0700_and_the_key_0600() {
        let dir = Scratch::new("private");
        ComponentCache::open(&dir.0, &Engine::default()).unwrap();
        assert_eq!(mode(&dir.0), 0o700);
        assert_eq!(mode(&dir.0.join(KEY_FILE)), 0o600);
        assert_eq!(fs::read(dir.0.join(KEY_FILE)).unwrap().len(), KEY_LEN);
    }

    #[test]
    fn the_key_is_kept_across_opens() {
        let dir = Scratch::new("key-kept");
        let engine = Engine::default();
        source(
            &ComponentCache::open(&dir.0, &engine).unwrap(),
            &engine,
            EMPTY,
        );
        let reopened = ComponentCache::open(&dir.0, &engine).unwrap();
        assert_eq!(source(&reopened, &engine, EMPTY), CompileSource::Cache);
    }

    #[test]
    fn a_key_readable_by_others_is_replaced_and_its_entries_recompiled() {
        let dir = Scratch::new("key-exposed");
        let engine = Engine::default();
        source(
            &ComponentCache::open(&dir.0, &engine).unwrap(),
            &engine,
            EMPTY,
        );
        let key_path = dir.0.join(KEY_FILE);
        let old_key = fs::read(&key_path).unwrap();
        set_mode(&key_path, 0o644);

        let reopened = ComponentCache::open(&dir.0, &engine).unwrap();
        assert_eq!(mode(&key_path), 0o600);
        assert_ne!(fs::read(&key_path).unwrap(), old_key);
        assert_eq!(source(&reopened, &engine, EMPTY), CompileSource::Compiled);
    }

    #[test]
    fn a_key_of_the_wrong_length_is_replaced() {
        let dir = Scratch::new("key-short");
        ComponentCache::open(&dir.0, &Engine::default()).unwrap();
        let key_path = dir.0.join(KEY_FILE);
        fs::write(&key_path, b"short").unwrap();
        ComponentCache::open(&dir.0, &Engine::default()).unwrap();
        assert_eq!(fs::read(&key_path).unwrap().len(), KEY_LEN);
    }

    #[test]
    fn a_directory_others_can_write_is_not_opened() {
        let dir = Scratch::new("shared-dir");
        fs::create_dir_all(&dir.0).unwrap();
        set_mode(&dir.0, 0o770);
        let error = ComponentCache::open(&dir.0, &Engine::default()).unwrap_err();
        assert!(matches!(error.doubt, Doubt::Mode(0o770)), "{error}");
        assert!(!dir.0.join(KEY_FILE).exists());
    }

    #[test]
    fn an_entry_others_can_read_is_refused_and_rewritten_private() {
        let dir = Scratch::new("entry-mode");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        source(&cache, &engine, EMPTY);
        let path = cache.entry_path(ContentHash::of(EMPTY));
        set_mode(&path, 0o644);
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Cache);
    }

    #[test]
    fn nothing_is_read_or_written_once_the_directory_is_opened_to_others() {
        let dir = Scratch::new("dir-opened");
        let engine = Engine::default();
        let cache = ComponentCache::open(&dir.0, &engine).unwrap();
        source(&cache, &engine, EMPTY);
        set_mode(&dir.0, 0o777);
        assert_eq!(source(&cache, &engine, EMPTY), CompileSource::Compiled);
        assert_eq!(
            source(&cache, &engine, EMPTY_WITH_SECTION),
            CompileSource::Compiled
        );
        assert!(
            !cache
                .entry_path(ContentHash::of(EMPTY_WITH_SECTION))
                .exists()
        );
    }
}
