-- The inbox and outbox tables, frozen once landed: every later change is a new migration.
-- Unqualified on purpose: the migration runs with search_path set to the configured schema.

CREATE TABLE outbox (
    id               BIGSERIAL PRIMARY KEY,
    carrier_id       UUID         NOT NULL UNIQUE,
    aggregate_type   VARCHAR(255),
    aggregate_id     VARCHAR(255),
    event_type       VARCHAR(255) NOT NULL,
    destination      VARCHAR(255) NOT NULL,
    destination_type VARCHAR(32)  NOT NULL,
    payload          JSONB        NOT NULL,
    headers          JSONB,
    metadata         JSONB        NOT NULL DEFAULT '{}',
    scheduled_at     TIMESTAMPTZ,
    available_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    state            VARCHAR(32)  NOT NULL DEFAULT 'PENDING',
    attempt          INTEGER      NOT NULL DEFAULT 0,
    max_attempts     INTEGER      NOT NULL DEFAULT 20,
    claimed_at       TIMESTAMPTZ,
    claimed_by       VARCHAR(255),
    published_at     TIMESTAMPTZ,
    last_error       TEXT,
    error_type       VARCHAR(500),
    created_at       TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    updated_at       TIMESTAMPTZ  NOT NULL DEFAULT NOW()
);

CREATE INDEX idx_outbox_pending ON outbox (available_at ASC, id ASC) WHERE state = 'PENDING';
CREATE INDEX idx_outbox_processing ON outbox (claimed_at ASC) WHERE state = 'PROCESSING';
CREATE INDEX idx_outbox_aggregate ON outbox (aggregate_id, id)
    WHERE state IN ('PENDING', 'PROCESSING') AND aggregate_id IS NOT NULL;
CREATE INDEX idx_outbox_published ON outbox (published_at) WHERE state = 'PUBLISHED';
CREATE INDEX idx_outbox_dead_letter ON outbox (updated_at) WHERE state = 'DEAD_LETTER';

CREATE TABLE inbox (
    message_id   VARCHAR(255) NOT NULL,
    source       VARCHAR(255) NOT NULL,
    processed_at TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    PRIMARY KEY (message_id, source)
);

CREATE INDEX idx_inbox_processed_at ON inbox (processed_at);

CREATE FUNCTION notify_transactional_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('transactional_outbox_channel', NEW.id::text);
    RETURN NEW;
END;
$$;

CREATE TRIGGER transactional_outbox_notify
    AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION notify_transactional_outbox();
