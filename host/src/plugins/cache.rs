//! The compiled-component cache on disk, so a restart (or a reload of an unchanged file) does not
//! recompile: Cranelift takes about 10 s for a Python component, reading the cache milliseconds.
//!
//! An entry is keyed by the SHA-256 of the component's bytes and by the engine's compatibility hash
//! (`Engine::precompile_compatibility_hash`: wasmtime version, target, compiler settings). Native
//! code is trusted only after checks: the entry starts with a header naming both keys and the SHA-256
//! and length of the code that follows; anything stale, truncated, corrupted or made by another engine
//! fails a check and is recompiled and rewritten, never loaded. Entries are written to a temporary
//! file and renamed into place, so a reader never sees a half-written one. The directory is created
//! private to the host's user: its contents are native code.

use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Identifies this file format; bump the version when the layout changes.
const MAGIC: &[u8; 16] = b"outbox-cwasm-v1\n";
const HEADER_LEN: usize = MAGIC.len() + 32 + 32 + 32 + 8;

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
}

impl ComponentCache {
    pub(crate) fn open(dir: &Path, engine: &Engine) -> io::Result<Self> {
        create_private_dir(dir)?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = ContentHash(hasher.0.finalize().into());
        Ok(Self {
            dir: dir.to_owned(),
            engine_key,
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
            .map_err(|error| io::Error::other(error.to_string()))
            .and_then(|code| self.write(&path, wasm_hash, &code));
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "cannot write the compiled-component cache entry");
        }
        Ok((component, CompileSource::Compiled))
    }

    fn entry_path(&self, wasm_hash: ContentHash) -> PathBuf {
        self.dir
            .join(format!("{wasm_hash}-{}.cwasm", self.engine_key))
    }

    fn header(&self, wasm_hash: ContentHash, code: &[u8]) -> Vec<u8> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&wasm_hash.0);
        header.extend_from_slice(&self.engine_key.0);
        header.extend_from_slice(&ContentHash::of(code).0);
        header.extend_from_slice(&(code.len() as u64).to_le_bytes());
        header
    }

    fn read(&self, engine: &Engine, path: &Path, wasm_hash: ContentHash) -> Option<Component> {
        let entry = fs::read(path).ok()?;
        let (header, code) = entry.split_at_checked(HEADER_LEN)?;
        if header != self.header(wasm_hash, code) {
            tracing::info!(path = %path.display(), "ignoring a compiled-component cache entry that fails its checks");
            return None;
        }
        // SAFETY: `deserialize` runs native code from these bytes. They passed every check above:
        // this file format, the same component bytes, the same engine configuration, and the
        // SHA-256 and length of the code as `Component::serialize` produced it when the entry was
        // written. The directory is private to the host's user.
        unsafe { Component::deserialize(engine, code) }.ok()
    }

    fn write(&self, path: &Path, wasm_hash: ContentHash, code: &[u8]) -> io::Result<()> {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let unique = WRITES.fetch_add(1, Ordering::Relaxed);
        let temporary = path.with_extension(format!("tmp-{}-{unique}", std::process::id()));
        let mut file = private_file(&temporary)?;
        file.write_all(&self.header(wasm_hash, code))?;
        file.write_all(code)?;
        file.sync_all()?;
        fs::rename(&temporary, path).inspect_err(|_| {
            let _ = fs::remove_file(&temporary);
        })
    }
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
fn private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> io::Result<fs::File> {
    fs::File::create(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component, and one that differs from it only by a custom section.
    const EMPTY: &[u8] = b"\0asm\x0d\0\x01\0";
    const EMPTY_WITH_SECTION: &[u8] = b"\0asm\x0d\0\x01\0\x00\x04\x03abc";

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

    #[cfg(unix)]
    #[test]
    fn the_cache_directory_is_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = Scratch::new("private");
        ComponentCache::open(&dir.0, &Engine::default()).unwrap();
        assert_eq!(
            fs::metadata(&dir.0).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
}
