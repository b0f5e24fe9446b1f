//! What this node may claim: one claim scope per destination type, turned into the claim's SQL filter.
//! A scope that cannot be used fails closed for its own destination type only (DESIGN §5): that type
//! is left out of the filter and every other type is claimed as usual.

use std::collections::{BTreeMap, HashSet};

/// Limits on a `Destinations` scope; past them the scope is refused.
pub const MAX_TARGETS: usize = 10_000;
pub const MAX_TARGET_CHARS: usize = 255;

/// Which rows of one destination type this node may claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimScope {
    All,
    /// Only rows whose `destination` is listed; an empty list claims nothing.
    Destinations(Vec<String>),
    /// Asking for the scope failed (the plugin trapped or did not answer in time): nothing of the
    /// type is claimed.
    Unavailable,
}

impl ClaimScope {
    /// Seed 000's `ClaimScopeException` table (a blank element, an element over 255 characters, more
    /// than 10,000 elements, a failed supplier) plus control characters, which no destination holds
    /// and which would fail the claim statement (NUL) or forge log lines.
    pub fn check(&self) -> Result<(), ClaimScopeFailure> {
        let targets = match self {
            ClaimScope::All => return Ok(()),
            ClaimScope::Unavailable => return Err(ClaimScopeFailure::SupplierFailed),
            ClaimScope::Destinations(targets) => targets,
        };
        if targets.len() > MAX_TARGETS {
            return Err(ClaimScopeFailure::TooManyTargets);
        }
        for target in targets {
            if target.trim().is_empty() {
                return Err(ClaimScopeFailure::BlankElement);
            }
            if target.chars().count() > MAX_TARGET_CHARS {
                return Err(ClaimScopeFailure::ElementTooLong);
            }
            if target.chars().any(char::is_control) {
                return Err(ClaimScopeFailure::ControlCharacter);
            }
        }
        Ok(())
    }
}

/// The scopes of every destination type with a loaded handler. A type that is absent claims nothing:
/// absence never means "everything".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimScopes {
    by_type: BTreeMap<String, ClaimScope>,
    /// Destinations, by type, whose rows are not to be claimed now whatever the scope says (their
    /// delivery policy would only hold them back).
    held_back: BTreeMap<String, Vec<String>>,
    /// Types were left out because their plugins had no call to spare ([`Self::leave_out_busy`]).
    busy_left_out: bool,
}

impl ClaimScopes {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, destination_type: impl Into<String>, scope: ClaimScope) {
        self.by_type.insert(destination_type.into(), scope);
    }

    pub fn with(mut self, destination_type: impl Into<String>, scope: ClaimScope) -> Self {
        self.insert(destination_type, scope);
        self
    }

    /// Leaves `destinations` of `destination_type` out of the claim.
    pub fn hold_back(&mut self, destination_type: impl Into<String>, destinations: Vec<String>) {
        if !destinations.is_empty() {
            self.held_back.insert(destination_type.into(), destinations);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    /// Leaves out the types whose plugins have no call to spare now. A claim that left any out is
    /// narrowed for the moment, and its searches beyond the front are spaced out (`claim.rs`).
    pub fn leave_out_busy(&mut self, busy: &HashSet<String>) {
        let before = self.by_type.len();
        self.by_type
            .retain(|destination_type, _| !busy.contains(destination_type));
        self.busy_left_out |= self.by_type.len() < before;
    }

    pub(super) fn busy_left_out(&self) -> bool {
        self.busy_left_out
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ClaimScope)> {
        self.by_type
            .iter()
            .map(|(destination_type, scope)| (destination_type.as_str(), scope))
    }
}

/// A misbehaving claim scope. It names the destination type and the reason only, never a target
/// value, so target ids cannot reach logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "claim scope of destination type {destination_type} {reason}; rows of that type wait PENDING, \
     other types are claimed as usual"
)]
pub struct ClaimScopeError {
    pub destination_type: String,
    pub reason: ClaimScopeFailure,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimScopeFailure {
    #[error("supplier or its result failed")]
    SupplierFailed,
    #[error("did not answer within its time limit")]
    TimedOut,
    #[error("contains a null or blank element")]
    BlankElement,
    #[error("element exceeds maximum length of 255")]
    ElementTooLong,
    #[error("target set exceeds limit of 10000")]
    TooManyTargets,
    #[error("contains an element with a control character")]
    ControlCharacter,
}

impl ClaimScopeFailure {
    pub const ALL: [ClaimScopeFailure; 6] = [
        Self::SupplierFailed,
        Self::TimedOut,
        Self::BlankElement,
        Self::ElementTooLong,
        Self::TooManyTargets,
        Self::ControlCharacter,
    ];

    /// A short name for metric labels and log fields.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SupplierFailed => "call_failed",
            Self::TimedOut => "timeout",
            Self::BlankElement => "blank",
            Self::ElementTooLong => "too_long",
            Self::TooManyTargets => "too_many",
            Self::ControlCharacter => "control_character",
        }
    }
}

/// A value bound to the claim statement.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) enum Bind<'a> {
    Text(&'a str),
    TextArray(&'a [String]),
}

/// The destination-eligibility disjunction: `All` contributes a type predicate, a non-empty
/// `Destinations` a type and `destination = ANY(...)` predicate, an empty one or a scope that fails
/// [`ClaimScope::check`] nothing; with no predicate at all the filter is `FALSE`. A type with
/// destinations held back adds `NOT (destination = ANY(...))` to its predicate. Every value is
/// bound; parameters start at `first_param`.
pub(super) fn eligibility(scopes: &ClaimScopes, first_param: usize) -> Eligibility<'_> {
    let mut predicates = Vec::new();
    let mut binds = Vec::new();
    for (destination_type, scope) in scopes.iter() {
        if scope.check().is_err() {
            continue;
        }
        let mut bind = |value| {
            binds.push(value);
            first_param + binds.len() - 1
        };
        let mut conditions = match scope {
            ClaimScope::All => {
                vec![format!(
                    "o.destination_type = ${}",
                    bind(Bind::Text(destination_type))
                )]
            }
            ClaimScope::Destinations(targets) if !targets.is_empty() => vec![
                format!(
                    "o.destination_type = ${}",
                    bind(Bind::Text(destination_type))
                ),
                format!("o.destination = ANY(${})", bind(Bind::TextArray(targets))),
            ],
            ClaimScope::Destinations(_) | ClaimScope::Unavailable => continue,
        };
        if let Some(held) = scopes.held_back.get(destination_type) {
            conditions.push(format!(
                "NOT (o.destination = ANY(${}))",
                bind(Bind::TextArray(held))
            ));
        }
        predicates.push(format!("({})", conditions.join(" AND ")));
    }
    if predicates.is_empty() {
        return Eligibility::Nothing;
    }
    Eligibility::Filter {
        sql: predicates.join(" OR "),
        binds,
    }
}

/// The claim filter, or the knowledge that it is `FALSE`, in which case no statement needs to run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Eligibility<'a> {
    Nothing,
    Filter { sql: String, binds: Vec<Bind<'a>> },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(values: &[&str]) -> ClaimScope {
        ClaimScope::Destinations(values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn no_scopes_claim_nothing() {
        assert_eq!(eligibility(&ClaimScopes::new(), 3), Eligibility::Nothing);
    }

    #[test]
    fn all_and_destinations_bind_every_value_from_the_first_parameter() {
        let scopes = ClaimScopes::new()
            .with("A", ClaimScope::All)
            .with("B", targets(&["x", "y"]))
            .with("C", targets(&[]));
        let Eligibility::Filter { sql, binds } = eligibility(&scopes, 3) else {
            panic!("expected a filter");
        };
        assert_eq!(
            sql,
            "(o.destination_type = $3) OR (o.destination_type = $4 AND o.destination = ANY($5))"
        );
        assert_eq!(binds.len(), 3);
        assert!(!sql.contains('x'), "target values are bound, never spliced");
    }

    #[test]
    fn held_back_destinations_are_left_out_of_their_type_only() {
        let mut scopes = ClaimScopes::new()
            .with("A", ClaimScope::All)
            .with("B", targets(&["x", "y"]))
            .with("C", ClaimScope::All);
        scopes.hold_back("A", vec!["down".into()]);
        scopes.hold_back("B", vec!["y".into()]);
        let Eligibility::Filter { sql, binds } = eligibility(&scopes, 3) else {
            panic!("expected a filter");
        };
        assert_eq!(
            sql,
            "(o.destination_type = $3 AND NOT (o.destination = ANY($4))) OR \
             (o.destination_type = $5 AND o.destination = ANY($6) AND NOT (o.destination = ANY($7))) OR \
             (o.destination_type = $8)"
        );
        assert_eq!(binds.len(), 6);
        assert!(
            !sql.contains("down"),
            "held destinations are bound, never spliced"
        );
    }

    #[test]
    fn only_empty_destination_sets_claim_nothing() {
        let scopes = ClaimScopes::new()
            .with("A", targets(&[]))
            .with("B", targets(&[]));
        assert_eq!(eligibility(&scopes, 3), Eligibility::Nothing);
    }

    #[test]
    fn a_refused_scope_leaves_out_only_its_own_type() {
        let scopes = ClaimScopes::new()
            .with("A", ClaimScope::All)
            .with("B", targets(&["ok", "bad\0target"]))
            .with("C", ClaimScope::Unavailable);
        let Eligibility::Filter { sql, binds } = eligibility(&scopes, 3) else {
            panic!("expected a filter");
        };
        assert_eq!(sql, "(o.destination_type = $3)");
        assert_eq!(binds, vec![Bind::Text("A")]);
    }

    #[test]
    fn control_characters_in_a_target_refuse_the_scope() {
        for target in ["a\0b", "line\nbreak", "tab\t", "del\u{7f}", "c1\u{85}"] {
            assert_eq!(
                targets(&["ok", target]).check(),
                Err(ClaimScopeFailure::ControlCharacter),
                "{target:?}"
            );
        }
        assert_eq!(targets(&["unicode-é-ok"]).check(), Ok(()));
    }

    #[test]
    fn the_error_names_the_type_and_reason_but_no_target() {
        let secret = "s".repeat(300);
        let reason = targets(&[&secret]).check().unwrap_err();
        assert_eq!(reason, ClaimScopeFailure::ElementTooLong);
        let error = ClaimScopeError {
            destination_type: "WEBHOOK".into(),
            reason,
        };
        let message = error.to_string();
        assert!(
            message.contains("WEBHOOK")
                && message.contains("element exceeds maximum length of 255")
        );
        assert!(!message.contains("sss"));
    }
}
