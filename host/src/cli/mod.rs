//! The `outbox-host` command line: parses arguments, loads configuration, and hands off to the library.
//! Exit codes: 0 done, 1 failed while running, 2 bad configuration or usage.

use crate::config::{Config, ConfigError};
use crate::database;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "outbox-host", version, about = "Transactional-outbox relay for PostgreSQL with WebAssembly destination plugins")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the database migrations (into `database.schema` when set).
    Migrate {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Default: the configuration's `database.url`, else DATABASE_URL, else the local `test` database.
        #[arg(long)]
        database_url: Option<String>,
    },
    /// Run the relay service until SIGTERM or SIGINT.
    Run {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration (file, environment, defaults) with secrets masked.
    Print {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Exit code for a configuration or usage error.
pub const EXIT_USAGE: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate { config, database_url } => with_config(config, |mut config| {
            if let Some(url) = database_url {
                config.database.url = Some(url);
            }
            init_logging(&config);
            block_on(migrate(&config))
        }),
        Command::Run { config } => with_config(config, |config| {
            init_logging(&config);
            block_on(run(config))
        }),
        Command::Config(ConfigCommand::Print { config }) => with_config(config, |config| {
            print!("{}", config.to_masked_toml());
            ExitCode::SUCCESS
        }),
    }
}

/// Loads the configuration, or ends with exit code 2 and one line naming the offending key.
fn with_config(file: Option<PathBuf>, then: impl FnOnce(Config) -> ExitCode) -> ExitCode {
    match Config::load(file.as_deref()) {
        Ok(config) => then(config),
        Err(error) => usage_error(&error),
    }
}

fn usage_error(error: &ConfigError) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(EXIT_USAGE)
}

fn block_on(work: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(config: &Config) -> anyhow::Result<()> {
    let options = database::connect_options(config.database_url())?;
    let schema = config.schema();
    database::migrate(&options, schema.as_ref()).await?;
    tracing::info!(schema = schema.as_ref().map(|s| s.as_str()).unwrap_or("(default)"), "migrations applied");
    Ok(())
}

async fn run(config: Config) -> anyhow::Result<()> {
    let service = crate::service::start(&config).await?;
    let shutdown = service.shutdown_token();
    tokio::spawn(async move {
        wait_for_termination().await;
        tracing::info!("stopping: no new claims; letting publishes in flight finish");
        shutdown.cancel();
    });
    service.wait().await;
    tracing::info!("stopped");
    Ok(())
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

/// Human or JSON log lines on stderr; `RUST_LOG` overrides `log.level`.
pub fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match config.log.format {
        crate::config::LogFormat::Human => builder.try_init(),
        crate::config::LogFormat::Json => builder.json().try_init(),
    };
}
