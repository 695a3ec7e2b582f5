//! Drain-readiness audits: the latest findings of each cluster, the
//! `drain-blocked` condition they imply, and the audit schedule. An audit never changes
//! a cluster's status; one that could not read what it needed keeps the previous
//! findings and condition.

use serde::{Deserialize, Serialize};
use sqlx::FromRow;
use vigil_decision::{ClusterId, ConditionType, Timestamp, set_drain_blocked};

use super::{
    CLUSTER_COLUMNS, ClusterRecord, ClusterRow, ProbedBy, Store, StoreError, cluster_in_tx, commit,
    event_parts, insert_event, not_found, query_error,
};

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// It blocks node drains now: sets `drain-blocked`.
    Blocking,
    /// It will likely cause trouble.
    Warning,
    /// Worth knowing.
    Info,
}

/// A Kubernetes object named by a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Its kind, e.g. `PodDisruptionBudget`.
    pub kind: String,
    /// Its namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// One thing an audit found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// A stable code, e.g. `pdb-zero-disruptions`.
    pub code: String,
    /// How much it matters.
    pub severity: Severity,
    /// The objects involved.
    pub objects: Vec<ObjectRef>,
    /// One line saying what is wrong.
    pub message: String,
    /// One line saying how to fix it.
    pub fix: String,
}

/// What one audit of a cluster gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditResult {
    /// Everything needed was read: these are the cluster's findings now.
    Report {
        /// What it found.
        findings: Vec<Finding>,
        /// The kinds it read.
        kinds_read: Vec<String>,
        /// The audit plugin generation that ran it.
        by: Option<ProbedBy>,
    },
    /// Something needed could not be read (403, a timeout, a plugin fault, no audit
    /// plugin): the previous findings and condition stay.
    Failed {
        /// The kind it could not read, when that is the cause.
        kind: Option<String>,
        /// Why (never secret material).
        message: String,
    },
}

/// Why the last audit of a cluster failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditFailure {
    /// The kind it could not read, when that is the cause.
    pub kind: Option<String>,
    /// Why.
    pub message: String,
    /// When.
    pub at: Timestamp,
}

/// A cluster's latest audit as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// When the findings were produced; `None` before the first audit that succeeded.
    pub audited_at: Option<Timestamp>,
    /// The audit plugin generation that produced them.
    pub by: Option<ProbedBy>,
    /// The kinds it read.
    pub kinds_read: Vec<String>,
    /// The findings.
    pub findings: Vec<Finding>,
    /// The last audit's failure, if the last audit failed.
    pub failure: Option<AuditFailure>,
    /// When the next audit is due; `None` when the cluster was never audited.
    pub next_audit: Option<Timestamp>,
}

/// What applying an audit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedAudit {
    /// The cluster's name.
    pub cluster: String,
    /// Blocking findings in the report (0 for a failed audit).
    pub blocking: usize,
    /// Whether `drain-blocked` was set (`Some(true)`) or cleared (`Some(false)`) now.
    pub drain_blocked_changed: Option<bool>,
}

#[derive(FromRow)]
struct AuditRow {
    audited_at: Option<i64>,
    audit_plugin: Option<String>,
    audit_plugin_generation: Option<i64>,
    kinds_read: String,
    findings: String,
    error_kind: Option<String>,
    error_message: Option<String>,
    error_at: Option<i64>,
    next_audit: i64,
}

impl Store {
    /// The ONLINE clusters whose audit is due at `now` (never audited, or past their
    /// next audit), the longest overdue first, at most `limit`.
    pub async fn due_audits(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ClusterRecord>, StoreError> {
        let sql = format!(
            "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE ignored = 0 AND status = 'ONLINE' \
             AND id NOT IN (SELECT cluster_id FROM audits WHERE next_audit > $1) \
             ORDER BY (SELECT next_audit FROM audits WHERE cluster_id = clusters.id) IS NOT NULL, \
             (SELECT next_audit FROM audits WHERE cluster_id = clusters.id), id LIMIT $2"
        );
        let rows: Vec<ClusterRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(now.0)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("listing the clusters due for an audit"))?;
        rows.into_iter().map(ClusterRecord::try_from).collect()
    }

    /// Applies one audit of `cluster` in one transaction: a report replaces the
    /// findings and sets or clears `drain-blocked` (with its history event); a failure
    /// is recorded beside the previous findings, which stay, with the condition. The
    /// status is never touched. `None` when the cluster is gone.
    pub async fn apply_audit(
        &self,
        cluster: ClusterId,
        result: &AuditResult,
        now: Timestamp,
        next_audit: Timestamp,
    ) -> Result<Option<AppliedAudit>, StoreError> {
        let mut tx = self.begin_write().await?;
        let Some(record) = cluster_in_tx(&mut tx, cluster).await? else {
            return Ok(None);
        };
        if record.ignored {
            return Ok(None);
        }
        let mut applied = AppliedAudit {
            cluster: record.name.clone(),
            blocking: 0,
            drain_blocked_changed: None,
        };
        match result {
            AuditResult::Report {
                findings,
                kinds_read,
                by,
            } => {
                let findings_json =
                    serde_json::to_string(findings).map_err(|e| corrupt("findings", &e))?;
                let kinds_json =
                    serde_json::to_string(kinds_read).map_err(|e| corrupt("kinds read", &e))?;
                sqlx::query(
                    "INSERT INTO audits (cluster_id, audited_at, audit_plugin, \
                     audit_plugin_generation, kinds_read, findings, error_kind, error_message, \
                     error_at, next_audit) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL, NULL, $7) \
                     ON CONFLICT (cluster_id) DO UPDATE SET audited_at = excluded.audited_at, \
                     audit_plugin = excluded.audit_plugin, \
                     audit_plugin_generation = excluded.audit_plugin_generation, \
                     kinds_read = excluded.kinds_read, findings = excluded.findings, \
                     error_kind = NULL, error_message = NULL, error_at = NULL, \
                     next_audit = excluded.next_audit",
                )
                .bind(cluster.0)
                .bind(now.0)
                .bind(by.as_ref().map(|b| b.plugin.as_str()))
                .bind(
                    by.as_ref()
                        .map(|b| i64::try_from(b.generation).unwrap_or(i64::MAX)),
                )
                .bind(kinds_json)
                .bind(findings_json)
                .bind(next_audit.0)
                .execute(&mut *tx)
                .await
                .map_err(query_error("recording an audit"))?;

                let blocking: Vec<&Finding> = findings
                    .iter()
                    .filter(|f| f.severity == Severity::Blocking)
                    .collect();
                applied.blocking = blocking.len();
                let message = blocking_message(&blocking);
                let was = record.health.has_condition(ConditionType::DrainBlocked);
                let decision = set_drain_blocked(&record.health, message.as_deref(), now);
                let is = decision.health.has_condition(ConditionType::DrainBlocked);
                if was != is {
                    applied.drain_blocked_changed = Some(is);
                }
                if decision.health.conditions != record.health.conditions {
                    let conditions = serde_json::to_string(&decision.health.conditions)
                        .map_err(|e| corrupt("conditions", &e))?;
                    sqlx::query(
                        "UPDATE clusters SET conditions = $1, updated_at = $2 WHERE id = $3",
                    )
                    .bind(conditions)
                    .bind(now.0)
                    .bind(cluster.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error("recording the drain-blocked condition"))?;
                }
                for event in &decision.events {
                    let (kind, detail) = event_parts(event);
                    insert_event(
                        &mut tx,
                        now,
                        Some((cluster.0, &record.name)),
                        None,
                        &kind,
                        &detail,
                        None,
                    )
                    .await?;
                }
            }
            AuditResult::Failed { kind, message } => {
                sqlx::query(
                    "INSERT INTO audits (cluster_id, error_kind, error_message, error_at, \
                     next_audit) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (cluster_id) DO UPDATE SET error_kind = excluded.error_kind, \
                     error_message = excluded.error_message, error_at = excluded.error_at, \
                     next_audit = excluded.next_audit",
                )
                .bind(cluster.0)
                .bind(kind.as_deref())
                .bind(message.as_str())
                .bind(now.0)
                .bind(next_audit.0)
                .execute(&mut *tx)
                .await
                .map_err(query_error("recording a failed audit"))?;
            }
        }
        commit(tx, "committing an audit").await?;
        Ok(Some(applied))
    }

    /// The latest audit of the cluster `name` (a record with no findings and no date
    /// when it was never audited).
    pub async fn audit(&self, name: &str) -> Result<AuditRecord, StoreError> {
        let id: i64 = sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1 AND ignored = 0")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("reading a cluster"))?
            .ok_or_else(|| not_found("cluster", name))?;
        let row: Option<AuditRow> = sqlx::query_as(
            "SELECT audited_at, audit_plugin, audit_plugin_generation, kinds_read, findings, \
             error_kind, error_message, error_at, next_audit FROM audits WHERE cluster_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("reading an audit"))?;
        let Some(row) = row else {
            return Ok(AuditRecord {
                audited_at: None,
                by: None,
                kinds_read: Vec::new(),
                findings: Vec::new(),
                failure: None,
                next_audit: None,
            });
        };
        Ok(AuditRecord {
            audited_at: row.audited_at.map(Timestamp),
            by: row.audit_plugin.map(|plugin| ProbedBy {
                plugin,
                generation: row
                    .audit_plugin_generation
                    .and_then(|g| u64::try_from(g).ok())
                    .unwrap_or(0),
            }),
            kinds_read: serde_json::from_str(&row.kinds_read)
                .map_err(|e| corrupt("kinds read", &e))?,
            findings: serde_json::from_str(&row.findings).map_err(|e| corrupt("findings", &e))?,
            failure: row.error_at.map(|at| AuditFailure {
                kind: row.error_kind,
                message: row.error_message.unwrap_or_default(),
                at: Timestamp(at),
            }),
            next_audit: Some(Timestamp(row.next_audit)),
        })
    }
}

/// The condition's message: how many blocking findings, and the first of them.
fn blocking_message(blocking: &[&Finding]) -> Option<String> {
    let first = blocking.first()?;
    let more = match blocking.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!("{}: {}{more}", first.code, first.message))
}

fn corrupt(what: &'static str, error: &dyn std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what,
        reason: error.to_string(),
    }
}
