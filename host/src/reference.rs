//! Cluster references (`kubeconfig_secret_ref`, DESIGN §3) and their host-side resolution.
//!
//! A reference says where a cluster's connection details live:
//! - `ABSOLUTE_PATH#CONTEXT` (or `ABSOLUTE_PATH` for the file's `current-context`): a
//!   kubeconfig file, split at the **last** `#`;
//! - `secret://NAMESPACE/NAME?key=KEY&context=CONTEXT`: a kubeconfig in a Kubernetes Secret;
//! - `http://…` / `https://…`: a health URL.
//!
//! [`resolve`] turns a file reference into [`ConnectionMaterial`] (server, TLS settings and
//! credentials, inline or as files) or explains why the cluster is not probeable
//! (DESIGN §1: `reference-broken`, `exec-credentials`). Secret and URL references are left to
//! plugins. Secret material only ever lives in [`SecretBytes`], which never prints itself.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use kube::config::AuthInfo;
use vigil_decision::ReasonClass;

use crate::discovery;

/// The Secret key read when a `secret://` reference gives none.
pub const DEFAULT_SECRET_KEY: &str = "kubeconfig";

/// Where a cluster's connection details live. Parse with [`Reference::parse`]; `Display` gives
/// back the canonical text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reference {
    /// A kubeconfig file and, optionally, a context in it (else its `current-context`).
    File {
        /// The kubeconfig's absolute path, as given (not canonicalised).
        path: PathBuf,
        /// The context; `None` means the file's `current-context`.
        context: Option<String>,
    },
    /// A kubeconfig stored in a Kubernetes Secret (resolved by a plugin).
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key holding the kubeconfig ([`DEFAULT_SECRET_KEY`] unless given).
        key: String,
        /// The context; `None` means the kubeconfig's `current-context`.
        context: Option<String>,
    },
    /// A health URL, probed by the http plugin.
    Http {
        /// The URL, as given.
        url: String,
    },
}

/// Why a reference's text is not a valid reference.
///
/// Messages may quote names from the reference (they are not secret) but never a URL, which
/// could carry credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// Nothing was given.
    #[error("the reference is empty")]
    Empty,
    /// A file reference whose path is relative (a reference must not depend on a working
    /// directory).
    #[error("kubeconfig path {0:?} is not absolute")]
    RelativePath(String),
    /// A file reference ending in `#` with no context after it.
    #[error(
        "nothing follows the last '#': name a context after it, or drop the '#' to use the current context"
    )]
    EmptyContext,
    /// A scheme other than `secret`, `http` and `https`.
    #[error(
        "unsupported scheme {0:?}: use an absolute kubeconfig path, secret://, http:// or https://"
    )]
    UnsupportedScheme(String),
    /// A `secret://` reference that is not `secret://NAMESPACE/NAME[?…]`.
    #[error("expected secret://NAMESPACE/NAME?key=KEY&context=CONTEXT")]
    SecretShape,
    /// A `secret://` reference with a `#` (its context is given as `?context=`).
    #[error("a secret:// reference gives its context as ?context=CONTEXT, not after '#'")]
    FragmentInSecret,
    /// A namespace, Secret name or key that Kubernetes would not accept.
    #[error("{what} {value:?} is not a valid Kubernetes {what}")]
    InvalidName {
        /// `namespace`, `Secret name` or `Secret key`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// A `secret://` query parameter other than `key` and `context`.
    #[error("unknown secret:// parameter {0:?} (known: key, context)")]
    UnknownParameter(String),
    /// A `secret://` query parameter given twice, or without `=`.
    #[error("secret:// parameter {0:?} is given twice or has no value")]
    BadParameter(String),
    /// A `%` escape that is not two hex digits, or that decodes to invalid UTF-8.
    #[error("invalid percent-encoding in a secret:// parameter")]
    BadPercentEncoding,
    /// An `http(s)://` URL without a host, or with white space.
    #[error("malformed http(s) URL: {0}")]
    MalformedUrl(&'static str),
    /// An `http(s)://` URL with `user:password@`: credentials belong in a credential parameter.
    #[error("the URL embeds credentials (user@host); give them as a credential parameter instead")]
    CredentialsInUrl,
}

impl Reference {
    /// Parses a reference. A file reference is split at its **last** `#`, so a path may
    /// contain `#` but a context cannot.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        if text.is_empty() {
            return Err(ReferenceError::Empty);
        }
        if let Some(rest) = text.strip_prefix("secret://") {
            return parse_secret(rest);
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return parse_http(text);
        }
        if let Some(scheme) = scheme_of(text) {
            return Err(ReferenceError::UnsupportedScheme(scheme.to_owned()));
        }
        let (path, context) = match text.rsplit_once('#') {
            Some((_, "")) => return Err(ReferenceError::EmptyContext),
            Some((path, context)) => (path, Some(context.to_owned())),
            None => (text, None),
        };
        if !Path::new(path).is_absolute() {
            return Err(ReferenceError::RelativePath(path.to_owned()));
        }
        Ok(Self::File {
            path: PathBuf::from(path),
            context,
        })
    }
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { path, context } => {
                write!(f, "{}", path.display())?;
                if let Some(context) = context {
                    write!(f, "#{context}")?;
                }
                Ok(())
            }
            Self::Secret {
                namespace,
                name,
                key,
                context,
            } => {
                write!(f, "secret://{namespace}/{name}")?;
                let mut separator = '?';
                // The default key is left out so that each reference has one canonical text.
                if key != DEFAULT_SECRET_KEY {
                    write!(f, "{separator}key={}", PercentEncoded(key))?;
                    separator = '&';
                }
                if let Some(context) = context {
                    write!(f, "{separator}context={}", PercentEncoded(context))?;
                }
                Ok(())
            }
            Self::Http { url } => f.write_str(url),
        }
    }
}

/// The scheme of `SCHEME://…` text, if it has one.
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (starts_with_letter && rest_ok).then_some(scheme)
}

fn parse_secret(rest: &str) -> Result<Reference, ReferenceError> {
    if rest.contains('#') {
        return Err(ReferenceError::FragmentInSecret);
    }
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (namespace, name) = location
        .split_once('/')
        .ok_or(ReferenceError::SecretShape)?;
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(ReferenceError::SecretShape);
    }
    if !is_dns_label(namespace) {
        return Err(ReferenceError::InvalidName {
            what: "namespace",
            value: namespace.to_owned(),
        });
    }
    if !is_dns_subdomain(name) {
        return Err(ReferenceError::InvalidName {
            what: "Secret name",
            value: name.to_owned(),
        });
    }
    let mut key = None;
    let mut context = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (parameter, value) = pair
            .split_once('=')
            .ok_or_else(|| ReferenceError::BadParameter(pair.to_owned()))?;
        let slot = match parameter {
            "key" => &mut key,
            "context" => &mut context,
            _ => return Err(ReferenceError::UnknownParameter(parameter.to_owned())),
        };
        let value = percent_decode(value)?;
        if slot.is_some() || value.is_empty() {
            return Err(ReferenceError::BadParameter(parameter.to_owned()));
        }
        *slot = Some(value);
    }
    let key = key.unwrap_or_else(|| DEFAULT_SECRET_KEY.to_owned());
    if !is_secret_key(&key) {
        return Err(ReferenceError::InvalidName {
            what: "Secret key",
            value: key,
        });
    }
    Ok(Reference::Secret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key,
        context,
    })
}

fn parse_http(url: &str) -> Result<Reference, ReferenceError> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(ReferenceError::CredentialsInUrl);
    }
    if authority.is_empty() {
        return Err(ReferenceError::MalformedUrl("no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ReferenceError::MalformedUrl("it contains white space"));
    }
    Ok(Reference::Http {
        url: url.to_owned(),
    })
}

/// RFC 1123 label, as Kubernetes requires of namespaces.
fn is_dns_label(text: &str) -> bool {
    text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// RFC 1123 subdomain, as Kubernetes requires of Secret names.
fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253
        && text
            .split('.')
            .all(|label| !label.is_empty() && is_dns_label(label))
}

/// A Secret data key: `[-._a-zA-Z0-9]+`.
fn is_secret_key(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// Writes a query value, escaping everything but unreserved characters and `:/@`, which
/// context names use (EKS: `arn:aws:eks:…:cluster/NAME`) and which need no escaping there.
struct PercentEncoded<'a>(&'a str);

impl fmt::Display for PercentEncoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.bytes() {
            if byte.is_ascii_alphanumeric()
                || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':' | b'/' | b'@')
            {
                write!(f, "{}", char::from(byte))?;
            } else {
                write!(f, "%{byte:02X}")?;
            }
        }
        Ok(())
    }
}

fn percent_decode(text: &str) -> Result<String, ReferenceError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let hex = bytes
                .get(index + 1..index + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or(ReferenceError::BadPercentEncoding)?;
            decoded.push(hex);
            index += 3;
        } else {
            decoded.push(byte);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| ReferenceError::BadPercentEncoding)
}

/// Secret bytes (a key, a token, inline certificate data) that never print themselves.
///
/// `Debug` shows only the length. Read the bytes with [`SecretBytes::expose_secret`], whose
/// name makes each use easy to audit.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps secret bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The secret bytes themselves. Never log or store them.
    pub fn expose_secret(&self) -> &[u8] {
        &self.0
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes(<redacted {} bytes>)", self.0.len())
    }
}

/// A piece of connection material: given inline in the kubeconfig, or as a file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Material {
    /// From a `*-data` field (base64-decoded) or an inline `token`.
    Inline(SecretBytes),
    /// A file; a relative path in the kubeconfig is resolved against the kubeconfig's
    /// directory, as kubectl does.
    File(PathBuf),
}

impl Material {
    /// The file, when the material is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::Inline(_) => None,
            Self::File(path) => Some(path),
        }
    }

    /// "inline" or "file PATH", for [`Resolution::describe`].
    fn describe(&self) -> String {
        match self {
            Self::Inline(_) => "inline".to_owned(),
            Self::File(path) => format!("file {}", path.display()),
        }
    }
}

/// What a probe needs to connect to a cluster named by a kubeconfig context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionMaterial {
    /// The kubeconfig file, as referenced.
    pub kubeconfig: PathBuf,
    /// The context used (the reference's, or the file's `current-context`).
    pub context: String,
    /// The API server URL.
    pub server: String,
    /// The name to check the server's certificate against, when it differs from the URL's host.
    pub tls_server_name: Option<String>,
    /// Whether the server's certificate is not verified at all.
    pub insecure_skip_tls_verify: bool,
    /// The certificate authority to trust; `None` means the system roots.
    pub ca: Option<Material>,
    /// The client certificate (PEM), for mutual TLS.
    pub client_certificate: Option<Material>,
    /// The client certificate's private key (PEM).
    pub client_key: Option<Material>,
    /// The bearer token (a token file is re-read at each use: projected tokens rotate).
    pub token: Option<Material>,
}

impl ConnectionMaterial {
    /// Every file this context needs: the kubeconfig first, then the CA, client certificate,
    /// client key and token files it names, without repeats. The plugin runtime serves
    /// exactly these files to a probe and nothing else.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.kubeconfig.clone()];
        let named = [
            &self.ca,
            &self.client_certificate,
            &self.client_key,
            &self.token,
        ];
        for path in named.into_iter().flatten().filter_map(Material::file) {
            if !files.iter().any(|known| known == path) {
                files.push(path.to_path_buf());
            }
        }
        files
    }
}

/// The result of resolving a reference on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The cluster can be probed with this material.
    Connection(Box<ConnectionMaterial>),
    /// The cluster cannot be probed (DESIGN §1 `not-probeable`): never counted as a failure.
    NotProbeable {
        /// `reference-broken` or `exec-credentials`.
        class: ReasonClass,
        /// What is wrong, naming the file, context, cluster or user; never a secret.
        message: String,
    },
    /// A `secret://` or `http(s)://` reference: recognised, and resolved by a plugin.
    Delegated,
}

impl Resolution {
    /// One line saying why the cluster is or is not probeable, safe to log, e.g.
    /// `probeable: client certificate inline, CA file /x/ca.crt, server https://127.0.0.1:6443`.
    pub fn describe(&self) -> String {
        match self {
            Self::Connection(material) => {
                let mut parts = Vec::new();
                if let Some(certificate) = &material.client_certificate {
                    parts.push(format!("client certificate {}", certificate.describe()));
                }
                if let Some(token) = &material.token {
                    parts.push(format!("bearer token {}", token.describe()));
                }
                if parts.is_empty() {
                    parts.push("no credentials (anonymous)".to_owned());
                }
                parts.push(match (&material.ca, material.insecure_skip_tls_verify) {
                    (_, true) => "TLS verification disabled (insecure-skip-tls-verify)".to_owned(),
                    (Some(ca), false) => format!("CA {}", ca.describe()),
                    (None, false) => "system CA roots".to_owned(),
                });
                if let Some(name) = &material.tls_server_name {
                    parts.push(format!("TLS server name {name}"));
                }
                parts.push(format!("server {}", material.server));
                format!("probeable: {}", parts.join(", "))
            }
            Self::NotProbeable { class, message } => format!("not probeable ({class}): {message}"),
            Self::Delegated => "delegated: a plugin resolves this reference".to_owned(),
        }
    }
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Resolves a reference on the host.
///
/// A file reference is read now (blocking I/O; async callers use `spawn_blocking`): its
/// context, cluster and user are looked up as kubectl does, inline data is decoded, and every
/// file it names is checked to exist. `secret://` and `http(s)://` references are
/// [`Resolution::Delegated`].
#[tracing::instrument(level = "debug", skip_all, fields(reference = %reference))]
pub fn resolve(reference: &Reference) -> Resolution {
    match reference {
        Reference::File { path, context } => match resolve_file(path, context.as_deref()) {
            Ok(material) => Resolution::Connection(Box::new(material)),
            // Every message names the file first, in the words the guest SDK's `select`
            // uses after it (the kubeconfig-file plugin writes `kubeconfig PATH: …` too), so
            // an operator reads the same sentence whichever side found the problem.
            Err(NotProbeable { class, message }) => Resolution::NotProbeable {
                class,
                message: format!("kubeconfig {}: {message}", path.display()),
            },
        },
        Reference::Secret { .. } | Reference::Http { .. } => Resolution::Delegated,
    }
}

/// Why a file reference cannot be probed; becomes [`Resolution::NotProbeable`].
struct NotProbeable {
    class: ReasonClass,
    message: String,
}

fn broken(message: String) -> NotProbeable {
    NotProbeable {
        class: ReasonClass::ReferenceBroken,
        message,
    }
}

fn resolve_file(
    kubeconfig: &Path,
    context: Option<&str>,
) -> Result<ConnectionMaterial, NotProbeable> {
    let config =
        discovery::load_kubeconfig(kubeconfig).map_err(|problem| broken(problem.to_string()))?;
    let context_name = match context {
        Some(context) => context.to_owned(),
        None => config
            .current_context
            .clone()
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                broken(
                    "the kubeconfig has no current-context and the reference names no context"
                        .to_owned(),
                )
            })?,
    };
    let named = config
        .contexts
        .iter()
        .find(|candidate| candidate.name == context_name)
        .ok_or_else(|| {
            broken(format!(
                "context {context_name:?} not found in the kubeconfig"
            ))
        })?;
    let parts =
        discovery::context_parts(&config, named).map_err(|problem| broken(problem.to_string()))?;
    let no_credentials = AuthInfo::default();
    let (user_name, user) = match parts.user {
        Some((name, user)) => (name, user.unwrap_or(&no_credentials)),
        None => ("", &no_credentials),
    };
    let owner = format!("user {user_name:?} of context {context_name:?}");

    // Credential plugins decide before anything else: kubectl would run them, vigil does not
    // (DESIGN "Later": exec-credential capability), so file problems are beside the point.
    if let Some(exec) = &user.exec {
        let command = exec
            .command
            .as_deref()
            .map(Path::new)
            .and_then(Path::file_name)
            .map_or_else(
                || "(none)".to_owned(),
                |name| name.to_string_lossy().into_owned(),
            );
        return Err(NotProbeable {
            class: ReasonClass::ExecCredentials,
            message: format!(
                "{owner} gets its credentials from the exec plugin {command:?}; vigil does not run credential plugins"
            ),
        });
    }
    if let Some(provider) = &user.auth_provider {
        return Err(NotProbeable {
            class: ReasonClass::ExecCredentials,
            message: format!(
                "{owner} gets its credentials from the auth-provider {:?}; vigil does not run credential plugins",
                provider.name
            ),
        });
    }
    if user.password.is_some() {
        return Err(broken(format!(
            "{owner} uses basic authentication (username and password), which Kubernetes removed and vigil does not support"
        )));
    }

    let base = kubeconfig.parent().unwrap_or(Path::new("/"));
    let cluster = parts.cluster;
    let cluster_owner = format!(
        "cluster {:?} of context {context_name:?}",
        parts.cluster_name
    );
    let insecure_skip_tls_verify = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let ca = material(
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        base,
        "certificate-authority",
        &cluster_owner,
    )?;
    if insecure_skip_tls_verify && ca.is_some() {
        return Err(broken(format!(
            "{cluster_owner} sets insecure-skip-tls-verify together with a certificate authority, which kubectl refuses"
        )));
    }

    let secrets = UserSecrets::of(user)
        .map_err(|()| broken(format!("the credentials of {owner} cannot be read")))?;
    let client_certificate = material(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
        base,
        "client-certificate",
        &owner,
    )?;
    let client_key = material(
        secrets.client_key_data.as_deref(),
        user.client_key.as_deref(),
        base,
        "client-key",
        &owner,
    )?;
    match (&client_certificate, &client_key) {
        (Some(_), None) => {
            return Err(broken(format!(
                "{owner} has a client certificate but no client key"
            )));
        }
        (None, Some(_)) => {
            return Err(broken(format!(
                "{owner} has a client key but no client certificate"
            )));
        }
        _ => {}
    }
    // As in kubectl, an inline token takes precedence over a token file.
    let token = match (
        secrets.token,
        user.token_file.as_deref().filter(|path| !path.is_empty()),
    ) {
        (Some(token), _) => Some(Material::Inline(SecretBytes::new(token.into_bytes()))),
        (None, Some(path)) => {
            let path = resolve_path(base, path);
            check_file(&path, "tokenFile", &owner)?;
            Some(Material::File(path))
        }
        (None, None) => None,
    };

    Ok(ConnectionMaterial {
        kubeconfig: kubeconfig.to_path_buf(),
        context: context_name,
        server: parts.server.to_owned(),
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

/// The user's secret fields as plain strings.
struct UserSecrets {
    token: Option<String>,
    client_key_data: Option<String>,
}

impl UserSecrets {
    /// Reads `token` and `client-key-data` out of kube's `SecretString`s.
    ///
    /// kube keeps them as `secrecy::SecretString`, and this crate does not depend on `secrecy`
    /// to call `expose_secret`. kube's own `Serialize` impl for `AuthInfo` writes them out
    /// (that is how kube saves kubeconfigs), so that is the exposure point used here. The JSON
    /// value lives only for the duration of this call.
    fn of(user: &AuthInfo) -> Result<Self, ()> {
        let value = serde_json::to_value(user).map_err(|_| ())?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(serde_json::Value::as_str)
                .filter(|text| !text.is_empty())
                .map(str::to_owned)
        };
        Ok(Self {
            token: field("token"),
            client_key_data: field("client-key-data"),
        })
    }
}

/// Picks a `*-data` field (base64, wins as in kubectl) or a file field, checking the file.
fn material(
    data: Option<&str>,
    file: Option<&str>,
    base: &Path,
    field: &str,
    owner: &str,
) -> Result<Option<Material>, NotProbeable> {
    if let Some(data) = data.filter(|data| !data.trim().is_empty()) {
        let bytes = decode_base64(data)
            .ok_or_else(|| broken(format!("the {field}-data of {owner} is not valid base64")))?;
        return Ok(Some(Material::Inline(SecretBytes::new(bytes))));
    }
    match file.filter(|file| !file.is_empty()) {
        Some(file) => {
            let path = resolve_path(base, file);
            check_file(&path, field, owner)?;
            Ok(Some(Material::File(path)))
        }
        None => Ok(None),
    }
}

/// Checks that a file named by a kubeconfig exists, is a regular file and can be opened.
fn check_file(path: &Path, field: &str, owner: &str) -> Result<(), NotProbeable> {
    let shown = path.display();
    let metadata = fs::metadata(path).map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => broken(format!(
            "the {field} file {shown} of {owner} does not exist"
        )),
        _ => broken(format!(
            "the {field} file {shown} of {owner} cannot be read: {error}"
        )),
    })?;
    if !metadata.is_file() {
        // Checked before opening: opening a FIFO would block.
        return Err(broken(format!(
            "the {field} file {shown} of {owner} is not a regular file"
        )));
    }
    fs::File::open(path).map(drop).map_err(|error| {
        broken(format!(
            "the {field} file {shown} of {owner} cannot be read: {error}"
        ))
    })
}

/// Resolves a path from a kubeconfig as kubectl does: an absolute path is kept as it is; a
/// relative one is joined to the kubeconfig's directory and cleaned lexically (Go's
/// `filepath.Join`), without resolving symbolic links, so `..data` indirections stay visible.
fn resolve_path(base: &Path, file: &str) -> PathBuf {
    let file = Path::new(file);
    if file.is_absolute() {
        return file.to_path_buf();
    }
    let mut cleaned = PathBuf::new();
    for component in base.join(file).components() {
        match component {
            Component::CurDir => {}
            // `pop` stops at the root, as Go's Clean does for "/..".
            Component::ParentDir => {
                cleaned.pop();
            }
            other => cleaned.push(other),
        }
    }
    cleaned
}

/// Decodes standard base64 as Go's decoder does for kubeconfig `[]byte` fields: line breaks
/// and other white space are ignored; padding is optional but must be consistent.
///
/// Written here rather than taken from the `base64` crate only because that crate is not a
/// direct dependency of this crate.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut decoded = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits: u32 = 0;
    let mut symbols: usize = 0;
    let mut padding: usize = 0;
    for byte in text.bytes() {
        if byte.is_ascii_whitespace() {
            continue;
        }
        if byte == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            return None;
        }
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        symbols += 1;
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            decoded.push(((buffer >> bits) & 0xFF) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    // One symbol alone cannot encode a byte; padding, when present, completes a quantum.
    let complete = symbols % 4 != 1
        && (padding == 0 || (padding <= 2 && (symbols + padding).is_multiple_of(4)));
    complete.then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_like_go() {
        let check = |text: &str, expected: Option<&[u8]>| {
            assert_eq!(decode_base64(text).as_deref(), expected, "{text:?}");
        };
        check("", Some(b""));
        check("aGVsbG8=", Some(b"hello"));
        check("aGVsbG8", Some(b"hello"));
        check("aGVs\nbG8h", Some(b"hello!"));
        check("aGk=", Some(b"hi"));
        check("YQ==", Some(b"a"));
        check("YQ", Some(b"a"));
        check("+/+/", Some(&[0xFB, 0xFF, 0xBF]));
        check("Y", None);
        check("YQ=", None);
        check("YQ===", None);
        check("aGVsbG8=aGk=", None);
        check("aGVs*G8=", None);
        check("-_-_", None);
    }

    #[test]
    fn relative_paths_are_joined_and_cleaned_like_kubectl() {
        let check = |base: &str, file: &str, expected: &str| {
            assert_eq!(
                resolve_path(Path::new(base), file),
                PathBuf::from(expected),
                "{base} + {file}"
            );
        };
        check("/home/u/.kube", "ca.crt", "/home/u/.kube/ca.crt");
        check(
            "/home/u/.kube",
            "./certs/ca.crt",
            "/home/u/.kube/certs/ca.crt",
        );
        check(
            "/home/u/.kube",
            "../.minikube/ca.crt",
            "/home/u/.minikube/ca.crt",
        );
        check("/etc/kube", "../../../../ca.crt", "/ca.crt");
        check(
            "/secrets/kube",
            "..data/ca.crt",
            "/secrets/kube/..data/ca.crt",
        );
        check("/home/u/.kube", "/etc/pki/ca.crt", "/etc/pki/ca.crt");
        check("/home/u/.kube", "/etc/../pki/ca.crt", "/etc/../pki/ca.crt");
    }

    #[test]
    fn secret_bytes_debug_is_redacted() {
        let secret = SecretBytes::new(b"hunter2".to_vec());
        assert_eq!(format!("{secret:?}"), "SecretBytes(<redacted 7 bytes>)");
        let material = Material::Inline(secret);
        assert!(!format!("{material:?}").contains("hunter2"));
    }
}
