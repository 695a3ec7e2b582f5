//! `picky`: a test-only plugin whose `accepts` reads the cluster's labels: it accepts a
//! cluster labelled `route=picky` and no other, and answers `healthy` at once from
//! `probe`. The host caches routing decisions; a test changes a cluster's labels and checks
//! that routing follows them. Not a hostile plugin.

use vigil_plugin_sdk::{Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest};

/// The plugin.
#[derive(Debug)]
pub struct Picky;

impl ProbePlugin for Picky {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "picky",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: accepts only clusters labelled route=picky",
        )
    }

    fn accepts(cluster: &Cluster) -> bool {
        cluster
            .labels
            .iter()
            .any(|(name, value)| name == "route" && value == "picky")
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::healthy(0))
    }
}

vigil_plugin_sdk::register!(Picky);
