//! The sandbox of one plugin instance: the `Store` data holding the state of each capability (as
//! the plugin's grants made it), its memory limit, and the per-call time limit.
//!
//! Time: every call arms a deadline. The engine's epoch ticks every few milliseconds; at each tick a
//! running guest yields to the async executor (so a guest that never yields cannot stall a tokio
//! worker) and is interrupted once the deadline has passed. Time spent in host calls (an HTTP
//! request) is bounded by the caller's `tokio::time::timeout` with the same limit.
//! CPU: a call that has computed through [`FULL_SPEED_TICKS`] ticks is a runaway or a heavy job;
//! from then on it sleeps [`THROTTLED_SLEEP_TICKS`] ticks after each tick it runs, so an endless
//! loop takes a fraction of a core until its time limit instead of a whole one from other plugins.
//! Memory: the store's limiter counts every linear memory of the instance against the plugin's limit
//! and turns a growth past it into a trap, remembered so the call ends as `memory`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::I32Exit;

use crate::plugins::capabilities::kafka::{KafkaBackend, KafkaProducer};
use crate::plugins::capabilities::log::{LogSink, PluginLog};
use crate::plugins::capabilities::{self, InstanceStates, PluginStates};
use crate::plugins::engine::{EPOCH_TICK, PluginEngine};
use crate::plugins::error::CallError;
use crate::plugins::manifest::{Limits, Manifest};

/// Ticks a call computes at full speed before it is throttled: far more than a well-behaved
/// call needs (measured calls take microseconds to a few milliseconds).
const FULL_SPEED_TICKS: u32 = 5;
/// Ticks a throttled call sleeps after each tick it runs: a quarter of a core at most.
const THROTTLED_SLEEP_TICKS: u32 = 3;

/// What plugins are backed by: the real host's services by default, or the mock runner's.
#[derive(Clone, Default)]
pub(crate) struct HostServices {
    /// Where every plugin's log lines go.
    pub(crate) log: LogSink,
    pub(crate) capabilities: capabilities::Services,
}

impl HostServices {
    /// The real host's services, with its Kafka producer if it has one.
    pub(crate) fn with_kafka(kafka: Option<KafkaProducer>) -> Self {
        let mut services = Self::default();
        services.capabilities.kafka = kafka.map(KafkaBackend::Producer);
        services
    }
}

/// Everything one plugin is granted, shared by all its instances.
struct Grants {
    log: PluginLog,
    capabilities: PluginStates,
    limits: Limits,
}

/// Makes stores for one plugin's instances and judges how their calls ended. It holds the
/// [`PluginEngine`], not just the wasmtime engine, so the epoch ticker runs while any plugin lives.
#[derive(Clone)]
pub(crate) struct Sandbox {
    engine: PluginEngine,
    grants: Arc<Grants>,
}

impl Sandbox {
    pub(crate) fn new(
        engine: &PluginEngine,
        name: &str,
        manifest: &Manifest,
        services: &HostServices,
    ) -> Self {
        let limits = engine.held_to_max_call_time(name, manifest.limits);
        let log = PluginLog::new(name.into(), services.log.clone(), &limits);
        let grants = Grants {
            capabilities: PluginStates::new(&manifest.grants, &services.capabilities, &log),
            log,
            limits,
        };
        Self {
            engine: engine.clone(),
            grants: Arc::new(grants),
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.grants.limits
    }

    /// An instance could not be made because the engine's pool is full.
    pub(crate) fn pool_full(&self) -> CallError {
        self.engine.warn_pool_full();
        CallError::PoolFull
    }

    pub(crate) fn log_lines_dropped(&self) -> u64 {
        self.grants.log.dropped()
    }

    /// A store with a fresh state of each capability, its memory limit and the epoch callback that
    /// enforces the time limit.
    pub(crate) fn new_store(&self) -> Store<StoreState> {
        let grants = &self.grants;
        let state = StoreState {
            table: ResourceTable::new(),
            capabilities: grants.capabilities.instance(),
            memory: MemoryLimiter {
                limit_bytes: grants.limits.memory_bytes(),
                used_bytes: 0,
                exceeded: false,
            },
            deadline: Instant::now(),
            ticks_computed: 0,
            timed_out: false,
        };
        let mut store = Store::new(self.engine.engine(), state);
        store.limiter(|state| &mut state.memory);
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            let now = Instant::now();
            if now >= state.deadline {
                state.timed_out = true;
                return Ok(UpdateDeadline::Interrupt);
            }
            state.ticks_computed += 1;
            if state.ticks_computed <= FULL_SPEED_TICKS {
                return Ok(UpdateDeadline::Yield(1));
            }
            let pause = (EPOCH_TICK * THROTTLED_SLEEP_TICKS).min(state.deadline - now);
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::time::sleep(pause)),
            ))
        });
        store
    }

    /// Starts the clock of one call (or instantiation) and returns its time limit.
    pub(crate) fn arm(&self, store: &mut Store<StoreState>) -> Duration {
        let limit = self.grants.limits.timeout();
        let state = store.data_mut();
        state.deadline = Instant::now() + limit;
        state.ticks_computed = 0;
        store.set_epoch_deadline(1);
        limit
    }

    /// The limit a call or instantiation that failed with an error ran into, if any.
    pub(crate) fn limit_hit(&self, state: &StoreState) -> Option<CallError> {
        let limits = self.grants.limits;
        if state.timed_out {
            Some(CallError::Timeout {
                limit_ms: limits.timeout_ms,
            })
        } else if state.memory.exceeded {
            Some(CallError::Memory {
                limit_mb: limits.memory_mb,
            })
        } else {
            None
        }
    }

    pub(crate) fn timeout(&self) -> CallError {
        CallError::Timeout {
            limit_ms: self.grants.limits.timeout_ms,
        }
    }
}

/// A fixed description: a trap code, an exit status, a transfer past its limit, or that a host call
/// failed. Error chains from host calls are not shown, since some quote request data.
pub(crate) fn describe_trap(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<Trap>() {
        trap.to_string()
    } else if let Some(exit) = error.downcast_ref::<I32Exit>() {
        format!("the plugin exited with status {}", exit.0)
    } else if error
        .chain()
        .any(|cause| cause.to_string().starts_with(TRANSFER_LIMIT_ERROR))
    {
        "the plugin handed the host more data in one transfer than it accepts".to_owned()
    } else {
        "a host call failed".to_owned()
    }
}

/// How wasmtime's message starts when a transfer runs out of hostcall fuel (its error type is
/// private); `tests/hostile_plugins.rs` pins it.
const TRANSFER_LIMIT_ERROR: &str = "too much data is being copied between the host and the guest";

/// The data of one plugin instance's `Store`.
pub(crate) struct StoreState {
    /// The resources of every capability (WASI streams, HTTP requests), in one table because
    /// they refer to each other.
    pub(crate) table: ResourceTable,
    pub(crate) capabilities: InstanceStates,
    memory: MemoryLimiter,
    deadline: Instant,
    /// Epoch ticks in which the current call was computing, for the CPU throttle.
    ticks_computed: u32,
    timed_out: bool,
}

/// Counts all linear memories of one instance against the plugin's limit.
struct MemoryLimiter {
    limit_bytes: usize,
    used_bytes: usize,
    exceeded: bool,
}

/// Raised as a trap when a memory would grow past the plugin's limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded")]
struct MemoryLimitExceeded;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        let used = self
            .used_bytes
            .saturating_sub(current)
            .saturating_add(desired);
        if used > self.limit_bytes {
            self.exceeded = true;
            return Err(MemoryLimitExceeded.into());
        }
        self.used_bytes = used;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|maximum| desired <= maximum))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn limiter(limit_mb: usize) -> MemoryLimiter {
        MemoryLimiter {
            limit_bytes: limit_mb * MIB,
            used_bytes: 0,
            exceeded: false,
        }
    }

    #[test]
    fn growth_within_the_limit_is_allowed() {
        let mut limiter = limiter(2);
        assert!(limiter.memory_growing(0, MIB, None).unwrap());
        assert!(limiter.memory_growing(MIB, 2 * MIB, None).unwrap());
        assert!(!limiter.exceeded);
    }

    #[test]
    fn growth_past_the_limit_traps_and_is_remembered() {
        let mut limiter = limiter(2);
        assert!(limiter.memory_growing(0, MIB, None).unwrap());
        assert!(limiter.memory_growing(MIB, 3 * MIB, None).is_err());
        assert!(limiter.exceeded);
    }

    #[test]
    fn all_memories_of_an_instance_count_together() {
        let mut limiter = limiter(2);
        assert!(limiter.memory_growing(0, MIB, None).unwrap());
        assert!(limiter.memory_growing(0, MIB, None).unwrap());
        assert!(limiter.memory_growing(0, MIB, None).is_err());
    }

    #[test]
    fn growth_past_a_memory_own_maximum_fails_without_trapping() {
        let mut limiter = limiter(8);
        assert!(!limiter.memory_growing(0, 2 * MIB, Some(MIB)).unwrap());
        assert!(!limiter.exceeded);
    }
}
