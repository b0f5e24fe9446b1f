//! The demo's webhook receiver: a local HTTP server the webhook plugin delivers to. `/orders`
//! accepts, `/flaky` answers 503 to the first try of each idempotency key and accepts the next,
//! `/gone` answers 404. It checks that each aggregate's rows arrive in the order they were written.

use axum::Router;
use axum::extract::{Json, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Answers 200.
pub const ACCEPTING_PATH: &str = "/orders";
/// Answers 503 to the first try of each idempotency key, then 200: the row is retried, then published.
pub const FLAKY_PATH: &str = "/flaky";
/// Answers 404: a permanent failure, so the row is dead-lettered.
pub const GONE_PATH: &str = "/gone";

/// The payload of every sample row: which aggregate it belongs to, and its place in the order
/// the rows were written (increasing with the row id).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Delivery {
    pub order: u32,
    pub sequence: u32,
}

/// What the receiver saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiverReport {
    /// Deliveries answered 200.
    pub accepted: u64,
    /// First tries on `/flaky`, answered 503.
    pub unavailable: u64,
    /// Deliveries to `/gone`, answered 404.
    pub not_found: u64,
    /// Aggregates with at least one delivery accepted.
    pub aggregates: usize,
    /// Aggregates that received a row after a later row of theirs had been accepted.
    pub out_of_order: usize,
}

#[derive(Default)]
struct Ledger {
    first_tries: HashSet<String>,
    /// The highest sequence accepted so far, by aggregate.
    last_accepted: HashMap<u32, u32>,
    out_of_order: HashSet<u32>,
    report: ReceiverReport,
}

impl Ledger {
    /// A delivery arrived: it must come after everything its aggregate has accepted so far (a
    /// retry of a refused row comes again with the same sequence, which is fine).
    fn arrived(&mut self, delivery: Delivery) {
        if self
            .last_accepted
            .get(&delivery.order)
            .is_some_and(|&last| delivery.sequence <= last)
        {
            self.out_of_order.insert(delivery.order);
        }
    }

    fn accept(&mut self, delivery: Delivery) -> StatusCode {
        self.arrived(delivery);
        self.last_accepted.insert(delivery.order, delivery.sequence);
        self.report.accepted += 1;
        StatusCode::OK
    }

    fn report(&self) -> ReceiverReport {
        ReceiverReport {
            aggregates: self.last_accepted.len(),
            out_of_order: self.out_of_order.len(),
            ..self.report.clone()
        }
    }
}

type Shared = Arc<Mutex<Ledger>>;

/// A running receiver; stops serving when dropped.
pub struct Receiver {
    addr: SocketAddr,
    ledger: Shared,
    shutdown: CancellationToken,
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ledger = Shared::default();
        let router = Router::new()
            .route(ACCEPTING_PATH, post(accepting))
            .route(FLAKY_PATH, post(flaky))
            .route(GONE_PATH, post(gone))
            .with_state(ledger.clone());
        let shutdown = CancellationToken::new();
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned());
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                tracing::error!(%error, "the demo's webhook receiver stopped");
            }
        });
        Ok(Receiver {
            addr,
            ledger,
            shutdown,
        })
    }

    /// `http://127.0.0.1:<port>`: the one entry of the webhook manifest's `http.allowed_hosts`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    pub fn report(&self) -> ReceiverReport {
        lock(&self.ledger).report()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn lock(ledger: &Shared) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().expect("no panic while the ledger is held")
}

async fn accepting(State(ledger): State<Shared>, Json(delivery): Json<Delivery>) -> StatusCode {
    lock(&ledger).accept(delivery)
}

async fn flaky(
    State(ledger): State<Shared>,
    headers: HeaderMap,
    Json(delivery): Json<Delivery>,
) -> StatusCode {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
    else {
        return StatusCode::BAD_REQUEST;
    };
    let mut ledger = lock(&ledger);
    if ledger.first_tries.insert(key.to_owned()) {
        ledger.arrived(delivery);
        ledger.report.unavailable += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    ledger.accept(delivery)
}

async fn gone(State(ledger): State<Shared>, Json(delivery): Json<Delivery>) -> StatusCode {
    let mut ledger = lock(&ledger);
    ledger.arrived(delivery);
    ledger.report.not_found += 1;
    StatusCode::NOT_FOUND
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(order: u32, sequence: u32) -> Delivery {
        Delivery { order, sequence }
    }

    #[test]
    fn rows_in_order_per_aggregate_keep_the_order() {
        let mut ledger = Ledger::default();
        for (order, sequence) in [(1, 0), (2, 1), (1, 2), (2, 3), (1, 4)] {
            ledger.accept(delivery(order, sequence));
        }
        let report = ledger.report();
        assert_eq!(
            (report.accepted, report.aggregates, report.out_of_order),
            (5, 2, 0)
        );
    }

    #[test]
    fn a_refused_row_tried_again_keeps_the_order() {
        let mut ledger = Ledger::default();
        ledger.accept(delivery(1, 0));
        ledger.arrived(delivery(1, 3));
        ledger.accept(delivery(1, 3));
        assert_eq!(ledger.report().out_of_order, 0);
    }

    #[test]
    fn an_earlier_row_after_a_later_one_breaks_the_order() {
        let mut ledger = Ledger::default();
        ledger.accept(delivery(1, 5));
        ledger.accept(delivery(2, 6));
        ledger.accept(delivery(1, 2));
        let report = ledger.report();
        assert_eq!((report.aggregates, report.out_of_order), (2, 1));
    }

    #[test]
    fn a_row_accepted_twice_breaks_the_order() {
        let mut ledger = Ledger::default();
        ledger.accept(delivery(1, 5));
        ledger.accept(delivery(1, 5));
        assert_eq!(ledger.report().out_of_order, 1);
    }
}
