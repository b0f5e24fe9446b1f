//! `wasi:http` outgoing requests, checked against the manifest's `http.allowed_hosts`.
//!
//! The check runs in our own [`WasiHttpHooks::send_request`], the one door every outgoing request of
//! a guest passes through (the default hook of wasmtime-wasi-http sends anywhere). A request whose
//! scheme, host and port match no pattern, or whose authority carries user info (`user@host`), fails
//! with `HTTP-request-denied` and no socket is opened.
//! The host sends exactly the request it was given and never follows a redirect: a 3xx reaches the
//! guest as a response, and a request the guest then makes to the new location passes the same check.
//! `outbox:relay/http` ([`exchange`]) sends through the same hook, in one call per exchange.
//! Allowed requests go out over the plugin's own keep-alive [`connections`].

mod connections;
mod exchange;

pub use connections::Connections;

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use http::Uri;
use http::uri::Scheme;
use toml::Table;
use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use crate::plugins::bindings::Level;
use crate::plugins::bindings::handler::outbox::relay::http as relay_http;
use crate::plugins::capabilities::log::{LogSource, PluginLog};
use crate::plugins::capabilities::{Capability, Section};
use crate::plugins::loader::World;
use crate::plugins::manifest::{ManifestError, pattern_list};
use crate::plugins::sandbox::StoreState;

/// `[http]`: `allowed_hosts`, the origins a handler may send requests to. Observers have no
/// `wasi:http`.
pub(crate) enum Http {}

impl Capability for Http {
    const SECTION: Option<Section<Vec<HostPattern>>> = Some(Section {
        name: "http",
        read: read_section,
    });
    const WORLDS: &'static [World] = &[World::DestinationHandler];

    type Grant = Vec<HostPattern>;
    type Services = HttpTransport;
    type PluginState = HttpGate;
    type InstanceState = HttpState;

    fn plugin_state(
        allowed: &Vec<HostPattern>,
        transport: &HttpTransport,
        log: &PluginLog,
    ) -> HttpGate {
        HttpGate::new(log.clone(), allowed.clone(), transport.sender_for_plugin())
    }

    fn instance_state(gate: &HttpGate) -> HttpState {
        HttpState {
            gate: gate.clone(),
            ctx: WasiHttpCtx::new(),
        }
    }

    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
        relay_http::add_to_linker::<StoreState, HasSelf<HttpState>>(linker, |state| {
            &mut state.capabilities.http
        })
    }
}

fn read_section(entries: &Table) -> Result<Vec<HostPattern>, ManifestError> {
    let mut allowed = Vec::new();
    for (key, value) in entries {
        match key.as_str() {
            "allowed_hosts" => {
                allowed = pattern_list("http.allowed_hosts", value, HostPattern::parse)?
            }
            _ => return Err(ManifestError::UnknownKey(format!("http.{key}"))),
        }
    }
    Ok(allowed)
}

/// Where the requests a plugin is allowed to make go: the network, over connections of each
/// plugin's own, unless the mock runner says otherwise.
#[derive(Clone, Default)]
pub(crate) struct HttpTransport(pub(crate) Option<Arc<dyn HttpSender>>);

impl HttpTransport {
    fn sender_for_plugin(&self) -> Arc<dyn HttpSender> {
        match &self.0 {
            Some(sender) => sender.clone(),
            None => Arc::new(Connections::default()),
        }
    }
}

/// The HTTP state of one instance: its gate and its `wasi:http` context.
pub(crate) struct HttpState {
    gate: HttpGate,
    ctx: WasiHttpCtx,
}

/// What `wasi:http`'s hook yields: the response, and a future that drives the connection to its end.
pub type SendResult = Result<(http::Response<WasiBody>, IoFuture), HttpError>;
pub type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
pub type SendFuture = Box<dyn Future<Output = SendResult> + Send>;
/// What an [`HttpSender`] yields: the response; each sender drives its connections itself.
pub type ResponseFuture = Box<dyn Future<Output = Result<http::Response<WasiBody>, HttpError>> + Send>;

/// Where the requests a plugin is allowed to make go: the network, or the mock envelope runner.
pub trait HttpSender: Send + Sync {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> ResponseFuture;

    /// Told of each request the allow-list refused (the mock runner lists them; the host does not
    /// keep them: the URL may be a claim-scope target).
    fn denied(&self, _method: &http::Method, _uri: &Uri, _denial: Denial) {}
}

/// One entry of `http.allowed_hosts`: `scheme://host[:port]`, where a host of `*.example.com` matches
/// every subdomain of `example.com` (not `example.com` itself) and a missing port is the scheme's
/// default (80 for http, 443 for https). A wildcard stands only before a domain of at least two
/// labels whose top-level label starts with a letter: `*.com` would grant every .com host, and
/// `*.0.0.1` would match `127.0.0.1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    https: bool,
    host: HostMatch,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    /// The part after `*.`.
    Subdomains(String),
}

/// Why an `http.allowed_hosts` entry was rejected. The messages follow the entry's key and never
/// quote the entry: it may carry credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostPatternError {
    #[error("is not a `scheme://host[:port]` origin (no path, query or fragment)")]
    NotAnOrigin,
    #[error("must use the scheme http or https")]
    Scheme,
    #[error(
        "must not carry user info (`user:password@`): credentials do not belong in an allow-list"
    )]
    UserInfo,
    #[error("has a port that is not a number from 1 to 65535")]
    Port,
    #[error("has a host that is not a host name or a bracketed IPv6 address")]
    Host,
    #[error(
        "may use a wildcard only as a leading `*.` before a domain of at least two labels \
         (`*.example.com`), never on an IP address"
    )]
    Wildcard,
}

impl HostPattern {
    pub fn parse(pattern: &str) -> Result<Self, HostPatternError> {
        let (scheme, authority) = pattern
            .split_once("://")
            .ok_or(HostPatternError::NotAnOrigin)?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(HostPatternError::Scheme),
        };
        if authority.contains('@') {
            return Err(HostPatternError::UserInfo);
        }
        let (host, port) = split_host_port(authority).ok_or(HostPatternError::NotAnOrigin)?;
        let host = normalize_host(host);
        let host = match host.strip_prefix("*.") {
            Some(domain) if is_wildcard_domain(domain) => HostMatch::Subdomains(domain.to_owned()),
            Some(_) => return Err(HostPatternError::Wildcard),
            None if host.contains('*') => return Err(HostPatternError::Wildcard),
            None if is_host_name(&host) || is_ipv6_literal(&host) => HostMatch::Exact(host.clone()),
            None => return Err(HostPatternError::Host),
        };
        let port = match port {
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or(HostPatternError::Port)?,
            None => default_port(https),
        };
        Ok(Self { https, host, port })
    }

    fn matches(&self, https: bool, host: &str, port: u16) -> bool {
        self.https == https
            && self.port == port
            && match &self.host {
                HostMatch::Exact(name) => host == name,
                HostMatch::Subdomains(domain) => host
                    .strip_suffix(domain.as_str())
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        let host = match &self.host {
            HostMatch::Exact(name) => name.clone(),
            HostMatch::Subdomains(domain) => format!("*.{domain}"),
        };
        write!(f, "{scheme}://{host}:{}", self.port)
    }
}

fn default_port(https: bool) -> u16 {
    if https { 443 } else { 80 }
}

/// Splits `host[:port]`, keeping an IPv6 literal's brackets; `None` for anything with a path,
/// query or fragment, or an empty host.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.is_empty() || authority.contains(['/', '?', '#']) {
        return None;
    }
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            _ => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    match authority.split_once(':') {
        Some((host, port)) if !host.is_empty() => Some((host, Some(port))),
        Some(_) => None,
        None => Some((authority, None)),
    }
}

/// Host names compare without case and without a trailing root dot.
fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// A domain a wildcard may stand before: a host name of at least two labels whose last label (the
/// top-level domain) starts with a letter, as every top-level domain does. So never a lone
/// top-level domain, and never an IPv4 address or a part of one (`0.0.1`, `0x7f.1`).
fn is_wildcard_domain(domain: &str) -> bool {
    is_host_name(domain)
        && domain.split('.').count() >= 2
        && domain
            .rsplit('.')
            .next()
            .is_some_and(|top| top.starts_with(|c: char| c.is_ascii_alphabetic()))
}

fn is_ipv6_literal(host: &str) -> bool {
    host.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|addr| addr.parse::<std::net::Ipv6Addr>().is_ok())
}

/// The HTTP capability of one plugin instance: its allow-list and where allowed requests go.
#[derive(Clone)]
pub struct HttpGate {
    log: PluginLog,
    allowed: Arc<[HostPattern]>,
    sender: Arc<dyn HttpSender>,
}

impl HttpGate {
    /// Denials are written to the plugin's `log`, so a plugin author sees them in the mock runner's
    /// report too.
    pub fn new(log: PluginLog, allowed: Vec<HostPattern>, sender: Arc<dyn HttpSender>) -> Self {
        Self {
            log,
            allowed: allowed.into(),
            sender,
        }
    }

    /// Whether a request to `uri` may leave the host, or why not. Only http and https with a host
    /// and no user info are considered.
    pub fn check(&self, uri: &Uri) -> Result<(), Denial> {
        // `Uri::host` hides user info, but the connection and the Host header would use it.
        if uri
            .authority()
            .is_some_and(|authority| authority.as_str().contains('@'))
        {
            return Err(Denial::UserInfo);
        }
        let https = match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTPS => true,
            Some(scheme) if *scheme == Scheme::HTTP => false,
            _ => return Err(Denial::NotAllowed),
        };
        let host = uri.host().map(normalize_host).ok_or(Denial::NotAllowed)?;
        let port = uri.port_u16().unwrap_or(default_port(https));
        self.allowed
            .iter()
            .any(|pattern| pattern.matches(https, &host, port))
            .then_some(())
            .ok_or(Denial::NotAllowed)
    }
}

/// Why an outgoing request was refused; written to the plugin's log without the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("no entry of http.allowed_hosts matches")]
    NotAllowed,
    #[error("the URL carries user info, which is never sent")]
    UserInfo,
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _request_errors: IoFuture,
    ) -> SendFuture {
        let denial = match self.check(request.uri()) {
            Ok(()) => {
                let response = Pin::from(self.sender.send(request, options));
                return Box::new(async move {
                    Ok((response.await?, Box::new(async { Ok(()) }) as IoFuture))
                });
            }
            Err(denial) => denial,
        };
        self.sender.denied(request.method(), request.uri(), denial);
        // The URL is the plugin's destination, a claim-scope target: it is not logged.
        let message = format!("outgoing HTTP request denied: {denial}");
        self.log.write(Level::Warn, LogSource::Host, message);
        Box::new(async { Err(HttpError::HttpRequestDenied) })
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let http = &mut self.capabilities.http;
        WasiHttpCtxView {
            ctx: &mut http.ctx,
            table: &mut self.table,
            hooks: &mut http.gate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::capabilities::log::LogSink;

    fn gate(patterns: &[&str]) -> HttpGate {
        let allowed = patterns
            .iter()
            .map(|p| HostPattern::parse(p).unwrap())
            .collect();
        HttpGate::new(
            PluginLog::new("test".into(), LogSink::Tracing, &Default::default()),
            allowed,
            Arc::new(Connections::default()),
        )
    }

    fn allows(patterns: &[&str], url: &str) -> bool {
        gate(patterns).check(&url.parse().unwrap()).is_ok()
    }

    #[test]
    fn an_empty_allow_list_denies_everything() {
        assert!(!allows(&[], "https://example.com/"));
    }

    #[test]
    fn a_pattern_without_port_allows_only_the_default_port_of_its_scheme() {
        assert!(allows(
            &["https://hooks.example.com"],
            "https://hooks.example.com/x"
        ));
        assert!(allows(
            &["https://hooks.example.com"],
            "https://hooks.example.com:443/x"
        ));
        assert!(!allows(
            &["https://hooks.example.com"],
            "https://hooks.example.com:8443/x"
        ));
        assert!(!allows(
            &["https://hooks.example.com"],
            "http://hooks.example.com/x"
        ));
    }

    #[test]
    fn a_pattern_with_port_allows_that_port_only() {
        assert!(allows(
            &["http://127.0.0.1:8080"],
            "http://127.0.0.1:8080/hook"
        ));
        assert!(!allows(
            &["http://127.0.0.1:8080"],
            "http://127.0.0.1:8081/hook"
        ));
        assert!(!allows(&["http://127.0.0.1:8080"], "http://127.0.0.1/hook"));
    }

    #[test]
    fn a_wildcard_allows_subdomains_but_not_the_domain_itself() {
        let pattern = ["https://*.example.com"];
        assert!(allows(&pattern, "https://a.example.com/"));
        assert!(allows(&pattern, "https://a.b.example.com/"));
        assert!(!allows(&pattern, "https://example.com/"));
        assert!(!allows(&pattern, "https://badexample.com/"));
        assert!(!allows(&pattern, "https://example.com.evil.net/"));
    }

    #[test]
    fn hosts_compare_without_case() {
        assert!(allows(
            &["https://Hooks.Example.com"],
            "https://HOOKS.example.COM/"
        ));
    }

    #[test]
    fn an_ipv6_literal_is_a_host() {
        assert!(allows(&["http://[::1]:8080"], "http://[::1]:8080/"));
        assert!(!allows(&["http://[::1]:8080"], "http://127.0.0.1:8080/"));
    }

    #[test]
    fn a_pattern_with_a_path_user_info_or_other_scheme_is_rejected_for_its_reason() {
        for (bad, reason) in [
            ("https://example.com/path", HostPatternError::NotAnOrigin),
            ("example.com", HostPatternError::NotAnOrigin),
            ("https://", HostPatternError::NotAnOrigin),
            ("ftp://example.com", HostPatternError::Scheme),
            ("https://user@example.com", HostPatternError::UserInfo),
            ("https://svc:pa55@example.com", HostPatternError::UserInfo),
            ("https://example.com:0", HostPatternError::Port),
            ("https://example.com:99999", HostPatternError::Port),
            ("https://exa mple.com", HostPatternError::Host),
        ] {
            assert_eq!(HostPattern::parse(bad), Err(reason), "{bad}");
        }
    }

    #[test]
    fn a_wildcard_before_a_single_label_is_rejected() {
        for bad in ["https://*.com", "https://*.com.", "http://*.localhost:8080"] {
            assert_eq!(
                HostPattern::parse(bad),
                Err(HostPatternError::Wildcard),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_wildcard_on_an_ip_address_is_rejected() {
        for bad in [
            "http://*.0.0.1:8080",
            "http://*.1.2.3.4",
            "http://*.0x7f.0x1",
            "http://*.[::1]:8080",
        ] {
            assert_eq!(
                HostPattern::parse(bad),
                Err(HostPatternError::Wildcard),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_star_anywhere_but_a_leading_label_is_rejected() {
        for bad in [
            "https://*",
            "https://*.",
            "https://**.example.com",
            "https://*example.com",
            "https://a.*.example.com",
            "https://ex*ample.com",
            "https://example.*",
        ] {
            assert_eq!(
                HostPattern::parse(bad),
                Err(HostPatternError::Wildcard),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_wildcard_before_a_registrable_domain_is_accepted() {
        for good in [
            "https://*.example.com",
            "https://*.example.co.uk:8443",
            "https://*.xn--p1ai.xn--p1ai",
        ] {
            assert!(HostPattern::parse(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_request_with_user_info_is_denied_even_to_an_allowed_host() {
        let gate = gate(&["http://127.0.0.1:8080"]);
        for url in [
            "http://user@127.0.0.1:8080/",
            "http://user:pw@127.0.0.1:8080/",
            "http://@127.0.0.1:8080/",
        ] {
            assert_eq!(
                gate.check(&url.parse().unwrap()),
                Err(Denial::UserInfo),
                "{url}"
            );
        }
        assert_eq!(
            gate.check(&"http://127.0.0.1:8080/".parse().unwrap()),
            Ok(())
        );
    }
}
