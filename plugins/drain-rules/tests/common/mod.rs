//! Builders for the tests: a cluster's objects in one line each.

#![allow(dead_code)]

use std::collections::BTreeMap;

use vigil_drain_rules::IntOrString;
use vigil_drain_rules::model::{
    ClusterObjects, Condition, LabelSelector, ObjectMeta, OwnerReference, PdbSpec, PdbStatus, Pod,
    PodDisruptionBudget, PodSpec, PodStatus, Workload, WorkloadKind,
};

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub fn foo_bar() -> BTreeMap<String, String> {
    labels(&[("foo", "bar")])
}

pub fn int(value: i64) -> Option<IntOrString> {
    Some(IntOrString::Int(value))
}

pub fn pct(text: &str) -> Option<IntOrString> {
    Some(IntOrString::String(text.to_owned()))
}

/// A budget in `default` selecting `foo=bar` (the disruption controller tests' `newSelFooBar`).
pub fn budget(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: "foobar".to_owned(),
            ..ObjectMeta::default()
        },
        spec: PdbSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(LabelSelector {
                match_labels: foo_bar(),
                match_expressions: Vec::new(),
            }),
            unhealthy_pod_eviction_policy: None,
        },
        status: None,
    }
}

pub fn with_status(mut budget: PodDisruptionBudget, status: [i64; 4]) -> PodDisruptionBudget {
    let [allowed, healthy, desired, expected] = status;
    budget.status = Some(PdbStatus {
        observed_generation: None,
        disruptions_allowed: allowed,
        current_healthy: healthy,
        desired_healthy: desired,
        expected_pods: expected,
        conditions: Vec::new(),
    });
    budget
}

pub fn policy(mut budget: PodDisruptionBudget, policy: &str) -> PodDisruptionBudget {
    budget.spec.unhealthy_pod_eviction_policy = Some(policy.to_owned());
    budget
}

/// A running, ready pod labelled `foo=bar` (the tests' `newPod`).
pub fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.to_owned(),
            labels: foo_bar(),
            ..ObjectMeta::default()
        },
        spec: PodSpec::default(),
        status: PodStatus {
            phase: Some("Running".to_owned()),
            conditions: vec![Condition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                reason: None,
            }],
        },
    }
}

pub fn not_ready(mut pod: Pod) -> Pod {
    pod.status.conditions.clear();
    pod
}

pub fn terminating(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp = Some("2025-06-01T00:00:00Z".to_owned());
    pod
}

pub fn phase(mut pod: Pod, phase: &str) -> Pod {
    pod.status.phase = Some(phase.to_owned());
    pod
}

pub fn on_node(mut pod: Pod, node: &str) -> Pod {
    pod.spec.node_name = Some(node.to_owned());
    pod
}

pub fn owned_by(mut pod: Pod, kind: WorkloadKind, name: &str) -> Pod {
    pod.metadata.owner_references = vec![controller_ref(kind, name)];
    pod
}

pub fn controller_ref(kind: WorkloadKind, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: if kind == WorkloadKind::ReplicationController {
            "v1".to_owned()
        } else {
            "apps/v1".to_owned()
        },
        kind: kind.as_str().to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        controller: Some(true),
    }
}

pub fn workload(kind: WorkloadKind, name: &str, replicas: i64) -> Workload {
    Workload {
        kind,
        metadata: ObjectMeta {
            name: name.to_owned(),
            uid: Some(format!("uid-{name}")),
            labels: foo_bar(),
            ..ObjectMeta::default()
        },
        replicas,
        template_labels: foo_bar(),
        template_spec: PodSpec::default(),
    }
}

/// A ReplicaSet owned by the Deployment `deployment`.
pub fn replica_set_of(name: &str, deployment: &str, replicas: i64) -> Workload {
    let mut rs = workload(WorkloadKind::ReplicaSet, name, replicas);
    rs.metadata.owner_references = vec![controller_ref(WorkloadKind::Deployment, deployment)];
    rs
}

pub fn cluster(
    budgets: Vec<PodDisruptionBudget>,
    pods: Vec<Pod>,
    workloads: Vec<Workload>,
) -> ClusterObjects {
    ClusterObjects {
        budgets,
        pods,
        workloads,
        nodes: Vec::new(),
    }
}

/// `replicas` pods of a Deployment `name` (through ReplicaSet `NAME-rs`), `ready` of them
/// ready, each on its own node.
pub fn deployment(name: &str, replicas: i64, ready: i64) -> (Vec<Pod>, Vec<Workload>) {
    let workloads = vec![
        workload(WorkloadKind::Deployment, name, replicas),
        replica_set_of(&format!("{name}-rs"), name, replicas),
    ];
    let pods = (0..replicas)
        .map(|i| {
            let pod = owned_by(
                pod(&format!("{name}-{i}")),
                WorkloadKind::ReplicaSet,
                &format!("{name}-rs"),
            );
            let pod = on_node(pod, &format!("node-{i}"));
            if i < ready { pod } else { not_ready(pod) }
        })
        .collect();
    (pods, workloads)
}
