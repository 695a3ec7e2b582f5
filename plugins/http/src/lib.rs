//! `http`: vigil's probe plugin for health URLs — clusters (or any service) whose reference
//! is an `http://…` or `https://…` URL.
//!
//! A probe sends one request to the URL through the `http` host interface and checks the
//! answer against the cluster's conditions, like Gatus or blackbox_exporter: the status
//! code, a substring of the body or a JSON value at a pointer, and the latency. Every
//! condition that does not hold is reported: the status and latency seen always, what the
//! body holds only when the operator opts in (`operator.quote-response`).
//!
//! # Parameters
//!
//! Per cluster (`parameters` in the REST API), over the defaults of `http.toml`:
//!
//! | parameter | meaning | default |
//! |---|---|---|
//! | `method` | the request method | `GET` |
//! | `header.NAME` | a request header `NAME`; its value inline, or a credential reference (`file:///ABS/PATH`, `secret://NAMESPACE/NAME?key=KEY`) that vigil resolves when the probe runs, holding the whole value, e.g. `Bearer eyJ…` (a final newline is dropped) | none |
//! | `credential-headers` | comma-separated header names whose `header.NAME` is a credential reference (`Authorization` is always looked up) | none |
//! | `body` | the request body | none |
//! | `status` | expected status codes: codes, ranges and classes, comma-separated (`200`, `200-299`, `2xx,304`) | `2xx` |
//! | `body-contains` | text the body must contain | none |
//! | `json-pointer` | an RFC 6901 pointer into the JSON body (`/status`, `/checks/0/ok`); alone, the value must exist | none |
//! | `json-equals` | the value expected at `json-pointer`: JSON (`true`, `3`, `"UP"`) or plain text compared with a string value (`UP`) | none |
//! | `max-latency-ms` | the longest the request may take, in milliseconds | none |
//! | `ca` | CA certificates (PEM) to trust for an `https` URL, inline or as a credential reference | the system roots |
//! | `operator.quote-response` | `true`: a failed body or JSON condition quotes the start of the body or the value seen. Only `http.toml` can set it (vigil ignores `operator.*` parameters of a cluster): the caller who registers a cluster chooses its URL, and quoting would let it read any page vigil can reach | `false` |
//!
//! Without the opt-in, `body-contains` and `json-equals` answer one bit each (the text is
//! there or not, the value is the one expected or not): a caller who can register clusters
//! and read their status learns that much about any URL vigil may reach, no more.
//! vigil keeps credential references out of the cluster record a plugin sees, so the plugin
//! cannot list them: it reads `header.Authorization` always, and `header.NAME` for each
//! name in `credential-headers`, through `credentials.parameter`, which resolves the
//! reference at call time. Their values are sent and never quoted: a report that would
//! quote the body shows `***` wherever a credential's value appears in it.
//!
//! # Outcomes
//!
//! | what happened | outcome |
//! |---|---|
//! | every condition holds | healthy |
//! | unexpected 401 or 403 | credentials-rejected (`unauthorized`) |
//! | unexpected 5xx | unhealthy `server-error` |
//! | any other unexpected status, body or JSON condition failed | unhealthy `bad-response` |
//! | slower than `max-latency-ms` | unhealthy `timeout` |
//! | timeout, refused, TLS, DNS | unhealthy with that class |
//! | request denied by vigil | inconclusive `denied` |
//! | a parameter that cannot be used, a credential reference that does not resolve | not-probeable `reference-broken` |
//!
//! With several failed conditions the class is the first one's, in the order of the table;
//! the message and the `failed.CONDITION` details list them all.
//!
//! Grants (`http.toml`): `log`, `credentials`, `http`.

// The export glue comes from `register!`; this crate itself needs no `unsafe`.
#![forbid(unsafe_code)]

pub mod conditions;

use std::collections::BTreeMap;

use vigil_plugin_sdk::credentials::CredentialsError;
use vigil_plugin_sdk::http::{Request, TlsOptions};
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, SecretBytes,
    credentials, http,
};

use crate::conditions::{CA, HEADER_PREFIX, Observed, Settings, evaluate, report};

/// The plugin.
#[derive(Debug)]
pub struct Http;

impl ProbePlugin for Http {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "http",
            env!("CARGO_PKG_VERSION"),
            ["http", "https"],
            "Requests a health URL and checks its status, body, JSON value and latency",
        )
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let url = match Reference::parse(&request.cluster.reference) {
            Ok(Reference::Http { url }) => url,
            Ok(other) => {
                return Err(ProbeError::not_probeable(
                    ReasonClass::NoPlugin,
                    format!(
                        "the http plugin probes http(s):// references only, not {} ones",
                        other.scheme()
                    ),
                ));
            }
            Err(error) => {
                return Err(ProbeError::not_probeable(
                    ReasonClass::ReferenceBroken,
                    format!("invalid reference: {error}"),
                ));
            }
        };
        let plain: BTreeMap<String, String> = request.cluster.parameters.into_iter().collect();
        let settings = Settings::parse(&plain).map_err(|error| {
            ProbeError::not_probeable(ReasonClass::ReferenceBroken, error.to_string())
        })?;

        let mut outgoing = Request::get(url.clone());
        outgoing.method.clone_from(&settings.method);
        outgoing.headers.clone_from(&settings.plain_headers);
        outgoing.body = settings.body.clone().map(String::into_bytes);
        let mut secrets = Vec::new();
        for (name, required) in settings.referenced_headers() {
            let parameter = format!("{HEADER_PREFIX}{name}");
            let Some(value) = resolved(&parameter, required)? else {
                continue;
            };
            let text = String::from_utf8(value.into_exposed())
                .ok()
                .map(|text| text.trim_end_matches(['\r', '\n']).to_owned())
                .filter(|text| !text.contains(['\r', '\n']))
                .ok_or_else(|| {
                    ProbeError::not_probeable(
                        ReasonClass::ReferenceBroken,
                        format!("parameter {parameter}: the value is not one line of text"),
                    )
                })?;
            secrets.push(text.clone());
            outgoing.headers.push((name, text));
        }
        if url.starts_with("https://") {
            let ca_pem = match plain.get(CA) {
                Some(pem) => Some(pem.clone().into_bytes()),
                None => resolved(CA, false)?.map(SecretBytes::into_exposed),
            };
            outgoing.tls = Some(TlsOptions {
                ca_pem,
                ..TlsOptions::default()
            });
        }

        vigil_plugin_sdk::debug!("{} {url}", settings.method);
        let response = match http::send(&outgoing) {
            Ok(response) => response,
            Err(error) => return error.probe_result(),
        };
        let observed = Observed {
            status: response.status,
            body: &response.body,
            latency_ms: response.latency_ms,
        };
        let secrets: Vec<&[u8]> = secrets.iter().map(String::as_bytes).collect();
        let failed = evaluate(&settings.conditions, &observed, &secrets);
        Ok(report(&observed, &failed))
    }
}

vigil_plugin_sdk::register!(Http);

/// A parameter's value as the host resolves it (a credential reference read now, a plain
/// value as it is). An absent parameter is `None`, or an error when `required`.
fn resolved(parameter: &str, required: bool) -> Result<Option<SecretBytes>, ProbeError> {
    match credentials::parameter(parameter) {
        Ok(value) => Ok(Some(value)),
        Err(CredentialsError::NotFound(_)) if !required => Ok(None),
        Err(error) => Err(error.probe_error(&format!("parameter {parameter}"))),
    }
}
