//! `outbox-host dlq`: dead letters listed, redriven and purged, on the database itself (connected as
//! `migrate` is), so it works whether or not a host runs. Never prints a payload or a header: the
//! statements do not read them. Exit codes: 0 done, 1 the database failed, 2 bad usage.

use super::table::{self, one_line};
use super::{DatabaseArgs, EXIT_USAGE, init_logging};
use crate::config::Config;
use crate::database::{self, Tables};
use crate::dlq::{self, DEFAULT_LIST_LIMIT, DeadLetterJson, DeadLettersPage, MAX_LIST_LIMIT};
use crate::repository::{DeadLetterSelection, OutboxRepository};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use std::io::Write;

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub command: DlqCommand,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, the most recently dead-lettered first: id, type, destination, attempts,
    /// error type, last error and when.
    List {
        #[command(flatten)]
        database: DatabaseArgs,
        /// Only this destination type.
        #[arg(long = "type", value_name = "T")]
        destination_type: Option<String>,
        /// Only rows dead-lettered since: an RFC 3339 time, or an age such as 30m, 12h, 7d.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// At most this many rows.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_LIST_LIMIT,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIST_LIMIT)))]
        limit: u32,
        /// Print the rows as JSON (the body of the admin listener's GET /dlq).
        #[arg(long)]
        json: bool,
    },
    /// Send dead letters back to PENDING with attempt 0, available now.
    Redrive {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(flatten)]
        selection: SelectionArgs,
    },
    /// Delete dead letters for good.
    Purge {
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(flatten)]
        selection: SelectionArgs,
        /// Confirms the deletion.
        #[arg(long)]
        yes: bool,
    },
}

/// `--id ID...`, or `--type T [--since TIME]`.
#[derive(Debug, Args)]
pub struct SelectionArgs {
    /// These rows (repeat the flag or list several ids).
    #[arg(long = "id", value_name = "ID", num_args = 1..,
          required_unless_present = "destination_type", conflicts_with = "destination_type")]
    ids: Vec<i64>,
    /// The rows of this destination type.
    #[arg(long = "type", value_name = "T")]
    destination_type: Option<String>,
    /// With --type: only rows dead-lettered since (an RFC 3339 time, or an age such as 30m, 12h, 7d).
    #[arg(long, value_name = "TIME", requires = "destination_type")]
    since: Option<String>,
}

impl SelectionArgs {
    fn selection(self, now: DateTime<Utc>) -> Result<DeadLetterSelection, dlq::DlqError> {
        dlq::SelectionJson {
            ids: self.ids,
            destination_type: self.destination_type,
            since: self.since,
        }
        .selection(now)
    }
}

const HEADER: [&str; 7] = [
    "ID",
    "TYPE",
    "DESTINATION",
    "ATTEMPTS",
    "ERROR TYPE",
    "LAST ERROR",
    "UPDATED AT",
];

/// A table row shows this much of the last error; `--json` shows all of it.
const TABLE_ERROR_CHARS: usize = 120;

pub async fn run(args: DlqArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let now = Utc::now();
    let (database, operation) = match args.command {
        DlqCommand::List {
            database,
            destination_type,
            since,
            limit,
            json,
        } => {
            let since = match since.map(|text| dlq::parse_since(&text, now)).transpose() {
                Ok(since) => since,
                Err(error) => return usage(err, &error.to_string()),
            };
            let list = List {
                destination_type,
                since,
                limit,
                json,
            };
            (database, Operation::List(list))
        }
        DlqCommand::Redrive {
            database,
            selection,
        } => match selection.selection(now) {
            Ok(selection) => (database, Operation::Redrive(selection)),
            Err(error) => return usage(err, &error.to_string()),
        },
        DlqCommand::Purge {
            database,
            selection,
            yes,
        } => {
            if !yes {
                return usage(
                    err,
                    "purge deletes dead letters for good: add --yes to confirm",
                );
            }
            match selection.selection(now) {
                Ok(selection) => (database, Operation::Purge(selection)),
                Err(error) => return usage(err, &error.to_string()),
            }
        }
    };
    let Some(config) = database.load(err) else {
        return EXIT_USAGE;
    };
    init_logging(&config);
    let result = async {
        let repository = connect(&config).await?;
        operation.run(&repository, out).await
    }
    .await;
    super::finish(result, err)
}

fn usage(err: &mut dyn Write, message: &str) -> u8 {
    let _ = writeln!(err, "error: {message}");
    EXIT_USAGE
}

async fn connect(config: &Config) -> anyhow::Result<OutboxRepository> {
    let options = database::connect_options(config.database_url())?;
    let pool = database::connect(options, 1).await?;
    Ok(OutboxRepository::new(
        pool,
        Tables::new(config.database.schema.clone()),
    ))
}

struct List {
    destination_type: Option<String>,
    since: Option<DateTime<Utc>>,
    limit: u32,
    json: bool,
}

enum Operation {
    List(List),
    Redrive(DeadLetterSelection),
    Purge(DeadLetterSelection),
}

impl Operation {
    async fn run(self, repository: &OutboxRepository, out: &mut dyn Write) -> anyhow::Result<()> {
        match self {
            Operation::List(list) => {
                let rows = repository
                    .list_dead_letters(list.destination_type.as_deref(), list.since, list.limit)
                    .await?;
                let page = DeadLettersPage {
                    dead_letters: rows.into_iter().map(DeadLetterJson::from).collect(),
                };
                if list.json {
                    writeln!(out, "{}", serde_json::to_string(&page)?)?;
                } else if page.dead_letters.is_empty() {
                    writeln!(out, "no dead letters")?;
                } else {
                    write!(
                        out,
                        "{}",
                        table::render(HEADER, page.dead_letters.iter().map(row))
                    )?;
                }
            }
            Operation::Redrive(selection) => {
                let redriven = dlq::redrive(repository, &selection, "command line").await?;
                writeln!(
                    out,
                    "{} back to PENDING{}",
                    dead_letters(redriven),
                    not_found(&selection, redriven)
                )?;
            }
            Operation::Purge(selection) => {
                let purged = dlq::purge(repository, &selection, "command line").await?;
                let purged = usize::try_from(purged).unwrap_or(usize::MAX);
                writeln!(
                    out,
                    "{} purged{}",
                    dead_letters(purged),
                    not_found(&selection, purged)
                )?;
            }
        }
        Ok(())
    }
}

fn dead_letters(count: usize) -> String {
    match count {
        1 => "1 dead letter".to_owned(),
        _ => format!("{count} dead letters"),
    }
}

/// Ids named that were not dead letters (published, pending, or no such row) are said so.
fn not_found(selection: &DeadLetterSelection, done: usize) -> String {
    match selection {
        DeadLetterSelection::Ids(ids) if ids.len() > done => {
            format!(
                " ({} of the ids given {} not a dead letter)",
                ids.len() - done,
                if ids.len() - done == 1 { "is" } else { "are" }
            )
        }
        _ => String::new(),
    }
}

fn row(letter: &DeadLetterJson) -> [String; 7] {
    let shown = |value: &Option<String>| value.as_deref().map_or_else(|| "-".to_owned(), one_line);
    let last_error = letter.last_error.as_deref().map_or_else(
        || "-".to_owned(),
        |error| one_line(&error.chars().take(TABLE_ERROR_CHARS).collect::<String>()),
    );
    let updated_at = DateTime::parse_from_rfc3339(&letter.updated_at).map_or_else(
        |_| letter.updated_at.clone(),
        |at| {
            at.with_timezone(&Utc)
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string()
        },
    );
    [
        letter.id.to_string(),
        one_line(&letter.destination_type),
        one_line(&letter.destination),
        format!("{}/{}", letter.attempts, letter.max_attempts),
        shown(&letter.error_type),
        last_error,
        updated_at,
    ]
}
