//! One relay loop. Each turn records the outcomes that finished since the last turn and claims the
//! next batch in the same transaction, then hands every claimed row to its plugin in a task of its own
//! (outside the claim transaction), keeping at most `max_in_flight` publishes running. A turn that
//! fails keeps its outcomes, and the next turn records them apart from the claim (`record.rs`), so a
//! finished publish is recorded once the database accepts it, never dropped and never counted twice.
//! With LISTEN_NOTIFY, a loop keeps claiming until a claim finds nothing, and only then waits, with
//! its host holding the doorbell (`doorbell.rs`).

use super::claim_scopes::ScopeCalls;
use super::destinations::{Admission, Permit};
use super::doorbell::{LINGER_STEP, LoopDoorbell};
use super::envelope;
use super::observers::ObserverFeed;
use super::outcome::{Attempted, decide};
use super::progress::Heartbeat;
use super::record::{Unrecorded, marks_of, record_apart};
use super::{Relay, entry_span};
use crate::error_type::HostErrorType;
use crate::metrics::{Metrics, NO_ERROR_TYPE_LABEL};
use crate::plugins::{Envelope, HandlerPlugin, NotStarted, PluginSet, PublishCompleted};
use crate::repository::{ClaimScopes, Claims, Mark, OutboxRecord};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// A row handed to a plugin and not yet recorded.
struct Flight {
    id: i64,
    /// When this claim of the row was made: its outcome is recorded only for this very claim.
    claimed_at: Option<DateTime<Utc>>,
    destination_type: String,
    destination: String,
    attempt: u32,
    max_attempts: u32,
    /// `None` for a row that was not attempted (its envelope could not be built, or a delivery
    /// policy held it back), so no observer is told.
    envelope: Option<Arc<Envelope>>,
    /// Its destination's admission, told how the call ended when it lands.
    permit: Option<Permit>,
}

impl Landed {
    pub(super) fn claimed_at(&self) -> Option<DateTime<Utc>> {
        self.flight.claimed_at
    }
}

/// A flight that has landed: how its attempt ended.
pub(super) struct Landed {
    flight: Flight,
    attempted: Attempted,
    elapsed: Duration,
}

/// What a turn's claim found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claimed {
    /// As many rows as it asked for: more are likely waiting.
    Full,
    /// Some rows, fewer than it asked for.
    Some,
    /// Nothing, though there was room for rows.
    Nothing,
    /// It asked for nothing (every slot is taken, or the turn only recorded outcomes), or found
    /// nothing with busy plugins' types left out: a landing publish brings the next turn.
    NoRoom,
}

/// After a failed turn (database down), wait this long at first, doubling up to the polling interval.
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// At shutdown, turns spent recording what has landed: enough for an outcome the database refuses
/// to be dead-lettered instead (`record.rs`).
const SHUTDOWN_RECORD_TURNS: u32 = 4;

pub(super) async fn run_loop(
    relay: Relay,
    claimed_by: String,
    wake: Arc<Notify>,
    mut doorbell: Option<LoopDoorbell>,
    heartbeat: Heartbeat,
    shutdown: CancellationToken,
) {
    heartbeat.started();
    let mut state = LoopState::new(relay, claimed_by);
    let mut poll = tokio::time::interval(state.relay.settings.polling_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut plugins = state.relay.plugins.clone();
    // The last turn's claim came back full (more is likely waiting), the loop lingers after rows,
    // or the last turn failed.
    let mut again = true;
    let mut failures = 0u32;
    loop {
        // Outcomes kept after a refusal wait for the next turn like everything else, so their
        // tries on their own are spread out.
        if state.landed.is_empty() && !again {
            // A destination held back by time opens again with no insert or landing to tell.
            let release = state.relay.destinations.next_release();
            let released = tokio::time::sleep_until(
                release.map_or_else(tokio::time::Instant::now, Into::into),
            );
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(joined) = state.publishes.join_next_with_id(), if !state.publishes.is_empty() => state.land(joined),
                _ = wake.notified() => {}
                _ = poll.tick() => {}
                Ok(()) = plugins.changed() => {}
                _ = released, if release.is_some() => {}
            }
        }
        state.gather_while_saturated().await;
        while let Some(joined) = state.publishes.try_join_next_with_id() {
            state.land(joined);
        }
        // A lingering loop's next turn starts a step after this one started, not a step after it
        // ended: a row waits for the turn that claims it and then for the one that marks it.
        let next_step = tokio::time::Instant::now() + LINGER_STEP;
        match state.turn(true).await {
            Ok(claimed) => {
                heartbeat.beat();
                failures = 0;
                again = match (claimed, doorbell.as_mut()) {
                    (Claimed::Full, _) => true,
                    // Following a stream of inserts: the next claim waits for the step, so it
                    // finds a step's rows at once instead of costing a transaction for each few.
                    (Claimed::Some, Some(doorbell)) if doorbell.lingers() => {
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep_until(next_step) => {}
                        }
                        true
                    }
                    // Listening, the loop claims until it finds nothing: it waits only then.
                    (Claimed::Some, Some(_)) => true,
                    // A landing publish ends the step early: its outcome is recorded at once.
                    (Claimed::Nothing, Some(doorbell)) if doorbell.lingers() => {
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            Some(joined) = state.publishes.join_next_with_id(), if !state.publishes.is_empty() => state.land(joined),
                            _ = tokio::time::sleep_until(next_step) => {}
                        }
                        true
                    }
                    (Claimed::Nothing, Some(doorbell)) => {
                        doorbell.waits();
                        false
                    }
                    // Only busy plugins' types are left, and their rows wait for landings; rows of
                    // other types must not: while it lingers the loop looks again after a step
                    // (or a landing), and then it waits for the doorbell like a loop that found
                    // nothing.
                    (Claimed::NoRoom, Some(doorbell)) if state.saturated_only.is_some() => {
                        let lingers = doorbell.lingers();
                        if !lingers {
                            doorbell.waits();
                        }
                        lingers
                    }
                    (Claimed::Some | Claimed::Nothing | Claimed::NoRoom, _) => false,
                };
                if let Some(doorbell) = doorbell.as_mut() {
                    if matches!(claimed, Claimed::Full | Claimed::Some) {
                        doorbell.found_rows();
                    }
                    if matches!(claimed, Claimed::Full | Claimed::NoRoom) {
                        doorbell.calls_for_help();
                    }
                }
            }
            Err(()) => {
                failures += 1;
                again = true;
                let pause = RETRY_FIRST
                    .saturating_mul(1 << failures.min(16))
                    .min(state.relay.settings.polling_interval);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    drop(doorbell);
    state.drain().await;
}

struct LoopState {
    relay: Relay,
    claimed_by: String,
    publishes: JoinSet<(Attempted, Duration)>,
    flights: HashMap<Id, Flight>,
    landed: Vec<Landed>,
    /// Decided outcomes not recorded yet: those of a failed turn wait here for the next.
    unrecorded: Vec<Unrecorded>,
    /// The last turn failed with outcomes to record: the next records them apart from its claim.
    recording_failed: bool,
    observers: ObserverFeed,
    scope_calls: ScopeCalls,
    /// How many types the last turn left out as saturated, when it found nothing else to claim.
    saturated_only: Option<usize>,
}

impl LoopState {
    fn new(relay: Relay, claimed_by: String) -> Self {
        let observers = ObserverFeed::start(relay.plugins.clone());
        LoopState {
            relay,
            claimed_by,
            publishes: JoinSet::new(),
            flights: HashMap::new(),
            landed: Vec::new(),
            unrecorded: Vec::new(),
            recording_failed: false,
            observers,
            scope_calls: ScopeCalls::default(),
            saturated_only: None,
        }
    }

    /// A finished publish task. One that panicked (it should not: plugin failures are values, and
    /// logging cannot fail) failed inside the host, not in the plugin: its row is retried without
    /// spending an attempt, and the failure is reported, so the slot and the row are never lost.
    fn land(&mut self, joined: Result<(Id, (Attempted, Duration)), JoinError>) {
        let (id, finished) = match joined {
            Ok((id, finished)) => (id, Ok(finished)),
            Err(error) => (error.id(), Err(error)),
        };
        let Some(mut flight) = self.flights.remove(&id) else {
            return;
        };
        self.relay.metrics.in_flight(-1);
        let (attempted, elapsed) = finished.unwrap_or_else(|error| {
            self.relay.metrics.publish_panicked();
            tracing::error!(entry_id = flight.id, destination_type = %flight.destination_type, "a publish task failed inside the host; the row is retried without spending an attempt");
            let message = if error.is_panic() {
                "the publish task panicked inside the host"
            } else {
                "the publish task was cancelled inside the host"
            };
            let attempted = Attempted::HostFailed {
                message: message.into(),
            };
            (attempted, Duration::ZERO)
        });
        if let Some(permit) = flight.permit.take() {
            permit.finish(attempted.call_end());
        }
        self.landed.push(Landed {
            flight,
            attempted,
            elapsed,
        });
    }

    /// Records what has landed and, when `claiming`, claims as many rows as there are free slots, in
    /// one transaction (after a failed turn, the kept outcomes are recorded on their own first).
    /// `Ok` with what the claim found; `Err` when the turn failed, its outcomes kept for the next.
    async fn turn(&mut self, claiming: bool) -> Result<Claimed, ()> {
        self.saturated_only = None;
        let settings = self.relay.settings.clone();
        let free = (settings.max_in_flight as usize).saturating_sub(self.flights.len());
        let batch = if claiming {
            settings
                .batch_size
                .min(u32::try_from(free).unwrap_or(u32::MAX))
        } else {
            0
        };
        let plugins = self.relay.plugins.borrow().clone();
        // Types left out because their plugin is busy: finding nothing then is no reason to wait
        // for the doorbell, as their rows may be waiting; a landing publish brings the next turn.
        let mut held_back = false;
        let scopes = if batch > 0 {
            let mut scopes = self.scope_calls.ask(&plugins, &self.relay.metrics).await;
            let saturated = self.saturated_types(&plugins);
            held_back = !saturated.is_empty();
            scopes.leave_out_busy(&saturated);
            for (destination_type, destinations) in self.relay.destinations.held_back() {
                scopes.hold_back(destination_type, destinations);
            }
            // The set was swapped while the scopes were asked: claim with the new one next turn
            // (the swap wakes the loop), so no claim made after a swap uses the old plugins.
            if !Arc::ptr_eq(&plugins, &self.relay.plugins.borrow()) {
                scopes = ClaimScopes::new();
            }
            scopes
        } else {
            ClaimScopes::new()
        };
        let policies = self.relay.destinations.policies();
        for landed in std::mem::take(&mut self.landed) {
            let flight = &landed.flight;
            let decision = decide(
                flight.id,
                flight.attempt,
                flight.max_attempts,
                landed.attempted.clone(),
                policies.of(&flight.destination_type),
            );
            self.unrecorded.push(Unrecorded::new(landed, decision));
        }
        let kept = if self.recording_failed {
            self.record_apart().await?;
            // What is still kept was refused on its own: it waits for the next turn rather than
            // fail this one's claim.
            std::mem::take(&mut self.unrecorded)
        } else {
            Vec::new()
        };
        let (marks, claims) = marks_of(&self.unrecorded);
        // No later than the claim's `NOW()`: the rows' leases run from there.
        let claimed_from = Instant::now();
        let result = self
            .relay
            .repository
            .mark_and_claim(
                &self.claimed_by,
                &marks,
                Claims::At(&claims),
                batch,
                &scopes,
            )
            .await;
        let turned = match result {
            Ok(cycle) => {
                let recorded = std::mem::take(&mut self.unrecorded);
                self.settle(recorded.into_iter().zip(cycle.owned)).await;
                let claimed = match cycle.claimed.len() {
                    _ if batch == 0 => Claimed::NoRoom,
                    0 if held_back => Claimed::NoRoom,
                    0 => Claimed::Nothing,
                    n if n == batch as usize => Claimed::Full,
                    _ => Claimed::Some,
                };
                if claimed == Claimed::NoRoom && held_back {
                    self.saturated_only = Some(self.saturated_types(&plugins).len());
                }
                self.dispatch(&plugins, cycle.claimed, claimed_from);
                Ok(claimed)
            }
            Err(error) => {
                tracing::warn!(%error, claimed_by = %self.claimed_by, unrecorded = marks.len(), "relay turn failed; its outcomes are kept and recorded on their own next turn");
                self.relay.metrics.cycle_failed();
                Err(())
            }
        };
        self.unrecorded.extend(kept);
        self.recording_failed = !self.unrecorded.is_empty();
        turned
    }

    /// Records the kept outcomes without the claim; settles what the database answered for. `Err`
    /// when it could not be reached: the rest stays for the next turn.
    async fn record_apart(&mut self) -> Result<(), ()> {
        let outcomes = std::mem::take(&mut self.unrecorded);
        let apart = record_apart(&self.relay.repository, &self.claimed_by, outcomes).await;
        self.settle(apart.settled).await;
        self.unrecorded = apart.kept;
        if apart.unreachable {
            self.relay.metrics.cycle_failed();
            return Err(());
        }
        Ok(())
    }

    /// When the last turn found nothing to claim but the types it left out as saturated, a turn for
    /// the first publish that lands could only record that one outcome, in a transaction of its
    /// own, and the next claim would take a sliver. Gathers further landings until a type has room
    /// again (or [`LINGER_STEP`] has passed, or nothing is in flight), so one turn records them all
    /// and claims a batch.
    async fn gather_while_saturated(&mut self) {
        let Some(saturated) = self.saturated_only else {
            return;
        };
        let plugins = self.relay.plugins.borrow().clone();
        let deadline = tokio::time::Instant::now() + LINGER_STEP;
        while !self.publishes.is_empty() && self.saturated_types(&plugins).len() >= saturated {
            match tokio::time::timeout_at(deadline, self.publishes.join_next_with_id()).await {
                Ok(Some(joined)) => self.land(joined),
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Types whose plugin already has as many of this loop's publishes as it may run at once. They
    /// claim nothing more this turn: their rows would only wait for the plugin's permits while
    /// holding slots of `max_in_flight` that other types need. (One claim may still overshoot by up
    /// to a batch; the type then waits until its publishes drain below the limit.)
    fn saturated_types(&self, plugins: &PluginSet) -> HashSet<String> {
        let mut in_flight: HashMap<&str, u32> = HashMap::new();
        for flight in self.flights.values() {
            *in_flight.entry(&flight.destination_type).or_default() += 1;
        }
        in_flight
            .into_iter()
            .filter(|(destination_type, count)| {
                plugins
                    .handler(destination_type)
                    .is_some_and(|handler| *count >= handler.limits().max_concurrency)
            })
            .map(|(destination_type, _)| destination_type.to_owned())
            .collect()
    }

    /// Hands each row its destination admits to its handler in a task of its own; a row held back
    /// lands at once, deferred. The envelope is built before the handler lookup, so a row whose
    /// type lost its handler still has one for the observers. Rows were claimed no earlier than
    /// `claimed_from`.
    fn dispatch(&mut self, plugins: &PluginSet, rows: Vec<OutboxRecord>, claimed_from: Instant) {
        let destinations = self.relay.destinations.clone();
        for mut row in rows {
            self.relay.metrics.claimed(&row.destination_type);
            let policy = destinations.policies().of(&row.destination_type);
            row.max_attempts = policy.max_attempts_of(row.max_attempts);
            let (id, claimed_at) = (row.id, row.claimed_at);
            let (destination_type, destination) =
                (row.destination_type.clone(), row.destination.clone());
            match envelope::build(row) {
                Ok(envelope) => {
                    let envelope = Arc::new(envelope);
                    let mut flight = Flight {
                        id,
                        claimed_at,
                        attempt: envelope.attempt,
                        max_attempts: envelope.max_attempts,
                        envelope: None,
                        permit: None,
                        destination_type,
                        destination,
                    };
                    match destinations.admit(&flight.destination_type, &flight.destination) {
                        Admission::Go { permit, start_at } => {
                            let handler = plugins.handler(&flight.destination_type);
                            let lease = (claimed_from, self.relay.settings.lease_timeout);
                            let call = publish(handler, envelope.clone(), start_at, lease);
                            let task = self.publishes.spawn(call);
                            flight.envelope = Some(envelope);
                            flight.permit = Some(permit);
                            self.flights.insert(task.id(), flight);
                            self.relay.metrics.in_flight(1);
                        }
                        Admission::Hold { delay, .. } => self.landed.push(Landed {
                            flight,
                            attempted: Attempted::Held { delay },
                            elapsed: Duration::ZERO,
                        }),
                    }
                }
                Err(invalid) => {
                    tracing::warn!(entry_id = id, error = %invalid, "dead-lettering a row that cannot be relayed");
                    let flight = Flight {
                        id,
                        claimed_at,
                        destination_type,
                        destination,
                        attempt: 0,
                        max_attempts: 0,
                        envelope: None,
                        permit: None,
                    };
                    let attempted = Attempted::Permanent {
                        message: invalid.to_string(),
                        error_type: Some(HostErrorType::InvalidRow.as_str().into()),
                    };
                    self.landed.push(Landed {
                        flight,
                        attempted,
                        elapsed: Duration::ZERO,
                    });
                }
            }
        }
    }

    /// Counts the recorded outcomes and tells the observers, in order, once the marks have settled:
    /// each outcome exactly once, with whether its mark was recorded. The row is due again its delay
    /// after the database recorded the mark; the log and the observers get that time as the host's
    /// clock sees it once the mark has settled.
    async fn settle(&mut self, settled: impl IntoIterator<Item = (Unrecorded, bool)>) {
        let metrics = &self.relay.metrics;
        let observed = !self.relay.plugins.borrow().observers().is_empty();
        for (outcome, recorded) in settled {
            let Unrecorded {
                landed, decision, ..
            } = outcome;
            let flight = landed.flight;
            let now = Utc::now();
            if recorded {
                record_outcome(metrics, &flight, &decision.mark, now);
            }
            let called = !matches!(
                landed.attempted,
                Attempted::NoHandler
                    | Attempted::NotStarted
                    | Attempted::Held { .. }
                    | Attempted::HostFailed { .. }
            );
            if called {
                metrics.publish_duration(&flight.destination_type, landed.elapsed.as_secs_f64());
            }
            // A row no call was made for is no attempt to observe.
            let not_started = matches!(landed.attempted, Attempted::NotStarted);
            let Some(envelope) = flight.envelope.filter(|_| observed && !not_started) else {
                continue;
            };
            let event = PublishCompleted {
                entry_id: flight.id,
                destination_type: flight.destination_type,
                destination: flight.destination,
                attempt: flight.attempt,
                max_attempts: flight.max_attempts,
                outcome: decision.outcome,
                disposition: decision.disposition,
                disposition_recorded: recorded,
                next_attempt_at: decision
                    .mark
                    .delay()
                    .map(|delay| envelope::unix_ms(now + delay)),
                error_type: decision.error_type,
                elapsed_micros: u64::try_from(landed.elapsed.as_micros()).unwrap_or(u64::MAX),
                completed_at: envelope::unix_ms(now),
            };
            self.observers.send(event, envelope).await;
        }
    }

    /// On shutdown: claim nothing more, let publishes in flight finish within the grace period and
    /// record them; whatever is still running then is abandoned and stays PROCESSING until lease
    /// recovery.
    async fn drain(mut self) {
        let settings = self.relay.settings.clone();
        let deadline = tokio::time::Instant::now() + settings.shutdown_grace;
        while !self.flights.is_empty() {
            match tokio::time::timeout_at(deadline, self.publishes.join_next_with_id()).await {
                Ok(Some(joined)) => self.land(joined),
                Ok(None) | Err(_) => break,
            }
        }
        let abandoned = self.flights.len();
        self.publishes.abort_all();
        if abandoned > 0 {
            tracing::warn!(abandoned, claimed_by = %self.claimed_by, "shutdown grace ended; unfinished rows stay PROCESSING until lease recovery");
            self.relay.metrics.in_flight(-(abandoned as i64));
        }
        for attempt in 0..SHUTDOWN_RECORD_TURNS {
            let done = self.landed.is_empty() && self.unrecorded.is_empty();
            if done || (attempt > 0 && tokio::time::Instant::now() >= deadline) {
                break;
            }
            let _ = self.turn(false).await;
        }
        if !self.unrecorded.is_empty() {
            tracing::warn!(
                unrecorded = self.unrecorded.len(),
                "recording outcomes at shutdown failed; those rows stay PROCESSING until lease recovery"
            );
            let unrecorded = std::mem::take(&mut self.unrecorded);
            self.settle(unrecorded.into_iter().map(|outcome| (outcome, false)))
                .await;
        }
        let remaining = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_millis(100));
        self.observers.finish(remaining).await;
    }
}

/// Counts a recorded outcome and logs a retry (debug) or a dead letter (warn) with the attempts made
/// so far and the error as it was stored: sanitized and cut, never the payload or a header value.
/// A retry's next attempt is logged on the host's clock as of `now`.
fn record_outcome(metrics: &Metrics, flight: &Flight, mark: &Mark, now: DateTime<Utc>) {
    let destination_type = flight.destination_type.as_str();
    match mark {
        Mark::Published { .. } => metrics.published(destination_type),
        Mark::Unresolvable { .. } => metrics.deferred(destination_type),
        Mark::Retry {
            id,
            new_attempt,
            delay,
            last_error,
            error_type,
        } => {
            metrics.retried(destination_type, error_type.as_deref());
            tracing::debug!(
                entry_id = id,
                destination_type,
                attempts = new_attempt,
                max_attempts = flight.max_attempts,
                error_type = error_type.as_deref().unwrap_or(NO_ERROR_TYPE_LABEL),
                error = %last_error,
                next_attempt_at = %(now + *delay).to_rfc3339(),
                "entry scheduled for another attempt"
            );
        }
        Mark::DeadLetter {
            id,
            last_error,
            error_type,
        } => {
            metrics.dead_lettered(destination_type, error_type.as_deref());
            tracing::warn!(
                entry_id = id,
                destination_type,
                attempts = flight.attempt.saturating_add(1),
                max_attempts = flight.max_attempts,
                error_type = error_type.as_deref().unwrap_or(NO_ERROR_TYPE_LABEL),
                error = %last_error,
                "entry dead-lettered"
            );
        }
    }
}

/// The latest a row's call may start: a call that starts then and runs to its time limit still
/// ends with a sixth of the lease left to record its outcome, before lease recovery could hand the
/// row to another call. A batch larger than a plugin's `max_concurrency` waits for its permits,
/// and the leases of its rows run meanwhile.
fn start_by(claimed_from: Instant, lease: Duration, time_limit: Duration) -> Instant {
    claimed_from + lease.saturating_sub(time_limit + lease / 6)
}

/// One publish, at `start_at` when its destination's rate limit reserved a slot ahead, timed from
/// the call to its result. No handler means the type lost its plugin after the claim: the row is
/// deferred, as is a row whose call could not start in time for its `lease` (from when, how long).
async fn publish(
    handler: Option<Arc<HandlerPlugin>>,
    envelope: Arc<Envelope>,
    start_at: Option<Instant>,
    (claimed_from, lease): (Instant, Duration),
) -> (Attempted, Duration) {
    let Some(handler) = handler else {
        return (Attempted::NoHandler, Duration::ZERO);
    };
    let start_by = start_by(claimed_from, lease, handler.limits().timeout());
    if let Some(start_at) = start_at {
        tokio::time::sleep_until(start_at.into()).await;
    }
    let started = Instant::now();
    let call = handler
        .publish_starting_by(&envelope, start_by)
        .instrument(entry_span(envelope.entry_id, envelope.attempt));
    match call.await {
        Ok(result) => (Attempted::from_call(result), started.elapsed()),
        Err(NotStarted::Busy) => {
            tracing::debug!(entry_id = envelope.entry_id, destination_type = %envelope.destination_type, "the plugin stayed busy too long for the call to end within the row's lease; the row is deferred");
            (Attempted::NotStarted, Duration::ZERO)
        }
        Err(NotStarted::PoolFull) => {
            tracing::debug!(entry_id = envelope.entry_id, destination_type = %envelope.destination_type, "no instance was free in the engine's pool; the row is deferred");
            (Attempted::NotStarted, Duration::ZERO)
        }
    }
}
