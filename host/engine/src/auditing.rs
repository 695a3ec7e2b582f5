//! The engine's drain-readiness audits: every ONLINE cluster is audited on
//! its own schedule (`CLUSTER_AUDIT_INTERVAL`), by an audit plugin behind [`Auditor`];
//! the store keeps the latest findings and sets `drain-blocked` while a blocking one
//! exists. An audit never changes a cluster's status, and one that could not read what
//! it needed keeps the previous findings and condition.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::worker::resolve_target;
use vigil_domain::probe::{ProbeTarget, error_chain, wall_clock};
use vigil_store::{AuditResult, ClusterRecord, Store};

/// A way to audit a cluster.
pub trait Auditor: Send + Sync + 'static {
    /// Audits one cluster once, within `target.timeout`.
    fn audit(&self, target: &ProbeTarget) -> impl Future<Output = AuditResult> + Send;

    /// Where the files of file references may really lie, as
    /// [`crate::worker::Prober::file_bounds`].
    fn file_bounds(&self) -> vigil_domain::reference::FileBounds {
        vigil_domain::reference::FileBounds::default()
    }
}

/// How audits are scheduled.
#[derive(Debug, Clone, Copy)]
pub struct AuditSettings {
    /// Between two audits of a cluster (`CLUSTER_AUDIT_INTERVAL`).
    pub interval: Duration,
    /// How long one audit may take (`CLUSTER_AUDIT_TIMEOUT`).
    pub timeout: Duration,
    /// Audits at once.
    pub concurrency: u32,
    /// How often the schedule is looked at.
    pub tick: Duration,
}

impl AuditSettings {
    /// The settings for `interval` and `timeout`, two audits at once, looked at every
    /// second.
    pub fn new(interval: Duration, timeout: Duration) -> Self {
        Self {
            interval,
            timeout,
            concurrency: 2,
            tick: Duration::from_secs(1),
        }
    }
}

/// The shortest lease on the audits among replicas: a holder that stops renewing it is
/// replaced after it.
const AUDIT_LEASE_MIN: Duration = Duration::from_secs(30);

/// Audits the due clusters until `shutdown` completes. An audit in flight at shutdown
/// is dropped: nothing of it was written.
pub async fn audit_loop<A: Auditor>(
    store: Store,
    auditor: Arc<A>,
    settings: AuditSettings,
    owner: crate::sharing::Owner,
    shutdown: impl Future<Output = ()>,
) {
    let run = async {
        loop {
            // Among replicas, the holder of the `audits` lease audits (kept while it
            // lives: renewed at every tick).
            if !owner
                .holds(&store, "audits", settings.tick.max(AUDIT_LEASE_MIN))
                .await
            {
                tokio::time::sleep(settings.tick).await;
                continue;
            }
            let now = wall_clock();
            match store.due_audits(now, settings.concurrency.max(1)).await {
                Ok(due) => {
                    let mut audits = JoinSet::new();
                    for cluster in due {
                        let store = store.clone();
                        let auditor = Arc::clone(&auditor);
                        let span = info_span!("audit", cluster = %cluster.name);
                        audits.spawn(audit_one(store, auditor, cluster, settings).instrument(span));
                    }
                    while audits.join_next().await.is_some() {}
                }
                Err(error) => {
                    warn!(error = %error_chain(&error), "cannot read the clusters due for an audit");
                }
            }
            tokio::time::sleep(settings.tick).await;
        }
    };
    tokio::select! {
        () = run => {}
        () = shutdown => {}
    }
}

/// Audits `cluster` once and applies the result.
async fn audit_one<A: Auditor>(
    store: Store,
    auditor: Arc<A>,
    cluster: ClusterRecord,
    settings: AuditSettings,
) {
    let result = audit_cluster(auditor.as_ref(), &cluster, settings.timeout).await;
    let now = wall_clock();
    let next = now.plus_millis(i64::try_from(settings.interval.as_millis()).unwrap_or(i64::MAX));
    match store.apply_audit(cluster.id, &result, now, next).await {
        Ok(Some(applied)) => match (&result, applied.drain_blocked_changed) {
            (AuditResult::Failed { kind, message }, _) => {
                warn!(
                    kind = kind.as_deref().unwrap_or("-"),
                    "audit failed; the previous findings are kept: {message}"
                );
            }
            (_, Some(true)) => {
                info!(
                    blocking = applied.blocking,
                    "drain-blocked: a blocking finding exists"
                );
            }
            (_, Some(false)) => info!("drain-blocked cleared: no blocking finding remains"),
            (AuditResult::Report { findings, .. }, None) => {
                debug!(
                    findings = findings.len(),
                    blocking = applied.blocking,
                    "audit done"
                );
            }
        },
        Ok(None) => debug!("cluster gone before its audit was applied"),
        Err(error) => warn!(error = %error_chain(&error), "audit not applied; rolled back"),
    }
}

/// One audit of `cluster` under `timeout`, the reference resolved as for a probe.
pub async fn audit_cluster<A: Auditor>(
    auditor: &A,
    cluster: &ClusterRecord,
    timeout: Duration,
) -> AuditResult {
    let mut target = match resolve_target(cluster, timeout, auditor.file_bounds()).await {
        Ok(target) => target,
        Err(outcome) => {
            return AuditResult::Failed {
                kind: None,
                message: outcome
                    .message()
                    .unwrap_or("the cluster cannot be audited")
                    .to_owned(),
            };
        }
    };
    // The cluster's explicit plugin is its probe plugin: audits are routed among the
    // audit plugins by their `accepts`.
    target.plugin = None;
    match tokio::time::timeout(timeout + Duration::from_secs(1), auditor.audit(&target)).await {
        Ok(result) => result,
        Err(_) => AuditResult::Failed {
            kind: None,
            message: format!(
                "the audit did not return within its {}s timeout; abandoned",
                timeout.as_secs()
            ),
        },
    }
}
