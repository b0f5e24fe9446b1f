//! Claim + mark-published throughput of the repository on this machine's PostgreSQL.
//!
//! 100,000 pending rows spread over 1,000 aggregates, drained by one or two claimers at batch sizes 50
//! and 500. Two ways to drain, measured in the same run:
//! - `two-step`: the plain loop: claim a batch (one statement, one commit), then mark it published (one
//!   statement, one commit);
//! - `combined`: what the relay does: mark the previous batch and claim the next in one transaction
//!   (`mark_and_claim`), one commit per batch, and the claim already sees the rows just marked.
//!
//! Run: `cargo bench -p outbox-tests --bench claim_throughput`

use outbox_host::repository::{ClaimScope, ClaimScopes, Claims, Mark, OutboxRepository};
use outbox_tests::db::TestDb;
use outbox_tests::drain;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROWS: u64 = 100_000;
const AGGREGATES: u32 = 1_000;

#[derive(Clone, Copy, PartialEq)]
enum Marking {
    TwoStep,
    Combined,
}

impl Marking {
    fn label(self) -> &'static str {
        match self {
            Marking::TwoStep => "two-step",
            Marking::Combined => "combined",
        }
    }
}

#[tokio::main]
async fn main() {
    println!("claim + mark-published, {ROWS} rows over {AGGREGATES} aggregates");
    println!(
        "{:<10} {:>6} {:>10} {:>12} {:>18}",
        "claimers", "batch", "loop", "rows/s", "vs two-step"
    );
    for claimers in [1, 2] {
        for batch in [50, 500] {
            let plain = drain(claimers, batch, Marking::TwoStep).await;
            let combined = drain(claimers, batch, Marking::Combined).await;
            for (marking, rate) in [(Marking::TwoStep, plain), (Marking::Combined, combined)] {
                let label = marking.label();
                println!(
                    "{claimers:<10} {batch:>6} {label:>10} {rate:>12.0} {:>17.2}x",
                    rate / plain
                );
            }
        }
    }
    println!("goal: >= 10000 rows/s with two claimers");
}

async fn drain(claimers: usize, batch: u32, marking: Marking) -> f64 {
    let db = TestDb::new().await;
    drain::fill(&db, ROWS, Some(AGGREGATES)).await;
    let published = Arc::new(AtomicU64::new(0));
    let scopes = ClaimScopes::new().with("NOOP", ClaimScope::All);
    let started = Instant::now();
    let tasks: Vec<_> = (0..claimers)
        .map(|n| {
            let repo = db.repository();
            let published = published.clone();
            let scopes = scopes.clone();
            tokio::spawn(async move {
                claim_until_done(
                    repo,
                    format!("bench-{n}"),
                    batch,
                    marking,
                    scopes,
                    published,
                )
                .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The rows the database accepted as published, not the marks sent: a refused mark is no work done.
    let published = db.count("PUBLISHED").await;
    db.pool.close().await;
    published as f64 / elapsed
}

async fn claim_until_done(
    repo: OutboxRepository,
    claimed_by: String,
    batch: u32,
    marking: Marking,
    scopes: ClaimScopes,
    published: Arc<AtomicU64>,
) {
    let mut marks: Vec<Mark> = Vec::new();
    while published.load(Ordering::Relaxed) < ROWS {
        let rows = match marking {
            Marking::TwoStep => {
                repo.mark_batch(&claimed_by, &marks).await.unwrap();
                repo.claim_batch(batch, &claimed_by, &scopes).await.unwrap()
            }
            Marking::Combined => {
                repo.mark_and_claim(&claimed_by, &marks, Claims::OfOwner, batch, &scopes)
                    .await
                    .unwrap()
                    .claimed
            }
        };
        published.fetch_add(marks.len() as u64, Ordering::Relaxed);
        if rows.is_empty() && published.load(Ordering::Relaxed) < ROWS {
            // Every head is in another claimer's hands: its marks make the next heads claimable.
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        marks = rows
            .iter()
            .map(|row| Mark::Published { id: row.id })
            .collect();
    }
}
