//! `context-agrees`: a test-only plugin for the differential test of `credentials.context`.
//! Its probe asks vigil for the reference's context (`credentials.context()`, vigil's own
//! reading) and also reads the served kubeconfig itself (`credentials.kubeconfig()`, then the
//! SDK's `select` of the reference's `#CONTEXT`), and compares the two field by field: the
//! context, cluster and user names, the server, the TLS settings, and each piece of material
//! (the same bytes when inline; when a file, the same path once the kubeconfig's path as
//! written is resolved against the kubeconfig's directory, as `read-file` resolves it).
//!
//! It sends no request. It answers `healthy` when both readings agree, with the detail
//! `context`; otherwise `not-probeable` (`reference-broken`) saying which fields differ and
//! how, naming lengths and paths but never the bytes of a certificate, key or token. A read
//! that fails is `not-probeable` naming the call and vigil's message.

use vigil_plugin_sdk::credentials::{self, CredentialsError};
use vigil_plugin_sdk::kubeconfig::{Material, Selection, resolve_path, select};
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
};

/// The plugin.
#[derive(Debug)]
pub struct ContextAgrees;

impl ProbePlugin for ContextAgrees {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "context-agrees",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: compares credentials.context with its own reading of the kubeconfig",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let Ok(Reference::File { path, context }) = Reference::parse(&request.cluster.reference)
        else {
            return Err(broken("context-agrees needs a kubeconfig file reference"));
        };
        let served = credentials::context().map_err(|error| failed("context", &error))?;
        let kubeconfig = credentials::kubeconfig().map_err(|error| failed("kubeconfig", &error))?;
        let read = select(kubeconfig.expose_secret(), context.as_deref())
            .map_err(|error| broken(format!("the plugin's own reading failed: {error}")))?;
        let differences = differences(&served, &read, &path);
        if differences.is_empty() {
            Ok(ProbeReport::healthy(0).with_detail("context", served.context))
        } else {
            Err(broken(format!(
                "credentials.context and the kubeconfig disagree: {}",
                differences.join("; ")
            )))
        }
    }
}

fn broken(message: impl Into<String>) -> ProbeError {
    ProbeError::not_probeable(ReasonClass::ReferenceBroken, message)
}

fn failed(call: &str, error: &CredentialsError) -> ProbeError {
    broken(format!("credentials.{call} failed: {}", error.message()))
}

/// Every field where `served` (vigil's context) and `read` (the plugin's selection of the
/// kubeconfig at `kubeconfig_path`) differ, as `field: served … but read …`.
fn differences(served: &Selection, read: &Selection, kubeconfig_path: &str) -> Vec<String> {
    let mut differences = Vec::new();
    let mut text = |field: &str, served: String, read: String| {
        if served != read {
            differences.push(format!("{field}: served {served} but read {read}"));
        }
    };
    text("context", served.context.clone(), read.context.clone());
    text("cluster", served.cluster.clone(), read.cluster.clone());
    text(
        "user",
        format!("{:?}", served.user),
        format!("{:?}", read.user),
    );
    text("server", served.server.clone(), read.server.clone());
    text(
        "tls-server-name",
        format!("{:?}", served.tls_server_name),
        format!("{:?}", read.tls_server_name),
    );
    text(
        "insecure-skip-tls-verify",
        served.insecure_skip_tls_verify.to_string(),
        read.insecure_skip_tls_verify.to_string(),
    );
    for (field, served, read) in [
        ("certificate-authority", &served.ca, &read.ca),
        (
            "client-certificate",
            &served.client_certificate,
            &read.client_certificate,
        ),
        ("client-key", &served.client_key, &read.client_key),
        ("token", &served.token, &read.token),
    ] {
        // A file as written in the kubeconfig, resolved as `read-file` resolves it.
        let read = read.as_ref().map(|material| match material {
            Material::File(written) => Material::File(resolve_path(kubeconfig_path, written)),
            inline @ Material::Inline(_) => inline.clone(),
        });
        if served.as_ref() != read.as_ref() {
            let (served, mut read) = (describe(served.as_ref()), describe(read.as_ref()));
            if served == read {
                read.push_str(" of other content");
            }
            text(field, served, read);
        }
    }
    differences
}

/// What a piece of material is, without its bytes.
fn describe(material: Option<&Material>) -> String {
    match material {
        None => "none".to_owned(),
        Some(Material::Inline(bytes)) => format!("{} inline bytes", bytes.expose_secret().len()),
        Some(Material::File(path)) => format!("the file {path}"),
    }
}

vigil_plugin_sdk::register!(ContextAgrees);
