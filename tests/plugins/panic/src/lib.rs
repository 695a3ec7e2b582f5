//! `panic`: a test-only plugin whose `probe` panics. On wasm32 a panic aborts, which traps
//! the instance; the host must report the probe `inconclusive` (`plugin-fault`), log the
//! panic message the guest wrote to stderr, and keep the plugin loaded for the next probe
//! (each call runs in a fresh instance). `info` and `accepts` answer normally.

use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct Panic;

impl ProbePlugin for Panic {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "panic",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: probe panics",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        panic!(
            "vigil test plugin: deliberate panic while probing {}",
            request.cluster.name
        );
    }
}

vigil_plugin_sdk::register!(Panic);
