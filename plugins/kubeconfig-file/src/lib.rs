//! `kubeconfig-file`: vigil's probe plugin for clusters referenced by a kubeconfig file
//! (`/ABSOLUTE/PATH#CONTEXT`, or the file's `current-context` without `#CONTEXT`).
//!
//! A probe asks vigil for the reference's context through `credentials.context()`: vigil
//! resolved it, exactly as its own reading of kubeconfigs does, from the file it read just
//! before the call (the server, the TLS settings and material, the user's credentials), so
//! the plugin parses nothing. The SDK's [`probe_selection`] then reads the files the
//! context names through `credentials.read-file` (a token file at every probe: projected
//! tokens rotate) and sends one `GET {server}/api/v1/namespaces?limit=1` through
//! `http.send` with the context's TLS material and bearer token — vigil's health check of a
//! Kubernetes API server.
//! The host bounds the request by the probe's budget and opens a fresh connection for it.
//! The `kube-secret` plugin probes the same way from a kubeconfig held in a Secret, which
//! it reads and selects itself.
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
//! | reference, kubeconfig, context, user or file unusable | not-probeable `reference-broken` (by vigil before the call, or by the plugin for a file it cannot read or that is not PEM) |
//! | `exec` user | the credential vigil ran the command for (`credentials.exec-credential`), a 401 retried once with a fresh one; a command vigil may not run, or that fails, is not-probeable `exec-credentials` |
//! | `auth-provider` user | not-probeable `exec-credentials` (by vigil, before the call) |
//!
//! Grants (`kubeconfig-file.toml`): `credentials`, `exec-credentials`, `http` (it writes no log line: vigil logs
//! where each request goes).

// The export glue comes from `register!`; this crate itself needs no `unsafe`.
#![forbid(unsafe_code)]

use vigil_plugin_sdk::apiserver::probe_resolved_context;
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, credentials,
};

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
        let path = match Reference::parse(&request.cluster.reference) {
            Ok(Reference::File { path, .. }) => path,
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
        // vigil resolved the reference's context (its `#CONTEXT`, else the file's
        // `current-context`) from the file it read for this probe; a context it cannot
        // resolve never reaches the plugin.
        probe_resolved_context(&format!("kubeconfig {path}"), credentials::read_file)
    }
}

vigil_plugin_sdk::register!(KubeconfigFile);

#[cfg(test)]
mod tests {
    use super::*;

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
