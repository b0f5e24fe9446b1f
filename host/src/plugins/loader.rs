//! Loading one plugin: `<stem>.wasm` plus an optional `<stem>.toml` manifest beside it.
//!
//! A plugin is loaded only if every step succeeds: the manifest parses, the component compiles, it
//! exports exactly one known world, the manifest grants nothing outside that world, every import
//! links against the host, it instantiates within its limits, and (for a handler) it answers
//! `destination-type` with a valid type and `claim-scope` without failing. Anything else is a
//! [`LoadError`] and the plugin claims nothing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Component;

use crate::plugins::bindings::{DestinationHandlerPre, PublishObserverPre};
use crate::plugins::cache::{CompileSource, ContentHash};
use crate::plugins::engine::PluginEngine;
use crate::plugins::error::{CallError, LoadError};
use crate::plugins::handler::{HandlerPlugin, ScopeSummary};
use crate::plugins::manifest::{Manifest, ManifestError};
use crate::plugins::observer::ObserverPlugin;
use crate::plugins::pool::InstancePool;
use crate::plugins::sandbox::{HostServices, Sandbox};

/// The WIT world a component implements, told by its exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    DestinationHandler,
    PublishObserver,
}

/// The version of the `outbox:relay` WIT package (`wit/relay.wit`) this host implements.
pub const WIT_VERSION: &str = "0.2.0";

impl World {
    pub const HANDLER_EXPORT: &'static str = "outbox:relay/handler@0.2.0";
    pub const OBSERVER_EXPORT: &'static str = "outbox:relay/observer@0.2.0";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DestinationHandler => "destination-handler",
            Self::PublishObserver => "publish-observer",
        }
    }

    fn of(component: &Component, engine: &wasmtime::Engine) -> Result<Self, LoadError> {
        let component_type = component.component_type();
        let exports = |name: &str| component_type.get_export(engine, name).is_some();
        match (
            exports(Self::HANDLER_EXPORT),
            exports(Self::OBSERVER_EXPORT),
        ) {
            (true, false) => Ok(Self::DestinationHandler),
            (false, true) => Ok(Self::PublishObserver),
            (true, true) => Err(LoadError::TwoWorlds),
            (false, false) => Err(match other_version(component, engine) {
                Some(found) => LoadError::WitVersion { found },
                None => LoadError::UnknownWorld,
            }),
        }
    }
}

/// The version of `outbox:relay` a component that exports another version's `handler` or
/// `observer` was built for. A component's export names are its author's: the version is shown
/// only when it is short and made of the characters a version has.
fn other_version(component: &Component, engine: &wasmtime::Engine) -> Option<String> {
    component
        .component_type()
        .exports(engine)
        .find_map(|(name, _)| {
            ["outbox:relay/handler@", "outbox:relay/observer@"]
                .iter()
                .find_map(|prefix| name.strip_prefix(prefix))
        })
        .map(|version| {
            let plain = version.len() <= 32
                && version
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'+');
            if plain {
                version.to_owned()
            } else {
                "(unreadable)".to_owned()
            }
        })
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A loaded plugin, of either world.
#[derive(Clone)]
pub enum Plugin {
    Handler(Arc<HandlerPlugin>),
    Observer(Arc<ObserverPlugin>),
}

impl Plugin {
    pub fn world(&self) -> World {
        match self {
            Self::Handler(_) => World::DestinationHandler,
            Self::Observer(_) => World::PublishObserver,
        }
    }
}

/// A plugin that loaded, with what was learnt while loading it.
#[derive(Clone)]
pub struct LoadedPlugin {
    pub plugin: Plugin,
    pub compiled: CompileSource,
    /// The names of the component's imports, e.g. `wasi:http/outgoing-handler@0.2.12`.
    pub imports: Vec<String>,
    /// The handler's answer to `claim-scope` at load; `None` for an observer.
    pub claim_scope: Option<ScopeSummary>,
}

/// The bytes of one plugin's files.
#[derive(Debug, Clone)]
pub(crate) struct PluginSource {
    /// The file stem.
    pub(crate) name: String,
    pub(crate) wasm: Vec<u8>,
    pub(crate) wasm_hash: ContentHash,
    pub(crate) manifest: Option<ManifestFile>,
}

#[derive(Debug, Clone)]
pub(crate) struct ManifestFile {
    pub(crate) path: PathBuf,
    pub(crate) text: Vec<u8>,
    pub(crate) hash: ContentHash,
}

impl PluginSource {
    /// Reads `wasm` and the manifest at `manifest`, or without one the `<stem>.toml` beside `wasm`
    /// if there is one.
    pub(crate) async fn read(wasm: &Path, manifest: Option<&Path>) -> Result<Self, LoadError> {
        let name = wasm
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let wasm_bytes = read(wasm).await?;
        let manifest = match manifest {
            Some(path) => Some(ManifestFile::read(path).await?),
            None => match ManifestFile::read(&wasm.with_extension("toml")).await {
                Ok(file) => Some(file),
                Err(LoadError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    None
                }
                Err(error) => return Err(error),
            },
        };
        Ok(Self {
            name,
            wasm_hash: ContentHash::of(&wasm_bytes),
            wasm: wasm_bytes,
            manifest,
        })
    }

    fn manifest(&self) -> Result<Manifest, LoadError> {
        let Some(file) = &self.manifest else {
            return Ok(Manifest::default());
        };
        let invalid = |source| LoadError::Manifest {
            path: file.path.clone(),
            source,
        };
        let text = std::str::from_utf8(&file.text).map_err(|_| {
            invalid(ManifestError::Syntax {
                line: None,
                message: "not UTF-8".into(),
            })
        })?;
        Manifest::parse(text).map_err(invalid)
    }
}

impl ManifestFile {
    async fn read(path: &Path) -> Result<Self, LoadError> {
        let text = read(path).await?;
        Ok(Self {
            path: path.to_owned(),
            hash: ContentHash::of(&text),
            text,
        })
    }
}

async fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })
}

pub(crate) async fn load(
    engine: &PluginEngine,
    source: &PluginSource,
    services: &HostServices,
) -> Result<LoadedPlugin, LoadError> {
    let manifest = source.manifest()?;
    let (component, compiled) = engine
        .component(source.wasm.clone(), source.wasm_hash)
        .await?;
    let world = World::of(&component, engine.engine())?;
    if let Some(capability) = manifest.grants.outside(world) {
        return Err(LoadError::CapabilityOutsideWorld { capability });
    }
    let imports = component
        .component_type()
        .imports(engine.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    let link_error = |error: wasmtime::Error| LoadError::Link(format!("{error:#}"));
    let instance_pre = engine
        .linker()
        .instantiate_pre(&component)
        .map_err(link_error)?;
    let sandbox = Sandbox::new(engine, &source.name, &manifest, services);
    let policy = engine.pool_policy();
    let (plugin, claim_scope) = match world {
        World::DestinationHandler => {
            let pre = DestinationHandlerPre::new(instance_pre).map_err(link_error)?;
            let handler =
                HandlerPlugin::start(source.name.clone(), InstancePool::new(pre, sandbox, policy))
                    .await?;
            let scope = handler
                .claim_scope()
                .await
                .map_err(call_error("claim-scope"))?;
            (
                Plugin::Handler(Arc::new(handler)),
                Some(ScopeSummary::of(&scope)),
            )
        }
        World::PublishObserver => {
            let pre = PublishObserverPre::new(instance_pre).map_err(link_error)?;
            let pool = InstancePool::new(pre, sandbox, policy);
            pool.prepare().await.map_err(call_error("instantiate"))?;
            (
                Plugin::Observer(Arc::new(ObserverPlugin::new(source.name.clone(), pool))),
                None,
            )
        }
    };
    Ok(LoadedPlugin {
        plugin,
        compiled,
        imports,
        claim_scope,
    })
}

fn call_error(function: &'static str) -> impl Fn(CallError) -> LoadError {
    move |source| LoadError::Call { function, source }
}

#[cfg(test)]
mod tests {
    use super::{WIT_VERSION, World};

    #[test]
    fn the_host_implements_the_version_of_the_wit_it_ships() {
        let wit = include_str!("../../../wit/relay.wit");
        assert!(
            wit.starts_with(&format!("package outbox:relay@{WIT_VERSION};")),
            "wit/relay.wit declares another version than WIT_VERSION"
        );
        assert!(World::HANDLER_EXPORT.ends_with(&format!("@{WIT_VERSION}")));
        assert!(World::OBSERVER_EXPORT.ends_with(&format!("@{WIT_VERSION}")));
    }
}
