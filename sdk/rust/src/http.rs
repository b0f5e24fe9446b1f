//! HTTP requests over `wasi:http/outgoing-handler`, to hosts the manifest grants
//! (`[http] allowed_hosts`).
//!
//! Redirects are never followed: a 3xx comes back as it is, so a granted host cannot bounce a
//! request to one that is not granted.

use std::fmt;
use std::time::Duration;

use crate::PublishResult;
use crate::bindings::destination_handler::wasi::http::outgoing_handler;
use crate::bindings::destination_handler::wasi::http::types::{
    Fields, FutureIncomingResponse, IncomingResponse, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme, http_error_code,
};
use crate::bindings::destination_handler::wasi::io::error::Error as IoError;
use crate::bindings::destination_handler::wasi::io::streams::StreamError;

pub use crate::bindings::destination_handler::wasi::http::types::{ErrorCode, Method};

/// Applied when a request sets none: to connecting, to the first response byte, and between
/// response bytes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `blocking-write-and-flush` takes at most 4096 bytes at a time.
const WRITE_CHUNK: usize = 4096;
const READ_CHUNK: u64 = 64 * 1024;

/// An HTTP request, built step by step and sent with [`Request::send`].
///
/// No `Debug`: it would print header values and the body.
#[derive(Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    timeout: Duration,
}

/// A response: any status, including 3xx and errors, is a response.
///
/// No `Debug`: a destination may echo what it was sent.
#[derive(Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Why a request got no response.
#[derive(Debug, Clone)]
pub enum HttpError {
    /// The host's allow-list refused the request; it never reached the network.
    Denied,
    /// Connecting, or waiting for the response, took longer than the request's timeout.
    Timeout,
    /// The destination could not be reached: DNS, refused or reset connections, TLS.
    Connection(ErrorCode),
    /// The request cannot be sent as built (URL, method, a header); sending it again won't help.
    InvalidRequest(String),
    /// The exchange failed after the connection was made.
    Protocol(ErrorCode),
}

impl Request {
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Request {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn get(url: impl Into<String>) -> Self {
        Request::new(Method::Get, url)
    }

    pub fn post(url: impl Into<String>) -> Self {
        Request::new(Method::Post, url)
    }

    /// Sets a header, replacing an earlier one of the same name (names compare ignoring case).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers
            .retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
        self
    }

    /// Sets the body, and its `content-length`.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        let body = body.into();
        self = self.header("content-length", body.len().to_string());
        self.body = Some(body);
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let target = Target::parse(&self.url)?;
        let headers = Fields::new();
        for (name, value) in &self.headers {
            headers.append(name, value.as_bytes()).map_err(|_| {
                HttpError::InvalidRequest(format!("header `{name}` is forbidden or malformed"))
            })?;
        }
        let request = OutgoingRequest::new(headers);
        request
            .set_method(&self.method)
            .map_err(|()| invalid("the method is not valid"))?;
        request
            .set_scheme(Some(&target.scheme))
            .map_err(|()| invalid("the URL scheme is not valid"))?;
        request
            .set_authority(Some(target.authority))
            .map_err(|()| invalid("the URL host is not valid"))?;
        request
            .set_path_with_query(Some(&target.path_with_query))
            .map_err(|()| invalid("the URL path is not valid"))?;
        let body = request.body().expect("a new request's body is taken once");
        let future = outgoing_handler::handle(request, Some(timeouts(self.timeout)?))?;
        let written = write_body(body, self.body.as_deref().unwrap_or_default());
        // When the exchange itself failed, the response says why better than the body write.
        let response = wait_for_response(&future)?;
        written?;
        read_response(response)
    }
}

impl Response {
    /// True for a 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of a header (names compare ignoring case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(existing, _)| existing.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
    }

    /// The wait the response's `Retry-After` header asks for (delta-seconds or an HTTP-date), or
    /// `None` without a readable one. Pass it on with [`PublishResult::with_retry_after`].
    pub fn retry_after(&self) -> Option<Duration> {
        crate::retry_after::parse(self.header("retry-after")?, std::time::SystemTime::now())
    }
}

/// The `host[:port]` part of an `http` or `https` URL: what an error message may name.
pub fn authority(url: &str) -> Option<&str> {
    Target::parse(url).ok().map(|target| target.authority)
}

/// A URL split the way `wasi:http` wants it.
struct Target<'a> {
    scheme: Scheme,
    authority: &'a str,
    path_with_query: String,
}

impl<'a> Target<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("the URL has no scheme"))?;
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else {
            return Err(invalid("the URL scheme is not http or https"));
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        if authority.is_empty() {
            return Err(invalid("the URL has no host"));
        }
        // Credentials in a URL would end up in error messages and logs; use a header instead.
        if authority.contains('@') {
            return Err(invalid(
                "the URL carries user info; send credentials in a header",
            ));
        }
        let path = path.split('#').next().unwrap_or_default();
        let path_with_query = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Ok(Target {
            scheme,
            authority,
            path_with_query,
        })
    }
}

fn invalid(reason: &str) -> HttpError {
    HttpError::InvalidRequest(reason.to_string())
}

fn timeouts(timeout: Duration) -> Result<RequestOptions, HttpError> {
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = RequestOptions::new();
    options
        .set_connect_timeout(Some(nanos))
        .and(options.set_first_byte_timeout(Some(nanos)))
        .and(options.set_between_bytes_timeout(Some(nanos)))
        .map_err(|()| invalid("the host does not support request timeouts"))?;
    Ok(options)
}

/// Writes the whole body and finishes it; an empty body is finished too, or the request is
/// treated as aborted.
fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
    {
        // The stream is a child of the body: it must be gone before the body is finished.
        let stream = body.write().expect("a new body's stream is taken once");
        for chunk in bytes.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(stream_error)?;
        }
    }
    OutgoingBody::finish(body, None)?;
    Ok(())
}

fn wait_for_response(future: &FutureIncomingResponse) -> Result<IncomingResponse, HttpError> {
    loop {
        if let Some(answer) = future.get() {
            return Ok(answer.expect("a response is taken once")?);
        }
        future.subscribe().block();
    }
}

fn read_response(response: IncomingResponse) -> Result<Response, HttpError> {
    let status = response.status();
    let headers = response.headers().entries();
    let incoming = response.consume().expect("a response body is taken once");
    let mut body = Vec::new();
    {
        // The stream is a child of the body: it must be gone before the body is dropped.
        let stream = incoming.stream().expect("a body's stream is taken once");
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(error)) => return Err(io_error(&error)),
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn stream_error(error: StreamError) -> HttpError {
    match error {
        StreamError::LastOperationFailed(error) => io_error(&error),
        StreamError::Closed => HttpError::Protocol(ErrorCode::ConnectionTerminated),
    }
}

fn io_error(error: &IoError) -> HttpError {
    match http_error_code(error) {
        Some(code) => code.into(),
        None => HttpError::Protocol(ErrorCode::InternalError(Some(error.to_debug_string()))),
    }
}

impl From<ErrorCode> for HttpError {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => HttpError::Denied,
            ErrorCode::DnsTimeout
            | ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout => HttpError::Timeout,
            ErrorCode::DnsError(_)
            | ErrorCode::DestinationNotFound
            | ErrorCode::DestinationUnavailable
            | ErrorCode::DestinationIpProhibited
            | ErrorCode::DestinationIpUnroutable
            | ErrorCode::ConnectionRefused
            | ErrorCode::ConnectionTerminated
            | ErrorCode::ConnectionLimitReached
            | ErrorCode::TlsProtocolError
            | ErrorCode::TlsCertificateError
            | ErrorCode::TlsAlertReceived(_) => HttpError::Connection(code),
            ErrorCode::HttpRequestLengthRequired
            | ErrorCode::HttpRequestBodySize(_)
            | ErrorCode::HttpRequestMethodInvalid
            | ErrorCode::HttpRequestUriInvalid
            | ErrorCode::HttpRequestUriTooLong
            | ErrorCode::HttpRequestHeaderSectionSize(_)
            | ErrorCode::HttpRequestHeaderSize(_)
            | ErrorCode::HttpRequestTrailerSectionSize(_)
            | ErrorCode::HttpRequestTrailerSize(_) => {
                HttpError::InvalidRequest(format!("{code:?}"))
            }
            other => HttpError::Protocol(other),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => {
                write!(
                    f,
                    "HTTP request denied: the host is not in the plugin's allowed hosts"
                )
            }
            HttpError::Timeout => write!(f, "HTTP request timed out"),
            HttpError::Connection(code) => write!(f, "HTTP connection failed: {code:?}"),
            HttpError::InvalidRequest(reason) => write!(f, "invalid HTTP request: {reason}"),
            HttpError::Protocol(code) => write!(f, "HTTP exchange failed: {code:?}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// Denied and invalid requests need a person to act, so they are permanent; anything that may
/// pass on another try is retryable.
impl From<HttpError> for PublishResult {
    fn from(error: HttpError) -> Self {
        let message = error.to_string();
        match error {
            HttpError::Denied => PublishResult::permanent(message).with_error_type("denied"),
            HttpError::InvalidRequest(_) => {
                PublishResult::permanent(message).with_error_type("invalid-request")
            }
            HttpError::Timeout => PublishResult::retryable(message).with_error_type("http-timeout"),
            HttpError::Connection(_) => {
                PublishResult::retryable(message).with_error_type("connection")
            }
            HttpError::Protocol(_) => {
                PublishResult::retryable(message).with_error_type("http-protocol")
            }
        }
    }
}
