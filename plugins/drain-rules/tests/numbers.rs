//! The numbers behind a budget's findings: the disruption controller's four counts, where
//! they come from (the live status or the arithmetic), how the expected pods were counted,
//! and the workloads whose `replicas` they came from. One line of data per case.

mod common;

use common::*;
use vigil_drain_rules::model::{ClusterObjects, WorkloadKind};
use vigil_drain_rules::{
    BudgetNumbers, ExpectedPods, NumbersFrom, Source, WorkloadReplicas, audit, codes,
};

/// The numbers of every finding on budget `foobar`, which must all be the same.
fn numbers(objects: &ClusterObjects, source: Source) -> Option<BudgetNumbers> {
    let found = audit(objects, source);
    let on_budget: Vec<_> = found
        .iter()
        .filter(|f| f.objects[0].kind == "PodDisruptionBudget")
        .collect();
    assert!(
        !on_budget.is_empty(),
        "no finding on the budget: {found:#?}"
    );
    for finding in &on_budget {
        assert_eq!(finding.numbers, on_budget[0].numbers, "{found:#?}");
    }
    on_budget[0].numbers.clone()
}

fn replicas(kind: WorkloadKind, name: &str, replicas: i64) -> WorkloadReplicas {
    WorkloadReplicas {
        kind: kind.as_str(),
        namespace: "default".to_owned(),
        name: name.to_owned(),
        replicas,
    }
}

/// `(expected, desired, healthy, allowed)`, where from, how counted, the workloads.
fn check(
    case: &str,
    objects: &ClusterObjects,
    source: Source,
    counts: [i64; 4],
    from: NumbersFrom,
    expected_from: ExpectedPods,
    workloads: &[WorkloadReplicas],
) {
    let [
        expected_pods,
        desired_healthy,
        current_healthy,
        disruptions_allowed,
    ] = counts;
    assert_eq!(
        numbers(objects, source),
        Some(BudgetNumbers {
            expected_pods,
            desired_healthy,
            current_healthy,
            disruptions_allowed,
            from,
            expected_from,
            workloads: workloads.to_vec(),
        }),
        "{case}"
    );
}

fn deployed(budget: vigil_drain_rules::model::PodDisruptionBudget, n: i64) -> ClusterObjects {
    let (pods, workloads) = deployment("web", n, n);
    cluster(vec![budget], pods, workloads)
}

/// A case: its name, the objects, `(expected, desired, healthy, allowed)`, how the expected
/// pods are counted, and the workloads they come from.
type Case<'a> = (
    &'a str,
    ClusterObjects,
    [i64; 4],
    ExpectedPods,
    &'a [WorkloadReplicas],
);

#[test]
fn each_way_of_counting_names_the_replicas_it_came_from() {
    use ExpectedPods::{Nothing, Replicas, SelectedPods};
    use NumbersFrom::Computed;
    let web = |n| [replicas(WorkloadKind::Deployment, "web", n)];
    #[rustfmt::skip]
    let cases: [Case; 5] = [
        ("minAvailable 3 of 3", deployed(budget(int(3), None), 3), [3, 3, 3, 0], SelectedPods, &web(3)),
        ("maxUnavailable 1 of 3", deployed(budget(None, int(1)), 3), [3, 2, 3, 1], Replicas, &web(3)),
        ("minAvailable 50% of 3", deployed(budget(pct("50%"), None), 3), [3, 2, 3, 1], Replicas, &web(3)),
        ("maxUnavailable 0 of 2", deployed(budget(None, int(0)), 2), [2, 2, 2, 0], Replicas, &web(2)),
        ("neither field", deployed(budget(None, None), 2), [0, 0, 2, 0], Nothing, &[]),
    ];
    for (case, objects, counts, expected_from, workloads) in cases {
        check(
            case,
            &objects,
            Source::Manifests,
            counts,
            Computed,
            expected_from,
            workloads,
        );
    }
}

#[test]
fn replicas_of_several_controllers_add_up() {
    let (mut pods, mut workloads) = deployment("web", 2, 2);
    let (more_pods, more_workloads) = deployment("api", 3, 3);
    pods.extend(more_pods);
    workloads.extend(more_workloads);
    let objects = cluster(vec![budget(None, int(1))], pods, workloads);
    check(
        "two Deployments under one budget",
        &objects,
        Source::Live,
        [5, 4, 5, 1],
        NumbersFrom::Computed,
        ExpectedPods::Replicas,
        &[
            replicas(WorkloadKind::Deployment, "api", 3),
            replicas(WorkloadKind::Deployment, "web", 2),
        ],
    );
}

#[test]
fn a_live_budget_goes_by_its_status() {
    // The status says 0 allowed where the arithmetic gives 1: the finding and its numbers
    // follow the status, as the eviction API does.
    let objects = deployed(with_status(budget(None, int(1)), [0, 2, 2, 3]), 3);
    let found = audit(&objects, Source::Live);
    assert!(
        found.iter().any(|f| f.code == codes::ZERO_DISRUPTIONS),
        "{found:#?}"
    );
    check(
        "stale status",
        &objects,
        Source::Live,
        [3, 2, 2, 0],
        NumbersFrom::Status,
        ExpectedPods::Replicas,
        &[replicas(WorkloadKind::Deployment, "web", 3)],
    );
}

#[test]
fn manifests_count_the_replicas_written_in_the_files() {
    let mut manifests = vigil_drain_rules::Manifests::new();
    manifests.add(
        "web.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: shop}\nspec:\n  minAvailable: 3\n  selector: {matchLabels: {app: web}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n",
    );
    assert_eq!(manifests.problems, vec![]);
    let found = audit(&manifests.objects, Source::Manifests);
    let zero = found
        .iter()
        .find(|f| f.code == codes::ZERO_DISRUPTIONS)
        .expect("minAvailable 3 of 3 blocks");
    assert_eq!(
        zero.numbers,
        Some(BudgetNumbers {
            expected_pods: 3,
            desired_healthy: 3,
            current_healthy: 3,
            disruptions_allowed: 0,
            from: NumbersFrom::Computed,
            expected_from: ExpectedPods::SelectedPods,
            workloads: vec![WorkloadReplicas {
                kind: "Deployment",
                namespace: "shop".to_owned(),
                name: "web".to_owned(),
                replicas: 3,
            }],
        })
    );
    // Findings about workloads alone carry no budget numbers.
    let spread = found
        .iter()
        .find(|f| f.code == codes::NO_HOSTNAME_SPREAD)
        .expect("no hostname spread");
    assert_eq!(spread.numbers, None);
}

#[test]
fn an_invalid_or_uncomputable_budget_has_no_numbers() {
    let objects = deployed(budget(int(1), int(1)), 2);
    let found = audit(&objects, Source::Manifests);
    assert_eq!(found[0].code, codes::INVALID, "{found:#?}");
    assert_eq!(found[0].numbers, None);

    // Pods of a controller whose scale is unknown: maxUnavailable cannot be computed.
    let pods = vec![owned_by(pod("p"), WorkloadKind::StatefulSet, "gone")];
    let objects = cluster(vec![budget(None, int(1))], pods, Vec::new());
    let found = audit(&objects, Source::Manifests);
    let uncomputable = found
        .iter()
        .find(|f| f.code == codes::UNCOMPUTABLE)
        .expect("uncomputable");
    assert_eq!(uncomputable.numbers, None, "{found:#?}");
}
