//! The WASI 0.2 context of a plugin: clocks and random only; no preopened directory, no environment
//! variable, no argument, no stdin, no socket (TCP, UDP and name lookup are off and every socket
//! address is refused). Stdout and stderr go to the plugin's log.

use wasmtime::component::Linker;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::plugins::capabilities::Capability;
use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::capabilities::stdio::GuestStdio;
use crate::plugins::sandbox::StoreState;

/// All of WASI 0.2 is linked, so Python and JavaScript components, which import more of it than
/// they use, still load; nothing to grant, since what is not given here is denied by the context.
pub(crate) enum Wasi {}

impl Capability for Wasi {
    type Grant = ();
    type Services = ();
    type PluginState = PluginLog;
    type InstanceState = WasiCtx;

    fn plugin_state(_: &(), _: &(), log: &PluginLog) -> PluginLog {
        log.clone()
    }

    fn instance_state(log: &PluginLog) -> WasiCtx {
        WasiCtx::builder()
            .stdout(GuestStdio::stdout(log.clone()))
            .stderr(GuestStdio::stderr(log.clone()))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build()
    }

    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
        wasmtime_wasi::p2::add_to_linker_async(linker)
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.capabilities.wasi,
            table: &mut self.table,
        }
    }
}
