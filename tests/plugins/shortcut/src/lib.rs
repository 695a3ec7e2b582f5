//! `shortcut`: a test-only plugin that tries to call a cluster down by a failure it caused
//! itself. The cluster parameter `mode` says how:
//!
//! - `timeout-zero`: `GET`s the recorded endpoint with `timeout-ms = 0`;
//! - `timeout-short`: the same with `timeout-ms = 50` (meant for a cluster that hangs);
//! - `garbage-ca`: the same, trusting a "CA" that is not a certificate.
//!
//! Whatever the request gets, it reports `unhealthy` with the class of the error (`timeout`,
//! `tls`, …), or `healthy` when it was answered. The host must find every one of these
//! failures to be the plugin's own: none may count against the cluster.

use vigil_plugin_sdk::http::{self, HttpError, Request, TlsOptions};
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// The plugin.
#[derive(Debug)]
pub struct Shortcut;

impl ProbePlugin for Shortcut {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "shortcut",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: fails its own requests and blames the cluster",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let mode = request
            .cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "mode")
            .map_or("timeout-zero", |(_, value)| value.as_str());
        let insecure = TlsOptions {
            insecure_skip_verify: true,
            ..TlsOptions::default()
        };
        let get = Request::get(request.cluster.endpoint.clone());
        let sent = match mode {
            "timeout-short" => get.with_tls(insecure).with_timeout_ms(50),
            "garbage-ca" => get.with_tls(TlsOptions {
                ca_pem: Some(b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n".to_vec()),
                ..TlsOptions::default()
            }),
            _ => get.with_tls(insecure).with_timeout_ms(0),
        };
        let class = match http::send(&sent) {
            Ok(response) => return Ok(ProbeReport::healthy(response.latency_ms)),
            Err(HttpError::Timeout) => ReasonClass::Timeout,
            Err(HttpError::Tls(_)) => ReasonClass::Tls,
            Err(HttpError::Refused(_)) => ReasonClass::Refused,
            Err(HttpError::Dns(_)) => ReasonClass::Dns,
            Err(_) => ReasonClass::BadResponse,
        };
        Ok(ProbeReport::unhealthy(
            class,
            format!("{mode}: the request failed ({class:?})"),
            0,
        ))
    }
}

vigil_plugin_sdk::register!(Shortcut);
