//! Values from the `[config]` table of the plugin's manifest.

/// The value of `key`, or `None` when the manifest does not set it (or there is no manifest).
pub fn get(key: &str) -> Option<String> {
    crate::bindings::destination_handler::outbox::relay::config::get(key)
}
