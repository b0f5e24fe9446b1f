//! Per-destination delivery state on this node (a destination is `(destination_type,
//! destination)`): its circuit breaker, rate limit and calls running, shared by every relay loop.
//! Before a claimed row is handed to its plugin it is admitted here, or held: deferred without
//! spending an attempt, like an unresolvable row. Destinations that hold rows back are left out of
//! the next claims, so their backlog is not claimed only to be deferred, and other destinations of
//! the same type keep flowing.
//!
//! Destination names come from rows: they reach the admin endpoint masked as the dead-letter
//! listing masks them, never a log line (a log names a destination by [`fingerprint`]), and the
//! state kept is bounded ([`MAX_TRACKED`]).

use super::breaker::{Breaker, BreakerState, CallEnd, Verdict};
use super::policy::DeliveryPolicies;
use super::rate_limit::{RateLimiter, Slot};
use crate::metrics::Metrics;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Destinations with state worth keeping, at most; past it, rows of destinations not tracked yet
/// are held (failing closed) until idle ones are forgotten.
pub const MAX_TRACKED: usize = 100_000;

/// How long a row waits when its destination already runs as many calls as it may.
const CONCURRENCY_WAIT: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct DestinationKey {
    destination_type: String,
    destination: String,
}

#[derive(Debug, Default)]
struct DestinationState {
    breaker: Breaker,
    limiter: Option<RateLimiter>,
    in_flight: u32,
    /// Rows held back since this destination was first tracked.
    held: u64,
}

/// Why a row was held back, as the `reason` label of `outbox_destination_held_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    BreakerOpen,
    RateLimited,
    Concurrency,
    TooManyDestinations,
}

impl HoldReason {
    pub const ALL: [HoldReason; 4] = [
        Self::BreakerOpen,
        Self::RateLimited,
        Self::Concurrency,
        Self::TooManyDestinations,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BreakerOpen => "breaker_open",
            Self::RateLimited => "rate_limited",
            Self::Concurrency => "concurrency",
            Self::TooManyDestinations => "too_many_destinations",
        }
    }
}

/// What the destination's policies say about calling it for a row now.
pub enum Admission {
    /// Call it, at `start_at` when the rate limit reserved a slot a little ahead.
    Go {
        permit: Permit,
        start_at: Option<Instant>,
    },
    /// Defer the row by `delay`, attempt unchanged.
    Hold { delay: Duration, reason: HoldReason },
}

pub struct Destinations {
    policies: DeliveryPolicies,
    metrics: Metrics,
    states: Mutex<HashMap<DestinationKey, DestinationState>>,
}

impl Destinations {
    pub fn new(policies: DeliveryPolicies, metrics: Metrics) -> Arc<Self> {
        Arc::new(Destinations {
            policies,
            metrics,
            states: Mutex::new(HashMap::new()),
        })
    }

    pub fn policies(&self) -> &DeliveryPolicies {
        &self.policies
    }

    pub fn admit(self: &Arc<Self>, destination_type: &str, destination: &str) -> Admission {
        let now = Instant::now();
        let policy = self.policies.of(destination_type);
        let key = DestinationKey {
            destination_type: destination_type.to_owned(),
            destination: destination.to_owned(),
        };
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        if states.len() >= MAX_TRACKED && !states.contains_key(&key) {
            forget_idle(&mut states, &self.policies, now);
        }
        if states.len() >= MAX_TRACKED && !states.contains_key(&key) {
            drop(states);
            return self.hold(
                destination_type,
                policy.unresolvable_delay,
                HoldReason::TooManyDestinations,
            );
        }
        let state = states
            .entry(key.clone())
            .or_insert_with(|| DestinationState {
                limiter: policy.rate_limit_per_second.map(RateLimiter::new),
                ..DestinationState::default()
            });
        let held = |state: &mut DestinationState, delay, reason| {
            state.held += 1;
            (delay, reason)
        };
        let verdict = if policy
            .max_concurrency
            .is_some_and(|max| state.in_flight >= max)
        {
            Err(held(state, CONCURRENCY_WAIT, HoldReason::Concurrency))
        } else {
            match state.breaker.verdict(now, &policy.breaker) {
                Verdict::Wait(delay) => Err(held(state, delay, HoldReason::BreakerOpen)),
                verdict => {
                    let probe = verdict == Verdict::Probe;
                    match state.limiter.as_mut().map(|limiter| limiter.reserve(now)) {
                        Some(Slot::Wait(delay)) => {
                            if probe {
                                state
                                    .breaker
                                    .record(CallEnd::Unknown, true, now, &policy.breaker);
                            }
                            Err(held(state, delay, HoldReason::RateLimited))
                        }
                        Some(Slot::At(slot)) => Ok((probe, Some(slot).filter(|&at| at > now))),
                        None => Ok((probe, None)),
                    }
                }
            }
        };
        match verdict {
            Ok((probe, start_at)) => {
                state.in_flight += 1;
                Admission::Go {
                    permit: Permit {
                        destinations: self.clone(),
                        key: Some(key),
                        probe,
                    },
                    start_at,
                }
            }
            Err((delay, reason)) => {
                drop(states);
                self.hold(destination_type, delay, reason)
            }
        }
    }

    fn hold(&self, destination_type: &str, delay: Duration, reason: HoldReason) -> Admission {
        self.metrics.destination_held(destination_type, reason);
        Admission::Hold { delay, reason }
    }

    /// The destinations, by type, whose rows would only be held now: the claim leaves them out.
    /// Forgets the destinations with nothing worth keeping.
    pub fn held_back(&self) -> BTreeMap<String, Vec<String>> {
        let now = Instant::now();
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        forget_idle(&mut states, &self.policies, now);
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, state) in states.iter() {
            let policy = self.policies.of(&key.destination_type);
            let busy = policy
                .max_concurrency
                .is_some_and(|max| state.in_flight >= max);
            let open = match state.breaker.state() {
                BreakerState::Open { until } => until > now,
                BreakerState::HalfOpen { probing } => probing,
                BreakerState::Closed => false,
            };
            let limited = state
                .limiter
                .as_ref()
                .is_some_and(|limiter| limiter.reopens_at(now).is_some());
            if busy || open || limited {
                held.entry(key.destination_type.clone())
                    .or_default()
                    .push(key.destination.clone());
            }
        }
        held
    }

    /// The next instant a destination held back by time (an open breaker's cool-down, a rate
    /// limit) opens to claims again: an idle loop claims then, as nothing else would wake it.
    pub fn next_release(&self) -> Option<Instant> {
        let now = Instant::now();
        let states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        states
            .values()
            .filter_map(|state| {
                let breaker = match state.breaker.state() {
                    BreakerState::Open { until } => Some(until),
                    BreakerState::HalfOpen { .. } | BreakerState::Closed => None,
                };
                let limiter = state
                    .limiter
                    .as_ref()
                    .and_then(|limiter| limiter.reopens_at(now));
                breaker.into_iter().chain(limiter).min()
            })
            .min()
    }

    fn finish(&self, key: DestinationKey, probe: bool, end: CallEnd) {
        let now = Instant::now();
        let policy = self.policies.of(&key.destination_type);
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = states.get_mut(&key) else {
            return;
        };
        state.in_flight = state.in_flight.saturating_sub(1);
        let was_closed = state.breaker.state() == BreakerState::Closed;
        let opened = state.breaker.record(end, probe, now, &policy.breaker);
        let closed = !was_closed && state.breaker.state() == BreakerState::Closed;
        let failures = state.breaker.failures();
        drop(states);
        let destination_type = key.destination_type.as_str();
        let reference = fingerprint(&key.destination);
        if opened {
            self.metrics.breaker_opened(destination_type, was_closed);
            tracing::warn!(
                destination_type,
                destination_ref = %reference,
                failures,
                cool_down_ms = policy.breaker.cool_down.as_millis() as u64,
                "circuit breaker opened: the destination's rows are deferred, attempts unspent, until a probe succeeds"
            );
        } else if closed {
            self.metrics.breaker_closed(destination_type);
            tracing::info!(
                destination_type,
                destination_ref = %reference,
                "circuit breaker closed: a probe succeeded"
            );
        }
    }

    /// The tracked destinations, for `/destinations`, in type and destination order.
    pub fn snapshot(&self) -> Vec<DestinationView> {
        let (now, wall) = (Instant::now(), Utc::now());
        let at = |instant: Instant| -> String {
            let at: DateTime<Utc> = match instant.checked_duration_since(now) {
                Some(ahead) => wall + ahead,
                None => wall - now.duration_since(instant),
            };
            at.to_rfc3339()
        };
        let states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let mut views: Vec<DestinationView> = states
            .iter()
            .map(|(key, state)| {
                let policy = self.policies.of(&key.destination_type);
                let next_probe_at = match state.breaker.state() {
                    BreakerState::Open { until } => Some(at(until)),
                    BreakerState::HalfOpen { probing: false } => Some(wall.to_rfc3339()),
                    BreakerState::HalfOpen { probing: true } | BreakerState::Closed => None,
                };
                DestinationView {
                    destination_type: key.destination_type.clone(),
                    destination: crate::text::masked_destination(&key.destination, 255),
                    destination_ref: fingerprint(&key.destination),
                    breaker: state.breaker.state().as_str().to_owned(),
                    consecutive_failures: state.breaker.failures(),
                    opened_at: state.breaker.opened_at().map(at),
                    next_probe_at,
                    in_flight: state.in_flight,
                    held_rows: state.held,
                    rate_limit_per_second: policy.rate_limit_per_second,
                    max_concurrency: policy.max_concurrency,
                }
            })
            .collect();
        views.sort_by(|a, b| {
            (&a.destination_type, &a.destination).cmp(&(&b.destination_type, &b.destination))
        });
        views
    }
}

fn forget_idle(
    states: &mut HashMap<DestinationKey, DestinationState>,
    policies: &DeliveryPolicies,
    now: Instant,
) {
    states.retain(|key, state| {
        let policy = policies.of(&key.destination_type);
        let idle = state.in_flight == 0
            && state.breaker.is_idle(now, &policy.breaker)
            && state
                .limiter
                .as_ref()
                .is_none_or(|limiter| limiter.is_idle(now));
        !idle
    });
}

/// A destination as logs name it: the first 12 hex digits of its SHA-256, which `/destinations`
/// shows beside the name.
pub fn fingerprint(destination: &str) -> String {
    let digest = Sha256::digest(destination.as_bytes());
    digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// An admitted call to a destination. Told how the call ended ([`Permit::finish`]); dropped
/// unfinished (a task abandoned at shutdown), it frees its place without judging the destination.
pub struct Permit {
    destinations: Arc<Destinations>,
    key: Option<DestinationKey>,
    probe: bool,
}

impl Permit {
    pub fn finish(mut self, end: CallEnd) {
        if let Some(key) = self.key.take() {
            self.destinations.finish(key, self.probe, end);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.destinations.finish(key, self.probe, CallEnd::Unknown);
        }
    }
}

/// One destination on `GET /destinations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationView {
    pub destination_type: String,
    /// As the dead-letter listing shows it: a URL's user info, query and fragment masked.
    pub destination: String,
    /// How logs name this destination (the fingerprint of the whole, unmasked destination).
    pub destination_ref: String,
    /// `closed`, `open` or `half_open`.
    pub breaker: String,
    pub consecutive_failures: u32,
    /// RFC 3339, as every time the admin endpoint shows.
    pub opened_at: Option<String>,
    pub next_probe_at: Option<String>,
    pub in_flight: u32,
    pub held_rows: u64,
    pub rate_limit_per_second: Option<f64>,
    pub max_concurrency: Option<u32>,
}

/// The body of `GET /destinations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationsPage {
    pub destinations: Vec<DestinationView>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, DestinationTypeConfig};

    fn destinations(keys: DestinationTypeConfig) -> Arc<Destinations> {
        let mut config = Config::default();
        config.destinations.insert("WEBHOOK".into(), keys);
        Destinations::new(DeliveryPolicies::from_config(&config), Metrics::new())
    }

    fn go(admission: Admission) -> Permit {
        match admission {
            Admission::Go { permit, .. } => permit,
            Admission::Hold { reason, .. } => panic!("held: {reason:?}"),
        }
    }

    fn held(admission: Admission) -> HoldReason {
        match admission {
            Admission::Go { .. } => panic!("admitted"),
            Admission::Hold { reason, .. } => reason,
        }
    }

    #[test]
    fn an_open_breaker_holds_its_destination_only_and_leaves_it_out_of_the_claim() {
        let destinations = destinations(DestinationTypeConfig {
            breaker_threshold: Some(2),
            ..DestinationTypeConfig::default()
        });
        for _ in 0..2 {
            go(destinations.admit("WEBHOOK", "down")).finish(CallEnd::RetryableFailure);
        }
        assert_eq!(
            held(destinations.admit("WEBHOOK", "down")),
            HoldReason::BreakerOpen
        );
        go(destinations.admit("WEBHOOK", "up")).finish(CallEnd::Answered);
        let held_back = destinations.held_back();
        assert_eq!(held_back.get("WEBHOOK"), Some(&vec!["down".to_owned()]));
        let views = destinations.snapshot();
        let down = views
            .iter()
            .find(|view| view.destination == "down")
            .unwrap();
        assert_eq!(down.breaker, "open");
        assert_eq!(down.consecutive_failures, 2);
        assert_eq!(down.held_rows, 1);
        assert!(down.next_probe_at.is_some());
    }

    #[test]
    fn a_destination_at_its_concurrency_limit_holds_the_next_row_until_a_call_ends() {
        let destinations = destinations(DestinationTypeConfig {
            max_concurrency_per_destination: Some(2),
            ..DestinationTypeConfig::default()
        });
        let first = go(destinations.admit("WEBHOOK", "d"));
        let _second = go(destinations.admit("WEBHOOK", "d"));
        assert_eq!(
            held(destinations.admit("WEBHOOK", "d")),
            HoldReason::Concurrency
        );
        assert!(destinations.held_back().contains_key("WEBHOOK"));
        drop(first);
        go(destinations.admit("WEBHOOK", "d"));
    }

    #[test]
    fn a_rate_limited_destination_waits_for_its_slot_or_is_held() {
        let destinations = destinations(DestinationTypeConfig {
            rate_limit_per_second: Some(10.0),
            ..DestinationTypeConfig::default()
        });
        let mut starts = Vec::new();
        let reason = loop {
            match destinations.admit("WEBHOOK", "d") {
                Admission::Go { start_at, permit } => {
                    starts.push(start_at);
                    permit.finish(CallEnd::Answered);
                }
                Admission::Hold { reason, .. } => break reason,
            }
        };
        assert_eq!(reason, HoldReason::RateLimited);
        assert_eq!(
            starts.len(),
            6,
            "slots at 0, 100, …, 500 ms fit the 500 ms horizon"
        );
        assert!(starts[0].is_none() && starts[1].is_some());
        assert!(destinations.next_release().is_some());
    }

    #[test]
    fn idle_destinations_are_forgotten() {
        let destinations = destinations(DestinationTypeConfig::default());
        go(destinations.admit("WEBHOOK", "a")).finish(CallEnd::Answered);
        destinations.held_back();
        assert!(destinations.snapshot().is_empty());
    }

    #[test]
    fn the_fingerprint_is_stable_and_reveals_nothing_of_the_name() {
        let reference = fingerprint("https://hooks.example/secret-path");
        assert_eq!(reference.len(), 12);
        assert_eq!(reference, fingerprint("https://hooks.example/secret-path"));
        assert!(!reference.contains("hooks"));
    }
}
