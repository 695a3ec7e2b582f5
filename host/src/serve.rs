//! `vigil serve`: the engine's wiring. Takes the database lock, loads the probe
//! plugins, opens the store, runs discovery (and again on every kubeconfig
//! change), and runs the health worker until shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::config::{DISCOVERY_DEBOUNCE, EngineConfig, PluginConfig};
use vigil_api::{
    Access, ApiState, BoxFuture, NotificationsReport, NotificationsView, PluginCatalog,
    PluginFailureView, PluginView, ProbationView, ProbedByView, Readiness, ReloadView, SinkView,
    TokensError, rfc3339,
};
use vigil_decision::{ProbeOutcome, ProbedBy};
use vigil_domain::discovery::{self, DiscoverySettings, Sources};
use vigil_domain::probe::{NoPlugins, ProbeTarget, Probed, Prober, error_chain, wall_clock};
use vigil_domain::reference::FileBounds;
use vigil_domain::secrets;
use vigil_engine::auditing::{AuditSettings, Auditor, audit_loop};
use vigil_engine::discovery::run_discovery;
use vigil_engine::metrics::{Metrics, SinkMetrics};
use vigil_engine::sharing::Owner;
use vigil_engine::worker::{Sharing, Worker, WorkerSettings, WorkerStats};
use vigil_notify::{Notifier, NotifyConfig, NotifyStatus};
use vigil_plugin_host::{
    AuditOutcome, CandidateFailure, FindingSeverity, PluginEvent, PluginRuntime, PluginStatus,
    ProbationPolicy, ReloadReport, RuntimeError, RuntimeSettings,
};
use vigil_store::lock::{DatabaseLock, LockError};
use vigil_store::{AuditResult, Backend, Finding, Lease, ObjectRef, Severity, Store, StoreError};

/// Why the engine stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another engine uses the database.
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plugin runtime could not start (a single bad plugin never stops it).
    #[error(transparent)]
    Plugins(#[from] RuntimeError),
    /// The API tokens file cannot be used.
    #[error(transparent)]
    Tokens(#[from] TokensError),
    /// Another live process writes the heartbeat of this replica's id.
    #[error(
        "another vigil process is running as replica `{replica}` (its heartbeat in the database is alive): give each replica its own VIGIL_REPLICA_ID"
    )]
    ReplicaIdInUse {
        /// The replica id (`VIGIL_REPLICA_ID`).
        replica: String,
    },
    /// The REST API cannot listen.
    #[error("the REST API cannot listen on {address}")]
    Listen {
        /// The address (`VIGIL_LISTEN`).
        address: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The prober of `vigil serve`: the plugin runtime, or — when the plugin
/// directory does not exist — no plugin at all.
#[derive(Debug, Clone)]
pub enum EngineProber {
    /// The plugins of the plugin directory.
    Plugins(PluginRuntime),
    /// No plugin directory: every cluster is not probeable (`no-plugin`).
    None(NoPlugins),
}

impl Prober for EngineProber {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        self.probe_attributed(target).await.outcome
    }

    async fn probe_attributed(&self, target: &ProbeTarget) -> Probed {
        match self {
            Self::Plugins(runtime) => runtime.probe_attributed(target).await,
            Self::None(none) => none.probe_attributed(target).await,
        }
    }

    fn file_bounds(&self) -> FileBounds {
        match self {
            Self::Plugins(runtime) => Prober::file_bounds(runtime),
            Self::None(none) => none.file_bounds(),
        }
    }
}

impl Auditor for EngineProber {
    async fn audit(&self, target: &ProbeTarget) -> AuditResult {
        let Self::Plugins(runtime) = self else {
            return AuditResult::Failed {
                kind: None,
                message: "no plugin directory: no audit plugin is loaded".to_owned(),
            };
        };
        audit_result(runtime.audit(target, target.timeout).await)
    }

    fn file_bounds(&self) -> FileBounds {
        Prober::file_bounds(self)
    }
}

/// The store's view of what an audit plugin answered.
fn audit_result(outcome: AuditOutcome) -> AuditResult {
    match outcome {
        AuditOutcome::Report {
            plugin,
            generation,
            findings,
            kinds_read,
        } => AuditResult::Report {
            findings: findings
                .into_iter()
                .map(|f| Finding {
                    code: f.code,
                    severity: match f.severity {
                        FindingSeverity::Blocking => Severity::Blocking,
                        FindingSeverity::Warning => Severity::Warning,
                        FindingSeverity::Info => Severity::Info,
                    },
                    objects: f
                        .objects
                        .into_iter()
                        .map(|o| ObjectRef {
                            kind: o.kind,
                            namespace: o.namespace,
                            name: o.name,
                        })
                        .collect(),
                    message: f.message,
                    fix: f.fix,
                })
                .collect(),
            kinds_read,
            by: Some(ProbedBy { plugin, generation }),
        },
        AuditOutcome::Failed {
            plugin,
            kind,
            class,
            message,
        } => AuditResult::Failed {
            kind,
            message: format!("{plugin}: {} ({})", message, class.as_str()),
        },
        AuditOutcome::NoPlugin { message } => AuditResult::Failed {
            kind: None,
            message,
        },
        AuditOutcome::Fault { message, .. } => AuditResult::Failed {
            kind: None,
            message,
        },
    }
}

/// How many audits run at once, beside the probes (the plugin pool is sized for both).
const AUDIT_CONCURRENCY: u32 = 2;

/// Runs the engine with the plugins of `config.plugins.plugin_dir` until `shutdown`
/// completes. The database lock is taken before anything is compiled, so a
/// second engine on the same database stops at once.
pub async fn serve_with_plugins(
    config: &EngineConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, ServeError> {
    let _lock = lock(config)?;
    let prober = load_plugins(
        &config.plugins,
        &config.discovery,
        config.concurrency + AUDIT_CONCURRENCY as usize,
    )
    .await?;
    let metrics = Metrics::new(config.metrics_per_cluster);
    let (stop_events, events_stopped) = tokio::sync::oneshot::channel();
    let (plugin_events, reloads, audits) = match &prober {
        EngineProber::Plugins(runtime) => {
            for plugin in runtime.catalog_status() {
                if plugin.current.is_some() {
                    metrics.record_plugin_serving(&plugin.name);
                }
            }
            // One pool for the tasks beside the worker.
            let store = Store::open(&config.database_url).await?;
            // Every change of a plugin's generations goes to the history and the metrics:
            // subscribed before the directory is watched, so that no change goes unrecorded.
            let plugin_events = tokio::spawn(record_plugin_events(
                store.clone(),
                metrics.clone(),
                runtime.subscribe(),
                events_stopped,
            ));
            // The plugin directory is live: changes to it and SIGHUP reload it.
            let reloads = tokio::spawn(vigil_plugin_host::plugin_watch::reload_loop(
                runtime.clone(),
                config.plugins.plugin_dir.clone(),
            ));
            // Drain-readiness audits of the ONLINE clusters, by the audit plugins.
            let mut settings = AuditSettings::new(config.audit_interval, config.audit_timeout);
            settings.concurrency = AUDIT_CONCURRENCY;
            let owner = owner_of(config, &store);
            let audits = tokio::spawn(audit_loop(
                store,
                Arc::new(prober.clone()),
                settings,
                owner,
                std::future::pending::<()>(),
            ));
            (Some(plugin_events), Some(reloads), Some(audits))
        }
        EngineProber::None(_) => (None, None, None),
    };
    let result = run(config, prober.clone(), Arc::new(prober), metrics, shutdown).await;
    for task in [reloads, audits].into_iter().flatten() {
        task.abort();
    }
    // The changes made before the stop are still recorded; a database that does not answer
    // does not hold the exit for long.
    let _ = stop_events.send(());
    if let Some(task) = plugin_events
        && tokio::time::timeout(EVENTS_DRAIN, task).await.is_err()
    {
        warn!("plugin events still unrecorded at shutdown were dropped");
    }
    result
}

/// How long the plugin events sent before shutdown may take to be recorded.
const EVENTS_DRAIN: Duration = Duration::from_secs(2);

/// Records each change of a plugin's generations in the history, in order, and counts
/// it in the metrics, until `stop`. Every event sent before the stop is recorded first:
/// the select is biased towards the events, so `stop` is only taken when none waits. An
/// event whose write fails is logged whole instead, and the next one still recorded; a
/// backlog overrun is logged too.
async fn record_plugin_events(
    store: Store,
    metrics: Metrics,
    mut events: tokio::sync::broadcast::Receiver<PluginEvent>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        tokio::select! {
            biased;
            received = events.recv() => match received {
                Ok(event) => record_plugin_event(&store, &metrics, &event).await,
                Err(RecvError::Lagged(missed)) => warn!(
                    missed,
                    "plugin events came faster than the history recorded them; some are missing from it"
                ),
                Err(RecvError::Closed) => return,
            },
            _ = &mut stop => return,
        }
    }
}

async fn record_plugin_event(store: &Store, metrics: &Metrics, event: &PluginEvent) {
    metrics.record_plugin_change(event.plugin(), event.change());
    if let Err(error) = store
        .record_plugin_event(event.kind(), &event.detail(), None, wall_clock())
        .await
    {
        warn!(kind = event.kind(), detail = %event.detail(), error = %error_chain(&error), "a plugin event was not recorded in the history");
    }
}

/// Loads the plugins built into the binary (unless turned off) and those of the plugin
/// directory, sized for `concurrency` probes at once. A missing directory is not an
/// error: the embedded plugins serve, and with those turned off vigil runs and reports
/// every cluster not probeable. An unreadable directory is an error. A refused plugin is
/// logged with its file and reason, and the others load. Credential files may lie under
/// the kubeconfig sources of `discovery` and the plugin settings' credential directories;
/// Secrets are read from the plugin settings' management cluster.
pub async fn load_plugins(
    plugins: &PluginConfig,
    discovery: &DiscoverySettings,
    concurrency: usize,
) -> Result<EngineProber, ServeError> {
    let dir_exists = plugins.plugin_dir.exists();
    if !dir_exists && !plugins.embedded {
        warn!(
            plugin_dir = %plugins.plugin_dir.display(),
            "the plugin directory does not exist and the embedded plugins are turned off \
             (VIGIL_PLUGINS_EMBEDDED=false): no probe plugin is loaded, so no cluster can be probed"
        );
        return Ok(EngineProber::None(NoPlugins));
    }
    if !dir_exists {
        info!(
            plugin_dir = %plugins.plugin_dir.display(),
            "the plugin directory does not exist: the embedded plugins serve \
             (create it and send SIGHUP to add or override plugins)"
        );
    }
    announce_exec_confinement(&plugins.exec);
    let settings = RuntimeSettings {
        embedded: if plugins.embedded {
            crate::build_info::embedded_plugins()
        } else {
            Vec::new()
        },
        plugin_dir: plugins.plugin_dir.clone(),
        cache_dir: plugins.cache_dir.clone(),
        concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
        credential_dirs: credential_roots(discovery, &plugins.credential_dirs),
        kubeconfig_credential_dirs: discovery.kubeconfig_credential_dirs.clone(),
        // The management cluster's client, or why there is none: a broken setting makes
        // `secret://` clusters not probeable, never stops the engine.
        secrets: Some(secrets::connect(&plugins.management).await),
        registration_allow: plugins.registration_allow.clone(),
        exec: plugins.exec.clone(),
    };
    let (runtime, report) = PluginRuntime::load(&settings).await?;
    runtime.set_probation(plugins.probation);
    if report.loaded.is_empty() {
        warn!(
            plugin_dir = %plugins.plugin_dir.display(),
            refused = report.refused.len(),
            "no probe plugin loaded: no cluster can be probed"
        );
    } else {
        info!(
            plugin_dir = %plugins.plugin_dir.display(),
            loaded = report.loaded.len(),
            refused = report.refused.len(),
            plugins = %report.loaded.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            "plugins loaded"
        );
    }
    Ok(EngineProber::Plugins(runtime))
}

/// Says once how exec commands will be confined, when any may run: a warning when
/// Landlock is asked for and the kernel does not offer it (the README says what holds then).
fn announce_exec_confinement(exec: &vigil_plugin_host::ExecSettings) {
    if exec.policy.allow.is_empty() {
        return;
    }
    let confinement = &exec.confinement;
    let dir = confinement.dir.display();
    if !confinement.landlock {
        warn!(
            exec_dir = %dir,
            "exec commands run without Landlock (VIGIL_EXEC_LANDLOCK=off): an allowed command may read and write every file vigil's user may"
        );
        return;
    }
    match vigil_plugin_host::confine::landlock_abi() {
        Some(abi) => info!(exec_dir = %dir, landlock_abi = abi, "exec commands run under Landlock"),
        None => warn!(
            exec_dir = %dir,
            "this kernel offers no Landlock: exec commands run without it, and an allowed command may read and write every file vigil's user may (set VIGIL_EXEC_LANDLOCK=off to say this is intended)"
        ),
    }
}

/// Where credential files may lie: the kubeconfig files and directory that
/// discovery reads, and `VIGIL_CREDENTIAL_DIRS`.
pub fn credential_roots(
    discovery: &DiscoverySettings,
    credential_dirs: &[PathBuf],
) -> Vec<PathBuf> {
    let sources = Sources::from_settings(discovery);
    sources
        .files()
        .iter()
        .map(|file| file.path.clone())
        .chain(sources.dir().map(std::path::Path::to_path_buf))
        .chain(credential_dirs.iter().cloned())
        .collect()
}

/// Runs the engine with `prober` until `shutdown` completes (with no plugin catalog:
/// the API lists no plugin).
pub async fn serve<P: Prober>(
    config: &EngineConfig,
    prober: P,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, ServeError> {
    let _lock = lock(config)?;
    let metrics = Metrics::new(config.metrics_per_cluster);
    run(config, prober, Arc::new(NoCatalog), metrics, shutdown).await
}

fn lock(config: &EngineConfig) -> Result<Option<DatabaseLock>, LockError> {
    config
        .database_path
        .as_deref()
        .map(DatabaseLock::acquire)
        .transpose()
}

/// The catalog of an engine run with a prober that is not the plugin runtime.
#[derive(Debug)]
struct NoCatalog;

impl PluginCatalog for NoCatalog {
    fn plugins(&self) -> Vec<PluginView> {
        Vec::new()
    }

    fn reload(&self) -> BoxFuture<'_, Option<Result<ReloadView, String>>> {
        Box::pin(async { None })
    }
}

impl PluginCatalog for EngineProber {
    fn plugins(&self) -> Vec<PluginView> {
        let Self::Plugins(runtime) = self else {
            return Vec::new();
        };
        let mut views: Vec<PluginView> = runtime
            .catalog_status()
            .into_iter()
            .map(|status| plugin_view(status, runtime.probation()))
            .collect();
        // The serving plugins in routing order, then the others by name.
        let order: Vec<String> = runtime.plugins().into_iter().map(|p| p.name).collect();
        views.sort_by_key(|view| {
            order
                .iter()
                .position(|name| *name == view.name)
                .unwrap_or(usize::MAX)
        });
        views
    }

    fn reload(&self) -> BoxFuture<'_, Option<Result<ReloadView, String>>> {
        Box::pin(async move {
            let Self::Plugins(runtime) = self else {
                return None;
            };
            Some(match runtime.reload().await {
                Ok(report) => {
                    vigil_plugin_host::plugin_watch::log_reload(&report);
                    Ok(reload_view(&report))
                }
                Err(error) => Err(error.to_string()),
            })
        })
    }
}

fn plugin_view(status: PluginStatus, probation: ProbationPolicy) -> PluginView {
    let current = status.current;
    PluginView {
        name: status.name,
        state: status.state.as_str().to_owned(),
        generation: current.as_ref().map(|p| p.generation),
        world: current.as_ref().map(|p| p.world.to_owned()),
        self_name: current.as_ref().map(|p| p.self_name.clone()),
        version: current.as_ref().map(|p| p.version.clone()),
        source: current.as_ref().map(|p| p.source.label()),
        package: vigil_plugin_host::SUPPORTED_CONTRACT.to_owned(),
        hash: current.as_ref().map(|p| p.hash.clone()),
        schemes: current
            .as_ref()
            .map(|p| p.schemes.clone())
            .unwrap_or_default(),
        priority: current.as_ref().map_or(0, |p| p.priority),
        memory_mib: current.as_ref().map_or(0, |p| p.memory_mib),
        secret_namespaces: current
            .as_ref()
            .map(|p| p.secret_namespaces.clone())
            .unwrap_or_default(),
        allowed_hosts: current
            .as_ref()
            .map(|p| p.allowed_hosts.clone())
            .unwrap_or_default(),
        credential_hosts: current
            .as_ref()
            .map(|p| p.credential_hosts.clone())
            .unwrap_or_default(),
        grants: current.map(|p| p.grants).unwrap_or_default(),
        probes: status.stats.probes,
        faults: status.stats.faults,
        accepts: status.stats.accepts,
        previous_generation: status.previous_generation,
        candidate_generation: status.candidate_generation,
        probation: status
            .probation
            .map(|(judged, inconclusive)| ProbationView {
                judged,
                inconclusive,
                probes: probation.probes,
                max_inconclusive: probation.allowed_inconclusive(),
            }),
        last_failure: status.last_failure.as_ref().map(failure_view),
    }
}

fn failure_view(failure: &CandidateFailure) -> PluginFailureView {
    PluginFailureView {
        file: failure.source.label(),
        generation: failure.generation,
        stage: failure.stage.as_str().to_owned(),
        message: failure.message.clone(),
        at: rfc3339(system_timestamp(failure.at)),
    }
}

fn reload_view(report: &ReloadReport) -> ReloadView {
    ReloadView {
        promoted: report
            .promoted
            .iter()
            .map(|p| ProbedByView {
                plugin: p.name.clone(),
                generation: p.generation,
            })
            .collect(),
        failed: report
            .refused
            .iter()
            .map(|refused| PluginFailureView {
                file: refused.origin.label(),
                generation: 0,
                stage: refused.reason.stage().as_str().to_owned(),
                message: refused.reason.to_string(),
                at: rfc3339(wall_clock()),
            })
            .collect(),
        retired: report
            .retired
            .iter()
            .map(|(plugin, generation)| ProbedByView {
                plugin: plugin.clone(),
                generation: *generation,
            })
            .collect(),
        unchanged: report.unchanged.clone(),
    }
}

fn system_timestamp(at: std::time::SystemTime) -> vigil_decision::Timestamp {
    vigil_decision::Timestamp(
        at.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    )
}

/// Time allowed, beyond a probe's timeout and grace, to write its result under its claim.
const CLAIM_APPLY_MARGIN: Duration = Duration::from_secs(15);

/// How long a replica holds discovery after running it: re-discovery on a change of the
/// kubeconfig sources stays with it meanwhile.
const DISCOVERY_LEASE: Duration = Duration::from_secs(300);

/// How often a replica sharing the fleet records that it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Who owns the single-owner work of this engine: itself alone on SQLite, a lease among
/// the replicas on PostgreSQL.
fn owner_of(config: &EngineConfig, store: &Store) -> Owner {
    match store.backend() {
        Backend::Sqlite => Owner::alone(),
        Backend::Postgres => Owner::replica(&config.replica.id),
    }
}

/// A value of this process alone, written with its heartbeat: a second process with the
/// same replica id finds another's.
fn process_instance() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", std::process::id(), started.as_nanos())
}

/// Writes this process's first heartbeat as `replica`. A heartbeat of another process
/// that is still alive is either a run of this replica that just died (it lapses within
/// its lifetime, and then this one takes the id over) or another process using the same
/// id (it goes on beating): then vigil refuses to start.
async fn take_replica_id(
    store: &Store,
    replica: &str,
    instance: &str,
    node: Option<&str>,
) -> Result<(), ServeError> {
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(vigil_store::HEARTBEAT_LIFETIME_MILLIS.unsigned_abs())
        + HEARTBEAT_EVERY;
    let mut first_seen = None;
    loop {
        if store.heartbeat(replica, instance, node).await? {
            return Ok(());
        }
        let beat = store.replica_heartbeat(replica).await?;
        match first_seen {
            None => {
                info!(
                    replica,
                    "another process wrote this replica's heartbeat a moment ago: waiting for it to lapse (a run that just stopped) or to beat again (a second process with this id)"
                );
                first_seen = beat;
            }
            Some(first) if beat.is_some_and(|beat| beat > first) => {
                return Err(ServeError::ReplicaIdInUse {
                    replica: replica.to_owned(),
                });
            }
            Some(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ServeError::ReplicaIdInUse {
                replica: replica.to_owned(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Records, every [`HEARTBEAT_EVERY`], that this replica is alive.
async fn heartbeat_loop(store: Store, replica: String, instance: String, node: Option<String>) {
    let mut every = tokio::time::interval(HEARTBEAT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match store.heartbeat(&replica, &instance, node.as_deref()).await {
            Ok(true) => {}
            Ok(false) => {
                error!(%replica, "another vigil process writes this replica's heartbeat: two processes share VIGIL_REPLICA_ID, and their claims and leases are one; give each its own");
            }
            Err(error) => {
                warn!(error = %error_chain(&error), "could not record this replica's heartbeat");
            }
        }
    }
}

/// `/readyz`'s view of the notification sinks.
fn notifications_report(status: Arc<NotifyStatus>) -> NotificationsReport {
    NotificationsReport(Arc::new(move || NotificationsView {
        sinks: status
            .sinks()
            .into_iter()
            .map(|(name, sink)| SinkView {
                name,
                kind: sink.kind.to_owned(),
                failing: sink.failing,
                attempts: sink.attempts,
                last_error: sink.last_error,
                dead_letters: sink.dead_letters,
                last_dead_letter: sink.last_dead_letter,
            })
            .collect(),
        config_error: status.config_error(),
    }))
}

/// Reads the notifications file again on SIGHUP: a file that can be used replaces the
/// configuration in force; one that cannot is refused, said in the log and in `/readyz`,
/// and the one in force kept.
async fn reload_notify_config_on_hangup(
    config: tokio::sync::watch::Sender<Arc<NotifyConfig>>,
    status: Arc<NotifyStatus>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(error) => {
            warn!(%error, "SIGHUP cannot be caught: the notifications file is read at start-up only");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        let Some(path) = config.borrow().path.clone() else {
            continue;
        };
        match NotifyConfig::load(&path) {
            Ok(new) => {
                info!(path = %path.display(), sinks = new.sinks.len(), "notifications file read again");
                status.set_config_error(None);
                config.send_replace(Arc::new(new));
            }
            Err(error) => {
                warn!(%error, "the notifications file read again is refused; the one in force is kept");
                status.set_config_error(Some(error.to_string()));
            }
        }
    }
}

/// Reads the API tokens file again on SIGHUP: a file that can be used replaces the tokens
/// in force for every request from then on; one that cannot is refused, said in the log,
/// and the tokens in force kept.
async fn reload_tokens_on_hangup(access: Access, token: Option<String>, file: PathBuf) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        return;
    };
    while hangups.recv().await.is_some() {
        match access.reload(token.as_deref(), &file) {
            Ok(tokens) => info!(file = %file.display(), tokens, "API tokens file read again"),
            Err(error) => {
                warn!(%error, "the API tokens file read again is refused; the tokens in force are kept");
            }
        }
    }
}

/// How long open API connections (event streams) may take to end after shutdown.
const API_DRAIN: Duration = Duration::from_secs(2);

async fn run<P: Prober>(
    config: &EngineConfig,
    prober: P,
    catalog: Arc<dyn PluginCatalog>,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, ServeError> {
    let access = Access::new(
        config.api.token.as_ref().map(|t| t.0.as_str()),
        config.api.tokens_file.as_deref(),
        config.api.read_auth,
    )?
    .with_public_url(config.api.public_url.clone())
    .with_allowed_hosts(&config.api.allowed_hosts);
    if !access.has_tokens()
        && !config.api.listen.ip().is_loopback()
        && config.api.public_url.is_none()
    {
        warn!(
            listen = %config.api.listen,
            "no token and no VIGIL_PUBLIC_URL: only requests addressed to a loopback name or \
             address are answered; set VIGIL_PUBLIC_URL to the host clients use"
        );
    }
    let token_reloads = config.api.tokens_file.clone().map(|file| {
        tokio::spawn(reload_tokens_on_hangup(
            access.clone(),
            config.api.token.as_ref().map(|t| t.0.clone()),
            file,
        ))
    });
    let store = Store::open(&config.database_url).await?;
    let sources = Sources::from_settings(&config.discovery);
    let owner = owner_of(config, &store);

    let mut settings = WorkerSettings::new(config.defaults, config.brake, config.concurrency);
    settings.brake_window_explicit = config.brake_window_explicit;
    settings.replica_safeguards = config.replica.safeguards;
    let mut worker = Worker::new(store.clone(), prober, settings).with_metrics(metrics.clone());
    let shared = store.backend() == Backend::Postgres;
    if shared {
        metrics.set_replica(&config.replica.id, config.replica.node.as_deref());
        info!(replica = %config.replica.id, node = config.replica.node.as_deref().unwrap_or("-"),
              "sharing the fleet with the other replicas on this database");
        worker = worker.with_sharing(Sharing {
            replica: config.replica.id.clone(),
            lease: Lease {
                minimum: config.replica.lease,
                margin: settings.grace + CLAIM_APPLY_MARGIN,
            },
        });
    }
    let handle = worker.handle();
    let instance = process_instance();
    if shared {
        take_replica_id(
            &store,
            &config.replica.id,
            &instance,
            config.replica.node.as_deref(),
        )
        .await?;
    }
    let heartbeat = shared.then(|| {
        tokio::spawn(heartbeat_loop(
            store.clone(),
            config.replica.id.clone(),
            instance,
            config.replica.node.clone(),
        ))
    });

    let listener = tokio::net::TcpListener::bind(config.api.listen)
        .await
        .map_err(|source| ServeError::Listen {
            address: config.api.listen,
            source,
        })?;
    let bound = listener.local_addr().unwrap_or(config.api.listen);
    let notify_status = Arc::new(NotifyStatus::default());
    if config.notify.is_some() {
        let status = Arc::clone(&notify_status);
        metrics.set_notification_sinks(move || {
            status
                .sinks()
                .into_iter()
                .map(|(name, sink)| SinkMetrics {
                    name,
                    kind: sink.kind,
                    failing: sink.failing,
                    delivered: sink.delivered,
                    failures: sink.failures,
                    dead_letters: sink.dead_letters,
                    positions: sink.positions,
                })
                .collect()
        });
    }
    let readiness = Arc::new(Readiness {
        writes: worker.store_writes(),
        replica: shared.then(|| config.replica.id.clone()),
        notifications: config
            .notify
            .is_some()
            .then(|| notifications_report(Arc::clone(&notify_status))),
        ..Readiness::default()
    });
    let state = ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: catalog,
        access,
        credential_roots: credential_roots(&config.discovery, &config.plugins.credential_dirs)
            .into(),
        registration_allow: Arc::new(config.plugins.registration_allow.clone()),
        defaults: config.defaults,
        readiness: Arc::clone(&readiness),
        metrics: Some(Arc::new(metrics)),
        wake: handle.clone(),
        views: Arc::default(),
        events: Arc::new(vigil_api::EventFeed::new(
            config.api.limits.max_event_streams,
        )),
    };
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let limits = config.api.limits;
    let api = tokio::spawn(async move {
        let stopped = async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        };
        vigil_api::server::serve(listener, vigil_api::app(state), limits, stopped).await;
    });
    info!(
        listen = %bound,
        max_connections = limits.max_connections,
        max_event_streams = limits.max_event_streams,
        "REST API listening"
    );

    if owner.holds(&store, "discovery", DISCOVERY_LEASE).await {
        run_discovery(
            &store,
            &sources,
            &config.plugins.exec.policy,
            &config.discovery.kubeconfig_credential_dirs,
            &handle,
        )
        .await?;
    } else {
        info!("another replica holds discovery: it writes what the kubeconfig sources define");
    }
    // Clusters known by now are the ones readiness waits for.
    readiness.started.store(wall_clock().0, Ordering::Release);
    readiness.discovered.store(true, Ordering::Release);
    let retention = tokio::spawn(vigil_engine::retention::retention_loop(
        store.clone(),
        config.history_retention_days,
        owner.clone(),
        std::future::pending::<()>(),
    ));

    let notifications = config.notify.clone().map(|notify| {
        let holder = if shared {
            config.replica.id.clone()
        } else {
            "local".to_owned()
        };
        let (config_tx, config_rx) = tokio::sync::watch::channel(Arc::new(notify));
        let notifier = Notifier::new(store.clone(), holder, Arc::clone(&notify_status));
        (
            tokio::spawn(notifier.run(config_rx)),
            tokio::spawn(reload_notify_config_on_hangup(
                config_tx,
                Arc::clone(&notify_status),
            )),
        )
    });

    let (changed_tx, mut changed_rx) = mpsc::channel(1);
    let _watcher = match discovery::watch(&sources, DISCOVERY_DEBOUNCE, changed_tx) {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            warn!(error = %error_chain(&error), "kubeconfig sources are not watched; discovery runs at start-up only");
            None
        }
    };
    let rediscovery = {
        let store = store.clone();
        let sources = sources.clone();
        let handle = handle.clone();
        let owner = owner.clone();
        let exec_policy = config.plugins.exec.policy.clone();
        let named_files = config.discovery.kubeconfig_credential_dirs.clone();
        async move {
            while changed_rx.recv().await.is_some() {
                if !owner.holds(&store, "discovery", DISCOVERY_LEASE).await {
                    debug!("kubeconfig sources changed; another replica holds discovery");
                    continue;
                }
                info!("kubeconfig sources changed; discovering again");
                if let Err(error) =
                    run_discovery(&store, &sources, &exec_policy, &named_files, &handle).await
                {
                    warn!(error = %error_chain(&error), "discovery failed");
                }
            }
        }
    };
    let rediscovery = tokio::spawn(rediscovery);

    let stats = worker
        .run(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        })
        .await;
    rediscovery.abort();
    // A notification being sent when vigil stops is sent again at the next start, with
    // the same id: its sink's position moves only once the receiver accepted it.
    if let Some((notifier, reloads)) = notifications {
        notifier.abort();
        reloads.abort();
    }
    if let Some(reloads) = token_reloads {
        reloads.abort();
    }
    // A prune pass is a series of short transactions: stopping between two loses nothing.
    retention.abort();
    if let Some(heartbeat) = heartbeat {
        heartbeat.abort();
        // Gone at once, rather than when the heartbeat's lifetime ends; the worker gave
        // its claims back already.
        for left in [
            store.release_leases(&config.replica.id).await,
            store.leave(&config.replica.id).await,
        ] {
            if let Err(error) = left {
                warn!(error = %error_chain(&error), "could not leave the replicas; the leases lapse by themselves");
            }
        }
    }
    if tokio::time::timeout(API_DRAIN, api).await.is_err() {
        info!("open API connections closed at shutdown");
    }
    store.close().await;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retired(generation: u64) -> PluginEvent {
        PluginEvent::Retired {
            plugin: "kube".to_owned(),
            generation,
        }
    }

    /// What was sent before the stop is recorded, in order, counted, and then the recorder
    /// returns, even with its sender alive.
    #[tokio::test]
    async fn the_plugin_events_sent_before_the_stop_are_recorded_then_the_recorder_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("vigil.db").display());
        let store = Store::open(&url).await.expect("store");
        let metrics = Metrics::new(false);
        let (sender, events) = tokio::sync::broadcast::channel(16);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let recorder = tokio::spawn(record_plugin_events(
            store.clone(),
            metrics.clone(),
            events,
            stopped,
        ));
        for generation in 1..=3 {
            sender.send(retired(generation)).expect("send");
        }
        stop.send(()).expect("stop");
        tokio::time::timeout(Duration::from_secs(10), recorder)
            .await
            .expect("the recorder ends at the stop")
            .expect("join");

        let recorded: Vec<(String, serde_json::Value)> = store
            .events_after(0, 100)
            .await
            .expect("events")
            .into_iter()
            .map(|e| (e.kind, serde_json::from_str(&e.detail).expect("json")))
            .collect();
        let expected: Vec<(String, serde_json::Value)> = (1..=3)
            .map(|g| (retired(g).kind().to_owned(), retired(g).detail()))
            .collect();
        assert_eq!(recorded, expected);
        let text = metrics.render(&store).await.expect("render");
        assert!(
            text.contains(
                r#"vigil_plugin_generation_changes_total{plugin="kube",change="retired"} 3"#
            ),
            "{text}"
        );
        drop(sender);
    }
}
