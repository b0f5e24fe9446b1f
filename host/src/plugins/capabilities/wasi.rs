//! The WASI 0.2 context of a plugin: clocks and random only; no preopened directory, no environment
//! variable, no argument, no stdin, no socket (TCP, UDP and name lookup are off and every socket
//! address is refused). Stdout and stderr go to the plugin's log.

use wasmtime::component::Linker;
use wasmtime_wasi::WasiCtx;

use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::capabilities::stdio::GuestStdio;
use crate::plugins::sandbox::StoreState;

pub(crate) fn sandboxed_context(log: &PluginLog) -> WasiCtx {
    WasiCtx::builder()
        .stdout(GuestStdio::stdout(log.clone()))
        .stderr(GuestStdio::stderr(log.clone()))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .build()
}

pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)
}
