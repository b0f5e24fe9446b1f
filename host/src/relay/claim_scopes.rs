//! What one relay loop may claim this turn: the claim scope of every loaded handler (DESIGN §5).
//!
//! Handlers are untrusted plugins, so their scopes are asked concurrently, each under a time limit of
//! its own, and a scope that fails, times out or is invalid fails closed for its own destination type
//! only: the type is left out of the claim (its rows wait `PENDING`), with a log line and
//! `outbox_claim_scope_failures_total`, while every other type keeps flowing. This departs from seed
//! 000 on purpose: there, handlers are trusted code and a bad scope fails the whole cycle.

use crate::metrics::Metrics;
use crate::plugins::{CallError, HandlerPlugin, PluginSet, Scope};
use crate::repository::{ClaimScope, ClaimScopeError, ClaimScopeFailure, ClaimScopes};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinError;
use tokio_util::task::AbortOnDropHandle;

/// How long a turn waits for one scope. A scope is a cheap, local answer (microseconds in practice),
/// so this is far below a plugin's call time limit (10 s by default): a turn waits at most this long
/// for a plugin that has turned slow, once; after that its calls run in the background and are no
/// longer waited for, so other types lose no more time to it.
pub(super) const SCOPE_TIME_LIMIT: Duration = Duration::from_millis(500);
/// A failing scope fails every turn (and a hostile one can flap): per type, a failure is logged at
/// most this often, and a recovery only after a logged failure. The metric counts every failure.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The answer of one call, and how long it took.
type Answer = (Result<Scope, CallError>, Duration);

/// The scope calls of one relay loop, by destination type.
#[derive(Default)]
pub(super) struct ScopeCalls {
    types: HashMap<String, TypeState>,
}

#[derive(Default)]
struct TypeState {
    /// At most one call per type: a call that outlives its limit keeps running (bounded by the
    /// plugin's own call time limit) and no other is started until it ends.
    call: Option<Call>,
    /// The last call did not answer within [`SCOPE_TIME_LIMIT`]: the next one is not waited for;
    /// its answer is used by the first turn after it arrives in time.
    slow: bool,
    /// When a failure was last logged.
    logged_at: Option<Instant>,
    /// A failure was logged and no recovery since.
    failure_logged: bool,
}

struct Call {
    handler: Arc<HandlerPlugin>,
    deadline: tokio::time::Instant,
    task: AbortOnDropHandle<Answer>,
    /// Already counted and logged as timed out.
    reported: bool,
}

impl Call {
    fn start(handler: Arc<HandlerPlugin>) -> Self {
        let asked = handler.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let result = asked.claim_scope().await;
            (result, started.elapsed())
        });
        Call {
            handler,
            deadline: tokio::time::Instant::now() + SCOPE_TIME_LIMIT,
            task: AbortOnDropHandle::new(task),
            reported: false,
        }
    }
}

impl ScopeCalls {
    /// The scopes this turn may claim with. Every loaded handler without a call in flight is asked;
    /// the turn waits for the answers of the handlers not known to be slow, each until its own
    /// deadline. A type without a usable answer is absent from the result and claims nothing.
    pub async fn ask(&mut self, plugins: &PluginSet, metrics: &Metrics) -> ClaimScopes {
        self.types
            .retain(|destination_type, _| plugins.handler(destination_type).is_some());
        for handler in plugins.handlers() {
            let state = self
                .types
                .entry(handler.destination_type().to_owned())
                .or_default();
            let replaced = state
                .call
                .as_ref()
                .is_some_and(|call| !Arc::ptr_eq(&call.handler, handler));
            if replaced {
                // A reloaded plugin starts afresh; dropping the old call aborts it.
                *state = TypeState::default();
            }
            if state.call.is_none() {
                state.call = Some(Call::start(handler.clone()));
            }
        }
        // The calls run in tasks of their own, so waiting for each in turn until its own deadline
        // waits for all of them at once.
        let mut answered: Vec<(String, Result<Answer, JoinError>)> = Vec::new();
        for (destination_type, state) in &mut self.types {
            let Some(call) = state.call.as_mut() else {
                continue;
            };
            let joined = if state.slow || call.reported {
                // Not waited for: its answer is taken only once it is there.
                if call.task.is_finished() {
                    Some((&mut call.task).await)
                } else {
                    None
                }
            } else {
                tokio::time::timeout_at(call.deadline, &mut call.task)
                    .await
                    .ok()
            };
            if let Some(joined) = joined {
                answered.push((destination_type.clone(), joined));
            }
        }

        let mut scopes = ClaimScopes::new();
        let now = tokio::time::Instant::now();
        for (destination_type, joined) in answered {
            let state = self.types.get_mut(&destination_type).expect("asked above");
            let call = state.call.take().expect("answered above");
            match judge(joined) {
                Ok(scope) => {
                    state.slow = false;
                    if std::mem::take(&mut state.failure_logged) {
                        tracing::info!(
                            destination_type,
                            "claim scope answers again; its rows are claimed again"
                        );
                    }
                    scopes.insert(destination_type, scope);
                }
                Err(ClaimScopeFailure::TimedOut) if call.reported => {}
                Err(reason) => {
                    state.slow = reason == ClaimScopeFailure::TimedOut;
                    fail(
                        state,
                        &destination_type,
                        call.handler.name(),
                        reason,
                        metrics,
                    );
                }
            }
        }
        for (destination_type, state) in &mut self.types {
            let Some(call) = state.call.as_mut() else {
                continue;
            };
            if now >= call.deadline && !call.reported {
                call.reported = true;
                state.slow = true;
                let plugin = call.handler.name().to_owned();
                fail(
                    state,
                    destination_type,
                    &plugin,
                    ClaimScopeFailure::TimedOut,
                    metrics,
                );
            }
        }
        scopes
    }
}

/// A usable scope, or why the answer fails its type. An answer that came later than the limit is a
/// time-out even when it arrived before the turn looked.
fn judge(joined: Result<Answer, JoinError>) -> Result<ClaimScope, ClaimScopeFailure> {
    let (result, elapsed) = joined.map_err(|_| ClaimScopeFailure::SupplierFailed)?;
    if elapsed > SCOPE_TIME_LIMIT {
        return Err(ClaimScopeFailure::TimedOut);
    }
    let scope = match result {
        Ok(Scope::All) => ClaimScope::All,
        Ok(Scope::Destinations(targets)) => ClaimScope::Destinations(targets),
        Err(CallError::Timeout { .. }) => return Err(ClaimScopeFailure::TimedOut),
        Err(_) => return Err(ClaimScopeFailure::SupplierFailed),
    };
    scope.check().map(|()| scope)
}

/// Counts the failure and logs it unless its type logged one within the interval. The log names the
/// plugin, the type and the reason: never a target, never the plugin's own error text.
fn fail(
    state: &mut TypeState,
    destination_type: &str,
    plugin: &str,
    reason: ClaimScopeFailure,
    metrics: &Metrics,
) {
    metrics.claim_scope_failed(destination_type, reason);
    if state
        .logged_at
        .is_some_and(|at| at.elapsed() < FAILURE_LOG_INTERVAL)
    {
        return;
    }
    let error = ClaimScopeError {
        destination_type: destination_type.to_owned(),
        reason,
    };
    tracing::warn!(
        plugin,
        destination_type,
        reason = reason.as_str(),
        "{error} (logged at most once a minute per type; outbox_claim_scope_failures_total counts each)"
    );
    state.logged_at = Some(Instant::now());
    state.failure_logged = true;
}
