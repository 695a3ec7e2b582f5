//! `noop`: a test-only plugin that does nothing. Its `probe` answers `healthy` at once,
//! without any host call, so that a benchmark of it measures only what the host spends per
//! call: a fresh store and sandbox, instantiation, the call itself and the outcome mapping.
//! `accepts` is the SDK's default (kubeconfig file references, the scheme `info` lists).
//! Not a hostile plugin: the benchmark `plugin-overhead` (tests/e2e) uses it.

use vigil_plugin_sdk::{PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct Noop;

impl ProbePlugin for Noop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "noop",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: answers healthy at once, without any host call",
        )
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::healthy(0))
    }
}

vigil_plugin_sdk::register!(Noop);
