//! The `outbox-host` binary: parses the command line and hands over to the library.

use clap::Parser;
use outbox_host::cli::{self, Cli};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()).await)
}
