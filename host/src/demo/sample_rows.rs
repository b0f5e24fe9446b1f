//! The demo's sample rows: order events over [`AGGREGATES`] orders, written the way an application
//! writes them, through [`Outbox::publish`] in its own transactions.

use super::DemoError;
use super::receiver::{ACCEPTING_PATH, Delivery, FLAKY_PATH, GONE_PATH, Receiver};
use crate::api::{Outbox, OutboxEntry};
use crate::database::{DatabaseError, Tables};
use sqlx::PgPool;

/// Orders the rows are spread over; each order's rows must be delivered in id order.
pub const AGGREGATES: u32 = 50;
const ROWS_PER_TRANSACTION: u32 = 100;

/// Where one sample row goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The receiver accepts it.
    Accepted,
    /// The receiver answers 503 the first time: retried, then published.
    RetriedOnce,
    /// The receiver answers 404: dead-lettered.
    Refused,
    /// Destination type `NOOP`: published without leaving the host.
    Noop,
}

impl Route {
    /// Mostly accepted; about 5 % retried once, 9 % `NOOP`, 0.5 % refused. The moduli share no
    /// factor with [`AGGREGATES`], so every kind lands on many orders, not on a few.
    pub fn of(index: u32) -> Route {
        if index % 199 == 198 {
            Route::Refused
        } else if index % 19 == 7 {
            Route::RetriedOnce
        } else if index % 11 == 5 {
            Route::Noop
        } else {
            Route::Accepted
        }
    }
}

/// Writes `rows` rows, in id order, `ROWS_PER_TRANSACTION` per transaction.
pub async fn publish(
    pool: &PgPool,
    tables: &Tables,
    receiver: &Receiver,
    rows: u32,
) -> Result<(), DemoError> {
    let outbox = Outbox::new(tables.clone());
    for first in (0..rows).step_by(ROWS_PER_TRANSACTION as usize) {
        let mut tx = pool.begin().await.map_err(DatabaseError::from)?;
        for index in first..rows.min(first + ROWS_PER_TRANSACTION) {
            outbox.publish(&mut tx, entry(index, receiver)).await?;
        }
        tx.commit().await.map_err(DatabaseError::from)?;
    }
    Ok(())
}

fn entry(index: u32, receiver: &Receiver) -> OutboxEntry {
    let delivery = Delivery {
        order: index % AGGREGATES,
        sequence: index,
    };
    let (destination_type, destination) = match Route::of(index) {
        Route::Accepted => ("WEBHOOK", receiver.url(ACCEPTING_PATH)),
        Route::RetriedOnce => ("WEBHOOK", receiver.url(FLAKY_PATH)),
        Route::Refused => ("WEBHOOK", receiver.url(GONE_PATH)),
        Route::Noop => ("NOOP", "nowhere".to_owned()),
    };
    OutboxEntry::new(
        "order.updated",
        destination_type,
        destination,
        serde_json::json!(delivery),
    )
    .aggregate("Order", delivery.order.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_thousand_rows_show_every_route_on_many_orders() {
        for route in [
            Route::Accepted,
            Route::RetriedOnce,
            Route::Refused,
            Route::Noop,
        ] {
            let indexes: Vec<u32> = (0..2000)
                .filter(|&index| Route::of(index) == route)
                .collect();
            let orders: std::collections::HashSet<u32> =
                indexes.iter().map(|index| index % AGGREGATES).collect();
            assert!(
                indexes.len() >= 10 && orders.len() >= 10,
                "{route:?}: {} rows on {} orders",
                indexes.len(),
                orders.len()
            );
        }
    }
}
