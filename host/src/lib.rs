//! outbox-host: a transactional-outbox relay for PostgreSQL.
