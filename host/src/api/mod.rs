//! The application API: write outbox rows and deduplicate inbox messages inside your own sqlx
//! transaction, so they commit or roll back with your business writes.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_host::api::{Outbox, OutboxEntry};
//! use outbox_host::database::Tables;
//!
//! let outbox = Outbox::new(Tables::default());
//! let mut tx = pool.begin().await?;
//! // ... your business writes on `tx` ...
//! let entry = OutboxEntry::new("order.confirmed", "WEBHOOK", "https://hooks.example.com/orders",
//!     serde_json::json!({"order": 42}))
//!     .aggregate("Order", "42");
//! let id = outbox.publish(&mut tx, entry).await?;
//! tx.commit().await?;
//! # let _ = id; Ok(()) }
//! ```

mod entry;
mod inbox;
mod outbox;
mod persistence;

pub use entry::{DEFAULT_MAX_ATTEMPTS, InvalidEntry, OutboxEntry, RESERVED_HEADER_PREFIX};
pub(crate) use entry::{MAX_KEY_CHARS_SHOWN, validate_header};
pub use inbox::{Inbox, InboxResult};
pub use outbox::{Outbox, PublishError};
pub use persistence::PersistenceError;
