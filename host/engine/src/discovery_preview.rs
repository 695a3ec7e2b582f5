//! `vigil discover --dry-run`: what discovery finds in the kubeconfig sources and
//! what `vigil serve` would do with it in the database, without writing anything.
//!
//! The plan is not a second implementation of the upsert rules: it is the store's
//! own upsert run in a transaction that is rolled back ([`Store::plan_discovered`]),
//! on a database opened without creating, migrating or re-configuring it
//! ([`Store::open_existing`]). A database file that does not exist is not created;
//! every context would then be inserted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vigil_decision::Timestamp;

use vigil_domain::discovery::{self, DiscoveryReport, Sources};
use vigil_domain::exec::{ExecPolicy, Probeability, judge};
use vigil_domain::reference::{self, FileBounds, Reference, Resolution};
use vigil_store::{
    DiscoveredClusterRow, ExistingDatabase, FieldChange, Store, StoreError, UpsertSummary,
    redact_url,
};

/// Why a preview could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The database could not be read.
    #[error("cannot preview against the database {url}")]
    Store {
        /// The database URL, password redacted.
        url: String,
        /// The cause.
        #[source]
        source: StoreError,
    },
    /// Whether the database file exists could not be told.
    #[error("cannot inspect the database file {path}")]
    Inaccessible {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database's schema is not this vigil's, so a plan on it would not be the
    /// plan `vigil serve` carries out (which migrates first, or refuses).
    #[error(
        "the database {url} has schema migrations {applied:?} but this vigil has {expected:?}: \
         `vigil serve` migrates (or refuses) it at start-up; a dry run never writes, so it \
         cannot preview against it"
    )]
    SchemaMismatch {
        /// The database URL, password redacted.
        url: String,
        /// Applied migration versions.
        applied: Vec<i64>,
        /// This vigil's migration versions.
        expected: Vec<i64>,
    },
    /// The discovery task panicked.
    #[error("discovery failed: {0}")]
    Discovery(String),
}

/// What the preview found, ready to print as a table or JSON.
#[derive(Debug, Clone, Serialize)]
pub struct DiscoveryPreview {
    /// Always `true`: nothing was written.
    pub dry_run: bool,
    /// The sources read.
    pub sources: PreviewSources,
    /// The database the plan was made against.
    pub database: PreviewDatabase,
    /// Every context found, in reading order (the first definition of a name).
    pub contexts: Vec<PreviewContext>,
    /// Context names defined by more than one source.
    pub clashes: Vec<PreviewClash>,
    /// Files and contexts that cannot be used, with the reason.
    pub malformed: Vec<PreviewProblem>,
    /// Counts by planned action.
    pub summary: PreviewSummary,
}

/// The sources a preview read.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewSources {
    /// Kubeconfig files, in reading order.
    pub files: Vec<String>,
    /// The kubeconfig directory, read after the files.
    pub dir: Option<String>,
}

/// The database a preview planned against.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewDatabase {
    /// `DATABASE_URL`, any password redacted.
    pub url: String,
    /// What was found there.
    pub state: DatabaseState,
    /// Always `false`.
    pub written: bool,
}

/// What a preview found at `DATABASE_URL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatabaseState {
    /// A vigil database: the plan is the upsert run against it and rolled back.
    Existing,
    /// The file does not exist (and was not created): every context would be inserted.
    Missing,
    /// The file exists but holds no table yet: every context would be inserted.
    Blank,
    /// An in-memory database, empty at every start: every context would be inserted.
    InMemory,
}

/// What `vigil serve` would do with one discovered context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlannedAction {
    /// A new cluster, inserted as UNKNOWN and probed at once.
    Insert,
    /// A known discovered cluster whose endpoint or reference changed.
    Update,
    /// A known discovered cluster, unchanged.
    Unchanged,
    /// A manually registered cluster has this name: left as it is.
    KeptManual,
    /// Deleted through the API: discovery does not add it again.
    Ignored,
}

impl PlannedAction {
    /// The action as a table shows it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Insert => "insert",
            Self::Update => "update",
            Self::Unchanged => "unchanged",
            Self::KeptManual => "kept (manual)",
            Self::Ignored => "ignored (deleted)",
        }
    }
}

/// One discovered context.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewContext {
    /// The context name: the cluster's name in vigil.
    pub name: String,
    /// The API server URL.
    pub endpoint: String,
    /// The file it was read from.
    pub source_file: String,
    /// The reference vigil stores, `PATH#CONTEXT` (a reference, never credentials).
    pub reference: String,
    /// Whether the engine can probe it with what the kubeconfig holds.
    pub probeable: bool,
    /// Why (or why not), in the words of the engine's log.
    pub probeability: String,
    /// What `vigil serve` would do with it.
    pub action: PlannedAction,
    /// For an update, the fields that would change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
}

/// A context name defined twice.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewClash {
    /// The context name.
    pub context: String,
    /// The file whose definition is used.
    pub kept_file: String,
    /// The file whose definition is ignored.
    pub ignored_file: String,
}

/// A file or context that cannot be used.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewProblem {
    /// The file.
    pub file: String,
    /// Why, never quoting the file.
    pub reason: String,
}

/// How many contexts each action concerns.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PreviewSummary {
    /// Contexts found.
    pub contexts: usize,
    /// To insert.
    pub insert: usize,
    /// To update.
    pub update: usize,
    /// Unchanged.
    pub unchanged: usize,
    /// Kept because a manual cluster has the name.
    pub kept_manual: usize,
    /// Ignored because deleted through the API.
    pub ignored: usize,
    /// Clashes.
    pub clashes: usize,
    /// Malformed files and contexts.
    pub malformed: usize,
}

/// Reads `sources` and plans their upsert against the database at `database_url`
/// (`database_path` is its file, `None` for an in-memory database), as of `now`.
/// Never writes, never creates the database.
///
/// A context whose user runs an `exec` command is judged by `exec` as the engine would:
/// probeable only if the command would run, else why not (the plugin's
/// `exec-credentials` grant is checked when it probes). The files a kubeconfig names are
/// judged as the engine judges them: under its own directory or `named_files`
/// (`VIGIL_KUBECONFIG_CREDENTIAL_DIRS`), else not probeable, saying how to allow them.
pub async fn preview(
    sources: &Sources,
    database_url: &str,
    database_path: Option<&Path>,
    exec: &ExecPolicy,
    named_files: &[PathBuf],
    now: Timestamp,
) -> Result<DiscoveryPreview, PreviewError> {
    let scan = {
        let sources = sources.clone();
        let exec = exec.clone();
        let bounds = FileBounds {
            named_files: named_files.into(),
            ..FileBounds::default()
        };
        tokio::task::spawn_blocking(move || {
            let report = discovery::discover(&sources);
            let path_var = std::env::var_os("PATH");
            let resolutions: Vec<Probeability> = report
                .clusters
                .iter()
                .map(|c| match Reference::parse(&c.reference) {
                    Ok(reference) => judge(
                        &reference::resolve_bounded(&reference, &bounds),
                        &exec,
                        path_var.as_deref(),
                    ),
                    Err(error) => judge(
                        &Resolution::NotProbeable {
                            class: vigil_decision::ReasonClass::ReferenceBroken,
                            message: error.to_string(),
                        },
                        &exec,
                        None,
                    ),
                })
                .collect();
            (report, resolutions)
        })
    };
    let (report, resolutions) = scan
        .await
        .map_err(|error| PreviewError::Discovery(error.to_string()))?;
    let rows: Vec<DiscoveredClusterRow> = report
        .clusters
        .iter()
        .map(|c| DiscoveredClusterRow {
            name: c.name.clone(),
            endpoint: c.endpoint.clone(),
            reference: c.reference.clone(),
        })
        .collect();

    // A PostgreSQL database names no file: it exists as far as the preview can tell, and
    // opening it says whether it does.
    let on_server = vigil_store::Backend::of_url(database_url)
        .is_ok_and(|backend| backend == vigil_store::Backend::Postgres);
    let (state, summary) = match database_path {
        None if !on_server => (DatabaseState::InMemory, all_inserted(&rows)),
        path => {
            let exists = match path {
                Some(path) => path
                    .try_exists()
                    .map_err(|source| PreviewError::Inaccessible {
                        path: path.to_path_buf(),
                        source,
                    })?,
                None => true,
            };
            let store_error = |source| PreviewError::Store {
                url: redact_url(database_url),
                source,
            };
            if exists {
                match Store::open_existing(database_url)
                    .await
                    .map_err(store_error)?
                {
                    ExistingDatabase::Ready(store) => {
                        let planned = store.plan_discovered(&rows, now).await;
                        store.close().await;
                        (DatabaseState::Existing, planned.map_err(store_error)?)
                    }
                    ExistingDatabase::Blank => (DatabaseState::Blank, all_inserted(&rows)),
                    ExistingDatabase::SchemaMismatch { applied, expected } => {
                        return Err(PreviewError::SchemaMismatch {
                            url: redact_url(database_url),
                            applied,
                            expected,
                        });
                    }
                }
            } else {
                (DatabaseState::Missing, all_inserted(&rows))
            }
        }
    };

    Ok(assemble(
        sources,
        PreviewDatabase {
            url: redact_url(database_url),
            state,
            written: false,
        },
        &report,
        &resolutions,
        summary,
    ))
}

/// The plan on an empty database: every context is new.
fn all_inserted(rows: &[DiscoveredClusterRow]) -> UpsertSummary {
    UpsertSummary {
        inserted: rows.iter().map(|r| r.name.clone()).collect(),
        ..UpsertSummary::default()
    }
}

fn assemble(
    sources: &Sources,
    database: PreviewDatabase,
    report: &DiscoveryReport,
    resolutions: &[Probeability],
    mut summary: UpsertSummary,
) -> DiscoveryPreview {
    let mut actions: HashMap<&str, PlannedAction> = HashMap::new();
    for (names, action) in [
        (&summary.inserted, PlannedAction::Insert),
        (&summary.updated, PlannedAction::Update),
        (&summary.unchanged, PlannedAction::Unchanged),
        (&summary.kept_manual, PlannedAction::KeptManual),
        (&summary.ignored, PlannedAction::Ignored),
    ] {
        for name in names {
            actions.insert(name, action);
        }
    }
    let counts = PreviewSummary {
        contexts: report.clusters.len(),
        insert: summary.inserted.len(),
        update: summary.updated.len(),
        unchanged: summary.unchanged.len(),
        kept_manual: summary.kept_manual.len(),
        ignored: summary.ignored.len(),
        clashes: report.clashes.len(),
        malformed: report.errors.len(),
    };
    let contexts = report
        .clusters
        .iter()
        .zip(resolutions)
        .map(|(cluster, resolution)| PreviewContext {
            action: actions
                .get(cluster.name.as_str())
                .copied()
                .unwrap_or(PlannedAction::Unchanged),
            changes: summary.changes.remove(&cluster.name).unwrap_or_default(),
            name: cluster.name.clone(),
            endpoint: cluster.endpoint.clone(),
            source_file: cluster.source_file.display().to_string(),
            reference: cluster.reference.clone(),
            probeable: resolution.probeable,
            probeability: resolution.described.clone(),
        })
        .collect();
    DiscoveryPreview {
        dry_run: true,
        sources: PreviewSources {
            files: sources
                .files()
                .iter()
                .map(|f| f.path.display().to_string())
                .collect(),
            dir: sources.dir().map(|d| d.display().to_string()),
        },
        database,
        contexts,
        clashes: report
            .clashes
            .iter()
            .map(|c| PreviewClash {
                context: c.context.clone(),
                kept_file: c.kept_file.display().to_string(),
                ignored_file: c.ignored_file.display().to_string(),
            })
            .collect(),
        malformed: report
            .errors
            .iter()
            .map(|e| PreviewProblem {
                file: e.file.display().to_string(),
                reason: e.reason.to_string(),
            })
            .collect(),
        summary: counts,
    }
}

impl DiscoveryPreview {
    /// The preview as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Plain strings, numbers and booleans: serialisation cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
