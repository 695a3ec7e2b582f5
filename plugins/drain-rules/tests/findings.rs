//! The findings, one family per test: which codes (with severity) an audit reports for the
//! article's cases and for each pitfall, and nothing else.

mod common;

use common::*;
use vigil_drain_rules::model::{
    ClusterObjects, LabelSelector, PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint,
    Workload,
};
use vigil_drain_rules::{Manifests, Severity, Source, audit, codes};

/// The codes and severities of an audit, sorted as the audit sorts them.
fn findings(objects: &ClusterObjects, source: Source) -> Vec<(&'static str, Severity)> {
    audit(objects, source)
        .into_iter()
        .map(|f| (f.code, f.severity))
        .collect()
}

fn check(case: &str, objects: &ClusterObjects, source: Source, expected: &[(&str, Severity)]) {
    let got = findings(objects, source);
    let expected: Vec<(&str, Severity)> = expected.to_vec();
    assert_eq!(got, expected, "{case}: {:#?}", audit(objects, source));
}

/// A clean spread: hostname DoNotSchedule, zone ScheduleAnyway, both with matchLabelKeys
/// and nodeTaintsPolicy Honor, nodeAffinityPolicy unset.
fn spread() -> Vec<TopologySpreadConstraint> {
    let constraint = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_owned(),
        when_unsatisfiable: when.to_owned(),
        label_selector: Some(LabelSelector {
            match_labels: foo_bar(),
            match_expressions: Vec::new(),
        }),
        min_domains: None,
        match_label_keys: vec!["pod-template-hash".to_owned()],
        node_affinity_policy: None,
        node_taints_policy: Some("Honor".to_owned()),
    };
    vec![
        constraint("kubernetes.io/hostname", "DoNotSchedule"),
        constraint("topology.kubernetes.io/zone", "ScheduleAnyway"),
    ]
}

fn with_spread(
    mut workloads: Vec<Workload>,
    constraints: &[TopologySpreadConstraint],
) -> Vec<Workload> {
    for w in &mut workloads {
        w.template_spec.topology_spread_constraints = constraints.to_vec();
    }
    workloads
}

/// A live Deployment of `replicas` with `ready` ready pods, a clean spread, and `budget`
/// whose status the controller computed (so no mismatch).
fn live(
    budget: vigil_drain_rules::model::PodDisruptionBudget,
    replicas: i64,
    ready: i64,
) -> ClusterObjects {
    let (pods, workloads) = deployment("api", replicas, ready);
    let workloads = with_spread(workloads, &spread());
    let mut objects = cluster(vec![budget.clone()], pods, workloads);
    let computed = vigil_drain_rules::disruption::compute(&budget, &objects).expect("computes");
    objects.budgets[0] = with_status(
        budget,
        [
            computed.disruptions_allowed,
            computed.current_healthy,
            computed.desired_healthy,
            computed.expected_pods,
        ],
    );
    objects
}

use Severity::{Blocking, Info, Warning};

#[test]
fn a_clean_cluster_has_no_finding() {
    let objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
    check("clean", &objects, Source::Live, &[]);
}

#[test]
fn the_articles_zero_disruption_budgets_block() {
    let always = |b| policy(b, "AlwaysAllow");
    check(
        "minAvailable 3 of 3",
        &live(always(budget(int(3), None)), 3, 3),
        Source::Live,
        &[
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::INTEGER_MIN_AVAILABLE, Warning),
        ],
    );
    check(
        "maxUnavailable 0",
        &live(always(budget(None, int(0))), 3, 3),
        Source::Live,
        &[(codes::ZERO_DISRUPTIONS, Blocking)],
    );
    check(
        "maxUnavailable 0%",
        &live(always(budget(None, pct("0%"))), 3, 3),
        Source::Live,
        &[(codes::ZERO_DISRUPTIONS, Blocking)],
    );
    check(
        "minAvailable 1 on one replica",
        &live(always(budget(int(1), None)), 1, 1),
        Source::Live,
        &[
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::INTEGER_MIN_AVAILABLE, Warning),
        ],
    );
    check(
        "minAvailable 4 after scaling 6 to 4",
        &live(always(budget(int(4), None)), 4, 4),
        Source::Live,
        &[
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::INTEGER_MIN_AVAILABLE, Warning),
        ],
    );
    check(
        "minAvailable 4 before, at 6",
        &live(always(budget(int(4), None)), 6, 6),
        Source::Live,
        &[(codes::INTEGER_MIN_AVAILABLE, Warning)],
    );
}

#[test]
fn the_cause_is_named() {
    let message = |objects: &ClusterObjects| {
        audit(objects, Source::Live)
            .into_iter()
            .find(|f| f.code == codes::ZERO_DISRUPTIONS)
            .map(|f| f.message)
            .expect("a zero-disruptions finding")
    };
    let always = |b| policy(b, "AlwaysAllow");
    assert!(
        message(&live(always(budget(int(3), None)), 3, 3))
            .contains("wants 3 healthy pods out of 3 expected")
    );
    assert!(message(&live(always(budget(None, int(0))), 3, 3)).contains("maxUnavailable is 0"));
    assert!(
        message(&live(always(budget(int(1), None)), 1, 1))
            .contains("minAvailable 1 on a single replica")
    );
    assert!(
        message(&live(always(budget(None, int(1))), 3, 1))
            .contains("exhausted by 2 not-ready pods")
    );
}

#[test]
fn crash_looping_pods_under_both_policies() {
    // 3 replicas, maxUnavailable 1, 2 pods not ready: the budget is exhausted either way;
    // under IfHealthyBudget the not-ready stateless pods are also flagged.
    check(
        "IfHealthyBudget",
        &live(budget(None, int(1)), 3, 1),
        Source::Live,
        &[
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::UNHEALTHY_POLICY, Warning),
        ],
    );
    check(
        "AlwaysAllow",
        &live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 1),
        Source::Live,
        &[(codes::ZERO_DISRUPTIONS, Blocking)],
    );
    check(
        "IfHealthyBudget, all ready",
        &live(budget(None, int(1)), 3, 3),
        Source::Live,
        &[(codes::UNHEALTHY_POLICY, Info)],
    );
}

#[test]
fn an_orphan_budget_is_only_a_warning() {
    let mut objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
    for pod in &mut objects.pods {
        pod.metadata.labels = labels(&[("app", "renamed")]);
    }
    objects.budgets[0] = with_status(objects.budgets[0].clone(), [0, 0, 0, 0]);
    check(
        "orphan",
        &objects,
        Source::Live,
        &[(codes::ORPHAN, Warning)],
    );
}

#[test]
fn percentages_on_few_pods_are_explained() {
    for replicas in [3, 5] {
        let objects = live(
            policy(budget(None, pct("10%")), "AlwaysAllow"),
            replicas,
            replicas,
        );
        check(
            "10%",
            &objects,
            Source::Live,
            &[(codes::PERCENT_ROUNDING, Info)],
        );
        let finding = audit(&objects, Source::Live).remove(0);
        assert!(
            finding
                .message
                .contains(&format!("10% of {replicas} pods rounds up to 1")),
            "{}",
            finding.message
        );
    }
    // 50% of 4 is exact: nothing to say.
    check(
        "50% of 4",
        &live(policy(budget(None, pct("50%")), "AlwaysAllow"), 4, 4),
        Source::Live,
        &[],
    );
}

#[test]
fn two_budgets_on_one_pod_block() {
    let mut objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
    let mut second = objects.budgets[0].clone();
    second.metadata.name = "second".to_owned();
    objects.budgets.push(second);
    check(
        "two budgets",
        &objects,
        Source::Live,
        &[(codes::MULTIPLE_BUDGETS, Blocking)],
    );
}

#[test]
fn a_status_that_disagrees_is_reported() {
    let mut objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
    objects.budgets[0] = with_status(objects.budgets[0].clone(), [0, 2, 2, 3]);
    // The status is the truth: 0 allowed blocks, and the disagreement is reported.
    check(
        "mismatch",
        &objects,
        Source::Live,
        &[
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::STATUS_MISMATCH, Warning),
        ],
    );
}

#[test]
fn pods_stacked_on_one_node_are_reported() {
    let mut objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
    for pod in &mut objects.pods {
        pod.spec.node_name = Some("node-0".to_owned());
    }
    check(
        "stacked",
        &objects,
        Source::Live,
        &[(codes::PODS_PER_NODE, Warning)],
    );
}

#[test]
fn spread_pitfalls() {
    let run = |constraints: Vec<TopologySpreadConstraint>| {
        let mut objects = live(policy(budget(None, int(1)), "AlwaysAllow"), 3, 3);
        for w in &mut objects.workloads {
            w.template_spec.topology_spread_constraints = constraints.clone();
        }
        objects
    };
    check(
        "no spread",
        &run(vec![]),
        Source::Live,
        &[(codes::NO_HOSTNAME_SPREAD, Warning)],
    );

    let mut zone_hard = spread();
    zone_hard[1].when_unsatisfiable = "DoNotSchedule".to_owned();
    check(
        "zone DoNotSchedule",
        &run(zone_hard),
        Source::Live,
        &[(codes::ZONE_DO_NOT_SCHEDULE, Warning)],
    );

    let mut min_domains = spread();
    min_domains[1].min_domains = Some(3);
    check(
        "minDomains, manifests",
        &run(min_domains.clone()),
        Source::Manifests,
        &[(codes::MIN_DOMAINS_WITHOUT_DO_NOT_SCHEDULE, Blocking)],
    );
    check("minDomains, live", &run(min_domains), Source::Live, &[]);

    let mut no_keys = spread();
    no_keys[0].match_label_keys.clear();
    check(
        "no matchLabelKeys",
        &run(no_keys),
        Source::Live,
        &[(codes::NO_MATCH_LABEL_KEYS, Warning)],
    );

    let mut taints = spread();
    taints[0].node_taints_policy = None;
    taints[1].node_taints_policy = Some("Ignore".to_owned());
    check(
        "taints ignored",
        &run(taints),
        Source::Live,
        &[
            (codes::NODE_TAINTS_IGNORED, Info),
            (codes::NODE_TAINTS_IGNORED, Info),
        ],
    );

    // nodeAffinityPolicy unset means Honor: nothing to report.
    let mut affinity = spread();
    affinity[0].node_affinity_policy = None;
    check(
        "nodeAffinityPolicy unset",
        &run(affinity),
        Source::Live,
        &[],
    );

    let mut objects = run(vec![]);
    for w in &mut objects.workloads {
        w.template_spec.affinity = Some(vigil_drain_rules::model::Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: vec![PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: foo_bar(),
                        match_expressions: Vec::new(),
                    }),
                    topology_key: "kubernetes.io/hostname".to_owned(),
                    namespaces: Vec::new(),
                }],
            }),
        });
    }
    check(
        "self anti-affinity",
        &objects,
        Source::Live,
        &[(codes::SELF_ANTI_AFFINITY, Warning)],
    );
}

#[test]
fn manifests_are_audited_with_replicas_from_the_files() {
    let mut manifests = Manifests::new();
    manifests.add(
        "chart.yaml",
        "# Source: chart/templates/pdb.yaml\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: api}}\n---\n# empty\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {containers: [{name: a, image: a}]}\n",
    );
    assert_eq!(manifests.problems, vec![]);
    assert_eq!(manifests.objects_read, 2);
    let found = findings(&manifests.objects, Source::Manifests);
    assert_eq!(
        found,
        vec![
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::INTEGER_MIN_AVAILABLE, Warning),
            (codes::NO_HOSTNAME_SPREAD, Warning),
            (codes::UNHEALTHY_POLICY, Info),
        ]
    );
}

#[test]
fn invalid_budgets_and_bad_documents_are_named_and_skipped() {
    let mut manifests = Manifests::new();
    manifests.add(
        "bad.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: both}\nspec: {minAvailable: 1, maxUnavailable: 1, selector: {}}\n---\nkey: [unclosed\n---\n- a list\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: policy/v1\n  kind: PodDisruptionBudget\n  metadata: {name: too-much}\n  spec: {minAvailable: 120%, selector: {}}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: d}\n  spec: {replicas: many}\n",
    );
    let problems: Vec<String> = manifests.problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].starts_with("bad.yaml, document 2 (line 5): not valid YAML at line 6"),
        "{}",
        problems[0]
    );
    assert_eq!(
        problems[1],
        "bad.yaml, document 3 (line 7): not a Kubernetes object (not a mapping)"
    );
    assert!(
        problems[2].starts_with(
            "bad.yaml, document 4 (line 9), item 2: Deployment does not have the expected shape"
        ),
        "{}",
        problems[2]
    );
    assert!(!problems[2].contains("many"), "{}", problems[2]);
    let invalid: Vec<String> = audit(&manifests.objects, Source::Manifests)
        .into_iter()
        .filter(|f| f.code == codes::INVALID)
        .map(|f| f.message)
        .collect();
    assert_eq!(
        invalid,
        vec![
            "budget both would be refused by the API server: spec.minAvailable: minAvailable and maxUnavailable cannot be both set".to_owned(),
            "budget too-much would be refused by the API server: spec.minAvailable: \"120%\": must not be greater than 100%".to_owned(),
        ]
    );
}
