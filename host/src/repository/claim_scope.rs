//! What this node may claim: one claim scope per destination type, turned into the claim's SQL filter.

use std::collections::BTreeMap;

/// Limits on a `Destinations` scope; past them the whole claim cycle fails closed.
pub const MAX_TARGETS: usize = 10_000;
pub const MAX_TARGET_CHARS: usize = 255;

/// Which rows of one destination type this node may claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimScope {
    All,
    /// Only rows whose `destination` is listed; an empty list claims nothing.
    Destinations(Vec<String>),
    /// Asking for the scope failed (the plugin trapped or timed out).
    Unavailable,
}

/// The scopes of every destination type with a loaded handler. A type that is absent claims nothing:
/// absence never means "everything".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayCapabilities {
    by_type: BTreeMap<String, ClaimScope>,
}

impl RelayCapabilities {
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

    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ClaimScope)> {
        self.by_type
            .iter()
            .map(|(destination_type, scope)| (destination_type.as_str(), scope))
    }
}

/// A misbehaving claim scope. It names the destination type and the reason only, never a target
/// value, so target ids cannot reach logs; the whole cycle claims nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "claim scope of destination type {destination_type} {reason}; this claim cycle claims nothing"
)]
pub struct ClaimScopeError {
    pub destination_type: String,
    pub reason: ClaimScopeFailure,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimScopeFailure {
    #[error("supplier or its result failed")]
    SupplierFailed,
    #[error("contains a null or blank element")]
    BlankElement,
    #[error("element exceeds maximum length of 255")]
    ElementTooLong,
    #[error("target set exceeds limit of 10000")]
    TooManyTargets,
}

/// A value bound to the claim statement.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Bind<'a> {
    Text(&'a str),
    TextArray(&'a [String]),
}

/// The destination-eligibility disjunction: `All` contributes a type predicate, a non-empty
/// `Destinations` a type and `destination = ANY(...)` predicate, an empty one nothing; with no
/// predicate at all the filter is `FALSE`. Every value is bound; parameters start at `first_param`.
pub(super) fn eligibility(
    capabilities: &RelayCapabilities,
    first_param: usize,
) -> Result<Eligibility<'_>, ClaimScopeError> {
    let mut predicates = Vec::new();
    let mut binds = Vec::new();
    for (destination_type, scope) in capabilities.iter() {
        let fail = |reason| ClaimScopeError {
            destination_type: destination_type.to_owned(),
            reason,
        };
        let param = first_param + binds.len();
        match scope {
            ClaimScope::All => {
                predicates.push(format!("(o.destination_type = ${param})"));
                binds.push(Bind::Text(destination_type));
            }
            ClaimScope::Destinations(targets) => {
                validate_targets(targets).map_err(fail)?;
                if targets.is_empty() {
                    continue;
                }
                predicates.push(format!(
                    "(o.destination_type = ${param} AND o.destination = ANY(${}))",
                    param + 1
                ));
                binds.push(Bind::Text(destination_type));
                binds.push(Bind::TextArray(targets));
            }
            ClaimScope::Unavailable => return Err(fail(ClaimScopeFailure::SupplierFailed)),
        }
    }
    if predicates.is_empty() {
        return Ok(Eligibility::Nothing);
    }
    Ok(Eligibility::Filter {
        sql: predicates.join(" OR "),
        binds,
    })
}

/// The claim filter, or the knowledge that it is `FALSE`, in which case no statement needs to run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Eligibility<'a> {
    Nothing,
    Filter { sql: String, binds: Vec<Bind<'a>> },
}

fn validate_targets(targets: &[String]) -> Result<(), ClaimScopeFailure> {
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
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(values: &[&str]) -> ClaimScope {
        ClaimScope::Destinations(values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn no_scopes_claim_nothing() {
        assert_eq!(
            eligibility(&RelayCapabilities::new(), 3).unwrap(),
            Eligibility::Nothing
        );
    }

    #[test]
    fn all_and_destinations_bind_every_value_from_the_first_parameter() {
        let capabilities = RelayCapabilities::new()
            .with("A", ClaimScope::All)
            .with("B", targets(&["x", "y"]))
            .with("C", targets(&[]));
        let Eligibility::Filter { sql, binds } = eligibility(&capabilities, 3).unwrap() else {
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
    fn only_empty_destination_sets_claim_nothing() {
        let capabilities = RelayCapabilities::new()
            .with("A", targets(&[]))
            .with("B", targets(&[]));
        assert_eq!(eligibility(&capabilities, 3).unwrap(), Eligibility::Nothing);
    }

    #[test]
    fn the_error_names_the_type_and_reason_but_no_target() {
        let secret = "s".repeat(300);
        let capabilities = RelayCapabilities::new().with("WEBHOOK", targets(&[&secret]));
        let error = eligibility(&capabilities, 3).unwrap_err();
        assert_eq!(error.reason, ClaimScopeFailure::ElementTooLong);
        let message = error.to_string();
        assert!(
            message.contains("WEBHOOK")
                && message.contains("element exceeds maximum length of 255")
        );
        assert!(!message.contains("sss"));
    }
}
