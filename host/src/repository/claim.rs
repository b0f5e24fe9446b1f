//! Claiming rows: one short statement marks eligible PENDING rows PROCESSING for this node.
//!
//! The claim scans `idx_outbox_pending` in (available_at, id) order. The front of that index holds
//! the entries of every row claimed since the table was last vacuumed, and while any transaction of
//! the database stays open (holding back vacuum) none of them can be cleaned up: a scan from the
//! front then steps over all of them, and a claim costs more the more rows were delivered before it.
//! So each claimer remembers a floor, the oldest PENDING row its last claim saw (of any type,
//! scheduled or not, due or not), and while the outbox has a backlog (its last claim came back full)
//! it starts the next scan there. A row can appear below the floor only by a commit that comes late
//! (a transaction's `NOW()` is its start), a lease reclaimed, or another claimer's claim rolled back:
//! a claim that comes back short is completed by a scan from the front, and at least every
//! [`FULL_SCAN_EVERY`] a claim scans from the front anyway, so such a row waits that long at most
//! while the backlog lasts.
//!
//! Head-of-line probes start at a low the same way: the lowest live (PENDING or PROCESSING) row's
//! id, which each claim finds from where the claimer's last claim found it (from 0 when it scans
//! from the front), so a probe from an aggregate's head does not step over every row of its
//! aggregate delivered since the last vacuum. A row can turn live below the low only by a commit
//! that comes late or a redrive from the dead letters; until the next scan from the front (while a
//! backlog lasts, at most [`FULL_SCAN_EVERY`]) such a row does not hold back later rows of its
//! aggregate. Both were passed by their siblings already or race them: a late commit's order
//! against a concurrent transaction's is not defined, and a dead-lettered row's siblings went on
//! without it.
//!
//! A claim reads a bounded front of rows in that order. When it comes back empty although rows wait
//! past its front (the front's aggregates all have a row in flight, as in a backlog over fewer
//! aggregates than the relay keeps in flight), the claimer reads the aggregates' heads through
//! their own index instead of reading the whole backlog on every claim (the statements in `sql.rs`).
//!
//! Both hints hold for the eligibility they were learnt with. A claim that leaves out a type (its
//! plugin's calls are all taken) may find nothing where a claim of every type found a backlog: a
//! scan from the floor would then read the whole backlog of the types left out, so a claim whose
//! eligibility differs from its floor's scans a bounded front instead. And when such a narrowed
//! claim's search for heads found nothing, the claimer does not search again with the same
//! eligibility for [`QUIET_AFTER_EMPTY_HEADS`] (or 20 times what the search took, if longer): that
//! search reads one entry per aggregate with live rows, and a loop whose busy type blocks the front
//! would otherwise run it on every turn. The cost: a row of a type with room that lies beyond a
//! front of a busy type's rows (more than four batches of them) waits that long at most to be
//! found. A claim that left no type out always searches: its loop, finding nothing, waits for the
//! doorbell, and no later turn would come to look again.

use super::claim_scope::{Bind, Eligibility, eligibility};
use super::marks::{Claims, record_marks};
use super::{ClaimScopes, Mark, OutboxRecord, OutboxRepository, RepositoryError, Statements};
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, Row};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// While a backlog lasts, a claim scans from the front of the PENDING rows at least this often.
pub const FULL_SCAN_EVERY: Duration = Duration::from_secs(1);

/// After a search for heads found nothing, the same claimer's next search with the same
/// eligibility waits at least this long.
pub const QUIET_AFTER_EMPTY_HEADS: Duration = Duration::from_millis(100);

/// ... or this many times what the empty search took: searches then take at most a twentieth of
/// the claimer's time, however many aggregates there are.
const QUIET_PER_SEARCH_TIME: u32 = 20;

/// The result of [`OutboxRepository::mark_and_claim`]: the marks' owner answers, and the claim.
#[derive(Debug)]
pub struct MarkAndClaim {
    /// One answer per mark, in order: true when this node still owned the row.
    pub owned: Vec<bool>,
    /// The claimed rows in id order.
    pub claimed: Vec<OutboxRecord>,
}

/// What a claimer learnt from its last claim. Only a hint: losing it costs one scan from the front.
#[derive(Clone, Copy, Debug)]
struct Floor {
    start: Start,
    /// The last claim came back full: a backlog is likely waiting.
    full: bool,
    /// When a claim last scanned from the front.
    scanned_from_front: Instant,
    /// The eligibility of the claim that learnt it ([`eligibility_key`]).
    eligibility: u64,
}

/// Where a claim's scans start, other than the front.
#[derive(Clone, Copy, Debug)]
struct Start {
    /// The oldest PENDING row (available_at, id) the last claim saw.
    at: (DateTime<Utc>, i64),
    /// The lowest live row's id the last claim saw, where its probes start.
    low: i64,
}

/// A search for heads that found nothing: none again with this eligibility before `until`.
#[derive(Clone, Copy, Debug)]
struct QuietHeads {
    eligibility: u64,
    until: Instant,
}

/// What one claimer learnt from its claims.
#[derive(Clone, Copy, Debug, Default)]
struct Learnt {
    floor: Option<Floor>,
    quiet_heads: Option<QuietHeads>,
}

/// Per claimer (`claimed_by`), shared by the clones of one repository.
#[derive(Clone, Debug, Default)]
pub(super) struct Hints(Arc<Mutex<HashMap<String, Learnt>>>);

impl Learnt {
    /// Where the next scan with `eligibility` may start, if anywhere but the front.
    fn start(&self, eligibility: u64) -> Option<Start> {
        self.floor
            .filter(|floor| {
                floor.full
                    && floor.eligibility == eligibility
                    && floor.scanned_from_front.elapsed() < FULL_SCAN_EVERY
            })
            .map(|floor| floor.start)
    }

    /// Whether a search for heads with `eligibility` may run now.
    fn may_search_heads(&self, eligibility: u64) -> bool {
        self.quiet_heads
            .is_none_or(|quiet| quiet.eligibility != eligibility || Instant::now() >= quiet.until)
    }
}

impl Hints {
    fn learnt(&self, claimed_by: &str) -> Learnt {
        self.lock().get(claimed_by).copied().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Learnt>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// After a committed claim with `eligibility`, `narrowed` when it left busy types out.
    fn learn(&self, claimed_by: &str, eligibility: u64, claim: &Claimed, narrowed: bool) {
        let mut hints = self.lock();
        let learnt = hints.entry(claimed_by.to_owned()).or_default();
        let scanned_from_front = match learnt.floor {
            Some(previous) if !claim.from_front => previous.scanned_from_front,
            _ => Instant::now(),
        };
        // Nothing claimed, so no floor learnt: the next claim scans from the front.
        learnt.floor = claim.scanned.floor.map(|at| Floor {
            start: Start {
                at,
                low: claim.scanned.low.unwrap_or(0),
            },
            full: claim.full,
            scanned_from_front,
            eligibility,
        });
        if let Some(took) = claim.empty_heads_search.filter(|_| narrowed) {
            learnt.quiet_heads = Some(QuietHeads {
                eligibility,
                until: Instant::now() + QUIET_AFTER_EMPTY_HEADS.max(took * QUIET_PER_SEARCH_TIME),
            });
        }
    }
}

/// Tells one claim's eligibility from another's (its filter and every value bound to it).
fn eligibility_key(sql: &str, binds: &[Bind<'_>]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    sql.hash(&mut hasher);
    binds.hash(&mut hasher);
    hasher.finish()
}

/// What one claim found.
struct Scanned {
    rows: Vec<OutboxRecord>,
    /// The oldest PENDING row at or above where the scan started, when it claimed anything.
    floor: Option<(DateTime<Utc>, i64)>,
    /// The lowest live row's id at or above where the probes started.
    low: Option<i64>,
    /// PENDING rows wait past the rows a claim from the front may read: if it came back empty,
    /// rows it can deliver may lie beyond them.
    front_was_full: bool,
}

/// What one claimer's claim of a turn did.
struct Claimed {
    scanned: Scanned,
    /// It scanned from the front of the PENDING rows.
    from_front: bool,
    /// It came back with as many rows as it asked for.
    full: bool,
    /// It searched for heads beyond its front and found none, in this time.
    empty_heads_search: Option<Duration>,
}

impl OutboxRepository {
    /// Claims up to `batch_size` rows this node can deliver (`scopes`), skipping rows other
    /// claimers hold, and returns them in id order. A scope that fails [`ClaimScope::check`] leaves
    /// out its own destination type only; a filter that can match nothing runs no statement at all.
    /// It always scans from the front.
    ///
    /// [`ClaimScope::check`]: super::ClaimScope::check
    pub async fn claim_batch(
        &self,
        batch_size: u32,
        claimed_by: &str,
        scopes: &ClaimScopes,
    ) -> Result<Vec<OutboxRecord>, RepositoryError> {
        let Eligibility::Filter { sql, binds } = eligibility(scopes, 3) else {
            return Ok(Vec::new());
        };
        let mut tx = self.pool.begin().await?;
        let claim = Claim {
            statements: &self.sql,
            filter: &sql,
            binds: &binds,
            claimed_by,
        };
        let claimed = claim.rows(&mut tx, batch_size, None, true).await?;
        let mut rows = claimed.scanned.rows;
        tx.commit().await?;
        rows.sort_unstable_by_key(|row| row.id);
        Ok(rows)
    }

    /// Records `marks` and claims the next batch in one transaction: one commit instead of two, and
    /// the claim already sees the rows just marked, so the next row of each finished aggregate is
    /// claimable at once. If any mark is refused, nothing of the turn is recorded or claimed: the
    /// caller then records the marks on their own ([`OutboxRepository::mark_batch`]). Commits as
    /// [`OutboxRepository::with_turn_commit`] set. The claim starts at `claimed_by`'s floor while a
    /// backlog lasts (see the module's documentation).
    pub async fn mark_and_claim(
        &self,
        claimed_by: &str,
        marks: &[Mark],
        claims: Claims<'_>,
        batch_size: u32,
        scopes: &ClaimScopes,
    ) -> Result<MarkAndClaim, RepositoryError> {
        let filter = match eligibility(scopes, 3) {
            Eligibility::Filter { sql, binds } if batch_size > 0 => Some((sql, binds)),
            _ => None,
        };
        if filter.is_none() && marks.is_empty() {
            return Ok(MarkAndClaim {
                owned: Vec::new(),
                claimed: Vec::new(),
            });
        }
        let mut tx = self.begin(self.turn_commit).await?;
        let owned = record_marks(&mut tx, &self.sql, claimed_by, marks, claims).await?;
        let Some((sql, binds)) = filter else {
            tx.commit().await?;
            return Ok(MarkAndClaim {
                owned,
                claimed: Vec::new(),
            });
        };
        let eligibility = eligibility_key(&sql, &binds);
        let learnt = self.hints.learnt(claimed_by);
        let start = learnt.start(eligibility);
        // Only a claim that left busy types out spaces its searches: its loop turns again as their
        // calls land, while a loop that found nothing otherwise waits for the doorbell, and must
        // have searched.
        let narrowed = scopes.busy_left_out();
        let search_heads = !narrowed || learnt.may_search_heads(eligibility);
        let claim = Claim {
            statements: &self.sql,
            filter: &sql,
            binds: &binds,
            claimed_by,
        };
        let mut claimed = claim.rows(&mut tx, batch_size, start, search_heads).await?;
        tx.commit().await?;
        let mut rows = std::mem::take(&mut claimed.scanned.rows);
        self.hints
            .learn(claimed_by, eligibility, &claimed, narrowed);
        rows.sort_unstable_by_key(|row| row.id);
        Ok(MarkAndClaim {
            owned,
            claimed: rows,
        })
    }
}

/// One claimer's claim of one turn: the statements it runs, and what it may deliver.
struct Claim<'a> {
    statements: &'a Statements,
    filter: &'a str,
    binds: &'a [Bind<'a>],
    claimed_by: &'a str,
}

impl Claim<'_> {
    /// Claims up to `batch_size` rows, scanning from `start` (or the front). Short from `start`, it
    /// completes the batch from the front. Empty although rows wait past its front, it claims the
    /// heads beyond when `search_heads`: only then, as reading every aggregate's head costs more
    /// than a claim the more aggregates there are, and a claim short by a few rows (locked by
    /// another claimer, or behind a head in flight) needs nothing more.
    async fn rows(
        &self,
        conn: &mut PgConnection,
        batch_size: u32,
        start: Option<Start>,
        search_heads: bool,
    ) -> Result<Claimed, sqlx::Error> {
        let mut scanned = self.front(conn, batch_size, start).await?;
        let mut from_front = start.is_none();
        let missing = |scanned: &Scanned| {
            batch_size.saturating_sub(u32::try_from(scanned.rows.len()).unwrap_or(u32::MAX))
        };
        if start.is_some() && missing(&scanned) > 0 {
            // Short from the floor: what may wait below it is claimed too before the loop rests.
            let front = self.front(conn, missing(&scanned), None).await?;
            scanned.rows.extend(front.rows);
            scanned.floor = front.floor.or(scanned.floor);
            scanned.low = front.low.or(scanned.low);
            scanned.front_was_full = front.front_was_full;
            from_front = true;
        }
        let mut empty_heads_search = None;
        if search_heads && scanned.front_was_full && scanned.rows.is_empty() {
            let searched = Instant::now();
            let heads = self
                .heads(conn, missing(&scanned), scanned.low.unwrap_or(0))
                .await?;
            if heads.is_empty() {
                empty_heads_search = Some(searched.elapsed());
            }
            scanned.rows.extend(heads);
        }
        Ok(Claimed {
            full: scanned.rows.len() >= batch_size as usize,
            scanned,
            from_front,
            empty_heads_search,
        })
    }

    async fn front(
        &self,
        conn: &mut PgConnection,
        batch_size: u32,
        start: Option<Start>,
    ) -> Result<Scanned, sqlx::Error> {
        let low = 3 + self.binds.len();
        // From a floor a backlog is likely, and the scan finds its rows at once: it runs unbounded,
        // which costs less than finding the bound first. From the front it stops at the bound.
        let (floor, below_bound, front_was_full) = match start {
            Some(_) => {
                let first = low + 1;
                (
                    format!("(o.available_at, o.id) >= (${first}, ${})", first + 1),
                    "TRUE",
                    "FALSE",
                )
            }
            None => (
                "TRUE".to_owned(),
                "(o.available_at, o.id) < (COALESCE((SELECT available_at FROM bound), 'infinity'), \
                  COALESCE((SELECT id FROM bound), 0))",
                "EXISTS (SELECT FROM bound)",
            ),
        };
        let sql = self
            .statements
            .claim_template
            .replace("{eligibility}", self.filter)
            .replace("{low}", &format!("${low}"))
            .replace("{floor}", &floor)
            .replace("{below_bound}", below_bound)
            .replace("{front_was_full}", front_was_full);
        let mut query = self
            .bind(sqlx::query(&sql), batch_size)
            .bind(start.map_or(0, |start| start.low));
        if let Some(Start {
            at: (available_at, id),
            ..
        }) = start
        {
            query = query.bind(available_at).bind(id);
        }
        // One row at least: a claim that took nothing answers on a row of NULLs.
        let found = query.fetch_all(conn).await?;
        let Some(first) = found.first() else {
            return Ok(Scanned {
                rows: Vec::new(),
                floor: None,
                low: None,
                front_was_full: false,
            });
        };
        let available_at: Option<DateTime<Utc>> = first.try_get("floor_available_at")?;
        let id: Option<i64> = first.try_get("floor_id")?;
        let front_was_full: bool = first.try_get("front_was_full")?;
        let low: Option<i64> = first.try_get("low_id")?;
        let mut rows = Vec::with_capacity(found.len());
        for row in &found {
            if row.try_get::<Option<i64>, _>("id")?.is_some() {
                rows.push(OutboxRecord::from_row(row)?);
            }
        }
        Ok(Scanned {
            floor: if rows.is_empty() {
                None
            } else {
                available_at.zip(id)
            },
            low,
            rows,
            front_was_full,
        })
    }

    /// Claims the heads beyond a blocked front; `low` is the lowest live row's id the front's
    /// claim found.
    async fn heads(
        &self,
        conn: &mut PgConnection,
        batch_size: u32,
        low: i64,
    ) -> Result<Vec<OutboxRecord>, sqlx::Error> {
        let sql = self
            .statements
            .claim_heads_template
            .replace("{eligibility}", self.filter)
            .replace("{low}", &format!("${}", 3 + self.binds.len()));
        self.bind(sqlx::query(&sql), batch_size)
            .bind(low)
            .fetch_all(conn)
            .await?
            .iter()
            .map(OutboxRecord::from_row)
            .collect()
    }

    /// Binds the parameters every claim statement shares: the batch, the claimer, the filter's.
    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        batch_size: u32,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let mut query = query.bind(i64::from(batch_size)).bind(self.claimed_by);
        for bind in self.binds {
            query = match bind {
                Bind::Text(value) => query.bind(*value),
                Bind::TextArray(values) => query.bind(*values),
            };
        }
        query
    }
}
