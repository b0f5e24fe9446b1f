//! One destination's rate limit, as evenly spaced call slots (the generic cell rate algorithm
//! without a burst). A call reserves the next free slot and waits for it in the host when it is
//! within the horizon; a row whose slot would be further is not given one, and is deferred until
//! the destination reopens. The destination is closed to claims while its reservations reach past
//! half the horizon, so each claim that reaches it finds half a horizon of slots free, and a claim
//! of more rows than that defers at most one batch per reopening, whatever its backlog.

use std::time::{Duration, Instant};

/// How far ahead a call may reserve its slot and wait for it.
const HORIZON: Duration = Duration::from_millis(500);
/// Reservations reaching past this close the destination to claims.
const REOPEN: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct RateLimiter {
    interval: Duration,
    next_free: Option<Instant>,
}

/// What the limiter says about a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Call at this instant (now or within the horizon); the slot is reserved.
    At(Instant),
    /// No slot within the horizon: ask again after this long, when the destination reopens.
    Wait(Duration),
}

impl RateLimiter {
    /// `per_second` must be positive and finite (the configuration checks it).
    pub fn new(per_second: f64) -> Self {
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / per_second),
            next_free: None,
        }
    }

    pub fn reserve(&mut self, now: Instant) -> Slot {
        let slot = self.next_free.map_or(now, |free| free.max(now));
        if slot > now + HORIZON {
            return Slot::Wait(slot - now - REOPEN);
        }
        self.next_free = Some(slot + self.interval);
        Slot::At(slot)
    }

    /// When the destination reopens to claims, if it is closed now.
    pub fn reopens_at(&self, now: Instant) -> Option<Instant> {
        self.next_free
            .map(|free| free - REOPEN)
            .filter(|&reopens| reopens > now)
    }

    /// Whether every reservation is in the past, so forgetting the limiter changes nothing.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.next_free.is_none_or(|free| free <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn slots_are_spaced_by_the_interval() {
        let (mut limiter, now) = (RateLimiter::new(10.0), Instant::now());
        assert_eq!(limiter.reserve(now), Slot::At(now));
        assert_eq!(limiter.reserve(now), Slot::At(now + ms(100)));
        assert_eq!(limiter.reserve(now), Slot::At(now + ms(200)));
    }

    #[test]
    fn a_slot_past_the_horizon_is_not_reserved_and_the_row_waits_for_the_reopening() {
        let (mut limiter, now) = (RateLimiter::new(10.0), Instant::now());
        for n in 0..=5 {
            assert_eq!(limiter.reserve(now), Slot::At(now + ms(100 * n)));
        }
        assert_eq!(limiter.reserve(now), Slot::Wait(ms(350)));
        assert_eq!(limiter.reserve(now), Slot::Wait(ms(350)));
        assert_eq!(limiter.reopens_at(now), Some(now + ms(350)));
        assert_eq!(limiter.reopens_at(now + ms(350)), None);
    }

    #[test]
    fn it_closes_to_claims_once_its_reservations_pass_half_the_horizon() {
        let (mut limiter, now) = (RateLimiter::new(10.0), Instant::now());
        for _ in 0..2 {
            limiter.reserve(now);
        }
        assert_eq!(limiter.reopens_at(now), None);
        limiter.reserve(now);
        assert_eq!(limiter.reopens_at(now), Some(now + ms(50)));
    }

    #[test]
    fn idle_time_is_not_saved_up_as_a_burst() {
        let (mut limiter, now) = (RateLimiter::new(10.0), Instant::now());
        limiter.reserve(now);
        let later = now + Duration::from_secs(60);
        assert!(limiter.is_idle(later));
        assert_eq!(limiter.reserve(later), Slot::At(later));
        assert_eq!(limiter.reserve(later), Slot::At(later + ms(100)));
    }
}
