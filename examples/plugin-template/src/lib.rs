//! A vigil probe plugin to start from: it GETs a cluster's `http(s)://` health URL and
//! says the cluster is healthy when the status is the one expected (parameter
//! `expected-status`, default `200`).
//!
//! The shape every plugin has:
//! - [`ProbePlugin::info`]: who the plugin is and which reference schemes it handles;
//! - [`ProbePlugin::accepts`] (left to its default here): whether it can probe a cluster —
//!   by default, when the reference's scheme is one that `info` lists;
//! - [`ProbePlugin::probe`]: one probe, returning one of the outcomes of the contract;
//! - `register!`, which exports it all as the component's interface.
//!
//! Keep the decisions in pure functions like [`judge`], so that `cargo test` checks them
//! natively, without vigil.

use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, http,
};

/// The plugin.
#[derive(Debug)]
pub struct Template;

impl ProbePlugin for Template {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "plugin-template",
            env!("CARGO_PKG_VERSION"),
            ["http", "https"],
            "GETs a health URL and expects one status code",
        )
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let cluster = request.cluster;
        // Plain parameters come with the cluster, the defaults of NAME.toml under its own.
        let expected = match cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "expected-status")
        {
            None => 200,
            Some((_, text)) => text.parse().map_err(|_| {
                // A setting the plugin cannot use: the cluster cannot be probed as
                // configured. Never a failure of the cluster.
                ProbeError::not_probeable(
                    ReasonClass::ReferenceBroken,
                    format!("parameter expected-status: `{text}` is not a status code"),
                )
            })?,
        };
        vigil_plugin_sdk::debug!("GET {}", cluster.reference);
        // vigil sends the request (egress only to the cluster's own servers), bounded by
        // what is left of the probe's budget.
        match http::get(&cluster.reference, None, &[]) {
            Ok(response) => Ok(judge(expected, response.status, response.latency_ms)),
            // Refused, timeout, TLS, DNS: unhealthy; denied by vigil: inconclusive.
            Err(error) => error.probe_result(),
        }
    }
}

vigil_plugin_sdk::register!(Template);

/// The verdict on an answer: healthy when `status` is `expected`; credentials-rejected
/// on 401/403; unhealthy otherwise, quoting the status seen.
pub fn judge(expected: u16, status: u16, latency_ms: u32) -> ProbeReport {
    if status == expected {
        return ProbeReport::healthy(latency_ms);
    }
    let message = format!("status {status}, expected {expected}");
    let report = match status {
        401 | 403 => ProbeReport::credentials_rejected(message, latency_ms),
        500..=599 => ProbeReport::unhealthy(ReasonClass::ServerError, message, latency_ms),
        _ => ProbeReport::unhealthy(ReasonClass::BadResponse, message, latency_ms),
    };
    report.with_detail("status", status.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_plugin_sdk::Verdict;

    #[test]
    fn the_expected_status_is_healthy_and_others_say_what_was_seen() {
        assert_eq!(judge(200, 200, 5).verdict, Verdict::Healthy);
        let down = judge(200, 503, 5);
        assert_eq!(
            (down.verdict, down.reason),
            (Verdict::Unhealthy, Some(ReasonClass::ServerError))
        );
        assert_eq!(down.message, "status 503, expected 200");
        assert_eq!(judge(204, 200, 5).reason, Some(ReasonClass::BadResponse));
        assert_eq!(judge(200, 401, 5).verdict, Verdict::CredentialsRejected);
    }
}
