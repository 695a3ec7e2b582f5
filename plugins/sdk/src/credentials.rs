//! Reading the probed cluster's credentials (the `credentials` host interface; needs
//! `credentials = true` in the plugin's `NAME.toml`).
//!
//! A plugin gets exactly what the cluster's reference names and nothing else: the kubeconfig
//! itself ([`kubeconfig`]), the files its selected context names ([`read_file`], by the path
//! as written in the kubeconfig) and the cluster's credential parameters ([`parameter`]).
//! Everything comes back as [`SecretBytes`], which never prints itself.

use crate::bindings::vigil::plugin::credentials as imported;
use crate::kubeconfig::{Material, Selection};
use crate::{ProbeError, ReasonClass, SecretBytes};

pub use imported::CredentialsError;

/// The kubeconfig named by the cluster's reference (a file, or a Secret's key of a
/// `secret://` reference), reduced to the context the reference selects, with that
/// context's cluster and user, as vigil read them, and rendered as JSON (which any YAML
/// reader takes; [`crate::kubeconfig::select`] reads it fast). A Secret's kubeconfig whose
/// context vigil cannot resolve is served as stored, so that [`crate::kubeconfig::select`]
/// says what is wrong.
pub fn kubeconfig() -> Result<SecretBytes, CredentialsError> {
    imported::kubeconfig().map(SecretBytes::new)
}

/// The context the cluster's kubeconfig reference selects (a file's, or a `secret://`
/// reference's, read from the Secret now), as vigil resolved it for this probe: what
/// [`crate::kubeconfig::select`] finds in [`kubeconfig`], without parsing anything in the
/// plugin. A file the context names comes as [`Material::File`] with its absolute path, for
/// [`read_file`] (never for a Secret's kubeconfig, which must be self-contained). A Secret's
/// context that cannot be resolved is [`CredentialsError::Invalid`], or
/// [`CredentialsError::ExecCredentials`] for an `auth-provider` user. An `exec` user's
/// context comes without credentials: ask [`exec_credential`] for them;
/// [`CredentialsError::NotFound`] for an `http(s)://` reference.
pub fn context() -> Result<Selection, CredentialsError> {
    imported::context().map(Selection::from)
}

impl From<imported::KubeContext> for Selection {
    fn from(context: imported::KubeContext) -> Self {
        let material = |material: Option<imported::Material>| {
            material.map(|material| match material {
                imported::Material::Data(bytes) => Material::Inline(SecretBytes::new(bytes)),
                imported::Material::File(path) => Material::File(path),
            })
        };
        Self {
            context: context.context,
            cluster: context.cluster,
            user: context.user,
            server: context.server,
            tls_server_name: context.tls_server_name,
            insecure_skip_tls_verify: context.insecure_skip_tls_verify,
            ca: material(context.certificate_authority),
            client_certificate: material(context.client_certificate),
            client_key: material(context.client_key),
            token: material(context.token),
        }
    }
}

/// What the `exec` command of the selected context's user gave. `Debug` shows which
/// credentials are set, never their values.
#[derive(Clone)]
pub struct ExecCredential {
    /// The bearer token.
    pub token: Option<SecretBytes>,
    /// The client certificate (PEM); present exactly when `client_key` is.
    pub client_certificate: Option<SecretBytes>,
    /// The client certificate's private key (PEM).
    pub client_key: Option<SecretBytes>,
    /// When it expires, in seconds since the Unix epoch, if the command said.
    pub expires_at: Option<u64>,
}

impl std::fmt::Debug for ExecCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecCredential")
            .field("token", &self.token.is_some())
            .field("client_certificate", &self.client_certificate.is_some())
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The credential of the selected context's user when the user has an `exec` section
/// (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`…): vigil runs the command
/// itself, as kubectl does, keeps the credential until shortly before it expires, and runs
/// the command again after the cluster answered 401 to a request that carried it. Needs
/// `exec-credentials = true` in the plugin's `NAME.toml`, and the operator's allowing the
/// command and its arguments (`VIGIL_EXEC_ALLOW_FILE`) and the names its `env` sets
/// (`VIGIL_EXEC_KUBECONFIG_ENV`); [`CredentialsError::ExecCredentials`] says what is missing,
/// or why the command failed. [`CredentialsError::NotFound`] when the user has no `exec`
/// section.
pub fn exec_credential() -> Result<ExecCredential, CredentialsError> {
    imported::exec_credential().map(|issued| ExecCredential {
        token: issued
            .token
            .map(|token| SecretBytes::new(token.into_bytes())),
        client_certificate: issued.client_certificate.map(SecretBytes::new),
        client_key: issued.client_key.map(SecretBytes::new),
        expires_at: issued.expires_at,
    })
}

impl Selection {
    /// This selection authenticated with `credential` (an `exec` command's): its token and
    /// client certificate replace the selection's own.
    pub fn with_exec_credential(&self, credential: &ExecCredential) -> Self {
        let inline = |bytes: &Option<SecretBytes>| bytes.clone().map(Material::Inline);
        Self {
            token: inline(&credential.token),
            client_certificate: inline(&credential.client_certificate),
            client_key: inline(&credential.client_key),
            ..self.clone()
        }
    }
}

/// A file that the kubeconfig's selected context names — certificate authority, client
/// certificate or key, token file — by the path written in the kubeconfig. vigil resolves a
/// relative path against the kubeconfig's directory, as kubectl does, and denies any path
/// the selected context does not name.
pub fn read_file(path: &str) -> Result<SecretBytes, CredentialsError> {
    imported::read_file(path).map(SecretBytes::new)
}

/// The value of the cluster's parameter `name` (the cluster's own over the defaults of
/// `NAME.toml`), e.g. a header's token.
///
/// A parameter given as a credential reference is resolved by vigil now: `file:///ABS/PATH`
/// is the file's bytes (only under vigil's credential directories, else
/// [`CredentialsError::Denied`]); `secret://NAMESPACE/NAME?key=KEY` is a key of a
/// Kubernetes Secret. A plain parameter comes back as it is, so a plugin reads a value the
/// same way however the operator gave it. [`CredentialsError::NotFound`] when the cluster
/// has no such parameter. Credential references are not in [`crate::Cluster::parameters`]:
/// a plugin asks for them by the names it documents.
pub fn parameter(name: &str) -> Result<SecretBytes, CredentialsError> {
    imported::parameter(name).map(SecretBytes::new)
}

impl CredentialsError {
    /// The host's explanation.
    pub fn message(&self) -> &str {
        match self {
            Self::Denied(message)
            | Self::NotFound(message)
            | Self::Invalid(message)
            | Self::ExecCredentials(message) => message,
        }
    }

    /// What a probe should return when a read it needs fails: a missing or unusable file,
    /// Secret or key makes the reference broken ([`ProbeError::not_probeable`],
    /// [`ReasonClass::ReferenceBroken`]); credentials from an exec or auth-provider plugin
    /// are not probeable either ([`ReasonClass::ExecCredentials`]); a denied read is the
    /// plugin's problem, not the cluster's ([`ProbeError::inconclusive`],
    /// [`ReasonClass::Denied`]). `what` names what was read, e.g. `the client key file
    /// ./client.key`.
    pub fn probe_error(&self, what: &str) -> ProbeError {
        // vigil's messages about a kubeconfig already start with it: said once.
        let said = |message: &'_ str| -> String {
            message
                .strip_prefix(what)
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(message)
                .to_owned()
        };
        match self {
            Self::Denied(message) => ProbeError::inconclusive(
                ReasonClass::Denied,
                format!("vigil refused to serve {what}: {}", said(message)),
            ),
            Self::NotFound(message) => ProbeError::not_probeable(
                ReasonClass::ReferenceBroken,
                format!("{what} does not exist: {}", said(message)),
            ),
            Self::Invalid(message) => ProbeError::not_probeable(
                ReasonClass::ReferenceBroken,
                format!("{what} is not usable: {}", said(message)),
            ),
            Self::ExecCredentials(message) => ProbeError::not_probeable(
                ReasonClass::ExecCredentials,
                format!("{what}: {}", said(message)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_that_names_the_kubeconfig_names_it_once() {
        let what = "kubeconfig /k/a.yaml";
        let error = CredentialsError::ExecCredentials(format!(
            "{what}: user \"u\" of context \"c\": its exec command failed"
        ))
        .probe_error(what);
        let ProbeError::NotProbeable(failure) = error else {
            panic!("{error:?}")
        };
        assert_eq!(
            failure.message,
            "kubeconfig /k/a.yaml: user \"u\" of context \"c\": its exec command failed"
        );
        let other = CredentialsError::ExecCredentials("no command".to_owned()).probe_error(what);
        let ProbeError::NotProbeable(failure) = other else {
            panic!("{other:?}")
        };
        assert_eq!(failure.message, "kubeconfig /k/a.yaml: no command");
    }

    #[test]
    fn denied_reads_are_inconclusive_and_missing_ones_break_the_reference() {
        let denied = CredentialsError::Denied("not named".to_owned()).probe_error("f");
        assert!(
            matches!(denied, ProbeError::Inconclusive(ref f) if f.class == ReasonClass::Denied)
        );
        let missing = CredentialsError::NotFound("gone".to_owned()).probe_error("f");
        assert!(
            matches!(missing, ProbeError::NotProbeable(ref f) if f.class == ReasonClass::ReferenceBroken)
        );
        let exec = CredentialsError::ExecCredentials("runs aws".to_owned()).probe_error("f");
        assert!(
            matches!(exec, ProbeError::NotProbeable(ref f)
                if f.class == ReasonClass::ExecCredentials && f.message == "f: runs aws"),
            "{exec:?}"
        );
    }
}
