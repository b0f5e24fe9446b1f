//! Plugin engines for tests: sized small, so the engines of many tests running at once fit in one
//! process's address space (each instance slot reserves virtual memory for a linear memory).

use std::path::Path;

use outbox_host::plugins::{EngineConfig, PluginEngine};

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
