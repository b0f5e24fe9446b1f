//! A TCP forwarder in front of the test database, so a test can take the database away from a
//! running host (every connection cut, new ones closed at once) and give it back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

#[derive(Default)]
struct Links {
    cut: AtomicBool,
    open: Mutex<Vec<AbortHandle>>,
}

/// Stops forwarding when dropped.
pub struct TcpProxy {
    address: SocketAddr,
    links: Arc<Links>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a free port of 127.0.0.1 and forwards each connection to `target`.
    pub async fn start(target: (String, u16)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free local port");
        let address = listener.local_addr().expect("a bound address");
        let links = Arc::new(Links::default());
        let served = links.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if served.cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                served.open.lock().unwrap().push(link.abort_handle());
            }
        });
        TcpProxy {
            address,
            links,
            task,
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Closes every forwarded connection and refuses new ones until [`TcpProxy::restore`].
    pub fn cut(&self) {
        self.links.cut.store(true, Ordering::SeqCst);
        for link in self.links.open.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    pub fn restore(&self) {
        self.links.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}
