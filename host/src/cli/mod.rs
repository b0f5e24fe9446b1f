//! The `outbox-host` command line. Each subcommand parses into its own arguments and runs from the
//! library; every path returns the process exit code: 0 done, 1 failed while running (or, for
//! `plugin test`, an outcome other than success), 2 bad configuration, usage or plugin load error.

pub mod admin_page;
mod destinations;
pub mod dlq;
pub mod plugin;
pub mod plugin_list;
mod table;

use crate::config::{Config, LogFormat};
use crate::database::{self, SchemaName};
use crate::demo::{self, DemoOptions};
use crate::log_output;
use crate::plugins::watcher;
use crate::service::{Resources, RunningService};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const EXIT_SUCCESS: u8 = 0;
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "outbox-host",
    version,
    about = "Transactional-outbox relay for PostgreSQL with WebAssembly destination handlers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (into `database.schema` when set).
    Migrate(DatabaseArgs),
    /// Run the relay service until SIGTERM or SIGINT.
    Run {
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List, redrive and purge dead letters.
    Dlq(dlq::DlqArgs),
    /// Test, inspect and list plugins.
    Plugin(plugin::PluginArgs),
    /// List the destinations a running host tracks: circuit breakers, failures, rows held back.
    Destinations(admin_page::AdminArgs),
    /// Show the host at work: reset the `outbox_demo` schema, run the host with the example plugins
    /// and a local webhook receiver, publish sample rows and report how they were delivered.
    Demo {
        /// Sample rows to publish.
        #[arg(long, value_name = "N", default_value_t = demo::DEFAULT_ROWS, value_parser = clap::value_parser!(u32).range(1..))]
        rows: u32,
        /// Where the built example plugins are (scripts/build-plugins puts them in ./plugins).
        #[arg(long, value_name = "DIR", default_value = "./plugins")]
        plugins: PathBuf,
        /// Default: DATABASE_URL, else the local `test` database.
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
    },
}

/// The database to work on, as `migrate` and `dlq` take it.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Default: the configuration's `database.url`, else DATABASE_URL, else the local `test` database.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

impl DatabaseArgs {
    /// The configuration with `--database-url` applied, or `None` after the error on `err`.
    fn load(self, err: &mut dyn Write) -> Option<Config> {
        let mut config = load_config(self.config, err)?;
        if let Some(url) = self.database_url {
            config.database.url = Some(url);
        }
        Some(config)
    }
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration (file, environment, defaults) with secrets masked.
    Print {
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// At exit, how long the last log lines may take to be written (a stalled log pipe never holds
/// the exit longer).
const LOG_FLUSH_AT_EXIT: Duration = Duration::from_secs(1);

/// Runs the parsed command line, printing reports to `out` and errors to `err`.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let code = run_command(cli, out, err).await;
    log_output::flush_stderr(LOG_FLUSH_AT_EXIT);
    code
}

async fn run_command(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    match cli.command {
        Command::Migrate(database) => {
            let Some(config) = database.load(err) else {
                return EXIT_USAGE;
            };
            init_logging(&config);
            finish(migrate(&config).await, err)
        }
        Command::Run { config: file } => {
            let Some(config) = load_config(file.clone(), err) else {
                return EXIT_USAGE;
            };
            init_logging(&config);
            finish(serve(config, file).await, err)
        }
        Command::Config(ConfigCommand::Print { config }) => {
            let Some(config) = load_config(config, err) else {
                return EXIT_USAGE;
            };
            let _ = write!(out, "{}", config.to_masked_toml());
            EXIT_SUCCESS
        }
        Command::Dlq(args) => dlq::run(args, out, err).await,
        Command::Plugin(args) => {
            init_logging(&Config::default());
            plugin::run(args, out, err).await
        }
        Command::Destinations(args) => destinations::run(args, out, err).await,
        Command::Demo {
            rows,
            plugins,
            database_url,
        } => {
            let Some(mut config) = load_config(None, err) else {
                return EXIT_USAGE;
            };
            // Quiet enough not to fight the progress bar; RUST_LOG still wins.
            config.log.level = "warn".to_owned();
            init_logging(&config);
            let options = DemoOptions {
                database_url: database_url.unwrap_or_else(|| config.database_url().to_owned()),
                schema: SchemaName::parse(demo::SCHEMA).expect("the demo's schema name is valid"),
                plugins,
                cache_dir: config.plugins.cache_dir(),
                rows,
                progress: true,
            };
            finish(run_demo(&options, out).await, err)
        }
    }
}

/// The configuration, or `None` after one line on `err` naming the offending key.
fn load_config(file: Option<PathBuf>, err: &mut dyn Write) -> Option<Config> {
    Config::load(file.as_deref())
        .map_err(|error| writeln!(err, "error: {error}"))
        .ok()
}

fn finish(result: anyhow::Result<()>, err: &mut dyn Write) -> u8 {
    match result {
        Ok(()) => EXIT_SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "error: {}", describe(&error));
            EXIT_FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text the message already carries
/// (library errors often include their source in their own message).
fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

async fn migrate(config: &Config) -> anyhow::Result<()> {
    let options = database::connect_options(config.database_url())?;
    let schema = config.database.schema.as_ref();
    database::migrate(&options, schema).await?;
    tracing::info!(
        schema = schema.map(|s| s.as_str()).unwrap_or("(default)"),
        "migrations applied"
    );
    Ok(())
}

async fn run_demo(options: &DemoOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let summary = demo::run(options, out).await?;
    anyhow::ensure!(
        summary.succeeded(),
        "the demo did not finish cleanly; the summary above says what went wrong"
    );
    Ok(())
}

async fn serve(config: Config, file: Option<PathBuf>) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let service = crate::service::start(&config, Resources::default(), shutdown.clone()).await?;
    log_summary(&config, file.as_deref(), &service);
    tokio::spawn(async move {
        wait_for_termination().await;
        shutdown.cancel();
        tracing::info!("stopping: no new claims; letting publishes in flight finish");
    });
    service.wait().await;
    tracing::info!("stopped");
    Ok(())
}

/// One line an operator reads to know what started: version, configuration file, strategy, schema,
/// plugins and where the admin listener is.
fn log_summary(config: &Config, file: Option<&std::path::Path>, service: &RunningService) {
    let plugins = watcher::summary(&service.plugins().borrow());
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        config = %file.map_or_else(|| "(none: defaults and environment)".into(), |path| path.display().to_string()),
        strategy = config.relay.strategy.as_str(),
        schema = config.database.schema.as_ref().map_or("(default)", |s| s.as_str()),
        plugins_dir = %config.plugins.dir.display(),
        plugins = %plugins,
        admin = %service.admin_addr(),
        node_id = %config.relay.node_id(),
        "outbox-host started"
    );
}

/// SIGTERM or SIGINT.
async fn wait_for_termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM can be handled");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Human or JSON log lines on stderr, through [`log_output`] so that a log pipe that fails or
/// stalls never touches delivery or shutdown; coloured only when stderr is a terminal (and
/// `NO_COLOR` is unset); `RUST_LOG` overrides `log.level`. Only the first call in a process takes
/// effect.
pub fn init_logging(config: &Config) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::LevelFilter;
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log.level));
    // PostgreSQL's notices (`relation "_sqlx_migrations" already exists, skipping` on every start)
    // reach sqlx's log at INFO: shown only to a debug log.
    if filter
        .max_level_hint()
        .is_none_or(|level| level < LevelFilter::DEBUG)
    {
        filter = filter.add_directive(
            "sqlx::postgres::notice=warn"
                .parse()
                .expect("a valid directive"),
        );
    }
    let colours = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(log_output::stderr())
        .log_internal_errors(false);
    let _ = match config.log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
