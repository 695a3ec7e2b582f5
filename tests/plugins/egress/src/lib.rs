//! `egress`: a test-only plugin that sends a request where its grants do not allow. It
//! `GET`s a foreign URL — the cluster parameter `foreign-url`, default
//! `https://127.0.0.77:9/`, a host that is neither the cluster's API server, nor its
//! recorded endpoint, nor in the plugin's `NAME.toml` — which the host must answer `denied`
//! without opening a connection; then it `GET`s the cluster's recorded endpoint, which the
//! host must let through (any answer or wire error other than `denied` will do; TLS
//! verification is off for it, so a self-signed test server answers).
//!
//! It returns `healthy` (latency of the endpoint request) when the foreign request was
//! denied and the endpoint one was not; otherwise `unhealthy` (`plugin-fault`). The message
//! and the details `foreign` and `own` say what each request got, e.g. `denied`, `status
//! 401`, `refused`.

use vigil_plugin_sdk::http::{self, HttpError, Response, TlsOptions};
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// Where the foreign request goes unless the cluster's `foreign-url` parameter says.
const DEFAULT_FOREIGN_URL: &str = "https://127.0.0.77:9/";

/// The plugin.
#[derive(Debug)]
pub struct Egress;

impl ProbePlugin for Egress {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "egress",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: sends a request outside its egress grant",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let foreign_url = request
            .cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "foreign-url")
            .map_or(DEFAULT_FOREIGN_URL, |(_, value)| value.as_str());
        let insecure = TlsOptions {
            insecure_skip_verify: true,
            ..TlsOptions::default()
        };
        let foreign = http::get(foreign_url, Some(insecure.clone()), &[]);
        let own = http::get(&request.cluster.endpoint, Some(insecure), &[]);

        let foreign_denied = matches!(foreign, Err(HttpError::Denied(_)));
        let own_denied = matches!(own, Err(HttpError::Denied(_)));
        let summary = format!(
            "foreign {foreign_url}: {}; own {}: {}",
            describe(&foreign),
            request.cluster.endpoint,
            describe(&own)
        );
        let report = if foreign_denied && !own_denied {
            ProbeReport::healthy(own.as_ref().map_or(0, |response| response.latency_ms))
                .with_message(format!("egress policy held ({summary})"))
        } else {
            ProbeReport::unhealthy(
                ReasonClass::PluginFault,
                format!("egress policy did NOT hold ({summary})"),
                0,
            )
        };
        Ok(report
            .with_detail("foreign", describe(&foreign))
            .with_detail("own", describe(&own)))
    }
}

vigil_plugin_sdk::register!(Egress);

/// What a request got, in a word or two.
fn describe(result: &Result<Response, HttpError>) -> String {
    match result {
        Ok(response) => format!("status {}", response.status),
        Err(error) => error.reason_class().as_str().to_owned(),
    }
}
