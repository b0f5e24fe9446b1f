//! The command line of `outbox-host`. Each subcommand parses into its own `Args` type and runs from
//! its own module, returning the process exit code.

pub mod plugin;

use std::io::Write;

use clap::{Parser, Subcommand};

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
    /// Test and inspect plugins offline.
    Plugin(plugin::PluginArgs),
}

/// Runs the parsed command line, printing its report to `out` and its errors to `err`; returns the
/// process exit code.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    match cli.command {
        Command::Plugin(args) => plugin::run(args, out, err).await,
    }
}
