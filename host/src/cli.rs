//! The command line: every setting is a flag and an environment variable
//! (all listed in `examples/vigil.env`), parsed and checked before anything is written.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{
    ApiConfig, EngineConfig, LogFormat, PluginConfig, ReplicaConfig, SecretSetting, SettingError,
};
use vigil_decision::{BrakeConfig, HealthPolicy};

use vigil_domain::discovery::DiscoverySettings;
use vigil_domain::secrets::ManagementCluster;
use vigil_plugin_host::{ProbationPolicy, confine};
use vigil_store::{redact_url, sqlite_path};

/// vigil — a cluster health engine.
///
/// vigil discovers Kubernetes clusters from kubeconfig files, probes each one
/// on a schedule, keeps ONLINE / OFFLINE / UNKNOWN in a database, and cascades
/// confirmed outages to the apps deployed on them.
#[derive(Debug, Parser)]
#[command(
    name = "vigil",
    disable_version_flag = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Print the version, the commit and date of the build, the plugin contract versions
    /// this vigil runs, and the plugins built into it with their SHA-256 digests.
    #[arg(short = 'V', long = "version")]
    pub version: bool,

    /// With --version: a few lines for people, or one JSON object for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine: discover clusters, probe them, keep their status.
    ///
    /// Every flag can also be set by the environment variable shown.
    /// Exit codes: 0 stopped cleanly (SIGINT/SIGTERM), 1 runtime error,
    /// 2 invalid settings, 3 another engine already uses the database.
    Serve(Box<ServeArgs>),

    /// Preview discovery without writing anything: `vigil discover --dry-run`.
    ///
    /// Reads the kubeconfig sources exactly as `vigil serve` would (the same
    /// settings and variables; FILE… given here replaces them) and prints every
    /// context found — name, API server, source file and whether vigil can probe
    /// it — and what `vigil serve` would do with it in the database: insert,
    /// update (and which field), leave unchanged, keep (a manually registered
    /// cluster of that name exists) or ignore (deleted through the API). Clashes
    /// and malformed files are listed with their reason. The database is never
    /// written, and not created when it does not exist. It may run beside a
    /// running `vigil serve`. No credential is ever printed.
    ///
    /// The engine discovers by itself, at start-up and whenever a kubeconfig
    /// changes: this command only previews, so `--dry-run` is required.
    ///
    /// Exit codes: 0 preview printed (malformed files and clashes are part of the
    /// preview), 1 error (the database cannot be read, or its schema is not this
    /// vigil's), 2 invalid settings or `--dry-run` missing.
    Discover(DiscoverArgs),

    /// Show every cluster of a running `vigil serve`: `vigil status`.
    ///
    /// Asks the server's REST API (VIGIL_SERVER, default http://127.0.0.1:8080) for
    /// its clusters and prints one line each: name, status (ONLINE / OFFLINE /
    /// UNKNOWN), conditions, the last probe's outcome and reason class, when it was
    /// last probed, and the plugin chosen for it (`auto`: routed by priority).
    /// `-o json` prints the clusters as the API returns them, as one JSON array.
    ///
    /// When the server requires a token for reads, set VIGIL_API_TOKEN; it is sent
    /// as a bearer token and never printed.
    ///
    /// Exit codes: 0 clusters printed, 1 error (server unreachable, or it answered
    /// with a problem: its title, detail and field are printed), 2 invalid settings.
    Status(StatusArgs),

    /// Probe one cluster now and print the outcome: `vigil probe CLUSTER`.
    ///
    /// Without --apply nothing is written anywhere: vigil loads the plugin directory
    /// as `vigil serve` does (the same settings and variables), finds the cluster in
    /// the database (read only; it may run beside a running `vigil serve`) or, when
    /// the database does not exist or does not know it, among the contexts of the
    /// kubeconfig sources, and probes it once exactly as the engine would: the same
    /// reference resolution, plugin routing, and timeout (the cluster's policy in
    /// force). It prints the outcome, its reason class and message, and how long the
    /// probe took. The cluster's status is not changed.
    ///
    /// With --apply the running server probes it (POST
    /// /api/v1/clusters/CLUSTER/probe on VIGIL_SERVER, with VIGIL_API_TOKEN) and
    /// records the outcome under the engine's rules: counted failures, transitions,
    /// cascades to apps. The database is never written behind the engine's back.
    ///
    /// Exit codes: 0 the probe ran and the cluster is healthy, 1 error (no such
    /// cluster, server unreachable, or it answered with a problem), 2 invalid
    /// settings, 3 the probe ran and the outcome is not healthy (unhealthy,
    /// credentials-rejected, not-probeable or inconclusive).
    Probe(ProbeArgs),

    /// Check manifests for what would block node drains: `vigil audit -f FILE_OR_DIR…`.
    ///
    /// Reads Kubernetes manifests as `kubectl apply -f` and Helm render them: several
    /// YAML or JSON documents per file separated by `---`, empty documents, comments,
    /// `kind: List`; `-` reads standard input, a directory its `.yaml`, `.yml` and
    /// `.json` files (not its sub-directories). It reports, with Kubernetes' own
    /// arithmetic and replica counts taken from the manifests (every replica assumed
    /// running and ready), PodDisruptionBudgets that allow no eviction, budgets the API
    /// server would refuse, budgets that select nothing or overlap, integer
    /// `minAvailable` on scaling workloads, percentages that round surprisingly, the
    /// unhealthy-pod eviction policy of stateless workloads, and topology spread and
    /// anti-affinity pitfalls. A document that cannot be read is named (file, document
    /// number, line) and skipped; the others are still checked. Nothing is contacted.
    ///
    /// Each budget's finding carries the numbers behind it: expected pods, desired
    /// healthy pods, disruptions allowed, and the workloads whose replica counts gave the
    /// expected pods (a `budget:` line in the table, `numbers` in `-o json`).
    ///
    /// Exit codes: 0 no finding at or above --fail-on (by default no blocking finding;
    /// warnings and info may be printed), 1 at least one (with `--fail-on warning`, a
    /// warning is enough), 2 invalid arguments or an input that cannot be read (a
    /// missing file, a document that is not YAML or not a Kubernetes object), whatever
    /// was found — so it can gate a deployment in CI.
    Audit(AuditArgs),
    /// Work with plugin files: `vigil plugin check FILE.wasm`.
    #[command(subcommand)]
    Plugin(PluginCommand),

    /// Move an installation to another database: `vigil migrate --from sqlite://… --to
    /// postgres://…`.
    ///
    /// Creates vigil's schema in the destination (which must exist and hold no vigil
    /// data yet) and copies every cluster, app, outage, deployment, event, audit and the
    /// brake, ids kept: an outage open in the source is open in the destination, with
    /// the apps it degraded still marked, so the recovery that follows restores exactly
    /// them. The source is read in one transaction and never written; the destination
    /// is written in one transaction, all or nothing. Stop `vigil serve` first: a SQLite
    /// source in use by an engine is refused. Credentials in the URLs are never printed.
    ///
    /// Exit codes: 0 copied (the rows per table are printed), 1 error (a database cannot
    /// be opened, the destination is not empty, a write failed: nothing is copied),
    /// 2 invalid arguments, 3 an engine is running on the SQLite source.
    Migrate(MigrateArgs),

    /// Copy the SQLite database while `vigil serve` runs: `vigil backup FILE`.
    ///
    /// Writes a consistent copy of the database of DATABASE_URL (read as `vigil serve`
    /// reads it) to FILE, with SQLite's `VACUUM INTO` in one read transaction: the copy is
    /// the database as one commit left it, and the engine goes on probing and writing
    /// meanwhile. The copy is written to FILE.partial, checked (`PRAGMA
    /// integrity_check`), synced to disk and only then renamed to FILE. It prints FILE and
    /// its size; credentials in DATABASE_URL are never printed. To restore: stop vigil,
    /// put the copy in the database's place, remove the database's `-wal` and `-shm`
    /// files, start vigil.
    ///
    /// Exit codes: 0 copied, 1 error (FILE or FILE.partial exists, the database does not
    /// exist, holds no vigil schema or cannot be read, a write failed: no FILE is left),
    /// 2 invalid arguments, or a DATABASE_URL that is PostgreSQL (back it up with pg_dump)
    /// or in memory.
    Backup(BackupArgs),

    /// Ask the local vigil whether it is alive (or ready): `vigil healthcheck [--ready]`.
    ///
    /// For container images without a shell or curl (a scratch image's HEALTHCHECK, an
    /// exec probe): GET /healthz, or /readyz with --ready, on the address `vigil serve`
    /// listens on (VIGIL_LISTEN, an unspecified address such as 0.0.0.0 or [::] taken as
    /// loopback), or on --url. Nothing is printed when vigil answers 200; otherwise one
    /// line on standard error says why (refused, no answer in time, or the status with
    /// /readyz's reasons).
    ///
    /// Exit codes: 0 vigil answered 200, 1 it did not (or not within --timeout), 2 invalid
    /// arguments.
    Healthcheck(HealthcheckArgs),
}

/// Settings of `vigil backup`.
#[derive(Debug, Clone, Args)]
pub struct BackupArgs {
    /// The copy to write; it must not exist.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The database to copy, as `vigil serve` reads it (a SQLite file).
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "DATABASE_URL",
        default_value = "sqlite://vigil.db",
        hide_env_values = true
    )]
    pub database_url: String,

    /// Output format: a line for people, one JSON object (`file`, `bytes`) for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// Settings of `vigil healthcheck`.
#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// Ask /readyz (ready: discovery done, clusters overdue at start-up probed, the
    /// database answering and taking writes) instead of /healthz (alive).
    #[arg(long = "ready")]
    pub ready: bool,

    /// Where `vigil serve` listens (its own setting; 0.0.0.0 and [::] are asked on
    /// loopback).
    #[arg(
        long = "listen",
        env = "VIGIL_LISTEN",
        value_name = "VIGIL_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,

    /// The URL of vigil's API instead (http:// or https://, with an optional path prefix).
    #[arg(long = "url", value_name = "URL")]
    pub url: Option<String>,

    /// How long the whole check may take, connecting included: seconds (2, 0.5) or a
    /// duration (500ms).
    #[arg(long = "timeout", value_name = "TIMEOUT", default_value = "2",
          value_parser = crate::healthcheck::parse_timeout)]
    pub timeout: Duration,
}

/// Settings of `vigil migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The database to copy from (`sqlite://FILE` or `postgres://…`).
    #[arg(long = "from", value_name = "URL")]
    pub from: String,

    /// The database to copy to (`postgres://…` or `sqlite://FILE`); created tables only.
    #[arg(long = "to", value_name = "URL")]
    pub to: String,

    /// Output format: a line per table for people, one JSON object for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// The `vigil plugin` subcommands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Check a plugin file as vigil would load it: `vigil plugin check FILE.wasm`.
    ///
    /// Loads FILE.wasm exactly as `vigil serve` loads a file of its plugin
    /// directory — it must be a WebAssembly component targeting the probe or the
    /// audit world of a contract version this vigil runs, with a valid NAME.toml
    /// beside it (none means every grant denied), and it must answer info() within
    /// its deadline —
    /// then prints what the plugin says it is (name, version, schemes, description)
    /// and what its NAME.toml grants. A refused file is named with the exact reason.
    /// Nothing is installed: the plugin directory is not touched.
    ///
    /// With --cluster NAME it also probes that cluster once through this plugin,
    /// as `vigil probe NAME` would (the cluster is read from the database, read
    /// only, or found among the kubeconfig contexts), and prints the outcome. The
    /// cluster is routed to the plugin only if its accepts() says yes. Nothing is
    /// written to the database.
    ///
    /// Exit codes: 0 the plugin loads (and, with --cluster, the probe is healthy),
    /// 1 error (the file cannot be read, no such cluster, the database cannot be
    /// read), 2 invalid arguments or settings, 3 the probe ran and the outcome is
    /// not healthy, 4 vigil refuses the plugin.
    Check(PluginCheckArgs),
}

/// Settings of `vigil plugin check`.
#[derive(Debug, Clone, Args)]
pub struct PluginCheckArgs {
    /// The plugin file (`NAME.wasm`; its grants are read from `NAME.toml` beside it).
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,

    /// Also probe this cluster once through the plugin (its name in the database, or
    /// a kubeconfig context), writing nothing.
    #[arg(long = "cluster", value_name = "NAME")]
    pub cluster: Option<String>,

    /// Seconds the probe may take, unless the cluster's own policy says otherwise.
    #[arg(long = "timeout", env = "CLUSTER_HEALTH_TIMEOUT", value_name = "CLUSTER_HEALTH_TIMEOUT",
          default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub timeout: u32,

    /// Output format: a few lines for people, one JSON object for programs (a refusal
    /// too: `accepted` false and the engine's `reason`, still exit code 4).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// Where kubeconfigs and the database are (with --cluster).
    #[command(flatten)]
    pub sources: SourceArgs,

    /// Credential directories, cache and management cluster, as for `vigil serve` (the
    /// credential settings matter with --cluster).
    #[command(flatten)]
    pub access: PluginAccessArgs,
}

impl PluginCheckArgs {
    /// The plugin settings as `vigil serve` would read them, for a plugin directory
    /// `plugin_dir` (the private one the file is checked in).
    pub fn plugin_config(
        &self,
        plugin_dir: &Path,
        home_dir: Option<&Path>,
    ) -> Result<PluginConfig, SettingError> {
        PluginArgs {
            plugin_dir: plugin_dir.to_path_buf(),
            // The file is checked alone, as the only plugin of its directory.
            embedded: false,
            access: self.access.clone(),
            probation_probes: ProbationPolicy::default().probes,
            probation_max_inconclusive: ProbationPolicy::default().max_inconclusive_ratio,
        }
        .config(home_dir)
    }
}

/// Settings of `vigil audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Manifest files or directories to check; `-` for standard input.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE_OR_DIR",
        required = true,
        num_args = 1..
    )]
    pub files: Vec<PathBuf>,

    /// Output format: a table for people, JSON for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// The least severity that fails the audit (exit code 1): `blocking` findings only,
    /// or `warning` and `blocking` findings.
    #[arg(long = "fail-on", value_enum, value_name = "SEVERITY", default_value_t = FailOn::Blocking)]
    pub fail_on: FailOn,
}

/// The least severity of finding that makes `vigil audit` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// A warning or a blocking finding.
    Warning,
    /// A blocking finding (the default).
    Blocking,
}

/// How to reach a running `vigil serve`: the settings that `vigil status` and
/// `vigil probe --apply` share.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The URL of the running vigil's REST API (http:// or https://).
    #[arg(
        long = "server",
        env = "VIGIL_SERVER",
        value_name = "VIGIL_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,

    /// The bearer token sent to the server (prefer the variable: a flag shows in `ps`).
    #[arg(
        long = "api-token",
        env = "VIGIL_API_TOKEN",
        value_name = "VIGIL_API_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

/// Settings of `vigil status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Output format: a table for people, JSON for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// Which server to ask.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Settings of `vigil probe`.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// The cluster's name (for a discovered cluster, its context's name).
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,

    /// Have the running server probe it and record the outcome (needs VIGIL_SERVER and,
    /// when the server has tokens, VIGIL_API_TOKEN).
    #[arg(long = "apply")]
    pub apply: bool,

    /// Output format: a few lines for people, JSON for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// The server, with --apply.
    #[command(flatten)]
    pub server: ServerArgs,

    /// Seconds a probe may take, unless the cluster's own policy says otherwise (without
    /// --apply; the server uses its own).
    #[arg(long = "timeout", env = "CLUSTER_HEALTH_TIMEOUT", value_name = "CLUSTER_HEALTH_TIMEOUT",
          default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub timeout: u32,

    /// Where kubeconfigs and the database are (without --apply).
    #[command(flatten)]
    pub sources: SourceArgs,

    /// The probe plugins (without --apply).
    #[command(flatten)]
    pub plugins: PluginArgs,
}

/// Settings of `vigil discover`.
#[derive(Debug, Clone, Args)]
pub struct DiscoverArgs {
    /// Only preview (required: the engine itself discovers; nothing here writes).
    #[arg(long = "dry-run")]
    pub dry_run: bool,

    /// Output format: a table for people, JSON for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// Kubeconfig files to read instead of KUBECONFIG_PATH, $KUBECONFIG and KUBECONFIG_DIR.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Where kubeconfigs and the database are.
    #[command(flatten)]
    pub sources: SourceArgs,

    /// Kubeconfig users' exec commands: the preview says whether each would run.
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Whether the mass-failure brake may engage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BrakeSwitch {
    /// The brake engages on mass failure (default).
    On,
    /// The brake never engages.
    Off,
}

/// Settings of `vigil serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Seconds between two probes of a cluster.
    #[arg(long = "interval", env = "CLUSTER_HEALTH_INTERVAL", value_name = "CLUSTER_HEALTH_INTERVAL",
          default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub interval: u32,

    /// Consecutive counted failures that confirm an outage (ONLINE→OFFLINE).
    #[arg(long = "failure-threshold", env = "CLUSTER_HEALTH_FAILURE_THRESHOLD",
          value_name = "CLUSTER_HEALTH_FAILURE_THRESHOLD", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub failure_threshold: u32,

    /// Consecutive healthy probes that end a confirmed outage.
    #[arg(long = "success-threshold", env = "CLUSTER_HEALTH_SUCCESS_THRESHOLD",
          value_name = "CLUSTER_HEALTH_SUCCESS_THRESHOLD", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub success_threshold: u32,

    /// Seconds a probe may take before the cluster counts as timed out.
    #[arg(long = "timeout", env = "CLUSTER_HEALTH_TIMEOUT", value_name = "CLUSTER_HEALTH_TIMEOUT",
          default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub timeout: u32,

    /// Seconds after a cluster is first registered during which failures are not counted.
    #[arg(long = "start-period", env = "CLUSTER_HEALTH_START_PERIOD",
          value_name = "CLUSTER_HEALTH_START_PERIOD", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub start_period: u32,

    /// Seconds between two drain-readiness audits of an ONLINE cluster (by an audit
    /// plugin such as pdb-audit; without one, clusters are not audited).
    #[arg(long = "audit-interval", env = "CLUSTER_AUDIT_INTERVAL",
          value_name = "CLUSTER_AUDIT_INTERVAL", default_value_t = 3600,
          value_parser = clap::value_parser!(u32).range(1..=604_800))]
    pub audit_interval: u32,

    /// Seconds one audit may take (it lists every budget, workload, pod and node).
    #[arg(long = "audit-timeout", env = "CLUSTER_AUDIT_TIMEOUT",
          value_name = "CLUSTER_AUDIT_TIMEOUT", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub audit_timeout: u32,

    /// How many probes may run at the same time.
    #[arg(long = "concurrency", env = "CLUSTER_HEALTH_CONCURRENCY",
          value_name = "CLUSTER_HEALTH_CONCURRENCY", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Fraction (0 < ratio ≤ 1) of the fleet that must fail at once for the brake to hold.
    #[arg(long = "mass-failure-ratio", env = "CLUSTER_HEALTH_MASS_FAILURE_RATIO",
          value_name = "CLUSTER_HEALTH_MASS_FAILURE_RATIO", default_value_t = 1.0,
          value_parser = parse_ratio)]
    pub mass_failure_ratio: f64,

    /// Least number of failed clusters for the brake to hold.
    #[arg(long = "mass-failure-min", env = "CLUSTER_HEALTH_MASS_FAILURE_MIN",
          value_name = "CLUSTER_HEALTH_MASS_FAILURE_MIN", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub mass_failure_min: u32,

    /// Seconds of the brake's sliding window [default: the largest effective interval].
    #[arg(long = "mass-failure-window", env = "CLUSTER_HEALTH_MASS_FAILURE_WINDOW",
          value_name = "CLUSTER_HEALTH_MASS_FAILURE_WINDOW",
          value_parser = clap::value_parser!(u32).range(1..=604_800))]
    pub mass_failure_window: Option<u32>,

    /// Whether the mass-failure brake may engage.
    #[arg(long = "brake", env = "CLUSTER_HEALTH_BRAKE", value_name = "CLUSTER_HEALTH_BRAKE",
          value_enum, default_value_t = BrakeSwitch::On)]
    pub brake: BrakeSwitch,

    /// Where kubeconfigs and the database are.
    #[command(flatten)]
    pub sources: SourceArgs,

    /// The probe plugins and where they may read credentials.
    #[command(flatten)]
    pub plugins: PluginArgs,

    /// One metrics series per cluster (`vigil_cluster_status`); off by default, so that
    /// 10,000 clusters do not make 10,000 series.
    #[arg(long = "metrics-per-cluster", env = "VIGIL_METRICS_PER_CLUSTER",
          value_name = "VIGIL_METRICS_PER_CLUSTER", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub metrics_per_cluster: bool,

    /// Log format.
    #[arg(long = "log-format", env = "VIGIL_LOG_FORMAT", value_name = "VIGIL_LOG_FORMAT",
          value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Days the transition history is kept; older events and closed outages are pruned
    /// every hour (an open outage and its events are always kept).
    #[arg(long = "history-retention-days", env = "VIGIL_HISTORY_RETENTION_DAYS",
          value_name = "VIGIL_HISTORY_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub history_retention_days: u32,

    /// This replica's id among the replicas sharing one PostgreSQL database (unique
    /// among them) [default: the host name and the process id].
    #[arg(
        long = "replica-id",
        env = "VIGIL_REPLICA_ID",
        value_name = "VIGIL_REPLICA_ID"
    )]
    pub replica_id: Option<String>,

    /// The node this replica runs on (in Kubernetes, from the downward API's
    /// `spec.nodeName`), so that replicas on one node are not taken as independent.
    #[arg(
        long = "node-name",
        env = "VIGIL_NODE_NAME",
        value_name = "VIGIL_NODE_NAME"
    )]
    pub node_name: Option<String>,

    /// Seconds a replica's claim on a cluster lasts at least (PostgreSQL); a claim also
    /// lasts the cluster's probe timeout plus 16 s (its grace and the write). A replica
    /// that dies loses its claims after it.
    #[arg(long = "claim-lease", env = "VIGIL_CLAIM_LEASE", value_name = "VIGIL_CLAIM_LEASE",
          default_value_t = 30, value_parser = clap::value_parser!(u32).range(5..=3600))]
    pub claim_lease: u32,

    /// Among replicas: a replica whose own probes fail while the others' succeed is cut
    /// off, and its failures are not counted (`false` switches this safeguard off).
    #[arg(long = "replica-brake", env = "VIGIL_REPLICA_BRAKE", value_name = "VIGIL_REPLICA_BRAKE",
          default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub replica_brake: bool,

    /// Among replicas: the failure that takes a cluster OFFLINE must come from another
    /// replica than the previous counted failure, while one could give it (`false`
    /// switches this safeguard off).
    #[arg(long = "second-opinion", env = "VIGIL_SECOND_OPINION", value_name = "VIGIL_SECOND_OPINION",
          default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub second_opinion: bool,

    /// The notifications file (TOML): webhooks and Alertmanagers to tell of confirmed
    /// outages, recoveries, cascades, brake changes and plugin rollbacks. Read again on
    /// SIGHUP; a file that cannot be used is refused and the one in force kept.
    #[arg(
        long = "notify-config",
        env = "VIGIL_NOTIFY_CONFIG",
        value_name = "VIGIL_NOTIFY_CONFIG"
    )]
    pub notify_config: Option<PathBuf>,

    /// The REST API.
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Where kubeconfigs are, where the files they name may lie, and which database holds the
/// clusters: the settings that `vigil serve` and `vigil discover --dry-run` share, so that a
/// preview reads exactly what the engine would.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Kubeconfig files to discover, `:`-separated [default: $KUBECONFIG, else ~/.kube/config].
    #[arg(
        long = "kubeconfig-path",
        env = "KUBECONFIG_PATH",
        value_name = "KUBECONFIG_PATH"
    )]
    pub kubeconfig_path: Option<OsString>,

    /// A directory whose every file is a kubeconfig (e.g. a mounted Secret).
    #[arg(
        long = "kubeconfig-dir",
        env = "KUBECONFIG_DIR",
        value_name = "KUBECONFIG_DIR"
    )]
    pub kubeconfig_dir: Option<PathBuf>,

    /// Directories, besides a kubeconfig's own, under which the files it names
    /// (certificate-authority, client-certificate, client-key, tokenFile) may lie,
    /// `:`-separated, by real path: elsewhere its clusters are not probeable (e.g.
    /// ~/.minikube for minikube's kubeconfig) [default: none, the kubeconfig's own directory
    /// only].
    #[arg(
        long = "kubeconfig-credential-dirs",
        env = "VIGIL_KUBECONFIG_CREDENTIAL_DIRS",
        value_name = "VIGIL_KUBECONFIG_CREDENTIAL_DIRS",
        value_delimiter = ':'
    )]
    pub kubeconfig_credential_dirs: Vec<PathBuf>,

    /// The database [default: a SQLite file `vigil.db` in the working directory].
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "DATABASE_URL",
        default_value = "sqlite://vigil.db",
        hide_env_values = true,
        hide_default_value = false
    )]
    pub database_url: String,

    /// kubectl's own variable, read when KUBECONFIG_PATH is unset.
    #[arg(long = "kubeconfig", env = "KUBECONFIG", hide = true)]
    pub kubeconfig_env: Option<OsString>,
}

impl SourceArgs {
    /// Where discovery looks, as the engine sees it.
    pub fn discovery_settings(&self, home_dir: Option<PathBuf>) -> DiscoverySettings {
        DiscoverySettings {
            kubeconfig_path: self.kubeconfig_path.clone().filter(|p| !p.is_empty()),
            kubeconfig_env: self.kubeconfig_env.clone().filter(|p| !p.is_empty()),
            home_dir,
            kubeconfig_dir: self.kubeconfig_dir.clone(),
            kubeconfig_credential_dirs: self
                .kubeconfig_credential_dirs
                .iter()
                .filter(|dir| !dir.as_os_str().is_empty())
                .cloned()
                .map(vigil_domain::discovery::absolute)
                .collect(),
        }
    }

    /// The SQLite file `DATABASE_URL` names (`None` for an in-memory database), or
    /// why the URL cannot be used.
    pub fn database_path(&self) -> Result<Option<PathBuf>, SettingError> {
        sqlite_path(&self.database_url).map_err(|error| SettingError {
            variable: "DATABASE_URL",
            value: redact_url(&self.database_url),
            reason: match error {
                vigil_store::StoreError::UnsupportedUrl { reason, .. } => reason,
                other => other.to_string(),
            },
        })
    }
}

/// The probe plugins and where they may read credentials: the settings that `vigil serve`
/// and `vigil probe` share, so that a one-off probe runs the plugins the engine runs.
#[derive(Debug, Clone, Args)]
pub struct PluginArgs {
    /// The plugin directory: `NAME.wasm` probe plugins and their `NAME.toml` grants.
    #[arg(
        long = "plugin-dir",
        env = "VIGIL_PLUGIN_DIR",
        value_name = "VIGIL_PLUGIN_DIR",
        default_value = "plugins.d"
    )]
    pub plugin_dir: PathBuf,

    /// Whether the first-party plugins built into vigil (`kubeconfig-file`, `kube-secret`,
    /// `http`, `pdb-audit`) are loaded. A `NAME.wasm` of the plugin directory overrides
    /// the embedded plugin of its name either way.
    #[arg(
        long = "plugins-embedded",
        env = "VIGIL_PLUGINS_EMBEDDED",
        value_name = "VIGIL_PLUGINS_EMBEDDED",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub embedded: bool,

    /// Credential directories, compiled-plugin cache, management cluster.
    #[command(flatten)]
    pub access: PluginAccessArgs,

    /// How many probes a replaced plugin's new generation is judged on before the
    /// previous generation is released; 0 replaces without probation.
    #[arg(
        long = "plugin-probation-probes",
        env = "VIGIL_PLUGIN_PROBATION_PROBES",
        value_name = "VIGIL_PLUGIN_PROBATION_PROBES",
        default_value_t = ProbationPolicy::default().probes
    )]
    pub probation_probes: u32,

    /// The largest share (0–1) of those probes that may be inconclusive; past it the
    /// new generation is marked failed and the previous one serves again.
    #[arg(
        long = "plugin-probation-max-inconclusive",
        env = "VIGIL_PLUGIN_PROBATION_MAX_INCONCLUSIVE",
        value_name = "VIGIL_PLUGIN_PROBATION_MAX_INCONCLUSIVE",
        default_value_t = ProbationPolicy::default().max_inconclusive_ratio,
        value_parser = parse_share
    )]
    pub probation_max_inconclusive: f64,
}

/// Whether and how vigil runs kubeconfig users' `exec` credential commands (`aws eks
/// get-token`, `gke-gcloud-auth-plugin`, `kubelogin`…) for the plugins granted
/// `exec-credentials`.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// A file naming what vigil may run, one entry a line (`#` comments): the program's real
    /// path, the words that must follow it, and each flag that may follow with its value —
    /// a literal, `<name>` or `<any>` (never a pattern after a flag that steers the tool,
    /// such as --endpoint-url, --profile, --debug or a config file). A kubeconfig's command
    /// runs only if its real path and its arguments fit an entry [default: none, and exec
    /// users are not probeable].
    #[arg(
        id = "exec_allow_file",
        long = "exec-allow-file",
        env = "VIGIL_EXEC_ALLOW_FILE",
        value_name = "VIGIL_EXEC_ALLOW_FILE"
    )]
    pub allow_file: Option<PathBuf>,

    /// The former list of allowed program paths: no longer read, and refused at start
    /// with the syntax of VIGIL_EXEC_ALLOW_FILE.
    #[arg(
        id = "exec_allow",
        long = "exec-allow",
        env = "VIGIL_EXEC_ALLOW",
        value_name = "VIGIL_EXEC_ALLOW",
        hide = true
    )]
    pub former_allow: Option<OsString>,

    /// Variables of vigil's own environment handed to every command, comma-separated
    /// (e.g. AWS_ROLE_ARN,AWS_WEB_IDENTITY_TOKEN_FILE for IRSA). Commands get nothing else
    /// of it but PATH=/usr/local/bin:/usr/bin:/bin and HOME; never DATABASE_URL or a
    /// VIGIL_ variable.
    #[arg(
        id = "exec_env",
        long = "exec-env",
        env = "VIGIL_EXEC_ENV",
        value_name = "VIGIL_EXEC_ENV",
        value_delimiter = ','
    )]
    pub env: Vec<String>,

    /// The names a kubeconfig's exec `env` may set, comma-separated (e.g. AWS_PROFILE);
    /// an entry of any other name makes its cluster not probeable. List a name only if
    /// whoever writes a kubeconfig may choose its value: BASH_ENV, NODE_OPTIONS,
    /// PYTHONPATH, AWS_CONFIG_FILE… make a program run code or talk elsewhere. Never one of
    /// VIGIL_EXEC_ENV's, which a kubeconfig does not override [default: none].
    #[arg(
        id = "exec_kubeconfig_env",
        long = "exec-kubeconfig-env",
        env = "VIGIL_EXEC_KUBECONFIG_ENV",
        value_name = "VIGIL_EXEC_KUBECONFIG_ENV",
        value_delimiter = ','
    )]
    pub kubeconfig_env: Vec<String>,

    /// Whether kubeconfigs read from Kubernetes Secrets may run their exec command
    /// (whoever writes the Secret chooses the command's arguments).
    #[arg(
        id = "exec_from_secrets",
        long = "exec-from-secrets",
        env = "VIGIL_EXEC_FROM_SECRETS",
        value_name = "VIGIL_EXEC_FROM_SECRETS",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub from_secrets: bool,

    /// How long a command may run before it and everything it started are killed: seconds
    /// (`10`, `0.5`) or a duration (`1500ms`).
    #[arg(
        id = "exec_timeout",
        long = "exec-timeout",
        env = "VIGIL_EXEC_TIMEOUT",
        value_name = "VIGIL_EXEC_TIMEOUT",
        default_value = "10",
        value_parser = crate::healthcheck::parse_timeout
    )]
    pub timeout: Duration,

    /// How many commands may run at once.
    #[arg(
        id = "exec_max_concurrent",
        long = "exec-max-concurrent",
        env = "VIGIL_EXEC_MAX_CONCURRENT",
        value_name = "VIGIL_EXEC_MAX_CONCURRENT",
        default_value_t = 4,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub max_concurrent: u16,

    /// The directory commands run in, vigil's user's only (mode 0700): its `home` is their
    /// HOME (a tool's own cache, `~/.aws`, `~/.kube/cache`…), its `tmp` their TMPDIR; never
    /// vigil's own home, which holds its compiled-plugin cache [default:
    /// $TMPDIR/vigil-exec-UID].
    #[arg(
        id = "exec_dir",
        long = "exec-dir",
        env = "VIGIL_EXEC_DIR",
        value_name = "VIGIL_EXEC_DIR"
    )]
    pub dir: Option<PathBuf>,

    /// Whether commands run under Landlock where the kernel offers it: they may read the
    /// system's programs and libraries, the system files of /etc that TLS and name
    /// resolution need, their own program and VIGIL_EXEC_READ, and write only their own
    /// directory (VIGIL_EXEC_DIR). `off` lets a command read and write whatever vigil's user
    /// may.
    #[arg(
        id = "exec_landlock",
        long = "exec-landlock",
        env = "VIGIL_EXEC_LANDLOCK",
        value_name = "VIGIL_EXEC_LANDLOCK",
        default_value = "on"
    )]
    pub landlock: Switch,

    /// More files and directories commands may read under Landlock, `:`-separated (an
    /// identity's token file: AWS_WEB_IDENTITY_TOKEN_FILE, AZURE_FEDERATED_TOKEN_FILE…).
    /// None may hold one of vigil's own files.
    #[arg(
        id = "exec_read",
        long = "exec-read",
        env = "VIGIL_EXEC_READ",
        value_name = "VIGIL_EXEC_READ",
        value_delimiter = ':'
    )]
    pub read: Vec<PathBuf>,
}

/// A setting that is on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

/// The largest allow-list file vigil reads, in bytes.
const MAX_EXEC_ALLOW_FILE_BYTES: u64 = 1 << 20;

/// An example entry, for messages about the allow-list file.
const EXEC_ALLOW_EXAMPLE: &str = "/usr/local/aws-cli/v2/2.22.0/dist/aws eks get-token --cluster-name <name> --region <name> --output json";

impl ExecArgs {
    /// The settings, checked: the former `VIGIL_EXEC_ALLOW` is refused with the syntax that
    /// replaces it; the allow-list file is read and parsed; a variable vigil keeps for
    /// itself, or one in both variable lists, is refused naming its setting.
    pub fn settings(&self) -> Result<vigil_plugin_host::ExecSettings, SettingError> {
        if let Some(former) = self.former_allow.as_ref().filter(|value| !value.is_empty()) {
            let value = former.to_string_lossy().into_owned();
            let commas = if value.contains(',') {
                " (neither `,` nor `:` separates entries: each is a line of that file)"
            } else {
                ""
            };
            return Err(SettingError {
                variable: "VIGIL_EXEC_ALLOW",
                value,
                reason: format!(
                    "vigil no longer reads this list of program paths, which let a kubeconfig give an allowed program any arguments. Name what may run in a file given by VIGIL_EXEC_ALLOW_FILE (--exec-allow-file){commas}: one entry a line, the program's real path, the words that must follow it, and each flag that may follow with its value (a literal, <name> or <any>), e.g. `{EXEC_ALLOW_EXAMPLE}`; then unset VIGIL_EXEC_ALLOW. A kubeconfig's exec env now sets only the names VIGIL_EXEC_KUBECONFIG_ENV lists"
                ),
            });
        }
        let allow = match &self.allow_file {
            Some(path) if !path.as_os_str().is_empty() => read_exec_allow_file(path)?,
            _ => vigil_domain::exec::allow_list::AllowList::default(),
        };
        let policy = vigil_domain::exec::ExecPolicy::new(
            allow,
            self.env.clone(),
            self.kubeconfig_env.clone(),
            self.from_secrets,
        )
        .map_err(|error| SettingError {
            variable: error.variable,
            value: match error.variable {
                "VIGIL_EXEC_ENV" => self.env.join(","),
                _ => self.kubeconfig_env.join(","),
            },
            reason: error.reason,
        })?;
        let read: Vec<PathBuf> = self
            .read
            .iter()
            .filter(|path| !path.as_os_str().is_empty())
            .cloned()
            .collect();
        if let Some(relative) = read.iter().find(|path| path.is_relative()) {
            return Err(SettingError {
                variable: "VIGIL_EXEC_READ",
                value: relative.display().to_string(),
                reason: "must be an absolute path".to_owned(),
            });
        }
        let dir = self
            .dir
            .clone()
            .filter(|dir| !dir.as_os_str().is_empty())
            .map_or_else(confine::default_dir, vigil_domain::discovery::absolute);
        Ok(vigil_plugin_host::ExecSettings {
            policy,
            timeout: self.timeout,
            max_concurrent: usize::from(self.max_concurrent),
            confinement: confine::Confinement {
                // This very binary, even once a newer one replaces it on disk.
                launcher: Some(PathBuf::from("/proc/self/exe")),
                landlock: self.landlock == Switch::On,
                dir,
                read,
            },
        })
    }
}

/// Reads and parses the allow-list file: a regular file (links followed, as a mounted
/// ConfigMap's are) of at most 1 MiB that other users cannot write (whoever can write it
/// decides what vigil runs).
fn read_exec_allow_file(
    path: &Path,
) -> Result<vigil_domain::exec::allow_list::AllowList, SettingError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let refuse = |reason: String| SettingError {
        variable: "VIGIL_EXEC_ALLOW_FILE",
        value: path.display().to_string(),
        reason,
    };
    let file = vigil_domain::reference::open_regular(path)
        .map_err(|error| refuse(format!("cannot be read: {error}")))?;
    let metadata = file
        .metadata()
        .map_err(|error| refuse(format!("cannot be read: {error}")))?;
    if metadata.permissions().mode() & 0o002 != 0 {
        return Err(refuse(
            "any user can write it, and whoever writes it decides what vigil runs; remove the write permission of others (chmod o-w)".to_owned(),
        ));
    }
    if metadata.len() > MAX_EXEC_ALLOW_FILE_BYTES {
        return Err(refuse(format!(
            "it is larger than {} MiB",
            MAX_EXEC_ALLOW_FILE_BYTES >> 20
        )));
    }
    let mut text = String::new();
    file.take(MAX_EXEC_ALLOW_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|error| refuse(format!("cannot be read as UTF-8 text: {error}")))?;
    vigil_domain::exec::allow_list::AllowList::parse(&text).map_err(|error| {
        refuse(format!(
            "{error} (an entry is the program's real path, the words that must follow it, and each flag that may follow with its value, e.g. `{EXEC_ALLOW_EXAMPLE}`)"
        ))
    })
}

/// What plugins may read and where their compiled code goes: the settings `vigil serve`
/// and `vigil plugin check` share.
#[derive(Debug, Clone, Args)]
pub struct PluginAccessArgs {
    /// More directories under which credential files may lie, `:`-separated (file
    /// references of manually registered clusters and `file:///` plugin parameters; the
    /// kubeconfig sources are always allowed).
    #[arg(
        long = "credential-dirs",
        env = "VIGIL_CREDENTIAL_DIRS",
        value_name = "VIGIL_CREDENTIAL_DIRS",
        value_delimiter = ':'
    )]
    pub credential_dirs: Vec<PathBuf>,

    /// Where clusters may point vigil: CIDR blocks, addresses and host names
    /// (`*.example.com` for every name under example.com), separated by commas
    /// [default: every address but link-local, cloud metadata and unspecified ones].
    /// Registration refuses an endpoint or URL outside it, and plugins never connect to
    /// a cluster address outside it.
    #[arg(
        long = "registration-allow",
        env = "VIGIL_REGISTRATION_ALLOW",
        value_name = "VIGIL_REGISTRATION_ALLOW",
        value_parser = vigil_domain::address_rule::AddressRule::parse
    )]
    pub registration_allow: Option<vigil_domain::address_rule::AddressRule>,

    /// Kubeconfig users' exec commands.
    #[command(flatten)]
    pub exec: ExecArgs,

    /// Where compiled plugins are cached [default: $XDG_CACHE_HOME/vigil, else ~/.cache/vigil].
    #[arg(
        long = "cache-dir",
        env = "VIGIL_CACHE_DIR",
        value_name = "VIGIL_CACHE_DIR"
    )]
    pub cache_dir: Option<PathBuf>,

    /// The XDG base directory for caches, read when VIGIL_CACHE_DIR is unset.
    #[arg(long = "xdg-cache-home", env = "XDG_CACHE_HOME", hide = true)]
    pub xdg_cache_home: Option<PathBuf>,

    /// The kubeconfig (its current context) of the management cluster whose Secrets hold
    /// the kubeconfigs of `secret://` references [default: in-cluster config when vigil
    /// runs in a pod; else `secret://` clusters are not probeable]. It takes precedence
    /// over in-cluster config.
    #[arg(
        long = "management-kubeconfig",
        env = "VIGIL_MANAGEMENT_KUBECONFIG",
        value_name = "VIGIL_MANAGEMENT_KUBECONFIG"
    )]
    pub management_kubeconfig: Option<PathBuf>,

    /// Set by Kubernetes in every pod: in-cluster config for the management cluster when
    /// VIGIL_MANAGEMENT_KUBECONFIG is unset.
    #[arg(
        long = "kubernetes-service-host",
        env = "KUBERNETES_SERVICE_HOST",
        hide = true
    )]
    pub kubernetes_service_host: Option<String>,
}

impl PluginArgs {
    /// Checks the settings that clap cannot check alone.
    pub fn config(&self, home_dir: Option<&Path>) -> Result<PluginConfig, SettingError> {
        Ok(PluginConfig {
            plugin_dir: self.plugin_dir.clone(),
            embedded: self.embedded,
            cache_dir: self.cache_dir(home_dir)?,
            credential_dirs: self
                .access
                .credential_dirs
                .iter()
                .filter(|p| !p.as_os_str().is_empty())
                .cloned()
                .map(vigil_domain::discovery::absolute)
                .collect(),
            registration_allow: self.access.registration_allow.clone().unwrap_or_default(),
            exec: self.access.exec.settings()?,
            probation: ProbationPolicy {
                probes: self.probation_probes,
                max_inconclusive_ratio: self.probation_max_inconclusive,
            },
            management: ManagementCluster::choose(
                self.access
                    .management_kubeconfig
                    .clone()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map(vigil_domain::discovery::absolute)
                    .as_deref(),
                self.access.kubernetes_service_host.as_deref(),
            ),
        })
    }

    /// The compiled-plugin cache: `VIGIL_CACHE_DIR`, else `$XDG_CACHE_HOME/vigil` (an
    /// absolute `XDG_CACHE_HOME` only, as the XDG specification says), else
    /// `~/.cache/vigil`. It must not lie inside the plugin directory: that directory
    /// holds what operators drop in, the cache only what vigil wrote itself.
    fn cache_dir(&self, home_dir: Option<&Path>) -> Result<Option<PathBuf>, SettingError> {
        let explicit = self
            .access
            .cache_dir
            .clone()
            .filter(|p| !p.as_os_str().is_empty());
        let cache_dir = explicit.clone().or_else(|| {
            self.access
                .xdg_cache_home
                .as_ref()
                .filter(|p| p.is_absolute())
                .map(|p| p.join("vigil"))
                .or_else(|| home_dir.map(|home| home.join(".cache").join("vigil")))
        });
        if let Some(dir) = &cache_dir
            && vigil_domain::reference::lies_under(dir, std::slice::from_ref(&self.plugin_dir))
        {
            return Err(SettingError {
                variable: if explicit.is_some() {
                    "VIGIL_CACHE_DIR"
                } else {
                    "VIGIL_PLUGIN_DIR"
                },
                value: if explicit.is_some() {
                    dir.display().to_string()
                } else {
                    self.plugin_dir.display().to_string()
                },
                reason: format!(
                    "the compiled-plugin cache {} would lie inside the plugin directory {}; keep them apart",
                    dir.display(),
                    self.plugin_dir.display()
                ),
            });
        }
        Ok(cache_dir)
    }
}

fn parse_share(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number between 0 and 1".to_owned())?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err("expected a number between 0 and 1".to_owned())
    }
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number between 0 (excluded) and 1".to_owned())?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err("expected a number between 0 (excluded) and 1".to_owned())
    }
}

impl ServeArgs {
    /// Checks the settings that clap cannot check alone.
    pub fn engine_config(&self, home_dir: Option<PathBuf>) -> Result<EngineConfig, SettingError> {
        let database_path = self.sources.database_path()?;
        let defaults = HealthPolicy {
            interval_seconds: self.interval,
            timeout_seconds: self.timeout,
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            start_period_seconds: self.start_period,
            count_auth_failures: false,
            disabled: false,
        };
        let window = self.mass_failure_window.unwrap_or(self.interval);
        let plugins = self.plugins.config(home_dir.as_deref())?;
        let notify = match &self.notify_config {
            Some(path) => {
                Some(
                    vigil_notify::NotifyConfig::load(path).map_err(|error| SettingError {
                        variable: "VIGIL_NOTIFY_CONFIG",
                        value: path.display().to_string(),
                        reason: error.to_string(),
                    })?,
                )
            }
            None => None,
        };
        let config = EngineConfig {
            defaults,
            brake: BrakeConfig {
                enabled: self.brake == BrakeSwitch::On,
                ratio: self.mass_failure_ratio,
                min_failed: self.mass_failure_min,
                window_millis: i64::from(window) * 1000,
            },
            brake_window_explicit: self.mass_failure_window.is_some(),
            concurrency: usize::try_from(self.concurrency).unwrap_or(64),
            discovery: self.sources.discovery_settings(home_dir),
            database_url: self.sources.database_url.clone(),
            database_path,
            plugins,
            log_format: self.log_format,
            api: self.api.config()?,
            metrics_per_cluster: self.metrics_per_cluster,
            history_retention_days: self.history_retention_days,
            audit_interval: Duration::from_secs(u64::from(self.audit_interval)),
            audit_timeout: Duration::from_secs(u64::from(self.audit_timeout)),
            replica: ReplicaConfig {
                id: self.replica_id.clone().unwrap_or_else(default_replica_id),
                node: self.node_name.clone().filter(|node| !node.is_empty()),
                lease: Duration::from_secs(u64::from(self.claim_lease)),
                safeguards: vigil_store::ReplicaSafeguards {
                    brake: self.replica_brake,
                    second_opinion: self.second_opinion,
                },
            },
            notify,
        };
        refuse_exposed_files(&config)?;
        Ok(config)
    }
}

/// Where Kubernetes mounts a pod's service-account token (in-cluster access to the
/// management cluster).
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Refuses to start when exec commands may run under Landlock and one of vigil's own files
/// (its database, compiled-plugin cache, plugin directory, tokens, notification secrets,
/// kubeconfigs and credential directories, the service-account token) lies inside a tree a
/// command may use, or holds one: Landlock only grants, it cannot keep a command out of a
/// part of a tree it may read.
fn refuse_exposed_files(config: &EngineConfig) -> Result<(), SettingError> {
    let exec = &config.plugins.exec;
    let entries = exec.policy.allow.entries();
    if entries.is_empty() {
        return Ok(());
    }
    let programs: Vec<PathBuf> = entries.iter().map(|entry| entry.program.clone()).collect();
    let Some(trees) = exec.confinement.trees(&programs) else {
        return Ok(());
    };
    let mut own: Vec<(&'static str, PathBuf)> = Vec::new();
    if let Some(database) = &config.database_path {
        own.push(("DATABASE_URL", database.clone()));
    }
    if let Some(cache) = &config.plugins.cache_dir {
        own.push(("VIGIL_CACHE_DIR", cache.clone()));
    }
    own.push(("VIGIL_PLUGIN_DIR", config.plugins.plugin_dir.clone()));
    if let Some(file) = &config.api.tokens_file {
        own.push(("VIGIL_API_TOKENS_FILE", file.clone()));
    }
    if let Some(notify) = &config.notify {
        own.extend(
            notify
                .path
                .iter()
                .cloned()
                .map(|path| ("VIGIL_NOTIFY_CONFIG", path)),
        );
        own.extend(
            notify
                .secret_files
                .iter()
                .cloned()
                .map(|path| ("VIGIL_NOTIFY_CONFIG", path)),
        );
    }
    let sources = vigil_domain::discovery::Sources::from_settings(&config.discovery);
    own.extend(
        sources
            .files()
            .iter()
            .map(|file| ("KUBECONFIG_PATH", file.path.clone())),
    );
    own.extend(sources.dir().map(|dir| ("KUBECONFIG_DIR", dir.to_owned())));
    own.extend(
        config
            .discovery
            .kubeconfig_credential_dirs
            .iter()
            .cloned()
            .map(|dir| ("VIGIL_KUBECONFIG_CREDENTIAL_DIRS", dir)),
    );
    own.extend(
        config
            .plugins
            .credential_dirs
            .iter()
            .cloned()
            .map(|dir| ("VIGIL_CREDENTIAL_DIRS", dir)),
    );
    match &config.plugins.management {
        ManagementCluster::Kubeconfig(path) => {
            own.push(("VIGIL_MANAGEMENT_KUBECONFIG", path.clone()));
        }
        ManagementCluster::InCluster => {
            own.push((
                "KUBERNETES_SERVICE_HOST",
                PathBuf::from(SERVICE_ACCOUNT_DIR),
            ));
        }
        ManagementCluster::None => {}
    }
    for (variable, path) in own {
        if let Some(tree) = confine::Confinement::exposes(&trees, &path) {
            let may = if tree.writable {
                "read and write"
            } else {
                "read"
            };
            return Err(SettingError {
                variable,
                value: path.display().to_string(),
                reason: format!(
                    "exec commands may {may} {} (VIGIL_EXEC_ALLOW_FILE allows commands, and they run under Landlock), which holds this or lies inside it; keep vigil's files out of the trees its commands use (move it, VIGIL_EXEC_DIR or VIGIL_EXEC_READ)",
                    tree.path.display()
                ),
            });
        }
    }
    Ok(())
}

/// A replica's default id: the host name (a pod's name in Kubernetes) and the process id.
fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "vigil".to_owned()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// Settings of the REST API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Where the REST API listens.
    #[arg(
        long = "listen",
        env = "VIGIL_LISTEN",
        value_name = "VIGIL_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,

    /// The bearer token that mutations (and reads, with VIGIL_API_READ_AUTH) need.
    #[arg(
        long = "api-token",
        env = "VIGIL_API_TOKEN",
        value_name = "VIGIL_API_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// A file of named tokens, one `NAME:TOKEN` per line; the name is recorded with each change.
    #[arg(
        long = "api-tokens-file",
        env = "VIGIL_API_TOKENS_FILE",
        value_name = "VIGIL_API_TOKENS_FILE"
    )]
    pub tokens_file: Option<PathBuf>,

    /// Whether reads need a token too.
    #[arg(long = "api-read-auth", env = "VIGIL_API_READ_AUTH", value_name = "VIGIL_API_READ_AUTH",
          default_value_t = false, action = clap::ArgAction::Set)]
    pub read_auth: bool,

    /// Where clients reach vigil when it is behind a proxy (an absolute http(s) URL): its
    /// origin may send changes, and without a token its host is answered besides IP
    /// addresses and loopback names.
    #[arg(
        long = "public-url",
        env = "VIGIL_PUBLIC_URL",
        value_name = "VIGIL_PUBLIC_URL"
    )]
    pub public_url: Option<String>,

    /// More host names a request without a token may name in its Host header,
    /// comma-separated (a Service's DNS name other pods use, say). Without a token vigil
    /// answers only requests to an IP address, a loopback name, VIGIL_PUBLIC_URL's host or
    /// these: a page of another site that rebinds its own name to vigil's address is
    /// refused.
    #[arg(
        long = "api-allowed-hosts",
        env = "VIGIL_API_ALLOWED_HOSTS",
        value_name = "VIGIL_API_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,

    /// Listen on a non-loopback address without any token (anyone who can reach it may
    /// change clusters and apps; requests must still name a loopback host or
    /// VIGIL_PUBLIC_URL's host).
    #[arg(long = "insecure-no-auth", env = "VIGIL_INSECURE_NO_AUTH",
          value_name = "VIGIL_INSECURE_NO_AUTH", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub insecure_no_auth: bool,

    /// Open API connections at most; one more is closed at once [default: 4096, lowered
    /// to what the open-files limit leaves when that is less].
    #[arg(long = "api-max-connections", env = "VIGIL_API_MAX_CONNECTIONS",
          value_name = "VIGIL_API_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: Option<u32>,

    /// Event streams (`/api/v1/events`) open at once at most; one more is answered 503
    /// with Retry-After [default: 256, or VIGIL_API_MAX_CONNECTIONS when that is less].
    #[arg(long = "api-max-event-streams", env = "VIGIL_API_MAX_EVENT_STREAMS",
          value_name = "VIGIL_API_MAX_EVENT_STREAMS",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_event_streams: Option<u32>,

    /// Seconds a connection may take to send a request's head; a slower one is closed.
    #[arg(long = "api-header-read-timeout", env = "VIGIL_API_HEADER_READ_TIMEOUT",
          value_name = "VIGIL_API_HEADER_READ_TIMEOUT",
          default_value_t = vigil_api::server::DEFAULT_HEADER_READ_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub header_read_timeout: u32,

    /// Seconds an answer may wait for its client to read it; a connection whose writes
    /// make no progress for that long is closed (an event stream too).
    #[arg(long = "api-write-timeout", env = "VIGIL_API_WRITE_TIMEOUT",
          value_name = "VIGIL_API_WRITE_TIMEOUT",
          default_value_t = vigil_api::server::DEFAULT_WRITE_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub write_timeout: u32,

    /// Open connections from one peer address at most (0: no cap). Behind a proxy or an
    /// Ingress every client is that one peer: raise it there, or set 0. Beyond either cap a
    /// few connections stay reserved for /healthz and /readyz.
    #[arg(long = "api-max-connections-per-peer", env = "VIGIL_API_MAX_CONNECTIONS_PER_PEER",
          value_name = "VIGIL_API_MAX_CONNECTIONS_PER_PEER",
          default_value_t = vigil_api::server::DEFAULT_MAX_CONNECTIONS_PER_PEER,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub max_connections_per_peer: u32,
}

/// `url` with any user information (`user:password@`) shown as `***@`.
fn redact_user_info(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

impl ApiArgs {
    fn config(&self) -> Result<ApiConfig, SettingError> {
        let token = self.token.clone().filter(|t| !t.is_empty());
        if let Some(token) = &token
            && token.len() < vigil_api::auth::MIN_TOKEN_LEN
        {
            return Err(SettingError {
                variable: "VIGIL_API_TOKEN",
                value: "***".to_owned(),
                reason: format!(
                    "a token needs at least {} characters",
                    vigil_api::auth::MIN_TOKEN_LEN
                ),
            });
        }
        // A tokens file must yield tokens: one that cannot be read or holds none stops
        // start-up rather than leaving the API open (it is read again at start).
        if let Some(file) = &self.tokens_file
            && let Err(error) = vigil_api::Access::new(None, Some(file), false)
        {
            return Err(SettingError {
                variable: "VIGIL_API_TOKENS_FILE",
                value: file.display().to_string(),
                reason: error.to_string(),
            });
        }
        let public_url = match self.public_url.as_deref() {
            None | Some("") => None,
            Some(url) => Some(
                vigil_api::PublicUrl::parse(url).map_err(|reason| SettingError {
                    variable: "VIGIL_PUBLIC_URL",
                    value: redact_user_info(url),
                    reason: reason.to_owned(),
                })?,
            ),
        };
        let has_token = token.is_some() || self.tokens_file.is_some();
        if !has_token && !self.listen.ip().is_loopback() && !self.insecure_no_auth {
            return Err(SettingError {
                variable: "VIGIL_LISTEN",
                value: self.listen.to_string(),
                reason: "without VIGIL_API_TOKEN or VIGIL_API_TOKENS_FILE vigil listens only on \
                         loopback; set a token, or pass --insecure-no-auth to accept anyone"
                    .to_owned(),
            });
        }
        if self.read_auth && !has_token {
            return Err(SettingError {
                variable: "VIGIL_API_READ_AUTH",
                value: "true".to_owned(),
                reason: "read auth needs VIGIL_API_TOKEN or VIGIL_API_TOKENS_FILE".to_owned(),
            });
        }
        let max_connections = self
            .max_connections
            .unwrap_or(vigil_api::server::DEFAULT_MAX_CONNECTIONS);
        let max_event_streams = match self.max_event_streams {
            None => vigil_api::server::DEFAULT_MAX_EVENT_STREAMS.min(max_connections),
            Some(streams) => streams,
        };
        if max_event_streams > max_connections {
            return Err(SettingError {
                variable: "VIGIL_API_MAX_EVENT_STREAMS",
                value: max_event_streams.to_string(),
                reason: format!(
                    "each event stream is a connection: at most VIGIL_API_MAX_CONNECTIONS \
                     ({max_connections})"
                ),
            });
        }
        Ok(ApiConfig {
            listen: self.listen,
            token: token.map(SecretSetting),
            tokens_file: self.tokens_file.clone(),
            read_auth: self.read_auth,
            public_url,
            allowed_hosts: self.allowed_hosts.clone(),
            limits: vigil_api::server::ServerLimits {
                max_connections,
                max_event_streams,
                header_read_timeout: Duration::from_secs(u64::from(self.header_read_timeout)),
                write_timeout: Duration::from_secs(u64::from(self.write_timeout)),
                max_connections_per_peer: self.max_connections_per_peer,
            },
            max_connections_set: self.max_connections.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// `vigil discover --dry-run ARGS…`, parsed.
    fn discover(args: &[&str]) -> DiscoverArgs {
        let argv = ["vigil", "discover", "--dry-run"].iter().chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Discover(args)) => args,
            other => panic!("not discover: {other:?}"),
        }
    }

    /// The exec settings of `args`, refused.
    fn refused(args: &[&str]) -> SettingError {
        discover(args).exec.settings().unwrap_err()
    }

    #[test]
    fn the_former_allow_list_is_refused_with_the_syntax_of_the_file() {
        for (value, commas) in [
            ("/usr/local/bin/aws", false),
            ("/usr/local/bin/aws:/usr/bin/gke-gcloud-auth-plugin", false),
            ("/usr/local/bin/aws,/usr/bin/gke-gcloud-auth-plugin", true),
        ] {
            let error = refused(&["--exec-allow", value]);
            assert_eq!(error.variable, "VIGIL_EXEC_ALLOW", "{value}");
            let text = error.to_string();
            assert!(
                text.contains(value)
                    && text.contains("VIGIL_EXEC_ALLOW_FILE")
                    && text.contains("eks get-token --cluster-name <name>")
                    && text.contains("VIGIL_EXEC_KUBECONFIG_ENV"),
                "{text}"
            );
            assert_eq!(
                text.contains("neither `,` nor `:` separates entries"),
                commas,
                "{text}"
            );
        }
        // Empty, it allowed nothing and still does.
        assert!(
            discover(&["--exec-allow", ""])
                .exec
                .settings()
                .unwrap()
                .policy
                .allow
                .is_empty()
        );
    }

    #[test]
    fn the_allow_list_file_is_read_checked_and_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("exec-allow");
        let path = file.to_str().unwrap();
        let write = |text: &str, mode: u32| {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(
            "# EKS\n/usr/local/aws-cli/v2/2.22.0/dist/aws eks get-token --cluster-name <name>\n",
            0o644,
        );
        let settings = discover(&["--exec-allow-file", path])
            .exec
            .settings()
            .unwrap();
        assert_eq!(settings.policy.allow.entries().len(), 1);
        assert_eq!(settings.policy.allow.entries()[0].line, 2);

        for (text, mode, expected) in [
            (
                "\n/usr/bin/aws eks get-token --endpoint-url <any>\n",
                0o644,
                "line 2: --endpoint-url may steer",
            ),
            (
                "aws eks get-token\n",
                0o644,
                "line 1: \"aws\" is not an absolute path",
            ),
            ("/usr/bin/aws\n", 0o666, "chmod o-w"),
        ] {
            write(text, mode);
            let error = refused(&["--exec-allow-file", path]);
            assert_eq!(error.variable, "VIGIL_EXEC_ALLOW_FILE", "{text}");
            let shown = error.to_string();
            assert!(shown.contains(expected) && shown.contains(path), "{shown}");
        }
        for missing in [dir.path().join("absent"), dir.path().to_path_buf()] {
            let error = refused(&["--exec-allow-file", missing.to_str().unwrap()]);
            assert!(error.to_string().contains("cannot be read"), "{error}");
        }
    }

    #[test]
    fn the_names_a_kubeconfig_may_set_are_checked_at_start() {
        let error = refused(&["--exec-kubeconfig-env", "BASH_ENV,DATABASE_URL"]);
        assert_eq!(error.variable, "VIGIL_EXEC_KUBECONFIG_ENV");
        assert!(error.to_string().contains("DATABASE_URL"), "{error}");
        let error = refused(&[
            "--exec-env",
            "AWS_REGION",
            "--exec-kubeconfig-env",
            "AWS_PROFILE,AWS_REGION",
        ]);
        assert_eq!(error.variable, "VIGIL_EXEC_KUBECONFIG_ENV");
        assert!(error.reason.contains("also in VIGIL_EXEC_ENV"), "{error}");
        let settings = discover(&["--exec-kubeconfig-env", "AWS_PROFILE"])
            .exec
            .settings()
            .unwrap();
        assert_eq!(settings.policy.kubeconfig_env, ["AWS_PROFILE"]);
    }

    #[test]
    fn the_kubeconfig_credential_directories_are_made_absolute() {
        let dirs = discover(&["--kubeconfig-credential-dirs", "/home/me/.minikube:creds"])
            .sources
            .discovery_settings(None)
            .kubeconfig_credential_dirs;
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        assert_eq!(dirs[0], Path::new("/home/me/.minikube"));
        assert!(
            dirs[1].is_absolute() && dirs[1].ends_with("creds"),
            "{dirs:?}"
        );
    }
}
