//! A relay loop's doorbell (migration 0002). Inserting transactions notify only while some loop's
//! doorbell is armed, so the loops arm theirs only when they have nothing to do:
//!
//! - a claim that finds nothing arms the doorbell, and the loop claims once more before it waits:
//!   rows committed before the doorbell was armed rang nothing, and that claim finds them;
//! - but a loop that found rows less than [`LINGER`] ago looks again every [`LINGER_STEP`] instead
//!   of arming: a loop that keeps up with a steady load finds nothing between rows, and arming then
//!   (which briefly holds back the committing inserts) and being rung by every commit would cost the
//!   applications more than a few extra claims cost the relay;
//! - a claim that finds rows disarms it: while the loop keeps finding work, the applications' commits
//!   notify no one;
//! - while the loop waits, each poll re-arms it, so the lease (a few polling intervals) never ends
//!   under a live relay, and a relay that dies armed stops costing notifications when it does.
//!
//! Each loop has a doorbell of its own (keyed by its `claimed_by`), so a loop that disarms never
//! silences another loop, here or on another host, that waits.

use crate::repository::OutboxRepository;
use std::time::{Duration, Instant};

/// How long after its last rows a loop that finds nothing looks again instead of arming.
const LINGER: Duration = Duration::from_millis(20);
/// How often a lingering loop looks again; a row waits at most this long for it.
pub(super) const LINGER_STEP: Duration = Duration::from_millis(2);
/// The shortest lease, for very short polling intervals.
const MIN_LEASE: Duration = Duration::from_secs(2);
/// Polling intervals a lease outlives: a busy machine may delay a poll or two.
const LEASE_INTERVALS: u32 = 4;

pub(super) struct Doorbell {
    relay: String,
    /// How often a waiting loop re-arms: half the polling interval, so each poll re-arms.
    refresh: Duration,
    lease: Duration,
    /// When this loop last armed its doorbell; `None` while it is not armed.
    armed_at: Option<Instant>,
    /// When this loop's claim last found rows.
    last_rows_at: Option<Instant>,
}

impl Doorbell {
    pub fn new(relay: String, polling_interval: Duration) -> Self {
        Doorbell {
            relay,
            refresh: polling_interval / 2,
            lease: (polling_interval * LEASE_INTERVALS).max(MIN_LEASE),
            armed_at: None,
            last_rows_at: None,
        }
    }

    /// After a claim that found nothing: whether the loop found rows so recently that it should
    /// look again after [`LINGER_STEP`] rather than arm.
    pub fn lingers(&self) -> bool {
        self.last_rows_at
            .is_some_and(|found| found.elapsed() < LINGER)
    }

    /// After a claim that found nothing: arms the doorbell unless it was armed since the last poll.
    /// `true` when it armed, and the loop must then claim once more before it waits. A failure is
    /// logged and leaves the loop to its poll.
    pub async fn arm(&mut self, repository: &OutboxRepository) -> bool {
        if self
            .armed_at
            .is_some_and(|armed| armed.elapsed() < self.refresh)
        {
            return false;
        }
        match repository.arm_doorbell(&self.relay, self.lease).await {
            Ok(()) => {
                self.armed_at = Some(Instant::now());
                true
            }
            Err(error) => {
                tracing::warn!(%error, claimed_by = %self.relay, "cannot arm the doorbell; new rows wait for the poll");
                self.armed_at = None;
                false
            }
        }
    }

    /// After a claim that found rows: disarms, and the next claims that find nothing linger.
    pub async fn found_rows(&mut self, repository: &OutboxRepository) {
        self.last_rows_at = Some(Instant::now());
        self.disarm(repository).await;
    }

    /// After a claim that found rows, and at shutdown. A failure is logged and the loop tries again
    /// after its next claim that finds rows; meanwhile commits keep notifying, which costs them time
    /// but loses nothing.
    pub async fn disarm(&mut self, repository: &OutboxRepository) {
        let Some(armed_at) = self.armed_at.take() else {
            return;
        };
        if let Err(error) = repository.disarm_doorbell(&self.relay).await {
            tracing::warn!(%error, claimed_by = %self.relay, "cannot disarm the doorbell; inserting commits keep notifying");
            self.armed_at = Some(armed_at);
        }
    }
}
