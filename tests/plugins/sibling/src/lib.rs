//! `sibling`: a test-only plugin that tries to read a kubeconfig its reference does not
//! name. It reads its own kubeconfig (`credentials.kubeconfig()`, which must work), then asks
//! `credentials.read-file` for a sibling file in the same directory three ways: by its bare
//! name (which the host would resolve against the kubeconfig's directory), by its absolute
//! path, and through `../DIR/NAME`; then its own kubeconfig file itself, by its absolute path
//! and by its bare name (the file may hold other contexts' credentials: only
//! `credentials.kubeconfig`, the selected context alone, serves it). Every one of the five
//! must be refused with `denied` — not `not-found`, which would tell the plugin whether the
//! file exists.
//!
//! The sibling's file name is the cluster parameter `sibling` (default `sibling-config`).
//! The probe sends no request. It returns `healthy` only if its own read worked and all three
//! sibling reads were denied; otherwise `unhealthy` (`plugin-fault`), which the host downgrades
//! to `inconclusive` since no request was sent. Either way the report's message and details
//! (`own`, `by-name`, `by-absolute-path`, `by-traversal`, `kubeconfig-by-path`,
//! `kubeconfig-by-name`) say what each read returned, e.g.
//! `denied`, `not-found`, `read 1234 bytes`.

use vigil_plugin_sdk::credentials::{self, CredentialsError};
use vigil_plugin_sdk::reference::Reference;
use vigil_plugin_sdk::{
    Cluster, PluginInfo, ProbeError, ProbePlugin, ProbeReport, ProbeRequest, ReasonClass,
    SecretBytes,
};

/// The sibling's file name when the cluster has no `sibling` parameter.
const DEFAULT_SIBLING: &str = "sibling-config";

/// The plugin.
#[derive(Debug)]
pub struct Sibling;

impl ProbePlugin for Sibling {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "sibling",
            env!("CARGO_PKG_VERSION"),
            ["file"],
            "test: tries to read a sibling kubeconfig",
        )
    }

    fn accepts(_: &Cluster) -> bool {
        true
    }

    fn probe(request: ProbeRequest) -> Result<ProbeReport, ProbeError> {
        let Ok(Reference::File { path, .. }) = Reference::parse(&request.cluster.reference) else {
            return Err(ProbeError::not_probeable(
                ReasonClass::ReferenceBroken,
                "the sibling test plugin needs a kubeconfig file reference",
            ));
        };
        let sibling = request
            .cluster
            .parameters
            .iter()
            .find(|(name, _)| name == "sibling")
            .map_or(DEFAULT_SIBLING, |(_, value)| value.as_str());
        let (dir, own_name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
        let dir_name = dir.rsplit_once('/').map_or(dir, |(_, name)| name);

        let own = credentials::kubeconfig();
        let attempts = [
            ("by-name", credentials::read_file(sibling)),
            (
                "by-absolute-path",
                credentials::read_file(&format!("{dir}/{sibling}")),
            ),
            (
                "by-traversal",
                credentials::read_file(&format!("../{dir_name}/{sibling}")),
            ),
            ("kubeconfig-by-path", credentials::read_file(&path)),
            ("kubeconfig-by-name", credentials::read_file(own_name)),
        ];

        let own_ok = own.is_ok();
        let all_denied = attempts
            .iter()
            .all(|(_, result)| matches!(result, Err(CredentialsError::Denied(_))));
        let mut details = vec![("own".to_owned(), describe(&own))];
        details.extend(
            attempts
                .iter()
                .map(|(name, result)| ((*name).to_owned(), describe(result))),
        );
        let summary = details
            .iter()
            .map(|(name, result)| format!("{name}: {result}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut report = if own_ok && all_denied {
            ProbeReport::healthy(0).with_message(format!("isolation held ({summary})"))
        } else {
            ProbeReport::unhealthy(
                ReasonClass::PluginFault,
                format!("isolation did NOT hold ({summary})"),
                0,
            )
        };
        report.details = details;
        Ok(report)
    }
}

vigil_plugin_sdk::register!(Sibling);

/// What a read returned, without the content.
fn describe(result: &Result<SecretBytes, CredentialsError>) -> String {
    match result {
        Ok(bytes) => format!("read {} bytes", bytes.len()),
        Err(CredentialsError::Denied(_)) => "denied".to_owned(),
        Err(CredentialsError::NotFound(_)) => "not-found".to_owned(),
        Err(CredentialsError::Invalid(_)) => "invalid".to_owned(),
        Err(CredentialsError::ExecCredentials(_)) => "exec-credentials".to_owned(),
    }
}
