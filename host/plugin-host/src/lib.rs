//! The plugin runtime of vigil: the only crate that knows wasmtime.
//!
//! [`PluginRuntime::load`] compiles every `NAME.wasm` of the plugin directory (through a
//! compiled-code cache), checks the world and contract version it targets, reads its
//! `NAME.toml` grants, and asks it `info()` under a deadline. A file that fails any step
//! is refused with its name and reason; the others still load.
//!
//! Each call then runs in a fresh store: a WASI context with no files, environment or
//! sockets, a limiter summing the instance's memories and tables against the plugin's
//! cap, an epoch deadline for the guest's CPU and tokio timeouts around the call and
//! every host call. [`PluginRuntime`] implements [`Prober`]: it routes a cluster to a
//! plugin (its explicit plugin, else by priority among those that accept it) and maps what
//! the call did to a [`ProbeOutcome`] by the rules of docs/rules.md#whose-fault (see
//! `outcome.rs`).
//!
//! Plugins reach the network through two doors, both behind one egress policy (see
//! `egress.rs`): the contract's `http` interface, with per-request TLS material,
//! and the standard `wasi:http` outgoing handler, for authors of ordinary `wasi:http`
//! crates. A `wasi:http` request to the cluster's API server is verified with the
//! kubeconfig's cluster TLS settings (CA, server name, skip-verify); any other `https`
//! destination with the system roots; no client certificate is ever presented.
//!
//! Plugin parameters are the manifest's defaults under the cluster's own. Values that are
//! credential references (`file:///…`, `secret://…`) are left out of the `cluster` record
//! and resolved only when the plugin asks through `credentials.parameter`.

mod audit;
mod cache;
mod catalog;
mod contract;
mod egress;
mod engine;
mod event;
mod exec;
mod manifest;
mod outcome;
pub mod plugin_watch;
mod sandbox;
mod source;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use sha2::Digest as _;
use tracing::{Instrument, debug, info, info_span, warn};
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use wasmtime::component::Linker;
use wasmtime::{Store, Trap, UpdateDeadline};

use self::cache::CodeCache;
use self::catalog::{Catalog, Generation, ProbationVerdict};
use self::contract::{PluginInfo, ProbePre, World};
use self::engine::SharedEngine;
use self::outcome::CallEnd;
use self::sandbox::{CallCluster, CallState, KnownKubeconfigs};
use vigil_decision::ProbedBy;
use vigil_domain::address_rule::AddressRule;
use vigil_domain::parameter::{is_credential_reference, is_operator_parameter};
use vigil_domain::probe::{ProbeTarget, Probed, Prober};
use vigil_domain::reference::Reference;
use vigil_domain::secrets::SecretSource;
use vigil_domain::tls::TlsClients;
use vigil_domain::trust;

pub use self::audit::{
    AuditOutcome, Finding as AuditFinding, FindingObject, FindingSeverity, MAX_FINDING_OBJECTS,
    MAX_FINDINGS, MAX_KINDS_READ,
};
pub use self::cache::CacheStatus;
pub use self::catalog::{CandidateFailure, FailureStage, PluginState, ProbationPolicy};
pub use self::egress::{
    MAX_BUFFERED_BYTES_PER_CALL, MAX_DENIED_RECORDED, MAX_REQUEST_BODY_BYTES,
    MAX_RESPONSE_BODY_BYTES, MAX_WASI_HTTP_IN_FLIGHT,
};
pub use self::engine::TICKER_LINGER;
pub use self::event::PluginEvent;
pub use self::exec::ExecSettings;
pub use self::exec::confine;
pub use self::manifest::{DEFAULT_MEMORY_MIB, MAX_MEMORY_MIB, Manifest};
pub use self::outcome::{MAX_DETAIL_BYTES, MAX_DETAILS, MAX_MESSAGE_BYTES};
pub use self::sandbox::{
    CallRecord, LimitHit, MAX_CREDENTIAL_FILE_BYTES, MAX_GUEST_OUTPUT_BYTES,
    MAX_LOG_LINES_PER_CALL, MAX_LOG_MESSAGE_BYTES,
};
pub use self::source::{EmbeddedPlugin, PluginSource};

/// The contract version this runtime runs (`wit/since_v0.1.0`).
pub const SUPPORTED_CONTRACT: &str = "vigil:plugin@0.1.0";

/// The largest plugin file read; a bigger one is refused unread.
pub const MAX_PLUGIN_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How long `info()` may take when a plugin is loaded.
pub const INFO_DEADLINE: Duration = Duration::from_secs(2);

/// How long `accepts` may take when a cluster is routed.
pub const ACCEPTS_DEADLINE: Duration = Duration::from_secs(1);

/// What a call may run past its budget before it is stopped: enough for a plugin that
/// got `timeout` from its last request to report it, well within the worker's grace.
const CALL_GRACE: Duration = Duration::from_millis(200);

/// How many epoch ticks a guest runs between two yields to the executor, so that a
/// guest spinning in a loop never holds a tokio worker thread for its whole deadline.
const YIELD_TICKS: u64 = 5;

/// How the runtime is set up; every path is handed in (the binary reads the
/// environment, `VIGIL_PLUGIN_DIR` and `VIGIL_CACHE_DIR`).
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The plugin directory (`NAME.wasm` and optional `NAME.toml`). A directory that does
    /// not exist holds no plugin; one that exists but cannot be listed is an error.
    pub plugin_dir: PathBuf,
    /// The plugins built into the binary, each loaded unless a `NAME.wasm` of the plugin
    /// directory has its name (the file then overrides it).
    pub embedded: Vec<EmbeddedPlugin>,
    /// The compiled-code cache directory; `None` disables the cache. It must not be
    /// inside the plugin directory; the host creates a `components-v1` directory in it
    /// for its user only, and loads nothing from it that it did not write itself.
    pub cache_dir: Option<PathBuf>,
    /// How many plugin calls may run at once (probes plus audits): sizes the pool.
    pub concurrency: u32,
    /// The files and directories under which `file:///` credential parameters may lie
    /// (`KUBECONFIG_PATH`'s files, `KUBECONFIG_DIR`, `VIGIL_CREDENTIAL_DIRS`).
    /// Absolute paths; empty refuses every `file:///` parameter.
    pub credential_dirs: Vec<PathBuf>,
    /// The directories, besides a kubeconfig's own, under which the files it names may
    /// lie (`VIGIL_KUBECONFIG_CREDENTIAL_DIRS`); empty allows its own directory only.
    pub kubeconfig_credential_dirs: Vec<PathBuf>,
    /// Where the Secrets of `secret://` references and parameters are read (the
    /// management cluster, `vigil_domain::secrets`); `None` answers every such read with how
    /// to configure one. Only namespaces a plugin's `secret-namespaces` grants are read.
    pub secrets: Option<Arc<dyn SecretSource>>,
    /// Where clusters may point vigil (`VIGIL_REGISTRATION_ALLOW`): every connection to a
    /// cluster address is checked against it, after name resolution.
    pub registration_allow: AddressRule,
    /// How kubeconfig users' `exec` commands run (`VIGIL_EXEC_ALLOW_FILE`,
    /// `VIGIL_EXEC_ENV`, `VIGIL_EXEC_KUBECONFIG_ENV`, `VIGIL_EXEC_FROM_SECRETS`…); by
    /// default none does.
    pub exec: ExecSettings,
}

/// Why the runtime could not start at all (a single bad plugin never is one).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The plugin directory cannot be listed.
    #[error("cannot read the plugin directory {dir}")]
    PluginDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// wasmtime refused the engine configuration.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
}

/// Why one plugin file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The file cannot be read.
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// The file, its `NAME.toml` or the plugin directory can be changed by a user other
    /// than vigil's own or root: loading it would hand that user vigil's grants.
    #[error(
        "is not loaded: {0}; only vigil's user and root may be able to change the plugin directory and its files"
    )]
    Untrusted(String),
    /// The file is not WebAssembly at all.
    #[error("is not a WebAssembly component")]
    NotWasm,
    /// The file is a core module, not a component.
    #[error("is a core WebAssembly module, not a component (build for wasm32-wasip2)")]
    CoreModule,
    /// The component does not compile (truncated, corrupt, unsupported features).
    #[error("is not a valid component: {0}")]
    Invalid(String),
    /// The component targets a contract version this runtime does not run.
    #[error(
        "targets {package}@{version}, which this vigil does not support (it runs {SUPPORTED_CONTRACT})"
    )]
    UnsupportedVersion {
        /// The package named, e.g. `vigil:plugin`.
        package: String,
        /// The version named, e.g. `0.9.0`.
        version: String,
    },
    /// The component exports no world of the contract.
    #[error(
        "does not target the probe or the audit world of {SUPPORTED_CONTRACT} (exports: {exports})"
    )]
    WrongWorld {
        /// The component's export names, comma-separated.
        exports: String,
    },
    /// The component imports something the host does not provide.
    #[error("imports what vigil does not provide: {0}")]
    Link(String),
    /// `NAME.toml` is invalid.
    #[error("has an invalid manifest: {0}")]
    Manifest(String),
    /// `info()` trapped, overran its deadline or answered nonsense.
    #[error("did not answer info(): {0}")]
    Info(String),
    /// The plugin asks for more than the running engine can give it.
    #[error("cannot be run by this engine: {0}")]
    Limits(String),
}

impl Refusal {
    /// The stage of loading at which a file was refused.
    pub fn stage(&self) -> FailureStage {
        match self {
            Self::Unreadable(_) | Self::Untrusted(_) => FailureStage::Read,
            Self::NotWasm | Self::CoreModule | Self::Invalid(_) => FailureStage::Compile,
            Self::UnsupportedVersion { .. } | Self::WrongWorld { .. } => FailureStage::World,
            Self::Link(_) => FailureStage::Link,
            Self::Manifest(_) => FailureStage::Manifest,
            Self::Info(_) => FailureStage::Info,
            Self::Limits(_) => FailureStage::Limits,
        }
    }
}

/// A plugin file that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {origin} {reason}")]
pub struct RefusedPlugin {
    /// The file, or the embedded plugin.
    pub origin: PluginSource,
    /// Why.
    pub reason: Refusal,
}

/// Who a loaded plugin is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSummary {
    /// The plugin's name in vigil: the file name without `.wasm`.
    pub name: String,
    /// The generation: 1 for the first file loaded under this name, one more for each
    /// new or changed file (a failed one too).
    pub generation: u64,
    /// The world it targets: `probe` or `audit`.
    pub world: &'static str,
    /// Where it was loaded from: the binary, or a file of the plugin directory.
    pub source: PluginSource,
    /// The name the plugin gives itself.
    pub self_name: String,
    /// The plugin's version.
    pub version: String,
    /// The reference schemes it says it handles.
    pub schemes: Vec<String>,
    /// What it does.
    pub description: String,
    /// Its routing priority.
    pub priority: i32,
    /// What the compiled-code cache did for it: loaded it, or compiled it and why.
    pub cache: CacheStatus,
    /// The sha256 of the file, hex.
    pub hash: String,
    /// The capabilities its `NAME.toml` grants (`log`, `credentials`, `http`).
    pub grants: Vec<String>,
    /// The namespaces whose Secrets it may read (`secret-namespaces`).
    pub secret_namespaces: Vec<String>,
    /// The hosts it may reach beyond the cluster's own (`allowed-hosts`).
    pub allowed_hosts: Vec<String>,
    /// Where its credential parameters may be sent (`credential-hosts`).
    pub credential_hosts: BTreeMap<String, Vec<String>>,
    /// The cap on its instance's memories and tables, in MiB (`memory-mib`).
    pub memory_mib: u32,
}

/// What [`PluginRuntime::load`] did with each file.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// The probe plugins loaded, in routing order (priority, then name).
    pub loaded: Vec<PluginSummary>,
    /// The audit plugins loaded, in routing order.
    pub audits: Vec<PluginSummary>,
    /// The files refused, each with its reason.
    pub refused: Vec<RefusedPlugin>,
}

/// What one [`PluginRuntime::reload`] did.
#[derive(Debug, Clone, Default)]
pub struct ReloadReport {
    /// Candidates that loaded and now serve (a replacement on probation).
    pub promoted: Vec<PluginSummary>,
    /// Candidates that failed; what served before keeps serving.
    pub refused: Vec<RefusedPlugin>,
    /// Plugins whose file is gone, with the generation that retired.
    pub retired: Vec<(String, u64)>,
    /// Files that had not changed since they were last loaded or refused.
    pub unchanged: Vec<String>,
}

/// A plugin's call counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginStats {
    /// Probe calls made.
    pub probes: u64,
    /// Probe calls that ended inconclusive through the plugin's fault.
    pub faults: u64,
    /// `accepts` calls made to route clusters (once per cluster and generation, and again
    /// when what the plugin is shown of a cluster changes, after a call that gave no
    /// answer, after a rollback, and for a cluster not routed for a day).
    pub accepts: u64,
}

/// One plugin name as the API shows it: the generation that serves (or retired), its
/// state and counters, and what failed last.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginStatus {
    /// The plugin's name in vigil.
    pub name: String,
    /// Where it stands.
    pub state: PluginState,
    /// The generation that serves, or that served until the file was removed.
    pub current: Option<PluginSummary>,
    /// Its counters.
    pub stats: PluginStats,
    /// During a probation: the generation kept to roll back to.
    pub previous_generation: Option<u64>,
    /// A candidate generation being checked now.
    pub candidate_generation: Option<u64>,
    /// During a probation: the probes judged so far and how many were inconclusive.
    pub probation: Option<(u32, u32)>,
    /// The last candidate or generation that failed, kept until the plugin is removed.
    pub last_failure: Option<CandidateFailure>,
}

/// One loaded plugin generation.
struct LoadedPlugin {
    summary: PluginSummary,
    name: Arc<str>,
    /// The digest of the `.wasm` and the `.toml` it was loaded from.
    content: String,
    manifest: Arc<Manifest>,
    pre: WorldPre,
    /// Calls made: probes, or audits for an audit plugin.
    probes: AtomicU64,
    faults: AtomicU64,
    /// `accepts` calls made.
    accepts: AtomicU64,
}

/// A plugin generation ready to instantiate, for the world it targets.
pub(crate) enum WorldPre {
    /// A probe plugin.
    Probe(ProbePre),
    /// An audit plugin.
    Audit(contract::AuditPre),
}

impl LoadedPlugin {
    fn probe_pre(&self) -> Option<&ProbePre> {
        match &self.pre {
            WorldPre::Probe(pre) => Some(pre),
            WorldPre::Audit(_) => None,
        }
    }

    fn is_audit(&self) -> bool {
        matches!(self.pre, WorldPre::Audit(_))
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl Generation for LoadedPlugin {
    fn name(&self) -> &str {
        &self.name
    }
    fn generation(&self) -> u64 {
        self.summary.generation
    }
    fn content(&self) -> &str {
        &self.content
    }
    fn priority(&self) -> i32 {
        self.summary.priority
    }
}

/// A cluster's routing decisions: `accepts` is asked once per plugin generation, not per
/// probe, and again after a replacement or when what it is shown of the cluster (name,
/// endpoint, reference, labels, parameters: [`accepts_fingerprint`]) changes.
#[derive(Debug)]
struct ClusterRoutes {
    /// What the answers below were given for.
    shown: u64,
    /// Per plugin name and generation.
    accepts: HashMap<(Arc<str>, u64), bool>,
    /// When the cluster was last routed.
    used: Instant,
}

/// How long a cluster's routing decisions are kept without being used. The runtime is not
/// told when a cluster is deleted (by the API, by discovery, or by another vigil sharing
/// the database), so decisions that nothing uses any more are forgotten after this long;
/// a cluster probed less often than this only has `accepts` asked again.
const ROUTES_IDLE_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

/// How often the routing decisions are swept for idle clusters.
const ROUTES_SWEEP_EVERY: Duration = Duration::from_secs(60 * 60);

/// Every cluster's routing decisions.
#[derive(Debug)]
struct Routes {
    clusters: HashMap<ClusterId, ClusterRoutes>,
    /// When idle clusters were last forgotten.
    swept: Instant,
}

impl Routes {
    fn new(now: Instant) -> Self {
        Self {
            clusters: HashMap::new(),
            swept: now,
        }
    }

    /// `plugin`'s answer for `cluster` as shown `shown`, if it was asked already.
    fn cached(
        &mut self,
        cluster: ClusterId,
        shown: u64,
        plugin: &(Arc<str>, u64),
        now: Instant,
    ) -> Option<bool> {
        let routes = self
            .clusters
            .get_mut(&cluster)
            .filter(|routes| routes.shown == shown)?;
        routes.used = now;
        routes.accepts.get(plugin).copied()
    }

    /// Records `plugin`'s answer for `cluster` as shown `shown`; answers given for the
    /// cluster as it was shown before are dropped. Forgets idle clusters now and then.
    fn remember(
        &mut self,
        cluster: ClusterId,
        shown: u64,
        plugin: (Arc<str>, u64),
        accepts: bool,
        now: Instant,
    ) {
        if now.saturating_duration_since(self.swept) >= ROUTES_SWEEP_EVERY {
            self.swept = now;
            self.clusters
                .retain(|_, routes| now.saturating_duration_since(routes.used) < ROUTES_IDLE_LIMIT);
        }
        let routes = self
            .clusters
            .entry(cluster)
            .or_insert_with(|| ClusterRoutes {
                shown,
                accepts: HashMap::new(),
                used: now,
            });
        if routes.shown != shown {
            routes.shown = shown;
            routes.accepts.clear();
        }
        routes.used = now;
        routes.accepts.insert(plugin, accepts);
    }

    /// Forgets every decision (after a replacement or a rollback).
    fn clear(&mut self) {
        self.clusters.clear();
    }
}

/// Why a plugin gave no answer to `accepts`. Never remembered as an answer.
#[derive(Debug, Clone)]
struct AcceptsFault {
    /// The plugin asked.
    plugin: String,
    /// Whether vigil could not run the call (no instance from the pool), rather than the
    /// plugin failing in it (a trap, a memory limit, its deadline).
    host: bool,
    /// What happened.
    message: String,
}

impl AcceptsFault {
    /// The probe's outcome when no other plugin accepted: `inconclusive`, the plugin's
    /// fault or vigil's own, never the cluster's.
    fn outcome(&self) -> ProbeOutcome {
        let class = if self.host {
            ReasonClass::HostFault
        } else {
            ReasonClass::PluginFault
        };
        // The first line only: a trap's message goes on with its backtrace, which the
        // log has.
        let what = self.message.lines().next().unwrap_or_default();
        let what: String = what.chars().take(300).collect();
        ProbeOutcome::Inconclusive {
            class,
            message: format!(
                "plugin {}: accepts failed: {what}; it is asked again at the next probe",
                self.plugin
            ),
        }
    }
}

/// A digest of what `accepts` is shown of `target` (apart from the plugin's own
/// parameter defaults, fixed for a generation): two targets with the same digest get the
/// same answer from a plugin generation.
fn accepts_fingerprint(target: &ProbeTarget) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same digest for the same input within the process.
    let mut hasher = std::hash::DefaultHasher::new();
    target.name.hash(&mut hasher);
    target.endpoint.hash(&mut hasher);
    target.reference.hash(&mut hasher);
    target.labels.hash(&mut hasher);
    target.parameters.hash(&mut hasher);
    hasher.finish()
}

struct Inner {
    // Declared first so that plugins (which hold engine resources) drop before it.
    catalog: Mutex<Catalog<LoadedPlugin>>,
    routes: Mutex<Routes>,
    /// One reload at a time: the directory is compared with the catalog as a whole.
    reloading: tokio::sync::Mutex<()>,
    /// Where [`PluginEvent`]s go; sending with nobody subscribed drops them.
    events: tokio::sync::broadcast::Sender<PluginEvent>,
    plugin_dir: PathBuf,
    /// The plugins built into the binary, each with the digest of its content.
    embedded: Vec<(EmbeddedPlugin, String)>,
    linker: Linker<CallState>,
    cache: Option<CodeCache>,
    /// The memory cap the engine's pool was sized for: a candidate asking for more is
    /// refused until restart.
    max_memory_bytes: u64,
    tls: TlsClients,
    credential_dirs: Arc<[PathBuf]>,
    kubeconfig_credential_dirs: Arc<[PathBuf]>,
    kubeconfigs: Arc<KnownKubeconfigs>,
    secrets: Option<Arc<dyn SecretSource>>,
    address_rule: Arc<AddressRule>,
    exec: Arc<exec::ExecRunner>,
    engine: SharedEngine,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("catalog", &self.catalog)
            .field("plugin_dir", &self.plugin_dir)
            .field("max_memory_bytes", &self.max_memory_bytes)
            .finish_non_exhaustive()
    }
}

/// The loaded probe plugins and the engine that runs them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PluginRuntime {
    inner: Arc<Inner>,
}

/// A plugin file as read from the directory, before compiling.
struct Candidate {
    name: String,
    source: PluginSource,
    generation: u64,
    manifest: Manifest,
    bytes: Vec<u8>,
    content: String,
}

impl PluginRuntime {
    /// Loads every `NAME.wasm` of `settings.plugin_dir`. Refused files are in the
    /// report; only an unreadable directory or an engine failure is an error. Each
    /// plugin loaded is its generation 1; [`Self::reload`] brings later ones.
    pub async fn load(settings: &RuntimeSettings) -> Result<(Self, LoadReport), RuntimeError> {
        let files = list_plugin_files(&settings.plugin_dir)?;

        // The pool's memory slots are sized for the largest cap, so the manifests are
        // read before the engine is built (a broken one is refused by the reload).
        let largest = files
            .iter()
            .filter_map(|(_, file)| Manifest::read(&file.with_extension("toml")).ok())
            .chain(
                settings
                    .embedded
                    .iter()
                    .filter_map(|plugin| Manifest::parse(&plugin.grants).ok()),
            )
            .map(|manifest| manifest.memory_bytes())
            .max()
            .unwrap_or(0)
            .max(Manifest::default().memory_bytes());
        let engine = SharedEngine::new(settings.concurrency, largest)
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let tls = TlsClients::new();
        let credential_dirs: Arc<[PathBuf]> = settings.credential_dirs.clone().into();
        let cache = settings.cache_dir.as_deref().map(CodeCache::new);

        let mut linker = Linker::<CallState>::new(engine.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker))
            .and_then(|()| contract::add_to_linker(&mut linker))
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;

        let runtime = Self {
            inner: Arc::new(Inner {
                catalog: Mutex::new(Catalog::new(ProbationPolicy::default())),
                routes: Mutex::new(Routes::new(Instant::now())),
                reloading: tokio::sync::Mutex::new(()),
                events: tokio::sync::broadcast::channel(event::BACKLOG).0,
                plugin_dir: settings.plugin_dir.clone(),
                embedded: settings
                    .embedded
                    .iter()
                    .map(|plugin| {
                        let source = PluginSource::Embedded {
                            name: plugin.name.to_string(),
                        };
                        let digest =
                            content_digest(&plugin.component, plugin.grants.as_bytes(), &source);
                        (plugin.clone(), digest)
                    })
                    .collect(),
                linker,
                cache,
                max_memory_bytes: largest,
                tls,
                credential_dirs,
                kubeconfig_credential_dirs: settings.kubeconfig_credential_dirs.clone().into(),
                kubeconfigs: Arc::default(),
                secrets: settings.secrets.clone(),
                address_rule: Arc::new(settings.registration_allow.clone()),
                exec: Arc::new(exec::ExecRunner::new(settings.exec.clone())),
                engine,
            }),
        };
        let reload = runtime.reload().await?;
        let report = LoadReport {
            loaded: runtime.plugins(),
            audits: runtime.audit_plugins(),
            refused: reload.refused,
        };
        Ok((runtime, report))
    }

    /// How replacements are judged now.
    pub fn probation(&self) -> ProbationPolicy {
        self.catalog().policy()
    }

    /// How replacements are judged from now on (default: [`ProbationPolicy::default`]).
    pub fn set_probation(&self, policy: ProbationPolicy) {
        self.catalog().set_policy(policy);
    }

    /// The changes of plugin generations from now on, in the order they happen: a
    /// subscriber that falls more than a few hundred behind loses the oldest.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<PluginEvent> {
        self.inner.events.subscribe()
    }

    fn emit(&self, event: PluginEvent) {
        // An error means nobody listens (a test, `vigil probe`): nothing to record.
        let _ = self.inner.events.send(event);
    }

    /// Compares the plugin directory with what serves, and acts on every difference
    /// (replacement): a new or changed `NAME.wasm` or `NAME.toml` is a
    /// candidate generation — compiled off the probing path, checked, instantiated,
    /// asked `info()` under its deadline — promoted at once when it loads, and
    /// discarded with its failure kept when it does not, the previous generation
    /// serving on; a removed file retires its plugin, whose running probes finish.
    /// Only an unreadable directory is an error, and then nothing changes.
    pub async fn reload(&self) -> Result<ReloadReport, RuntimeError> {
        let _one_at_a_time = self.inner.reloading.lock().await;
        let mut report = ReloadReport::default();
        let files = list_plugin_files(&self.inner.plugin_dir)?;
        // The embedded plugins, then the directory's files: a file overrides the embedded
        // plugin of its name.
        let mut sources: BTreeMap<String, PluginSource> = self
            .inner
            .embedded
            .iter()
            .map(|(plugin, _)| {
                let name = plugin.name.to_string();
                (name.clone(), PluginSource::Embedded { name })
            })
            .collect();
        for (name, file) in &files {
            sources.insert(name.clone(), PluginSource::File(file.clone()));
        }
        // Checked at every reload: what serves was loaded while it was trusted, but
        // nothing new is loaded from a directory others can write to.
        let dir_trusted = if files.is_empty() {
            Ok(())
        } else {
            trust::check_dir(&self.inner.plugin_dir)
        };

        for (name, source) in &sources {
            // Trusted before anything is read from it.
            let trusted = match source {
                PluginSource::Embedded { .. } => Ok(()),
                PluginSource::File(file) => dir_trusted.clone().and_then(|()| {
                    let manifest = file.with_extension("toml");
                    trust::check_file(file).and_then(|()| match manifest.try_exists() {
                        Ok(false) => Ok(()),
                        _ => trust::check_file(&manifest),
                    })
                }),
            };
            let (read, content) = match trusted {
                Ok(()) => {
                    let read = self.read_source(source);
                    let content = read.as_ref().ok().map(|(_, _, content)| content.clone());
                    if let Some(content) = &content
                        && self.catalog().is_unchanged(name, content)
                    {
                        report.unchanged.push(name.clone());
                        continue;
                    }
                    (read, content)
                }
                // Not remembered as a failed content: once the modes are fixed, the same
                // files load at the next reload.
                Err(why) => (Err(Refusal::Untrusted(why)), None),
            };
            let generation = self.catalog().open_candidate(name);
            let loaded = match read {
                Ok((manifest, bytes, content)) => {
                    let candidate = Candidate {
                        name: name.clone(),
                        source: source.clone(),
                        generation,
                        manifest,
                        bytes,
                        content,
                    };
                    self.load_candidate(candidate).await
                }
                Err(refusal) => Err(refusal),
            };
            match loaded {
                Ok(plugin) => {
                    let overrides_embedded = !source.is_embedded() && self.is_embedded(name);
                    info!(
                        plugin = %plugin.name,
                        generation,
                        version = %plugin.summary.version,
                        source = %source,
                        overrides_embedded,
                        cache = ?plugin.summary.cache,
                        "plugin generation promoted"
                    );
                    report.promoted.push(plugin.summary.clone());
                    let event = PluginEvent::Promoted {
                        plugin: plugin.name.to_string(),
                        generation,
                        version: plugin.summary.version.clone(),
                        hash: plugin.summary.hash.clone(),
                    };
                    self.catalog().promote(Arc::new(plugin));
                    self.emit(event);
                }
                Err(reason) => {
                    let refused = RefusedPlugin {
                        origin: source.clone(),
                        reason,
                    };
                    warn!(plugin = %name, generation, stage = refused.reason.stage().as_str(), "{refused}; the previous generation, if any, keeps serving");
                    self.catalog().fail(
                        name,
                        content,
                        CandidateFailure {
                            source: source.clone(),
                            generation,
                            stage: refused.reason.stage(),
                            message: refused.reason.to_string(),
                            at: SystemTime::now(),
                        },
                    );
                    self.emit(PluginEvent::Refused {
                        plugin: name.clone(),
                        generation,
                        stage: refused.reason.stage().as_str(),
                        message: refused.reason.to_string(),
                    });
                    report.refused.push(refused);
                }
            }
        }
        let present: BTreeSet<&str> = sources.keys().map(String::as_str).collect();

        let mut catalog = self.catalog();
        for name in catalog.serving_names() {
            if !present.contains(name.as_str())
                && let Some(generation) = catalog.retire(&name)
            {
                info!(plugin = %name, generation, "plugin file removed: plugin retired once its running probes finish");
                self.emit(PluginEvent::Retired {
                    plugin: name.clone(),
                    generation,
                });
                report.retired.push((name, generation));
            }
        }
        for entry in catalog.entries() {
            if !present.contains(entry.name.as_str()) {
                catalog.forget_failed(&entry.name);
            }
        }
        drop(catalog);
        if !report.promoted.is_empty() || !report.retired.is_empty() {
            self.routes().clear();
        }
        Ok(report)
    }

    /// Whether a plugin of this name is built into the binary (and not turned off).
    fn is_embedded(&self, name: &str) -> bool {
        self.inner
            .embedded
            .iter()
            .any(|(plugin, _)| plugin.name == name)
    }

    /// Reads a plugin from where it comes from: its manifest, its component, and the
    /// digest that tells a changed plugin from an unchanged one.
    fn read_source(&self, source: &PluginSource) -> Result<(Manifest, Vec<u8>, String), Refusal> {
        match source {
            PluginSource::File(file) => read_candidate(file),
            PluginSource::Embedded { name } => {
                let (plugin, digest) = self
                    .inner
                    .embedded
                    .iter()
                    .find(|(plugin, _)| plugin.name == name.as_str())
                    .ok_or_else(|| Refusal::Unreadable("no such embedded plugin".to_owned()))?;
                let manifest = Manifest::parse(&plugin.grants).map_err(Refusal::Manifest)?;
                Ok((manifest, plugin.component.to_vec(), digest.clone()))
            }
        }
    }

    /// Loads one candidate, refusing a memory cap the engine was not sized for.
    async fn load_candidate(&self, candidate: Candidate) -> Result<LoadedPlugin, Refusal> {
        let wanted = candidate.manifest.memory_bytes();
        if wanted > self.inner.max_memory_bytes {
            return Err(Refusal::Limits(format!(
                "its memory-mib ({} MiB) is more than the running engine was sized for ({} MiB): restart vigil to load it",
                wanted / (1024 * 1024),
                self.inner.max_memory_bytes / (1024 * 1024)
            )));
        }
        let inner = &self.inner;
        load_one(
            &inner.engine,
            &inner.linker,
            inner.cache.as_ref(),
            &inner.tls,
            candidate,
        )
        .await
    }

    fn catalog(&self) -> std::sync::MutexGuard<'_, Catalog<LoadedPlugin>> {
        self.inner
            .catalog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The probe plugins that serve now, in routing order.
    pub fn plugins(&self) -> Vec<PluginSummary> {
        self.catalog()
            .routing()
            .iter()
            .filter(|p| !p.is_audit())
            .map(|p| p.summary.clone())
            .collect()
    }

    /// Every plugin name the runtime knows — serving, on probation, failed or retired —
    /// by name.
    pub fn catalog_status(&self) -> Vec<PluginStatus> {
        self.catalog()
            .entries()
            .into_iter()
            .map(|entry| PluginStatus {
                stats: entry.current.as_deref().map(stats_of).unwrap_or_default(),
                current: entry.current.map(|p| p.summary.clone()),
                name: entry.name,
                state: entry.state,
                previous_generation: entry.previous_generation,
                candidate_generation: entry.candidate_generation,
                probation: entry.probation,
                last_failure: entry.last_failure,
            })
            .collect()
    }

    /// The call counters of the serving generation of a plugin (for an audit plugin,
    /// `probes` counts its audits).
    pub fn stats(&self, plugin: &str) -> Option<PluginStats> {
        self.find(plugin).as_deref().map(stats_of)
    }

    /// Whether the runtime is at rest: no plugin call in flight for
    /// [`TICKER_LINGER`], so its epoch ticker sleeps and the
    /// runtime makes no wake-up until the next call.
    pub fn is_idle(&self) -> bool {
        self.inner.engine.is_idle()
    }

    /// The audit plugins that serve now, in routing order.
    pub fn audit_plugins(&self) -> Vec<PluginSummary> {
        self.catalog()
            .routing()
            .iter()
            .filter(|p| p.is_audit())
            .map(|p| p.summary.clone())
            .collect()
    }

    /// Audits `target` once (`audit` world) with the highest-priority audit
    /// plugin that accepts it, within `budget`. Never fails: a plugin's fault is
    /// [`AuditOutcome::Fault`], an unreadable kind [`AuditOutcome::Failed`]; only an
    /// [`AuditOutcome::Report`] should replace a cluster's findings.
    pub async fn audit(&self, target: &ProbeTarget, budget: Duration) -> AuditOutcome {
        self.run_audit(target, budget).await
    }

    fn find(&self, plugin: &str) -> Option<Arc<LoadedPlugin>> {
        self.catalog().serving(plugin)
    }

    /// The plugin that probes `target`: its explicit plugin, else the
    /// highest-priority plugin that accepts it, or why there is none.
    async fn route(&self, target: &ProbeTarget) -> Result<Arc<LoadedPlugin>, ProbeOutcome> {
        if let Some(name) = &target.plugin {
            return match self.find(name) {
                Some(plugin) if !plugin.is_audit() => Ok(plugin),
                Some(_) => Err(ProbeOutcome::NotProbeable {
                    class: ReasonClass::NoPlugin,
                    message: format!(
                        "the cluster's plugin {name} is an audit plugin, not a probe plugin"
                    ),
                }),
                None => Err(ProbeOutcome::NotProbeable {
                    class: ReasonClass::NoPlugin,
                    message: format!("the cluster's plugin {name} is not loaded"),
                }),
            };
        }
        let shown = accepts_fingerprint(target);
        let routing = self.catalog().routing();
        // A plugin whose `accepts` failed does not take the cluster this time, but the
        // probe must not then say that no plugin takes it: when nothing else accepted,
        // the failure is the outcome, and it says nothing about the cluster.
        let mut failed = None;
        for plugin in routing.iter().filter(|p| !p.is_audit()) {
            match self.routed_accepts(plugin, target, shown).await {
                Ok(true) => return Ok(Arc::clone(plugin)),
                Ok(false) => {}
                Err(fault) => {
                    failed.get_or_insert(fault);
                }
            }
        }
        if let Some(fault) = failed {
            return Err(fault.outcome());
        }
        Err(ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            message: format!(
                "no loaded plugin accepts {} references",
                scheme_of(&target.reference)
            ),
        })
    }

    /// Whether `plugin` accepts `target`, which it is shown as `shown`
    /// ([`accepts_fingerprint`]): the answer remembered for the cluster and the plugin's
    /// generation, else asked and, if the plugin answered, remembered. A failure to
    /// answer is not remembered: `accepts` is asked again at the next probe.
    async fn routed_accepts(
        &self,
        plugin: &LoadedPlugin,
        target: &ProbeTarget,
        shown: u64,
    ) -> Result<bool, AcceptsFault> {
        let key = (Arc::clone(&plugin.name), plugin.summary.generation);
        let cached = self
            .routes()
            .cached(target.cluster, shown, &key, Instant::now());
        if let Some(accepts) = cached {
            return Ok(accepts);
        }
        let accepts = self.accepts(plugin, target).await?;
        self.routes()
            .remember(target.cluster, shown, key, accepts, Instant::now());
        Ok(accepts)
    }

    /// Asks `plugin` (of either world) whether it accepts `target`: its answer, or why it
    /// gave none (a trap, its deadline, or an instance vigil could not make).
    async fn accepts(
        &self,
        plugin: &LoadedPlugin,
        target: &ProbeTarget,
    ) -> Result<bool, AcceptsFault> {
        plugin.accepts.fetch_add(1, Ordering::Relaxed);
        let cluster = wire_cluster(plugin, target);
        let mut store =
            self.new_store(plugin, Some(call_cluster(plugin, target)), ACCEPTS_DEADLINE);
        // `true` once the instance exists: an error before that is vigil's (the pool),
        // after it the plugin's.
        let call = async {
            match &plugin.pre {
                WorldPre::Probe(pre) => {
                    let instance = pre
                        .instantiate(&mut store)
                        .await
                        .map_err(|error| (false, error))?;
                    instance
                        .accepts(&mut store, cluster)
                        .await
                        .map_err(|error| (true, error))
                }
                WorldPre::Audit(pre) => {
                    let instance = pre
                        .instantiate(&mut store)
                        .await
                        .map_err(|error| (false, error))?;
                    instance
                        .accepts(&mut store, cluster)
                        .await
                        .map_err(|error| (true, error))
                }
            }
        };
        let answer = tokio::time::timeout(ACCEPTS_DEADLINE + CALL_GRACE, call).await;
        store.data().emit_guest_output();
        let fault = match answer {
            Ok(Ok(accepts)) => return Ok(accepts),
            Ok(Err((started, error))) => {
                let trapped = started
                    || error.downcast_ref::<Trap>().is_some()
                    || store.data().limiter.hit.is_some();
                AcceptsFault {
                    plugin: plugin.name.to_string(),
                    host: !trapped,
                    message: format!("{error:#}"),
                }
            }
            Err(_) => AcceptsFault {
                plugin: plugin.name.to_string(),
                host: false,
                message: format!("did not answer within {} ms", ACCEPTS_DEADLINE.as_millis()),
            },
        };
        warn!(plugin = %plugin.name, cluster = %target.name, host_fault = fault.host, "accepts failed: {}; asked again at the next probe", fault.message);
        // The plugin's own failure counts against it like a failed probe call, so a
        // replacement whose `accepts` always fails is rolled back by its probation; an
        // instance vigil could not make says nothing about it.
        if !fault.host && !plugin.is_audit() {
            plugin.faults.fetch_add(1, Ordering::Relaxed);
            self.judge_probation(plugin, true);
        }
        Err(fault)
    }

    fn new_store(
        &self,
        plugin: &LoadedPlugin,
        cluster: Option<CallCluster>,
        budget: Duration,
    ) -> Store<CallState> {
        new_store(
            &self.inner.engine,
            &self.inner.tls,
            plugin_parts(plugin, &self.inner),
            cluster,
            budget,
        )
    }

    /// One probe call of `plugin` against `target`, mapped to an outcome.
    async fn call_probe(&self, plugin: &LoadedPlugin, target: &ProbeTarget) -> ProbeOutcome {
        let request = contract::ProbeRequest {
            cluster: wire_cluster(plugin, target),
            timeout_ms: u32::try_from(target.timeout.as_millis()).unwrap_or(u32::MAX),
        };
        let mut store = self.new_store(plugin, Some(call_cluster(plugin, target)), target.timeout);
        let call = async {
            let Some(pre) = plugin.probe_pre() else {
                return Err((
                    false,
                    wasmtime::Error::msg(format!("{} is an audit plugin", plugin.name)),
                ));
            };
            let instance = match pre.instantiate(&mut store).await {
                Ok(instance) => instance,
                Err(error) => return Err((false, error)),
            };
            instance
                .probe(&mut store, request)
                .await
                .map_err(|error| (true, error))
        };
        let result = tokio::time::timeout(target.timeout + CALL_GRACE, call).await;
        let end = match result {
            Ok(Ok(returned)) => CallEnd::Returned(returned),
            Ok(Err((started, error))) => {
                let trap = error.downcast_ref::<Trap>().copied();
                if started || trap.is_some() || store.data().limiter.hit.is_some() {
                    CallEnd::Trapped {
                        interrupted: trap == Some(Trap::Interrupt),
                        message: format!("{error:#}"),
                    }
                } else {
                    CallEnd::HostFailure(format!("{error:#}"))
                }
            }
            Err(_) => CallEnd::Overran,
        };
        let state = store.data();
        state.emit_guest_output();
        let record = state.record();
        let outcome = outcome::map(&plugin.name, end, &record, state.limiter.hit);
        plugin.probes.fetch_add(1, Ordering::Relaxed);
        if matches!(
            outcome,
            ProbeOutcome::Inconclusive {
                class: ReasonClass::PluginFault,
                ..
            }
        ) {
            plugin.faults.fetch_add(1, Ordering::Relaxed);
            warn!(plugin = %plugin.name, cluster = %target.name, outcome = %outcome.label(), "{}", describe(&outcome));
        } else {
            debug!(plugin = %plugin.name, cluster = %target.name, outcome = %outcome.label(), contacted = record.cluster_contacted, "probe done");
        }
        // A fault of vigil's own says nothing about the plugin: it is not judged.
        let host_fault = matches!(
            outcome,
            ProbeOutcome::Inconclusive {
                class: ReasonClass::HostFault,
                ..
            }
        );
        if host_fault {
            warn!(plugin = %plugin.name, cluster = %target.name, outcome = %outcome.label(), "{}", describe(&outcome));
        } else {
            self.judge_probation(plugin, matches!(outcome, ProbeOutcome::Inconclusive { .. }));
        }
        outcome
    }

    /// Counts a probe towards its generation's probation, and rolls back to the
    /// previous generation when the probation fails.
    fn judge_probation(&self, plugin: &LoadedPlugin, inconclusive: bool) {
        let verdict = self.catalog().record_probe(
            &plugin.name,
            plugin.summary.generation,
            inconclusive,
            || plugin.summary.source.clone(),
        );
        match verdict {
            ProbationVerdict::Pending => {}
            ProbationVerdict::Passed { generation } => {
                info!(plugin = %plugin.name, generation, "plugin generation passed its probation");
                self.emit(PluginEvent::ProbationPassed {
                    plugin: plugin.name.to_string(),
                    generation,
                });
            }
            ProbationVerdict::RolledBack {
                failed,
                restored,
                message,
            } => {
                self.routes().clear();
                warn!(plugin = %plugin.name, generation = failed, restored, "plugin generation failed its probation and was rolled back: {message}");
                self.emit(PluginEvent::RolledBack {
                    plugin: plugin.name.to_string(),
                    failed,
                    restored,
                    message,
                });
            }
        }
    }

    /// For a kubeconfig file whose user runs an `exec` command: why the command will not
    /// run for `plugin` (no grant, or the operator's policy refuses it), decided before the
    /// call as for any other reference vigil cannot use. `None` when it may run, or when
    /// the user has no `exec` section.
    fn exec_refused(&self, plugin: &LoadedPlugin, target: &ProbeTarget) -> Option<ProbeOutcome> {
        let material = target.connection.as_deref()?;
        let spec = material.exec.as_deref()?;
        let owner = vigil_domain::exec::owner(material);
        let message = if plugin.manifest.exec_credentials && plugin.manifest.credentials {
            let refusal = self.inner.exec.admit(spec).err()?;
            format!("{owner}: {refusal}")
        } else {
            format!(
                "{owner}: its credentials come from the exec command {:?}, and the plugin {} is not granted exec-credentials (in its NAME.toml)",
                spec.command_name(),
                plugin.name
            )
        };
        Some(ProbeOutcome::NotProbeable {
            class: ReasonClass::ExecCredentials,
            message,
        })
    }

    /// Routes and probes `target`, saying which plugin generation answered.
    async fn probe_routed(&self, target: &ProbeTarget) -> Probed {
        let span = info_span!("plugin_probe", cluster = %target.name);
        async {
            match self.route(target).await {
                Ok(plugin) => {
                    if let Some(refused) = self.exec_refused(&plugin, target) {
                        return Probed {
                            outcome: refused,
                            by: None,
                        };
                    }
                    let outcome = self
                        .call_probe(&plugin, target)
                        .instrument(info_span!(
                            "generation",
                            plugin = %plugin.name,
                            generation = plugin.summary.generation
                        ))
                        .await;
                    Probed {
                        outcome,
                        by: Some(ProbedBy {
                            plugin: plugin.name.to_string(),
                            generation: plugin.summary.generation,
                        }),
                    }
                }
                Err(outcome) => Probed { outcome, by: None },
            }
        }
        .instrument(span)
        .await
    }
}

impl Prober for PluginRuntime {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        self.probe_routed(target).await.outcome
    }

    async fn probe_attributed(&self, target: &ProbeTarget) -> Probed {
        self.probe_routed(target).await
    }

    fn file_bounds(&self) -> vigil_domain::reference::FileBounds {
        vigil_domain::reference::FileBounds {
            kubeconfigs: Some(Arc::clone(&self.inner.credential_dirs)),
            named_files: Arc::clone(&self.inner.kubeconfig_credential_dirs),
        }
    }
}

fn stats_of(plugin: &LoadedPlugin) -> PluginStats {
    PluginStats {
        probes: plugin.probes.load(Ordering::Relaxed),
        faults: plugin.faults.load(Ordering::Relaxed),
        accepts: plugin.accepts.load(Ordering::Relaxed),
    }
}

fn describe(outcome: &ProbeOutcome) -> &str {
    match outcome {
        ProbeOutcome::Healthy => "healthy",
        ProbeOutcome::Unhealthy { message, .. }
        | ProbeOutcome::CredentialsRejected { message }
        | ProbeOutcome::NotProbeable { message, .. }
        | ProbeOutcome::Inconclusive { message, .. } => message,
    }
}

fn scheme_of(reference: &Reference) -> &'static str {
    match reference {
        Reference::File { .. } => "kubeconfig file",
        Reference::Secret { .. } => "secret://",
        Reference::Http { .. } => "http(s)://",
    }
}

/// What a store needs to know of its plugin and the runtime.
struct PluginParts {
    name: Arc<str>,
    manifest: Arc<Manifest>,
    credential_dirs: Arc<[PathBuf]>,
    kubeconfigs: Arc<KnownKubeconfigs>,
    secrets: Option<Arc<dyn SecretSource>>,
    address_rule: Arc<AddressRule>,
    /// `None` for calls about no cluster.
    exec: Option<Arc<exec::ExecRunner>>,
}

fn plugin_parts(plugin: &LoadedPlugin, inner: &Inner) -> PluginParts {
    PluginParts {
        name: Arc::clone(&plugin.name),
        manifest: Arc::clone(&plugin.manifest),
        credential_dirs: Arc::clone(&inner.credential_dirs),
        kubeconfigs: Arc::clone(&inner.kubeconfigs),
        secrets: inner.secrets.clone(),
        address_rule: Arc::clone(&inner.address_rule),
        exec: Some(Arc::clone(&inner.exec)),
    }
}

/// A fresh store for one call: its own sandbox, the plugin's limiter and a CPU
/// deadline of `budget` plus the grace, armed now.
fn new_store(
    engine: &SharedEngine,
    tls: &TlsClients,
    plugin: PluginParts,
    cluster: Option<CallCluster>,
    budget: Duration,
) -> Store<CallState> {
    // Counted before the deadline is armed, so that a sleeping ticker is awake for it.
    let ticking = engine.ticking();
    let started = Instant::now();
    let state = CallState::new(plugin, cluster, tls.clone(), started + budget, ticking);
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|state| &mut state.limiter);
    let cpu_deadline = started + budget + CALL_GRACE;
    // Every few ticks the guest yields to the executor; past the deadline it traps
    // with `Trap::Interrupt`. Host calls are not covered (epochs cannot interrupt
    // them): each has its own tokio timeout.
    store.set_epoch_deadline(YIELD_TICKS);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= cpu_deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(YIELD_TICKS))
        }
    });
    store
}

fn call_cluster(plugin: &LoadedPlugin, target: &ProbeTarget) -> CallCluster {
    CallCluster {
        endpoint: target.endpoint.clone(),
        reference: target.reference.clone(),
        material: target.connection.clone(),
        parameters: parameters(plugin, target),
    }
}

/// The plugin's parameters for `target`: the manifest's defaults, overridden by the
/// cluster's own — except the operator's settings (`operator.*`), which only
/// the manifest gives: a cluster's parameters are written by whoever registered it.
fn parameters(plugin: &LoadedPlugin, target: &ProbeTarget) -> BTreeMap<String, String> {
    let mut merged = plugin.manifest.parameters.clone();
    merged.extend(
        target
            .parameters
            .iter()
            .filter(|(name, _)| !is_operator_parameter(name))
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    merged
}

/// The cluster as the contract shows it: its labels, and its plain parameters.
/// Credential references stay out; the plugin reads them through `credentials.parameter`.
fn wire_cluster(plugin: &LoadedPlugin, target: &ProbeTarget) -> contract::Cluster {
    contract::Cluster {
        name: target.name.clone(),
        endpoint: target.endpoint.clone(),
        reference: target.reference.to_string(),
        labels: target
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        parameters: parameters(plugin, target)
            .into_iter()
            .filter(|(_, value)| !is_credential_reference(value))
            .collect(),
    }
}

/// The `NAME.wasm` files of `dir`, sorted by name. A file whose name is not UTF-8
/// cannot be named in the API or a `NAME.toml`: it is skipped with a warning.
fn list_plugin_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(RuntimeError::PluginDir {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if path.extension().is_none_or(|e| e != "wasm") || !path.is_file() {
            continue;
        }
        match path.file_stem().and_then(|s| s.to_str()) {
            Some(name) => files.push((name.to_owned(), path.clone())),
            None => warn!(file = %path.display(), "plugin file skipped: its name is not UTF-8"),
        }
    }
    files.sort();
    Ok(files)
}

/// Reads a plugin file and its `NAME.toml`: the manifest, the component's bytes, and
/// the digest of both that tells a changed plugin from an unchanged one.
fn read_candidate(file: &Path) -> Result<(Manifest, Vec<u8>, String), Refusal> {
    let size = std::fs::metadata(file)
        .map_err(|e| Refusal::Unreadable(e.to_string()))?
        .len();
    if size > MAX_PLUGIN_FILE_BYTES {
        return Err(Refusal::Unreadable(format!(
            "larger than {MAX_PLUGIN_FILE_BYTES} bytes"
        )));
    }
    let bytes = std::fs::read(file).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let manifest_path = file.with_extension("toml");
    let manifest = Manifest::read(&manifest_path).map_err(Refusal::Manifest)?;
    let manifest_bytes = std::fs::read(&manifest_path).unwrap_or_default();
    let content = content_digest(
        &bytes,
        &manifest_bytes,
        &PluginSource::File(file.to_path_buf()),
    );
    Ok((manifest, bytes, content))
}

/// The digest of a plugin's component, its grants and where it comes from: a file that
/// holds exactly the embedded component still replaces the embedded generation (and the
/// API shows the file as its source).
fn content_digest(component: &[u8], grants: &[u8], source: &PluginSource) -> String {
    let mut digest = sha2::Sha256::new();
    digest.update(sha2::Sha256::digest(component));
    digest.update(sha2::Sha256::digest(grants));
    digest.update(source.label().as_bytes());
    hex(&digest.finalize())
}

/// The sha256 of a component, hex: the `hash` the API shows for a plugin.
pub fn component_digest(component: &[u8]) -> String {
    hex(&sha2::Sha256::digest(component))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiles, checks, links and asks `info()` of one plugin.
async fn load_one(
    engine: &SharedEngine,
    linker: &Linker<CallState>,
    cache: Option<&CodeCache>,
    tls: &TlsClients,
    candidate: Candidate,
) -> Result<LoadedPlugin, Refusal> {
    let Candidate {
        name,
        source,
        generation,
        manifest,
        bytes,
        content,
    } = candidate;
    check_header(&bytes)?;
    let hash = component_digest(&bytes);

    // Compiling is CPU-bound (tens of milliseconds to seconds): off the async threads.
    let compile_engine = engine.engine().clone();
    let cache_owned = cache.cloned();
    let (component, cache_status) = tokio::task::spawn_blocking(move || {
        cache::compile(&compile_engine, cache_owned.as_ref(), &bytes)
            .map_err(|e| Refusal::Invalid(format!("{e:#}")))
    })
    .await
    .map_err(|e| Refusal::Invalid(format!("the compiler task failed: {e}")))??;

    let compiled = Compiled {
        name: Arc::from(name),
        source,
        generation,
        content,
        manifest: Arc::new(manifest),
        hash,
        cache: cache_status,
    };
    let (world, version) = contract::check_world(engine.engine(), &component)?;
    if world == World::Audit {
        return audit::load(engine, linker, tls, &component, version, compiled).await;
    }
    let instance_pre = linker
        .instantiate_pre(&component)
        .map_err(|e| Refusal::Link(format!("{e:#}")))?;
    let pre = ProbePre::new(version, instance_pre).map_err(|e| Refusal::Link(format!("{e:#}")))?;

    let mut store = new_store(engine, tls, compiled.parts(), None, INFO_DEADLINE);
    let call = async {
        let instance = pre.instantiate(&mut store).await?;
        instance.info(&mut store).await
    };
    let answer = tokio::time::timeout(INFO_DEADLINE + CALL_GRACE, call).await;
    let info = info_answer(answer, store.data())?;
    compiled.into_loaded(WorldPre::Probe(pre), info)
}

/// A plugin file compiled, before its world's `info()` has answered.
struct Compiled {
    name: Arc<str>,
    source: PluginSource,
    generation: u64,
    /// The digest of the `.wasm` and the `.toml`.
    content: String,
    manifest: Arc<Manifest>,
    /// The sha256 of the `.wasm`, hex.
    hash: String,
    cache: CacheStatus,
}

impl Compiled {
    /// What a store for its `info()` call needs: no credential directory, no cluster.
    fn parts(&self) -> PluginParts {
        PluginParts {
            name: Arc::clone(&self.name),
            manifest: Arc::clone(&self.manifest),
            credential_dirs: Arc::from([]),
            kubeconfigs: Arc::default(),
            secrets: None,
            address_rule: Arc::default(),
            exec: None,
        }
    }

    /// The loaded generation, described by what its `info()` said.
    fn into_loaded(self, pre: WorldPre, info: PluginInfo) -> Result<LoadedPlugin, Refusal> {
        if info.name.len() > MAX_DETAIL_BYTES || info.version.len() > MAX_DETAIL_BYTES {
            return Err(Refusal::Info(format!(
                "name or version longer than {MAX_DETAIL_BYTES} bytes"
            )));
        }
        let manifest = self.manifest;
        let summary = PluginSummary {
            name: self.name.to_string(),
            generation: self.generation,
            world: match pre {
                WorldPre::Probe(_) => "probe",
                WorldPre::Audit(_) => "audit",
            },
            source: self.source,
            self_name: info.name,
            version: info.version,
            schemes: info.schemes,
            description: info.description,
            priority: manifest.priority,
            cache: self.cache,
            hash: self.hash,
            grants: manifest.grants(),
            secret_namespaces: manifest.secret_namespaces.clone(),
            allowed_hosts: manifest.allowed_hosts.clone(),
            credential_hosts: manifest.credential_hosts.clone(),
            memory_mib: manifest.memory_mib,
        };
        Ok(LoadedPlugin {
            summary,
            name: self.name,
            content: self.content,
            manifest,
            pre,
            probes: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            accepts: AtomicU64::new(0),
        })
    }
}

/// The answer of an `info()` call made under [`INFO_DEADLINE`], the guest's output re-emitted:
/// a trap or a limit hit, or no answer in time, refuses the plugin.
fn info_answer(
    answer: Result<wasmtime::Result<PluginInfo>, tokio::time::error::Elapsed>,
    state: &CallState,
) -> Result<PluginInfo, Refusal> {
    state.emit_guest_output();
    match answer {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(error)) => Err(Refusal::Info(match state.limiter.hit {
            Some(hit) => hit.to_string(),
            None => format!("{error:#}"),
        })),
        Err(_) => Err(Refusal::Info(format!(
            "no answer within {} ms",
            INFO_DEADLINE.as_millis()
        ))),
    }
}

/// Tells a component from other files by its header, for a clear refusal.
fn check_header(bytes: &[u8]) -> Result<(), Refusal> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || !bytes.starts_with(MAGIC) {
        return Err(Refusal::NotWasm);
    }
    // Core modules have layer 0 (bytes 6..8), components layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(Refusal::CoreModule);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::engine::EPOCH_TICK;
    use super::*;

    #[test]
    fn headers_tell_components_from_other_files() {
        assert_eq!(check_header(b"hello"), Err(Refusal::NotWasm));
        assert_eq!(check_header(b"\0asm\x01\0\0\0"), Err(Refusal::CoreModule));
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0"), Ok(()));
    }

    #[test]
    fn routing_decisions_of_idle_clusters_are_forgotten() {
        let start = Instant::now();
        let plugin = (Arc::<str>::from("p"), 1);
        let mut routes = Routes::new(start);
        routes.remember(ClusterId(1), 7, plugin.clone(), true, start);
        routes.remember(ClusterId(2), 7, plugin.clone(), false, start);
        assert_eq!(routes.cached(ClusterId(1), 7, &plugin, start), Some(true));
        assert_eq!(routes.cached(ClusterId(2), 7, &plugin, start), Some(false));
        // Shown differently: the answer was for the cluster as it was.
        assert_eq!(routes.cached(ClusterId(1), 8, &plugin, start), None);
        // Before a sweep is due nothing is swept.
        let early = start + ROUTES_SWEEP_EVERY / 2;
        routes.remember(ClusterId(3), 7, plugin.clone(), true, early);
        assert_eq!((routes.clusters.len(), routes.swept), (3, start));

        // Cluster 1 is still routed; clusters 2 and 3 (deleted, say) no longer are.
        let used = start + ROUTES_IDLE_LIMIT - ROUTES_SWEEP_EVERY;
        assert_eq!(routes.cached(ClusterId(1), 7, &plugin, used), Some(true));
        let sweep = start + ROUTES_IDLE_LIMIT + ROUTES_SWEEP_EVERY;
        routes.remember(ClusterId(4), 7, plugin.clone(), true, sweep);
        assert_eq!(routes.swept, sweep);
        let mut kept: Vec<_> = routes.clusters.keys().map(|id| id.0).collect();
        kept.sort_unstable();
        assert_eq!(kept, [1, 4]);
        assert_eq!(routes.cached(ClusterId(2), 7, &plugin, sweep), None);

        // A new answer for a cluster shown differently replaces the stale ones.
        let other = (Arc::<str>::from("q"), 1);
        routes.remember(ClusterId(1), 9, other.clone(), false, sweep);
        assert_eq!(routes.cached(ClusterId(1), 9, &plugin, sweep), None);
        assert_eq!(routes.cached(ClusterId(1), 9, &other, sweep), Some(false));
        routes.clear();
        assert!(routes.clusters.is_empty());
    }

    #[test]
    fn epoch_tick_is_short() {
        assert!(EPOCH_TICK <= Duration::from_millis(10));
    }
}
