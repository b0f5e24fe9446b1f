-- Stale-lease recovery dead-letters PENDING rows whose destination_type no plugin could ever declare
-- (not matching ^[A-Za-z0-9_-]{1,32}$). Without an index that statement read every PENDING row and
-- matched each against the pattern: over a second on a million-row backlog, every 30 seconds. This
-- partial index holds only such rows, so it is empty in a healthy outbox and the statement reads
-- nothing; writing a row costs one match of its type against the pattern. Its predicate is the
-- statement's condition exactly (repository/sql.rs, dead_letter_invalid_types), as the planner needs.
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

CREATE INDEX idx_outbox_invalid_destination_type ON outbox (id)
    WHERE state = 'PENDING' AND destination_type !~ '^[A-Za-z0-9_-]{1,32}$';
