//! vigil's drain-readiness findings: what in a cluster's budgets, workloads and pods would
//! block or slow node drains, each with a stable code, a severity, the objects involved, one
//! line of explanation and one line of fix.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::disruption::{self, DisruptionStatus, ExpectedFrom};
use crate::intstr::IntOrString;
use crate::model::{ClusterObjects, Pod, PodDisruptionBudget, Workload, WorkloadKind};
use crate::selector;
use crate::validation;

/// The stable finding codes. They are part of vigil's API: never rename one.
pub mod codes {
    /// A budget that selects at least one running pod allows no eviction now (blocking).
    pub const ZERO_DISRUPTIONS: &str = "pdb-zero-disruptions";
    /// A budget whose selector matches no pod (warning: the eviction API never consults it).
    pub const ORPHAN: &str = "pdb-orphan";
    /// A pod selected by more than one budget: the eviction API refuses to evict it
    /// (blocking).
    pub const MULTIPLE_BUDGETS: &str = "pdb-multiple-budgets";
    /// A budget the API server would refuse (blocking; manifests only).
    pub const INVALID: &str = "pdb-invalid";
    /// An integer `minAvailable` on a workload that scales (warning).
    pub const INTEGER_MIN_AVAILABLE: &str = "pdb-integer-min-available";
    /// A percentage that rounds to a surprising count on few pods (info).
    pub const PERCENT_ROUNDING: &str = "pdb-percent-rounding";
    /// A stateless workload's budget under `IfHealthyBudget` (warning with not-ready pods,
    /// info otherwise).
    pub const UNHEALTHY_POLICY: &str = "pdb-unhealthy-policy";
    /// More pods of one workload on one node than its budget allows evictions (warning).
    pub const PODS_PER_NODE: &str = "pdb-pods-per-node";
    /// The budget's status disagrees with the disruption controller's arithmetic (warning).
    pub const STATUS_MISMATCH: &str = "pdb-status-mismatch";
    /// The disruption controller cannot compute the budget (warning).
    pub const UNCOMPUTABLE: &str = "pdb-uncomputable";
    /// A budgeted workload with several replicas and no hostname spread (warning).
    pub const NO_HOSTNAME_SPREAD: &str = "spread-no-hostname";
    /// A zone spread with `DoNotSchedule` (warning).
    pub const ZONE_DO_NOT_SCHEDULE: &str = "spread-zone-do-not-schedule";
    /// `minDomains` without `DoNotSchedule` (blocking; manifests only: the API refuses it).
    pub const MIN_DOMAINS_WITHOUT_DO_NOT_SCHEDULE: &str =
        "spread-min-domains-without-do-not-schedule";
    /// A Deployment's spread without `matchLabelKeys: [pod-template-hash]` (warning).
    pub const NO_MATCH_LABEL_KEYS: &str = "spread-no-match-label-keys";
    /// A spread with `nodeTaintsPolicy` left at its `Ignore` default (info).
    pub const NODE_TAINTS_IGNORED: &str = "spread-node-taints-ignored";
    /// A required `podAntiAffinity` against the workload's own pods (warning).
    pub const SELF_ANTI_AFFINITY: &str = "anti-affinity-self";
}

/// Where the objects come from: the rules differ a little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A live cluster: budgets carry their status, which is the truth; the API server has
    /// validated every object already.
    Live,
    /// Manifest files: no status, pods made up from the workloads (all running and ready),
    /// and validation matters.
    Manifests,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// It blocks node drains (or, for manifests, the deployment itself) now.
    Blocking,
    /// It will likely cause trouble.
    Warning,
    /// Worth knowing.
    Info,
}

impl Severity {
    /// `blocking`, `warning` or `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Blocking => "blocking",
            Self::Warning => "warning",
            Self::Info => "info",
        }
    }
}

/// A Kubernetes object named by a finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    /// e.g. `PodDisruptionBudget`.
    pub kind: String,
    /// Its namespace (none for nodes).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ObjectRef {
    fn namespaced(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    fn budget(budget: &PodDisruptionBudget) -> Self {
        Self::namespaced(
            "PodDisruptionBudget",
            budget.metadata.namespace(),
            &budget.metadata.name,
        )
    }

    fn workload(workload: &Workload) -> Self {
        Self::namespaced(
            workload.kind.as_str(),
            workload.metadata.namespace(),
            &workload.metadata.name,
        )
    }

    fn node(name: &str) -> Self {
        Self {
            kind: "Node".to_owned(),
            namespace: None,
            name: name.to_owned(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{}/{namespace}/{}", self.kind, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// One thing an audit found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable code from [`codes`].
    pub code: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// The objects involved, the budget (if any) first.
    pub objects: Vec<ObjectRef>,
    /// One line saying what is wrong.
    pub message: String,
    /// One line saying how to fix it.
    pub fix: String,
    /// For a finding about one budget, the numbers the disruption controller has (or
    /// would have) for it; `None` for other findings, and for a budget it cannot compute.
    pub numbers: Option<BudgetNumbers>,
}

/// The disruption arithmetic behind a budget's finding: the numbers of its status and the
/// replica counts its expected pods came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetNumbers {
    /// Pods the budget counts (`status.expectedPods`).
    pub expected_pods: i64,
    /// Healthy pods it wants (`status.desiredHealthy`).
    pub desired_healthy: i64,
    /// Healthy pods now (`status.currentHealthy`).
    pub current_healthy: i64,
    /// Evictions allowed now (`status.disruptionsAllowed`).
    pub disruptions_allowed: i64,
    /// Where the four numbers above come from.
    pub from: NumbersFrom,
    /// How the expected pods are counted.
    pub expected_from: ExpectedPods,
    /// The workloads behind the expected pods, each with its `replicas`: with `replicas`
    /// counting, these add up to `expected_pods`; with `selected-pods`, they are the
    /// workloads the counted pods belong to.
    pub workloads: Vec<WorkloadReplicas>,
}

/// Where a finding's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumbersFrom {
    /// The budget's status, as the disruption controller of a live cluster wrote it (what
    /// the eviction API goes by).
    Status,
    /// The disruption controller's arithmetic, done here (manifests, or a live budget
    /// without status).
    Computed,
}

/// How a budget's expected pods are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpectedPods {
    /// The sum of the `replicas` of the selected pods' controllers (`maxUnavailable`, or a
    /// percentage `minAvailable`).
    Replicas,
    /// The pods the selector selects (an integer `minAvailable`).
    SelectedPods,
    /// Neither field is set: none.
    Nothing,
}

impl From<ExpectedFrom> for ExpectedPods {
    fn from(from: ExpectedFrom) -> Self {
        match from {
            ExpectedFrom::Replicas => Self::Replicas,
            ExpectedFrom::SelectedPods => Self::SelectedPods,
            ExpectedFrom::Nothing => Self::Nothing,
        }
    }
}

/// A workload and its `spec.replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadReplicas {
    /// e.g. `Deployment`.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `spec.replicas`.
    pub replicas: i64,
}

impl BudgetNumbers {
    /// The numbers a finding on `budget` goes by: on a live cluster its status when it has
    /// one (as the eviction API does), else `computed`. The workloads come from `computed`
    /// either way.
    fn of(
        source: Source,
        budget: &PodDisruptionBudget,
        computed: Option<&DisruptionStatus>,
    ) -> Option<Self> {
        let workloads = computed
            .map(|c| {
                c.workloads
                    .iter()
                    .map(|w| WorkloadReplicas {
                        kind: w.kind.as_str(),
                        namespace: w.namespace.clone(),
                        name: w.name.clone(),
                        replicas: w.replicas,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let expected_from = ExpectedFrom::of(&budget.spec).into();
        match (source, &budget.status, computed) {
            (Source::Live, Some(status), _) => Some(Self {
                expected_pods: status.expected_pods,
                desired_healthy: status.desired_healthy,
                current_healthy: status.current_healthy,
                disruptions_allowed: status.disruptions_allowed,
                from: NumbersFrom::Status,
                expected_from,
                workloads,
            }),
            (_, _, Some(computed)) => Some(Self {
                expected_pods: computed.expected_pods,
                desired_healthy: computed.desired_healthy,
                current_healthy: computed.current_healthy,
                disruptions_allowed: computed.disruptions_allowed,
                from: NumbersFrom::Computed,
                expected_from,
                workloads,
            }),
            _ => None,
        }
    }
}

/// Why a budget allows no eviction, most specific first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZeroCause {
    /// `maxUnavailable: 0` or `0%`.
    MaxUnavailableZero,
    /// `minAvailable` of at least 1 on a single expected pod.
    SingleReplica,
    /// `minAvailable` (or what `maxUnavailable` leaves) equals or exceeds the expected pods.
    MinAvailableCoversAll {
        /// Desired healthy pods.
        desired: i64,
        /// Expected pods.
        expected: i64,
    },
    /// Enough pods are expected, but too many are not ready.
    NotReadyPods {
        /// Pods that are not healthy.
        not_ready: i64,
    },
    /// The status says 0 but the arithmetic gives no reason (stale status, unknown controller).
    Other,
}

impl ZeroCause {
    fn describe(&self) -> String {
        match self {
            Self::MaxUnavailableZero => "maxUnavailable is 0".to_owned(),
            Self::SingleReplica => "minAvailable 1 on a single replica".to_owned(),
            Self::MinAvailableCoversAll { desired, expected } => format!(
                "it wants {desired} healthy pods out of {expected} expected (minAvailable = replicas)"
            ),
            Self::NotReadyPods { not_ready } => {
                format!("the budget is exhausted by {not_ready} not-ready pods")
            }
            Self::Other => "its status allows none".to_owned(),
        }
    }

    fn fix(&self) -> &'static str {
        match self {
            Self::MaxUnavailableZero => "set maxUnavailable to at least 1",
            Self::SingleReplica => {
                "run 2 replicas or more; a budget cannot invent redundancy that does not exist"
            }
            Self::MinAvailableCoversAll { .. } => {
                "use maxUnavailable: 1 instead of a minAvailable equal to the replicas"
            }
            Self::NotReadyPods { .. } => {
                "repair the not-ready pods, or set unhealthyPodEvictionPolicy: AlwaysAllow"
            }
            Self::Other => "check the budget's status conditions and the disruption controller",
        }
    }
}

/// Why a budget allows no eviction, from its spec and the arithmetic.
pub fn zero_cause(budget: &PodDisruptionBudget, computed: Option<&DisruptionStatus>) -> ZeroCause {
    if let Some(max) = &budget.spec.max_unavailable
        && (matches!(max, IntOrString::Int(0)) || max.percent() == Some(0))
    {
        return ZeroCause::MaxUnavailableZero;
    }
    let Some(status) = computed else {
        return ZeroCause::Other;
    };
    if status.expected_pods == 1 && status.desired_healthy >= 1 {
        return ZeroCause::SingleReplica;
    }
    if status.expected_pods > 0 && status.desired_healthy >= status.expected_pods {
        return ZeroCause::MinAvailableCoversAll {
            desired: status.desired_healthy,
            expected: status.expected_pods,
        };
    }
    if status.current_healthy <= status.desired_healthy
        && status.current_healthy < status.expected_pods
    {
        return ZeroCause::NotReadyPods {
            not_ready: status.expected_pods - status.current_healthy,
        };
    }
    ZeroCause::Other
}

/// Audits `objects`: every finding, sorted by severity, code and objects.
pub fn audit(objects: &ClusterObjects, source: Source) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut budgeted: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (index, budget) in objects.budgets.iter().enumerate() {
        audit_budget(objects, source, index, budget, &mut budgeted, &mut findings);
    }
    multiple_budgets(objects, &mut findings);
    for (index, workload) in objects.workloads.iter().enumerate() {
        if is_managed_replica_set(workload) {
            continue;
        }
        audit_spread(
            objects,
            source,
            workload,
            budgeted.contains_key(&index),
            &mut findings,
        );
    }
    findings
        .sort_by(|a, b| (a.severity, a.code, &a.objects).cmp(&(b.severity, b.code, &b.objects)));
    findings.dedup();
    findings
}

/// A ReplicaSet owned by a Deployment: its Deployment stands for it.
fn is_managed_replica_set(workload: &Workload) -> bool {
    workload.kind == WorkloadKind::ReplicaSet
        && workload
            .metadata
            .controller()
            .is_some_and(|owner| owner.kind == "Deployment")
}

/// The top-level workload a pod belongs to (a Deployment for a pod of its ReplicaSet).
fn workload_of(pod: &Pod, workloads: &[Workload]) -> Option<usize> {
    let controller = pod.metadata.controller()?;
    let owner = disruption::scale_owner(controller, pod.metadata.namespace(), workloads)?;
    workloads.iter().position(|w| std::ptr::eq(w, owner))
}

fn audit_budget(
    objects: &ClusterObjects,
    source: Source,
    index: usize,
    budget: &PodDisruptionBudget,
    budgeted: &mut BTreeMap<usize, Vec<usize>>,
    findings: &mut Vec<Finding>,
) {
    let this = ObjectRef::budget(budget);
    let name = &budget.metadata.name;
    if source == Source::Manifests {
        let errors = validation::validate_budget(&budget.spec);
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            findings.push(Finding {
                code: codes::INVALID,
                severity: Severity::Blocking,
                objects: vec![this],
                message: format!(
                    "budget {name} would be refused by the API server: {}",
                    list.join("; ")
                ),
                fix: "set exactly one of minAvailable and maxUnavailable, to an integer ≥ 0 or a percentage ≤ 100%".to_owned(),
                numbers: None,
            });
            return;
        }
    }
    let Ok(pods) = disruption::pods_for_budget(budget, &objects.pods) else {
        return;
    };
    let workloads: BTreeSet<usize> = pods
        .iter()
        .filter_map(|pod| workload_of(pod, &objects.workloads))
        .collect();
    for workload in &workloads {
        budgeted.entry(*workload).or_default().push(index);
    }
    let workload_refs: Vec<ObjectRef> = workloads
        .iter()
        .map(|w| ObjectRef::workload(&objects.workloads[*w]))
        .collect();
    let with_workloads = |first: ObjectRef| {
        let mut all = vec![first];
        all.extend(workload_refs.iter().cloned());
        all
    };
    let computed = disruption::compute(budget, objects);
    let numbers = BudgetNumbers::of(source, budget, computed.as_ref().ok());

    if pods.is_empty() {
        findings.push(Finding {
            code: codes::ORPHAN,
            severity: Severity::Warning,
            objects: vec![this],
            message: format!(
                "budget {name} selects no pod: it protects nothing (the eviction API only consults budgets that select the evicted pod)"
            ),
            fix: "fix the selector to match the workload's pod labels, or delete the budget".to_owned(),
            numbers,
        });
        return;
    }

    let computed = match computed {
        Ok(computed) => Some(computed),
        Err(error) => {
            findings.push(Finding {
                code: codes::UNCOMPUTABLE,
                severity: Severity::Warning,
                objects: vec![this.clone()],
                message: format!(
                    "the disruption controller cannot compute budget {name}: {error}; it allows no eviction"
                ),
                fix: "select only pods of Deployments, ReplicaSets, StatefulSets or ReplicationControllers, or use an integer minAvailable".to_owned(),
                numbers: numbers.clone(),
            });
            None
        }
    };

    // On a live cluster the budget's status is the truth; our arithmetic explains it.
    let allowed = match (source, &budget.status, &computed) {
        (Source::Live, Some(status), _) => status.disruptions_allowed,
        (_, _, Some(computed)) => computed.disruptions_allowed,
        _ => 0,
    };
    let running = pods
        .iter()
        .filter(|pod| pod.phase() == "Running" && !pod.is_terminating())
        .count();

    if let (Source::Live, Some(status), Some(ours)) = (source, &budget.status, &computed) {
        let theirs = (
            status.expected_pods,
            status.desired_healthy,
            status.current_healthy,
            status.disruptions_allowed,
        );
        let mine = (
            ours.expected_pods,
            ours.desired_healthy,
            ours.current_healthy,
            ours.disruptions_allowed,
        );
        if theirs != mine {
            findings.push(Finding {
                code: codes::STATUS_MISMATCH,
                severity: Severity::Warning,
                objects: vec![this.clone()],
                message: format!(
                    "budget {name}'s status (expected {}, desired healthy {}, healthy {}, allowed {}) disagrees with the disruption controller's arithmetic (expected {}, desired healthy {}, healthy {}, allowed {})",
                    theirs.0, theirs.1, theirs.2, theirs.3, mine.0, mine.1, mine.2, mine.3
                ),
                fix: "check that kube-controller-manager's disruption controller is running and keeping up".to_owned(),
                numbers: numbers.clone(),
            });
        }
    }

    if allowed <= 0 && running > 0 {
        let cause = zero_cause(budget, computed.as_ref());
        findings.push(Finding {
            code: codes::ZERO_DISRUPTIONS,
            severity: Severity::Blocking,
            objects: with_workloads(this.clone()),
            message: format!(
                "budget {name} allows 0 disruptions: {}; no drain can evict its {running} running pod(s)",
                cause.describe()
            ),
            fix: cause.fix().to_owned(),
            numbers: numbers.clone(),
        });
    }

    let scalable = workloads.iter().any(|w| {
        matches!(
            objects.workloads[*w].kind,
            WorkloadKind::Deployment
                | WorkloadKind::ReplicaSet
                | WorkloadKind::StatefulSet
                | WorkloadKind::ReplicationController
        )
    });
    if let Some(IntOrString::Int(min)) = &budget.spec.min_available
        && *min > 0
        && scalable
    {
        findings.push(Finding {
            code: codes::INTEGER_MIN_AVAILABLE,
            severity: Severity::Warning,
            objects: with_workloads(this.clone()),
            message: format!(
                "budget {name} has an integer minAvailable ({min}): when the workload scales down to {min} replicas it silently allows no eviction"
            ),
            fix: "use maxUnavailable (e.g. 1), which means the same at every size".to_owned(),
            numbers: numbers.clone(),
        });
    }

    if let Some(computed) = &computed {
        for (field, value) in [
            ("minAvailable", &budget.spec.min_available),
            ("maxUnavailable", &budget.spec.max_unavailable),
        ] {
            let Some(value) = value else { continue };
            let Some(percent) = value.percent() else {
                continue;
            };
            let expected = computed.expected_pods;
            if expected <= 0 || expected >= 10 || (percent * expected) % 100 == 0 {
                continue;
            }
            let rounded = value.scaled_value(expected, true).unwrap_or(0);
            findings.push(Finding {
                code: codes::PERCENT_ROUNDING,
                severity: Severity::Info,
                objects: vec![this.clone()],
                message: format!(
                    "budget {name}'s {field} {value} of {expected} pods rounds up to {rounded} (exactly {}.{:02})",
                    percent * expected / 100,
                    (percent * expected % 100).abs()
                ),
                fix: format!("below about ten pods, write {field} as an integer"),
                numbers: numbers.clone(),
            });
        }
    }

    let stateless = workloads.iter().any(|w| {
        matches!(
            objects.workloads[*w].kind,
            WorkloadKind::Deployment | WorkloadKind::ReplicaSet
        )
    });
    let always_allow = budget.spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow");
    if stateless && !always_allow {
        let not_ready = pods
            .iter()
            .filter(|pod| pod.phase() == "Running" && !pod.is_terminating() && !pod.is_ready())
            .count();
        let (severity, message) = if not_ready > 0 {
            (
                Severity::Warning,
                format!(
                    "budget {name} covers stateless pods under IfHealthyBudget and {not_ready} of them are not ready: a drain cannot evict them while the budget is short"
                ),
            )
        } else {
            (
                Severity::Info,
                format!(
                    "budget {name} covers stateless pods under IfHealthyBudget: a not-ready pod will block drains instead of being evicted"
                ),
            )
        };
        findings.push(Finding {
            code: codes::UNHEALTHY_POLICY,
            severity,
            objects: with_workloads(this.clone()),
            message,
            fix: "set unhealthyPodEvictionPolicy: AlwaysAllow (a not-ready stateless pod serves no traffic)".to_owned(),
            numbers: numbers.clone(),
        });
    }

    if allowed > 0 {
        let mut per_node: BTreeMap<(usize, &str), i64> = BTreeMap::new();
        for pod in &pods {
            if pod.is_terminating() || pod.phase() != "Running" {
                continue;
            }
            if let (Some(workload), Some(node)) = (
                workload_of(pod, &objects.workloads),
                pod.spec.node_name.as_deref(),
            ) {
                *per_node.entry((workload, node)).or_default() += 1;
            }
        }
        for ((workload, node), count) in per_node {
            if count > allowed {
                let workload = &objects.workloads[workload];
                findings.push(Finding {
                    code: codes::PODS_PER_NODE,
                    severity: Severity::Warning,
                    objects: vec![this.clone(), ObjectRef::workload(workload), ObjectRef::node(node)],
                    message: format!(
                        "node {node} runs {count} pods of {} {} but budget {name} allows {allowed} eviction(s) at a time: draining it takes several rounds",
                        workload.kind.as_str(),
                        workload.metadata.name
                    ),
                    fix: "spread the pods with a topologySpreadConstraint on kubernetes.io/hostname (DoNotSchedule)".to_owned(),
                    numbers: numbers.clone(),
                });
            }
        }
    }
}

/// Pods selected by more than one budget: the eviction API refuses them.
fn multiple_budgets(objects: &ClusterObjects, findings: &mut Vec<Finding>) {
    // One finding per set of budgets, naming the workloads (or pods) they share.
    let mut shared: BTreeMap<Vec<usize>, BTreeSet<ObjectRef>> = BTreeMap::new();
    for pod in &objects.pods {
        if pod.is_terminating() {
            continue;
        }
        let selecting: Vec<usize> = objects
            .budgets
            .iter()
            .enumerate()
            .filter(|(_, budget)| {
                budget.metadata.namespace() == pod.metadata.namespace()
                    && selector::matches(budget.spec.selector.as_ref(), &pod.metadata.labels)
                        .unwrap_or(false)
            })
            .map(|(index, _)| index)
            .collect();
        if selecting.len() > 1 {
            let object = match workload_of(pod, &objects.workloads) {
                Some(w) => ObjectRef::workload(&objects.workloads[w]),
                None => ObjectRef::namespaced("Pod", pod.metadata.namespace(), &pod.metadata.name),
            };
            shared.entry(selecting).or_default().insert(object);
        }
    }
    for (budgets, owners) in shared {
        let names: Vec<&str> = budgets
            .iter()
            .map(|b| objects.budgets[*b].metadata.name.as_str())
            .collect();
        let mut refs: Vec<ObjectRef> = budgets
            .iter()
            .map(|b| ObjectRef::budget(&objects.budgets[*b]))
            .collect();
        let owner_names: Vec<String> = owners
            .iter()
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect();
        refs.extend(owners);
        findings.push(Finding {
            code: codes::MULTIPLE_BUDGETS,
            severity: Severity::Blocking,
            objects: refs,
            message: format!(
                "budgets {} all select the pods of {}: the eviction API refuses to evict a pod with more than one budget",
                names.join(", "),
                owner_names.join(", ")
            ),
            fix: "make the budgets' selectors disjoint, one budget per workload".to_owned(),
            numbers: None,
        });
    }
}

fn audit_spread(
    objects: &ClusterObjects,
    source: Source,
    workload: &Workload,
    budgeted: bool,
    findings: &mut Vec<Finding>,
) {
    let this = ObjectRef::workload(workload);
    let name = format!("{} {}", workload.kind.as_str(), workload.metadata.name);
    let spec = &workload.template_spec;
    let constraints = &spec.topology_spread_constraints;
    let _ = objects;

    let self_anti_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .map(|anti| {
            anti.required_during_scheduling_ignored_during_execution
                .iter()
                .filter(|term| {
                    term.namespaces.is_empty()
                        && selector::matches(
                            term.label_selector.as_ref(),
                            &workload.template_labels,
                        )
                        .unwrap_or(false)
                })
                .map(|term| term.topology_key.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for key in &self_anti_affinity {
        findings.push(Finding {
            code: codes::SELF_ANTI_AFFINITY,
            severity: Severity::Warning,
            objects: vec![this.clone()],
            message: format!(
                "{name} has a required podAntiAffinity on {key} against its own pods: one replica more than domains stays Pending, with nothing in between"
            ),
            fix: format!("use a topologySpreadConstraint on {key} (maxSkew: 1) instead; keep podAntiAffinity for other workloads"),
            numbers: None,
        });
    }

    if budgeted && workload.replicas > 1 {
        let hostname = constraints.iter().any(|c| {
            c.topology_key == "kubernetes.io/hostname" && c.when_unsatisfiable == "DoNotSchedule"
        });
        let hostname_anti_affinity = self_anti_affinity
            .iter()
            .any(|k| k == "kubernetes.io/hostname");
        if !hostname && !hostname_anti_affinity {
            findings.push(Finding {
                code: codes::NO_HOSTNAME_SPREAD,
                severity: Severity::Warning,
                objects: vec![this.clone()],
                message: format!(
                    "{name} has a budget and {} replicas but no kubernetes.io/hostname spread with DoNotSchedule: several replicas on one node make its drain need several evictions at once",
                    workload.replicas
                ),
                fix: "add a topologySpreadConstraint: maxSkew 1, topologyKey kubernetes.io/hostname, whenUnsatisfiable DoNotSchedule".to_owned(),
                numbers: None,
            });
        }
    }

    for constraint in constraints {
        let key = &constraint.topology_key;
        if key == "topology.kubernetes.io/zone"
            && constraint.when_unsatisfiable == "DoNotSchedule"
            && constraint.min_domains.is_none()
        {
            findings.push(Finding {
                code: codes::ZONE_DO_NOT_SCHEDULE,
                severity: Severity::Warning,
                objects: vec![this.clone()],
                message: format!(
                    "{name} spreads over zones with DoNotSchedule: when a zone runs out of capacity its pods stay Pending instead of going elsewhere"
                ),
                fix: "use whenUnsatisfiable: ScheduleAnyway for the zone constraint".to_owned(),
                numbers: None,
            });
        }
        if source == Source::Manifests
            && constraint.min_domains.is_some()
            && constraint.when_unsatisfiable != "DoNotSchedule"
        {
            findings.push(Finding {
                code: codes::MIN_DOMAINS_WITHOUT_DO_NOT_SCHEDULE,
                severity: Severity::Blocking,
                objects: vec![this.clone()],
                message: format!(
                    "{name} sets minDomains on {key} with whenUnsatisfiable {}: the API server refuses it (minDomains needs DoNotSchedule)",
                    constraint.when_unsatisfiable
                ),
                fix: "set whenUnsatisfiable: DoNotSchedule, or remove minDomains".to_owned(),
                numbers: None,
            });
        }
        if workload.kind == WorkloadKind::Deployment
            && !constraint
                .match_label_keys
                .iter()
                .any(|k| k == "pod-template-hash")
        {
            findings.push(Finding {
                code: codes::NO_MATCH_LABEL_KEYS,
                severity: Severity::Warning,
                objects: vec![this.clone()],
                message: format!(
                    "{name}'s spread on {key} has no matchLabelKeys [pod-template-hash]: during a rollout the old ReplicaSet's running pods skew the count"
                ),
                fix: "add matchLabelKeys: [pod-template-hash] to the constraint".to_owned(),
                numbers: None,
            });
        }
        if constraint.node_taints_policy.as_deref() != Some("Honor") {
            findings.push(Finding {
                code: codes::NODE_TAINTS_IGNORED,
                severity: Severity::Info,
                objects: vec![this.clone()],
                message: format!(
                    "{name}'s spread on {key} leaves nodeTaintsPolicy at Ignore: tainted nodes the pods cannot use still count as domains"
                ),
                fix: "set nodeTaintsPolicy: Honor".to_owned(),
                numbers: None,
            });
        }
    }
}
