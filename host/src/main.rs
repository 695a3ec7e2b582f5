//! The `vigil` binary: parses the command line and runs the engine.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use serde_json::json;
use tracing_subscriber::EnvFilter;
use vigil::cli::{
    BackupArgs, Cli, Command, DiscoverArgs, HealthcheckArgs, MigrateArgs, OutputFormat,
    PluginCheckArgs, PluginCommand, ProbeArgs, ServeArgs, ServerArgs, StatusArgs,
};
use vigil::client::{ApiClient, ClientError, status_table};
use vigil::config::{EngineConfig, LogFormat};
use vigil::plugin_check::{CheckError, CheckSettings};
use vigil::serve::{ServeError, credential_roots, load_plugins, serve_with_plugins};
use vigil_decision::{BrakeConfig, ClusterHealth, ClusterId, HealthPolicy};
use vigil_domain::discovery::{self, Sources};
use vigil_domain::probe::{Probed, error_chain, wall_clock};
use vigil_engine::discovery_preview::preview;
use vigil_engine::worker::{WorkerSettings, probe_once};
use vigil_store::{ClusterRecord, ClusterSource, ExistingDatabase, Store, StoreError};

/// How a command ended, and so how vigil exits: the one mapping from results and errors to
/// the exit codes the README documents. Messages are printed once, by [`Exit::report`].
#[derive(Debug)]
enum Exit {
    /// 0: the command did its work (and a probe was healthy, a plugin accepted).
    Done,
    /// 1: the command could not do its work; the message says why.
    Failed(String),
    /// 1, already reported on standard error (a problem answered by the server).
    FailedReported,
    /// 2: invalid settings or arguments (clap uses it too).
    Settings(String),
    /// 3 (`vigil serve`): another engine holds the database.
    Locked(String),
    /// 3 (`vigil probe`, `vigil plugin check --cluster`): the probe ran and is not healthy.
    NotHealthy,
    /// 4 (`vigil plugin check`): vigil refuses the plugin (the refusal is printed).
    Refused,
    /// `vigil audit`'s own code: 0 no blocking finding, 1 a blocking one, 2 bad input.
    Audit(u8),
}

impl Exit {
    /// An error the command could not get past, with its sources on one line.
    fn failed(error: &dyn std::error::Error) -> Self {
        Self::Failed(error_chain(error))
    }

    /// The exit code.
    fn code(&self) -> u8 {
        match self {
            Self::Done => 0,
            Self::Failed(_) | Self::FailedReported => 1,
            Self::Settings(_) => 2,
            Self::Locked(_) | Self::NotHealthy => 3,
            Self::Refused => 4,
            Self::Audit(code) => *code,
        }
    }

    /// Prints the message, if any, and gives the exit code.
    fn report(self) -> ExitCode {
        if let Self::Failed(message) | Self::Settings(message) | Self::Locked(message) = &self {
            eprintln!("error: {message}");
        }
        ExitCode::from(self.code())
    }
}

impl From<ServeError> for Exit {
    fn from(error: ServeError) -> Self {
        let message = error_chain(&error);
        match error {
            // The tokens file changed between the settings' check and the start.
            ServeError::Tokens(_) | ServeError::ReplicaIdInUse { .. } => Self::Settings(message),
            ServeError::Locked(_) => Self::Locked(message),
            _ => Self::Failed(message),
        }
    }
}

/// mimalloc instead of glibc's malloc: per-thread free lists without a lock, where glibc
/// spent a third of the CPU of a 500-cluster page in `malloc`/`free` and their
/// consolidation (BENCHMARKS.md, "REST API under load").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The exec launcher (`vigil exec-sandbox`, started by vigil for a kubeconfig's exec
    // command): before anything else, with no thread and no runtime.
    let mut args = std::env::args_os().skip(1);
    if args
        .next()
        .is_some_and(|first| first == vigil_plugin_host::confine::LAUNCHER_COMMAND)
    {
        return vigil_plugin_host::confine::launcher_main(&args.collect::<Vec<_>>());
    }
    // No other process of vigil's user may read this one's memory, environment or open
    // files under /proc, nor attach a debugger to it (an exec command runs as that user).
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let cli = Cli::parse();
    let command = match cli.command {
        Some(command) if !cli.version => command,
        None if !cli.version => {
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            return ExitCode::from(2);
        }
        _ => {
            match cli.output {
                OutputFormat::Json => print(&format!("{}\n", vigil::build_info::version_json())),
                OutputFormat::Table => print(&vigil::build_info::version_text()),
            }
            return ExitCode::SUCCESS;
        }
    };
    let exit = match command {
        Command::Serve(args) => serve(&args),
        Command::Discover(args) => discover(&args),
        Command::Status(args) => status(&args),
        Command::Probe(args) => probe(&args),
        Command::Audit(args) => {
            let (mut output, mut errors) = (String::new(), String::new());
            let code = vigil::audit_cli::run(
                &args,
                &mut std::io::stdin().lock(),
                &mut output,
                &mut errors,
            );
            eprint!("{errors}");
            print(&output);
            Exit::Audit(code)
        }
        Command::Plugin(PluginCommand::Check(args)) => plugin_check(&args),
        Command::Migrate(args) => migrate(&args),
        Command::Backup(args) => backup(&args),
        Command::Healthcheck(args) => healthcheck(&args),
    };
    exit.report()
}

/// `vigil serve`, until SIGINT or SIGTERM.
fn serve(args: &ServeArgs) -> Exit {
    // Where the kernel backs all anonymous memory with transparent huge pages, each page
    // the allocator gives back and takes again is a fresh 2 MiB to zero: a tenth of the
    // engine's CPU during a burst of probes, and twice its resident memory (BENCHMARKS.md,
    // "The whole engine against a fleet"). Small pages cost neither.
    let huge_pages_off = rustix::thread::disable_transparent_huge_pages(true);
    let mut config = match args.engine_config(std::env::home_dir()) {
        Ok(config) => config,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    init_logging(config.log_format, "info");
    if let Err(error) = huge_pages_off {
        tracing::debug!(%error, "transparent huge pages stay as the kernel sets them");
    }
    if let Err(exit) = fit_open_files(&mut config) {
        return exit;
    }
    let runtime = match async_runtime(Workers::OnePerCore) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let served = runtime.block_on(async {
        // The handlers are set before anything starts: a SIGTERM that comes as soon as the
        // API answers stops vigil cleanly instead of killing it.
        let shutdown = shutdown_signal();
        serve_with_plugins(&config, shutdown).await
    });
    match served {
        Ok(_) => Exit::Done,
        Err(error) => {
            tracing::error!("{}", error_chain(&error));
            error.into()
        }
    }
}

/// Raises the open-files limit to its hard limit and fits the API's connection cap in it
/// (`vigil::open_files`): a cap the operator set that does not fit stops start-up (exit 2).
fn fit_open_files(config: &mut EngineConfig) -> Result<(), Exit> {
    let limit = match vigil::open_files::raise_to_hard_limit() {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "the open-files limit could not be raised");
            rlimit::Resource::NOFILE.get_soft().unwrap_or(u64::MAX)
        }
    };
    match vigil::open_files::fit(
        config.api.limits,
        config.api.max_connections_set,
        limit,
        config.concurrency,
    ) {
        Ok((limits, lowered)) => {
            if let Some(default) = lowered {
                tracing::warn!(
                    open_files = limit,
                    max_connections = limits.max_connections,
                    max_event_streams = limits.max_event_streams,
                    "the open-files limit leaves room for fewer API connections than the \
                     default {default}: VIGIL_API_MAX_CONNECTIONS lowered to fit (raise the \
                     limit, or lower CLUSTER_HEALTH_CONCURRENCY)"
                );
            }
            config.api.limits = limits;
            Ok(())
        }
        Err(error) => {
            tracing::error!("{error}");
            Err(Exit::Settings(error.to_string()))
        }
    }
}

/// `vigil migrate`: copies an installation into a new database.
fn migrate(args: &MigrateArgs) -> Exit {
    let (from_path, to_path) = match (
        vigil_store::sqlite_path(&args.from),
        vigil_store::sqlite_path(&args.to),
    ) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(error), _) => return Exit::Settings(format!("--from: {error}")),
        (_, Err(error)) => return Exit::Settings(format!("--to: {error}")),
    };
    if args.from == args.to || (from_path.is_some() && from_path == to_path) {
        return Exit::Settings("--from and --to name the same database".to_owned());
    }
    // An engine on a SQLite file holds its lock: copying under it would copy a state it
    // is still changing, and nothing would stop it from going on after the copy. A
    // database that does not exist yet is not created by looking.
    let mut locks = Vec::new();
    for (flag, path) in [("--from", &from_path), ("--to", &to_path)] {
        let Some(path) = path else { continue };
        if flag == "--from" && !path.exists() {
            return Exit::Failed(format!("--from: {} does not exist", path.display()));
        }
        match vigil_store::lock::DatabaseLock::acquire(path) {
            Ok(lock) => locks.push(lock),
            Err(error) => return Exit::Locked(format!("{flag}: {error}")),
        }
    }
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let copied = runtime.block_on(async {
        let from = match Store::open_existing(&args.from).await? {
            ExistingDatabase::Ready(store) => store,
            ExistingDatabase::Blank => {
                return Ok(Err(format!(
                    "--from: {} holds no vigil database",
                    vigil_store::redact_url(&args.from)
                )));
            }
            ExistingDatabase::SchemaMismatch { applied, expected } => {
                return Ok(Err(format!(
                    "--from: {} has schema versions {applied:?}, this vigil {expected:?}: \
                     run this vigil's `vigil serve` on it once (it migrates the schema), \
                     or use the vigil that wrote it",
                    vigil_store::redact_url(&args.from)
                )));
            }
        };
        let to = Store::open(&args.to).await?;
        let summary = from.copy_to(&to).await;
        from.close().await;
        to.close().await;
        Ok::<_, StoreError>(Ok(summary?))
    });
    drop(locks);
    match copied {
        Ok(Ok(summary)) => {
            let text = match args.output {
                OutputFormat::Table => {
                    let mut text = format!(
                        "copied {} to {}\n",
                        vigil_store::redact_url(&args.from),
                        vigil_store::redact_url(&args.to)
                    );
                    for (table, rows) in &summary.tables {
                        text.push_str(&format!("  {table:<12} {rows:>9} rows\n"));
                    }
                    text
                }
                OutputFormat::Json => {
                    let tables: serde_json::Map<String, serde_json::Value> = summary
                        .tables
                        .iter()
                        .map(|(table, rows)| ((*table).to_owned(), json!(rows)))
                        .collect();
                    json!({ "tables": tables }).to_string() + "\n"
                }
            };
            print(&text);
            Exit::Done
        }
        Ok(Err(message)) => Exit::Failed(message),
        Err(error) => Exit::failed(&error),
    }
}

/// `vigil backup FILE`: a copy of the SQLite store, taken while the engine runs.
fn backup(args: &BackupArgs) -> Exit {
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    match runtime.block_on(vigil::backup_cli::run(args)) {
        Ok(backup) => {
            print(&vigil::backup_cli::report(&backup, args.output));
            Exit::Done
        }
        Err(error) if error.is_setting() => Exit::Settings(error_chain(&error)),
        Err(error) => Exit::failed(&error),
    }
}

/// `vigil healthcheck [--ready]`: whether the local vigil answers its probe with 200.
fn healthcheck(args: &HealthcheckArgs) -> Exit {
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    match runtime.block_on(vigil::healthcheck::check(args)) {
        Ok(()) => Exit::Done,
        Err(error) if error.is_setting() => Exit::Settings(error.to_string()),
        Err(error) => Exit::Failed(error.to_string()),
    }
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error of the command.
fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// How many threads run a command's tasks.
#[derive(Debug, Clone, Copy)]
enum Workers {
    /// One per core: `vigil serve`.
    OnePerCore,
    /// Two: the one-off commands, which wait on one thing at a time.
    Two,
}

/// The one way vigil builds its async runtime.
fn async_runtime(workers: Workers) -> Result<tokio::runtime::Runtime, Exit> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Workers::Two = workers {
        builder.worker_threads(2);
    }
    builder
        .enable_all()
        .build()
        .map_err(|error| Exit::Failed(format!("cannot start the async runtime: {error}")))
}

fn api_client(server: &ServerArgs) -> Result<ApiClient, Exit> {
    ApiClient::new(&server.server, server.token.as_deref())
        .map_err(|error| Exit::Settings(error.to_string()))
}

/// Prints a failed call to the server; a problem's title, detail and field each on
/// their own line.
fn client_failed(error: &ClientError) -> Exit {
    match error {
        ClientError::Problem { url, problem } => {
            eprintln!(
                "error: vigil at {url} refused the request (HTTP {})",
                problem.status
            );
            eprintln!("  title:  {}", problem.title);
            if !problem.detail.is_empty() {
                eprintln!("  detail: {}", problem.detail);
            }
            if let Some(field) = &problem.field {
                eprintln!("  field:  {field}");
            }
        }
        other => return Exit::Failed(other.to_string()),
    }
    Exit::FailedReported
}

/// `vigil status`: the clusters of a running server.
fn status(args: &StatusArgs) -> Exit {
    let client = match api_client(&args.server) {
        Ok(client) => client,
        Err(exit) => return exit,
    };
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    match runtime.block_on(client.clusters()) {
        Ok(clusters) => {
            match args.output {
                OutputFormat::Table => print(&status_table(&clusters, SystemTime::now())),
                OutputFormat::Json => print(&(json_text(&serde_json::Value::Array(clusters)))),
            }
            Exit::Done
        }
        Err(error) => client_failed(&error),
    }
}

fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// `vigil probe CLUSTER [--apply]`.
fn probe(args: &ProbeArgs) -> Exit {
    if args.apply {
        return probe_through_server(args);
    }
    let home_dir = std::env::home_dir();
    let plugins = match args.plugins.config(home_dir.as_deref()) {
        Ok(plugins) => plugins,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let database_path = match args.sources.database_path() {
        Ok(path) => path,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let discovery_settings = args.sources.discovery_settings(home_dir);
    // Plugin loading and probing log what they refuse or find wrong; a one-off command
    // shows warnings unless RUST_LOG asks for more.
    init_logging(LogFormat::Text, "warn");
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    runtime.block_on(async {
        let database = database_path
            .as_deref()
            .map(|path| (args.sources.database_url.as_str(), path));
        let found = match find_cluster(&args.cluster, database, &discovery_settings).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Exit::Failed(format!(
                    "no cluster named `{}`: it is neither in the database nor a context of \
                     the kubeconfig sources (see `vigil discover --dry-run`)",
                    args.cluster
                ));
            }
            Err(error) => return Exit::failed(&error),
        };
        let prober = match load_plugins(&plugins, &discovery_settings, 1).await {
            Ok(prober) => prober,
            Err(error) => return Exit::failed(&error),
        };
        let defaults = HealthPolicy {
            timeout_seconds: args.timeout,
            ..HealthPolicy::default()
        };
        // Nothing is applied: the brake plays no part in a probe that records nothing.
        let brake = BrakeConfig {
            enabled: false,
            ratio: 1.0,
            min_failed: 1,
            window_millis: 0,
        };
        let settings = WorkerSettings::new(defaults, brake, 1);
        let started = Instant::now();
        let probed = probe_once(&prober, &found.record, &settings).await;
        let elapsed = started.elapsed();
        let outcome = &probed.outcome;
        print(&match args.output {
            OutputFormat::Table => {
                probe_text(&found, &probed, elapsed)
                    + "Nothing was recorded: --apply has the running server probe it and record \
                       the outcome.\n"
            }
            OutputFormat::Json => json_text(&probe_json(&found, &probed, elapsed)),
        });
        outcome_code(outcome.label())
    })
}

/// `vigil plugin check FILE.wasm [--cluster NAME]`.
fn plugin_check(args: &PluginCheckArgs) -> Exit {
    let home_dir = std::env::home_dir();
    // The file is loaded from a private temporary plugin directory; the cache and
    // credential settings are checked as `vigil serve` checks them.
    let dir = match vigil::plugin_check::private_dir() {
        Ok(dir) => dir,
        Err(error) => return Exit::failed(&error),
    };
    let plugins = match args.plugin_config(dir.path(), home_dir.as_deref()) {
        Ok(plugins) => plugins,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let database_path = match args.sources.database_path() {
        Ok(path) => path,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let discovery_settings = args.sources.discovery_settings(home_dir);
    // The refusal is printed below in full; the runtime's own log line would repeat it
    // with the temporary directory's path. RUST_LOG shows more.
    init_logging(LogFormat::Text, "error");
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    runtime.block_on(async {
        let settings = CheckSettings {
            cache_dir: plugins.cache_dir.clone(),
            credential_dirs: credential_roots(&discovery_settings, &plugins.credential_dirs),
            kubeconfig_credential_dirs: discovery_settings.kubeconfig_credential_dirs.clone(),
            management: plugins.management.clone(),
            registration_allow: plugins.registration_allow.clone(),
            exec: plugins.exec.clone(),
        };
        let checked = match vigil::plugin_check::check(&args.file, &settings, dir).await {
            Ok(checked) => checked,
            Err(error @ CheckError::Refused { .. }) => {
                eprintln!("refused: {error}");
                if let (OutputFormat::Json, Some(refusal)) = (args.output, error.refusal_json()) {
                    print(&json_text(&refusal));
                }
                return Exit::Refused;
            }
            Err(error) => return Exit::failed(&error),
        };
        let Some(name) = &args.cluster else {
            print(&match args.output {
                OutputFormat::Table => checked.describe(),
                OutputFormat::Json => json_text(&checked.to_json()),
            });
            return Exit::Done;
        };
        if args.output == OutputFormat::Table {
            print(&checked.describe());
        }
        let database = database_path
            .as_deref()
            .map(|path| (args.sources.database_url.as_str(), path));
        let found = match find_cluster(name, database, &discovery_settings).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Exit::Failed(format!(
                    "no cluster named `{name}`: it is neither in the database nor a context of \
                     the kubeconfig sources (see `vigil discover --dry-run`)"
                ));
            }
            Err(error) => return Exit::failed(&error),
        };
        let defaults = HealthPolicy {
            timeout_seconds: args.timeout,
            ..HealthPolicy::default()
        };
        let brake = BrakeConfig {
            enabled: false,
            ratio: 1.0,
            min_failed: 1,
            window_millis: 0,
        };
        let settings = WorkerSettings::new(defaults, brake, 1);
        let started = Instant::now();
        let probed = checked.probe(&found.record, &settings).await;
        let elapsed = started.elapsed();
        match args.output {
            OutputFormat::Table => print(&format!(
                "\n{}Nothing was recorded: the probe ran through {} only.\n",
                probe_text(&found, &probed, elapsed),
                args.file.display()
            )),
            OutputFormat::Json => {
                let mut answer = checked.to_json();
                answer["probe"] = probe_json(&found, &probed, elapsed);
                print(&json_text(&answer));
            }
        }
        outcome_code(probed.outcome.label())
    })
}

/// One probe that recorded nothing, for programs (`vigil probe -o json`, and the `probe`
/// of `vigil plugin check --cluster NAME -o json`).
fn probe_json(found: &FoundCluster, probed: &Probed, elapsed: Duration) -> serde_json::Value {
    let outcome = &probed.outcome;
    json!({
        "cluster": found.record.name,
        "found_in": found.origin,
        "outcome": outcome.label(),
        "reason_class": outcome.class().map(|c| c.as_str()),
        "message": outcome.message(),
        "probed_by": probed.by,
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        "applied": false,
    })
}

/// A cluster to probe, and where it was found.
struct FoundCluster {
    record: ClusterRecord,
    /// `the database` or `kubeconfig FILE`.
    origin: String,
}

/// The cluster named `name`: from the database when it exists and knows it (opened
/// without creating or migrating it, and only read), else from the contexts of the
/// kubeconfig sources.
async fn find_cluster(
    name: &str,
    database: Option<(&str, &std::path::Path)>,
    discovery_settings: &discovery::DiscoverySettings,
) -> Result<Option<FoundCluster>, StoreError> {
    if let Some((url, path)) = database
        && path.exists()
        && let ExistingDatabase::Ready(store) = Store::open_existing(url).await?
    {
        let record = store.cluster(name).await;
        store.close().await;
        match record {
            Ok(record) => {
                return Ok(Some(FoundCluster {
                    record,
                    origin: "the database".to_owned(),
                }));
            }
            Err(StoreError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    let sources = Sources::from_settings(discovery_settings);
    let report = tokio::task::spawn_blocking(move || discovery::discover(&sources))
        .await
        .unwrap_or_default();
    let Some(cluster) = report.clusters.into_iter().find(|c| c.name == name) else {
        return Ok(None);
    };
    let now = wall_clock();
    let origin = format!("kubeconfig {}", cluster.source_file.display());
    Ok(Some(FoundCluster {
        record: ClusterRecord {
            // Never stored: a one-off probe of a cluster the database does not know.
            id: ClusterId(0),
            name: cluster.name,
            endpoint: cluster.endpoint,
            kubeconfig_secret_ref: cluster.reference,
            source: ClusterSource::Discovered,
            ignored: false,
            plugin: None,
            labels: BTreeMap::new(),
            parameters: BTreeMap::new(),
            policy: vigil_decision::PolicyOverrides::default(),
            health: ClusterHealth::new(now),
            next_due: now,
            last_outcome: None,
            last_reason: None,
            last_reason_class: None,
            last_probed_by: None,
        },
        origin,
    }))
}

fn probe_text(found: &FoundCluster, probed: &Probed, elapsed: Duration) -> String {
    let outcome = &probed.outcome;
    let mut text = format!(
        "cluster:  {} (from {})\noutcome:  {}\n",
        found.record.name,
        found.origin,
        outcome.label()
    );
    if let Some(by) = &probed.by {
        text.push_str(&format!(
            "plugin:   {} (generation {})\n",
            by.plugin, by.generation
        ));
    }
    if let Some(class) = outcome.class() {
        text.push_str(&format!("reason:   {}\n", class.as_str()));
    }
    if let Some(message) = outcome.message() {
        text.push_str(&format!("message:  {message}\n"));
    }
    text.push_str(&format!("elapsed:  {} ms\n", elapsed.as_millis()));
    text
}

/// How a command that probed ends, by the outcome's label.
fn outcome_code(label: &str) -> Exit {
    if label == "healthy" {
        Exit::Done
    } else {
        Exit::NotHealthy
    }
}

/// `vigil probe CLUSTER --apply`: the running server probes and records.
fn probe_through_server(args: &ProbeArgs) -> Exit {
    let client = match api_client(&args.server) {
        Ok(client) => client,
        Err(exit) => return exit,
    };
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let started = Instant::now();
    let answer = match runtime.block_on(client.probe(&args.cluster)) {
        Ok(answer) => answer,
        Err(error) => return client_failed(&error),
    };
    let elapsed = started.elapsed();
    let Some(outcome) = answer["outcome"].as_str() else {
        return Exit::Failed(format!(
            "unexpected answer from {}: no `outcome` in the probe result",
            client.url()
        ));
    };
    match args.output {
        OutputFormat::Table => {
            let mut text = format!(
                "cluster:  {}\noutcome:  {outcome}\n",
                answer["cluster"]["name"].as_str().unwrap_or(&args.cluster)
            );
            if let Some(class) = answer["reason_class"].as_str() {
                text.push_str(&format!("reason:   {class}\n"));
            }
            if let Some(message) = answer["message"].as_str() {
                text.push_str(&format!("message:  {message}\n"));
            }
            if let Some(status) = answer["cluster"]["status"].as_str() {
                text.push_str(&format!(
                    "status:   {status} (after the outcome was recorded)\n"
                ));
            }
            text.push_str(&format!(
                "elapsed:  {} ms (the request to {})\n",
                elapsed.as_millis(),
                client.url()
            ));
            print(&text);
        }
        OutputFormat::Json => print(&json_text(&answer)),
    }
    outcome_code(outcome)
}

/// `vigil discover --dry-run`: prints what discovery finds and what `vigil serve`
/// would write, writing nothing.
fn discover(args: &DiscoverArgs) -> Exit {
    if !args.dry_run {
        // The engine discovers by itself (at start-up and on every kubeconfig
        // change); a second writer of discovered clusters beside it would only race
        // it, so this command exists to preview.
        return Exit::Settings(
            "`vigil discover` only previews: add --dry-run. `vigil serve` discovers by \
             itself, at start-up and whenever a kubeconfig changes."
                .to_owned(),
        );
    }
    let database_path = match args.sources.database_path() {
        Ok(path) => path,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let settings = args.sources.discovery_settings(std::env::home_dir());
    let sources = if args.files.is_empty() {
        Sources::from_settings(&settings)
    } else {
        Sources::new(args.files.iter().cloned(), None)
    };
    let runtime = match async_runtime(Workers::Two) {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let exec = match args.exec.settings() {
        Ok(settings) => settings.policy,
        Err(error) => return Exit::Settings(error.to_string()),
    };
    let planned = runtime.block_on(preview(
        &sources,
        &args.sources.database_url,
        database_path.as_deref(),
        &exec,
        &settings.kubeconfig_credential_dirs,
        wall_clock(),
    ));
    match planned {
        Ok(preview) => {
            let text = match args.output {
                OutputFormat::Table => vigil::output::discovery_preview(&preview),
                OutputFormat::Json => preview.to_json() + "\n",
            };
            // A closed pipe (`| head`) is not an error of the preview.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            Exit::Done
        }
        Err(error) => Exit::failed(&error),
    }
}

/// Logs to stderr, at `default_level` unless `RUST_LOG` says otherwise.
fn init_logging(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only for a terminal: a log file or a container's log gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Completes on SIGINT or SIGTERM. The handlers are set when this is called (inside the
/// runtime), not when the future is first polled.
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        match signals {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested");
    }
}
