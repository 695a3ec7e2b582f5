//! `long-info`: a test-only plugin whose `info()` answers a name of 300 bytes, over the
//! 256-byte bound vigil puts on a plugin's name and version (they are shown in the API, the
//! log and every probe's attribution). The host must refuse this component as a candidate,
//! saying that the name is too long, and never route a probe to it. Its `accepts` and
//! `probe` would answer normally (`true`, `healthy`) if ever called.

use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct LongInfo;

impl ProbePlugin for LongInfo {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "n".repeat(300),
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: answers info() with a 300-byte name",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::healthy(0))
    }
}

vigil_plugin_sdk::register!(LongInfo);
