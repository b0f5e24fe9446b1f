//! `outbox:relay/http`: a whole HTTP exchange in one host call, for guests whose bindings make each
//! `wasi:http` resource call costly (componentize-py and ComponentizeJS spend 10 µs or more on each
//! of the twenty-odd calls of one exchange).
//!
//! The request takes the road a `wasi:http` request takes: the same checks of method, URI and
//! headers, the same hook ([`HttpGate`]'s `send_request`: the allow-list, then the network or the
//! mock runner), the same timeouts, and no redirect followed. What the guest gets
//! back is bounded: the header section as `wasi:http` fields bound it, the body at
//! [`MAX_RESPONSE_BODY`] bytes, read while it arrives.
//!
//! `send-encoded` is the same exchange with each header section as one byte list, for
//! ComponentizeJS, whose bindings lower each header of `send` in interpreted JavaScript.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::HttpState;
use crate::plugins::bindings::handler::outbox::relay::http::{
    EncodedRequest, EncodedResponse, Host, Request, Response, SendError,
};

/// The longest response body handed to a guest. A webhook's answer is a few bytes; a guest that
/// needs more reads it through `wasi:http`'s streams, bounded by its own memory.
pub(crate) const MAX_RESPONSE_BODY: usize = 4 * 1024 * 1024;
/// The largest header section either way, names and values counted: `wasi:http`'s own limit on
/// the fields of a guest (128 KiB).
pub(crate) const MAX_HEADER_SECTION: usize = 128 * 1024;

impl Host for HttpState {
    async fn send(&mut self, request: Request) -> Result<Response, SendError> {
        let (status, headers, body) = self.exchange(request, fields_of).await?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    async fn send_encoded(
        &mut self,
        request: EncodedRequest,
    ) -> Result<EncodedResponse, SendError> {
        let request = Request {
            headers: fields_from_section(&request.headers)?,
            method: request.method,
            url: request.url,
            body: request.body,
            timeout_ms: request.timeout_ms,
        };
        let (status, headers, body) = self.exchange(request, section_of).await?;
        Ok(EncodedResponse {
            status,
            headers,
            body,
        })
    }
}

impl HttpState {
    /// Sends `request` and reads the whole response, its headers handed over by `headers_of`
    /// (`None` past [`MAX_HEADER_SECTION`]).
    async fn exchange<H>(
        &mut self,
        request: Request,
        headers_of: fn(&HeaderMap) -> Option<H>,
    ) -> Result<(u16, H, Vec<u8>), SendError> {
        let options = request.timeout_ms.map(|ms| {
            let timeout = Some(Duration::from_millis(ms));
            RequestOptions {
                connect_timeout: timeout,
                first_byte_timeout: timeout,
                between_bytes_timeout: timeout,
            }
        });
        let request = self.build(request)?;
        let sent = self
            .gate
            .send_request(request, options, Box::new(async { Ok(()) }));
        // Every sender drives its connections itself: the hook's connection future has no work.
        let (response, _) = Pin::from(sent).await.map_err(failure)?;
        let (parts, body) = response.into_parts();
        let headers = headers_of(&parts.headers).ok_or(SendError::Protocol(
            "HTTP-response-header-section-size".to_owned(),
        ))?;
        Ok((parts.status.as_u16(), headers, read_body(body).await?))
    }

    /// The request a `wasi:http` guest would have built, or why it cannot be sent. Reasons name
    /// the part, never a value: a header value is often a secret.
    fn build(&mut self, request: Request) -> Result<http::Request<WasiBody>, SendError> {
        let invalid = |reason: &str| SendError::InvalidRequest(reason.to_owned());
        let method = Method::from_bytes(request.method.as_bytes())
            .map_err(|_| invalid("HTTP-request-method-invalid"))?;
        let uri: Uri = request
            .url
            .parse()
            .map_err(|_| invalid("HTTP-request-URI-invalid"))?;
        let scheme = uri
            .scheme()
            .filter(|scheme| self.gate.is_supported_scheme(scheme))
            .ok_or_else(|| invalid("the URL's scheme is not http or https"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("the URL has no host"))?
            .clone();
        let path = uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned();
        let uri = Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|_| invalid("HTTP-request-URI-invalid"))?;

        let mut headers = HeaderMap::with_capacity(request.headers.len() + 2);
        let mut section = 0usize;
        for (name, value) in request.headers {
            section = section.saturating_add(name.len() + value.len());
            if section > MAX_HEADER_SECTION {
                return Err(invalid("HTTP-request-header-section-size"));
            }
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid("a header name is malformed"))?;
            if name == CONTENT_LENGTH {
                continue;
            }
            if self.gate.is_forbidden_header(&name) {
                return Err(invalid("a header is one only the host may set"));
            }
            let value = HeaderValue::from_bytes(&value)
                .map_err(|_| invalid("a header value is malformed"))?;
            headers.append(name, value);
        }
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|_| invalid("HTTP-request-URI-invalid"))?;
        headers.insert(HOST, host);
        let body = request.body.unwrap_or_default();
        if !body.is_empty() || method_has_body(&method) {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        }

        let body = Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync();
        let mut built = http::Request::new(body);
        *built.method_mut() = method;
        *built.uri_mut() = uri;
        *built.headers_mut() = headers;
        Ok(built)
    }
}

/// Methods whose requests carry a body, so an empty one is still announced (`content-length: 0`).
fn method_has_body(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

/// The response's headers as `wasi:http` fields hand them over, or `None` past
/// [`MAX_HEADER_SECTION`].
fn fields_of(headers: &HeaderMap) -> Option<Vec<(String, Vec<u8>)>> {
    let mut section = 0usize;
    let mut fields = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        section += name.as_str().len() + value.len();
        if section > MAX_HEADER_SECTION {
            return None;
        }
        fields.push((name.as_str().to_owned(), value.as_bytes().to_vec()));
    }
    Some(fields)
}

/// The response's headers as `send-encoded` hands them over: `name: value` lines, each ended by
/// CRLF (a value never holds a CR or LF), or `None` past [`MAX_HEADER_SECTION`], counted as
/// [`fields_of`] counts it.
fn section_of(headers: &HeaderMap) -> Option<Vec<u8>> {
    let mut section = 0usize;
    let mut encoded = Vec::new();
    for (name, value) in headers {
        section += name.as_str().len() + value.len();
        if section > MAX_HEADER_SECTION {
            return None;
        }
        encoded.extend_from_slice(name.as_str().as_bytes());
        encoded.extend_from_slice(b": ");
        encoded.extend_from_slice(value.as_bytes());
        encoded.extend_from_slice(b"\r\n");
    }
    Some(encoded)
}

/// A `send-encoded` header section as `send`'s headers, which [`HttpState::build`] then checks as
/// it checks those: a bare CR or LF left in a line fails there as a malformed name or value.
fn fields_from_section(section: &[u8]) -> Result<Vec<(String, Vec<u8>)>, SendError> {
    let invalid = |reason: &str| SendError::InvalidRequest(reason.to_owned());
    if section.len() > MAX_HEADER_SECTION {
        return Err(invalid("HTTP-request-header-section-size"));
    }
    let mut fields = Vec::new();
    let mut rest = section;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|pair| pair == b"\r\n")
            .ok_or_else(|| invalid("a header line does not end with CRLF"))?;
        let line = &rest[..end];
        rest = &rest[end + 2..];
        let colon = line
            .iter()
            .position(|&byte| byte == b':')
            .ok_or_else(|| invalid("a header line has no colon"))?;
        let name = std::str::from_utf8(&line[..colon])
            .map_err(|_| invalid("a header name is malformed"))?;
        fields.push((name.to_owned(), trim_blanks(&line[colon + 1..]).to_vec()));
    }
    Ok(fields)
}

/// A field value without the spaces and tabs around it (HTTP's optional whitespace).
fn trim_blanks(value: &[u8]) -> &[u8] {
    let blank = |byte: &u8| *byte == b' ' || *byte == b'\t';
    let start = value.iter().position(|b| !blank(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !blank(b)).map_or(start, |i| i + 1);
    &value[start..end]
}

/// Reads the whole body as it arrives, failing as soon as it passes [`MAX_RESPONSE_BODY`].
async fn read_body(mut body: WasiBody) -> Result<Vec<u8>, SendError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(failure)?.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > MAX_RESPONSE_BODY {
            return Err(SendError::Protocol("HTTP-response-body-size".to_owned()));
        }
        bytes.extend_from_slice(&data);
    }
    Ok(bytes)
}

/// Why an exchange failed, in the names of `wasi:http`'s `error-code` cases (wasmtime-wasi-http's
/// own conversion is private to that crate). Nothing is logged and nothing of the error's text is
/// passed on: it may name the destination.
fn failure(error: Error) -> SendError {
    let connection = |name: &str| SendError::Connection(name.to_owned());
    let protocol = |name: &str| SendError::Protocol(name.to_owned());
    let invalid = |name: &str| SendError::InvalidRequest(name.to_owned());
    match error {
        Error::HttpRequestDenied => SendError::Denied,
        Error::Hyper(error) if error.is_timeout() => SendError::Timeout,
        Error::DnsTimeout
        | Error::ConnectionTimeout
        | Error::ConnectionReadTimeout
        | Error::ConnectionWriteTimeout
        | Error::HttpResponseTimeout => SendError::Timeout,
        Error::Connect(_) | Error::ConnectionRefused => connection("connection-refused"),
        Error::InvalidDnsNameError(_) | Error::DnsError { .. } => connection("DNS-error"),
        Error::DestinationNotFound => connection("destination-not-found"),
        Error::DestinationUnavailable => connection("destination-unavailable"),
        Error::DestinationIpProhibited => connection("destination-IP-prohibited"),
        Error::DestinationIpUnroutable => connection("destination-IP-unroutable"),
        Error::ConnectionTerminated => connection("connection-terminated"),
        Error::ConnectionLimitReached => connection("connection-limit-reached"),
        Error::Tls(_) | Error::TlsProtocolError => connection("TLS-protocol-error"),
        Error::TlsCertificateError => connection("TLS-certificate-error"),
        Error::TlsAlertReceived { .. } => connection("TLS-alert-received"),
        Error::HttpRequestLengthRequired => invalid("HTTP-request-length-required"),
        Error::HttpRequestBodySize(_) => invalid("HTTP-request-body-size"),
        Error::HttpRequestMethodInvalid => invalid("HTTP-request-method-invalid"),
        Error::HttpRequestUriInvalid => invalid("HTTP-request-URI-invalid"),
        Error::HttpRequestUriTooLong => invalid("HTTP-request-URI-too-long"),
        Error::HttpRequestHeaderSectionSize(_) => invalid("HTTP-request-header-section-size"),
        Error::HttpRequestHeaderSize { .. } => invalid("HTTP-request-header-size"),
        Error::HttpResponseIncomplete => protocol("HTTP-response-incomplete"),
        Error::HttpResponseHeaderSectionSize(_) | Error::HttpResponseHeaderSize { .. } => {
            protocol("HTTP-response-header-section-size")
        }
        Error::HttpResponseBodySize(_) => protocol("HTTP-response-body-size"),
        Error::HttpResponseTransferCoding(_) => protocol("HTTP-response-transfer-coding"),
        Error::HttpResponseContentCoding(_) => protocol("HTTP-response-content-coding"),
        Error::LoopDetected => protocol("loop-detected"),
        Error::ConfigurationError => protocol("configuration-error"),
        Error::InternalError(_) => protocol("internal-error"),
        _ => protocol("HTTP-protocol-error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(reason: &str) -> SendError {
        SendError::InvalidRequest(reason.to_owned())
    }

    #[test]
    fn an_encoded_section_gives_each_line_as_a_field_without_the_blanks_around_its_value() {
        let fields = fields_from_section(b"x-a: 1\r\nx-b:\t two words \r\nx-a:3\r\nx-empty:\r\n");
        assert_eq!(
            fields.unwrap(),
            [
                ("x-a".to_owned(), b"1".to_vec()),
                ("x-b".to_owned(), b"two words".to_vec()),
                ("x-a".to_owned(), b"3".to_vec()),
                ("x-empty".to_owned(), Vec::new()),
            ]
        );
        assert_eq!(fields_from_section(b"").unwrap(), []);
    }

    #[test]
    fn an_encoded_line_without_a_colon_a_final_crlf_or_a_utf8_name_is_refused() {
        assert_eq!(
            fields_from_section(b"x-a 1\r\n"),
            Err(invalid("a header line has no colon"))
        );
        assert_eq!(
            fields_from_section(b"x-a: 1\r\nx-b: 2"),
            Err(invalid("a header line does not end with CRLF"))
        );
        assert_eq!(
            fields_from_section(b"x-\xff: 1\r\n"),
            Err(invalid("a header name is malformed"))
        );
    }

    #[test]
    fn an_encoded_section_past_the_limit_is_refused_before_it_is_read() {
        let mut section = b"x-a: ".to_vec();
        section.resize(MAX_HEADER_SECTION + 1, b'v');
        assert_eq!(
            fields_from_section(&section),
            Err(invalid("HTTP-request-header-section-size"))
        );
    }

    #[test]
    fn response_headers_are_encoded_one_crlf_line_each_and_bounded_as_fields_are() {
        let mut headers = HeaderMap::new();
        headers.append("retry-after", HeaderValue::from_static("2"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        assert_eq!(
            section_of(&headers).unwrap(),
            b"retry-after: 2\r\nx-a: 1\r\nx-a: 2\r\n"
        );
        let mut huge = HeaderMap::new();
        let value = HeaderValue::from_bytes(&vec![b'v'; MAX_HEADER_SECTION]).unwrap();
        huge.append("x-huge", value);
        assert_eq!(section_of(&huge), None);
        assert_eq!(fields_of(&huge), None);
    }
}
