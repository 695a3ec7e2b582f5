//! `loop`: a test-only plugin whose `probe` never returns. It spins forever without calling
//! the host, so only the host's CPU deadline (epoch interruption) can stop it. The host must
//! interrupt it within the probe's deadline, report the probe `inconclusive`
//! (`plugin-fault`, deadline exceeded) — never `unhealthy`, since no request reached the
//! cluster — and keep serving other probes. `info` and `accepts` answer normally.

use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct Loop;

impl ProbePlugin for Loop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "loop",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: probe never returns",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let mut spins: u64 = 0;
        loop {
            // `black_box` keeps the loop's work observable, so the compiler cannot reason
            // about (or remove) it.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

vigil_plugin_sdk::register!(Loop);
