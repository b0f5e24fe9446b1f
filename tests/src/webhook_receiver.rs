//! A Standard Webhooks receiver built on an implementation no one here wrote: `tests/webhook_receiver.py`
//! runs the `standardwebhooks` package from PyPI under one secret, answers 204 to a request that
//! verifies and 401 to one that does not, and reports its counts. `scripts/test` installs the
//! package once per machine (`ensure_standardwebhooks` in `scripts/setup-toolchains`) and names its
//! Python in `WEBHOOK_VERIFIER_PYTHON`.
//!
//! Secrets go to the receiver in its environment, never as arguments; nothing here prints a secret,
//! a body or a header value.

use std::path::PathBuf;
use std::process::Stdio;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// Where `scripts/setup-toolchains` puts the verifier's Python when `WEBHOOK_VERIFIER_PYTHON` is
/// not set.
fn verifier_python() -> PathBuf {
    let python = std::env::var_os("WEBHOOK_VERIFIER_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let toolchains = std::env::var_os("PLUGIN_TOOLCHAINS")
                .map(PathBuf::from)
                .or_else(|| {
                    let home = std::env::var_os("HOME")?;
                    Some(PathBuf::from(home).join(".cache/outbox-host/toolchains"))
                })?;
            Some(toolchains.join("standardwebhooks/bin/python"))
        });
    match python {
        Some(python) if python.is_file() => python,
        _ => panic!(
            "the signed-webhook tests need the standardwebhooks package: run scripts/test (or \
             `source scripts/setup && ensure_standardwebhooks`), which installs it once per machine"
        ),
    }
}

/// A fresh signing secret, `whsec_` and the base64 of 32 bytes: distinct per `label` and call.
pub fn new_secret(label: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{label}-{}-{}-{:?}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
    );
    format!("whsec_{}", STANDARD.encode(Sha256::digest(seed.as_bytes())))
}

/// What the receiver counted so far.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ReceiverReport {
    pub verified: usize,
    pub rejected: usize,
    /// The `webhook-id` of each verified request, in order of arrival.
    pub verified_ids: Vec<String>,
}

/// The receiver process, killed when dropped (and gone by itself when this process dies: it exits
/// when its stdin closes).
pub struct WebhookReceiver {
    _child: Child,
    port: u16,
}

impl WebhookReceiver {
    /// Starts a receiver that knows only `secret`; returns once it listens.
    pub async fn start(secret: &str) -> WebhookReceiver {
        let script = crate::sdk_plugins::repository().join("tests/webhook_receiver.py");
        let mut child = Command::new(verifier_python())
            .arg(script)
            .env("WEBHOOK_SECRET", secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the verifier's Python starts");
        let stdout = child.stdout.take().expect("a piped stdout");
        let mut first_line = String::new();
        BufReader::new(stdout)
            .read_line(&mut first_line)
            .await
            .expect("the receiver's stdout is readable");
        let port = first_line
            .trim()
            .parse()
            .expect("the receiver prints its port first");
        WebhookReceiver {
            _child: child,
            port,
        }
    }

    /// `http://127.0.0.1:<port>`, as an `http.allowed_hosts` entry.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    pub async fn report(&self) -> ReceiverReport {
        let body = outbox_host::admin::client::get(&self.url("/report"))
            .await
            .expect("the receiver reports");
        serde_json::from_slice(&body).expect("the report is JSON")
    }

    /// POSTs `body` with `headers` to the receiver as they are, and returns the status it answered.
    pub async fn post(&self, headers: &[(String, String)], body: &[u8]) -> u16 {
        let mut request = format!(
            "POST /hook HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\n",
            self.port
        );
        for (name, value) in headers {
            if name != "host" && name != "connection" && name != "content-length" {
                request.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        request.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("the receiver accepts");
        stream.write_all(request.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8_lossy(&response);
        response
            .split(' ')
            .nth(1)
            .and_then(|status| status.parse().ok())
            .expect("an HTTP status line")
    }
}
