//! Asking a running host's admin endpoint, as `outbox-host plugin list` does: one request over plain
//! HTTP/1.1, within a time limit, with the bearer token when the host requires one.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::AdminToken;

/// Long enough for a busy host; short enough that an address nobody answers on fails an
/// operator's command quickly.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AdminClientError {
    #[error("{url} is not an http:// URL")]
    InvalidUrl { url: String },
    #[error("cannot reach the admin endpoint at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the admin endpoint at {url} answered HTTP {status}")]
    Status { url: String, status: StatusCode },
}

/// One request to the admin endpoint.
#[derive(Debug, Clone)]
pub struct AdminRequest {
    method: Method,
    url: String,
    token: Option<AdminToken>,
    json: Option<Vec<u8>>,
}

impl AdminRequest {
    /// `GET url`, e.g. `http://127.0.0.1:9464/plugins`.
    pub fn get(url: impl Into<String>) -> Self {
        AdminRequest {
            method: Method::GET,
            url: url.into(),
            token: None,
            json: None,
        }
    }

    /// `POST url` with `body` as JSON.
    pub fn post_json(url: impl Into<String>, body: &serde_json::Value) -> Self {
        AdminRequest {
            method: Method::POST,
            url: url.into(),
            token: None,
            json: Some(body.to_string().into_bytes()),
        }
    }

    /// Sends `Authorization: Bearer <token>` (`admin.token`).
    pub fn token(mut self, token: Option<AdminToken>) -> Self {
        self.token = token;
        self
    }

    /// The status and body of the answer, whatever the status.
    pub async fn send(self) -> Result<(StatusCode, Bytes), AdminClientError> {
        let url = self.url.as_str();
        let invalid = || AdminClientError::InvalidUrl {
            url: url.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| invalid())?;
        let authority = match (uri.scheme_str(), uri.authority()) {
            (Some("http"), Some(authority)) => authority.clone(),
            _ => return Err(invalid()),
        };
        let unreachable = |reason: String| AdminClientError::Unreachable {
            url: url.to_owned(),
            reason,
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let path = uri.path_and_query().map_or("/", |path| path.as_str());
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(path)
            .header(header::HOST, authority.as_str());
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {}", token.expose()));
        }
        if self.json.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(
                self.json.clone().unwrap_or_default(),
            )))
            .map_err(|_| invalid())?;
        let exchange = async {
            let stream = TcpStream::connect((host, port))
                .await
                .map_err(|error| unreachable(error.to_string()))?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|error| unreachable(error.to_string()))?;
            // Drives the connection; it ends once the sender is dropped.
            tokio::spawn(connection);
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| unreachable(error.to_string()))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| unreachable(error.to_string()))?;
            Ok((status, body.to_bytes()))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())))?
    }

    /// The body of a `200 OK` answer; any other status is an error.
    pub async fn ok(self) -> Result<Bytes, AdminClientError> {
        let url = self.url.clone();
        match self.send().await? {
            (StatusCode::OK, body) => Ok(body),
            (status, _) => Err(AdminClientError::Status { url, status }),
        }
    }
}

/// The body of a `200 OK` answer to `GET url`, e.g. `http://127.0.0.1:9464/plugins`.
pub async fn get(url: &str) -> Result<Bytes, AdminClientError> {
    AdminRequest::get(url).ok().await
}
