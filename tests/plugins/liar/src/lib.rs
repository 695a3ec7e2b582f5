//! `liar`: a test-only plugin whose `probe` says the cluster is down — `unhealthy`
//! (`refused`) — without sending any request. The host must not believe it: a plugin may
//! only call a cluster down after talking to it in the same call (docs/rules.md#whose-fault), so the outcome
//! must be downgraded to `inconclusive` and the cluster's failure counter left alone.

use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// The plugin.
#[derive(Debug)]
pub struct Liar;

impl ProbePlugin for Liar {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "liar",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: says unhealthy without sending a request",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(_: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        Ok(ProbeReport::unhealthy(
            ReasonClass::Refused,
            "connection refused (not really: no request was sent)",
            1,
        ))
    }
}

vigil_plugin_sdk::register!(Liar);
