//! Discovery's results written to the store: every kubeconfig source read, what it
//! defines upserted, and why each cluster is or is not probeable logged.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::{info, warn};
use vigil_domain::discovery::{self, Sources};
use vigil_domain::exec::{ExecPolicy, judge};
use vigil_domain::probe::wall_clock;
use vigil_domain::reference::{self, FileBounds, Reference};
use vigil_store::{DiscoveredClusterRow, Store, StoreError, UpsertSummary};

use crate::worker::WorkerHandle;

/// Reads every kubeconfig source, upserts what it found, and logs what it
/// found and why each cluster is or is not probeable.
///
/// A cluster whose user runs an `exec` command is judged by `exec` (the operator's policy),
/// the files a kubeconfig names by where they lie (its own directory or `named_files`,
/// `VIGIL_KUBECONFIG_CREDENTIAL_DIRS`), as `vigil discover --dry-run` judges them.
pub async fn run_discovery(
    store: &Store,
    sources: &Sources,
    exec: &ExecPolicy,
    named_files: &[PathBuf],
    worker: &WorkerHandle,
) -> Result<UpsertSummary, StoreError> {
    let scan = {
        let sources = sources.clone();
        tokio::task::spawn_blocking(move || discovery::discover(&sources))
    };
    let report = match scan.await {
        Ok(report) => report,
        Err(error) => {
            warn!(%error, "discovery task failed");
            return Ok(UpsertSummary::default());
        }
    };
    for error in &report.errors {
        warn!(file = %error.file.display(), reason = %error.reason, "kubeconfig source skipped");
    }
    for clash in &report.clashes {
        warn!(context = %clash.context, kept = %clash.kept_file.display(), ignored = %clash.ignored_file.display(), "context defined twice; the first file wins");
    }
    let rows: Vec<DiscoveredClusterRow> = report
        .clusters
        .iter()
        .map(|c| DiscoveredClusterRow {
            name: c.name.clone(),
            endpoint: c.endpoint.clone(),
            reference: c.reference.clone(),
        })
        .collect();
    let summary = store.upsert_discovered(&rows, wall_clock()).await?;
    info!(
        found = report.clusters.len(),
        inserted = summary.inserted.len(),
        updated = summary.updated.len(),
        unchanged = summary.unchanged.len(),
        kept_manual = summary.kept_manual.len(),
        ignored = summary.ignored.len(),
        errors = report.errors.len(),
        clashes = report.clashes.len(),
        "discovery done"
    );

    let clusters = Arc::new(report.clusters);
    let described = {
        let clusters = Arc::clone(&clusters);
        let exec = exec.clone();
        let bounds = FileBounds {
            named_files: Arc::from(named_files),
            ..FileBounds::default()
        };
        tokio::task::spawn_blocking(move || {
            let path_var = std::env::var_os("PATH");
            clusters
                .iter()
                .map(|c| match Reference::parse(&c.reference) {
                    Ok(reference) => {
                        let resolution = reference::resolve_bounded(&reference, &bounds);
                        judge(&resolution, &exec, path_var.as_deref()).described
                    }
                    Err(error) => format!("not probeable (reference-broken): {error}"),
                })
                .collect::<Vec<_>>()
        })
    };
    if let Ok(described) = described.await {
        for (cluster, why) in clusters.iter().zip(described) {
            info!(cluster = %cluster.name, endpoint = %cluster.endpoint, source = %cluster.source_file.display(), "{why}");
        }
    }
    if !summary.inserted.is_empty() || !summary.updated.is_empty() {
        worker.wake();
    }
    Ok(summary)
}
