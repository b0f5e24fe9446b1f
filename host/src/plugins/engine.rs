//! The wasmtime engine every plugin runs on: component model, async, the pooling allocator, epoch
//! interruption (with a ticker thread), one linker with every host capability, and the
//! compiled-component cache.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::plugins::cache::{CompileSource, ComponentCache, ContentHash};
use crate::plugins::capabilities;
use crate::plugins::capabilities::kafka::KafkaProducer;
use crate::plugins::compiling::Compiling;
use crate::plugins::error::{LoadError, PluginError};
use crate::plugins::manifest::Limits;
use crate::plugins::pool::PoolPolicy;
use crate::plugins::sandbox::{HostServices, StoreState};

/// How often the epoch advances: a guest that never yields gives the executor back this often, and
/// a call ends at most this long after its deadline.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

const POOL_FULL_WARN_EVERY: Duration = Duration::from_secs(60);

/// What one component instance may hold of the engine's pool. The pool is sized by these per
/// component instance, so no component can take the slots of others: it runs out of component
/// instances (which each plugin's `max_concurrency` shares out) before anything else. A component
/// that needs more is refused when it is compiled, with wasmtime's message naming the count and the
/// cap. Measured: a Rust component has 3 core instances; componentize-py's and
/// ComponentizeJS's load within the defaults too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComponentCaps {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Default for ComponentCaps {
    fn default() -> Self {
        Self {
            core_instances: 20,
            memories: 2,
            tables: 8,
        }
    }
}

/// How the engine is set up. The defaults suit a service with tens of plugins.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where compiled components are cached; `None` compiles on every load. Only the host may
    /// write there: never a directory inside the plugins directory (see [`crate::plugins::cache`]).
    pub cache_dir: Option<PathBuf>,
    /// Component instances alive at once, kept or in use, across all plugins. Each reserves a linear
    /// memory slot of virtual address space (4 GiB, not resident), so 1,000 reserve about 4 TiB of
    /// the 128 TiB a 64-bit process has.
    pub max_instances: u32,
    pub per_component: ComponentCaps,
    pub pool: PoolPolicy,
    /// The longest any plugin call may run, whatever its manifest asks: the relay's lease leaves
    /// no more (see [`crate::config::RelayConfig::max_call_time`]). `None`: the manifest decides.
    pub max_call_time: Option<Duration>,
    /// The producer the `kafka` capability produces through; `None` denies every record as "not
    /// configured".
    pub kafka: Option<KafkaProducer>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            max_instances: 1_000,
            per_component: ComponentCaps::default(),
            pool: PoolPolicy::default(),
            max_call_time: None,
            kafka: None,
        }
    }
}

/// The plugin runtime's engine; cheap to clone.
#[derive(Clone)]
pub struct PluginEngine {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: Option<ComponentCache>,
    pool: PoolPolicy,
    max_call_time: Option<Duration>,
    /// What every plugin this engine loads for the host is backed by.
    services: HostServices,
    compiling: Compiling,
    /// When a full instance pool was last warned about.
    pool_full_warned_at: Mutex<Option<Instant>>,
    _ticker: EpochTicker,
}

impl PluginEngine {
    pub fn new(config: EngineConfig) -> Result<Self, PluginError> {
        let engine = Engine::new(&wasmtime_config(config.max_instances, config.per_component))
            .map_err(|error| PluginError::Engine(format!("{error:#}")))?;
        let mut linker = Linker::new(&engine);
        capabilities::add_to_linker(&mut linker)
            .map_err(|error| PluginError::Engine(format!("{error:#}")))?;
        let cache = config.cache_dir.and_then(|dir| {
            ComponentCache::open(&dir, &engine)
                .inspect_err(|error| {
                    tracing::warn!(%error, "the compiled-component cache is not used: every plugin is compiled when it loads");
                })
                .ok()
        });
        let ticker = EpochTicker::start(engine.clone()).map_err(|error| {
            PluginError::Engine(format!("cannot start the epoch ticker: {error}"))
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache,
                pool: config.pool,
                max_call_time: config.max_call_time,
                services: HostServices::with_kafka(config.kafka),
                compiling: Compiling::default(),
                pool_full_warned_at: Mutex::new(None),
                _ticker: ticker,
            }),
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// A full pool is this engine's condition, shared by every plugin, and it lasts: it is warned
    /// about at most once every [`POOL_FULL_WARN_EVERY`], however many calls it stops.
    pub(crate) fn warn_pool_full(&self) {
        let mut warned_at = self
            .inner
            .pool_full_warned_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if warned_at.is_some_and(|at| at.elapsed() < POOL_FULL_WARN_EVERY) {
            return;
        }
        *warned_at = Some(Instant::now());
        tracing::warn!(
            "every instance of the engine's pool is taken: calls that need another are not made, and relay rows wait without spending an attempt; size plugins.max_instances to the plugins' max_concurrency + 1, summed (logged at most once a minute; outbox_plugin_call_errors_total{{error_type=\"instantiate\"}} counts each call)"
        );
    }

    pub(crate) fn linker(&self) -> &Linker<StoreState> {
        &self.inner.linker
    }

    pub(crate) fn pool_policy(&self) -> PoolPolicy {
        self.inner.pool
    }

    pub(crate) fn host_services(&self) -> &HostServices {
        &self.inner.services
    }

    /// `limits` with its time limit held to the engine's `max_call_time`; a plugin held to it is
    /// named in the log, as its manifest promises more time than it gets.
    pub(crate) fn held_to_max_call_time(&self, plugin: &str, limits: Limits) -> Limits {
        match self.inner.max_call_time {
            Some(max) if limits.timeout() > max => {
                let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
                tracing::warn!(
                    plugin,
                    timeout_ms = limits.timeout_ms,
                    max_ms,
                    "limits.timeout_ms is longer than two thirds of relay.lease_timeout_ms allow: \
                     the plugin's calls are cut at max_ms, so none outlives its row's lease"
                );
                Limits {
                    timeout_ms: max_ms,
                    ..limits
                }
            }
            _ => limits,
        }
    }

    /// The plugin files this engine is loading now.
    pub fn compiling(&self) -> &Compiling {
        &self.inner.compiling
    }

    /// Compiles `wasm` (or reads it from the cache) on a blocking thread: compiling a large
    /// component takes seconds of CPU.
    pub(crate) async fn component(
        &self,
        wasm: Vec<u8>,
        hash: ContentHash,
    ) -> Result<(Component, CompileSource), LoadError> {
        let inner = self.inner.clone();
        let compiled = tokio::task::spawn_blocking(move || match &inner.cache {
            Some(cache) => cache.load_or_compile(&inner.engine, &wasm, hash),
            None => {
                Component::from_binary(&inner.engine, &wasm).map(|c| (c, CompileSource::Compiled))
            }
        })
        .await
        .map_err(|error| LoadError::Compile(error.to_string()))?;
        compiled.map_err(|error| LoadError::Compile(format!("{error:#}")))
    }
}

fn wasmtime_config(max_instances: u32, caps: ComponentCaps) -> Config {
    let mut pooling = PoolingAllocationConfig::default();
    pooling
        .total_component_instances(max_instances)
        .max_core_instances_per_component(caps.core_instances)
        .max_memories_per_component(caps.memories)
        .max_tables_per_component(caps.tables)
        .total_core_instances(max_instances.saturating_mul(caps.core_instances))
        .total_memories(max_instances.saturating_mul(caps.memories))
        .total_tables(max_instances.saturating_mul(caps.tables))
        .total_stacks(max_instances)
        .max_memory_size(Limits::MAX_MEMORY_MB as usize * 1024 * 1024);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    config
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Without a ticker no call could be interrupted, so failing to start one fails the engine.
    fn start(engine: Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("plugin-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::park_timeout(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
