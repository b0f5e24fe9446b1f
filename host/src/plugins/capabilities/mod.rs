//! Host capabilities, one module each: the host side of every import a plugin may use.
//!
//! Each module holds the capability's grant (parsed from the manifest), the `Host` implementation of
//! its WIT interface, and its linker wiring. Everything a plugin is not granted is denied.

pub mod config;
pub mod http;
pub mod kafka;
pub mod log;
pub mod stdio;
pub mod wasi;

use wasmtime::component::Linker;

use crate::plugins::sandbox::StoreState;

/// Links every import a plugin may have: all of WASI 0.2 (so Python and JavaScript components, which
/// import more of it than they use, still load; what is not granted is denied by configuration),
/// `wasi:http`, and the `outbox:relay` host interfaces.
pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasi::add_to_linker(linker)?;
    http::add_to_linker(linker)?;
    log::add_to_linker(linker)?;
    config::add_to_linker(linker)?;
    kafka::add_to_linker(linker)
}
