//! Cluster references (`kubeconfig_secret_ref`) and their host-side resolution.
//!
//! A reference says where a cluster's connection details live:
//! - `ABSOLUTE_PATH#CONTEXT` (or `ABSOLUTE_PATH` for the file's `current-context`): a
//!   kubeconfig file, split at the **last** `#`;
//! - `secret://NAMESPACE/NAME?key=KEY&context=CONTEXT`: a kubeconfig in a Kubernetes Secret;
//! - `http://…` / `https://…`: a health URL.
//!
//! [`resolve`] turns a file reference into [`ConnectionMaterial`] (server, TLS settings and
//! credentials, inline or as files) or explains why the cluster is not probeable
//! (`reference-broken`, `exec-credentials`: docs/rules.md#outcomes). Secret and URL references are left to
//! plugins. Secret material only ever lives in [`SecretBytes`], which never prints itself.
//!
//! The files a kubeconfig names (`certificate-authority`, `client-certificate`,
//! `client-key`, `tokenFile`) are read only under the kubeconfig's own directory or the
//! operator's [`NAMED_FILES_SETTING`] ([`FileBounds`]): whoever writes a kubeconfig also
//! picks the server its token goes to, so a kubeconfig that could name any file could send
//! any one-line secret vigil can read (a service-account token, an API token) to a server
//! of its choosing.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use kube::config::{AuthInfo, Kubeconfig, NamedContext};
use vigil_decision::ReasonClass;
use vigil_kubeconfig_rules::{data, path as kubeconfig_path};

use crate::discovery::{self, SourceProblem};
use crate::exec::ExecSpec;

pub use vigil_kubeconfig_rules::reference::{DEFAULT_SECRET_KEY, Reference, ReferenceError};

/// The setting of the directories, besides its own, under which the files a kubeconfig
/// names may lie; named in refusals.
pub const NAMED_FILES_SETTING: &str = "VIGIL_KUBECONFIG_CREDENTIAL_DIRS";

/// Where the files a file reference leads vigil to open may really lie (after every
/// symbolic link).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBounds {
    /// Where the kubeconfig file itself may lie (`KUBECONFIG_PATH`'s files,
    /// `KUBECONFIG_DIR`, `VIGIL_CREDENTIAL_DIRS`); `None`: anywhere (the command-line
    /// tools read what the operator names).
    pub kubeconfigs: Option<Arc<[PathBuf]>>,
    /// Where, besides the kubeconfig's own directory, the files it names may lie
    /// ([`NAMED_FILES_SETTING`]).
    pub named_files: Arc<[PathBuf]>,
}

impl Default for FileBounds {
    /// Kubeconfigs anywhere; the files they name in their own directory only.
    fn default() -> Self {
        Self {
            kubeconfigs: None,
            named_files: Arc::from(Vec::new()),
        }
    }
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

    /// The secret bytes themselves, taken out (e.g. to hand them to a plugin). Never log
    /// or store them.
    pub fn into_exposed_secret(self) -> Vec<u8> {
        self.0
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
    /// The kubeconfig file, as referenced. For a kubeconfig read from a Secret
    /// ([`resolve_secret_kubeconfig`]), the reference's text: it names no file, and no
    /// file is ever served for it.
    pub kubeconfig: PathBuf,
    /// The context used (the reference's, or the file's `current-context`).
    pub context: String,
    /// The name of the context's cluster entry.
    pub cluster: String,
    /// The name of the context's user entry; `None` when the context names no user.
    pub user: Option<String>,
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
    /// The user's `exec` section, when its credentials come from a command.
    pub exec: Option<Box<ExecSpec>>,
    /// The directories under which the files it names were found: the kubeconfig's own
    /// and [`NAMED_FILES_SETTING`]'s (none for a Secret's kubeconfig, which names no
    /// file). Whoever reads one of those files later checks the file it opened against
    /// them again: a link may have changed since.
    pub file_roots: Vec<PathBuf>,
    /// The kubeconfig as `credentials.kubeconfig` serves it to plugins: the selected
    /// context alone, with its cluster and user entries, as vigil read them, rendered as
    /// JSON.
    pub served_kubeconfig: SecretBytes,
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
    /// The cluster cannot be probed (`not-probeable`): never counted as a failure.
    NotProbeable {
        /// `reference-broken` or `exec-credentials`; `host-fault` when vigil could not look.
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
                if let Some(exec) = &material.exec {
                    parts.push(format!("exec command {:?}", exec.command));
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

/// Resolves a reference on the host, wherever its kubeconfig lies (the command-line
/// tools, which read what the operator names), the files it names under its own directory
/// only. The engine uses [`resolve_bounded`].
///
/// A file reference is read now (blocking I/O; async callers use `spawn_blocking`): its
/// context, cluster and user are looked up as kubectl does, inline data is decoded, and every
/// file it names is checked to exist and to lie where [`FileBounds`] allows. `secret://`
/// and `http(s)://` references are [`Resolution::Delegated`].
pub fn resolve(reference: &Reference) -> Resolution {
    resolve_bounded(reference, &FileBounds::default())
}

/// [`resolve`], reading a kubeconfig file only when the file actually opened — after
/// every symbolic link, checked on the open file itself — lies under the real path of one
/// of `roots` (`KUBECONFIG_PATH`'s files, `KUBECONFIG_DIR`, `VIGIL_CREDENTIAL_DIRS`).
///
/// Why the real path: a reference is checked by name when it is registered, but a link
/// inside an allowed directory could point anywhere. Why at every open: a Kubernetes
/// Secret volume swaps its `..data` link to rotate its files, so the real path changes
/// while the reference does not — and stays inside the volume.
pub fn resolve_under(reference: &Reference, roots: &[PathBuf]) -> Resolution {
    resolve_bounded(
        reference,
        &FileBounds {
            kubeconfigs: Some(Arc::from(roots)),
            ..FileBounds::default()
        },
    )
}

/// [`resolve`] within `bounds`: the kubeconfig file only where [`FileBounds::kubeconfigs`]
/// says (see [`resolve_under`]), the files it names only under its own directory or
/// [`FileBounds::named_files`].
#[tracing::instrument(level = "debug", skip_all, fields(reference = %reference))]
pub fn resolve_bounded(reference: &Reference, bounds: &FileBounds) -> Resolution {
    match reference {
        Reference::File { path, context } => {
            match resolve_file(Path::new(path), context.as_deref(), bounds) {
                Ok(material) => Resolution::Connection(Box::new(material)),
                // Every message names the file first, in the words the guest SDK's `select`
                // uses after it (the kubeconfig-file plugin writes `kubeconfig PATH: …` too), so
                // an operator reads the same sentence whichever side found the problem.
                Err(NotProbeable { class, message }) => Resolution::NotProbeable {
                    class,
                    message: format!("kubeconfig {path}: {message}"),
                },
            }
        }
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
    bounds: &FileBounds,
) -> Result<ConnectionMaterial, NotProbeable> {
    let config = discovery::load_kubeconfig_checked(kubeconfig, |file| match &bounds.kubeconfigs {
        Some(roots) if !opened_under(file, kubeconfig, roots) => {
            Err(SourceProblem::OutsideCredentialRoots)
        }
        _ => Ok(()),
    })
    .map_err(|problem| match problem {
        // Nothing is known about the file: vigil could not look.
        SourceProblem::OutOfResources(_) => NotProbeable {
            class: ReasonClass::HostFault,
            message: problem.to_string(),
        },
        _ => broken(problem.to_string()),
    })?;
    let origin = Origin::File {
        kubeconfig,
        named_files: &bounds.named_files,
    };
    resolve_config(&config, origin, context)
}

/// Where a kubeconfig being resolved was read from: the files it names are resolved
/// against a file's directory and must lie under it or `named_files`; a Secret's
/// kubeconfig names no file.
#[derive(Clone, Copy)]
enum Origin<'a> {
    File {
        kubeconfig: &'a Path,
        named_files: &'a [PathBuf],
    },
    Secret,
}

/// Resolves the kubeconfig that a `secret://` reference's Secret holds, for the egress
/// it implies: the selected context's server and TLS settings.
///
/// `bytes` are the Secret key's value; `context` the reference's `context=` (else the
/// kubeconfig's `current-context`). A kubeconfig in a Secret must be self-contained:
/// certificates, keys and tokens inline (`*-data`, `token`), since no file is served for
/// it, so a context naming a file is `reference-broken`. The material's `kubeconfig` is
/// `label` (the reference's text), not a file. Messages start `LABEL: ` and never quote
/// the Secret.
pub fn resolve_secret_kubeconfig(
    bytes: &[u8],
    label: &str,
    context: Option<&str>,
) -> Result<ConnectionMaterial, (ReasonClass, String)> {
    let config = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| Kubeconfig::from_yaml(text).ok())
        .ok_or_else(|| {
            (
                ReasonClass::ReferenceBroken,
                format!("{label}: the Secret's value is not a kubeconfig"),
            )
        })?;
    resolve_config(&config, Origin::Secret, context)
        .map(|mut material| {
            material.kubeconfig = PathBuf::from(label);
            material
        })
        .map_err(|NotProbeable { class, message }| (class, format!("{label}: {message}")))
}

fn resolve_config(
    config: &Kubeconfig,
    origin: Origin<'_>,
    context: Option<&str>,
) -> Result<ConnectionMaterial, NotProbeable> {
    let (kubeconfig, file_roots) = match origin {
        Origin::File {
            kubeconfig,
            named_files,
        } => (kubeconfig, file_roots(kubeconfig, named_files)),
        Origin::Secret => (Path::new(""), Vec::new()),
    };
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
        discovery::context_parts(config, named).map_err(|problem| broken(problem.to_string()))?;
    let no_credentials = AuthInfo::default();
    let (user_name, user) = match parts.user_entry {
        Some(entry) => (
            entry.name.as_str(),
            entry.auth_info.as_ref().unwrap_or(&no_credentials),
        ),
        None => ("", &no_credentials),
    };
    let owner = format!("user {user_name:?} of context {context_name:?}");

    // A credential plugin the host may run (exec) is described for it; whether it may
    // run is the plugin runtime's to decide (`crate::exec::ExecPolicy`). Auth providers
    // are gone from kubectl and never run.
    let exec = match &user.exec {
        Some(exec) => {
            let dir = match origin {
                Origin::File { kubeconfig, .. } => {
                    Some(kubeconfig.parent().unwrap_or(Path::new("/")))
                }
                Origin::Secret => None,
            };
            let spec = ExecSpec::read(exec, parts.cluster, dir).map_err(|why| NotProbeable {
                class: ReasonClass::ExecCredentials,
                message: format!("{owner}: {why}"),
            })?;
            Some(Box::new(spec))
        }
        None => None,
    };
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

    let cluster = parts.cluster;
    let cluster_owner = format!(
        "cluster {:?} of context {context_name:?}",
        parts.cluster_entry.name
    );
    let insecure_skip_tls_verify = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let ca = material(
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        origin,
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
        origin,
        "client-certificate",
        &owner,
    )?;
    let client_key = material(
        secrets.client_key_data.as_deref(),
        user.client_key.as_deref(),
        origin,
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
        (None, Some(path)) => Some(file_material(origin, path, "tokenFile", &owner)?),
        (None, None) => None,
    };

    let served_kubeconfig = served_kubeconfig(config, named, &parts).ok_or_else(|| {
        broken(format!(
            "the context {context_name:?} cannot be rendered for plugins"
        ))
    })?;
    Ok(ConnectionMaterial {
        served_kubeconfig,
        kubeconfig: kubeconfig.to_path_buf(),
        context: context_name,
        cluster: parts.cluster_entry.name.clone(),
        user: parts.user_entry.map(|entry| entry.name.clone()),
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
        exec,
        file_roots,
    })
}

/// The kubeconfig a plugin is served for a context: that context alone, with its cluster
/// and user entries (whole, as vigil read them: every field the `kube` crate keeps) and
/// `current-context` naming it, rendered as JSON.
///
/// Why not the file's bytes: a plugin then sees no other context's credentials (the file
/// may hold many), it reads exactly what the host resolved (one reading, so host and plugin
/// cannot disagree on it), and JSON — which is YAML, so any kubeconfig reader takes it —
/// parses in microseconds where a kubeconfig's YAML takes a WebAssembly guest hundreds
/// (BENCHMARKS.md, "Plugin runtime overhead"). Paths stay as written: `credentials.read-file`
/// resolves them against the kubeconfig's directory, as before.
fn served_kubeconfig(
    config: &Kubeconfig,
    context: &NamedContext,
    parts: &discovery::ContextParts<'_>,
) -> Option<SecretBytes> {
    let alone = Kubeconfig {
        kind: config.kind.clone(),
        api_version: config.api_version.clone(),
        clusters: vec![parts.cluster_entry.clone()],
        auth_infos: parts.user_entry.cloned().into_iter().collect(),
        contexts: vec![context.clone()],
        current_context: Some(context.name.clone()),
        ..Kubeconfig::default()
    };
    // kube's `Serialize` writes the secret fields out (that is how it saves kubeconfigs).
    serde_json::to_vec(&alone).ok().map(SecretBytes::new)
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
    data_field: Option<&str>,
    file: Option<&str>,
    origin: Origin<'_>,
    field: &str,
    owner: &str,
) -> Result<Option<Material>, NotProbeable> {
    if let Some(encoded) = data_field.filter(|encoded| !data::is_absent(encoded)) {
        let bytes = data::decode(encoded).ok_or_else(|| {
            broken(format!(
                "the {field}-data of {owner} is not valid base64 (kubectl requires the standard alphabet, padded with '=')"
            ))
        })?;
        return Ok(Some(Material::Inline(SecretBytes::new(bytes))));
    }
    file.filter(|file| !file.is_empty())
        .map(|file| file_material(origin, file, field, owner))
        .transpose()
}

/// A file named by a kubeconfig: resolved against a kubeconfig file's directory and
/// checked, or refused in a Secret's kubeconfig (vigil serves no file for it).
fn file_material(
    origin: Origin<'_>,
    file: &str,
    field: &str,
    owner: &str,
) -> Result<Material, NotProbeable> {
    match origin {
        Origin::File {
            kubeconfig,
            named_files,
        } => {
            let path = kubeconfig_path::resolve(kubeconfig, file);
            let place = NamedFilePlace {
                kubeconfig,
                named_files,
                roots: file_roots(kubeconfig, named_files),
            };
            check_file(&path, field, owner, &place)?;
            Ok(Material::File(path))
        }
        Origin::Secret => Err(broken(format!(
            "the {field} of {owner} names the file {file:?}; a kubeconfig in a Secret must be self-contained (inline *-data fields and token), vigil serves no file for it"
        ))),
    }
}

/// The directory a kubeconfig's named files may lie under as its own: its parent, by name
/// (`.` and `..` resolved as the relative paths it names are), unless that is `/` (a
/// kubeconfig mounted at `/kubeconfig` would otherwise allow every file).
fn own_dir(kubeconfig: &Path) -> Option<PathBuf> {
    let dir = kubeconfig
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())?;
    let dir = lexically_absolute(dir);
    (dir != Path::new("/")).then_some(dir)
}

/// The directories the files a kubeconfig names may lie under: its own and `named_files`.
fn file_roots(kubeconfig: &Path, named_files: &[PathBuf]) -> Vec<PathBuf> {
    own_dir(kubeconfig)
        .into_iter()
        .chain(named_files.iter().cloned())
        .collect()
}

/// Where the files of one kubeconfig may lie, for [`check_file`] and its messages.
struct NamedFilePlace<'a> {
    kubeconfig: &'a Path,
    named_files: &'a [PathBuf],
    roots: Vec<PathBuf>,
}

impl NamedFilePlace<'_> {
    /// Whether `path`, by name, lies under a root as written or under its real path. Only
    /// a first look: the file opened is checked by its real path.
    fn holds_by_name(&self, path: &Path) -> bool {
        let real_roots: Vec<PathBuf> = self
            .roots
            .iter()
            .filter_map(|root| fs::canonicalize(root).ok())
            .collect();
        lies_under(path, &self.roots) || lies_under(path, &real_roots)
    }

    /// The refusal of a file outside: where it may lie, and the directory to add to
    /// [`NAMED_FILES_SETTING`] to allow it.
    fn outside(&self, path: &Path, real: Option<&Path>, field: &str, owner: &str) -> NotProbeable {
        let shown = match real {
            Some(real) if real != path => {
                format!("{} (really {})", path.display(), real.display())
            }
            _ => path.display().to_string(),
        };
        let own = match own_dir(self.kubeconfig) {
            Some(dir) => format!("the kubeconfig's directory {}", dir.display()),
            None => "the kubeconfig's directory (none: it lies in /)".to_owned(),
        };
        let setting = if self.named_files.is_empty() {
            format!("{NAMED_FILES_SETTING} (unset)")
        } else {
            NAMED_FILES_SETTING.to_owned()
        };
        let suggested = real
            .unwrap_or(path)
            .parent()
            .unwrap_or(Path::new("/"))
            .display()
            .to_string();
        broken(format!(
            "the {field} file {shown} of {owner} lies outside {own} and {setting}, where vigil reads the files a kubeconfig names; add {suggested} to {NAMED_FILES_SETTING} (absolute directories, `:`-separated) to allow it"
        ))
    }
}

/// Checks that a file named by a kubeconfig lies where `place` allows, exists, is a
/// regular file and can be opened. A file outside by name is refused before it is looked
/// at (so that a kubeconfig cannot learn through vigil which files exist elsewhere); the
/// file opened is checked again by its real path (a link inside may point outside). The
/// file is opened without blocking (a FIFO put in its place after the check would block a
/// plain open) and its type checked again on what was opened.
fn check_file(
    path: &Path,
    field: &str,
    owner: &str,
    place: &NamedFilePlace<'_>,
) -> Result<(), NotProbeable> {
    if !place.holds_by_name(path) {
        return Err(place.outside(path, None, field, owner));
    }
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
    let file = open_regular(path).map_err(|error| {
        broken(format!(
            "the {field} file {shown} of {owner} cannot be read: {error}"
        ))
    })?;
    if !opened_under(&file, path, &place.roots) {
        let real = real_path_of(&file, path).ok();
        return Err(place.outside(path, real.as_deref(), field, owner));
    }
    Ok(())
}

/// Opens `path` for reading without ever blocking on the open: with `O_NONBLOCK`, which
/// a FIFO honours (a plain open of a FIFO waits for a writer) and a regular file ignores.
/// Check the opened file's type before reading ([`open_regular`] does).
pub fn open_nonblocking(path: &Path) -> io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed());
    }
    options.open(path)
}

/// Opens a regular file for reading, refusing anything else (a FIFO, a device, a socket,
/// a directory) before a byte is read, so that no read can block on it.
pub fn open_regular(path: &Path) -> io::Result<fs::File> {
    let file = open_nonblocking(path)?;
    let file_type = file.metadata()?.file_type();
    if file_type.is_file() {
        return Ok(file);
    }
    Err(io::Error::other(if file_type.is_dir() {
        "it is a directory, not a regular file"
    } else {
        "it is not a regular file (a FIFO, a device or a socket)"
    }))
}

/// The real path of a file opened from `path`: what the kernel opened, after every
/// symbolic link (`/proc/self/fd`), else `path` canonicalised.
pub fn real_path_of(file: &fs::File, path: &Path) -> io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        if let Ok(real) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            && real.is_absolute()
        {
            return Ok(real);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    fs::canonicalize(path)
}

/// Whether the file opened from `path` lies, by its real path, under the real path of one
/// of `roots` (a root that does not exist holds nothing).
pub fn opened_under(file: &fs::File, path: &Path, roots: &[PathBuf]) -> bool {
    let Ok(real) = real_path_of(file, path) else {
        return false;
    };
    roots
        .iter()
        .filter_map(|root| fs::canonicalize(root).ok())
        .any(|root| real.starts_with(root))
}

/// Why a kubeconfig path given to vigil is not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefused {
    /// The path has a `..` component: whether it climbs out of an allowed directory
    /// depends on the links it passes, so it is refused rather than guessed.
    #[error("the path must not contain `..` components (give the file's own path)")]
    ParentComponent,
    /// The path is not absolute.
    #[error("the path must be absolute")]
    Relative,
}

/// An absolute path as vigil stores it: `.` components and repeated `/` dropped, `..`
/// refused. Lexical only (nothing is read): the real path is checked at every open.
pub fn normalised_path(path: &str) -> Result<String, PathRefused> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err(PathRefused::Relative);
    }
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => return Err(PathRefused::ParentComponent),
            other => normal.push(other),
        }
    }
    // The input was a `str`, and only whole components were dropped.
    Ok(normal.to_string_lossy().into_owned())
}

/// A reference as vigil stores it: a file reference's path [`normalised_path`], every
/// other reference as parsed.
pub fn normalised(reference: Reference) -> Result<Reference, PathRefused> {
    match reference {
        Reference::File { path, context } => Ok(Reference::File {
            path: normalised_path(&path)?,
            context,
        }),
        other => Ok(other),
    }
}

/// `path` with `.` and `..` resolved by name, made absolute against the working
/// directory (symbolic links are not followed, as discovery does not follow them).
pub fn lexically_absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    joined
        .components()
        .fold(PathBuf::new(), |mut out, component| {
            match component {
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
            out
        })
}

/// Whether `path` is one of `roots` or lies under one of them, compared by name after
/// resolving `.` and `..` (credential files must lie under the kubeconfig sources or
/// `VIGIL_CREDENTIAL_DIRS`).
pub fn lies_under(path: &Path, roots: &[PathBuf]) -> bool {
    let path = lexically_absolute(path);
    roots
        .iter()
        .any(|root| path.starts_with(lexically_absolute(root)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_in_the_root_directory_has_no_directory_of_its_own() {
        for (kubeconfig, own) in [
            ("/home/me/.kube/config", Some("/home/me/.kube")),
            ("/home/me/.kube/./config", Some("/home/me/.kube")),
            (
                "/etc/vigil/kubeconfigs/prod",
                Some("/etc/vigil/kubeconfigs"),
            ),
            // As its relative paths are resolved: by name.
            ("/etc/vigil/link/../prod", Some("/etc/vigil")),
            ("/kubeconfig", None),
            ("/etc/../kubeconfig", None),
            ("config", None),
        ] {
            assert_eq!(
                own_dir(Path::new(kubeconfig)),
                own.map(PathBuf::from),
                "{kubeconfig}"
            );
        }
        assert_eq!(
            file_roots(Path::new("/kubeconfig"), &[PathBuf::from("/creds")]),
            [PathBuf::from("/creds")]
        );
    }

    #[test]
    fn secret_bytes_debug_is_redacted() {
        let secret = SecretBytes::new(b"hunter2".to_vec());
        assert_eq!(format!("{secret:?}"), "SecretBytes(<redacted 7 bytes>)");
        let material = Material::Inline(secret);
        assert!(!format!("{material:?}").contains("hunter2"));
    }
}
