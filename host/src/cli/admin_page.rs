//! Reading one JSON page of a running host's admin endpoint, as `plugin list` and `destinations`
//! do. The host is named by its admin address (`--admin 127.0.0.1:9464`, as `admin.listen` writes
//! it, or an `http://` URL) or by its configuration (`--config FILE`: `admin.listen`, and
//! `admin.token` when the host requires one).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use clap::Args;
use http::StatusCode;
use serde::de::DeserializeOwned;

use super::{EXIT_FAILURE, EXIT_USAGE, load_config};
use crate::admin::client::{AdminClientError, AdminRequest};

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The host's admin address, as `admin.listen` writes it (127.0.0.1:9464), or an http:// URL
    /// [default: `admin.listen` of the configuration].
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// The host's configuration file: its `admin.listen`, and its `admin.token` when set
    /// (OUTBOX_ADMIN_TOKEN also works).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The page at `path`, or the exit code after saying on `err` what went wrong: 1 when the admin
/// endpoint cannot be reached or answers anything but `what`, 2 when the address or the
/// configuration is not usable.
pub async fn fetch<T: DeserializeOwned>(
    args: AdminArgs,
    path: &str,
    what: &str,
    err: &mut dyn Write,
) -> Result<T, u8> {
    let Some(config) = load_config(args.config, err) else {
        return Err(EXIT_USAGE);
    };
    let admin = args
        .admin
        .unwrap_or_else(|| config.admin.listen.to_string());
    let url = format!("{}{path}", base_url(&admin).trim_end_matches('/'));
    let request = AdminRequest::get(&url).token(config.admin.token);
    let body = match request.ok().await {
        Ok(body) => body,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            let hint = match &error {
                AdminClientError::InvalidUrl { .. } => return Err(EXIT_USAGE),
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
            return Err(EXIT_FAILURE);
        }
    };
    serde_json::from_slice(&body).map_err(|error| {
        let _ = writeln!(err, "error: {url} did not answer with {what}: {error}");
        EXIT_FAILURE
    })
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

#[cfg(test)]
mod tests {
    use super::base_url;

    #[test]
    fn an_admin_address_becomes_a_url_reached_on_loopback_when_it_is_a_wildcard() {
        assert_eq!(base_url("127.0.0.1:9464"), "http://127.0.0.1:9464");
        assert_eq!(base_url("0.0.0.0:9464"), "http://127.0.0.1:9464");
        assert_eq!(base_url("[::]:9464"), "http://[::1]:9464");
        assert_eq!(base_url("localhost:9464"), "http://localhost:9464");
        assert_eq!(base_url("http://10.0.0.5:9464/"), "http://10.0.0.5:9464/");
    }
}
