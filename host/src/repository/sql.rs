//! Every statement the repository runs, built once for the configured schema.

use super::COUNTED_STATES;
use super::record::MAX_PAYLOAD_BYTES;
use crate::database::Tables;

/// The columns a claimed row carries back; JSON columns come back as text, so the relay hands the
/// payload and metadata to plugins without parsing them. A payload over [`MAX_PAYLOAD_BYTES`] stays
/// in the database: only its size comes back.
fn record_columns() -> String {
    format!(
        "o.id, o.carrier_id, o.aggregate_type, o.aggregate_id, o.event_type, o.destination, \
         o.destination_type, \
         CASE WHEN octet_length(o.payload::text) <= {MAX_PAYLOAD_BYTES} THEN o.payload::text END \
           AS payload, \
         octet_length(o.payload::text)::bigint AS payload_bytes, \
         o.headers::text AS headers, o.metadata::text AS metadata, o.scheduled_at, o.available_at, \
         o.state, o.attempt, o.max_attempts, o.claimed_at, o.claimed_by, o.published_at, \
         o.last_error, o.error_type, o.created_at, o.updated_at"
    )
}

/// A claim reads at most this many due rows in order per row it asks for before the claimer looks
/// for aggregate heads further on (the claim's statements below).
const CLAIM_READ_PER_ROW: u32 = 4;

#[derive(Debug)]
pub(crate) struct Statements {
    pub tables: Tables,
    pub insert_outbox: String,
    pub insert_inbox: String,
    /// The claim with `{eligibility}` left to fill in each cycle from the claim scopes, and `{floor}`
    /// and `{low}` with where its scans start (`claim.rs`).
    pub claim_template: String,
    /// The claim of heads beyond a blocked front, with `{eligibility}` and `{low}` left to fill in.
    pub claim_heads_template: String,
    pub mark: String,
    pub reclaim_stale: String,
    pub dead_letter_invalid_types: String,
    pub cleanup_published: String,
    pub cleanup_dead_letter: String,
    pub cleanup_inbox: String,
    pub select_by_id: String,
    pub count_by_state: String,
    pub list_dead_letters: String,
    pub redrive_dead_letters: String,
    pub purge_dead_letters: String,
    pub oldest_pending_age: String,
}

/// The rows a [`super::DeadLetterSelection`] names: `$1` ids (empty when selecting by type), `$2`
/// the destination type (NULL when selecting by ids), `$3` the earliest `updated_at` (NULL: any).
const DEAD_LETTER_SELECTION: &str = "state = 'DEAD_LETTER' AND (id = ANY($1::bigint[]) \
    OR ($2::text IS NOT NULL AND destination_type = $2 \
        AND ($3::timestamptz IS NULL OR updated_at >= $3)))";

impl Statements {
    pub fn new(tables: Tables) -> Self {
        let outbox = tables.outbox();
        let inbox = tables.inbox();
        let record_columns = record_columns();
        // A row this node may claim now, but for head-of-line; `{eligibility}` is filled in per claim.
        let due = "(o.state = 'PENDING' AND o.available_at <= NOW() \
                    AND (o.scheduled_at IS NULL OR o.scheduled_at <= NOW()) AND ({eligibility}))";
        let from_floor = "(o.available_at, o.id) >= \
                          ((SELECT available_at FROM floor), (SELECT id FROM floor))";
        let counted_states = COUNTED_STATES
            .map(|state| format!("'{}'", state.as_str()))
            .join(", ");
        Statements {
            insert_outbox: format!(
                "INSERT INTO {outbox} (carrier_id, aggregate_type, aggregate_id, event_type, destination, \
                 destination_type, payload, headers, metadata, scheduled_at, available_at, max_attempts) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, COALESCE($11, NOW()), $12) RETURNING id"
            ),
            insert_inbox: format!(
                "INSERT INTO {inbox} (message_id, source) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            ),
            // Head-of-line: a row is claimable only when no PENDING or PROCESSING row of its aggregate
            // has a lower id, so one aggregate's rows are delivered one at a time, in id order. The
            // probe reads `idx_outbox_aggregate` downwards from the row: a row behind its head meets a
            // live sibling at once, rather than first stepping over every row of its aggregate
            // already delivered (versions vacuum may not have removed yet).
            //
            // A claim reads at most `CLAIM_READ_PER_ROW` PENDING rows per row asked for, in
            // (available_at, id) order: `bound` is the first row past them, and the scan stops
            // there, so a claim's cost follows the batch, not the backlog. It answers whether rows
            // wait past the bound (`front_was_full`, on a row of NULLs when it claimed nothing): an
            // empty claim with rows past its bound found its front blocked (every aggregate in
            // front with a row in flight, or rows this node does not deliver), and the claimer then
            // looks for heads further on (`claim_heads_template`). Only the rows claimed are locked.
            //
            // `{floor}` is `TRUE`, or a lower bound on (available_at, id) the claimer learnt from its
            // last claim (`repository/claim.rs`): the scan then starts there instead of stepping over
            // the index entries of every row claimed since the last vacuum, which an open transaction
            // elsewhere keeps from being cleaned up at all. Each claim returns the next floor, the
            // first PENDING row at or above the bound (of any type), as `floor_available_at` and
            // `floor_id`, read in the claim's own snapshot.
            //
            // The scans for the bound and the candidates start at `floor`, the first PENDING row
            // there is: only that scan steps over what lies before it.
            //
            // The probe reads its aggregate only from `low`, the lowest live row of the outbox found
            // from `{low}` (0, or the `low_id` the claimer's last claim returned), through
            // `idx_outbox_live` (migration 0006): below it lie only entries of rows delivered, which
            // an open transaction elsewhere keeps, and a probe from a head would otherwise step over
            // every one of its aggregate's.
            claim_template: format!(
                "WITH low AS ( \
                   SELECT o.id FROM {outbox} o \
                   WHERE o.state IN ('PENDING', 'PROCESSING') AND o.id >= {{low}} \
                   ORDER BY o.id \
                   LIMIT 1), \
                 floor AS ( \
                   SELECT o.available_at, o.id FROM {outbox} o \
                   WHERE o.state = 'PENDING' AND ({{floor}}) \
                   ORDER BY o.available_at, o.id \
                   LIMIT 1), \
                 bound AS ( \
                   SELECT o.available_at, o.id FROM {outbox} o \
                   WHERE o.state = 'PENDING' AND {from_floor} \
                   ORDER BY o.available_at, o.id \
                   OFFSET $1 * {CLAIM_READ_PER_ROW} \
                   LIMIT 1), \
                 candidates AS ( \
                   SELECT o.id FROM {outbox} o \
                   WHERE {due} AND {from_floor} \
                     AND ({{below_bound}}) \
                     AND (o.aggregate_id IS NULL OR ( \
                           SELECT h.id FROM {outbox} h \
                           WHERE h.aggregate_id = o.aggregate_id \
                             AND h.state IN ('PENDING', 'PROCESSING') \
                             AND h.id < o.id AND h.id >= COALESCE((SELECT id FROM low), 0) \
                           ORDER BY h.id DESC \
                           LIMIT 1) IS NULL) \
                   ORDER BY o.available_at, o.id \
                   LIMIT $1 \
                   FOR UPDATE SKIP LOCKED), \
                 claimed AS ( \
                   UPDATE {outbox} AS o \
                   SET state = 'PROCESSING', claimed_by = $2, claimed_at = NOW(), updated_at = NOW() \
                   FROM candidates c WHERE o.id = c.id \
                   RETURNING {record_columns}) \
                 SELECT claimed.*, \
                   (SELECT id FROM low) AS low_id, \
                   (SELECT available_at FROM floor) AS floor_available_at, \
                   (SELECT id FROM floor) AS floor_id, \
                   {{front_was_full}} AS front_was_full \
                 FROM (VALUES (1)) AS turn (one) LEFT JOIN claimed ON TRUE"
            ),
            // The heads beyond a front of blocked rows: each aggregate's lowest live row, read
            // through `idx_outbox_aggregate` one descent per aggregate with live rows (a loose index
            // scan), and the rows without an aggregate, through their own index (migration 0005).
            // A head that is not due, or of a type this node cannot deliver, still blocks its
            // aggregate: only the head itself is ever taken. `{low}` is the lowest live row's id the
            // claim before found: the index's entries below it are left behind by rows delivered
            // (the claim's probe above), and are passed over in the index without reading a row.
            claim_heads_template: format!(
                "WITH RECURSIVE heads (aggregate_id, id) AS ( \
                   (SELECT h.aggregate_id, h.id FROM {outbox} h \
                    WHERE h.state IN ('PENDING', 'PROCESSING') AND h.aggregate_id IS NOT NULL \
                      AND h.id >= {{low}} \
                    ORDER BY h.aggregate_id, h.id \
                    LIMIT 1) \
                   UNION ALL \
                   SELECT n.aggregate_id, n.id FROM heads p CROSS JOIN LATERAL ( \
                     SELECT h.aggregate_id, h.id FROM {outbox} h \
                     WHERE h.state IN ('PENDING', 'PROCESSING') AND h.aggregate_id > p.aggregate_id \
                       AND h.id >= {{low}} \
                     ORDER BY h.aggregate_id, h.id \
                     LIMIT 1) n), \
                 without_aggregate AS ( \
                   SELECT o.id FROM {outbox} o \
                   WHERE {due} AND o.aggregate_id IS NULL \
                   ORDER BY o.available_at, o.id \
                   LIMIT $1), \
                 candidates AS ( \
                   SELECT o.id FROM {outbox} o \
                   WHERE o.id IN (SELECT id FROM heads UNION ALL SELECT id FROM without_aggregate) \
                     AND {due} \
                   ORDER BY o.available_at, o.id \
                   LIMIT $1 \
                   FOR UPDATE SKIP LOCKED) \
                 UPDATE {outbox} AS o \
                 SET state = 'PROCESSING', claimed_by = $2, claimed_at = NOW(), updated_at = NOW() \
                 FROM candidates c WHERE o.id = c.id \
                 RETURNING {record_columns}"
            ),
            // One statement for a whole batch of outcomes; RETURNING says which rows this node still
            // owned. A mark that names its claim's `claimed_at` is accepted only for that very claim.
            // Retries and dead letters record the error; dead letters count their last attempt. A
            // row due again is due its delay after the database's NOW(), as every time written is.
            // The planner reads the rows through `idx_outbox_processing`, which holds an entry of
            // every row claimed since the last vacuum, all of them while a transaction elsewhere
            // stays open: when every mark names its claim's time, the scan starts at the oldest of
            // them. (Looking the rows up by id instead doubled the latency under a steady stream
            // of inserts: the primary key's newest pages are where the inserts write.)
            mark: format!(
                "UPDATE {outbox} AS o SET \
                   state = u.state, \
                   attempt = COALESCE(u.attempt, o.attempt) \
                             + CASE WHEN u.state = 'DEAD_LETTER' THEN 1 ELSE 0 END, \
                   available_at = COALESCE(NOW() + u.delay_us * INTERVAL '1 microsecond', \
                                           o.available_at), \
                   published_at = CASE WHEN u.state = 'PUBLISHED' THEN NOW() ELSE o.published_at END, \
                   last_error = CASE WHEN u.records_error THEN u.last_error ELSE o.last_error END, \
                   error_type = CASE WHEN u.records_error THEN u.error_type ELSE o.error_type END, \
                   updated_at = NOW() \
                 FROM UNNEST($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::bool[], \
                             $6::text[], $7::text[], $9::timestamptz[]) \
                      AS u(id, state, attempt, delay_us, records_error, last_error, error_type, \
                           claimed_at) \
                 WHERE o.id = u.id AND o.claimed_by = $8 AND o.state = 'PROCESSING' \
                   AND o.claimed_at >= CASE WHEN array_position($9::timestamptz[], NULL) IS NULL \
                         THEN (SELECT min(c) FROM UNNEST($9::timestamptz[]) AS c) \
                         ELSE '-infinity' END \
                   AND (u.claimed_at IS NULL OR o.claimed_at = u.claimed_at) \
                 RETURNING o.id"
            ),
            reclaim_stale: format!(
                "UPDATE {outbox} SET state = 'PENDING', claimed_at = NULL, updated_at = NOW() \
                 WHERE state = 'PROCESSING' AND claimed_at < NOW() - $1 * INTERVAL '1 millisecond'"
            ),
            // The claim never takes these rows (it asks for the types of loaded plugins), so
            // only PENDING rows are concerned and no claim can race this update.
            dead_letter_invalid_types: format!(
                "UPDATE {outbox} SET state = 'DEAD_LETTER', last_error = $1, error_type = $2, \
                   updated_at = NOW() \
                 WHERE state = 'PENDING' AND destination_type !~ '^[A-Za-z0-9_-]{{1,32}}$' \
                 RETURNING id"
            ),
            cleanup_published: format!(
                "DELETE FROM {outbox} WHERE id IN ( \
                   SELECT id FROM {outbox} \
                   WHERE state = 'PUBLISHED' AND published_at < NOW() - make_interval(days => $1) \
                   LIMIT $2)"
            ),
            cleanup_dead_letter: format!(
                "DELETE FROM {outbox} WHERE id IN ( \
                   SELECT id FROM {outbox} \
                   WHERE state = 'DEAD_LETTER' AND updated_at < NOW() - make_interval(days => $1) \
                   LIMIT $2)"
            ),
            cleanup_inbox: format!(
                "DELETE FROM {inbox} WHERE (message_id, source) IN ( \
                   SELECT message_id, source FROM {inbox} \
                   WHERE processed_at < NOW() - make_interval(days => $1) \
                   LIMIT $2)"
            ),
            select_by_id: format!("SELECT {record_columns} FROM {outbox} o WHERE o.id = $1"),
            count_by_state: format!(
                "SELECT state::text, destination_type::text, count(*) FROM {outbox} \
                 WHERE state IN ({counted_states}) GROUP BY 1, 2"
            ),
            list_dead_letters: format!(
                "SELECT id, destination_type::text, destination::text, attempt, max_attempts, \
                   error_type::text, last_error, updated_at FROM {outbox} \
                 WHERE state = 'DEAD_LETTER' AND ($1::text IS NULL OR destination_type = $1) \
                   AND ($2::timestamptz IS NULL OR updated_at >= $2) \
                 ORDER BY updated_at DESC, id DESC LIMIT $3"
            ),
            // A fresh start: every attempt available again, claimable now.
            redrive_dead_letters: format!(
                "UPDATE {outbox} SET state = 'PENDING', attempt = 0, available_at = NOW(), \
                   claimed_at = NULL, updated_at = NOW() \
                 WHERE {DEAD_LETTER_SELECTION} RETURNING id"
            ),
            purge_dead_letters: format!("DELETE FROM {outbox} WHERE {DEAD_LETTER_SELECTION}"),
            // A row is due from its creation, or from its `scheduled_at` when that is later; a row
            // scheduled in the future is not late yet.
            oldest_pending_age: format!(
                "SELECT destination_type::text, \
                   EXTRACT(EPOCH FROM NOW() - min(GREATEST(created_at, scheduled_at)))::float8 \
                 FROM {outbox} WHERE state = 'PENDING' AND (scheduled_at IS NULL OR scheduled_at <= NOW()) \
                 GROUP BY 1"
            ),
            tables,
        }
    }
}
