//! `outbox-host plugin test` and `outbox-host plugin inspect`: the mock envelope runner on the
//! command line. Exit codes: 0 when every call succeeded, 1 for any other outcome, 2 when the plugin,
//! its manifest or the envelope cannot be loaded (clap exits with 2 on usage errors too).
//! `plugin list` asks a running host (see `plugin_list`).

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::config::path_is_within;
use crate::plugins::mock::{
    EnvelopeOverride, MockHttpHeader, MockHttpResponse, MockKafkaResponse, MockOptions, MockRunner,
    envelope_json,
};
use crate::plugins::{EngineConfig, PluginEngine};

pub const EXIT_SUCCESS: u8 = 0;
pub const EXIT_OTHER_OUTCOME: u8 = 1;
pub const EXIT_LOAD_OR_USAGE: u8 = 2;

#[derive(Debug, Args)]
pub struct PluginArgs {
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Run a plugin on a mock envelope, sandboxed as the host runs it, and print what happened.
    Test(TestArgs),
    /// Print a plugin's world, imports, destination type and claim scope.
    Inspect(InspectArgs),
    /// List the plugins a running host has loaded, with their state and last error.
    List(super::admin_page::AdminArgs),
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The component, e.g. plugins/noop.wasm.
    pub wasm: PathBuf,
    /// The manifest to enforce [default: the <stem>.toml beside the component, if any].
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// A JSON file overriding fields of the mock envelope (snake_case WIT names; `payload` any
    /// JSON value, `headers` an object).
    #[arg(long, value_name = "FILE")]
    pub envelope: Option<PathBuf>,
    /// Answer every allowed HTTP request with this status (and body) instead of sending it.
    #[arg(long, value_name = "STATUS[:BODY]")]
    pub http_response: Option<MockHttpResponse>,
    /// A header of that answer, e.g. `Retry-After: 2`; repeat for more.
    #[arg(long, value_name = "NAME: VALUE", requires = "http_response")]
    pub http_header: Vec<MockHttpHeader>,
    /// Answer every Kafka record to a granted topic with this failure instead of success.
    #[arg(long, value_name = "retryable|permanent")]
    pub kafka_response: Option<MockKafkaResponse>,
    /// How many times to publish the envelope.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the envelope the plugin was called with, every default included, in the form
    /// `--envelope` reads.
    #[arg(long)]
    pub show_envelope: bool,
    /// Cache compiled components in this directory (created private to the user; never inside the
    /// plugin's own directory), so a second run does not recompile [default: no cache].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The component, e.g. plugins/noop.wasm.
    pub wasm: PathBuf,
    /// The manifest to load it with [default: the <stem>.toml beside the component, if any].
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Cache compiled components in this directory (created private to the user; never inside the
    /// plugin's own directory), so a second run does not recompile [default: no cache].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// Runs `plugin test` or `plugin inspect`, printing the report to `out` and a load or usage error to
/// `err`; returns the process exit code.
pub async fn run(args: PluginArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let result = match args.command {
        PluginCommand::Test(args) => test(args, out).await,
        PluginCommand::Inspect(args) => inspect(args, out).await,
        PluginCommand::List(args) => return super::plugin_list::run(args, out, err).await,
    };
    result.unwrap_or_else(|message| {
        let _ = writeln!(err, "error: {message}");
        EXIT_LOAD_OR_USAGE
    })
}

async fn test(args: TestArgs, out: &mut dyn Write) -> Result<u8, String> {
    let envelope_override = match &args.envelope {
        Some(path) => Some(read_envelope(path)?),
        None => None,
    };
    let options = MockOptions {
        manifest: args.manifest,
        http_response: args.http_response,
        http_headers: args.http_header,
        kafka_response: args.kafka_response,
    };
    let runner = load(&args.wasm, args.cache_dir, options).await?;
    let mut envelope = runner.mock_envelope();
    if let Some(envelope_override) = envelope_override {
        envelope = envelope_override.apply(envelope);
    }
    let mut report = runner.run(&envelope, args.repeat).await;
    if args.show_envelope {
        report.envelope = Some(envelope_json(&envelope));
    }
    print(out, args.json, &report, || report.to_json())?;
    Ok(if report.succeeded() {
        EXIT_SUCCESS
    } else {
        EXIT_OTHER_OUTCOME
    })
}

async fn inspect(args: InspectArgs, out: &mut dyn Write) -> Result<u8, String> {
    let options = MockOptions {
        manifest: args.manifest,
        ..MockOptions::default()
    };
    let report = load(&args.wasm, args.cache_dir, options).await?.inspect();
    print(out, args.json, &report, || report.to_json())?;
    Ok(EXIT_SUCCESS)
}

fn print(
    out: &mut dyn Write,
    json: bool,
    report: &dyn Display,
    to_json: impl FnOnce() -> Value,
) -> Result<(), String> {
    let printed = if json {
        writeln!(out, "{:#}", to_json())
    } else {
        write!(out, "{report}")
    };
    printed.map_err(|error| format!("cannot print the report: {error}"))
}

async fn load(
    wasm: &Path,
    cache_dir: Option<PathBuf>,
    options: MockOptions,
) -> Result<MockRunner, String> {
    let plugin_dir = wasm.parent().filter(|dir| !dir.as_os_str().is_empty());
    if let Some(cache_dir) = &cache_dir
        && path_is_within(cache_dir, plugin_dir.unwrap_or(Path::new(".")))
    {
        return Err(
            "--cache-dir must not be inside the plugin's directory: the cache holds native \
                    code, which whoever can write plugins there must not be able to plant"
                .to_owned(),
        );
    }
    let engine = PluginEngine::new(EngineConfig {
        cache_dir,
        ..EngineConfig::default()
    })
    .map_err(|error| error.to_string())?;
    MockRunner::load(&engine, wasm, options)
        .await
        .map_err(|error| format!("{}: {error}", wasm.display()))
}

fn read_envelope(path: &Path) -> Result<EnvelopeOverride, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    EnvelopeOverride::from_json(&text)
        .map_err(|error| format!("envelope {}: {error}", path.display()))
}
