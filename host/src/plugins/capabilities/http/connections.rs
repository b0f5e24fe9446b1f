//! The keep-alive connections of one plugin: an exchange goes out on an idle connection to the
//! same origin when there is one, and only otherwise opens (and for https, handshakes) a new one.
//!
//! Why: one connection per request cost every delivery a TCP handshake, a close and, for https, a
//! full TLS handshake and a fresh TLS configuration; against a remote endpoint that is two or three
//! round trips more per row, and on a local server most of the host's CPU per request.
//!
//! Bounds and isolation:
//! - each plugin load has a pool of its own ([`HttpTransport`](super::HttpTransport) makes one per
//!   plugin), so no plugin ever sends on a connection another plugin opened, and a reload starts
//!   with none;
//! - a connection goes back to the pool only once its response was read to the end; a response a
//!   guest dropped half-read, or one that failed, closes its connection;
//! - at most [`MAX_IDLE`] idle connections per plugin, each closed after [`IDLE_TIMEOUT`] unused
//!   (a reaper task, alive as long as the pool, closes them even when the plugin sends nothing more);
//! - a request whose reused connection turned out closed before a byte of it went out is sent
//!   once more on a new connection; a request that may have reached the server is never resent.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Scheme;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use super::{HttpSender, ResponseFuture};

/// Idle connections one plugin keeps at most, over all its origins: the most calls a plugin may
/// run at once, each with one exchange in flight.
pub(crate) const MAX_IDLE: usize = crate::plugins::manifest::Limits::MAX_CONCURRENCY as usize;
/// How long an idle connection is kept. Below the 5 s after which Node.js and Apache servers close
/// an idle connection, so a request rarely races the server's own close.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// wasmtime-wasi-http's default for each timeout a guest leaves unset.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The TLS client configuration, built once: the web's public roots, as wasmtime-wasi-http trusts.
static TLS: LazyLock<TlsConnector> = LazyLock::new(|| {
    let roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
});

/// Sends a plugin's allowed requests over the network, reusing its idle connections.
#[derive(Clone, Default)]
pub struct Connections(Arc<Pool>);

#[derive(Default)]
struct Pool {
    idle: Mutex<VecDeque<Idle>>,
    reaper: OnceLock<()>,
}

struct Idle {
    origin: Origin,
    sender: SendRequest<WasiBody>,
    since: Instant,
}

/// Where a connection goes: scheme and `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    https: bool,
    authority: String,
}

impl Origin {
    fn of(uri: &http::Uri) -> Result<Self, HttpError> {
        let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let authority = match authority.port() {
            Some(_) => authority.to_string(),
            None => format!("{authority}:{}", if https { 443 } else { 80 }),
        };
        Ok(Self { https, authority })
    }
}

/// The three timeouts of `wasi:http`'s request options, each defaulted.
#[derive(Clone, Copy)]
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn of(options: Option<RequestOptions>) -> Self {
        let or_default = |timeout: Option<Duration>| timeout.unwrap_or(DEFAULT_TIMEOUT);
        Self {
            connect: or_default(options.and_then(|o| o.connect_timeout)),
            first_byte: or_default(options.and_then(|o| o.first_byte_timeout)),
            // Tokio panics on a zero interval; a nanosecond is as good as zero.
            between_bytes: or_default(options.and_then(|o| o.between_bytes_timeout))
                .max(Duration::from_nanos(1)),
        }
    }
}

impl HttpSender for Connections {
    /// Each connection is driven by a task of its own, which outlives the exchange.
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> ResponseFuture {
        Box::new(self.0.clone().exchange(request, Timeouts::of(options)))
    }
}

impl Pool {
    async fn exchange(
        self: Arc<Self>,
        mut request: http::Request<WasiBody>,
        timeouts: Timeouts,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let origin = Origin::of(request.uri())?;
        // The request line carries the path only; scheme and host go in the connection and Host.
        *request.uri_mut() = http::Uri::builder()
            .path_and_query(request.uri().path_and_query().map_or("/", |p| p.as_str()))
            .build()
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let (mut sender, reused) = match self.take(&origin, timeouts.connect).await {
            Some(sender) => (sender, true),
            None => (connect(&origin, timeouts.connect).await?, false),
        };
        let sent = tokio::time::timeout(timeouts.first_byte, sender.try_send_request(request));
        let response = match sent.await {
            Err(_) => return Err(HttpError::ConnectionReadTimeout),
            Ok(Ok(response)) => response,
            Ok(Err(mut error)) => match error.take_message() {
                // Nothing of it went out: the idle connection had closed under us.
                Some(request) if reused => {
                    sender = connect(&origin, timeouts.connect).await?;
                    tokio::time::timeout(timeouts.first_byte, sender.send_request(request))
                        .await
                        .map_err(|_| HttpError::ConnectionReadTimeout)??
                }
                _ => return Err(error.into_error().into()),
            },
        };
        let mut between_bytes = tokio::time::interval(timeouts.between_bytes);
        between_bytes.reset();
        let (parts, incoming) = response.into_parts();
        let mut body = PooledBody {
            incoming: Box::pin(incoming),
            between_bytes,
            release: Some((Arc::downgrade(&self), origin, sender)),
        };
        // An empty body (a 204, or `content-length: 0`) has ended before anyone reads it.
        body.release_if_ended();
        Ok(http::Response::from_parts(parts, body.boxed_unsync()))
    }

    /// The most recently used idle connection to `origin` that is still open and ready.
    async fn take(&self, origin: &Origin, timeout: Duration) -> Option<SendRequest<WasiBody>> {
        loop {
            let mut idle = {
                let mut pool = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                let at = pool.iter().rposition(|idle| idle.origin == *origin)?;
                pool.remove(at)?
            };
            if idle.since.elapsed() >= IDLE_TIMEOUT || idle.sender.is_closed() {
                continue;
            }
            // A connection goes back once its response has ended, so it is ready at once or closed.
            if let Ok(Ok(())) = tokio::time::timeout(timeout, idle.sender.ready()).await {
                return Some(idle.sender);
            }
        }
    }

    fn put(self: &Arc<Self>, origin: Origin, sender: SendRequest<WasiBody>) {
        if sender.is_closed() {
            return;
        }
        self.reaper.get_or_init(|| {
            tokio::spawn(reap(Arc::downgrade(self)));
        });
        let mut pool = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() >= MAX_IDLE {
            pool.pop_front();
        }
        pool.push_back(Idle {
            origin,
            sender,
            since: Instant::now(),
        });
    }

    /// Closes the connections idle for [`IDLE_TIMEOUT`].
    fn close_expired(&self) {
        let mut pool = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        pool.retain(|idle| idle.since.elapsed() < IDLE_TIMEOUT && !idle.sender.is_closed());
    }
}

/// Closes expired idle connections until the pool is dropped.
async fn reap(pool: Weak<Pool>) {
    let mut tick = tokio::time::interval(IDLE_TIMEOUT / 2);
    loop {
        tick.tick().await;
        match pool.upgrade() {
            Some(pool) => pool.close_expired(),
            None => return,
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Opens a connection to `origin`, TLS for https, and starts the task that drives it.
async fn connect(origin: &Origin, timeout: Duration) -> Result<SendRequest<WasiBody>, HttpError> {
    let opening = async {
        let tcp = TcpStream::connect(&origin.authority)
            .await
            .map_err(HttpError::Connect)?;
        // Headers and a small body go out at once, never held for the previous segment's ACK.
        tcp.set_nodelay(true).map_err(HttpError::Connect)?;
        let stream: Box<dyn Stream> = if origin.https {
            let name = server_name(&origin.authority).map_err(HttpError::InvalidDnsNameError)?;
            Box::new(TLS.connect(name, tcp).await.map_err(HttpError::Tls)?)
        } else {
            Box::new(tcp)
        };
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(HttpError::from)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    };
    tokio::time::timeout(timeout, opening)
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
}

/// The name a server's certificate must carry: the host of `host:port`, or its IP address.
fn server_name(
    authority: &str,
) -> Result<ServerName<'static>, tokio_rustls::rustls::pki_types::InvalidDnsNameError> {
    if let Ok(address) = authority.parse::<std::net::SocketAddr>() {
        return Ok(ServerName::from(address.ip()));
    }
    let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
    Ok(ServerName::try_from(host)?.to_owned())
}

/// A response body that hands its connection back to the pool when it ends, and fails when no
/// byte arrives for the between-bytes timeout.
struct PooledBody {
    incoming: Pin<Box<Incoming>>,
    between_bytes: tokio::time::Interval,
    release: Option<(Weak<Pool>, Origin, SendRequest<WasiBody>)>,
}

impl PooledBody {
    fn release_if_ended(&mut self) {
        if self.incoming.is_end_stream()
            && let Some((pool, origin, sender)) = self.release.take()
            && let Some(pool) = pool.upgrade()
        {
            pool.put(origin, sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match this.incoming.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.between_bytes.reset();
                this.release_if_ended();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.release_if_ended();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                this.release = None;
                let error = match error.is_timeout() {
                    true => HttpError::HttpResponseTimeout,
                    false => HttpError::from(error),
                };
                Poll::Ready(Some(Err(error)))
            }
            Poll::Pending => {
                ready!(this.between_bytes.poll_tick(cx));
                this.release = None;
                Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}
