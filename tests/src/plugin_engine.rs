//! Plugin engines for tests: sized small, so the engines of many tests running at once fit in one
//! process's address space (each instance slot reserves virtual memory for a linear memory).

use std::path::Path;

use outbox_host::plugins::{EngineConfig, PluginEngine, PluginSet, PluginStatus};

const TEST_INSTANCES: u32 = 64;

/// An engine without a compiled-component cache.
pub fn test_engine() -> PluginEngine {
    PluginEngine::new(EngineConfig {
        max_instances: TEST_INSTANCES,
        ..EngineConfig::default()
    })
    .expect("the plugin engine starts")
}

/// An engine that caches compiled components in `cache_dir`, which it creates private to the user;
/// a directory that exists with group or other permissions is not used (every load compiles).
pub fn test_engine_with_cache(cache_dir: &Path) -> PluginEngine {
    let config = EngineConfig {
        cache_dir: Some(cache_dir.to_owned()),
        max_instances: TEST_INSTANCES,
        ..EngineConfig::default()
    };
    PluginEngine::new(config).expect("the plugin engine starts")
}

/// The status of the plugin file named `file_name` in `set`; panics when there is none.
pub fn status<'a>(set: &'a PluginSet, file_name: &str) -> &'a PluginStatus {
    set.statuses()
        .find(|status| {
            status
                .file
                .file_name()
                .is_some_and(|name| name == file_name)
        })
        .unwrap_or_else(|| panic!("no status for {file_name}"))
}
