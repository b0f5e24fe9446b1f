//! `outbox:relay/config`: the string values of the manifest's `[config]` table, read-only.

use std::collections::BTreeMap;
use std::sync::Arc;

use toml::{Table, Value};
use wasmtime::component::{HasSelf, Linker};

use crate::plugins::bindings::handler::outbox::relay::config;
use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::capabilities::{Capability, Section};
use crate::plugins::manifest::ManifestError;
use crate::plugins::sandbox::StoreState;

/// `[config]`: string values a plugin reads by key, in both worlds.
pub(crate) enum Config {}

impl Capability for Config {
    const SECTION: Option<Section<BTreeMap<String, String>>> = Some(Section {
        name: "config",
        read: read_section,
    });

    type Grant = BTreeMap<String, String>;
    type Services = ();
    type PluginState = PluginConfig;
    type InstanceState = PluginConfig;

    fn plugin_state(values: &BTreeMap<String, String>, _: &(), _: &PluginLog) -> PluginConfig {
        PluginConfig::new(values.clone())
    }

    fn instance_state(config: &PluginConfig) -> PluginConfig {
        config.clone()
    }

    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
        config::add_to_linker::<StoreState, HasSelf<PluginConfig>>(linker, |state| {
            &mut state.capabilities.config
        })
    }
}

/// Every key is the plugin's own; every value must be a string.
fn read_section(entries: &Table) -> Result<BTreeMap<String, String>, ManifestError> {
    let mut values = BTreeMap::new();
    for (key, value) in entries {
        let Value::String(text) = value else {
            return Err(ManifestError::WrongType {
                key: format!("config.{key}"),
                expected: "a string",
            });
        };
        values.insert(key.clone(), text.clone());
    }
    Ok(values)
}

/// The `[config]` values granted to one plugin; a key the manifest does not list reads as absent.
#[derive(Debug, Clone, Default)]
pub struct PluginConfig {
    values: Arc<BTreeMap<String, String>>,
}

impl PluginConfig {
    pub fn new(values: BTreeMap<String, String>) -> Self {
        Self {
            values: Arc::new(values),
        }
    }
}

impl config::Host for PluginConfig {
    fn get(&mut self, key: String) -> Option<String> {
        self.values.get(&key).cloned()
    }
}
