//! `trap-info`: a test-only plugin whose `info()` traps (a WebAssembly `unreachable`, not a
//! Rust panic, so nothing is written to stderr first). `info()` is what vigil calls to check
//! a candidate plugin before promoting it, so the host must refuse this component as a
//! candidate — log why, keep the previous generation (if any) serving — and never route a
//! probe to it. Its `accepts` and `probe` would answer normally (`true`, `healthy`) if ever
//! called.

use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct TrapInfo;

impl ProbePlugin for TrapInfo {
    fn info() -> PluginInfo {
        #[cfg(target_arch = "wasm32")]
        core::arch::wasm32::unreachable();
        // Native builds (tests, clippy) have no such instruction; abort is the nearest thing.
        #[cfg(not(target_arch = "wasm32"))]
        std::process::abort();
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::healthy(0))
    }
}

vigil_plugin_sdk::register!(TrapInfo);
