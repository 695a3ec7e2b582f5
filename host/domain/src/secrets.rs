//! Reading Kubernetes Secrets from the management cluster, for `secret://` references and
//! `secret://` credential parameters.
//!
//! The plugin runtime sees only the [`SecretSource`] trait: one read of one key of one
//! Secret. [`ManagementCluster`] says where vigil's own credentials for the management
//! cluster come from, and [`connect`] turns it into a source: [`KubeSecrets`], a `kube`
//! client, or [`Unavailable`], which answers every read with the reason (no management
//! cluster configured, or one that cannot be used) so that `secret://` clusters are
//! not-probeable with a clear message rather than failures.
//!
//! Nothing is cached: every read asks the management cluster, so a rotated Secret is used
//! at the next probe. Values are handed over as [`SecretBytes`] and never appear in an
//! error or a log line; errors name the namespace, the Secret and the key only.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use tracing::{debug, info, warn};

use crate::reference::SecretBytes;

/// The largest Secret value served (Kubernetes itself caps a whole Secret at 1 MiB).
pub const MAX_SECRET_VALUE_BYTES: usize = 1024 * 1024;

/// The longest one Secret read may take, connection included; the runtime bounds it
/// further by what is left of the probe's budget.
pub const SECRET_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A read in progress; `'static` and `Send`, so that a host call can await it without
/// holding the call's state.
pub type SecretRead = Pin<Box<dyn Future<Output = Result<SecretBytes, SecretError>> + Send>>;

/// Where vigil reads Secrets: one key of one Secret at a time.
///
/// Implementations must not cache a value beyond the read that fetched it (a rotated
/// Secret must be seen at the next probe), must bound the time a read takes, and must
/// never put a value in an error or a log line.
pub trait SecretSource: Send + Sync + fmt::Debug {
    /// Reads `key` of the Secret `namespace/name`.
    fn read(&self, namespace: &str, name: &str, key: &str) -> SecretRead;
}

/// Why a Secret could not be read. Messages name the namespace, Secret and key, never a
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// vigil has no usable management cluster.
    #[error("{0}")]
    Unavailable(String),
    /// The Secret does not exist.
    #[error("the Secret {namespace}/{name} does not exist")]
    SecretNotFound {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// The Secret exists but has no such key.
    #[error("the Secret {namespace}/{name} has no key {key:?}")]
    KeyNotFound {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
    },
    /// The management cluster refused vigil's own credentials (401 or 403).
    #[error(
        "the management cluster does not let vigil read the Secret {namespace}/{name} ({code}): give vigil's identity `get` on secrets in {namespace}"
    )]
    Forbidden {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// 401 or 403.
        code: u16,
    },
    /// The value is larger than [`MAX_SECRET_VALUE_BYTES`].
    #[error(
        "the key {key:?} of the Secret {namespace}/{name} is larger than {MAX_SECRET_VALUE_BYTES} bytes"
    )]
    TooLarge {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
    },
    /// The management cluster did not answer in time.
    #[error("reading the Secret {namespace}/{name} took longer than {} ms", .after.as_millis())]
    Timeout {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The bound that passed.
        after: Duration,
    },
    /// The management cluster could not be reached, or answered with an error.
    #[error("cannot read the Secret {namespace}/{name} from the management cluster: {reason}")]
    Management {
        /// The namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What went wrong (kube's error; it never holds a Secret value).
        reason: String,
    },
}

/// Where vigil's own credentials for the management cluster come from:
/// `VIGIL_MANAGEMENT_KUBECONFIG`, or in-cluster config when running in a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ManagementCluster {
    /// A kubeconfig file; its current context is used. Takes precedence over in-cluster
    /// config: an explicit setting wins over what the environment implies.
    Kubeconfig(PathBuf),
    /// The pod's service account (`KUBERNETES_SERVICE_HOST` is set).
    InCluster,
    /// Neither: `secret://` references are not probeable.
    #[default]
    None,
}

impl ManagementCluster {
    /// The choice for the settings given: the kubeconfig when set (non-empty), else
    /// in-cluster config when `KUBERNETES_SERVICE_HOST` is set (non-empty), else none.
    pub fn choose(kubeconfig: Option<&Path>, service_host: Option<&str>) -> Self {
        match (
            kubeconfig.filter(|path| !path.as_os_str().is_empty()),
            service_host.filter(|host| !host.is_empty()),
        ) {
            (Some(path), _) => Self::Kubeconfig(path.to_path_buf()),
            (None, Some(_)) => Self::InCluster,
            (None, None) => Self::None,
        }
    }
}

/// The source of `management`: a client, or — when there is no management cluster or its
/// configuration cannot be used — a source that explains why at every read. Never fails:
/// a broken management configuration must not stop the engine, only `secret://` probes.
pub async fn connect(management: &ManagementCluster) -> Arc<dyn SecretSource> {
    match KubeSecrets::new(management).await {
        Ok(source) => {
            info!(management = %source.describe, "Secrets of secret:// references are read from the management cluster");
            Arc::new(source)
        }
        Err(reason) => {
            if *management == ManagementCluster::None {
                debug!("{reason}");
            } else {
                warn!("secret:// references cannot be probed: {reason}");
            }
            Arc::new(Unavailable(reason))
        }
    }
}

/// A source without a management cluster: every read answers why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl Unavailable {
    /// The source of an engine with no management cluster configured.
    pub fn not_configured() -> Self {
        Self(NOT_CONFIGURED.to_owned())
    }
}

const NOT_CONFIGURED: &str = "vigil has no management cluster to read Secrets from: set VIGIL_MANAGEMENT_KUBECONFIG, or run vigil in a pod with a service account";

impl SecretSource for Unavailable {
    fn read(&self, _namespace: &str, _name: &str, _key: &str) -> SecretRead {
        let error = SecretError::Unavailable(self.0.clone());
        Box::pin(async move { Err(error) })
    }
}

/// Secrets read with the `kube` client from the management cluster.
#[derive(Clone)]
pub struct KubeSecrets {
    client: kube::Client,
    describe: String,
}

impl fmt::Debug for KubeSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSecrets")
            .field("management", &self.describe)
            .finish_non_exhaustive()
    }
}

impl KubeSecrets {
    /// A client for `management`, or why there is none (a message naming the setting or
    /// file, never a credential).
    pub async fn new(management: &ManagementCluster) -> Result<Self, String> {
        let (mut config, describe) = match management {
            ManagementCluster::None => return Err(NOT_CONFIGURED.to_owned()),
            ManagementCluster::Kubeconfig(path) => {
                let shown = path.display();
                let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|error| {
                    format!(
                        "the management kubeconfig {shown} (VIGIL_MANAGEMENT_KUBECONFIG) cannot be read: {}",
                        kubeconfig_problem(&error)
                    )
                })?;
                let options = kube::config::KubeConfigOptions::default();
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|error| {
                        format!(
                            "the management kubeconfig {shown} (VIGIL_MANAGEMENT_KUBECONFIG) cannot be used: {}",
                            kubeconfig_problem(&error)
                        )
                    })?;
                (config, format!("kubeconfig {shown}"))
            }
            ManagementCluster::InCluster => {
                let config = kube::Config::incluster().map_err(|error| {
                    format!("the in-cluster configuration cannot be used: {error}")
                })?;
                (config, "in-cluster service account".to_owned())
            }
        };
        config.connect_timeout = Some(SECRET_READ_TIMEOUT);
        config.read_timeout = Some(SECRET_READ_TIMEOUT);
        config.write_timeout = Some(SECRET_READ_TIMEOUT);
        let describe = format!("{describe}, server {}", config.cluster_url);
        let client = kube::Client::try_from(config)
            .map_err(|error| format!("cannot build the management cluster's client: {error}"))?;
        Ok(Self { client, describe })
    }
}

/// A kube kubeconfig error as text. kube's kubeconfig errors name files, contexts and
/// fields; the YAML parser's could quote the file, so those are reduced to their kind.
fn kubeconfig_problem(error: &kube::config::KubeconfigError) -> String {
    match error {
        kube::config::KubeconfigError::Parse(_) => "it is not valid kubeconfig YAML".to_owned(),
        other => other.to_string(),
    }
}

impl SecretSource for KubeSecrets {
    fn read(&self, namespace: &str, name: &str, key: &str) -> SecretRead {
        let api: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), namespace);
        let (namespace, name, key) = (namespace.to_owned(), name.to_owned(), key.to_owned());
        Box::pin(async move {
            let read = tokio::time::timeout(SECRET_READ_TIMEOUT, api.get_opt(&name)).await;
            let secret = match read {
                Err(_) => {
                    return Err(SecretError::Timeout {
                        namespace,
                        name,
                        after: SECRET_READ_TIMEOUT,
                    });
                }
                Ok(Ok(Some(secret))) => secret,
                Ok(Ok(None)) => return Err(SecretError::SecretNotFound { namespace, name }),
                Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
                    return Err(SecretError::Forbidden {
                        namespace,
                        name,
                        code: status.code,
                    });
                }
                Ok(Err(error)) => {
                    return Err(SecretError::Management {
                        namespace,
                        name,
                        reason: error.to_string(),
                    });
                }
            };
            let Some(value) = secret.data.and_then(|mut data| data.remove(&key)) else {
                return Err(SecretError::KeyNotFound {
                    namespace,
                    name,
                    key,
                });
            };
            if value.0.len() > MAX_SECRET_VALUE_BYTES {
                return Err(SecretError::TooLarge {
                    namespace,
                    name,
                    key,
                });
            }
            Ok(SecretBytes::new(value.0))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_kubeconfig_wins_over_in_cluster_config() {
        let path = Path::new("/etc/vigil/management.yaml");
        assert_eq!(
            ManagementCluster::choose(Some(path), Some("10.0.0.1")),
            ManagementCluster::Kubeconfig(path.to_path_buf())
        );
        assert_eq!(
            ManagementCluster::choose(None, Some("10.0.0.1")),
            ManagementCluster::InCluster
        );
        assert_eq!(
            ManagementCluster::choose(Some(Path::new("")), Some("")),
            ManagementCluster::None
        );
        assert_eq!(
            ManagementCluster::choose(None, None),
            ManagementCluster::None
        );
    }

    #[tokio::test]
    async fn without_a_management_cluster_every_read_says_how_to_configure_one() {
        let source = connect(&ManagementCluster::None).await;
        let error = source
            .read("ns", "name", "kubeconfig")
            .await
            .expect_err("no management cluster");
        assert!(
            error.to_string().contains("VIGIL_MANAGEMENT_KUBECONFIG"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_broken_management_kubeconfig_is_reported_without_quoting_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("management.yaml");
        std::fs::write(&path, "token: hunter2-secret\n[not yaml").expect("write");
        let source = connect(&ManagementCluster::Kubeconfig(path.clone())).await;
        let error = source
            .read("ns", "name", "kubeconfig")
            .await
            .expect_err("unusable")
            .to_string();
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
