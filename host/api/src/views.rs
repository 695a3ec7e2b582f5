//! The API's JSON shapes. The decision crate's types stay free of HTTP concerns; these
//! mirror them with schemas and convert.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use vigil_decision::{Condition, HealthPolicy, PolicyOverrides, ProbedBy, Timestamp};
use vigil_domain::parameter::{HIDDEN_REFERENCE, is_credential_reference};

use super::problem::Problem;
use vigil_store::{AppRecord, ClusterRecord, DeploymentRecord, EventRecord};

/// A time as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(at: Timestamp) -> String {
    let millis = u64::try_from(at.0).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
}

/// A condition on a cluster.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConditionView {
    /// `reference-broken`, `not-probeable`, `credentials-rejected`, `probe-stale`,
    /// `probing-disabled` or `drain-blocked`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short machine-readable reason, usually a reason class.
    pub reason: String,
    /// A human-readable explanation.
    pub message: String,
    /// Since when (RFC 3339).
    pub since: String,
}

impl From<&Condition> for ConditionView {
    fn from(condition: &Condition) -> Self {
        Self {
            kind: condition.kind.as_str().to_owned(),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
            since: rfc3339(condition.since),
        }
    }
}

/// Per-cluster overrides of the global policy; an absent field keeps the default.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    /// Seconds between two probes (1–86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub interval_seconds: Option<u32>,
    /// Seconds a probe may take (1–3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3600)]
    pub timeout_seconds: Option<u32>,
    /// Consecutive counted failures that confirm an outage (1–1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub failure_threshold: Option<u32>,
    /// Consecutive healthy probes that end an outage (1–1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub success_threshold: Option<u32>,
    /// Seconds after registration during which failures are not counted (0–86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 86400)]
    pub start_period_seconds: Option<u32>,
    /// Whether 401/403 count as failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_auth_failures: Option<bool>,
    /// Whether probing is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

impl PolicyBody {
    /// The overrides, or the name and reason of the first value out of range.
    pub fn overrides(self, prefix: &str) -> Result<PolicyOverrides, (String, String)> {
        let check = |name: &str, value: Option<u32>, min: u32, max: u32| match value {
            Some(v) if v < min || v > max => Err((
                format!("{prefix}.{name}"),
                format!("{name} must be between {min} and {max}, not {v}"),
            )),
            _ => Ok(()),
        };
        check("interval_seconds", self.interval_seconds, 1, 86_400)?;
        check("timeout_seconds", self.timeout_seconds, 1, 3_600)?;
        check("failure_threshold", self.failure_threshold, 1, 1_000)?;
        check("success_threshold", self.success_threshold, 1, 1_000)?;
        check("start_period_seconds", self.start_period_seconds, 0, 86_400)?;
        Ok(PolicyOverrides {
            interval_seconds: self.interval_seconds,
            timeout_seconds: self.timeout_seconds,
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            start_period_seconds: self.start_period_seconds,
            count_auth_failures: self.count_auth_failures,
            disabled: self.disabled,
        })
    }
}

impl From<PolicyOverrides> for PolicyBody {
    fn from(o: PolicyOverrides) -> Self {
        Self {
            interval_seconds: o.interval_seconds,
            timeout_seconds: o.timeout_seconds,
            failure_threshold: o.failure_threshold,
            success_threshold: o.success_threshold,
            start_period_seconds: o.start_period_seconds,
            count_auth_failures: o.count_auth_failures,
            disabled: o.disabled,
        }
    }
}

/// The policy in force: the global defaults with the cluster's overrides.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct PolicyView {
    /// Seconds between two probes.
    pub interval_seconds: u32,
    /// Seconds a probe may take.
    pub timeout_seconds: u32,
    /// Consecutive counted failures that confirm an outage.
    pub failure_threshold: u32,
    /// Consecutive healthy probes that end an outage.
    pub success_threshold: u32,
    /// Seconds after registration during which failures are not counted.
    pub start_period_seconds: u32,
    /// Whether 401/403 count as failures.
    pub count_auth_failures: bool,
    /// Whether probing is disabled.
    pub disabled: bool,
}

impl From<HealthPolicy> for PolicyView {
    fn from(p: HealthPolicy) -> Self {
        Self {
            interval_seconds: p.interval_seconds,
            timeout_seconds: p.timeout_seconds,
            failure_threshold: p.failure_threshold,
            success_threshold: p.success_threshold,
            start_period_seconds: p.start_period_seconds,
            count_auth_failures: p.count_auth_failures,
            disabled: p.disabled,
        }
    }
}

/// The probe counters of a cluster.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct CountersView {
    /// Consecutive counted failures since the last healthy probe.
    pub consecutive_failures: u32,
    /// Consecutive healthy probes while OFFLINE.
    pub consecutive_successes: u32,
    /// Consecutive inconclusive probes.
    pub consecutive_inconclusive: u32,
}

/// A cluster.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterView {
    /// Its unique name.
    pub name: String,
    /// The API server address.
    pub endpoint: String,
    /// The reference to its credentials: a path, `secret://…` or `http(s)://…` — never
    /// credential material.
    pub reference: String,
    /// `discovered` or `manual`.
    pub source: String,
    /// `ONLINE`, `OFFLINE` or `UNKNOWN`.
    pub status: String,
    /// Current conditions.
    pub conditions: Vec<ConditionView>,
    /// The label of the last outcome (`healthy`, `unhealthy`, `credentials-rejected`,
    /// `not-probeable`, `inconclusive`).
    pub last_outcome: Option<String>,
    /// The explanation of the last non-healthy outcome.
    pub reason: Option<String>,
    /// Its reason class (a stable string, as in the metrics and the plugin contract).
    pub reason_class: Option<String>,
    /// Probe counters.
    pub counters: CountersView,
    /// When it was last probed (RFC 3339).
    pub last_probe: Option<String>,
    /// When it last answered healthy (RFC 3339).
    pub last_success: Option<String>,
    /// When it is next due (RFC 3339).
    pub next_due: String,
    /// The plugin chosen for it; absent when routed by priority.
    pub plugin: Option<String>,
    /// The plugin and generation that produced the last outcome; absent when no plugin
    /// answered it (no plugin loaded, an unusable reference).
    pub last_probed_by: Option<ProbedByView>,
    /// The policy in force.
    pub policy: PolicyView,
    /// Its own overrides.
    pub policy_overrides: PolicyBody,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Plugin parameters; credential references are shown as `(credential reference)`.
    pub parameters: BTreeMap<String, String>,
}

impl ClusterView {
    /// The view of `record` under the global `defaults` (it takes the record: a page of
    /// 500 moves its strings instead of copying them).
    pub fn new(record: ClusterRecord, defaults: HealthPolicy) -> Self {
        let ClusterRecord {
            name,
            endpoint,
            kubeconfig_secret_ref,
            source,
            plugin,
            parameters,
            labels,
            policy,
            health,
            next_due,
            last_outcome,
            last_reason,
            last_reason_class,
            last_probed_by,
            ..
        } = record;
        Self {
            name,
            endpoint,
            reference: kubeconfig_secret_ref,
            source: source.as_str().to_owned(),
            status: health.status.as_str().to_owned(),
            conditions: health.conditions.iter().map(ConditionView::from).collect(),
            last_outcome,
            reason: last_reason,
            reason_class: last_reason_class,
            last_probed_by: last_probed_by.as_ref().map(ProbedByView::from),
            counters: CountersView {
                consecutive_failures: health.consecutive_failures,
                consecutive_successes: health.consecutive_successes,
                consecutive_inconclusive: health.consecutive_inconclusive,
            },
            last_probe: health.last_probe.map(rfc3339),
            last_success: health.last_success.map(rfc3339),
            next_due: rfc3339(next_due),
            plugin,
            policy: defaults.with_overrides(&policy).into(),
            policy_overrides: policy.into(),
            labels,
            parameters: parameters
                .into_iter()
                .map(|(k, v)| {
                    let shown = if is_credential_reference(&v) {
                        HIDDEN_REFERENCE.to_owned()
                    } else {
                        v
                    };
                    (k, shown)
                })
                .collect(),
        }
    }
}

/// A page of clusters.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterPage {
    /// The clusters, by name.
    pub items: Vec<ClusterView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<String>,
}

/// A [`ClusterPage`] as JSON, assembled from the clusters' views already rendered (see
/// `view_cache`): the same bytes `serde_json` writes for the page, in one buffer sized up
/// front.
#[derive(Debug)]
pub struct RenderedPage(Vec<u8>);

impl RenderedPage {
    /// The page of `items` (each a `ClusterView` as JSON), with `next` to page on.
    pub fn new(items: &[bytes::Bytes], next: Option<&str>) -> Result<Self, Problem> {
        let size = items.iter().map(|item| item.len() + 1).sum::<usize>();
        let mut body = Vec::with_capacity(size + 32 + next.map_or(4, str::len));
        body.extend_from_slice(b"{\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(b"],\"next\":");
        serde_json::to_writer(&mut body, &next)
            .map_err(|error| Problem::internal("writing a page of clusters", &error))?;
        body.push(b'}');
        Ok(Self(body))
    }
}

impl axum::response::IntoResponse for RenderedPage {
    fn into_response(self) -> axum::response::Response {
        (
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )],
            self.0,
        )
            .into_response()
    }
}

/// One entry of the history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventView {
    /// Its id, increasing.
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Its kind (`status-changed`, `apps-degraded`, `apps-restored`, `cluster-updated`,
    /// `plugin-promoted`, `plugin-rolled-back`, …).
    pub kind: String,
    /// The cluster concerned.
    pub cluster: Option<String>,
    /// The outage concerned.
    pub outage: Option<i64>,
    /// Its details.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// Who caused it: the API token's name, for mutations.
    pub actor: Option<String>,
}

impl From<&EventRecord> for EventView {
    fn from(event: &EventRecord) -> Self {
        Self {
            id: event.id,
            at: rfc3339(Timestamp(event.at)),
            kind: event.kind.clone(),
            cluster: event.cluster_name.clone(),
            outage: event.outage_id,
            detail: serde_json::from_str(&event.detail).unwrap_or(serde_json::Value::Null),
            actor: event.actor.clone(),
        }
    }
}

/// A page of history, newest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventPage {
    /// The events.
    pub items: Vec<EventView>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    pub next: Option<i64>,
}

/// An app.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AppView {
    /// Its unique name.
    pub name: String,
    /// The cluster it is deployed on.
    pub cluster: String,
    /// `PENDING`, `DEPLOYED`, `DEGRADED` or `FAILED`.
    pub status: String,
    /// The outage that degraded it, while the marker is set (recovery restores it).
    pub degraded_by_outage: Option<i64>,
}

impl From<&AppRecord> for AppView {
    fn from(app: &AppRecord) -> Self {
        Self {
            name: app.name.clone(),
            cluster: app.cluster.clone(),
            status: app.status.as_str().to_owned(),
            degraded_by_outage: app.degraded_by.map(|o| o.0),
        }
    }
}

/// A recorded deployment.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeploymentView {
    /// Its id, increasing.
    pub id: i64,
    /// The app deployed.
    pub app: String,
    /// The cluster it was deployed on: the app's cluster at the time.
    pub cluster: String,
    /// The version deployed, if the platform gave one.
    pub version: Option<String>,
    /// Who recorded it: the API token's name.
    pub actor: Option<String>,
    /// When it was recorded (RFC 3339).
    pub at: String,
}

impl From<&DeploymentRecord> for DeploymentView {
    fn from(deployment: &DeploymentRecord) -> Self {
        Self {
            id: deployment.id,
            app: deployment.app.clone(),
            cluster: deployment.cluster.clone(),
            version: deployment.version.clone(),
            actor: deployment.actor.clone(),
            at: rfc3339(Timestamp(deployment.at)),
        }
    }
}

/// A page of an app's deployments, newest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeploymentPage {
    /// The deployments.
    pub items: Vec<DeploymentView>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    pub next: Option<i64>,
}

/// A loaded plugin.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PluginView {
    /// Its name in vigil (the file name without `.wasm`).
    pub name: String,
    /// `active`, `probation` (a replacement judged on its first probes, the previous
    /// generation kept to roll back to), `candidate` (being checked, never served),
    /// `failed` (no generation serves: see `last_failure`) or `retired` (its file was
    /// removed).
    pub state: String,
    /// The generation that serves (or served until retired); counted per plugin from 1.
    pub generation: Option<u64>,
    /// `probe` or `audit`: the world the plugin targets.
    pub world: Option<String>,
    /// The name it gives itself.
    pub self_name: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// Where the generation that serves (or served) was loaded from: `embedded` (built
    /// into vigil) or the path of its file in the plugin directory, which overrides an
    /// embedded plugin of the same name.
    pub source: Option<String>,
    /// The contract it targets, e.g. `vigil:plugin@0.1.0`.
    pub package: String,
    /// SHA-256 of the file, hex.
    pub hash: Option<String>,
    /// The reference schemes it handles.
    pub schemes: Vec<String>,
    /// Its routing priority.
    pub priority: i32,
    /// The capabilities granted in its `NAME.toml`: `log`, `credentials`, `http`.
    pub grants: Vec<String>,
    /// The namespaces whose Secrets it may read (`secret-namespaces`).
    pub secret_namespaces: Vec<String>,
    /// The hosts it may reach beyond each cluster's own (`allowed-hosts`); a request to one
    /// never counts as talking to the cluster.
    pub allowed_hosts: Vec<String>,
    /// Where its credential parameters may be sent (`credential-hosts`): for a credential
    /// file, directory, Secret or namespace, the hosts its value may go to.
    pub credential_hosts: BTreeMap<String, Vec<String>>,
    /// The cap on its instance's memories and tables, in MiB (`memory-mib`); 0 when no
    /// generation is loaded.
    pub memory_mib: u32,
    /// Probe calls made by this generation.
    pub probes: u64,
    /// Probe calls of this generation that ended inconclusive through its fault.
    pub faults: u64,
    /// `accepts` calls made to this generation to route clusters: once per cluster, and
    /// again when what it is shown of a cluster (name, endpoint, reference, labels,
    /// parameters) changes, after a call that gave no answer, after a rollback, and for a
    /// cluster not routed for a day.
    pub accepts: u64,
    /// During a probation: the generation that serves again if it fails.
    pub previous_generation: Option<u64>,
    /// A candidate generation being checked now.
    pub candidate_generation: Option<u64>,
    /// During a probation: its progress.
    pub probation: Option<ProbationView>,
    /// The last candidate or generation of this plugin that failed.
    pub last_failure: Option<PluginFailureView>,
}

/// A probation's progress.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProbationView {
    /// Probes judged so far.
    pub judged: u32,
    /// Of which inconclusive.
    pub inconclusive: u32,
    /// How many probes the probation lasts (`VIGIL_PLUGIN_PROBATION_PROBES`).
    pub probes: u32,
    /// How many of them may be inconclusive before the previous generation serves again.
    pub max_inconclusive: u32,
}

/// Why a generation of a plugin was discarded.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PluginFailureView {
    /// The plugin file.
    pub file: String,
    /// The generation it was given.
    pub generation: u64,
    /// `read`, `manifest`, `compile`, `world`, `link`, `limits`, `info` or `probation`.
    pub stage: String,
    /// Why.
    pub message: String,
    /// When (RFC 3339).
    pub at: String,
}

/// The plugin generation that produced an outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProbedByView {
    /// The plugin's name.
    pub plugin: String,
    /// Its generation.
    pub generation: u64,
}

impl From<&ProbedBy> for ProbedByView {
    fn from(by: &ProbedBy) -> Self {
        Self {
            plugin: by.plugin.clone(),
            generation: by.generation,
        }
    }
}

/// What a reload of the plugin directory did.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ReloadView {
    /// Plugins whose new generation now serves: `NAME` and generation.
    pub promoted: Vec<ProbedByView>,
    /// Candidates refused; what served before keeps serving.
    pub failed: Vec<PluginFailureView>,
    /// Plugins whose file was removed: `NAME` and the generation that retired.
    pub retired: Vec<ProbedByView>,
    /// Plugins whose files had not changed.
    pub unchanged: Vec<String>,
}

/// A cluster's latest drain-readiness audit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditView {
    /// When the findings were produced (RFC 3339); absent before the first audit that
    /// could read everything.
    pub audited_at: Option<String>,
    /// The audit plugin and generation that produced them.
    pub audited_by: Option<ProbedByView>,
    /// The kinds it read, e.g. `poddisruptionbudgets`, `pods`.
    pub kinds_read: Vec<String>,
    /// How many findings are `blocking` (each sets `drain-blocked`).
    pub blocking: usize,
    /// What it found, blocking first.
    pub findings: Vec<FindingView>,
    /// The last audit's failure, when the last audit could not read what it needed.
    pub last_failure: Option<AuditFailureView>,
    /// When the next audit is due (RFC 3339).
    pub next_audit: Option<String>,
}

/// One finding of an audit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FindingView {
    /// A stable code, e.g. `pdb-zero-disruptions`.
    pub code: String,
    /// `blocking`, `warning` or `info`.
    pub severity: String,
    /// The objects involved.
    pub objects: Vec<ObjectRefView>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

/// A Kubernetes object named by a finding.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ObjectRefView {
    /// Its kind.
    pub kind: String,
    /// Its namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// Why an audit failed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditFailureView {
    /// The kind it could not read, when that is the cause.
    pub kind: Option<String>,
    /// Why.
    pub message: String,
    /// When (RFC 3339).
    pub at: String,
}

impl From<&vigil_store::AuditRecord> for AuditView {
    fn from(audit: &vigil_store::AuditRecord) -> Self {
        use vigil_store::Severity;
        let rank = |s: Severity| match s {
            Severity::Blocking => 0,
            Severity::Warning => 1,
            Severity::Info => 2,
        };
        let mut findings: Vec<&vigil_store::Finding> = audit.findings.iter().collect();
        findings.sort_by_key(|f| rank(f.severity));
        Self {
            audited_at: audit.audited_at.map(rfc3339),
            audited_by: audit.by.as_ref().map(ProbedByView::from),
            kinds_read: audit.kinds_read.clone(),
            blocking: audit
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Blocking)
                .count(),
            findings: findings
                .into_iter()
                .map(|f| FindingView {
                    code: f.code.clone(),
                    severity: match f.severity {
                        Severity::Blocking => "blocking",
                        Severity::Warning => "warning",
                        Severity::Info => "info",
                    }
                    .to_owned(),
                    objects: f
                        .objects
                        .iter()
                        .map(|o| ObjectRefView {
                            kind: o.kind.clone(),
                            namespace: o.namespace.clone(),
                            name: o.name.clone(),
                        })
                        .collect(),
                    message: f.message.clone(),
                    fix: f.fix.clone(),
                })
                .collect(),
            last_failure: audit.failure.as_ref().map(|f| AuditFailureView {
                kind: f.kind.clone(),
                message: f.message.clone(),
                at: rfc3339(f.at),
            }),
            next_audit: audit.next_audit.map(rfc3339),
        }
    }
}

/// How many clusters have each status.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct StatusCountsView {
    /// Clusters `ONLINE`.
    #[serde(rename = "ONLINE")]
    pub online: u64,
    /// Clusters `OFFLINE`.
    #[serde(rename = "OFFLINE")]
    pub offline: u64,
    /// Clusters `UNKNOWN`.
    #[serde(rename = "UNKNOWN")]
    pub unknown: u64,
}

impl StatusCountsView {
    /// The counts of a map of statuses to counts (a status absent counts 0).
    pub fn of(counts: &BTreeMap<vigil_decision::ClusterStatus, u64>) -> Self {
        use vigil_decision::ClusterStatus::{Offline, Online, Unknown};
        let count = |status| counts.get(&status).copied().unwrap_or(0);
        Self {
            online: count(Online),
            offline: count(Offline),
            unknown: count(Unknown),
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.online + self.offline + self.unknown
    }
}

/// The clusters carrying one label, by status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LabelGroupView {
    /// The label's key.
    pub key: String,
    /// The label's value.
    pub value: String,
    /// How many clusters carry it.
    pub clusters: u64,
    /// How many of them have each status.
    pub statuses: StatusCountsView,
}

/// The fleet at a glance: how many clusters have each status, overall and per label.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SummaryView {
    /// How many clusters there are (deleted ones not counted).
    pub clusters: u64,
    /// How many have each status.
    pub statuses: StatusCountsView,
    /// Whether the mass-failure brake holds: failures are not counted meanwhile.
    pub brake_holding: bool,
    /// Per label `key=value`, by key then value: how many clusters carry it and their
    /// statuses.
    pub labels: Vec<LabelGroupView>,
}

/// A stretch of time split by what vigil knew of a cluster, in whole seconds (rounded
/// down). Only the time vigil watched counts toward a status: `no_data_seconds` is the
/// time when no vigil was running, the mass-failure brake held, the cluster's probing was
/// disabled, or the cluster was not known yet.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UptimeSpanView {
    /// Its start (RFC 3339).
    pub from: String,
    /// Its end (RFC 3339): now, for a stretch that runs to now.
    pub to: String,
    /// Its length.
    pub seconds: u64,
    /// Watched, and the cluster was `ONLINE`.
    pub online_seconds: u64,
    /// Watched, and the cluster was `OFFLINE`.
    pub offline_seconds: u64,
    /// Watched, and the cluster was `UNKNOWN` (never probed conclusively).
    pub unknown_seconds: u64,
    /// Not watched.
    pub no_data_seconds: u64,
    /// `online / (online + offline)` in percent (`UNKNOWN` and no data are left out);
    /// `null` when the cluster was watched neither `ONLINE` nor `OFFLINE`.
    pub uptime_percent: Option<f64>,
}

impl UptimeSpanView {
    /// The view of `split`, over `span`.
    pub fn new(
        span: vigil_store::availability::Span,
        split: &vigil_store::availability::Split,
    ) -> Self {
        let seconds = |millis: i64| u64::try_from(millis / 1000).unwrap_or(0);
        Self {
            from: rfc3339(Timestamp(span.from)),
            to: rfc3339(Timestamp(span.to)),
            seconds: seconds(span.millis()),
            online_seconds: seconds(split.online),
            offline_seconds: seconds(split.offline),
            unknown_seconds: seconds(split.unknown),
            no_data_seconds: seconds(split.no_data),
            uptime_percent: split.uptime_percent(),
        }
    }
}

/// A window of a cluster's uptime.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UptimeWindowView {
    /// `24h` (the 24 hours up to now), or `7d`, `30d`, `90d` (that many UTC days, today
    /// up to now the last of them).
    pub window: String,
    /// The window, split.
    #[serde(flatten)]
    pub span: UptimeSpanView,
}

/// A UTC day of a cluster's uptime.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UptimeDayView {
    /// The day, `YYYY-MM-DD`.
    pub date: String,
    /// The day, split (today: up to now).
    #[serde(flatten)]
    pub span: UptimeSpanView,
}

/// A cluster's uptime: over the last 24 hours, 7, 30 and 90 days, and day by day.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UptimeView {
    /// The cluster's name.
    pub cluster: String,
    /// Its status now.
    pub status: String,
    /// When this was computed (the database's clock).
    pub at: String,
    /// `24h`, `7d`, `30d` and `90d`, in that order.
    pub windows: Vec<UptimeWindowView>,
    /// Its last days, oldest first, today (up to now) last.
    pub days: Vec<UptimeDayView>,
}

/// The conclusive probes of a cluster that ended in one bucket of time.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LatencyBucketView {
    /// The bucket's start (RFC 3339).
    pub start: String,
    /// How many probes ended in it.
    pub probes: u64,
    /// Their mean duration, in milliseconds.
    pub mean_ms: f64,
    /// The longest of them, in milliseconds.
    pub max_ms: u64,
    /// Their durations added up, in milliseconds.
    pub total_ms: u64,
}

/// How long a cluster's conclusive probes took, per bucket of time, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LatencyView {
    /// The cluster's name.
    pub cluster: String,
    /// The width of a bucket, in seconds.
    pub bucket_seconds: u64,
    /// The buckets from the one holding `since` on (a bucket with no probe is absent).
    pub buckets: Vec<LatencyBucketView>,
}

impl From<&vigil_store::LatencyBucket> for LatencyBucketView {
    fn from(bucket: &vigil_store::LatencyBucket) -> Self {
        // Sums of milliseconds over five minutes fit an f64 exactly.
        #[allow(clippy::cast_precision_loss)]
        let mean_ms = bucket.total_ms as f64 / bucket.probes.max(1) as f64;
        Self {
            start: rfc3339(bucket.start),
            probes: bucket.probes,
            mean_ms,
            max_ms: bucket.max_ms,
            total_ms: bucket.total_ms,
        }
    }
}
