//! Each destination type's delivery policy: `[destinations.<TYPE>]` over `[relay]`, resolved once
//! at start.

use super::Backoff;
use super::breaker::BreakerSettings;
use crate::config::{Config, DeliveryPolicyConfig};
use std::collections::HashMap;
use std::time::Duration;

/// What the relay does about one destination type's rows and their outcomes.
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    /// Replaces the table's default attempt limit (20) of a row that carries it.
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub unresolvable_delay: Duration,
    pub breaker: BreakerSettings,
    pub rate_limit_per_second: Option<f64>,
    pub max_concurrency: Option<u32>,
}

impl DeliveryPolicy {
    fn new(keys: DeliveryPolicyConfig, unresolvable_delay: Duration) -> Self {
        DeliveryPolicy {
            max_attempts: keys.max_attempts,
            backoff: Backoff::new(keys.backoff_base_delay, keys.backoff_max_delay),
            unresolvable_delay,
            breaker: BreakerSettings {
                threshold: keys.breaker_threshold,
                window: keys.breaker_window,
                cool_down: keys.breaker_cool_down,
            },
            rate_limit_per_second: Some(keys.rate_limit_per_second).filter(|&rate| rate > 0.0),
            max_concurrency: Some(keys.max_concurrency_per_destination).filter(|&max| max > 0),
        }
    }

    /// A row's attempt limit under this policy: its own, unless it carries the table's default.
    pub fn max_attempts_of(&self, stored: i32) -> i32 {
        if stored == crate::api::DEFAULT_MAX_ATTEMPTS as i32 {
            i32::try_from(self.max_attempts).unwrap_or(i32::MAX)
        } else {
            stored
        }
    }
}

#[derive(Debug, Clone)]
pub struct DeliveryPolicies {
    default: DeliveryPolicy,
    by_type: HashMap<String, DeliveryPolicy>,
}

impl DeliveryPolicies {
    pub fn from_config(config: &Config) -> Self {
        let relay = config.relay.delivery();
        let unresolvable_delay = config.relay.unresolvable_delay;
        DeliveryPolicies {
            default: DeliveryPolicy::new(relay, unresolvable_delay),
            by_type: config
                .destinations
                .iter()
                .map(|(destination_type, keys)| {
                    let policy = DeliveryPolicy::new(keys.over(relay), unresolvable_delay);
                    (destination_type.clone(), policy)
                })
                .collect(),
        }
    }

    pub fn of(&self, destination_type: &str) -> &DeliveryPolicy {
        self.by_type.get(destination_type).unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DestinationTypeConfig;

    #[test]
    fn a_type_s_own_keys_win_and_the_rest_fall_back_to_the_relay() {
        let mut config = Config::default();
        config.relay.breaker_threshold = 7;
        config.destinations.insert(
            "WEBHOOK".into(),
            DestinationTypeConfig {
                max_attempts: Some(3),
                rate_limit_per_second: Some(50.0),
                ..DestinationTypeConfig::default()
            },
        );
        let policies = DeliveryPolicies::from_config(&config);
        let webhook = policies.of("WEBHOOK");
        assert_eq!(webhook.max_attempts, 3);
        assert_eq!(webhook.rate_limit_per_second, Some(50.0));
        assert_eq!(webhook.breaker.threshold, 7);
        let other = policies.of("KAFKA");
        assert_eq!(other.max_attempts, 20);
        assert_eq!(other.rate_limit_per_second, None);
        assert_eq!(other.max_concurrency, None);
    }

    #[test]
    fn only_a_row_carrying_the_table_default_takes_the_policy_s_attempt_limit() {
        let mut config = Config::default();
        config.relay.max_attempts = 5;
        let policies = DeliveryPolicies::from_config(&config);
        assert_eq!(policies.of("X").max_attempts_of(20), 5);
        assert_eq!(policies.of("X").max_attempts_of(7), 7);
    }
}
