//! The doorbell (migration 0003). Inserting transactions notify only while some relay holds the
//! doorbell lock or waits for it, so a host asks for it only while every one of its loops has
//! nothing to do, and gives it back as soon as one has:
//!
//! - a loop whose claim finds nothing says it waits ([`LoopDoorbell::waits`]); once all of them
//!   wait, the host's doorbell task requests the lock, and once it holds it wakes every loop to
//!   claim once more: rows committed before the lock was granted rang nothing, and that claim
//!   finds them;
//! - but a loop that found rows less than [`LINGER`] ago looks again every [`LINGER_STEP`] instead:
//!   a loop that keeps up with a steady load finds nothing between rows, and asking for the lock
//!   then (and being rung by every commit) would cost the applications more than a few extra claims
//!   cost the relay. While it lingers, a claim that finds rows but not a full batch also waits for
//!   the step (counted from the start of its turn) before the next, so a loop following a stream
//!   of inserts claims a step's rows per transaction rather than one or a few;
//! - one following loop is enough for a trickle, so the host's other loops wait meanwhile and
//!   nothing rings them. A busy loop whose turn may have left rows behind wakes them
//!   ([`LoopDoorbell::calls_for_help`]): a claim that came back full, or one that could not take
//!   every type (its slots all taken, or its plugins' concurrency saturated). A loop saturated
//!   while it lingers looks again every [`LINGER_STEP`] rather than wait for a landing, so rows of
//!   other types are not left to the poll;
//! - a loop whose claim finds rows is busy again; when not every loop waits, the task releases the
//!   lock, and the applications' commits notify no one.
//!
//! One lock serves every relay on the database schema: while one idle relay holds it, another idle
//! relay's request waits behind it, and that queued request alone makes inserts notify; when the
//! holder gets busy and releases, the next in line holds it. Notifications reach every listener,
//! so a busy host can never silence an idle one. A host that gets busy while its request still
//! waits lets it wait (cancelling would log an error on the server each time) and releases the
//! lock as soon as it is granted; until then inserts notify, which they do anyway while another
//! relay holds the lock.

use super::wakeup::{RECONNECT_FIRST, RECONNECT_MAX, Wakeups};
use crate::repository::{DoorbellLock, OutboxRepository, RepositoryError};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The doorbell connection's `application_name` starts with this, followed by the node id.
pub const DOORBELL_APPLICATION_NAME: &str = "outbox-host doorbell";
/// How long after its last rows a loop that finds nothing looks again instead of waiting.
const LINGER: Duration = Duration::from_millis(20);
/// How often a lingering loop looks again; a row waits at most this long for it.
pub(super) const LINGER_STEP: Duration = Duration::from_millis(2);
/// How often a held doorbell's connection is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// At shutdown, how long a cancelled lock request may take to end before its connection is dropped.
const CANCEL_WAIT: Duration = Duration::from_secs(1);

/// How many of a host's loops wait with nothing to do.
pub(super) fn idle_loops() -> (watch::Sender<usize>, watch::Receiver<usize>) {
    watch::channel(0)
}

/// One loop's say in whether its host holds the doorbell.
pub(super) struct LoopDoorbell {
    idle_loops: watch::Sender<usize>,
    /// The host's loops, woken to help when this one may have left rows behind.
    wakeups: Wakeups,
    /// This loop's own place in `wakeups`.
    index: usize,
    idle: bool,
    /// When this loop's claim last found rows.
    last_rows_at: Option<Instant>,
}

impl LoopDoorbell {
    pub fn new(idle_loops: watch::Sender<usize>, wakeups: Wakeups, index: usize) -> Self {
        LoopDoorbell {
            idle_loops,
            wakeups,
            index,
            idle: false,
            last_rows_at: None,
        }
    }

    /// After a claim that found nothing: whether the loop found rows so recently that it should
    /// look again after [`LINGER_STEP`] rather than wait.
    pub fn lingers(&self) -> bool {
        self.last_rows_at
            .is_some_and(|found| found.elapsed() < LINGER)
    }

    /// After a claim that found nothing: the loop waits, and wants the doorbell held.
    pub fn waits(&mut self) {
        if !self.idle {
            self.idle = true;
            self.idle_loops.send_modify(|idle| *idle += 1);
        }
    }

    /// After a claim that found rows: the loop is busy, and the next claims that find nothing
    /// linger.
    pub fn found_rows(&mut self) {
        self.last_rows_at = Some(Instant::now());
        self.busy();
    }

    /// After a turn that may have left rows behind: the host's other loops that wait claim too, as
    /// no insert rings them while this one is busy. A loop that waits itself calls no one: the
    /// doorbell rings for all of them, and two saturated loops would otherwise wake each other.
    pub fn calls_for_help(&self) {
        if !self.idle && *self.idle_loops.borrow() > 0 {
            self.wakeups.wake_others(self.index);
        }
    }

    fn busy(&mut self) {
        if self.idle {
            self.idle = false;
            self.idle_loops.send_modify(|idle| *idle -= 1);
        }
    }
}

impl Drop for LoopDoorbell {
    fn drop(&mut self) {
        self.busy();
    }
}

/// Holds the doorbell lock while all of the host's `loops` wait, until `shutdown`. A lost
/// connection is logged and reopened with backoff; meanwhile new rows wait for the poll.
pub(super) async fn ring_while_idle(
    repository: OutboxRepository,
    node_id: String,
    loops: usize,
    mut idle_loops: watch::Receiver<usize>,
    wakeups: Wakeups,
    shutdown: CancellationToken,
) {
    let application_name = format!("{DOORBELL_APPLICATION_NAME} {node_id}");
    let mut connection: Option<DoorbellLock> = None;
    let mut delay = RECONNECT_FIRST;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            open = until(&mut idle_loops, |idle| idle == loops) => if !open { break },
        }
        let lock = match connection.as_mut() {
            Some(lock) => lock,
            None => match repository.doorbell_lock(&application_name).await {
                Ok(lock) => connection.insert(lock),
                Err(error) => {
                    tracing::warn!(node = %node_id, %error, retry_in_ms = delay.as_millis() as u64, "cannot open the doorbell connection; new rows wait for the poll");
                    if pause(&mut delay, &shutdown).await {
                        break;
                    }
                    continue;
                }
            },
        };
        match ring(
            &repository,
            lock,
            loops,
            &mut idle_loops,
            &wakeups,
            &shutdown,
        )
        .await
        {
            Ok(()) => delay = RECONNECT_FIRST,
            Err(error) => {
                tracing::warn!(node = %node_id, %error, "the doorbell connection failed; new rows wait for the poll until it is back");
                if let Some(lock) = connection.take() {
                    lock.close().await;
                }
                if pause(&mut delay, &shutdown).await {
                    break;
                }
            }
        }
    }
    // Closing releases the lock if it is held.
    if let Some(lock) = connection {
        lock.close().await;
    }
}

/// Takes the lock, wakes the loops to claim once more, and holds it until one of the `loops` is
/// busy or until shutdown; then releases it, so inserts stop notifying before the host is gone.
async fn ring(
    repository: &OutboxRepository,
    lock: &mut DoorbellLock,
    loops: usize,
    idle_loops: &mut watch::Receiver<usize>,
    wakeups: &Wakeups,
    shutdown: &CancellationToken,
) -> Result<(), RepositoryError> {
    let backend_pid = lock.backend_pid();
    let held = {
        let arming = lock.arm();
        tokio::pin!(arming);
        tokio::select! {
            armed = &mut arming => {
                armed?;
                true
            }
            _ = shutdown.cancelled() => {
                // The request may wait behind another idle relay for as long as that one stays
                // idle. The lock may still be granted before the cancel lands.
                repository.cancel_doorbell_wait(backend_pid).await?;
                matches!(tokio::time::timeout(CANCEL_WAIT, arming).await, Ok(Ok(())))
            }
        }
    };
    if !held {
        return Ok(());
    }
    if !shutdown.is_cancelled() {
        wakeups.wake_all();
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = until(idle_loops, |idle| idle < loops) => break,
                // A lost connection released the lock; nothing else would notice while all is idle.
                _ = check.tick() => lock.check().await?,
            }
        }
    }
    lock.disarm().await
}

/// Returns once the count of idle loops meets `condition` (`true`), or once no loop is left.
async fn until(idle_loops: &mut watch::Receiver<usize>, condition: impl Fn(usize) -> bool) -> bool {
    idle_loops.wait_for(|idle| condition(*idle)).await.is_ok()
}

/// Sleeps `delay` (doubled for next time); `true` if shutdown came first.
async fn pause(delay: &mut Duration, shutdown: &CancellationToken) -> bool {
    let wait = *delay;
    *delay = (*delay * 2).min(RECONNECT_MAX);
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    }
}
