-- A claim probes each candidate's aggregate for a live row ahead of it through idx_outbox_aggregate.
-- Each row delivered leaves that index entries of its PENDING and PROCESSING versions, and while any
-- transaction of the database stays open (holding back vacuum) none of them can be cleaned up: a
-- probe from a head down then steps over every row of its aggregate delivered since, so a claim
-- costs more the longer the transaction stays open. With this index a claim finds the lowest live
-- row (PENDING or PROCESSING) of the whole outbox, starting from the one it found last, and a probe
-- reads only from there (repository/sql.rs, the claim). Writing a row costs one more index entry.
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

CREATE INDEX idx_outbox_live ON outbox (id) WHERE state IN ('PENDING', 'PROCESSING');
