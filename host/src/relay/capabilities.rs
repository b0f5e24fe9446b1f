//! What this node may claim this cycle: the claim scope of every loaded handler.

use crate::plugins::{PluginSet, Scope};
use crate::repository::{ClaimScope, RelayCapabilities};

/// Asks each handler for its scope. A handler whose call fails makes its scope `Unavailable`, and the
/// repository then fails the whole cycle closed; the log says which plugin and why.
pub(super) async fn ask(plugins: &PluginSet) -> RelayCapabilities {
    let mut capabilities = RelayCapabilities::new();
    for handler in plugins.handlers() {
        let scope = match handler.claim_scope().await {
            Ok(Scope::All) => ClaimScope::All,
            Ok(Scope::Destinations(targets)) => ClaimScope::Destinations(targets),
            Err(error) => {
                tracing::debug!(plugin = handler.name(), error_type = error.error_type(), %error, "claim-scope call failed");
                ClaimScope::Unavailable
            }
        };
        capabilities.insert(handler.destination_type(), scope);
    }
    capabilities
}
