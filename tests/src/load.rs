//! A steady load: rows published at a fixed rate in the background while a test injects a fault.

use outbox_host::api::{Outbox, OutboxEntry, PublishError};
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
            let mut committed = 0;
            let mut failed = 0;
            let mut next = 0;
            loop {
                tokio::select! {
                    _ = &mut stopped => {
                        println!("load: {committed} rows committed, {failed} transactions failed");
                        return committed;
                    }
                    _ = tick.tick() => {}
                }
                let entries: Vec<OutboxEntry> = (next..next + per_tick).map(&entry).collect();
                next += per_tick;
                // A fault under test may fail a tick's transaction: its rows are simply not
                // counted, as an application would see its own transaction fail.
                match publish_all(&pool, &outbox, entries).await {
                    Ok(()) => committed += per_tick,
                    Err(()) => failed += 1,
                }
            }
        });
        SteadyLoad { stop, task }
    }

    /// Stops publishing; the rows whose transactions committed.
    pub async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.expect("the load task does not panic")
    }
}

/// One transaction of `entries`; `Err` when the database failed it.
async fn publish_all(pool: &PgPool, outbox: &Outbox, entries: Vec<OutboxEntry>) -> Result<(), ()> {
    let mut tx = pool.begin().await.map_err(drop)?;
    for entry in entries {
        match outbox.publish(&mut tx, entry).await {
            Ok(_) => {}
            Err(PublishError::Invalid(invalid)) => panic!("the load's entry is invalid: {invalid}"),
            Err(PublishError::Persistence(_)) => return Err(()),
        }
    }
    tx.commit().await.map_err(drop)
}
