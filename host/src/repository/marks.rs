//! Recording outcomes. Every mark is guarded by the claim owner: a node whose lease was reclaimed
//! cannot complete a row another node now owns, and learns so from the answer. Error texts come from
//! plugins, so they are sanitized here, on their way into SQL, whoever builds the mark. A mark carries
//! delays, never times: every time written to a row is the database's (`NOW()` plus the delay).

use super::{OutboxRepository, OutboxState, RepositoryError, Statements};
use crate::text;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::HashSet;
use std::time::Duration;

/// `last_error` is TEXT, but one row's error is bounded so it cannot grow without limit.
pub const MAX_LAST_ERROR_CHARS: usize = 4000;
/// An error type is a short word (its column is VARCHAR(500)).
pub const MAX_ERROR_TYPE_CHARS: usize = 128;

/// A plugin's error message as it is stored: control characters (NUL among them, which PostgreSQL
/// refuses in text) replaced, cut to [`MAX_LAST_ERROR_CHARS`].
pub fn stored_error(message: &str) -> String {
    text::sanitize(message, MAX_LAST_ERROR_CHARS)
}

/// A plugin's error type as it is stored: a token of at most [`MAX_ERROR_TYPE_CHARS`], or none.
pub fn stored_error_type(error_type: &str) -> Option<String> {
    text::token(error_type, MAX_ERROR_TYPE_CHARS)
}

/// The next state of one claimed row.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    Published {
        id: i64,
    },
    /// Back to PENDING with the incremented attempt, after `delay` (database clock).
    Retry {
        id: i64,
        new_attempt: i32,
        delay: Duration,
        last_error: String,
        error_type: Option<String>,
    },
    DeadLetter {
        id: i64,
        last_error: String,
        error_type: Option<String>,
    },
    /// Back to PENDING after `delay` (database clock), attempt unchanged.
    Unresolvable {
        id: i64,
        delay: Duration,
    },
}

impl Mark {
    pub fn id(&self) -> i64 {
        match self {
            Mark::Published { id }
            | Mark::Retry { id, .. }
            | Mark::DeadLetter { id, .. }
            | Mark::Unresolvable { id, .. } => *id,
        }
    }

    /// How long after the mark is recorded its row may be claimed again; `None` when the row is
    /// done (published or dead-lettered).
    pub fn delay(&self) -> Option<Duration> {
        match self {
            Mark::Retry { delay, .. } | Mark::Unresolvable { delay, .. } => Some(*delay),
            Mark::Published { .. } | Mark::DeadLetter { .. } => None,
        }
    }
}

/// The batch as the statement's parallel arrays.
#[derive(Default)]
struct Columns {
    ids: Vec<i64>,
    states: Vec<&'static str>,
    attempts: Vec<Option<i32>>,
    /// In microseconds, the resolution of a timestamp: a delay is kept as exactly as a time was.
    delays_us: Vec<Option<i64>>,
    records_error: Vec<bool>,
    last_errors: Vec<Option<String>>,
    error_types: Vec<Option<String>>,
}

impl Columns {
    fn push(&mut self, mark: &Mark) {
        let (state, attempt, error) = match mark {
            Mark::Published { .. } => (OutboxState::Published, None, None),
            Mark::Retry {
                new_attempt,
                last_error,
                error_type,
                ..
            } => (
                OutboxState::Pending,
                Some(*new_attempt),
                Some((last_error, error_type)),
            ),
            Mark::DeadLetter {
                last_error,
                error_type,
                ..
            } => (
                OutboxState::DeadLetter,
                None,
                Some((last_error, error_type)),
            ),
            Mark::Unresolvable { .. } => (OutboxState::Pending, None, None),
        };
        self.ids.push(mark.id());
        self.states.push(state.as_str());
        self.attempts.push(attempt);
        self.delays_us.push(
            mark.delay()
                .map(|delay| i64::try_from(delay.as_micros()).unwrap_or(i64::MAX)),
        );
        self.records_error.push(error.is_some());
        self.last_errors
            .push(error.map(|(message, _)| stored_error(message)));
        self.error_types.push(
            error
                .and_then(|(_, error_type)| error_type.as_deref())
                .and_then(stored_error_type),
        );
    }
}

/// Which claim of its row each mark of a batch belongs to.
#[derive(Debug, Clone, Copy)]
pub enum Claims<'a> {
    /// Seed 000's guard: the row is PROCESSING and claimed by this owner.
    OfOwner,
    /// Also, per mark, the `claimed_at` of the claim it belongs to (`None`: any claim of this
    /// owner). A call that outlived its lease then cannot record its outcome against a later claim
    /// of the same row, by this owner or another.
    At(&'a [Option<DateTime<Utc>>]),
}

impl OutboxRepository {
    /// Records a batch of outcomes in one statement. The answer has one entry per mark, in order:
    /// true when this node still owned the row and its state changed.
    pub async fn mark_batch(
        &self,
        claimed_by: &str,
        marks: &[Mark],
    ) -> Result<Vec<bool>, RepositoryError> {
        self.mark_claims(claimed_by, marks, Claims::OfOwner).await
    }

    /// [`Self::mark_batch`], each mark accepted only for the claim `claims` names.
    pub async fn mark_claims(
        &self,
        claimed_by: &str,
        marks: &[Mark],
        claims: Claims<'_>,
    ) -> Result<Vec<bool>, RepositoryError> {
        let mut conn = self.pool.acquire().await?;
        record_marks(&mut conn, &self.sql, claimed_by, marks, claims).await
    }

    async fn mark_one(&self, claimed_by: &str, mark: Mark) -> Result<bool, RepositoryError> {
        Ok(self.mark_batch(claimed_by, &[mark]).await?[0])
    }

    pub async fn mark_published(&self, id: i64, claimed_by: &str) -> Result<bool, RepositoryError> {
        self.mark_one(claimed_by, Mark::Published { id }).await
    }

    pub async fn mark_retry(
        &self,
        id: i64,
        claimed_by: &str,
        new_attempt: i32,
        delay: Duration,
        last_error: &str,
        error_type: Option<&str>,
    ) -> Result<bool, RepositoryError> {
        let mark = Mark::Retry {
            id,
            new_attempt,
            delay,
            last_error: last_error.to_owned(),
            error_type: error_type.map(str::to_owned),
        };
        self.mark_one(claimed_by, mark).await
    }

    pub async fn mark_dead_letter(
        &self,
        id: i64,
        claimed_by: &str,
        last_error: &str,
        error_type: Option<&str>,
    ) -> Result<bool, RepositoryError> {
        let mark = Mark::DeadLetter {
            id,
            last_error: last_error.to_owned(),
            error_type: error_type.map(str::to_owned),
        };
        self.mark_one(claimed_by, mark).await
    }

    pub async fn mark_unresolvable(
        &self,
        id: i64,
        claimed_by: &str,
        delay: Duration,
    ) -> Result<bool, RepositoryError> {
        self.mark_one(claimed_by, Mark::Unresolvable { id, delay })
            .await
    }
}

pub(super) async fn record_marks(
    conn: &mut PgConnection,
    statements: &Statements,
    claimed_by: &str,
    marks: &[Mark],
    claims: Claims<'_>,
) -> Result<Vec<bool>, RepositoryError> {
    if marks.is_empty() {
        return Ok(Vec::new());
    }
    let claimed_at = match claims {
        Claims::OfOwner => vec![None; marks.len()],
        Claims::At(claimed_at) if claimed_at.len() == marks.len() => claimed_at.to_vec(),
        Claims::At(_) => return Err(RepositoryError::MarksWithoutClaims),
    };
    let mut columns = Columns::default();
    marks.iter().for_each(|mark| columns.push(mark));
    let owned: HashSet<i64> = sqlx::query_scalar(&statements.mark)
        .bind(&columns.ids)
        .bind(&columns.states)
        .bind(&columns.attempts)
        .bind(&columns.delays_us)
        .bind(&columns.records_error)
        .bind(&columns.last_errors)
        .bind(&columns.error_types)
        .bind(claimed_by)
        .bind(&claimed_at)
        .fetch_all(conn)
        .await?
        .into_iter()
        .collect();
    Ok(marks
        .iter()
        .map(|mark| owned.contains(&mark.id()))
        .collect())
}
