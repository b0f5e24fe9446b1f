//! Test-only destination type `HOSTILE`: the envelope's `destination` names what it tries, and
//! the sandbox tests check that the host contains it. Escape attempts report a permanent failure
//! with error type `denied` when the sandbox held, and success only when it did not.
//!
//! Destinations: `loop`, `alloc`, `read-file`, `env-var`, `socket` (payload `{"port": N}`),
//! `http` (`{"url": "…"}`), `http-raw` (the same through `wasi:http` directly, past the SDK's own
//! checks), `http-send` (`{"url": "…", "headers": [[name, value], …], "timeout_ms": N}` through
//! `outbox:relay/http` as a guest may call it; any status but 2xx fails with error type `status`,
//! an exchange error with its case's name), `http-send-encoded` (`{"url": "…", "section": "…",
//! "expect_line": "…"}` through `send-encoded`, its header section given as it stands; a 2xx
//! succeeds only when the response's section holds `expect_line`, if given), `sleep`
//! (`{"ms": N}`, blocked in a clock poll), `trap`, `ok`, `log-flood` (`{"lines": N}`), `log-forge` (a line that tries to start another, with terminal escapes, on the
//! log interface and on stdout), `huge-log` and `huge-error` (`{"mb": N}`: one log line, or a
//! retryable failure's message, of N MiB).

use std::time::Duration;

use outbox_sdk::http::Request;
use outbox_sdk::{Envelope, Handler, PublishResult};

struct Hostile;

impl Handler for Hostile {
    fn destination_type() -> String {
        "HOSTILE".to_string()
    }

    fn publish(envelope: Envelope) -> PublishResult {
        match envelope.destination.as_str() {
            "loop" => spin_forever(),
            "alloc" => allocate_forever(),
            "read-file" => escaped_if(std::fs::read("/etc/passwd").map(drop)),
            "env-var" => {
                if std::env::var_os("HOME").is_some() || std::env::var_os("PATH").is_some() {
                    PublishResult::success()
                } else {
                    denied("no environment variable is visible")
                }
            }
            "socket" => match payload_number(&envelope, "port").map(u16::try_from) {
                Some(Ok(port)) => {
                    escaped_if(std::net::TcpStream::connect(("127.0.0.1", port)).map(drop))
                }
                _ => PublishResult::permanent("the payload needs a `port`"),
            },
            "http" => match payload_text(&envelope, "url") {
                Some(url) => match Request::get(url).send() {
                    Ok(response) if response.is_success() => PublishResult::success(),
                    Ok(response) => PublishResult::permanent(format!("status {}", response.status)),
                    Err(error) => error.into(),
                },
                None => PublishResult::permanent("the payload needs a `url`"),
            },
            "http-raw" => match payload_text(&envelope, "url") {
                Some(url) => raw_get(&url),
                None => PublishResult::permanent("the payload needs a `url`"),
            },
            "http-send" => match payload_text(&envelope, "url") {
                Some(url) => one_call_get(&envelope, url),
                None => PublishResult::permanent("the payload needs a `url`"),
            },
            "http-send-encoded" => match payload_text(&envelope, "url") {
                Some(url) => encoded_get(&envelope, url),
                None => PublishResult::permanent("the payload needs a `url`"),
            },
            "sleep" => match payload_number(&envelope, "ms") {
                Some(ms) => {
                    std::thread::sleep(Duration::from_millis(ms));
                    PublishResult::success()
                }
                None => PublishResult::permanent("the payload needs `ms`"),
            },
            "trap" => panic!("the hostile plugin traps on purpose"),
            "log-flood" => {
                let lines = payload_number(&envelope, "lines").unwrap_or(10_000);
                for line in 0..lines {
                    outbox_sdk::log!(info, "flood line {line}");
                }
                PublishResult::success()
            }
            "log-forge" => {
                let forged =
                    "hello\n2026-12-02T00:00:00.000000Z ERROR outbox_host::relay: forged\r\x1b[2K";
                outbox_sdk::log::info(forged);
                println!("{forged}");
                PublishResult::success()
            }
            "huge-log" => {
                outbox_sdk::log::info(&mebibytes(&envelope));
                PublishResult::success()
            }
            "huge-error" => PublishResult::retryable(mebibytes(&envelope)),
            "ok" => PublishResult::success(),
            _ => PublishResult::permanent("unknown hostile action"),
        }
    }
}

/// GETs `url` with `wasi:http` directly, putting its authority (user info and all) into the request
/// as it stands: the SDK refuses user info itself, an attacker's own code would not.
fn raw_get(url: &str) -> PublishResult {
    use outbox_sdk::bindings::destination_handler::wasi::http::outgoing_handler;
    use outbox_sdk::bindings::destination_handler::wasi::http::types::{
        ErrorCode, Fields, OutgoingBody, OutgoingRequest, Scheme,
    };

    let Some((scheme, rest)) = url.split_once("://") else {
        return PublishResult::permanent("the url needs a scheme");
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let request = OutgoingRequest::new(Fields::new());
    let accepted = request
        .set_scheme(Some(&scheme))
        .and(request.set_authority(Some(authority)))
        .and(request.set_path_with_query(Some(if path.is_empty() { "/" } else { path })));
    if accepted.is_err() {
        return PublishResult::permanent("the host refused a part of the url");
    }
    let body = request.body().expect("a new request's body is taken once");
    let answer = outgoing_handler::handle(request, None).and_then(|future| {
        OutgoingBody::finish(body, None)?;
        loop {
            if let Some(answer) = future.get() {
                return answer.expect("a response is taken once").map(drop);
            }
            future.subscribe().block();
        }
    });
    match answer {
        Ok(()) => PublishResult::success(),
        Err(ErrorCode::HttpRequestDenied) => denied("the host denied the request"),
        Err(code) => PublishResult::permanent(format!("{code:?}")),
    }
}

/// GETs `url` with `outbox:relay/http`, with the payload's headers as given.
fn one_call_get(envelope: &Envelope, url: String) -> PublishResult {
    use outbox_sdk::bindings::destination_handler::outbox::relay::http::{Request, send};

    let payload = envelope.payload_value().unwrap_or_default();
    let headers = payload["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| {
            Some((
                pair[0].as_str()?.to_owned(),
                pair[1].as_str()?.as_bytes().to_vec(),
            ))
        })
        .collect();
    let request = Request {
        method: "GET".to_owned(),
        url,
        headers,
        body: None,
        timeout_ms: payload["timeout_ms"].as_u64(),
    };
    exchange_outcome(send(&request).map(|response| (response.status, true)))
}

/// GETs `url` with `send-encoded`, the payload's `section` sent as it stands.
fn encoded_get(envelope: &Envelope, url: String) -> PublishResult {
    use outbox_sdk::bindings::destination_handler::outbox::relay::http::{
        EncodedRequest, send_encoded,
    };

    let payload = envelope.payload_value().unwrap_or_default();
    let request = EncodedRequest {
        method: "GET".to_owned(),
        url,
        headers: payload["section"]
            .as_str()
            .unwrap_or("")
            .as_bytes()
            .to_vec(),
        body: None,
        timeout_ms: payload["timeout_ms"].as_u64(),
    };
    let expected = payload["expect_line"]
        .as_str()
        .map(|line| format!("{line}\r\n"));
    exchange_outcome(send_encoded(&request).map(|response| {
        let section = String::from_utf8_lossy(&response.headers);
        let holds = expected.is_none_or(|line| section.split_inclusive("\r\n").any(|l| l == line));
        (response.status, holds)
    }))
}

/// Success for a 2xx whose check held; otherwise a permanent failure whose error type names what
/// happened (`status`, `unexpected-headers`, or the exchange error's case).
fn exchange_outcome(
    answer: Result<
        (u16, bool),
        outbox_sdk::bindings::destination_handler::outbox::relay::http::SendError,
    >,
) -> PublishResult {
    use outbox_sdk::bindings::destination_handler::outbox::relay::http::SendError;

    let (error_type, reason) = match answer {
        Ok((status, true)) if (200..300).contains(&status) => return PublishResult::success(),
        Ok((status, false)) if (200..300).contains(&status) => {
            ("unexpected-headers", String::new())
        }
        Ok((status, _)) => ("status", status.to_string()),
        Err(SendError::Denied) => ("denied", String::new()),
        Err(SendError::Timeout) => ("timeout", String::new()),
        Err(SendError::Connection(reason)) => ("connection", reason),
        Err(SendError::InvalidRequest(reason)) => ("invalid-request", reason),
        Err(SendError::Protocol(reason)) => ("protocol", reason),
    };
    PublishResult::permanent(reason).with_error_type(error_type)
}

/// Never returns and never calls the host: only epoch interruption can stop it.
fn spin_forever() -> ! {
    let mut turns: u64 = 0;
    loop {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
}

/// Grows memory 1 MiB at a time, writing every page so none stays untouched, until the
/// allocator fails and the instance aborts.
fn allocate_forever() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        chunk.iter_mut().step_by(4096).for_each(|byte| *byte = 1);
        chunks.push(std::hint::black_box(chunk));
    }
}

/// Success means the sandbox let the attempt through; the tests assert it never does.
fn escaped_if(attempt: std::io::Result<()>) -> PublishResult {
    match attempt {
        Ok(()) => PublishResult::success(),
        Err(error) => denied(&format!("io error kind {:?}", error.kind())),
    }
}

fn denied(detail: &str) -> PublishResult {
    PublishResult::permanent(format!("denied: {detail}")).with_error_type("denied")
}

/// `{"mb": N}` MiB of text, built inside the plugin's own memory.
fn mebibytes(envelope: &Envelope) -> String {
    let mb = payload_number(envelope, "mb").unwrap_or(1);
    "x".repeat(usize::try_from(mb << 20).unwrap_or(usize::MAX))
}

fn payload_number(envelope: &Envelope, key: &str) -> Option<u64> {
    envelope.payload_value().ok()?.get(key)?.as_u64()
}

fn payload_text(envelope: &Envelope, key: &str) -> Option<String> {
    Some(
        envelope
            .payload_value()
            .ok()?
            .get(key)?
            .as_str()?
            .to_string(),
    )
}

outbox_sdk::export_handler!(Hostile);
