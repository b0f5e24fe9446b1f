use crate::bindings::destination_handler::exports::outbox::relay::handler;
use crate::bindings::destination_handler::outbox::relay::types as wit;
use crate::bindings::publish_observer::exports::outbox::relay::observer;
use crate::{Envelope, PublishCompleted, PublishResult, Scope};

/// A destination handler: export it with [`crate::export_handler!`].
pub trait Handler {
    /// The destination type served, `^[A-Za-z0-9_-]{1,32}$`; one loaded handler per type.
    fn destination_type() -> String;

    /// Which rows of the type this handler may claim; asked once per claim cycle.
    /// Defaults to every row.
    fn claim_scope() -> Scope {
        Scope::All
    }

    /// Delivers one row. Called once per attempt; a panic counts as a retryable `trap`.
    fn publish(envelope: Envelope) -> PublishResult;
}

/// A publish observer: export it with [`crate::export_observer!`].
pub trait Observer {
    /// Called once per publish attempt, after the row's state change has settled.
    fn on_publish_completed(event: PublishCompleted, envelope: Envelope);
}

impl<T: Handler> handler::Guest for T {
    fn destination_type() -> String {
        T::destination_type()
    }

    fn claim_scope() -> Scope {
        T::claim_scope()
    }

    fn publish(envelope: wit::Envelope) -> PublishResult {
        T::publish(envelope.into())
    }
}

impl<T: Observer> observer::Guest for T {
    fn on_publish_completed(event: PublishCompleted, envelope: wit::Envelope) {
        T::on_publish_completed(event, envelope.into())
    }
}
