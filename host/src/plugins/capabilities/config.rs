//! `outbox:relay/config`: the string values of the manifest's `[config]` table, read-only.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use crate::plugins::bindings::handler::outbox::relay::config;
use crate::plugins::sandbox::StoreState;

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

pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    config::add_to_linker::<StoreState, HasSelf<PluginConfig>>(linker, |state| &mut state.config)
}
