//! `stall`: a test-only plugin that asks for an unbounded wait. It sends one `GET` with
//! `timeout-ms` = `u32::MAX` (about 50 days) to the cluster parameter `url`, default the
//! cluster's recorded endpoint — in the host's test, a server that accepts connections and
//! never answers. Epochs cannot interrupt a host call, so the host must bound the request by
//! what is left of the probe's budget itself, answer `timeout`, and record that the cluster
//! timed out.
//!
//! Given `timeout`, the probe returns `unhealthy` (`timeout`) — which the host accepts, since
//! a request reached the cluster. Any other answer is reported as it came (`unhealthy`
//! `bad-response` with the status, or the error's class), so a host test sees what happened.

use vigil_plugin_sdk::http::{self, HttpError, Request, TlsOptions};
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// The plugin.
#[derive(Debug)]
pub struct Stall;

impl ProbePlugin for Stall {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "stall",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: asks for a request timeout of u32::MAX milliseconds",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let url = request
            .cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "url")
            .map_or(request.cluster.endpoint.as_str(), |(_, value)| {
                value.as_str()
            });
        let stalled = Request::get(url)
            .with_tls(TlsOptions {
                insecure_skip_verify: true,
                ..TlsOptions::default()
            })
            .with_timeout_ms(u32::MAX);
        match http::send(&stalled) {
            Err(HttpError::Timeout) => Ok(ProbeReport::unhealthy(
                ReasonClass::Timeout,
                format!(
                    "no answer within the budget of {} ms (the request asked for u32::MAX ms)",
                    request.timeout_ms
                ),
                request.timeout_ms,
            )),
            Ok(response) => Ok(ProbeReport::unhealthy(
                ReasonClass::BadResponse,
                format!("the stalling server answered {}", response.status),
                response.latency_ms,
            )),
            Err(error) => error.probe_result(),
        }
    }
}

vigil_plugin_sdk::register!(Stall);
