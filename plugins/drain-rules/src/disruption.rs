//! The disruption controller's arithmetic: which pods a budget covers, how many it expects,
//! how many must stay healthy, how many are, and how many evictions that allows.
//!
//! Each function mirrors one of `pkg/controller/disruption/disruption.go` in Kubernetes
//! (v1.33), named in its documentation. Disrupted pods (evictions the controller has not
//! seen complete yet, `status.disruptedPods`) are not modelled: they only matter for the two
//! minutes after an eviction.

use std::collections::BTreeMap;

use crate::intstr::{IntOrString, IntOrStringError};
use crate::model::{
    ClusterObjects, OwnerReference, PdbSpec, Pod, PodDisruptionBudget, Workload, WorkloadKind,
};
use crate::selector::{self, InvalidSelector};

/// What the disruption controller computes for one budget: the four numbers of its status,
/// and where its expected pods came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionStatus {
    /// `status.expectedPods`.
    pub expected_pods: i64,
    /// `status.desiredHealthy`.
    pub desired_healthy: i64,
    /// `status.currentHealthy`.
    pub current_healthy: i64,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i64,
    /// Selected pods that no controller manages (they count as healthy, not as expected).
    pub unmanaged_pods: Vec<String>,
    /// How `expected_pods` was counted.
    pub expected_from: ExpectedFrom,
    /// The workloads behind the expected pods, each once: with [`ExpectedFrom::Replicas`]
    /// the controllers whose `replicas` add up to `expected_pods`; with
    /// [`ExpectedFrom::SelectedPods`] the workloads the selected pods belong to (their
    /// `replicas` say how many pods there should be, not how many were counted).
    pub workloads: Vec<ScaleSource>,
}

/// How the disruption controller counts a budget's expected pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedFrom {
    /// The sum of the `replicas` of the selected pods' controllers: `maxUnavailable`, or a
    /// percentage `minAvailable`.
    Replicas,
    /// The selected pods themselves: an integer `minAvailable`.
    SelectedPods,
    /// Neither field is set: no pod is expected.
    Nothing,
}

impl ExpectedFrom {
    /// How `spec` makes the controller count (`getExpectedPodCount`'s branches).
    pub fn of(spec: &PdbSpec) -> Self {
        match (&spec.max_unavailable, &spec.min_available) {
            (Some(_), _) => Self::Replicas,
            (None, Some(IntOrString::Int(_))) => Self::SelectedPods,
            (None, Some(_)) => Self::Replicas,
            (None, None) => Self::Nothing,
        }
    }
}

/// A workload whose scale stands behind a budget's expected pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleSource {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `spec.replicas`.
    pub replicas: i64,
}

impl ScaleSource {
    fn of(workload: &Workload) -> Self {
        Self {
            kind: workload.kind,
            namespace: workload.metadata.namespace().to_owned(),
            name: workload.metadata.name.clone(),
            replicas: workload.replicas,
        }
    }
}

/// Why the controller cannot compute a budget's status (it then sets `disruptionsAllowed: 0`
/// and the `SyncFailed` reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisruptionError {
    /// The budget's selector is invalid.
    Selector(InvalidSelector),
    /// `minAvailable` or `maxUnavailable` has no value.
    Value(IntOrStringError),
    /// A selected pod's controller is not one whose scale is known (a custom resource, or a
    /// controller that does not exist).
    NoController {
        /// The pod.
        pod: String,
        /// Its controller, `Kind/name`.
        controller: String,
    },
}

impl std::fmt::Display for DisruptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Selector(error) => write!(f, "invalid selector: {error}"),
            Self::Value(error) => write!(f, "invalid value: {error}"),
            Self::NoController { pod, controller } => {
                write!(f, "found no scale for controller {controller} of pod {pod}")
            }
        }
    }
}

impl std::error::Error for DisruptionError {}

/// The pods a budget covers: those of its namespace that its selector selects (a nil
/// selector none, an empty one all).
///
/// Mirrors `getPodsForPdb`. Terminating and finished pods are included, as there.
pub fn pods_for_budget<'a>(
    budget: &PodDisruptionBudget,
    pods: &'a [Pod],
) -> Result<Vec<&'a Pod>, InvalidSelector> {
    let namespace = budget.metadata.namespace();
    let mut selected = Vec::new();
    for pod in pods {
        if pod.metadata.namespace() == namespace
            && selector::matches(budget.spec.selector.as_ref(), &pod.metadata.labels)?
        {
            selected.push(pod);
        }
    }
    Ok(selected)
}

/// How many of `pods` are healthy: not being deleted, and `Ready`.
///
/// Mirrors `countHealthyPods` (without the disrupted-pods map).
pub fn count_healthy_pods(pods: &[&Pod]) -> i64 {
    let healthy = pods
        .iter()
        .filter(|pod| !pod.is_terminating() && pod.is_ready())
        .count();
    i64::try_from(healthy).unwrap_or(i64::MAX)
}

/// The evictions allowed: `currentHealthy − desiredHealthy`, never negative, and 0 when no
/// pod is expected (so a budget whose pods appear before the controller's next pass is safe).
///
/// Mirrors the first lines of `updatePdbStatus`.
pub fn disruptions_allowed(current_healthy: i64, desired_healthy: i64, expected_pods: i64) -> i64 {
    let allowed = current_healthy - desired_healthy;
    if expected_pods <= 0 || allowed <= 0 {
        0
    } else {
        allowed
    }
}

/// The sum of the scales of the distinct controllers of `pods`, and the pods that have no
/// controller.
///
/// Mirrors `getExpectedScale` with its finders `getPodReplicaSet`, `getPodDeployment`,
/// `getPodReplicationController` and `getPodStatefulSet`: a ReplicaSet owned by a Deployment
/// counts as the Deployment (its scale, once however many ReplicaSets it has), an owner
/// reference must name the right API group (`apps` or `extensions`, `""` for a
/// ReplicationController) and, when both are known, the owner's uid.
pub fn expected_scale(
    pods: &[&Pod],
    workloads: &[Workload],
) -> Result<(i64, Vec<String>), DisruptionError> {
    let (owners, unmanaged) = scale_owners(pods, workloads)?;
    Ok((owners.iter().map(|owner| owner.replicas).sum(), unmanaged))
}

/// The distinct controllers whose scales [`expected_scale`] adds up (in a stable order), and
/// the pods that have no controller.
pub fn scale_owners<'a>(
    pods: &[&Pod],
    workloads: &'a [Workload],
) -> Result<(Vec<&'a Workload>, Vec<String>), DisruptionError> {
    let mut owners: BTreeMap<String, &'a Workload> = BTreeMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let Some(controller) = pod.metadata.controller() else {
            unmanaged.push(pod.metadata.name.clone());
            continue;
        };
        let namespace = pod.metadata.namespace();
        let Some(owner) = scale_owner(controller, namespace, workloads) else {
            return Err(DisruptionError::NoController {
                pod: pod.metadata.name.clone(),
                controller: format!("{}/{}", controller.kind, controller.name),
            });
        };
        owners.entry(identity(owner)).or_insert(owner);
    }
    Ok((owners.into_values().collect(), unmanaged))
}

/// The workloads `pods` belong to, each once, where their controllers are known (an integer
/// `minAvailable` counts pods and never asks, so an unknown controller is no error here).
fn pod_workloads<'a>(pods: &[&Pod], workloads: &'a [Workload]) -> Vec<&'a Workload> {
    let mut owners: BTreeMap<String, &'a Workload> = BTreeMap::new();
    for pod in pods {
        if let Some(owner) = pod
            .metadata
            .controller()
            .and_then(|controller| scale_owner(controller, pod.metadata.namespace(), workloads))
        {
            owners.entry(identity(owner)).or_insert(owner);
        }
    }
    owners.into_values().collect()
}

/// The workload whose scale stands for pods controlled by `controller`.
pub fn scale_owner<'a>(
    controller: &OwnerReference,
    namespace: &str,
    workloads: &'a [Workload],
) -> Option<&'a Workload> {
    let find = |kind: WorkloadKind, groups: &[&str], reference: &OwnerReference| {
        if reference.kind != kind.as_str() || !groups.contains(&reference.group()) {
            return None;
        }
        workloads.iter().find(|w| {
            w.kind == kind
                && w.metadata.namespace() == namespace
                && w.metadata.name == reference.name
                && same_uid(w.metadata.uid.as_deref(), &reference.uid)
        })
    };
    const APPS: &[&str] = &["apps", "extensions"];
    if let Some(replica_set) = find(WorkloadKind::ReplicaSet, APPS, controller) {
        return match replica_set.metadata.controller() {
            // getPodDeployment: the Deployment's scale, if it is there.
            Some(owner) if owner.kind == WorkloadKind::Deployment.as_str() => {
                find(WorkloadKind::Deployment, APPS, owner)
            }
            // getPodReplicaSet: a ReplicaSet of its own.
            _ => Some(replica_set),
        };
    }
    find(WorkloadKind::ReplicationController, &[""], controller)
        .or_else(|| find(WorkloadKind::StatefulSet, &["apps"], controller))
}

fn same_uid(object: Option<&str>, reference: &str) -> bool {
    match object {
        Some(uid) if !uid.is_empty() && !reference.is_empty() => uid == reference,
        _ => true,
    }
}

/// A key telling workloads apart: the uid when known, else kind, namespace and name.
fn identity(workload: &Workload) -> String {
    match workload.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_owned(),
        _ => format!(
            "{}/{}/{}",
            workload.kind.as_str(),
            workload.metadata.namespace(),
            workload.metadata.name
        ),
    }
}

/// The expected pods and the desired healthy pods of a budget over its selected `pods`.
///
/// Mirrors `getExpectedPodCount`: with `maxUnavailable`, the controllers' scale minus the
/// value scaled (rounded up) to it, never below 0; with an integer `minAvailable`, that
/// integer, and the number of selected pods as expected count; with a percentage
/// `minAvailable`, the percentage of the controllers' scale, rounded up. With neither field
/// both are 0.
pub fn expected_pod_count(
    budget: &PodDisruptionBudget,
    pods: &[&Pod],
    workloads: &[Workload],
) -> Result<(i64, i64, Vec<String>), DisruptionError> {
    if let Some(max_unavailable) = &budget.spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods, workloads)?;
        let max_unavailable = max_unavailable
            .scaled_value(expected, true)
            .map_err(DisruptionError::Value)?;
        let desired = (expected - max_unavailable).max(0);
        return Ok((expected, desired, unmanaged));
    }
    match &budget.spec.min_available {
        Some(IntOrString::Int(min_available)) => {
            let expected = i64::try_from(pods.len()).unwrap_or(i64::MAX);
            Ok((expected, *min_available, Vec::new()))
        }
        Some(min_available) => {
            let (expected, unmanaged) = expected_scale(pods, workloads)?;
            let desired = min_available
                .scaled_value(expected, true)
                .map_err(DisruptionError::Value)?;
            Ok((expected, desired, unmanaged))
        }
        None => Ok((0, 0, Vec::new())),
    }
}

/// The status the disruption controller would write for `budget` over `objects`.
///
/// Mirrors `trySync`: `getPodsForPdb`, `getExpectedPodCount`, `countHealthyPods`, then
/// `updatePdbStatus`.
pub fn compute(
    budget: &PodDisruptionBudget,
    objects: &ClusterObjects,
) -> Result<DisruptionStatus, DisruptionError> {
    let pods = pods_for_budget(budget, &objects.pods).map_err(DisruptionError::Selector)?;
    let (expected_pods, desired_healthy, unmanaged_pods) =
        expected_pod_count(budget, &pods, &objects.workloads)?;
    let current_healthy = count_healthy_pods(&pods);
    let expected_from = ExpectedFrom::of(&budget.spec);
    let workloads = match expected_from {
        // `expected_pod_count` succeeded, so every controller is known.
        ExpectedFrom::Replicas => scale_owners(&pods, &objects.workloads)?.0,
        ExpectedFrom::SelectedPods => pod_workloads(&pods, &objects.workloads),
        ExpectedFrom::Nothing => Vec::new(),
    };
    Ok(DisruptionStatus {
        expected_pods,
        desired_healthy,
        current_healthy,
        disruptions_allowed: disruptions_allowed(current_healthy, desired_healthy, expected_pods),
        unmanaged_pods,
        expected_from,
        workloads: workloads.into_iter().map(ScaleSource::of).collect(),
    })
}
