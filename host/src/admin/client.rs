//! Asking a running host's admin endpoint, as `outbox-host plugin list` does: one GET over plain
//! HTTP/1.1, within a time limit.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

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

/// The body of a `200 OK` answer to `GET url`, e.g. `http://127.0.0.1:9464/plugins`.
pub async fn get(url: &str) -> Result<Bytes, AdminClientError> {
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
    let exchange = async {
        let stream = TcpStream::connect((host, port))
            .await
            .map_err(|error| unreachable(error.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| unreachable(error.to_string()))?;
        // Drives the connection; it ends once the sender is dropped.
        tokio::spawn(connection);
        let request = Request::get(path)
            .header(header::HOST, authority.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|_| invalid())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| unreachable(error.to_string()))?;
        if response.status() != StatusCode::OK {
            return Err(AdminClientError::Status {
                url: url.to_owned(),
                status: response.status(),
            });
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| unreachable(error.to_string()))?;
        Ok(body.to_bytes())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())))?
}
