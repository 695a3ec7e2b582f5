//! The Kubernetes objects the rules read, as serde types holding only the fields the rules
//! need, in the API's JSON shape (`camelCase`). Unknown fields are ignored, missing ones take
//! the API server's defaults where the rules depend on them, so the same types read what a
//! live API server returns and what a manifest file says.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::intstr::IntOrString;

/// `metadata` of an object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// The object's name.
    pub name: String,
    /// Its namespace; `None` in a manifest means the namespace it is applied to (`default`).
    pub namespace: Option<String>,
    /// Its uid (live objects only).
    pub uid: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Who owns it.
    pub owner_references: Vec<OwnerReference>,
    /// Set when the object is being deleted (a terminating pod).
    pub deletion_timestamp: Option<String>,
    /// The generation of its spec.
    pub generation: Option<i64>,
}

impl ObjectMeta {
    /// The namespace, `default` when none is written.
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }

    /// The owner reference with `controller: true`, as `metav1.GetControllerOf`.
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|owner| owner.controller == Some(true))
    }
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerReference {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `ReplicaSet`.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid (empty in manifests).
    pub uid: String,
    /// Whether this owner is the managing controller.
    pub controller: Option<bool>,
}

impl OwnerReference {
    /// The API group of `api_version` (`""` for the core group).
    pub fn group(&self) -> &str {
        match self.api_version.split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }
}

/// A label selector (`metav1.LabelSelector`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// `key: value` pairs, all of which must match.
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements, all of which must match.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values, for `In` and `NotIn`.
    pub values: Vec<String>,
}

/// A `policy/v1` PodDisruptionBudget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodDisruptionBudget {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// What it asks for.
    pub spec: PdbSpec,
    /// What the disruption controller last computed (live objects only).
    pub status: Option<PdbStatus>,
}

/// `spec` of a PodDisruptionBudget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PdbSpec {
    /// How many selected pods must stay available.
    pub min_available: Option<IntOrString>,
    /// How many selected pods may be unavailable.
    pub max_unavailable: Option<IntOrString>,
    /// Which pods it covers; `None` matches none, an empty selector every pod of the
    /// namespace.
    pub selector: Option<LabelSelector>,
    /// `IfHealthyBudget` (the default when unset) or `AlwaysAllow`.
    pub unhealthy_pod_eviction_policy: Option<String>,
}

/// `status` of a PodDisruptionBudget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PdbStatus {
    /// The generation the controller last saw.
    pub observed_generation: Option<i64>,
    /// How many evictions are allowed now.
    pub disruptions_allowed: i64,
    /// Healthy pods now.
    pub current_healthy: i64,
    /// Healthy pods wanted.
    pub desired_healthy: i64,
    /// Pods counted by the budget.
    pub expected_pods: i64,
    /// Conditions (`DisruptionAllowed`).
    pub conditions: Vec<Condition>,
}

/// A status condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    /// e.g. `Ready`, `DisruptionAllowed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: Option<String>,
}

/// A Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    pub spec: PodSpec,
    /// Its status.
    pub status: PodStatus,
}

impl Pod {
    /// Whether the pod's `Ready` condition is `True` (`podutil.IsPodReady`).
    pub fn is_ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }

    /// Whether the pod is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// The pod's phase, `Pending` when unset (the API server's default).
    pub fn phase(&self) -> &str {
        self.status.phase.as_deref().unwrap_or("Pending")
    }
}

/// `spec` of a Pod or of a pod template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// The node it runs on.
    pub node_name: Option<String>,
    /// Its topology spread constraints.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Its affinity.
    pub affinity: Option<Affinity>,
}

/// `status` of a Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: Option<String>,
    /// Conditions (`Ready`).
    pub conditions: Vec<Condition>,
}

/// One topology spread constraint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopologySpreadConstraint {
    /// The largest allowed difference between domains.
    pub max_skew: i64,
    /// The node label that defines a domain.
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// Which pods are counted.
    pub label_selector: Option<LabelSelector>,
    /// The least number of domains.
    pub min_domains: Option<i64>,
    /// Pod label keys whose values narrow the selector (`pod-template-hash`).
    pub match_label_keys: Vec<String>,
    /// `Honor` or `Ignore`; unset means `Honor`.
    pub node_affinity_policy: Option<String>,
    /// `Honor` or `Ignore`; unset means `Ignore`.
    pub node_taints_policy: Option<String>,
}

/// A pod's affinity (only what the rules read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Affinity {
    /// Anti-affinity between pods.
    pub pod_anti_affinity: Option<PodAntiAffinity>,
}

/// `podAntiAffinity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodAntiAffinity {
    /// The hard terms.
    pub required_during_scheduling_ignored_during_execution: Vec<PodAffinityTerm>,
}

/// One pod (anti-)affinity term.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodAffinityTerm {
    /// Which pods it is about.
    pub label_selector: Option<LabelSelector>,
    /// The domain.
    pub topology_key: String,
    /// The namespaces it looks in (empty: the pod's own).
    pub namespaces: Vec<String>,
}

/// The kinds of workload whose scale the disruption controller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `v1` ReplicationController.
    ReplicationController,
}

impl WorkloadKind {
    /// The kind's name, e.g. `Deployment`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::ReplicaSet => "ReplicaSet",
            Self::StatefulSet => "StatefulSet",
            Self::ReplicationController => "ReplicationController",
        }
    }

    /// The kind of a `kind` field, if it is a workload kind.
    pub fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            "Deployment" => Some(Self::Deployment),
            "ReplicaSet" => Some(Self::ReplicaSet),
            "StatefulSet" => Some(Self::StatefulSet),
            "ReplicationController" => Some(Self::ReplicationController),
            _ => None,
        }
    }
}

/// A Deployment, ReplicaSet, StatefulSet or ReplicationController.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Which kind.
    pub kind: WorkloadKind,
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// `spec.replicas` (the API server's default, 1, when unset).
    pub replicas: i64,
    /// The labels of its pod template.
    pub template_labels: BTreeMap<String, String>,
    /// The spec of its pod template.
    pub template_spec: PodSpec,
}

/// A workload as the API serves it (or a manifest declares it): the shape the four workload
/// kinds share, for reading them; [`Workload::from_object`] turns it into a [`Workload`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadObject {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    pub spec: WorkloadSpec,
}

/// `spec` of a workload (a ReplicationController's selector, a plain map, is not read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadSpec {
    /// `replicas`; unset means 1.
    pub replicas: Option<i64>,
    /// The pod template.
    pub template: PodTemplate,
}

/// A pod template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodTemplate {
    /// Its metadata (labels).
    pub metadata: ObjectMeta,
    /// Its pod spec.
    pub spec: PodSpec,
}

impl Workload {
    /// A workload from the JSON of an object of `kind`.
    pub fn from_value(kind: WorkloadKind, value: serde_json::Value) -> Result<Self, String> {
        let object: WorkloadObject =
            serde_json::from_value(value).map_err(|error| error.to_string())?;
        Ok(Self::from_object(kind, object))
    }

    /// A workload of `kind` from what the API served.
    pub fn from_object(kind: WorkloadKind, object: WorkloadObject) -> Self {
        Self {
            kind,
            metadata: object.metadata,
            replicas: object.spec.replicas.unwrap_or(1),
            template_labels: object.spec.template.metadata.labels,
            template_spec: object.spec.template.spec,
        }
    }
}

/// A Node (only what the rules read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    /// Its metadata.
    pub metadata: ObjectMeta,
}

/// Everything an audit reads: a live cluster's objects, or what manifests declare.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    /// The budgets.
    pub budgets: Vec<PodDisruptionBudget>,
    /// The pods (for manifests: one per replica, running and ready, made up from each
    /// workload's template).
    pub pods: Vec<Pod>,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// The nodes.
    pub nodes: Vec<Node>,
}
