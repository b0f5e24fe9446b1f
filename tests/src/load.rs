//! A steady load: rows published at a fixed rate in the background while a test injects a fault.

use outbox_host::api::{Outbox, OutboxEntry};
use sqlx::PgPool;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One transaction of rows per tick.
const TICK: Duration = Duration::from_millis(50);

/// Publishing until stopped; `entry(n)` makes the n-th row (counting from 0).
pub struct SteadyLoad {
    stop: oneshot::Sender<()>,
    task: JoinHandle<u64>,
}

impl SteadyLoad {
    /// Starts publishing `rows_per_second` rows a second through `outbox`.
    pub fn start(
        pool: PgPool,
        outbox: Outbox,
        rows_per_second: u64,
        entry: impl Fn(u64) -> OutboxEntry + Send + 'static,
    ) -> SteadyLoad {
        let (stop, mut stopped) = oneshot::channel();
        let per_tick = (rows_per_second * TICK.as_millis() as u64 / 1000).max(1);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            let mut published = 0;
            loop {
                tokio::select! {
                    _ = &mut stopped => return published,
                    _ = tick.tick() => {}
                }
                let mut tx = pool.begin().await.expect("PostgreSQL is reachable");
                for _ in 0..per_tick {
                    outbox
                        .publish(&mut tx, entry(published))
                        .await
                        .expect("the entry is valid");
                    published += 1;
                }
                tx.commit().await.expect("the load commits");
            }
        });
        SteadyLoad { stop, task }
    }

    /// Stops publishing; the rows published.
    pub async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.expect("the load task does not panic")
    }
}
