//! The `outbox-host` binary, built inside the tests crate so its tests can run it as a process
//! (Cargo gives a package's tests the paths of that package's binaries only).

use clap::Parser;
use outbox_host::cli::{self, Cli};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()).await)
}
