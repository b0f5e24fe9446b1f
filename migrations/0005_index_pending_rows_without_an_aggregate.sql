-- A claim reads a bounded front of PENDING rows in order and probes each one's aggregate for a live
-- row ahead of it. When that front is all rows whose aggregates already have a row in flight (a
-- backlog over fewer aggregates than the relay keeps in flight), the rows it can deliver lie
-- further on: the claimer then reads each aggregate's head through idx_outbox_aggregate, and the
-- rows without an aggregate through this index, instead of reading the whole backlog
-- (repository/sql.rs, the claim). Writing a row costs nothing more unless it has no aggregate.
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

CREATE INDEX idx_outbox_pending_without_aggregate ON outbox (available_at, id)
    WHERE state = 'PENDING' AND aggregate_id IS NULL;
