//! The configuration of `vigil serve`, checked: plain values that the command line
//! ([`crate::cli`]) builds and the composition ([`crate::serve`]) reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use vigil_decision::{BrakeConfig, HealthPolicy};
use vigil_domain::discovery::DiscoverySettings;
use vigil_domain::secrets::ManagementCluster;
use vigil_plugin_host::ProbationPolicy;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The probe plugins' settings, checked.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The plugin directory.
    pub plugin_dir: PathBuf,
    /// Whether the plugins built into the binary are loaded.
    pub embedded: bool,
    /// The compiled-plugin cache; `None` when no location could be derived.
    pub cache_dir: Option<PathBuf>,
    /// Directories (besides the kubeconfig sources) under which credential files may lie.
    pub credential_dirs: Vec<PathBuf>,
    /// Where clusters may point vigil (`VIGIL_REGISTRATION_ALLOW`).
    pub registration_allow: vigil_domain::address_rule::AddressRule,
    /// How kubeconfig users' exec commands run.
    pub exec: vigil_plugin_host::ExecSettings,
    /// How a replaced plugin's new generation is judged.
    pub probation: ProbationPolicy,
    /// Where the Secrets of `secret://` references are read.
    pub management: ManagementCluster,
}

/// A setting that parsed but cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid value {value} for {variable}: {reason}")]
pub struct SettingError {
    /// The environment variable (and flag) concerned.
    pub variable: &'static str,
    /// The offending value, redacted where it may hold a password.
    pub value: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// The engine's settings, checked.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Global policy defaults.
    pub defaults: HealthPolicy,
    /// Brake settings (the window is resolved against the clusters' intervals at start-up).
    pub brake: BrakeConfig,
    /// Whether the brake window was given explicitly.
    pub brake_window_explicit: bool,
    /// Probe concurrency.
    pub concurrency: usize,
    /// Where kubeconfigs are.
    pub discovery: DiscoverySettings,
    /// The database URL.
    pub database_url: String,
    /// The SQLite file, if the URL names one.
    pub database_path: Option<PathBuf>,
    /// The probe plugins.
    pub plugins: PluginConfig,
    /// Log format.
    pub log_format: LogFormat,
    /// The REST API's settings.
    pub api: ApiConfig,
    /// Whether metrics have one series per cluster.
    pub metrics_per_cluster: bool,
    /// Days the transition history is kept (see [`vigil_engine::retention`]).
    pub history_retention_days: u32,
    /// Between two audits of a cluster.
    pub audit_interval: Duration,
    /// How long one audit may take.
    pub audit_timeout: Duration,
    /// This replica, when replicas share a PostgreSQL database.
    pub replica: ReplicaConfig,
    /// The notification sinks (`VIGIL_NOTIFY_CONFIG`), as read at start-up.
    pub notify: Option<vigil_notify::NotifyConfig>,
}

/// Who this replica is among those sharing one PostgreSQL database (unused on SQLite).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// `VIGIL_REPLICA_ID`.
    pub id: String,
    /// `VIGIL_NODE_NAME`.
    pub node: Option<String>,
    /// `VIGIL_CLAIM_LEASE`: the shortest claim.
    pub lease: Duration,
    /// `VIGIL_REPLICA_BRAKE` and `VIGIL_SECOND_OPINION`.
    pub safeguards: vigil_store::ReplicaSafeguards,
}

/// How long discovery waits for file changes to settle before re-reading.
pub const DISCOVERY_DEBOUNCE: Duration = Duration::from_millis(500);

/// A secret setting: never printed, not even by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSetting(pub String);

impl std::fmt::Debug for SecretSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretSetting(***)")
    }
}

/// The REST API's settings, checked.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Where it listens.
    pub listen: SocketAddr,
    /// `VIGIL_API_TOKEN`.
    pub token: Option<SecretSetting>,
    /// `VIGIL_API_TOKENS_FILE`.
    pub tokens_file: Option<PathBuf>,
    /// `VIGIL_API_READ_AUTH`.
    pub read_auth: bool,
    /// `VIGIL_PUBLIC_URL`.
    pub public_url: Option<vigil_api::PublicUrl>,
    /// `VIGIL_API_ALLOWED_HOSTS`.
    pub allowed_hosts: Vec<String>,
    /// The server's bounds (`VIGIL_API_MAX_CONNECTIONS`, `VIGIL_API_MAX_EVENT_STREAMS`,
    /// `VIGIL_API_HEADER_READ_TIMEOUT`, `VIGIL_API_WRITE_TIMEOUT`,
    /// `VIGIL_API_MAX_CONNECTIONS_PER_PEER`).
    pub limits: vigil_api::server::ServerLimits,
    /// Whether the operator set `VIGIL_API_MAX_CONNECTIONS` (a cap set that does not fit
    /// the open-files limit stops start-up; the default is lowered instead).
    pub max_connections_set: bool,
}
