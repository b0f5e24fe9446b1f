//! The `outbox-host` binary: parses the command line, sets up logging, and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use outbox_host::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    ExitCode::from(cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()).await)
}
