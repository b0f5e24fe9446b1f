//! `outbox-host destinations`: the `/destinations` page of a running host, as a table: each
//! destination this node tracks (an open breaker, failures in a row, calls running, rows held
//! back). The host is named as `admin_page.rs` says; exit codes as `plugin list`'s.

use std::io::Write;

use chrono::{DateTime, Utc};

use super::admin_page::{AdminArgs, fetch};
use super::{EXIT_FAILURE, EXIT_SUCCESS};
use crate::relay::{DestinationView, DestinationsPage};

const HEADER: [&str; 9] = [
    "TYPE",
    "DESTINATION",
    "REF",
    "BREAKER",
    "FAILURES",
    "NEXT PROBE",
    "IN FLIGHT",
    "HELD",
    "LIMITS",
];

/// A destination comes from a row: shown cut, with control characters replaced.
const DESTINATION_CHARS_SHOWN: usize = 60;

pub async fn run(args: AdminArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let page: DestinationsPage = match fetch(args, "/destinations", "a destination list", err).await
    {
        Ok(page) => page,
        Err(code) => return code,
    };
    let printed = if page.destinations.is_empty() {
        writeln!(
            out,
            "no destination tracked: every breaker is closed with no failure streak, and nothing runs"
        )
    } else {
        write!(
            out,
            "{}",
            super::table::render(HEADER, page.destinations.iter().map(row))
        )
    };
    match printed {
        Ok(()) => EXIT_SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "error: cannot print the destination list: {error}");
            EXIT_FAILURE
        }
    }
}

fn row(view: &DestinationView) -> [String; 9] {
    let time = |at: &Option<String>| match at.as_deref().map(DateTime::parse_from_rfc3339) {
        Some(Ok(at)) => at
            .with_timezone(&Utc)
            .format("%Y-%m-%d %H:%M:%S UTC")
            .to_string(),
        Some(Err(_)) | None => "-".to_owned(),
    };
    let limits = [
        view.rate_limit_per_second.map(|rate| format!("{rate}/s")),
        view.max_concurrency.map(|max| format!("{max} at once")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    [
        crate::text::sanitize(&view.destination_type, 32),
        crate::text::sanitize(&view.destination, DESTINATION_CHARS_SHOWN),
        view.destination_ref.clone(),
        view.breaker.clone(),
        view.consecutive_failures.to_string(),
        time(&view.next_probe_at),
        view.in_flight.to_string(),
        view.held_rows.to_string(),
        if limits.is_empty() {
            "-".to_owned()
        } else {
            limits.join(", ")
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_breaker_is_one_row_with_its_next_probe_and_a_hostile_name_stays_on_it() {
        let view = DestinationView {
            destination_type: "WEBHOOK".into(),
            destination: "http://down.example/\u{1b}[2Jhook\nforged".into(),
            destination_ref: "0123456789ab".into(),
            breaker: "open".into(),
            consecutive_failures: 5,
            opened_at: None,
            next_probe_at: Some("2026-12-04T05:06:07+00:00".into()),
            in_flight: 0,
            held_rows: 42,
            rate_limit_per_second: Some(20.0),
            max_concurrency: Some(4),
        };
        let text = super::super::table::render(HEADER, [row(&view)]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        for cell in ["open", "2026-12-04 05:06:07 UTC", "42", "20/s, 4 at once"] {
            assert!(text.contains(cell), "{cell} in {text}");
        }
    }
}
