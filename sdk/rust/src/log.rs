//! Log lines, routed into the host's log and tagged with the plugin's name.
//!
//! The [`crate::log!`] macro formats; these functions take a finished line.

use crate::bindings::destination_handler::outbox::relay::log::{Level, log};

pub fn trace(message: &str) {
    log(Level::Trace, message)
}

pub fn debug(message: &str) {
    log(Level::Debug, message)
}

pub fn info(message: &str) {
    log(Level::Info, message)
}

pub fn warn(message: &str) {
    log(Level::Warn, message)
}

pub fn error(message: &str) {
    log(Level::Error, message)
}
