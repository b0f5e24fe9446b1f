//! The instance pool of one plugin, and the lease that runs one call on one of its instances.
//!
//! Why kept instances rather than a fresh one per call: measured with wasmtime 48 and the pooling
//! allocator, a fresh instance per call costs about 90–130 µs for a Rust component (1 ms for
//! JavaScript, 2.5–3 ms for Python), a call on a kept instance about 4 µs, and the relay's goal is at
//! most 10 µs a call. So each plugin keeps up to `max_concurrency` instances, each with its own `Store`, lends one out
//! for one call and takes it back after a normal return. DESIGN §5's isolation still holds:
//! - an instance belongs to one plugin object: pools are never shared between plugins, and a reload
//!   makes a new plugin object with an empty pool;
//! - an instance whose call failed in any way (trap, timeout, memory limit) or was cancelled (its
//!   future dropped before the lease was settled) is dropped, never returned;
//! - an instance is retired after a set number of calls, so whatever a guest keeps, or leaks, between
//!   its own calls stays bounded.
//!
//! Capacity: each call holds a permit for its whole duration, at most the plugin's `max_concurrency`
//! at once, and an instance exists only while it serves a call or waits idle, so a plugin never holds
//! more than `max_concurrency` instances of the engine's shared pool (plus one for control calls:
//! `destination-type` and `claim-scope` have a permit and a kept instance of their own, so a plugin
//! whose publishes are all busy still answers its claim scope at once, without starting an instance
//! for it: a relay turn asks while the previous turn's publishes hold every work instance, and a
//! fresh instance per turn cost an interpreter-based plugin 1–3 ms of CPU each time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::error::Elapsed;
use wasmtime::Store;

use crate::plugins::bindings::{
    DestinationHandler, DestinationHandlerPre, PublishObserver, PublishObserverPre,
};
use crate::plugins::error::CallError;
use crate::plugins::manifest::Limits;
use crate::plugins::sandbox::{Sandbox, StoreState, describe_trap};
use crate::plugins::stats::{CallStats, CallStatsSnapshot};

/// How many instances a plugin keeps, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolPolicy {
    /// Idle instances kept per plugin, at most; a plugin keeps no more than its `max_concurrency`.
    /// The default keeps that many: an instance made for a burst of concurrent calls stays for
    /// the next burst, so an interpreter-based plugin (whose fresh instance costs 1–3 ms, against
    /// tens of µs for a call on a kept one) never starts one per call under steady load.
    pub idle_instances: usize,
    /// Calls after which an instance is retired.
    pub calls_per_instance: u32,
}

impl Default for PoolPolicy {
    fn default() -> Self {
        Self {
            idle_instances: Limits::MAX_CONCURRENCY as usize,
            calls_per_instance: 1_000,
        }
    }
}

/// A pre-instantiated world: how to make one more instance of it.
pub(crate) trait WorldPre: Send + Sync + 'static {
    type Bindings: Send + Sync + 'static;

    fn instantiate(
        &self,
        store: &mut Store<StoreState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Bindings>> + Send;
}

impl WorldPre for DestinationHandlerPre<StoreState> {
    type Bindings = DestinationHandler;

    fn instantiate(
        &self,
        store: &mut Store<StoreState>,
    ) -> impl Future<Output = wasmtime::Result<DestinationHandler>> + Send {
        self.instantiate_async(store)
    }
}

impl WorldPre for PublishObserverPre<StoreState> {
    type Bindings = PublishObserver;

    fn instantiate(
        &self,
        store: &mut Store<StoreState>,
    ) -> impl Future<Output = wasmtime::Result<PublishObserver>> + Send {
        self.instantiate_async(store)
    }
}

struct Kept<B> {
    store: Store<StoreState>,
    bindings: B,
    calls: u32,
}

/// Why a call was given up before it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    /// Its plugin's permits stayed taken past its `start_by`.
    Busy,
    /// The engine's instance pool had no room for the instance it needed.
    PoolFull,
}

pub(crate) struct InstancePool<P: WorldPre> {
    pre: P,
    sandbox: Sandbox,
    policy: PoolPolicy,
    /// Idle instances for work calls, at most `policy.idle_instances`.
    idle: Mutex<Vec<Kept<P::Bindings>>>,
    /// The one idle instance for control calls, kept apart from the work calls' (see the module
    /// doc).
    control_idle: Mutex<Option<Kept<P::Bindings>>>,
    /// Instances made since load: steady load makes one per `calls_per_instance` calls, so a
    /// faster count is churn an operator should see.
    instances_started: AtomicU64,
    /// Calls at once: `publish` and `on-publish-completed`.
    calls: Semaphore,
    /// Control calls at once: `destination-type` and `claim-scope`.
    control: Semaphore,
    /// Counted apart, so a plugin's publishes are not mixed with the claim-scope call of every turn.
    work_stats: CallStats,
    control_stats: CallStats,
}

/// What a lease is for; each kind has its own permits and its own bound on the data a plugin may
/// hand the host in one go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// `publish` and `on-publish-completed`: results are short; the largest legitimate transfer is
    /// a Kafka record made during the call (Kafka's default limit is 1 MB).
    Work,
    /// `destination-type` and `claim-scope`: a scope may list 10,000 targets of 255 characters.
    Control,
}

impl CallKind {
    /// The most bytes a plugin may pass to the host in one transfer (a call's result, or the
    /// arguments of one host call); past it, wasmtime fails the call before copying anything.
    /// This is what bounds the host's memory outside the plugin's own limit.
    pub(crate) fn transfer_limit(self) -> usize {
        match self {
            Self::Work => 2 * 1024 * 1024,
            Self::Control => 12 * 1024 * 1024,
        }
    }
}

impl<P: WorldPre> InstancePool<P> {
    pub(crate) fn new(pre: P, sandbox: Sandbox, mut policy: PoolPolicy) -> Self {
        let max_concurrency = sandbox.limits().max_concurrency as usize;
        policy.idle_instances = policy.idle_instances.min(max_concurrency);
        Self {
            pre,
            sandbox,
            policy,
            idle: Mutex::new(Vec::new()),
            control_idle: Mutex::new(None),
            instances_started: AtomicU64::new(0),
            calls: Semaphore::new(max_concurrency),
            control: Semaphore::new(1),
            work_stats: CallStats::default(),
            control_stats: CallStats::default(),
        }
    }

    /// `publish` and `on-publish-completed` calls, and the plugin's dropped log lines.
    pub(crate) fn stats(&self) -> CallStatsSnapshot {
        CallStatsSnapshot {
            log_lines_dropped: self.sandbox.log_lines_dropped(),
            instances_started: self.instances_started.load(Ordering::Relaxed),
            ..self.work_stats.snapshot()
        }
    }

    /// `destination-type` and `claim-scope` calls.
    pub(crate) fn control_stats(&self) -> CallStatsSnapshot {
        self.control_stats.snapshot()
    }

    fn stats_of(&self, kind: CallKind) -> &CallStats {
        match kind {
            CallKind::Work => &self.work_stats,
            CallKind::Control => &self.control_stats,
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.sandbox.limits()
    }

    /// Makes one instance and keeps it, so a plugin that cannot be instantiated fails at load.
    pub(crate) async fn prepare(&self) -> Result<(), CallError> {
        let kept = self.instantiate().await?;
        self.give_back(CallKind::Work, kept);
        Ok(())
    }

    /// Every call into a plugin goes through here (or through [`InstancePool::call_starting_by`]),
    /// so none runs without its permit, its deadline, its transfer limit and the pool's judgement
    /// of how it ended: `call` gets an instance's store and bindings and makes the one guest call.
    pub(crate) async fn call<R>(
        &self,
        kind: CallKind,
        call: impl AsyncFnOnce(&mut Store<StoreState>, &P::Bindings) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let permit = self.permit(kind).await?;
        self.call_holding(kind, permit, call).await
    }

    /// As [`InstancePool::call`], unless no permit comes free by `start_by`: then the call is not
    /// made at all. A relay row claimed in a batch larger than the plugin's `max_concurrency` waits
    /// here, and its lease runs while it waits; a call started too late could outlive the lease.
    pub(crate) async fn call_starting_by<R>(
        &self,
        kind: CallKind,
        start_by: Instant,
        call: impl AsyncFnOnce(&mut Store<StoreState>, &P::Bindings) -> wasmtime::Result<R>,
    ) -> Result<Result<R, CallError>, NotStarted> {
        // A timeout polls its future before its deadline, so a permit free after `start_by` would
        // otherwise still be taken.
        if Instant::now() >= start_by {
            return Err(NotStarted::Busy);
        }
        let permit = tokio::time::timeout_at(start_by.into(), self.permit(kind))
            .await
            .map_err(|_elapsed| NotStarted::Busy)?;
        match permit {
            Ok(permit) => match self.call_holding(kind, permit, call).await {
                Err(CallError::PoolFull) => Err(NotStarted::PoolFull),
                result => Ok(result),
            },
            Err(error) => Ok(Err(error)),
        }
    }

    async fn call_holding<'p, R>(
        &'p self,
        kind: CallKind,
        permit: SemaphorePermit<'p>,
        call: impl AsyncFnOnce(&mut Store<StoreState>, &P::Bindings) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut lease = self.lease(kind, permit).await?;
        let (store, bindings, limit) = lease.arm();
        let result = tokio::time::timeout(limit, call(store, bindings)).await;
        lease.settle(result)
    }

    /// Waits for a permit of `kind`: at most `max_concurrency` calls at once.
    async fn permit(&self, kind: CallKind) -> Result<SemaphorePermit<'_>, CallError> {
        let permits = match kind {
            CallKind::Work => &self.calls,
            CallKind::Control => &self.control,
        };
        permits
            .acquire()
            .await
            .map_err(|_closed| CallError::Instantiate {
                reason: "the plugin is unloading".into(),
            })
    }

    /// Takes an idle instance or makes one, for a call holding `permit`. The call's clock starts
    /// once the permit is held: waiting behind the plugin's own calls is not its time.
    async fn lease<'p>(
        &'p self,
        kind: CallKind,
        permit: SemaphorePermit<'p>,
    ) -> Result<Lease<'p, P>, CallError> {
        let started = Instant::now();
        let kept = match self.take_idle(kind) {
            Some(kept) => kept,
            None => self.instantiate().await.inspect_err(|error| {
                self.stats_of(kind).record(Some(error), started.elapsed());
            })?,
        };
        Ok(Lease {
            pool: self,
            kept,
            kind,
            started,
            _permit: permit,
        })
    }

    /// Instantiation runs guest code (start functions, language runtimes' set-up), so it runs under
    /// the same limits as a call.
    async fn instantiate(&self) -> Result<Kept<P::Bindings>, CallError> {
        let mut store = self.sandbox.new_store();
        store.set_hostcall_fuel(CallKind::Work.transfer_limit());
        let limit = self.sandbox.arm(&mut store);
        match tokio::time::timeout(limit, self.pre.instantiate(&mut store)).await {
            Ok(Ok(bindings)) => {
                self.instances_started.fetch_add(1, Ordering::Relaxed);
                Ok(Kept {
                    store,
                    bindings,
                    calls: 0,
                })
            }
            Ok(Err(error)) if error.is::<wasmtime::PoolConcurrencyLimitError>() => {
                Err(self.sandbox.pool_full())
            }
            Ok(Err(error)) => Err(self.sandbox.limit_hit(store.data()).unwrap_or_else(|| {
                CallError::Instantiate {
                    reason: error.to_string(),
                }
            })),
            Err(_elapsed) => Err(self.sandbox.timeout()),
        }
    }

    fn take_idle(&self, kind: CallKind) -> Option<Kept<P::Bindings>> {
        match kind {
            CallKind::Work => self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop(),
            CallKind::Control => self
                .control_idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        }
    }

    fn give_back(&self, kind: CallKind, kept: Kept<P::Bindings>) {
        if kept.calls >= self.policy.calls_per_instance || self.policy.idle_instances == 0 {
            return;
        }
        match kind {
            CallKind::Work => {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() < self.policy.idle_instances {
                    idle.push(kept);
                }
            }
            CallKind::Control => {
                let mut idle = self
                    .control_idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                idle.get_or_insert(kept);
            }
        }
    }
}

/// One instance, lent out for one call. Dropping a lease without settling it retires the instance.
struct Lease<'p, P: WorldPre> {
    pool: &'p InstancePool<P>,
    kept: Kept<P::Bindings>,
    kind: CallKind,
    started: Instant,
    /// Held until the instance is back in the pool or dropped.
    _permit: SemaphorePermit<'p>,
}

impl<P: WorldPre> Lease<'_, P> {
    /// Starts the call's clock; returns the store, the bindings and the time limit for the caller's
    /// `tokio::time::timeout`.
    fn arm(&mut self) -> (&mut Store<StoreState>, &P::Bindings, Duration) {
        let store = &mut self.kept.store;
        store.set_hostcall_fuel(self.kind.transfer_limit());
        let limit = self.pool.sandbox.arm(store);
        (&mut self.kept.store, &self.kept.bindings, limit)
    }

    /// Ends the call: records it, returns the instance to the pool after a normal return, and retires
    /// it after anything else.
    fn settle<R>(self, result: Result<wasmtime::Result<R>, Elapsed>) -> Result<R, CallError> {
        let Lease {
            pool,
            mut kept,
            kind,
            started,
            _permit,
        } = self;
        let outcome = match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(pool
                .sandbox
                .limit_hit(kept.store.data())
                .unwrap_or_else(|| CallError::Trap {
                    reason: describe_trap(&error),
                })),
            Err(_elapsed) => Err(pool.sandbox.timeout()),
        };
        pool.stats_of(kind)
            .record(outcome.as_ref().err(), started.elapsed());
        if outcome.is_ok() {
            kept.calls += 1;
            pool.give_back(kind, kept);
        }
        outcome
    }
}
