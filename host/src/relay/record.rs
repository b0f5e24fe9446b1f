//! Recording outcomes apart from the claim, after a turn whose combined mark-and-claim failed.
//!
//! A failed turn keeps its outcomes; the next turn records them on their own, first all in one
//! statement and, if the database refuses that, one by one, so one outcome the database will not take
//! never holds back the others. An outcome refused on its own is tried again on later turns; one whose
//! data is refused, or that is refused [`MAX_REFUSALS`] times, is replaced by a dead letter with a
//! fixed error, so its row ends in a defined state instead of coming back after every lease.

use super::cycle::Landed;
use super::outcome::Decision;
use crate::error_type::HostErrorType;
use crate::plugins::EntryDisposition;
use crate::repository::{Claims, Mark, OutboxRepository, RepositoryError};
use chrono::{DateTime, Utc};

/// Refusals of one outcome on its own before its row is dead-lettered instead.
const MAX_REFUSALS: u32 = 3;

/// A decided outcome the database has not recorded yet.
pub(super) struct Unrecorded {
    pub landed: Landed,
    pub decision: Decision,
    refusals: u32,
}

impl Unrecorded {
    pub fn new(landed: Landed, decision: Decision) -> Self {
        Unrecorded {
            landed,
            decision,
            refusals: 0,
        }
    }
}

/// What recording apart achieved.
#[derive(Default)]
pub(super) struct Apart {
    /// Outcomes that are settled, each with whether this node still owned its row (false also for
    /// an outcome given up: its row stays PROCESSING until lease recovery).
    pub settled: Vec<(Unrecorded, bool)>,
    /// Outcomes to try again next turn.
    pub kept: Vec<Unrecorded>,
    /// The database could not be reached.
    pub unreachable: bool,
}

/// The marks of `outcomes`, and the claim each belongs to.
pub(super) fn marks_of(outcomes: &[Unrecorded]) -> (Vec<Mark>, Vec<Option<DateTime<Utc>>>) {
    outcomes
        .iter()
        .map(|outcome| (outcome.decision.mark.clone(), outcome.landed.claimed_at()))
        .unzip()
}

pub(super) async fn record_apart(
    repository: &OutboxRepository,
    claimed_by: &str,
    outcomes: Vec<Unrecorded>,
) -> Apart {
    let (marks, claims) = marks_of(&outcomes);
    let mut apart = Apart::default();
    match repository
        .mark_claims(claimed_by, &marks, Claims::At(&claims))
        .await
    {
        Ok(owned) => {
            apart.settled = outcomes.into_iter().zip(owned).collect();
            return apart;
        }
        Err(error) if refusal(&error).is_none() => {
            tracing::warn!(%error, claimed_by, "cannot record outcomes; kept for the next turn");
            apart.kept = outcomes;
            apart.unreachable = true;
            return apart;
        }
        Err(_) => {}
    }
    for mut outcome in outcomes {
        if apart.unreachable {
            apart.kept.push(outcome);
            continue;
        }
        let error = match record_one(repository, claimed_by, &outcome).await {
            Ok(owned) => {
                apart.settled.push((outcome, owned));
                continue;
            }
            Err(error) => error,
        };
        let Some(refused) = refusal(&error) else {
            apart.unreachable = true;
            apart.kept.push(outcome);
            continue;
        };
        outcome.refusals += 1;
        if !refused.is_data() && outcome.refusals < MAX_REFUSALS {
            apart.kept.push(outcome);
            continue;
        }
        let entry_id = outcome.decision.mark.id();
        tracing::warn!(
            entry_id,
            sqlstate = refused.code,
            claimed_by,
            "the database refuses this outcome; dead-lettering the row instead"
        );
        dead_letter_instead(&mut outcome, refused.code);
        match record_one(repository, claimed_by, &outcome).await {
            Ok(owned) => apart.settled.push((outcome, owned)),
            Err(error) => {
                tracing::error!(entry_id, %error, claimed_by, "cannot record even a dead letter for this row; it stays PROCESSING until lease recovery");
                apart.settled.push((outcome, false));
            }
        }
    }
    apart
}

async fn record_one(
    repository: &OutboxRepository,
    claimed_by: &str,
    outcome: &Unrecorded,
) -> Result<bool, RepositoryError> {
    let claim = [outcome.landed.claimed_at()];
    let owned = repository
        .mark_claims(
            claimed_by,
            std::slice::from_ref(&outcome.decision.mark),
            Claims::At(&claim),
        )
        .await?;
    Ok(owned[0])
}

/// The database answered and refused the statement, with this SQLSTATE.
struct Refusal {
    code: String,
}

impl Refusal {
    /// Classes 22 (data exception) and 23 (integrity constraint violation): the values themselves
    /// are refused, so trying the same mark again cannot help.
    fn is_data(&self) -> bool {
        self.code.starts_with("22") || self.code.starts_with("23")
    }
}

/// `None` when the database was not reached or did not answer (connection, pool, protocol).
fn refusal(error: &RepositoryError) -> Option<Refusal> {
    let RepositoryError::Database(sqlx::Error::Database(refused)) = error else {
        return None;
    };
    let code = refused
        .code()
        .map(|code| code.into_owned())
        .unwrap_or_default();
    Some(Refusal {
        code: crate::text::token(&code, 5).unwrap_or_else(|| "?".into()),
    })
}

/// Replaces the outcome's mark with a dead letter whose error says why, in fixed words: the refused
/// text is not repeated anywhere.
fn dead_letter_instead(outcome: &mut Unrecorded, code: String) {
    let decision = &mut outcome.decision;
    decision.mark = Mark::DeadLetter {
        id: decision.mark.id(),
        last_error: format!(
            "the outcome of this attempt could not be stored (SQLSTATE {code}); dead-lettered instead"
        ),
        error_type: Some(HostErrorType::Unrecordable.as_str().into()),
    };
    decision.disposition = EntryDisposition::DeadLettered;
    decision.error_type = Some(HostErrorType::Unrecordable.as_str().into());
}
