-- Wake-ups that cost the inserting transactions almost nothing. Migration 0002's per-row deferred
-- constraint trigger looked up a doorbell table at every commit, which cost the applications about
-- 10% of their insert rate even with no relay waiting. Here the doorbell is an advisory lock, and
-- the trigger runs once per statement, guarded by a WHEN clause that needs no function call:
--
-- - an idle relay holds (or waits for) the doorbell lock exclusively, on a connection of its own;
-- - an inserting statement tries to take the same lock shared, for the rest of its transaction. It
--   gets it while no relay waits: nothing is queued and nothing notifies. It fails while a relay
--   holds the lock or waits for it, and the transaction then notifies at commit (empty payload;
--   PostgreSQL folds one transaction's notifications into one);
-- - a relay's exclusive request waits for exactly the transactions that took the shared lock
--   before it, so once it holds the lock every row is either visible to its next claim or rings.
--
-- The lock key is (1868719218, hashtext(schema)): "obdr" and the schema the migration runs in, so
-- deployments in other schemas of the same database have doorbells of their own. The relay computes
-- the same key (repository/doorbell.rs).
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

DROP TRIGGER transactional_outbox_doorbell ON outbox;
DROP FUNCTION ring_outbox_doorbell();
DROP TABLE outbox_doorbell;

CREATE FUNCTION ring_outbox_doorbell() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('transactional_outbox_channel', '');
    RETURN NULL;
END;
$$;

DO $migration$
BEGIN
    EXECUTE format($trigger$
        CREATE TRIGGER transactional_outbox_doorbell
            AFTER INSERT ON outbox
            FOR EACH STATEMENT
            WHEN (NOT pg_try_advisory_xact_lock_shared(1868719218, hashtext(%L)))
            EXECUTE FUNCTION ring_outbox_doorbell()
    $trigger$, current_schema());
END;
$migration$;
