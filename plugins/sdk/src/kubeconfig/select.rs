//! Selecting a context's server, TLS settings and credentials, as the host does.

use std::path::Path;

use vigil_kubeconfig_rules::data;
use vigil_kubeconfig_rules::server::{self, ServerShape};

use super::{AuthInfo, Kubeconfig, KubeconfigError};
use crate::{ReasonClass, SecretBytes};

/// A piece of connection material: inline in the kubeconfig, or a file it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Material {
    /// From a `*-data` field (base64-decoded) or an inline `token`.
    Inline(SecretBytes),
    /// A file, by the path **as written in the kubeconfig**: pass it unchanged to
    /// [`crate::credentials::read_file`], which resolves a relative path against the
    /// kubeconfig's directory (see [`resolve_path`] for the rule).
    File(String),
}

impl Material {
    /// The file's path as written, when the material is a file.
    pub fn file(&self) -> Option<&str> {
        match self {
            Self::Inline(_) => None,
            Self::File(path) => Some(path),
        }
    }

    /// `inline`, or `file PATH` with the path resolved against `kubeconfig_path` (the
    /// host's wording).
    fn describe(&self, kubeconfig_path: &str) -> String {
        match self {
            Self::Inline(_) => "inline".to_owned(),
            Self::File(path) => format!("file {}", resolve_path(kubeconfig_path, path)),
        }
    }
}

/// Which credentials a selection presents to the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// None: the server sees an anonymous request.
    Anonymous,
    /// A client certificate and key (mutual TLS).
    ClientCertificate,
    /// A bearer token, inline or from a token file.
    BearerToken,
    /// Both a client certificate and a bearer token (kubectl sends both).
    ClientCertificateAndBearerToken,
}

/// What a probe needs to reach a cluster named by a kubeconfig context: the result of
/// [`select`].
///
/// Inline material is decoded already; files are named by the path as written in the
/// kubeconfig, to be read with [`crate::credentials::read_file`] (which
/// [`crate::apiserver::ApiServer::connect`] does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The context used (the reference's, or the kubeconfig's `current-context`).
    pub context: String,
    /// The context's cluster entry.
    pub cluster: String,
    /// The context's user entry; `None` when the context names no user (anonymous).
    pub user: Option<String>,
    /// The API server URL, e.g. `https://127.0.0.1:6443`.
    pub server: String,
    /// The name to check the server's certificate against, when it differs from the URL's
    /// host.
    pub tls_server_name: Option<String>,
    /// Whether the server's certificate is not verified at all.
    pub insecure_skip_tls_verify: bool,
    /// The certificate authority to trust (PEM); `None` means the system roots.
    pub ca: Option<Material>,
    /// The client certificate (PEM), for mutual TLS; present exactly when `client_key` is.
    pub client_certificate: Option<Material>,
    /// The client certificate's private key (PEM).
    pub client_key: Option<Material>,
    /// The bearer token. A token file is to be read at each probe: projected tokens rotate.
    pub token: Option<Material>,
}

impl Selection {
    /// Which credentials this selection presents.
    pub fn credential_kind(&self) -> CredentialKind {
        match (self.client_certificate.is_some(), self.token.is_some()) {
            (false, false) => CredentialKind::Anonymous,
            (true, false) => CredentialKind::ClientCertificate,
            (false, true) => CredentialKind::BearerToken,
            (true, true) => CredentialKind::ClientCertificateAndBearerToken,
        }
    }

    /// The files this selection needs, as written in the kubeconfig: CA, client certificate,
    /// client key, token file, without repeats. These are the files the host serves.
    pub fn files(&self) -> Vec<&str> {
        let mut files: Vec<&str> = Vec::new();
        let named = [
            &self.ca,
            &self.client_certificate,
            &self.client_key,
            &self.token,
        ];
        for path in named.into_iter().flatten().filter_map(Material::file) {
            if !files.contains(&path) {
                files.push(path);
            }
        }
        files
    }

    /// The host's one-line description of a probeable reference, e.g. `probeable: client
    /// certificate inline, CA file /x/ca.crt, server https://127.0.0.1:6443`, with files
    /// resolved against `kubeconfig_path` as the host resolves them.
    ///
    /// The host's `Resolution::describe` gives the same text for the same kubeconfig: the
    /// differential test of the two readers compares them.
    pub fn describe(&self, kubeconfig_path: &str) -> String {
        let mut parts = Vec::new();
        if let Some(certificate) = &self.client_certificate {
            parts.push(format!(
                "client certificate {}",
                certificate.describe(kubeconfig_path)
            ));
        }
        if let Some(token) = &self.token {
            parts.push(format!("bearer token {}", token.describe(kubeconfig_path)));
        }
        if parts.is_empty() {
            parts.push("no credentials (anonymous)".to_owned());
        }
        parts.push(match (&self.ca, self.insecure_skip_tls_verify) {
            (_, true) => "TLS verification disabled (insecure-skip-tls-verify)".to_owned(),
            (Some(ca), false) => format!("CA {}", ca.describe(kubeconfig_path)),
            (None, false) => "system CA roots".to_owned(),
        });
        if let Some(name) = &self.tls_server_name {
            parts.push(format!("TLS server name {name}"));
        }
        parts.push(format!("server {}", self.server));
        format!("probeable: {}", parts.join(", "))
    }
}

/// Why a kubeconfig context cannot be probed.
///
/// [`SelectError::class`] gives the contract's reason class: [`ReasonClass::ExecCredentials`]
/// for `exec` and `auth-provider` users, [`ReasonClass::ReferenceBroken`] for everything
/// else. Messages name contexts, clusters, users and fields (not secret) but never quote a
/// value; the plugin adds the kubeconfig's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// The bytes are not a usable kubeconfig.
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    /// The reference names no context and the kubeconfig has no `current-context`.
    #[error("the kubeconfig has no current-context and the reference names no context")]
    NoContext,
    /// The context is not in the kubeconfig.
    #[error("context {0:?} not found in the kubeconfig")]
    ContextNotFound(String),
    /// The context entry has no `context:` body.
    #[error("context {0:?} has no `context` section")]
    EmptyContext(String),
    /// The context names a cluster the kubeconfig does not define.
    #[error("context {context:?} names cluster {cluster:?}, which this file does not define")]
    MissingCluster {
        /// The context.
        context: String,
        /// The cluster it names.
        cluster: String,
    },
    /// The context names a user the kubeconfig does not define.
    #[error("context {context:?} names user {user:?}, which this file does not define")]
    MissingUser {
        /// The context.
        context: String,
        /// The user it names.
        user: String,
    },
    /// The context's cluster has no `server`.
    #[error("context {context:?}: cluster {cluster:?} has no server")]
    MissingServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
    /// The context's cluster has a `server` that is not an `http(s)://HOST…` URL.
    #[error(
        "context {context:?}: the server of cluster {cluster:?} is not an http:// or https:// URL"
    )]
    BadServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
    /// The server URL embeds `user:password@`.
    #[error(
        "context {context:?}: the server of cluster {cluster:?} embeds credentials (user@host), which vigil refuses"
    )]
    CredentialsInServer {
        /// The context.
        context: String,
        /// Its cluster.
        cluster: String,
    },
    /// The user gets its credentials from an exec command, which only vigil runs (for a
    /// plugin granted `exec-credentials`: `credentials::exec_credential`).
    #[error(
        "user {user:?} of context {context:?} gets its credentials from the exec command {command:?}, which vigil runs only for plugins granted exec-credentials (credentials.exec-credential)"
    )]
    ExecPlugin {
        /// The user.
        user: String,
        /// The context.
        context: String,
        /// The command's file name (never its arguments or environment).
        command: String,
    },
    /// The user gets its credentials from an auth-provider, which vigil does not run.
    #[error(
        "user {user:?} of context {context:?} gets its credentials from the auth-provider {provider:?}; vigil does not run credential plugins"
    )]
    AuthProvider {
        /// The user.
        user: String,
        /// The context.
        context: String,
        /// The provider's name, e.g. `gcp`.
        provider: String,
    },
    /// The user has a password (basic authentication).
    #[error(
        "user {user:?} of context {context:?} uses basic authentication (username and password), which Kubernetes removed and vigil does not support"
    )]
    BasicAuth {
        /// The user.
        user: String,
        /// The context.
        context: String,
    },
    /// The cluster sets `insecure-skip-tls-verify` and a certificate authority.
    #[error(
        "cluster {cluster:?} of context {context:?} sets insecure-skip-tls-verify together with a certificate authority, which kubectl refuses"
    )]
    CaWithInsecure {
        /// The cluster.
        cluster: String,
        /// The context.
        context: String,
    },
    /// A `*-data` field is not valid base64.
    #[error(
        "the {field}-data of {owner} is not valid base64 (kubectl requires the standard alphabet, padded with '=')"
    )]
    InvalidBase64 {
        /// `certificate-authority`, `client-certificate` or `client-key`.
        field: &'static str,
        /// `cluster "c" of context "x"` or `user "u" of context "x"`.
        owner: String,
    },
    /// The user has a client certificate but no key.
    #[error("user {user:?} of context {context:?} has a client certificate but no client key")]
    CertificateWithoutKey {
        /// The user.
        user: String,
        /// The context.
        context: String,
    },
    /// The user has a client key but no certificate.
    #[error("user {user:?} of context {context:?} has a client key but no client certificate")]
    KeyWithoutCertificate {
        /// The user.
        user: String,
        /// The context.
        context: String,
    },
}

impl SelectError {
    /// The contract's reason class: `exec-credentials` for credential plugins,
    /// `reference-broken` for everything else.
    pub fn class(&self) -> ReasonClass {
        match self {
            Self::ExecPlugin { .. } | Self::AuthProvider { .. } => ReasonClass::ExecCredentials,
            _ => ReasonClass::ReferenceBroken,
        }
    }
}

/// Selects what a probe of `context` (else the `current-context`) in a kubeconfig connects
/// with, exactly as vigil's host does — without any I/O, so it runs natively as well as in a
/// plugin.
///
/// ```
/// use vigil_plugin_sdk::kubeconfig::{select, CredentialKind};
///
/// let yaml = br#"
/// clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}}]
/// users: [{name: u, user: {tokenFile: token}}]
/// contexts: [{name: x, context: {cluster: c, user: u}}]
/// current-context: x
/// "#;
/// let selection = select(yaml, None).unwrap();
/// assert_eq!(selection.server, "https://127.0.0.1:6443");
/// assert_eq!(selection.credential_kind(), CredentialKind::BearerToken);
/// assert_eq!(selection.files(), ["ca.crt", "token"]);
/// ```
pub fn select(kubeconfig_yaml: &[u8], context: Option<&str>) -> Result<Selection, SelectError> {
    select_in(&Kubeconfig::parse(kubeconfig_yaml)?, context)
}

/// [`select`] on a kubeconfig parsed already.
pub fn select_in(config: &Kubeconfig, context: Option<&str>) -> Result<Selection, SelectError> {
    let context_name = match context {
        Some(context) => context.to_owned(),
        None => config
            .current_context
            .clone()
            .filter(|name| !name.is_empty())
            .ok_or(SelectError::NoContext)?,
    };
    let named = config
        .contexts
        .iter()
        .find(|candidate| candidate.name == context_name)
        .ok_or_else(|| SelectError::ContextNotFound(context_name.clone()))?;
    let context = named
        .context
        .as_ref()
        .ok_or_else(|| SelectError::EmptyContext(context_name.clone()))?;
    let found_cluster = config
        .clusters
        .iter()
        .find(|candidate| candidate.name == context.cluster)
        .ok_or_else(|| SelectError::MissingCluster {
            context: context_name.clone(),
            cluster: context.cluster.clone(),
        })?;
    let user = match context.user.as_deref().filter(|user| !user.is_empty()) {
        // A context without a user is valid: the cluster is then contacted anonymously.
        None => None,
        Some(user_name) => {
            let found = config
                .users
                .iter()
                .find(|candidate| candidate.name == user_name)
                .ok_or_else(|| SelectError::MissingUser {
                    context: context_name.clone(),
                    user: user_name.to_owned(),
                })?;
            // An entry without a `user:` body means "no credentials", like an empty one.
            Some((found.name.as_str(), found.user.as_ref()))
        }
    };
    let missing_server = || SelectError::MissingServer {
        context: context_name.clone(),
        cluster: found_cluster.name.clone(),
    };
    let cluster = found_cluster.cluster.as_ref().ok_or_else(missing_server)?;
    let server = cluster
        .server
        .as_deref()
        .filter(|server| !server.is_empty())
        .ok_or_else(missing_server)?;
    match server::shape(server) {
        ServerShape::Url => {}
        ServerShape::NotHttp => {
            return Err(SelectError::BadServer {
                context: context_name,
                cluster: found_cluster.name.clone(),
            });
        }
        ServerShape::WithCredentials => {
            return Err(SelectError::CredentialsInServer {
                context: context_name,
                cluster: found_cluster.name.clone(),
            });
        }
    }

    let no_credentials = AuthInfo::default();
    let (user_name, user) = match user {
        Some((name, credentials)) => (Some(name), credentials.unwrap_or(&no_credentials)),
        None => (None, &no_credentials),
    };
    let shown_user = user_name.unwrap_or_default().to_owned();

    // Credential plugins decide before anything else: kubectl would run them, vigil does not,
    // so every other problem of the user is beside the point (the host's order too).
    if let Some(exec) = &user.exec {
        return Err(SelectError::ExecPlugin {
            user: shown_user,
            context: context_name,
            command: exec.command_name().unwrap_or("(none)").to_owned(),
        });
    }
    if let Some(provider) = &user.auth_provider {
        return Err(SelectError::AuthProvider {
            user: shown_user,
            context: context_name,
            provider: provider.name.clone(),
        });
    }
    if user.password.is_some() {
        return Err(SelectError::BasicAuth {
            user: shown_user,
            context: context_name,
        });
    }

    // Who a field belongs to, said only in an error: formatted when one is made.
    let cluster_owner = || {
        format!(
            "cluster {:?} of context {context_name:?}",
            found_cluster.name
        )
    };
    let user_owner = || format!("user {shown_user:?} of context {context_name:?}");
    let insecure_skip_tls_verify = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let ca = material(
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        "certificate-authority",
        &cluster_owner,
    )?;
    if insecure_skip_tls_verify && ca.is_some() {
        return Err(SelectError::CaWithInsecure {
            cluster: found_cluster.name.clone(),
            context: context_name,
        });
    }
    let client_certificate = material(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        "client-certificate",
        &user_owner,
    )?;
    let client_key = material(
        user.client_key_data
            .as_ref()
            .map(|data| data.expose_secret()),
        user.client_key.as_deref(),
        "client-key",
        &user_owner,
    )?;
    match (&client_certificate, &client_key) {
        (Some(_), None) => {
            return Err(SelectError::CertificateWithoutKey {
                user: shown_user,
                context: context_name,
            });
        }
        (None, Some(_)) => {
            return Err(SelectError::KeyWithoutCertificate {
                user: shown_user,
                context: context_name,
            });
        }
        _ => {}
    }
    // As in kubectl, an inline token takes precedence over a token file.
    let inline_token = user
        .token
        .as_ref()
        .map(|token| token.expose_secret())
        .filter(|token| !token.is_empty());
    let token_file = user.token_file.as_deref().filter(|path| !path.is_empty());
    let token = match (inline_token, token_file) {
        (Some(token), _) => Some(Material::Inline(SecretBytes::new(
            token.as_bytes().to_vec(),
        ))),
        (None, Some(path)) => Some(Material::File(path.to_owned())),
        (None, None) => None,
    };

    Ok(Selection {
        context: context_name,
        cluster: found_cluster.name.clone(),
        user: user_name.map(str::to_owned),
        server: server.to_owned(),
        tls_server_name: cluster
            .tls_server_name
            .clone()
            .filter(|name| !name.is_empty()),
        insecure_skip_tls_verify,
        ca,
        client_certificate,
        client_key,
        token,
    })
}

/// Picks a `*-data` field (base64, decoded as kubectl decodes it; wins, as in kubectl) or a
/// file field.
fn material(
    data_field: Option<&str>,
    file: Option<&str>,
    field: &'static str,
    owner: &dyn Fn() -> String,
) -> Result<Option<Material>, SelectError> {
    if let Some(encoded) = data_field.filter(|encoded| !data::is_absent(encoded)) {
        let bytes = data::decode(encoded).ok_or_else(|| SelectError::InvalidBase64 {
            field,
            owner: owner(),
        })?;
        return Ok(Some(Material::Inline(SecretBytes::new(bytes))));
    }
    Ok(file
        .filter(|file| !file.is_empty())
        .map(|file| Material::File(file.to_owned())))
}

/// Resolves a path written in a kubeconfig as vigil's host (and kubectl) does: an absolute
/// path is kept as it is; a relative one is joined to the kubeconfig's directory and cleaned
/// lexically (Go's `filepath.Join`), without resolving symbolic links.
///
/// A plugin never needs this — it passes paths as written to
/// [`crate::credentials::read_file`] and the host resolves them — but it says which file the
/// host will serve, and lets a test compare the two readers.
///
/// ```
/// use vigil_plugin_sdk::kubeconfig::resolve_path;
///
/// assert_eq!(resolve_path("/home/u/.kube/config", "../.minikube/ca.crt"), "/home/u/.minikube/ca.crt");
/// assert_eq!(resolve_path("/home/u/.kube/config", "/etc/pki/ca.crt"), "/etc/pki/ca.crt");
/// ```
pub fn resolve_path(kubeconfig_path: &str, written: &str) -> String {
    vigil_kubeconfig_rules::path::resolve(Path::new(kubeconfig_path), written)
        .to_string_lossy()
        .into_owned()
}
