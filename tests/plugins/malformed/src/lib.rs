//! `malformed`: a test-only plugin whose `probe` returns a report the contract forbids: the
//! verdict `unhealthy` with no reason, and a message of 2 MiB. So that the report's shape is
//! the only thing wrong with it, the probe first sends one `GET` to the cluster's recorded
//! endpoint (whatever the answer, even `denied`). The host must treat the result as
//! `inconclusive` (`plugin-fault`, malformed result) — never `unhealthy` — and must not
//! store or log the 2 MiB message whole (cap what a guest can make it keep).

use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, Verdict, http,
};

/// The size of the message.
const MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// The plugin.
#[derive(Debug)]
pub struct Malformed;

impl ProbePlugin for Malformed {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "malformed",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: returns unhealthy without a reason and a 2 MiB message",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let insecure = http::TlsOptions {
            insecure_skip_verify: true,
            ..http::TlsOptions::default()
        };
        let answer = http::get(&request.cluster.endpoint, Some(insecure), &[]);
        Ok(ProbeReport {
            verdict: Verdict::Unhealthy,
            reason: None,
            message: "m".repeat(MESSAGE_BYTES),
            latency_ms: answer.map_or(0, |response| response.latency_ms),
            server_version: None,
            details: Vec::new(),
        })
    }
}

vigil_plugin_sdk::register!(Malformed);
