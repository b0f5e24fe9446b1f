//! `outbox-host plugin list`: the `/plugins` page of a running host, as a table. The host is named
//! by its admin address (`--admin 127.0.0.1:9464`, as `admin.listen` writes it, or an `http://` URL)
//! or by its configuration (`--config FILE`: `admin.listen`, and `admin.token` when the host requires
//! one). Exit codes: 0 when listed, 1 when the admin endpoint cannot be reached or answers anything but
//! a plugin list, 2 when the address or the configuration is not usable.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::Args;
use http::StatusCode;

use super::{EXIT_FAILURE, EXIT_SUCCESS, EXIT_USAGE, load_config};
use crate::admin::client::{AdminClientError, AdminRequest};
use crate::admin::{PluginStatusJson, PluginsPage};

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The host's admin address, as `admin.listen` writes it (127.0.0.1:9464), or an http:// URL
    /// [default: `admin.listen` of the configuration].
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// The host's configuration file: its `admin.listen`, and its `admin.token` when set
    /// (OUTBOX_ADMIN_TOKEN also works).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

const HEADER: [&str; 8] = [
    "FILE",
    "HASH",
    "WORLD",
    "TYPE",
    "SCOPE",
    "STATE",
    "LOADED AT",
    "LAST ERROR",
];

/// Enough of a SHA-256 to tell versions apart at a glance.
const SHORT_HASH_LEN: usize = 12;

pub async fn run(args: ListArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let Some(config) = load_config(args.config, err) else {
        return EXIT_USAGE;
    };
    let admin = args
        .admin
        .unwrap_or_else(|| config.admin.listen.to_string());
    let url = format!("{}/plugins", base_url(&admin).trim_end_matches('/'));
    let request = AdminRequest::get(&url).token(config.admin.token);
    let body = match request.ok().await {
        Ok(body) => body,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            let hint = match &error {
                AdminClientError::InvalidUrl { .. } => return EXIT_USAGE,
                AdminClientError::Unreachable { .. } => {
                    "no host answers there: start one with `outbox-host run --config FILE`, or name \
                     a running host with --admin HOST:PORT (its admin.listen) or --config FILE"
                }
                AdminClientError::Status {
                    status: StatusCode::UNAUTHORIZED,
                    ..
                } => {
                    "the host requires its admin.token: pass its --config FILE, or set \
                     OUTBOX_ADMIN_TOKEN"
                }
                AdminClientError::Status { .. } => "is that address the host's admin.listen?",
            };
            let _ = writeln!(err, "{hint}");
            return EXIT_FAILURE;
        }
    };
    let page: PluginsPage = match serde_json::from_slice(&body) {
        Ok(page) => page,
        Err(error) => {
            let _ = writeln!(
                err,
                "error: {url} did not answer with a plugin list: {error}"
            );
            return EXIT_FAILURE;
        }
    };
    let printed = if page.plugins.is_empty() {
        writeln!(out, "no plugin files in the plugins directory")
    } else {
        write!(out, "{}", table(&page.plugins))
    };
    match printed {
        Ok(()) => EXIT_SUCCESS,
        Err(error) => {
            let _ = writeln!(err, "error: cannot print the plugin list: {error}");
            EXIT_FAILURE
        }
    }
}

/// `admin.listen` (`127.0.0.1:9464`) as a URL; a wildcard address (`0.0.0.0`, `[::]`) is reached
/// on loopback. Anything with a scheme is taken as a URL as it is.
fn base_url(admin: &str) -> String {
    if admin.contains("://") {
        return admin.to_owned();
    }
    match admin.parse::<SocketAddr>() {
        Ok(mut addr) => {
            if addr.ip().is_unspecified() {
                addr.set_ip(match addr.ip() {
                    IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                });
            }
            format!("http://{addr}")
        }
        Err(_) => format!("http://{admin}"),
    }
}

/// One line per plugin.
fn table(plugins: &[PluginStatusJson]) -> String {
    super::table::render(HEADER, plugins.iter().map(row))
}

fn row(plugin: &PluginStatusJson) -> [String; 8] {
    let shown = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
    let file = std::path::Path::new(&plugin.file).file_name().map_or_else(
        || plugin.file.clone(),
        |name| name.to_string_lossy().into_owned(),
    );
    let hash = plugin.content_hash.as_deref().map_or_else(
        || "-".to_owned(),
        |hash| hash.chars().take(SHORT_HASH_LEN).collect(),
    );
    let loaded_at = DateTime::parse_from_rfc3339(&plugin.loaded_at).map_or_else(
        |_| plugin.loaded_at.clone(),
        |at| {
            at.with_timezone(&Utc)
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string()
        },
    );
    // A compile error spans several lines; a table row must not.
    let last_error = plugin
        .last_error
        .as_deref()
        .map_or_else(|| "-".to_owned(), super::table::one_line);
    [
        file,
        hash,
        shown(&plugin.world),
        shown(&plugin.destination_type),
        shown(&plugin.claim_scope),
        match plugin.compiling_since {
            Some(_) if plugin.state != "compiling" => {
                format!("{} (compiling a new version)", plugin.state)
            }
            _ => plugin.state.clone(),
        },
        loaded_at,
        last_error,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(file: &str, state: &str, last_error: Option<&str>) -> PluginStatusJson {
        PluginStatusJson {
            file: format!("/srv/plugins/{file}"),
            content_hash: Some("0123456789abcdef0123456789abcdef".to_owned()),
            world: Some("destination-handler".to_owned()),
            destination_type: Some("WEBHOOK".to_owned()),
            claim_scope: Some("destinations (2)".to_owned()),
            state: state.to_owned(),
            last_error: last_error.map(str::to_owned),
            loaded_at: "2025-03-04T05:06:07.123456789+00:00".to_owned(),
            compiling_since: None,
        }
    }

    #[test]
    fn an_admin_address_becomes_a_url_reached_on_loopback_when_it_is_a_wildcard() {
        assert_eq!(base_url("127.0.0.1:9464"), "http://127.0.0.1:9464");
        assert_eq!(base_url("0.0.0.0:9464"), "http://127.0.0.1:9464");
        assert_eq!(base_url("[::]:9464"), "http://[::1]:9464");
        assert_eq!(base_url("localhost:9464"), "http://localhost:9464");
        assert_eq!(base_url("http://10.0.0.5:9464/"), "http://10.0.0.5:9464/");
    }

    #[test]
    fn each_plugin_is_one_row_with_its_file_name_short_hash_and_state() {
        let text = table(&[status("webhook.wasm", "loaded", None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let cells: Vec<&str> = lines[1]
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .collect();
        assert_eq!(
            cells,
            [
                "webhook.wasm",
                "0123456789ab",
                "destination-handler",
                "WEBHOOK",
                "destinations (2)",
                "loaded",
                "2025-03-04 05:06:07 UTC",
                "-"
            ]
        );
    }

    #[test]
    fn a_plugin_compiling_a_new_version_says_so_beside_the_state_of_the_one_serving() {
        let mut serving = status("router.wasm", "loaded", None);
        serving.compiling_since = Some("2025-03-04T05:06:08+00:00".to_owned());
        let mut new = status("chat.wasm", "compiling", None);
        new.compiling_since = Some("2025-03-04T05:06:08+00:00".to_owned());
        let text = table(&[new, serving]);
        assert!(text.contains("  compiling  "), "{text}");
        assert!(text.contains("loaded (compiling a new version)"), "{text}");
    }

    #[test]
    fn a_multi_line_error_stays_on_its_row() {
        let text = table(&[status(
            "bad.wasm",
            "failed",
            Some("cannot compile:\n\nCaused by:\n  bad magic"),
        )]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.ends_with("cannot compile: Caused by: bad magic\n"),
            "{text}"
        );
    }
}
