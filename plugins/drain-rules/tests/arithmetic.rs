//! The disruption controller's arithmetic and the eviction API's rules, case by case: the
//! cases of Kubernetes' own tests (each citing its origin in
//! `pkg/controller/disruption/disruption_test.go`), then the article's.

mod common;

use common::*;
use vigil_drain_rules::disruption::{self, DisruptionError};
use vigil_drain_rules::eviction::{Eviction, evict};
use vigil_drain_rules::model::{LabelSelector, Pod, PodDisruptionBudget, Workload, WorkloadKind};

/// The status the controller would write, as `VerifyPdbStatus` reads it:
/// `[disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods]`.
fn status(budget: PodDisruptionBudget, pods: Vec<Pod>, workloads: Vec<Workload>) -> [i64; 4] {
    let objects = cluster(vec![budget], pods, workloads);
    match disruption::compute(&objects.budgets[0], &objects) {
        Ok(s) => [
            s.disruptions_allowed,
            s.current_healthy,
            s.desired_healthy,
            s.expected_pods,
        ],
        Err(error) => panic!("no status: {error}"),
    }
}

fn check(
    case: &str,
    budget: PodDisruptionBudget,
    pods: Vec<Pod>,
    workloads: Vec<Workload>,
    expected: [i64; 4],
) {
    assert_eq!(status(budget, pods, workloads), expected, "{case}");
}

fn pods(n: usize) -> Vec<Pod> {
    (0..n).map(|i| pod(&format!("yo-yo-yo {i}"))).collect()
}

fn owned(n: usize, kind: WorkloadKind, owner: &str) -> Vec<Pod> {
    (0..n)
        .map(|i| owned_by(pod(&format!("{owner} {i}")), kind, owner))
        .collect()
}

#[test]
fn kubernetes_disruption_controller_cases() {
    use WorkloadKind::*;
    // TestNoSelector: an empty selector selects every pod of the namespace.
    let mut empty = budget(int(3), None);
    empty.spec.selector = Some(LabelSelector::default());
    check(
        "TestNoSelector, no pod",
        empty.clone(),
        vec![],
        vec![],
        [0, 0, 3, 0],
    );
    let mut unlabelled = pod("yo-yo-yo");
    unlabelled.metadata.labels.clear();
    check(
        "TestNoSelector, one pod",
        empty,
        vec![unlabelled],
        vec![],
        [0, 1, 3, 1],
    );

    // TestUnavailable: minAvailable 3, pods added one by one, then one made unavailable.
    for n in 0..4 {
        let n64 = i64::try_from(n).expect("small");
        check(
            "TestUnavailable, adding",
            budget(int(3), None),
            pods(n),
            vec![],
            [0, n64, 3, n64],
        );
    }
    check(
        "TestUnavailable, 4 pods",
        budget(int(3), None),
        pods(4),
        vec![],
        [1, 4, 3, 4],
    );
    let mut three_ready = pods(4);
    three_ready[0] = not_ready(three_ready[0].clone());
    check(
        "TestUnavailable, one unavailable",
        budget(int(3), None),
        three_ready,
        vec![],
        [0, 3, 3, 4],
    );

    // TestIntegerMaxUnavailable: a pod with no controller is not expected.
    check(
        "TestIntegerMaxUnavailable",
        budget(None, int(1)),
        vec![pod("naked")],
        vec![],
        [0, 1, 0, 0],
    );

    // TestIntegerMaxUnavailableWithScaling: maxUnavailable 2 on a ReplicaSet of 7, then 5.
    let rs = |n| vec![workload(ReplicaSet, "rs", n)];
    check(
        "TestIntegerMaxUnavailableWithScaling, 7",
        budget(None, int(2)),
        owned(1, ReplicaSet, "rs"),
        rs(7),
        [0, 1, 5, 7],
    );
    check(
        "TestIntegerMaxUnavailableWithScaling, 5",
        budget(None, int(2)),
        owned(1, ReplicaSet, "rs"),
        rs(5),
        [0, 1, 3, 5],
    );

    // TestPercentageMaxUnavailableWithScaling: 30% of 7 rounds up to 3, of 3 to 1.
    check(
        "TestPercentageMaxUnavailableWithScaling, 7",
        budget(None, pct("30%")),
        owned(1, ReplicaSet, "rs"),
        rs(7),
        [0, 1, 4, 7],
    );
    check(
        "TestPercentageMaxUnavailableWithScaling, 3",
        budget(None, pct("30%")),
        owned(1, ReplicaSet, "rs"),
        rs(3),
        [0, 1, 2, 3],
    );

    // TestNakedPod / TestStatusForUnmanagedPod: a percentage over unmanaged pods expects none.
    check(
        "TestNakedPod",
        budget(pct("28%"), None),
        vec![pod("naked")],
        vec![],
        [0, 1, 0, 0],
    );

    // TestReplicaSet: a ReplicaSet without a Deployment counts its own scale.
    check(
        "TestReplicaSet",
        budget(pct("20%"), None),
        owned(1, ReplicaSet, "rs"),
        rs(10),
        [0, 1, 2, 10],
    );

    // TestReplicationController and TestStatefulSetController: 34% of 3 rounds up to 2.
    for kind in [ReplicationController, StatefulSet] {
        let owner = vec![workload(kind, "foobar", 3)];
        for n in 1..=2 {
            let n64 = i64::try_from(n).expect("small");
            check(
                "TestReplicationController/TestStatefulSetController",
                budget(pct("34%"), None),
                owned(n, kind, "foobar"),
                owner.clone(),
                [0, n64, 2, 3],
            );
        }
        check(
            "TestReplicationController/TestStatefulSetController, 3",
            budget(pct("34%"), None),
            owned(3, kind, "foobar"),
            owner.clone(),
            [1, 3, 2, 3],
        );
    }
    // TestReplicationController: a rogue pod with no controller counts as healthy only.
    let mut with_rogue = owned(3, ReplicationController, "foobar");
    with_rogue.push(pod("rogue"));
    check(
        "TestReplicationController, rogue",
        budget(pct("34%"), None),
        with_rogue,
        vec![workload(ReplicationController, "foobar", 3)],
        [2, 4, 2, 3],
    );

    // TestTwoControllers: 28% over an RC of 11, then also 11 pods of a second controller: 4 of
    // 11 desired, then 7 of 22. Kubernetes' test uses a bare ReplicaSet of 11; here its
    // ReplicaSet belongs to a Deployment of 11, whose scale counts instead of the ReplicaSet's.
    let mut rc_pods = owned(11, ReplicationController, "rc");
    for pod in rc_pods.iter_mut().take(6) {
        *pod = not_ready(pod.clone());
    }
    let rc = workload(ReplicationController, "rc", 11);
    check(
        "TestTwoControllers, RC",
        budget(pct("28%"), None),
        rc_pods.clone(),
        vec![rc.clone()],
        [1, 5, 4, 11],
    );
    let mut all = rc_pods;
    let mut d_pods = owned(11, ReplicaSet, "d-rs");
    for pod in d_pods.iter_mut().take(7) {
        *pod = not_ready(pod.clone());
    }
    all.extend(d_pods);
    let two = vec![
        rc,
        workload(Deployment, "d", 11),
        replica_set_of("d-rs", "d", 5),
    ];
    check(
        "TestTwoControllers, both",
        budget(pct("28%"), None),
        all.clone(),
        two.clone(),
        [2, 9, 7, 22],
    );
    all[10] = not_ready(all[10].clone());
    check(
        "TestTwoControllers, one down",
        budget(pct("28%"), None),
        all.clone(),
        two.clone(),
        [1, 8, 7, 22],
    );
    all[9] = not_ready(all[9].clone());
    check(
        "TestTwoControllers, two down",
        budget(pct("28%"), None),
        all,
        two,
        [0, 7, 7, 22],
    );

    // TestUpdateDisruptedPods (without its disrupted-pods map): a terminating pod is expected
    // (integer minAvailable counts selected pods) but not healthy.
    let p = vec![terminating(pod("p1")), pod("p2"), pod("p3")];
    check(
        "TestUpdateDisruptedPods",
        budget(int(1), None),
        p,
        vec![],
        [1, 2, 1, 3],
    );
}

#[test]
fn an_unknown_controller_makes_the_budget_uncomputable() {
    // TestUnsupportedControllerPod: a pod of a custom controller whose scale is unknown.
    let mut custom = pod("naked");
    custom.metadata.owner_references = vec![vigil_drain_rules::model::OwnerReference {
        api_version: "apps.test.io/v1".to_owned(),
        kind: "TestWorkload".to_owned(),
        name: "fake-controller".to_owned(),
        uid: "b7329742".to_owned(),
        controller: Some(true),
    }];
    let b = budget(pct("28%"), None);
    let objects = cluster(vec![b.clone()], vec![custom], vec![]);
    assert_eq!(
        disruption::compute(&b, &objects),
        Err(DisruptionError::NoController {
            pod: "naked".to_owned(),
            controller: "TestWorkload/fake-controller".to_owned()
        })
    );
}

#[test]
fn owner_references_must_name_the_right_group_and_uid() {
    // TestBasicFinderFunctions / TestDeploymentFinderFunction: a wrong group or a stale uid
    // finds no controller.
    let b = budget(None, int(1));
    let mut wrong_group = owned_by(pod("p"), WorkloadKind::ReplicaSet, "rs");
    wrong_group.metadata.owner_references[0].api_version = "invalid/v1".to_owned();
    let objects = cluster(
        vec![b.clone()],
        vec![wrong_group],
        vec![workload(WorkloadKind::ReplicaSet, "rs", 10)],
    );
    assert!(disruption::compute(&b, &objects).is_err());
    let mut stale = owned_by(pod("p"), WorkloadKind::ReplicaSet, "rs");
    stale.metadata.owner_references[0].uid = "uid-older".to_owned();
    let objects = cluster(
        vec![b.clone()],
        vec![stale],
        vec![workload(WorkloadKind::ReplicaSet, "rs", 10)],
    );
    assert!(disruption::compute(&b, &objects).is_err());
    let good = owned_by(pod("p"), WorkloadKind::ReplicaSet, "rs");
    let objects = cluster(
        vec![b.clone()],
        vec![good],
        vec![workload(WorkloadKind::ReplicaSet, "rs", 10)],
    );
    assert_eq!(
        disruption::compute(&b, &objects).map(|s| s.expected_pods),
        Ok(10)
    );
}

#[test]
fn a_nil_selector_selects_nothing() {
    let mut nil = budget(int(1), None);
    nil.spec.selector = None;
    check("nil selector", nil, pods(3), vec![], [0, 0, 1, 0]);
}

#[test]
fn other_namespaces_are_not_selected() {
    let mut elsewhere = pod("elsewhere");
    elsewhere.metadata.namespace = Some("other".to_owned());
    check(
        "namespace",
        budget(int(0), None),
        vec![elsewhere, pod("here")],
        vec![],
        [1, 1, 0, 1],
    );
}

#[test]
fn the_articles_cases() {
    // minAvailable 3 on 3 pods: no margin, ever.
    let (p, w) = deployment("api", 3, 3);
    check("3 of 3", budget(int(3), None), p, w, [0, 3, 3, 3]);
    // maxUnavailable 10% gives 1 on 3 replicas and 1 on 5.
    let (p, w) = deployment("api", 3, 3);
    check("10% of 3", budget(None, pct("10%")), p, w, [1, 3, 2, 3]);
    let (p, w) = deployment("api", 5, 5);
    check("10% of 5", budget(None, pct("10%")), p, w, [1, 5, 4, 5]);
    // 3 replicas, maxUnavailable 1, 2 pods in CrashLoopBackOff: the budget is exhausted.
    let (p, w) = deployment("api", 3, 1);
    check(
        "2 of 3 crash-looping",
        budget(None, int(1)),
        p,
        w,
        [0, 1, 2, 3],
    );
    // minAvailable 4 on a deployment scaled from 6 to 4.
    let (p, w) = deployment("api", 6, 6);
    check(
        "minAvailable 4 of 6",
        budget(int(4), None),
        p,
        w,
        [2, 6, 4, 6],
    );
    let (p, w) = deployment("api", 4, 4);
    check(
        "minAvailable 4 of 4",
        budget(int(4), None),
        p,
        w,
        [0, 4, 4, 4],
    );
    // An orphan budget: nothing expected, nothing allowed.
    let (mut p, w) = deployment("api", 3, 3);
    for pod in &mut p {
        pod.metadata.labels = labels(&[("app", "renamed")]);
    }
    check("orphan", budget(None, int(1)), p, w, [0, 0, 0, 0]);
    // minAvailable 1 on a single replica.
    let (p, w) = deployment("api", 1, 1);
    check("single replica", budget(int(1), None), p, w, [0, 1, 1, 1]);
}

#[test]
fn the_eviction_api_under_both_policies() {
    // The article's broken deployment: 3 replicas, maxUnavailable 1, 2 pods crash-looping.
    let (pods, _) = deployment("api", 3, 1);
    let exhausted = with_status(budget(None, int(1)), [0, 1, 2, 3]);
    let (healthy, broken) = (&pods[0], &pods[1]);
    // IfHealthyBudget (the default): the budget is short, so even the broken pods stay.
    assert_eq!(
        evict(healthy, std::slice::from_ref(&exhausted)),
        Eviction::Refused {
            budget: "foobar".into()
        }
    );
    assert_eq!(
        evict(broken, std::slice::from_ref(&exhausted)),
        Eviction::Refused {
            budget: "foobar".into()
        }
    );
    let explicit = policy(exhausted.clone(), "IfHealthyBudget");
    assert_eq!(
        evict(broken, std::slice::from_ref(&explicit)),
        Eviction::Refused {
            budget: "foobar".into()
        }
    );
    // AlwaysAllow: the broken pods go; the healthy one is still protected.
    let always = policy(exhausted, "AlwaysAllow");
    assert_eq!(
        evict(broken, std::slice::from_ref(&always)),
        Eviction::UnhealthyAllowed
    );
    assert_eq!(
        evict(healthy, std::slice::from_ref(&always)),
        Eviction::Refused {
            budget: "foobar".into()
        }
    );
    // IfHealthyBudget lets a not-ready pod go when the budget is satisfied.
    let satisfied = with_status(budget(None, int(1)), [1, 2, 2, 3]);
    assert_eq!(
        evict(broken, std::slice::from_ref(&satisfied)),
        Eviction::UnhealthyAllowed
    );
    assert_eq!(
        evict(healthy, std::slice::from_ref(&satisfied)),
        Eviction::Allowed
    );
}

#[test]
fn the_eviction_api_ignores_budgets_for_pods_not_running_and_refuses_two() {
    let zero = with_status(budget(int(3), None), [0, 3, 3, 3]);
    for phase_name in ["Pending", "Succeeded", "Failed"] {
        assert_eq!(
            evict(&phase(pod("p"), phase_name), std::slice::from_ref(&zero)),
            Eviction::IgnoresBudgets,
            "{phase_name}"
        );
    }
    assert_eq!(
        evict(&terminating(pod("p")), std::slice::from_ref(&zero)),
        Eviction::IgnoresBudgets
    );
    let mut other = pod("p");
    other.metadata.labels = labels(&[("app", "other")]);
    assert_eq!(
        evict(&other, std::slice::from_ref(&zero)),
        Eviction::NoBudget
    );
    let mut second = with_status(budget(None, int(1)), [1, 3, 2, 3]);
    second.metadata.name = "second".to_owned();
    assert_eq!(
        evict(&pod("p"), &[zero, second]),
        Eviction::MultipleBudgets {
            budgets: vec!["foobar".into(), "second".into()]
        }
    );
    // A status older than the spec refuses (checkAndDecrement: ObservedGeneration < Generation).
    let mut stale = with_status(budget(None, int(1)), [1, 3, 2, 3]);
    stale.metadata.generation = Some(2);
    stale.status.as_mut().expect("status").observed_generation = Some(1);
    assert_eq!(
        evict(&pod("p"), &[stale]),
        Eviction::Refused {
            budget: "foobar".into()
        }
    );
}
