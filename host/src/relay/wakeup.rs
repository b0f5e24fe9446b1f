//! Wake-ups for the relay loops: LISTEN on the notification channel, with polling as the safety net.
//! When the listening connection drops, the loops keep polling while the listener reconnects with
//! backoff; each transition is logged.

use crate::metrics::Metrics;
use crate::repository::{CHANNEL, OutboxRepository};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The listening connection's `application_name` starts with this, followed by the node id, so
/// operators (and tests) can find it.
pub const LISTENER_APPLICATION_NAME: &str = "outbox-host listener";
/// The backoff of the relay's own connections (listener, doorbell) while they cannot reconnect.
pub(super) const RECONNECT_FIRST: Duration = Duration::from_millis(100);
pub(super) const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// One wake-up per relay loop. `notify_one` keeps a permit when the loop is busy, so a notification
/// that arrives mid-cycle is not lost.
#[derive(Clone)]
pub(super) struct Wakeups {
    loops: Arc<Vec<Arc<Notify>>>,
}

impl Wakeups {
    pub fn new(loops: usize) -> Self {
        Wakeups {
            loops: Arc::new((0..loops).map(|_| Arc::new(Notify::new())).collect()),
        }
    }

    pub fn get(&self, index: usize) -> Arc<Notify> {
        self.loops[index].clone()
    }

    pub fn wake_all(&self) {
        self.loops.iter().for_each(|wake| wake.notify_one());
    }

    /// Every loop but the one at `index`.
    pub fn wake_others(&self, index: usize) {
        for (other, wake) in self.loops.iter().enumerate() {
            if other != index {
                wake.notify_one();
            }
        }
    }
}

/// Listens until `shutdown`, reconnecting with backoff whenever the connection is lost.
pub(super) async fn listen(
    repository: OutboxRepository,
    node_id: String,
    wakeups: Wakeups,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let application_name = format!("{LISTENER_APPLICATION_NAME} {node_id}");
    let mut delay = RECONNECT_FIRST;
    let mut was_listening = false;
    loop {
        match repository.listen(&application_name).await {
            Ok(mut listener) => {
                tracing::info!(node = %node_id, channel = CHANNEL, "LISTEN connected; notifications wake the relay");
                metrics.listening(true);
                delay = RECONNECT_FIRST;
                was_listening = true;
                // Rows inserted while we were not listening are found now rather than at the next poll.
                wakeups.wake_all();
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        received = listener.try_recv() => match received {
                            Ok(Some(_)) => wakeups.wake_all(),
                            Ok(None) => {
                                tracing::warn!(node = %node_id, "LISTEN connection lost; falling back to polling until it is back");
                                break;
                            }
                            Err(error) => {
                                tracing::warn!(node = %node_id, %error, "LISTEN connection failed; falling back to polling until it is back");
                                break;
                            }
                        }
                    }
                }
                metrics.listening(false);
            }
            Err(error) => {
                if was_listening || delay == RECONNECT_FIRST {
                    tracing::warn!(node = %node_id, %error, retry_in_ms = delay.as_millis() as u64, "cannot LISTEN; polling only");
                }
                was_listening = false;
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}
