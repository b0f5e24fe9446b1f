//! The mock runner's HTTP sender: answers every allowed request with one canned response and
//! records it (or, without one, sends it over the network), and records every denied request.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use crate::plugins::capabilities::http::{Connections, Denial, HttpSender, ResponseFuture};

/// The response the mock gives every request: `STATUS[:BODY]` on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockHttpResponse {
    pub status: u16,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected STATUS[:BODY] with a status from 100 to 599, e.g. `200` or `503:busy`")]
pub struct MockHttpResponseError;

impl FromStr for MockHttpResponse {
    type Err = MockHttpResponseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (status, body) = text.split_once(':').unwrap_or((text, ""));
        let status = status
            .parse::<u16>()
            .ok()
            .filter(|s| (100..=599).contains(s))
            .ok_or(MockHttpResponseError)?;
        Ok(Self {
            status,
            body: body.to_owned(),
        })
    }
}

/// A header the mock adds to its response: `NAME: VALUE` on the command line (`--http-header`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockHttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected NAME: VALUE with a valid header name and value, e.g. `Retry-After: 2`")]
pub struct MockHttpHeaderError;

impl FromStr for MockHttpHeader {
    type Err = MockHttpHeaderError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, value) = text.split_once(':').ok_or(MockHttpHeaderError)?;
        let (name, value) = (name.trim(), value.trim());
        http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| MockHttpHeaderError)?;
        http::HeaderValue::from_str(value).map_err(|_| MockHttpHeaderError)?;
        Ok(Self {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// A request the plugin would have sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The body as text, invalid UTF-8 replaced.
    pub body: String,
}

impl fmt::Display for RecordedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {}", self.method, self.url)?;
        for (name, value) in &self.headers {
            writeln!(f, "    {name}: {value}")?;
        }
        if !self.body.is_empty() {
            writeln!(f, "    body: {}", self.body)?;
        }
        Ok(())
    }
}

/// A request the allow-list refused: it never left the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedRequest {
    pub method: String,
    /// The URL, with any user info replaced by `****` (it is never sent, nor shown).
    pub url: String,
    pub reason: String,
}

impl DeniedRequest {
    fn new(method: &http::Method, uri: &http::Uri, denial: Denial) -> Self {
        let url = uri.to_string();
        let url = match uri.authority() {
            Some(authority) if authority.as_str().contains('@') => {
                let host = authority.as_str().rsplit('@').next().unwrap_or_default();
                url.replacen(authority.as_str(), &format!("****@{host}"), 1)
            }
            _ => url,
        };
        Self {
            method: method.to_string(),
            url,
            reason: denial.to_string(),
        }
    }
}

impl fmt::Display for DeniedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {} ({})", self.method, self.url, self.reason)
    }
}

/// A mock run keeps this many requests per report, and this much of each body, so a plugin that
/// floods cannot fill the memory of `outbox-host plugin test`.
pub const MAX_RECORDED_REQUESTS: usize = 1_000;
pub const MAX_RECORDED_BODY_BYTES: usize = 64 * 1024;

/// The requests recorded so far, shared by the instances of one plugin; past
/// [`MAX_RECORDED_REQUESTS`] they are answered (or refused) but not kept.
#[derive(Debug, Clone)]
pub(crate) struct RequestLog<R>(Arc<Mutex<Vec<R>>>);

impl<R> Default for RequestLog<R> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<R> RequestLog<R> {
    pub(crate) fn take(&self) -> Vec<R> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn push(&self, request: R) {
        let mut requests = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if requests.len() < MAX_RECORDED_REQUESTS {
            requests.push(request);
        }
    }
}

/// The first [`MAX_RECORDED_BODY_BYTES`] of a body as text, and its full length when longer.
async fn recorded_body(mut body: WasiBody) -> Result<String, HttpError> {
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total = total.saturating_add(data.len());
            let room = MAX_RECORDED_BODY_BYTES.saturating_sub(kept.len());
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if total > kept.len() {
        text.push_str(&format!("… ({total} bytes in all)"));
    }
    Ok(text)
}

pub(crate) struct MockSender {
    /// `None`: allowed requests go to the network, unrecorded.
    response: Option<MockHttpResponse>,
    network: Connections,
    /// Added to every mock response.
    headers: Vec<MockHttpHeader>,
    log: RequestLog<RecordedRequest>,
    denied: RequestLog<DeniedRequest>,
}

impl MockSender {
    pub(crate) fn new(
        response: Option<MockHttpResponse>,
        headers: Vec<MockHttpHeader>,
        log: RequestLog<RecordedRequest>,
        denied: RequestLog<DeniedRequest>,
    ) -> Self {
        Self {
            response,
            network: Connections::default(),
            headers,
            log,
            denied,
        }
    }
}

impl HttpSender for MockSender {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> ResponseFuture {
        let Some(response) = self.response.clone() else {
            return self.network.send(request, options);
        };
        let log = self.log.clone();
        let headers = self.headers.clone();
        Box::new(async move {
            let (parts, body) = request.into_parts();
            let body = recorded_body(body).await?;
            log.push(RecordedRequest {
                method: parts.method.to_string(),
                url: parts.uri.to_string(),
                headers: parts
                    .headers
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.to_string(),
                            String::from_utf8_lossy(value.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
                body,
            });
            let body = Full::new(Bytes::from(response.body))
                .map_err(|never| match never {})
                .boxed_unsync();
            let mut builder = http::Response::builder().status(response.status);
            for header in headers {
                builder = builder.header(header.name, header.value);
            }
            builder
                .body(body)
                .map_err(|_| HttpError::InternalError(Some("invalid mock response".to_owned())))
        })
    }

    fn denied(&self, method: &http::Method, uri: &http::Uri, denial: Denial) {
        self.denied.push(DeniedRequest::new(method, uri, denial));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_url_is_shown_without_its_user_info() {
        let uri: http::Uri = "https://svc:pw@hooks.example.com/x?y=1".parse().unwrap();
        let denied = DeniedRequest::new(&http::Method::POST, &uri, Denial::UserInfo);
        assert_eq!(denied.url, "https://****@hooks.example.com/x?y=1");
        assert_eq!(
            denied.to_string(),
            "POST https://****@hooks.example.com/x?y=1 (the URL carries user info, which is never sent)\n"
        );
    }

    #[test]
    fn a_status_alone_has_an_empty_body() {
        assert_eq!(
            "204".parse(),
            Ok(MockHttpResponse {
                status: 204,
                body: String::new()
            })
        );
    }

    #[test]
    fn the_body_follows_the_first_colon() {
        assert_eq!(
            "503:busy: retry".parse(),
            Ok(MockHttpResponse {
                status: 503,
                body: "busy: retry".into()
            })
        );
    }

    #[test]
    fn a_header_is_a_name_and_a_value_around_the_first_colon() {
        assert_eq!(
            "Retry-After: 2".parse(),
            Ok(MockHttpHeader {
                name: "Retry-After".into(),
                value: "2".into()
            })
        );
        assert_eq!(
            "Retry-After:Sun, 06 Nov 1994 08:49:37 GMT"
                .parse::<MockHttpHeader>()
                .map(|header| header.value),
            Ok("Sun, 06 Nov 1994 08:49:37 GMT".to_owned())
        );
        for bad in ["Retry-After", ": 2", "bad name: 2", "X: a\nb"] {
            assert_eq!(
                bad.parse::<MockHttpHeader>(),
                Err(MockHttpHeaderError),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_status_outside_100_to_599_is_rejected() {
        for bad in ["99", "600", "ok", "", ":body"] {
            assert_eq!(
                bad.parse::<MockHttpResponse>(),
                Err(MockHttpResponseError),
                "{bad}"
            );
        }
    }
}
