//! Publish observers: told once per attempt, after the row's mark has settled. A failing observer
//! changes nothing for the entry or the loop.

use super::entry_span;
use crate::plugins::{Envelope, PluginSet, PublishCompleted};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Attempts waiting for observers. Bounded: observers that fall far behind slow the relay rather
/// than grow memory without limit.
const QUEUE: usize = 10_000;
/// A failing observer is logged once, then at most this often, with the count of failures since.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The queue into one relay loop's observer task.
pub(super) struct ObserverFeed {
    sender: mpsc::Sender<(PublishCompleted, Arc<Envelope>)>,
    task: JoinHandle<()>,
}

impl ObserverFeed {
    pub fn start(plugins: watch::Receiver<Arc<PluginSet>>) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        ObserverFeed {
            sender,
            task: tokio::spawn(notify_all(plugins, receiver)),
        }
    }

    pub async fn send(&self, event: PublishCompleted, envelope: Arc<Envelope>) {
        let _ = self.sender.send((event, envelope)).await;
    }

    /// Lets the observers finish what is queued, for at most `grace`.
    pub async fn finish(self, grace: Duration) {
        drop(self.sender);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

async fn notify_all(
    plugins: watch::Receiver<Arc<PluginSet>>,
    mut queue: mpsc::Receiver<(PublishCompleted, Arc<Envelope>)>,
) {
    let mut failures: HashMap<String, (Instant, u64)> = HashMap::new();
    while let Some((event, envelope)) = queue.recv().await {
        let set = plugins.borrow().clone();
        for observer in set.observers() {
            let call = observer
                .on_publish_completed(&event, &envelope)
                .instrument(entry_span(event.entry_id, event.attempt));
            let Err(error) = call.await else {
                continue;
            };
            let (last_logged, since) = failures
                .entry(observer.name().to_owned())
                .or_insert((Instant::now(), 0));
            *since += 1;
            if *since == 1 || last_logged.elapsed() >= FAILURE_LOG_INTERVAL {
                tracing::warn!(
                    plugin = observer.name(),
                    error_type = error.error_type().as_str(),
                    %error,
                    failures = *since,
                    "publish observer failed; ignored"
                );
                *last_logged = Instant::now();
                *since = 0;
            }
        }
    }
}
