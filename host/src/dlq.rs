//! Dead-letter operations as `outbox-host dlq` and the admin listener's `/dlq` offer them: the JSON
//! shape of a dead letter, how `since` is written, and how a selection is given. The statements are
//! in `repository/dead_letters.rs`.

use crate::repository::{DeadLetter, DeadLetterSelection, OutboxRepository, RepositoryError};
use crate::text;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Rows `dlq list` and `GET /dlq` show when no limit is given, and at most.
pub const DEFAULT_LIST_LIMIT: u32 = 100;
pub const MAX_LIST_LIMIT: u32 = 10_000;

/// Sends the selected dead letters back to `PENDING` and logs how many, and who asked (`via`: the
/// command line or the admin listener). Returns how many.
pub async fn redrive(
    repository: &OutboxRepository,
    selection: &DeadLetterSelection,
    via: &'static str,
) -> Result<usize, RepositoryError> {
    let count = repository.redrive_dead_letters(selection).await?.len();
    tracing::info!(count, selection = %describe(selection), via, "dead letters redriven");
    Ok(count)
}

/// Deletes the selected dead letters and logs how many, and who asked. Returns how many.
pub async fn purge(
    repository: &OutboxRepository,
    selection: &DeadLetterSelection,
    via: &'static str,
) -> Result<u64, RepositoryError> {
    let count = repository.purge_dead_letters(selection).await?;
    tracing::info!(count, selection = %describe(selection), via, "dead letters purged");
    Ok(count)
}

/// What an operator wrote that cannot select dead letters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DlqError {
    #[error(
        "`since` must be an RFC 3339 time (2026-01-31T09:00:00Z) or an age such as 90s, 30m, 12h or 7d"
    )]
    Since,
    #[error("select dead letters by ids, or by type (and optionally since), not both")]
    Selection,
}

/// `since` as an RFC 3339 time, or as an age counted back from `now` (`30m`: thirty minutes ago;
/// units `s`, `m`, `h`, `d`).
pub fn parse_since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, DlqError> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    let split = text.len().saturating_sub(1);
    let (amount, unit) = text.split_at_checked(split).ok_or(DlqError::Since)?;
    let amount: i64 = amount.parse().map_err(|_| DlqError::Since)?;
    let age = match unit {
        "s" => Duration::try_seconds(amount),
        "m" => Duration::try_minutes(amount),
        "h" => Duration::try_hours(amount),
        "d" => Duration::try_days(amount),
        _ => None,
    }
    .filter(|age| *age >= Duration::zero())
    .ok_or(DlqError::Since)?;
    now.checked_sub_signed(age).ok_or(DlqError::Since)
}

/// The selection in a log line: how many ids, or the type (sanitized) and since.
pub fn describe(selection: &DeadLetterSelection) -> String {
    match selection {
        DeadLetterSelection::Ids(ids) => format!("{} ids", ids.len()),
        DeadLetterSelection::Type {
            destination_type,
            since,
        } => {
            let since = since.map(|at| format!(" since {}", at.to_rfc3339()));
            format!(
                "type {}{}",
                text::sanitize(destination_type, 64),
                since.unwrap_or_default()
            )
        }
    }
}

/// One dead letter as `dlq list --json` prints it and `GET /dlq` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterJson {
    pub id: i64,
    #[serde(rename = "type")]
    pub destination_type: String,
    pub destination: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub error_type: Option<String>,
    pub last_error: Option<String>,
    /// RFC 3339.
    pub updated_at: String,
}

/// The body of `GET /dlq` and the output of `dlq list --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLettersPage {
    pub dead_letters: Vec<DeadLetterJson>,
}

/// Longest last error shown, in characters; the column holds at most 4,000.
const MAX_SHOWN_ERROR_CHARS: usize = 4000;

impl From<DeadLetter> for DeadLetterJson {
    /// Text the host did not write itself (a row inserted or edited by hand) is made safe to show;
    /// a URL destination loses its user info and query, where secrets ride.
    fn from(row: DeadLetter) -> Self {
        DeadLetterJson {
            id: row.id,
            destination_type: text::sanitize(&row.destination_type, 64),
            destination: text::masked_destination(&row.destination, 255),
            attempts: row.attempt,
            max_attempts: row.max_attempts,
            error_type: row.error_type.map(|kind| text::sanitize(&kind, 128)),
            last_error: row
                .last_error
                .map(|error| text::sanitize(&error, MAX_SHOWN_ERROR_CHARS)),
            updated_at: row.updated_at.to_rfc3339(),
        }
    }
}

/// The body of `POST /dlq/redrive` and `POST /dlq/purge`: `{"ids": [1, 2]}`, or
/// `{"type": "WEBHOOK", "since": "1h"}` (`since` optional).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionJson {
    #[serde(default)]
    pub ids: Vec<i64>,
    #[serde(rename = "type")]
    pub destination_type: Option<String>,
    pub since: Option<String>,
}

impl SelectionJson {
    /// Exactly one of ids or a type; `since` only with a type.
    pub fn selection(self, now: DateTime<Utc>) -> Result<DeadLetterSelection, DlqError> {
        match (self.ids.is_empty(), self.destination_type, self.since) {
            (false, None, None) => Ok(DeadLetterSelection::Ids(self.ids)),
            (true, Some(destination_type), since) => Ok(DeadLetterSelection::Type {
                destination_type,
                since: since.map(|text| parse_since(&text, now)).transpose()?,
            }),
            _ => Err(DlqError::Selection),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-31T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn since_takes_an_rfc_3339_time_or_an_age() {
        let at = |text: &str| parse_since(text, now()).map(|time| time.to_rfc3339());
        assert_eq!(
            at("2026-01-30T08:00:00+01:00").unwrap(),
            "2026-01-30T07:00:00+00:00"
        );
        assert_eq!(at("90s").unwrap(), "2026-01-31T11:58:30+00:00");
        assert_eq!(at("30m").unwrap(), "2026-01-31T11:30:00+00:00");
        assert_eq!(at("12h").unwrap(), "2026-01-31T00:00:00+00:00");
        assert_eq!(at("7d").unwrap(), "2026-01-24T12:00:00+00:00");
        for bad in ["", "h", "-1h", "1w", "1.5h", "yesterday", "99999999999999d"] {
            assert_eq!(at(bad), Err(DlqError::Since), "{bad}");
        }
    }

    #[test]
    fn a_selection_names_ids_or_a_type_never_both_nor_neither() {
        let ids = SelectionJson {
            ids: vec![1, 2],
            ..SelectionJson::default()
        };
        assert_eq!(
            ids.selection(now()),
            Ok(DeadLetterSelection::Ids(vec![1, 2]))
        );
        let by_type = SelectionJson {
            destination_type: Some("WEBHOOK".into()),
            since: Some("1h".into()),
            ..SelectionJson::default()
        };
        assert_eq!(
            by_type.selection(now()),
            Ok(DeadLetterSelection::Type {
                destination_type: "WEBHOOK".into(),
                since: Some(now() - Duration::hours(1)),
            })
        );
        let both = SelectionJson {
            ids: vec![1],
            destination_type: Some("WEBHOOK".into()),
            since: None,
        };
        assert_eq!(both.selection(now()), Err(DlqError::Selection));
        assert_eq!(
            SelectionJson::default().selection(now()),
            Err(DlqError::Selection)
        );
        let since_alone = SelectionJson {
            since: Some("1h".into()),
            ..SelectionJson::default()
        };
        assert_eq!(since_alone.selection(now()), Err(DlqError::Selection));
    }
}
