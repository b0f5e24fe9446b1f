-- Wake-ups without a NOTIFY per row. The seed's trigger ran pg_notify for every inserted row, and
-- PostgreSQL serialises the commits of notifying transactions on one global lock: that halved the
-- rate at which applications commit outbox rows. Instead, each relay loop that has nothing to do arms
-- a doorbell (a row here, refreshed while it waits, expiring on its own if the relay dies), and an
-- inserting transaction notifies, with an empty payload, only while some doorbell is armed. A busy
-- relay keeps its doorbell unarmed, so the applications' commits pay one look at this small table.
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

DROP TRIGGER transactional_outbox_notify ON outbox;
DROP FUNCTION notify_transactional_outbox();

CREATE TABLE outbox_doorbell (
    relay       VARCHAR(255) PRIMARY KEY,
    armed_until TIMESTAMPTZ  NOT NULL
);

-- The function runs on the application's connection, whose search_path may not hold the configured
-- schema: it names the doorbell with the schema this migration runs in. A deferred constraint
-- trigger looks at the doorbell when the inserting transaction commits, not when it inserted: a
-- relay that arms while the transaction is open is rung by it, and the lookup's lock on the doorbell
-- is held only while the commit finishes. A relay arms under an exclusive lock on the doorbell, so it
-- waits for exactly those commits; after that, every row is either visible to its next claim or
-- rings. PostgreSQL folds the notifications of one transaction (one channel, one payload) into one.
DO $migration$
BEGIN
    EXECUTE format($function$
        CREATE FUNCTION ring_outbox_doorbell() RETURNS trigger
        LANGUAGE plpgsql AS $body$
        BEGIN
            IF EXISTS (SELECT 1 FROM %I.outbox_doorbell WHERE armed_until > clock_timestamp()) THEN
                PERFORM pg_notify('transactional_outbox_channel', '');
            END IF;
            RETURN NULL;
        END;
        $body$
    $function$, current_schema());
END;
$migration$;

CREATE CONSTRAINT TRIGGER transactional_outbox_doorbell
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ring_outbox_doorbell();
