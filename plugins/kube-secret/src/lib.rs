//! `kube-secret`: vigil's probe plugin for clusters whose kubeconfig is held in a Kubernetes
//! Secret (`secret://NAMESPACE/NAME?key=KEY&context=CONTEXT`; key default
//! `kubeconfig`, context default the kubeconfig's `current-context`).
//!
//! A probe gets the context the reference selects through `credentials.context()` — vigil
//! reads the Secret's key from the management cluster with its own credentials, only in the
//! namespaces this plugin's `kube-secret.toml` grants (`secret-namespaces`), and resolves
//! the context itself — then probes exactly as `kubeconfig-file` does, through the guest
//! SDK's [`probe_selection`]: one `GET {server}/api/v1/namespaces?limit=1` with the
//! context's TLS material and bearer token. The plugin parses nothing. vigil lets the
//! request out because the server is the one of the context it served.
//!
//! A kubeconfig in a Secret must be self-contained: certificates, keys and tokens inline
//! (`*-data` fields, `token`). vigil serves no file for it, so a context naming a file is
//! not probeable (`reference-broken`), as a missing Secret, key or context and a value that
//! is not a kubeconfig are; an `exec` or `auth-provider` user is not probeable
//! (`exec-credentials`). A namespace the plugin is not granted is `denied` (inconclusive).
//! None of them ever counts against the cluster.
//!
//! Outcomes of the health request: as `kubeconfig-file` (see
//! [`vigil_plugin_sdk::apiserver::health_outcome`]).
//!
//! Grants (`kube-secret.toml`): `credentials` with `secret-namespaces`, `http`.

// The export glue comes from `register!`; this crate itself needs no `unsafe`.
#![forbid(unsafe_code)]

use vigil_plugin_sdk::apiserver::probe_resolved_context;
use vigil_plugin_sdk::credentials::CredentialsError;
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass, SecretBytes,
};

/// The plugin.
#[derive(Debug)]
pub struct KubeSecret;

impl ProbePlugin for KubeSecret {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "kube-secret",
            env!("CARGO_PKG_VERSION"),
            ["secret"],
            "Lists namespaces (limit=1) on the API server of a kubeconfig held in a Kubernetes Secret",
        )
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        // The context is vigil's to select (`credentials.context`); the names are for messages.
        let (namespace, name, key) = match Reference::parse(&request.cluster.reference) {
            Ok(Reference::Secret {
                namespace,
                name,
                key,
                ..
            }) => (namespace, name, key),
            Ok(other) => {
                return Err(ProbeError::not_probeable(
                    ReasonClass::NoPlugin,
                    format!(
                        "kube-secret probes secret:// references only, not {} ones",
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
        let source = source(&namespace, &name, &key);
        probe_resolved_context(&source, no_files)
    }
}

vigil_plugin_sdk::register!(KubeSecret);

/// How messages name the kubeconfig: `the kubeconfig in Secret NS/NAME key "KEY"` (vigil's
/// own messages about the context name the whole reference).
fn source(namespace: &str, name: &str, key: &str) -> String {
    format!("the kubeconfig in Secret {namespace}/{name} key {key:?}")
}

/// What reading a file named by a Secret's kubeconfig gives: nothing. The file would be
/// one of vigil's host, unrelated to the Secret; the kubeconfig must carry its material
/// inline (vigil refuses a Secret's context naming a file before serving it, so this is
/// only a second line). `invalid` makes the reference broken (not-probeable), never a
/// failure.
fn no_files(_path: &str) -> Result<SecretBytes, CredentialsError> {
    Err(CredentialsError::Invalid(
        "a kubeconfig in a Secret must be self-contained (inline *-data fields and token); vigil serves no file for it"
            .to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_plugin_sdk::apiserver::probe_selection;

    #[test]
    fn only_secret_references_are_accepted() {
        let cluster = |reference: &str| vigil_plugin_sdk::Cluster {
            name: "c".into(),
            endpoint: "https://127.0.0.1:6443".into(),
            reference: reference.into(),
            labels: Vec::new(),
            parameters: Vec::new(),
        };
        assert!(KubeSecret::accepts(&cluster("secret://ns/name")));
        assert!(KubeSecret::accepts(&cluster(
            "secret://ns/name?key=config&context=prod"
        )));
        assert!(!KubeSecret::accepts(&cluster("/etc/kube/config#prod")));
        assert!(!KubeSecret::accepts(&cluster(
            "https://example.invalid/healthz"
        )));
        assert!(!KubeSecret::accepts(&cluster("secret://only-namespace")));
    }

    #[test]
    fn a_context_naming_files_is_not_probeable() {
        // vigil refuses such a context before serving it; were one served, the plugin
        // still reads no file.
        let selection = vigil_plugin_sdk::kubeconfig::Selection {
            context: "x".into(),
            cluster: "c".into(),
            user: Some("u".into()),
            server: "https://127.0.0.1:6443".into(),
            tls_server_name: None,
            insecure_skip_tls_verify: false,
            ca: Some(vigil_plugin_sdk::kubeconfig::Material::File(
                "/etc/ca.crt".into(),
            )),
            client_certificate: None,
            client_key: None,
            token: Some(vigil_plugin_sdk::kubeconfig::Material::Inline(
                SecretBytes::new(b"t".to_vec()),
            )),
        };
        let source = source("ns", "name", "kubeconfig");
        match probe_selection(&selection, &source, no_files) {
            Err(ProbeError::NotProbeable(failure)) => {
                assert_eq!(failure.class, ReasonClass::ReferenceBroken);
                assert!(
                    failure
                        .message
                        .starts_with("the kubeconfig in Secret ns/name key \"kubeconfig\": ")
                        && failure.message.contains("self-contained"),
                    "{}",
                    failure.message
                );
            }
            other => panic!("expected not-probeable, got {other:?}"),
        }
    }
}
