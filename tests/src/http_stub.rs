//! A small HTTP/1.1 server for plugin tests: answers every request with the status the test set,
//! keeps each connection open for the next request as servers do (unless told to hang up), and
//! records each connection it accepted and each request it read.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct StubRequest {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status the server answered (or is about to answer) with.
    pub status: u16,
    /// When the whole request had been read.
    pub arrived_at: Instant,
}

impl StubRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct Record {
    status: AtomicU16,
    delay_ms: AtomicU64,
    /// Bytes of body on every answer (`x`s).
    body_size: AtomicUsize,
    /// When not 0, every n-th request is answered 503 whatever `status` says.
    fail_every: AtomicU64,
    arrived: AtomicU64,
    /// Answers for the next requests, in order of arrival, before `status` and `delay_ms` apply.
    script: Mutex<std::collections::VecDeque<(u16, Duration)>>,
    /// Added to every answer.
    headers: Mutex<Vec<(String, String)>>,
    connections: AtomicUsize,
    /// Connections the client has not closed yet.
    open_connections: AtomicUsize,
    /// Closes each connection right after its first answer, without saying so in the answer.
    hang_up: std::sync::atomic::AtomicBool,
    /// Written on a connection a moment after each answer, unasked.
    unsolicited: Mutex<Vec<u8>>,
    requests: Mutex<Vec<StubRequest>>,
    /// Requests read and not answered yet, and the most there ever were.
    answering: AtomicUsize,
    most_answering: AtomicUsize,
}

/// Stops serving when dropped.
pub struct StubServer {
    address: SocketAddr,
    record: Arc<Record>,
    task: JoinHandle<()>,
}

impl StubServer {
    /// Listens on a free port of 127.0.0.1 and answers `status` until told otherwise.
    pub async fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free local port");
        let address = listener.local_addr().expect("a bound address");
        let record = Arc::new(Record::default());
        record.status.store(status, Ordering::SeqCst);
        let served = record.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                served.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, served.clone()));
            }
        });
        Self {
            address,
            record,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`, as an `http.allowed_hosts` entry.
    pub fn origin(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Answers each request only after `delay`, like a slow endpoint.
    pub fn set_delay(&self, delay: Duration) {
        self.record.delay_ms.store(
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Answers with a body of `size` bytes from now on, like an endpoint that says too much.
    pub fn set_body_size(&self, size: usize) {
        self.record.body_size.store(size, Ordering::SeqCst);
    }

    /// The next requests, in order of arrival, are answered with these statuses after these delays.
    pub fn script(&self, answers: &[(u16, Duration)]) {
        self.record
            .script
            .lock()
            .expect("no panic while scripting")
            .extend(answers.iter().copied());
    }

    /// Answers every `n`-th request 503 (n = 20: 5% of requests), like a flaky endpoint.
    pub fn fail_every(&self, n: u64) {
        self.record.fail_every.store(n, Ordering::SeqCst);
    }

    /// Adds a header to every answer from now on (`Retry-After: 2`, say).
    pub fn add_header(&self, name: &str, value: &str) {
        self.record
            .headers
            .lock()
            .expect("no panic while adding a header")
            .push((name.to_owned(), value.to_owned()));
    }

    pub fn set_status(&self, status: u16) {
        self.record.status.store(status, Ordering::SeqCst);
    }

    /// From now on closes each connection right after answering on it, without a `connection:
    /// close` in the answer, as a server does whose idle timeout struck just then.
    pub fn hang_up_after_each_answer(&self) {
        self.record.hang_up.store(true, Ordering::SeqCst);
    }

    /// From now on writes `bytes` on each connection a moment after answering on it, while the
    /// client holds the connection idle, as a broken or hostile server might (a second answer that
    /// nobody asked for, say).
    pub fn write_after_each_answer(&self, bytes: &[u8]) {
        *self
            .record
            .unsolicited
            .lock()
            .expect("no panic while setting bytes") = bytes.to_vec();
    }

    /// Connections accepted that the client has not closed yet.
    pub fn open_connections(&self) -> usize {
        self.record.open_connections.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.record.connections.load(Ordering::SeqCst)
    }

    /// The most requests this server was answering at once.
    pub fn most_at_once(&self) -> usize {
        self.record.most_answering.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<StubRequest> {
        self.record
            .requests
            .lock()
            .expect("no panic while recording")
            .clone()
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers the requests of one connection until the client closes it, asks to, or the server
/// hangs up.
async fn serve(mut stream: TcpStream, record: Arc<Record>) {
    record.open_connections.fetch_add(1, Ordering::SeqCst);
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let close = request.header("connection") == Some("close");
        let hang_up = record.hang_up.load(Ordering::SeqCst);
        if !answer(&mut stream, request, &record, close).await || close || hang_up {
            let _ = stream.shutdown().await;
            break;
        }
        let unsolicited = record
            .unsolicited
            .lock()
            .expect("no panic while setting bytes")
            .clone();
        if !unsolicited.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if stream.write_all(&unsolicited).await.is_err() {
                break;
            }
        }
    }
    if !record.hang_up.load(Ordering::SeqCst) {
        // Wait for the client's close, so `open_connections` counts what the client keeps.
        let mut rest = [0u8; 64];
        while matches!(stream.read(&mut rest).await, Ok(n) if n > 0) {}
    }
    record.open_connections.fetch_sub(1, Ordering::SeqCst);
}

/// Answers one request; false when the connection failed.
async fn answer(
    stream: &mut TcpStream,
    mut request: StubRequest,
    record: &Record,
    close: bool,
) -> bool {
    let arrived = record.arrived.fetch_add(1, Ordering::SeqCst) + 1;
    let answering = record.answering.fetch_add(1, Ordering::SeqCst) + 1;
    record.most_answering.fetch_max(answering, Ordering::SeqCst);
    let fail_every = record.fail_every.load(Ordering::SeqCst);
    let scripted = record
        .script
        .lock()
        .expect("no panic while scripting")
        .pop_front();
    let (status, delay) = match scripted {
        Some(answer) => answer,
        None if fail_every > 0 && arrived.is_multiple_of(fail_every) => (503, Duration::ZERO),
        None => (
            record.status.load(Ordering::SeqCst),
            Duration::from_millis(record.delay_ms.load(Ordering::SeqCst)),
        ),
    };
    request.status = status;
    record
        .requests
        .lock()
        .expect("no panic while recording")
        .push(request);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let headers: String = record
        .headers
        .lock()
        .expect("no panic while adding a header")
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let body_size = record.body_size.load(Ordering::SeqCst);
    let connection = if close { "connection: close\r\n" } else { "" };
    let response = format!(
        "HTTP/1.1 {status} Stub\r\n{headers}content-length: {body_size}\r\n{connection}\r\n"
    );
    let mut response = response.into_bytes();
    response.resize(response.len() + body_size, b'x');
    let written = stream.write_all(&response).await.is_ok();
    record.answering.fetch_sub(1, Ordering::SeqCst);
    written
}

/// Reads until `buffer` holds `needle`; the position where it starts.
async fn read_until(stream: &mut TcpStream, buffer: &mut Vec<u8>, needle: &[u8]) -> Option<usize> {
    loop {
        if let Some(at) = buffer
            .windows(needle.len())
            .position(|window| window == needle)
        {
            return Some(at);
        }
        read_more(stream, buffer).await?;
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 4096];
    let read = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
    buffer.extend_from_slice(&chunk[..read]);
    Some(())
}

/// The next request of a connection; what was read past it stays in `buffer`. A body comes by
/// `content-length` or chunked, as `wasi:http` guests send either.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<StubRequest> {
    let head_end = read_until(stream, buffer, b"\r\n\r\n").await?;
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, path) = (
        request_line.next()?.to_owned(),
        request_line.next()?.to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value.contains("chunked"));
    buffer.drain(..head_end + 4);
    let mut body = Vec::new();
    if chunked {
        loop {
            let line_end = read_until(stream, buffer, b"\r\n").await?;
            let line = String::from_utf8_lossy(&buffer[..line_end]).into_owned();
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            buffer.drain(..line_end + 2);
            while buffer.len() < size + 2 {
                read_more(stream, buffer).await?;
            }
            body.extend_from_slice(&buffer[..size]);
            buffer.drain(..size + 2);
            if size == 0 {
                break;
            }
        }
    } else {
        while buffer.len() < length {
            read_more(stream, buffer).await?;
        }
        body.extend(buffer.drain(..length));
    }
    Some(StubRequest {
        method,
        path,
        headers,
        body,
        status: 0,
        arrived_at: Instant::now(),
    })
}
