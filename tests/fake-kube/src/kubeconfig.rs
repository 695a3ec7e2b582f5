//! Kubeconfig files for the fake clusters, in the shapes real tools write them.
//!
//! - `embedded`: `certificate-authority-data`, `client-certificate-data`, `client-key-data`
//!   (kind, kubeadm);
//! - `files`: paths to PEM files, relative to the kubeconfig (`credentials/NAME/…`), as
//!   minikube-style configs do;
//! - `token`: a bearer token inline, with `certificate-authority-data`;
//! - `token-file`: `tokenFile` naming a file beside the kubeconfig.
//!
//! The context, the cluster entry and the file are named after the cluster; the user entry
//! is `NAME-admin`. Credential files live in a `credentials/` subfolder so that a discovery
//! reading every *file* of the folder as a kubeconfig sees only kubeconfigs. Files are
//! written to a dot-named temporary and renamed, so a watcher never reads half a file.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::resources::Fixtures;
use crate::server::{ClusterError, ClusterHandle, Fleet};

/// The file name of a single kubeconfig holding every context.
pub const SINGLE_FILE_NAME: &str = "kubeconfig.yaml";
/// The key under which a Secret holds a kubeconfig (vigil's `secret://` default).
pub const SECRET_KEY: &str = "kubeconfig";
/// The placeholder for the cluster name in a Secret name.
pub const CLUSTER_PLACEHOLDER: &str = "{cluster}";

/// Errors while writing kubeconfigs.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// A file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The YAML could not be produced.
    #[error("cannot serialise a kubeconfig")]
    Yaml(#[source] serde_saphyr::SerializeError),
    /// A client certificate could not be issued.
    #[error("cannot issue a client certificate for {cluster}")]
    Cluster {
        /// The cluster.
        cluster: String,
        /// The cause.
        #[source]
        source: ClusterError,
    },
    /// The shape names files, which an in-memory kubeconfig cannot hold.
    #[error("a {0} kubeconfig refers to files and cannot be produced in memory")]
    NotSelfContained(KubeconfigShape),
    /// A Secret reference is not `NAMESPACE/NAME`.
    #[error("invalid secret reference {0:?}: expected NAMESPACE/NAME")]
    SecretReference(String),
    /// No cluster to write.
    #[error("no cluster to write a kubeconfig for")]
    NoCluster,
}

/// How a kubeconfig carries the cluster's CA and the user's credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KubeconfigShape {
    /// CA, client certificate and key inline, base64.
    Embedded,
    /// CA, client certificate and key as paths relative to the kubeconfig.
    Files,
    /// CA inline and a bearer token inline.
    Token,
    /// CA inline and a bearer token in a file (`tokenFile`).
    TokenFile,
}

impl KubeconfigShape {
    /// Every shape, in the order `mixed` cycles through them.
    pub const ALL: [KubeconfigShape; 4] = [
        KubeconfigShape::Embedded,
        KubeconfigShape::Files,
        KubeconfigShape::Token,
        KubeconfigShape::TokenFile,
    ];

    /// The nearest shape that needs no file besides the kubeconfig (for Secrets).
    pub fn self_contained(self) -> Self {
        match self {
            Self::Embedded | Self::Files => Self::Embedded,
            Self::Token | Self::TokenFile => Self::Token,
        }
    }
}

impl fmt::Display for KubeconfigShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Embedded => "embedded",
            Self::Files => "files",
            Self::Token => "token",
            Self::TokenFile => "token-file",
        })
    }
}

/// Which shape each cluster's kubeconfig takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapePlan {
    /// The same shape for every cluster.
    Only(KubeconfigShape),
    /// Cluster `i` gets `KubeconfigShape::ALL[i % 4]`.
    Mixed,
}

impl ShapePlan {
    /// The shape of cluster `index`.
    pub fn shape_for(self, index: usize) -> KubeconfigShape {
        match self {
            Self::Only(shape) => shape,
            Self::Mixed => KubeconfigShape::ALL[index % KubeconfigShape::ALL.len()],
        }
    }
}

impl Default for ShapePlan {
    fn default() -> Self {
        Self::Only(KubeconfigShape::Embedded)
    }
}

/// A shape name that is not one of `embedded`, `files`, `token`, `token-file`, `mixed`.
#[derive(Debug, thiserror::Error)]
#[error("unknown kubeconfig shape {0:?}: expected embedded, files, token, token-file or mixed")]
pub struct ShapeError(String);

impl FromStr for ShapePlan {
    type Err = ShapeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "embedded" => Self::Only(KubeconfigShape::Embedded),
            "files" => Self::Only(KubeconfigShape::Files),
            "token" => Self::Only(KubeconfigShape::Token),
            "token-file" => Self::Only(KubeconfigShape::TokenFile),
            "mixed" => Self::Mixed,
            other => return Err(ShapeError(other.to_owned())),
        })
    }
}

/// How to write kubeconfigs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeconfigOptions {
    /// The shape of each cluster's kubeconfig.
    pub shapes: ShapePlan,
    /// One file ([`SINGLE_FILE_NAME`]) with every context, instead of one file per cluster.
    pub single_file: bool,
}

/// A kubeconfig that was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenKubeconfig {
    /// The cluster (and context) name.
    pub cluster: String,
    /// The kubeconfig file (shared by every cluster with `single_file`).
    pub path: PathBuf,
    /// The context to select.
    pub context: String,
    /// The shape used.
    pub shape: KubeconfigShape,
}

/// A Secret of the management cluster, `NAMESPACE/NAME`. A name containing `{cluster}`
/// gives one Secret per cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretTarget {
    /// The namespace.
    pub namespace: String,
    /// The name, possibly with the `{cluster}` placeholder.
    pub name: String,
}

impl FromStr for SecretTarget {
    type Err = KubeconfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(KubeconfigError::SecretReference(text.to_owned())),
        }
    }
}

impl fmt::Display for SecretTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Serialize)]
struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<NamedCluster>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
    preferences: BTreeMap<String, String>,
    users: Vec<NamedUser>,
}

#[derive(Serialize)]
struct NamedCluster {
    name: String,
    cluster: ClusterEntry,
}

#[derive(Serialize)]
struct ClusterEntry {
    #[serde(
        rename = "certificate-authority-data",
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority_data: Option<String>,
    #[serde(
        rename = "certificate-authority",
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority: Option<String>,
    server: String,
}

#[derive(Serialize)]
struct NamedContext {
    name: String,
    context: ContextEntry,
}

#[derive(Serialize)]
struct ContextEntry {
    cluster: String,
    user: String,
}

#[derive(Serialize)]
struct NamedUser {
    name: String,
    user: UserEntry,
}

#[derive(Default, Serialize)]
struct UserEntry {
    #[serde(
        rename = "client-certificate-data",
        skip_serializing_if = "Option::is_none"
    )]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key-data", skip_serializing_if = "Option::is_none")]
    client_key_data: Option<String>,
    #[serde(rename = "client-certificate", skip_serializing_if = "Option::is_none")]
    client_certificate: Option<String>,
    #[serde(rename = "client-key", skip_serializing_if = "Option::is_none")]
    client_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(rename = "tokenFile", skip_serializing_if = "Option::is_none")]
    token_file: Option<String>,
}

/// A file a kubeconfig refers to, relative to the kubeconfig's folder.
struct CredentialFile {
    relative: String,
    contents: Vec<u8>,
    secret: bool,
}

/// One cluster's entries in a kubeconfig, and the files they name.
struct Entries {
    cluster: NamedCluster,
    context: NamedContext,
    user: NamedUser,
    files: Vec<CredentialFile>,
}

fn base64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn entries(cluster: &ClusterHandle, shape: KubeconfigShape) -> Result<Entries, KubeconfigError> {
    let name = cluster.name().to_owned();
    let user_name = format!("{name}-admin");
    let ca_pem = cluster.ca_pem();
    let folder = format!("credentials/{name}");
    let issue = || {
        cluster
            .admin_client_certificate()
            .map_err(|source| KubeconfigError::Cluster {
                cluster: name.clone(),
                source,
            })
    };
    let mut files = Vec::new();
    let mut cluster_entry = ClusterEntry {
        certificate_authority_data: None,
        certificate_authority: None,
        server: cluster.server_url(),
    };
    let mut user = UserEntry::default();
    match shape {
        KubeconfigShape::Embedded => {
            let client = issue()?;
            cluster_entry.certificate_authority_data = Some(base64(ca_pem.as_bytes()));
            user.client_certificate_data = Some(base64(client.certificate_pem().as_bytes()));
            user.client_key_data = Some(base64(client.key_pem().as_bytes()));
        }
        KubeconfigShape::Files => {
            let client = issue()?;
            let file = |file: &str, contents: &str, secret: bool| CredentialFile {
                relative: format!("{folder}/{file}"),
                contents: contents.as_bytes().to_vec(),
                secret,
            };
            files.push(file("ca.crt", &ca_pem, false));
            files.push(file("client.crt", client.certificate_pem(), false));
            files.push(file("client.key", client.key_pem(), true));
            cluster_entry.certificate_authority = Some(files[0].relative.clone());
            user.client_certificate = Some(files[1].relative.clone());
            user.client_key = Some(files[2].relative.clone());
        }
        KubeconfigShape::Token => {
            cluster_entry.certificate_authority_data = Some(base64(ca_pem.as_bytes()));
            user.token = Some(cluster.admin_token().to_owned());
        }
        KubeconfigShape::TokenFile => {
            cluster_entry.certificate_authority_data = Some(base64(ca_pem.as_bytes()));
            let relative = format!("{folder}/token");
            user.token_file = Some(relative.clone());
            files.push(CredentialFile {
                relative,
                contents: cluster.admin_token().as_bytes().to_vec(),
                secret: true,
            });
        }
    }
    Ok(Entries {
        cluster: NamedCluster {
            name: name.clone(),
            cluster: cluster_entry,
        },
        context: NamedContext {
            name: name.clone(),
            context: ContextEntry {
                cluster: name,
                user: user_name.clone(),
            },
        },
        user: NamedUser {
            name: user_name,
            user,
        },
        files,
    })
}

fn render(entries: Vec<Entries>) -> Result<(String, Vec<CredentialFile>), KubeconfigError> {
    let current_context = entries
        .first()
        .map(|e| e.context.name.clone())
        .ok_or(KubeconfigError::NoCluster)?;
    let mut config = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: Vec::with_capacity(entries.len()),
        contexts: Vec::with_capacity(entries.len()),
        current_context,
        preferences: BTreeMap::new(),
        users: Vec::with_capacity(entries.len()),
    };
    let mut files = Vec::new();
    for entry in entries {
        config.clusters.push(entry.cluster);
        config.contexts.push(entry.context);
        config.users.push(entry.user);
        files.extend(entry.files);
    }
    let yaml = serde_saphyr::to_string(&config).map_err(KubeconfigError::Yaml)?;
    Ok((yaml, files))
}

impl ClusterHandle {
    /// This cluster's kubeconfig as YAML, in a self-contained shape (`embedded` or `token`).
    pub fn kubeconfig(&self, shape: KubeconfigShape) -> Result<String, KubeconfigError> {
        if shape != shape.self_contained() {
            return Err(KubeconfigError::NotSelfContained(shape));
        }
        Ok(render(vec![entries(self, shape)?])?.0)
    }
}

/// Writes a file through a dot-named temporary and a rename; `secret` files get mode 0600.
fn write_file(path: &Path, contents: &[u8], secret: bool) -> Result<(), KubeconfigError> {
    let error = |source| KubeconfigError::Write {
        path: path.to_owned(),
        source,
    };
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder).map_err(error)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = folder.join(format!(".{file_name}.tmp"));
    std::fs::write(&temporary, contents).map_err(error)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))
            .map_err(error)?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    std::fs::rename(&temporary, path).map_err(error)
}

fn write_entries(dir: &Path, file: &Path, entries: Vec<Entries>) -> Result<(), KubeconfigError> {
    let (yaml, files) = render(entries)?;
    // Credential files first: the kubeconfig must never name a file that is not there yet.
    for credential in files {
        write_file(
            &dir.join(&credential.relative),
            &credential.contents,
            credential.secret,
        )?;
    }
    write_file(file, yaml.as_bytes(), true)
}

/// Writes kubeconfigs for `clusters` into `dir`: one `NAME.yaml` per cluster, or a single
/// [`SINGLE_FILE_NAME`] with every context (current context: the first cluster). Client
/// certificates are issued on all cores.
pub fn write_kubeconfigs(
    clusters: &[ClusterHandle],
    dir: &Path,
    options: &KubeconfigOptions,
) -> Result<Vec<WrittenKubeconfig>, KubeconfigError> {
    std::fs::create_dir_all(dir).map_err(|source| KubeconfigError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let written: Vec<WrittenKubeconfig> = clusters
        .iter()
        .map(|cluster| {
            let path = if options.single_file {
                dir.join(SINGLE_FILE_NAME)
            } else {
                dir.join(format!("{}.yaml", cluster.name()))
            };
            WrittenKubeconfig {
                cluster: cluster.name().to_owned(),
                path,
                context: cluster.name().to_owned(),
                shape: options.shapes.shape_for(cluster.index()),
            }
        })
        .collect();
    if options.single_file {
        let all = parallel_entries(clusters, options.shapes)?;
        write_entries(dir, &dir.join(SINGLE_FILE_NAME), all)?;
    } else {
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let chunk = clusters.len().div_ceil(threads).max(16);
        std::thread::scope(|scope| {
            let workers: Vec<_> = clusters
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        for cluster in part {
                            let shape = options.shapes.shape_for(cluster.index());
                            let file = dir.join(format!("{}.yaml", cluster.name()));
                            write_entries(dir, &file, vec![entries(cluster, shape)?])?;
                        }
                        Ok::<(), KubeconfigError>(())
                    })
                })
                .collect();
            for worker in workers {
                match worker.join() {
                    Ok(result) => result?,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            Ok::<(), KubeconfigError>(())
        })?;
    }
    Ok(written)
}

/// Builds every cluster's entries on all cores, in cluster order.
fn parallel_entries(
    clusters: &[ClusterHandle],
    shapes: ShapePlan,
) -> Result<Vec<Entries>, KubeconfigError> {
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let chunk = clusters.len().div_ceil(threads).max(16);
    std::thread::scope(|scope| {
        let workers: Vec<_> = clusters
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|cluster| entries(cluster, shapes.shape_for(cluster.index())))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(clusters.len());
        for worker in workers {
            match worker.join() {
                Ok(part) => all.extend(part?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(all)
    })
}

/// A Secret to create in the management cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeconfigSecret {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The data (key → kubeconfig YAML).
    pub data: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for KubeconfigSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The data holds credentials: show only the keys.
        f.debug_struct("KubeconfigSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The Secrets holding `clusters`' kubeconfigs, in self-contained shapes. With `{cluster}`
/// in the target's name: one Secret per cluster, key `kubeconfig`. Otherwise one Secret whose
/// key `kubeconfig` holds every context (current context: the first cluster) and whose key
/// `NAME` holds each cluster's own kubeconfig.
pub fn kubeconfig_secrets(
    clusters: &[ClusterHandle],
    target: &SecretTarget,
    shapes: ShapePlan,
) -> Result<Vec<KubeconfigSecret>, KubeconfigError> {
    let shape_of = |cluster: &ClusterHandle| shapes.shape_for(cluster.index()).self_contained();
    if target.name.contains(CLUSTER_PLACEHOLDER) {
        return clusters
            .iter()
            .map(|cluster| {
                let yaml = cluster.kubeconfig(shape_of(cluster))?;
                Ok(KubeconfigSecret {
                    namespace: target.namespace.clone(),
                    name: target.name.replace(CLUSTER_PLACEHOLDER, cluster.name()),
                    data: BTreeMap::from([(SECRET_KEY.to_owned(), yaml.into_bytes())]),
                })
            })
            .collect();
    }
    let mut data = BTreeMap::new();
    let mut all = Vec::with_capacity(clusters.len());
    for cluster in clusters {
        data.insert(
            cluster.name().to_owned(),
            cluster.kubeconfig(shape_of(cluster))?.into_bytes(),
        );
        all.push(entries(cluster, shape_of(cluster))?);
    }
    data.insert(SECRET_KEY.to_owned(), render(all)?.0.into_bytes());
    Ok(vec![KubeconfigSecret {
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        data,
    }])
}

/// Adds the Secrets of [`kubeconfig_secrets`] to `fixtures` (typically the management
/// cluster's, then set with [`ClusterHandle::set_fixtures`]).
pub fn store_kubeconfig_secrets(
    fixtures: &mut Fixtures,
    clusters: &[ClusterHandle],
    target: &SecretTarget,
    shapes: ShapePlan,
) -> Result<Vec<KubeconfigSecret>, KubeconfigError> {
    let secrets = kubeconfig_secrets(clusters, target, shapes)?;
    for secret in &secrets {
        fixtures.insert_secret(&secret.namespace, &secret.name, secret.data.clone());
    }
    Ok(secrets)
}

impl Fleet {
    /// Writes every cluster's kubeconfig into `dir` (see [`write_kubeconfigs`]).
    pub fn write_kubeconfigs(
        &self,
        dir: &Path,
        options: &KubeconfigOptions,
    ) -> Result<Vec<WrittenKubeconfig>, KubeconfigError> {
        write_kubeconfigs(self.clusters(), dir, options)
    }

    /// Stores every cluster's kubeconfig in Secrets of the management cluster `management`
    /// (see [`kubeconfig_secrets`]): `fixtures` plus the Secrets become what it serves.
    pub fn store_kubeconfigs_in_secrets(
        &self,
        management: &ClusterHandle,
        mut fixtures: Fixtures,
        target: &SecretTarget,
        shapes: ShapePlan,
    ) -> Result<Vec<KubeconfigSecret>, KubeconfigError> {
        let secrets = store_kubeconfig_secrets(&mut fixtures, self.clusters(), target, shapes)?;
        management.set_fixtures(fixtures);
        Ok(secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shapes_and_secret_targets() {
        assert_eq!(
            "token-file".parse::<ShapePlan>().expect("valid"),
            ShapePlan::Only(KubeconfigShape::TokenFile)
        );
        assert_eq!(
            "mixed".parse::<ShapePlan>().expect("valid"),
            ShapePlan::Mixed
        );
        assert!("yaml".parse::<ShapePlan>().is_err());
        assert_eq!(ShapePlan::Mixed.shape_for(5), KubeconfigShape::Files);
        let target: SecretTarget = "vigil/{cluster}-kubeconfig".parse().expect("valid");
        assert_eq!(
            (target.namespace.as_str(), target.name.as_str()),
            ("vigil", "{cluster}-kubeconfig")
        );
        for bad in ["vigil", "/name", "ns/", "a/b/c"] {
            assert!(bad.parse::<SecretTarget>().is_err(), "{bad}");
        }
    }
}
