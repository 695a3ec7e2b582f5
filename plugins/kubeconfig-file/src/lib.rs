//! `kubeconfig-file`: vigil's probe plugin for clusters referenced by a kubeconfig file
//! (`/ABSOLUTE/PATH#CONTEXT`, or the file's `current-context` without `#CONTEXT`).
//!
//! A probe reads the kubeconfig through `credentials.kubeconfig()`, selects the context
//! exactly as vigil's host does ([`vigil_plugin_sdk::kubeconfig::select`]), reads the files
//! the context names through `credentials.read-file`, and sends one
//! `GET {server}/api/v1/namespaces?limit=1` through `http.send` with the context's TLS
//! material and bearer token — the ADR's health check. The host bounds the request by the
//! probe's budget and opens a fresh connection for it.
//!
//! | what happened | outcome |
//! |---|---|
//! | 200 | healthy, with the request's latency |
//! | 401, 403 | credentials-rejected (`unauthorized`) |
//! | 5xx | unhealthy `server-error` |
//! | any other status | unhealthy `bad-response` |
//! | timeout, refused, TLS, DNS | unhealthy with that class |
//! | anything else on the wire, oversized body | unhealthy `bad-response` |
//! | request denied by vigil | inconclusive `denied` |
//! | reference, kubeconfig, context, user or file unusable | not-probeable `reference-broken` |
//! | `exec` or `auth-provider` user | not-probeable `exec-credentials` |
//!
//! Grants (`kubeconfig-file.toml`): `log`, `credentials`, `http`.

// The export glue comes from `register!`; this crate itself needs no `unsafe`.
#![forbid(unsafe_code)]

use vigil_plugin_sdk::apiserver::ApiServer;
use vigil_plugin_sdk::http::{HttpError, Response};
use vigil_plugin_sdk::kubeconfig::select;
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, credentials,
};

/// The health check: list namespaces, at most one (the ADR's probe).
const HEALTH_PATH: &str = "/api/v1/namespaces?limit=1";

/// The longest piece of an API server's error message quoted in a report, in characters.
const MAX_QUOTED_CHARS: usize = 200;

/// The plugin.
#[derive(Debug)]
pub struct KubeconfigFile;

impl ProbePlugin for KubeconfigFile {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "kubeconfig-file",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "Lists namespaces (limit=1) on the API server of a kubeconfig file's context",
        )
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let (path, context) = match Reference::parse(&request.cluster.reference) {
            Ok(Reference::File { path, context }) => (path, context),
            Ok(other) => {
                return Err(ProbeError::not_probeable(
                    ReasonClass::NoPlugin,
                    format!(
                        "kubeconfig-file probes kubeconfig file references only, not {}:// ones",
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
        let kubeconfig = credentials::kubeconfig()
            .map_err(|error| error.probe_error(&format!("the kubeconfig {path}")))?;
        let selection =
            select(kubeconfig.expose_secret(), context.as_deref()).map_err(|error| {
                ProbeError::not_probeable(error.class(), format!("kubeconfig {path}: {error}"))
            })?;
        let server = ApiServer::connect(&selection).map_err(|error| in_file(error, &path))?;
        vigil_plugin_sdk::debug!(
            "GET {}{HEALTH_PATH} (context {:?})",
            server.base_url(),
            selection.context
        );
        outcome(server.get(HEALTH_PATH, None))
    }
}

vigil_plugin_sdk::register!(KubeconfigFile);

/// Adds the kubeconfig's path to a failure's message.
fn in_file(error: ProbeError, path: &str) -> ProbeError {
    match error {
        ProbeError::NotProbeable(mut failure) => {
            failure.message = format!("kubeconfig {path}: {}", failure.message);
            ProbeError::NotProbeable(failure)
        }
        ProbeError::Inconclusive(mut failure) => {
            failure.message = format!("kubeconfig {path}: {}", failure.message);
            ProbeError::Inconclusive(failure)
        }
    }
}

/// The probe's outcome from the health request's result.
fn outcome(result: Result<Response, HttpError>) -> Result<ProbeReport, ProbeError> {
    let response = match result {
        Ok(response) => response,
        Err(error) => return error.probe_result(),
    };
    let status = response.status;
    let latency = response.latency_ms;
    let report = match status {
        200 => ProbeReport::healthy(latency),
        401 | 403 => ProbeReport::credentials_rejected(
            format!(
                "the API server refused the credentials ({status}){}",
                server_says(&response)
            ),
            latency,
        ),
        500..=599 => ProbeReport::unhealthy(
            ReasonClass::ServerError,
            format!("the API server answered {status}{}", server_says(&response)),
            latency,
        ),
        _ => ProbeReport::unhealthy(
            ReasonClass::BadResponse,
            format!(
                "listing namespaces answered {status}, not 200{}",
                server_says(&response)
            ),
            latency,
        ),
    };
    Ok(report.with_detail("status", status.to_string()))
}

/// `: MESSAGE` from a Kubernetes `Status` body, when the response carries one: it says why
/// (`Unauthorized`, `etcdserver: request timed out`, …). Empty otherwise.
fn server_says(response: &Response) -> String {
    serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .as_ref()
        .and_then(|status| status.get("message"))
        .and_then(serde_json::Value::as_str)
        .map(|message| {
            let one_line: String = message
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(MAX_QUOTED_CHARS)
                .collect();
            format!(": {one_line}")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_plugin_sdk::Verdict;

    fn response(status: u16, body: &str) -> Result<Response, HttpError> {
        Ok(Response {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            latency_ms: 12,
        })
    }

    /// Checks a result's outcome: `Ok((verdict, reason))` or `Err(is_inconclusive, class)`.
    fn check(
        result: Result<Response, HttpError>,
        expected: Result<(Verdict, Option<ReasonClass>), (bool, ReasonClass)>,
    ) -> String {
        match (outcome(result), expected) {
            (Ok(report), Ok((verdict, reason))) => {
                assert_eq!((report.verdict, report.reason), (verdict, reason));
                report.message
            }
            (Err(ProbeError::Inconclusive(failure)), Err((true, class)))
            | (Err(ProbeError::NotProbeable(failure)), Err((false, class))) => {
                assert_eq!(failure.class, class);
                failure.message
            }
            (got, expected) => panic!("got {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn statuses_and_errors_map_to_the_designs_outcomes() {
        use ReasonClass as R;
        use Verdict as V;
        check(response(200, "{}"), Ok((V::Healthy, None)));
        check(
            response(401, ""),
            Ok((V::CredentialsRejected, Some(R::Unauthorized))),
        );
        check(
            response(403, ""),
            Ok((V::CredentialsRejected, Some(R::Unauthorized))),
        );
        check(response(500, ""), Ok((V::Unhealthy, Some(R::ServerError))));
        check(response(503, ""), Ok((V::Unhealthy, Some(R::ServerError))));
        check(response(404, ""), Ok((V::Unhealthy, Some(R::BadResponse))));
        check(response(204, ""), Ok((V::Unhealthy, Some(R::BadResponse))));
        check(
            Err(HttpError::Timeout),
            Ok((V::Unhealthy, Some(R::Timeout))),
        );
        check(
            Err(HttpError::Refused("x".into())),
            Ok((V::Unhealthy, Some(R::Refused))),
        );
        check(
            Err(HttpError::Tls("x".into())),
            Ok((V::Unhealthy, Some(R::Tls))),
        );
        check(
            Err(HttpError::Dns("x".into())),
            Ok((V::Unhealthy, Some(R::Dns))),
        );
        check(
            Err(HttpError::Protocol("x".into())),
            Ok((V::Unhealthy, Some(R::BadResponse))),
        );
        check(Err(HttpError::Denied("x".into())), Err((true, R::Denied)));
    }

    #[test]
    fn a_kubernetes_status_message_is_quoted_on_one_line() {
        let message = check(
            response(
                403,
                r#"{"kind":"Status","message":"namespaces is forbidden:\nUser \"x\""}"#,
            ),
            Ok((
                Verdict::CredentialsRejected,
                Some(ReasonClass::Unauthorized),
            )),
        );
        assert_eq!(
            message,
            "the API server refused the credentials (403): namespaces is forbidden: User \"x\""
        );
        let long = format!(r#"{{"message":"{}"}}"#, "m".repeat(1000));
        let message = check(
            response(500, &long),
            Ok((Verdict::Unhealthy, Some(ReasonClass::ServerError))),
        );
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn only_file_references_are_accepted() {
        let cluster = |reference: &str| vigil_plugin_sdk::Cluster {
            name: "c".into(),
            endpoint: "https://127.0.0.1:6443".into(),
            reference: reference.into(),
            labels: Vec::new(),
            parameters: Vec::new(),
        };
        assert!(KubeconfigFile::accepts(&cluster("/etc/kube/config#prod")));
        assert!(KubeconfigFile::accepts(&cluster("/etc/kube/config")));
        assert!(!KubeconfigFile::accepts(&cluster("secret://ns/name")));
        assert!(!KubeconfigFile::accepts(&cluster(
            "https://example.invalid/healthz"
        )));
        assert!(!KubeconfigFile::accepts(&cluster("relative/config")));
    }
}
