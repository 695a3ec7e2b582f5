//! The real `pdb-audit.wasm` run by the plugin runtime against fake API servers on loopback:
//! one fixture cluster per finding, a clean cluster that yields no finding at all, a cluster
//! whose pods cannot be listed (403), and a plugin whose memory cap is too small to run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vigil_decision::{ClusterId, ReasonClass};
use vigil_domain::probe::ProbeTarget;
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_drain_rules::codes;
use vigil_fake_kube::{AccessPolicy, AddressPlan, Fixtures, Fleet, KubeconfigOptions};
use vigil_plugin_host::{AuditOutcome, FindingSeverity, PluginRuntime, Refusal, RuntimeSettings};

/// How long one audit may take (debug builds run wasm slowly).
const BUDGET: Duration = Duration::from_secs(20);

use vigil_test_support::root;

/// A plugin directory with the built `pdb-audit` and `manifest` as its `pdb-audit.toml`.
fn plugin_dir(dir: &Path, manifest: &str) -> PathBuf {
    let built = vigil_test_support::plugin_file("pdb-audit");
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::fs::copy(&built, plugins.join("pdb-audit.wasm")).expect("copy");
    std::fs::write(plugins.join("pdb-audit.toml"), manifest).expect("manifest");
    plugins
}

/// The grants `pdb-audit.toml` ships with.
fn shipped_manifest() -> String {
    std::fs::read_to_string(root().join("plugins/pdb-audit/pdb-audit.toml")).expect("read")
}

async fn load(plugins: &Path) -> PluginRuntime {
    load_under(plugins, Vec::new()).await
}

/// [`load`], with the credential directories the engine reads kubeconfigs under.
async fn load_under(plugins: &Path, credential_dirs: Vec<PathBuf>) -> PluginRuntime {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins.to_path_buf(),
        cache_dir: None,
        concurrency: 4,
        credential_dirs,
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    assert_eq!(report.audits.len(), 1, "{report:#?}");
    assert!(
        report.loaded.is_empty(),
        "an audit plugin is not a probe plugin"
    );
    runtime
}

/// What a fixture cluster holds: a Deployment `prod/api` with its ReplicaSet and pods on
/// their nodes, and budgets.
struct Case {
    replicas: usize,
    /// How many of the pods are ready (the first ones).
    ready: usize,
    /// The node of each pod, by index (default: one node each).
    nodes: Option<Vec<usize>>,
    /// The pod template's `spec` lines after `containers` (spread, affinity), indented 6.
    template: &'static str,
    /// Each budget: its `spec` and `status` lines, indented 2.
    budgets: Vec<(&'static str, String)>,
    /// The pods' controller, when not the ReplicaSet.
    custom_owner: bool,
}

/// A spread with nothing to report: hostname DoNotSchedule and zone ScheduleAnyway, both
/// with `matchLabelKeys` and `nodeTaintsPolicy: Honor`, `nodeAffinityPolicy` unset.
const CLEAN_SPREAD: &str = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: api}}
        matchLabelKeys: [pod-template-hash]
        nodeTaintsPolicy: Honor
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: ScheduleAnyway
        labelSelector: {matchLabels: {app: api}}
        matchLabelKeys: [pod-template-hash]
        nodeTaintsPolicy: Honor
";

/// A budget's `spec` (and selector on `app: api`) and `status`.
fn budget(spec: &str, [allowed, healthy, desired, expected]: [i64; 4]) -> String {
    format!(
        "spec:\n  {spec}\n  selector: {{matchLabels: {{app: api}}}}\nstatus:\n  observedGeneration: 1\n  disruptionsAllowed: {allowed}\n  currentHealthy: {healthy}\n  desiredHealthy: {desired}\n  expectedPods: {expected}\n  conditions:\n  - {{type: DisruptionAllowed, status: \"{}\", reason: {}, lastTransitionTime: \"2025-05-02T00:00:00Z\", message: \"\"}}\n",
        if allowed > 0 { "True" } else { "False" },
        if allowed > 0 {
            "SufficientPods"
        } else {
            "InsufficientPods"
        },
    )
}

fn clean() -> Case {
    Case {
        replicas: 3,
        ready: 3,
        nodes: None,
        template: CLEAN_SPREAD,
        budgets: vec![(
            "api",
            budget(
                "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
                [1, 3, 2, 3],
            ),
        )],
        custom_owner: false,
    }
}

impl Case {
    fn yaml(&self) -> String {
        let mut docs = Vec::new();
        let node_count = self.replicas.max(3);
        for n in 0..node_count {
            docs.push(format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-{n}\n  labels: {{kubernetes.io/hostname: node-{n}, topology.kubernetes.io/zone: zone-{}}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n",
                n % 3
            ));
        }
        let template = format!(
            "  template:\n    metadata:\n      labels: {{app: api, pod-template-hash: 5d8f}}\n    spec:\n      containers: [{{name: api, image: api:1}}]\n{}",
            self.template
        );
        docs.push(format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api, namespace: prod}}\nspec:\n  replicas: {}\n  selector: {{matchLabels: {{app: api}}}}\n{template}",
            self.replicas
        ));
        docs.push(format!(
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: api-5d8f\n  namespace: prod\n  labels: {{app: api, pod-template-hash: 5d8f}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: api, uid: \"\", controller: true}}]\nspec:\n  replicas: {}\n  selector: {{matchLabels: {{app: api, pod-template-hash: 5d8f}}}}\n{template}",
            self.replicas
        ));
        let owner = if self.custom_owner {
            "{apiVersion: example.com/v1, kind: Rollout, name: api, uid: 0d5c1f3e-1111-4a4a-9b9b-000000000001, controller: true}"
        } else {
            "{apiVersion: apps/v1, kind: ReplicaSet, name: api-5d8f, uid: \"\", controller: true}"
        };
        for i in 0..self.replicas {
            let node = self.nodes.as_ref().map_or(i, |nodes| nodes[i]);
            let ready = if i < self.ready { "True" } else { "False" };
            docs.push(format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: api-5d8f-{i}\n  namespace: prod\n  labels: {{app: api, pod-template-hash: 5d8f}}\n  ownerReferences: [{owner}]\nspec:\n  nodeName: node-{node}\n  containers: [{{name: api, image: api:1}}]\nstatus:\n  phase: Running\n  conditions: [{{type: Ready, status: \"{ready}\"}}]\n"
            ));
        }
        for (name, body) in &self.budgets {
            docs.push(format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}, namespace: prod}}\n{body}"
            ));
        }
        docs.join("---\n")
    }
}

/// Every case: a name, its fixture, the findings expected (code and severity, sorted as
/// the audit sorts them).
/// A fixture case: its name, its cluster, and the findings expected (code, severity).
type Expected = (&'static str, Case, Vec<(&'static str, FindingSeverity)>);

fn cases() -> Vec<Expected> {
    use FindingSeverity::{Blocking, Info, Warning};
    let mut out = vec![("clean", clean(), vec![])];
    let mut c = clean();
    c.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 0\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [0, 3, 3, 3],
        ),
    )];
    out.push((
        "zero-disruptions",
        c,
        vec![(codes::ZERO_DISRUPTIONS, Blocking)],
    ));
    let mut c = clean();
    c.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [0, 0, 0, 0],
        )
        .replace("{matchLabels: {app: api}}", "{matchLabels: {app: renamed}}"),
    )];
    out.push(("orphan", c, vec![(codes::ORPHAN, Warning)]));
    let mut c = clean();
    let both = budget(
        "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
        [1, 3, 2, 3],
    );
    c.budgets = vec![("api", both.clone()), ("api-too", both)];
    out.push((
        "multiple-budgets",
        c,
        vec![(codes::MULTIPLE_BUDGETS, Blocking)],
    ));
    let mut c = clean();
    c.budgets = vec![(
        "api",
        budget(
            "minAvailable: 2\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [1, 3, 2, 3],
        ),
    )];
    out.push((
        "integer-min-available",
        c,
        vec![(codes::INTEGER_MIN_AVAILABLE, Warning)],
    ));
    let mut c = clean();
    c.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 10%\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [1, 3, 2, 3],
        ),
    )];
    out.push(("percent-rounding", c, vec![(codes::PERCENT_ROUNDING, Info)]));
    let mut c = clean();
    c.replicas = 4;
    c.ready = 3;
    c.budgets = vec![("api", budget("maxUnavailable: 2", [1, 3, 2, 4]))];
    out.push((
        "unhealthy-policy",
        c,
        vec![(codes::UNHEALTHY_POLICY, Warning)],
    ));
    let mut c = clean();
    c.nodes = Some(vec![0, 0, 0]);
    out.push(("pods-per-node", c, vec![(codes::PODS_PER_NODE, Warning)]));
    let mut c = clean();
    c.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [1, 3, 2, 4],
        ),
    )];
    out.push((
        "status-mismatch",
        c,
        vec![(codes::STATUS_MISMATCH, Warning)],
    ));
    let mut c = clean();
    c.custom_owner = true;
    c.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [0, 0, 0, 0],
        ),
    )];
    out.push((
        "uncomputable",
        c,
        vec![
            (codes::ZERO_DISRUPTIONS, Blocking),
            (codes::UNCOMPUTABLE, Warning),
        ],
    ));
    let mut c = clean();
    c.template = "";
    out.push((
        "no-hostname-spread",
        c,
        vec![(codes::NO_HOSTNAME_SPREAD, Warning)],
    ));
    let mut c = clean();
    c.template = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: api}}
        matchLabelKeys: [pod-template-hash]
        nodeTaintsPolicy: Honor
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: api}}
        matchLabelKeys: [pod-template-hash]
        nodeTaintsPolicy: Honor
";
    out.push((
        "zone-do-not-schedule",
        c,
        vec![(codes::ZONE_DO_NOT_SCHEDULE, Warning)],
    ));
    let mut c = clean();
    c.template = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: api}}
        nodeTaintsPolicy: Honor
";
    out.push((
        "no-match-label-keys",
        c,
        vec![(codes::NO_MATCH_LABEL_KEYS, Warning)],
    ));
    let mut c = clean();
    c.template = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: api}}
        matchLabelKeys: [pod-template-hash]
";
    out.push((
        "node-taints-ignored",
        c,
        vec![(codes::NODE_TAINTS_IGNORED, Info)],
    ));
    let mut c = clean();
    c.template = "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: api}}
            topologyKey: kubernetes.io/hostname
";
    out.push((
        "self-anti-affinity",
        c,
        vec![(codes::SELF_ANTI_AFFINITY, Warning)],
    ));
    out
}

fn target(path: &Path, context: &str, endpoint: String) -> ProbeTarget {
    let reference = Reference::parse(&format!("{}#{context}", path.display())).expect("reference");
    let connection = match reference::resolve(&reference) {
        Resolution::Connection(material) => Some(material),
        other => panic!("the test kubeconfig does not resolve: {other}"),
    };
    ProbeTarget {
        cluster: ClusterId(1),
        name: context.to_owned(),
        endpoint,
        reference,
        connection,
        plugin: None,
        timeout: BUDGET,
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    }
}

/// The fleet (with `policy`), one cluster per fixture, their audit targets.
async fn fleet(
    fixtures: Vec<String>,
    policy: AccessPolicy,
    kube_dir: &Path,
) -> (Fleet, Vec<ProbeTarget>) {
    let fleet = Fleet::builder()
        .clusters(fixtures.len())
        .addresses(AddressPlan::Auto)
        .policy(policy)
        .start()
        .await
        .expect("fleet");
    for (cluster, yaml) in fleet.clusters().iter().zip(&fixtures) {
        cluster.set_fixtures(Fixtures::from_yaml(yaml).expect("fixtures"));
    }
    let written = fleet
        .write_kubeconfigs(kube_dir, &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let targets = written
        .iter()
        .zip(fleet.clusters())
        .map(|(w, c)| target(&w.path, &w.context, c.server_url()))
        .collect();
    (fleet, targets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fixture_cluster_yields_exactly_its_findings() {
    let temp = tempfile::tempdir().expect("tempdir");
    let runtime = load(&plugin_dir(temp.path(), &shipped_manifest())).await;
    let cases = cases();
    let (fleet, targets) = fleet(
        cases.iter().map(|(_, case, _)| case.yaml()).collect(),
        AccessPolicy::default(),
        &temp.path().join("kube"),
    )
    .await;
    // The page size of 2 makes every list of more than two objects take several pages.
    let mut again = None;
    for ((name, _, expected), mut target) in cases.iter().zip(targets) {
        target
            .parameters
            .insert("page-size".to_owned(), "2".to_owned());
        again = Some(target.clone());
        match runtime.audit(&target, BUDGET).await {
            AuditOutcome::Report {
                plugin,
                generation,
                findings,
                kinds_read,
            } => {
                assert_eq!(plugin, "pdb-audit");
                assert_eq!(generation, 1);
                let got: Vec<(&str, FindingSeverity)> = findings
                    .iter()
                    .map(|f| (f.code.as_str(), f.severity))
                    .collect();
                assert_eq!(&got, expected, "{name}: {findings:#?}");
                assert_eq!(
                    kinds_read,
                    [
                        "poddisruptionbudgets",
                        "pods",
                        "nodes",
                        "deployments",
                        "replicasets",
                        "statefulsets",
                        "replicationcontrollers"
                    ],
                    "{name}"
                );
                for finding in &findings {
                    assert!(
                        !finding.message.is_empty() && !finding.fix.is_empty(),
                        "{finding:?}"
                    );
                    assert_eq!(
                        finding.objects.first().map(|o| o.namespace.as_deref()),
                        Some(Some("prod")),
                        "{finding:?}"
                    );
                }
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // Paging was used: the pods of the 3-replica clusters took two pages each.
    let pod_pages = fleet.clusters()[0].log().entries_for("/api/v1/pods").len();
    assert_eq!(pod_pages, 2, "the clean cluster's pods, 2 per page");
    // Routing asked `accepts` once per cluster as shown (each fixture cluster is shown
    // differently), and auditing the last one again asks nothing more.
    let asked = runtime.stats("pdb-audit").expect("loaded").accepts;
    assert_eq!(asked, cases.len() as u64);
    assert!(matches!(
        runtime.audit(&again.expect("a fixture"), BUDGET).await,
        AuditOutcome::Report { .. }
    ));
    assert_eq!(runtime.stats("pdb-audit").expect("loaded").accepts, asked);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_pod_list_is_an_error_naming_pods() {
    let temp = tempfile::tempdir().expect("tempdir");
    let runtime = load(&plugin_dir(temp.path(), &shipped_manifest())).await;
    let policy = AccessPolicy {
        forbidden_resources: vec!["pods".to_owned()],
        ..AccessPolicy::default()
    };
    let (fleet, targets) = fleet(vec![clean().yaml()], policy, &temp.path().join("kube")).await;
    let outcome = runtime.audit(&targets[0], BUDGET).await;
    match &outcome {
        AuditOutcome::Failed {
            plugin,
            kind,
            class,
            message,
        } => {
            assert_eq!(plugin, "pdb-audit");
            assert_eq!(kind.as_deref(), Some("pods"));
            assert_eq!(*class, ReasonClass::Unauthorized);
            assert!(
                message.contains("cannot list pods") && message.contains("403"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!outcome.is_report() && !outcome.has_blocking());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_its_memory_cap_is_a_fault_not_a_crash() {
    let temp = tempfile::tempdir().expect("tempdir");
    let manifest = shipped_manifest().replace("memory-mib = 128", "memory-mib = 1");
    assert!(manifest.contains("memory-mib = 1\n"));
    let plugins = plugin_dir(temp.path(), &manifest);
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugins,
        cache_dir: None,
        concurrency: 2,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    // Either refused at load (info() cannot run in 1 MiB) or a fault when auditing: never
    // a crash, never a report.
    if report.audits.is_empty() {
        assert_eq!(report.refused.len(), 1, "{report:#?}");
        match &report.refused[0].reason {
            Refusal::Info(why) => {
                assert!(why.to_lowercase().contains("memory"), "{report:#?}");
            }
            other => panic!("{other:?}"),
        }
        return;
    }
    let (fleet, targets) = fleet(
        vec![clean().yaml()],
        AccessPolicy::default(),
        &temp.path().join("kube"),
    )
    .await;
    match runtime.audit(&targets[0], BUDGET).await {
        AuditOutcome::Fault { plugin, message } => {
            assert_eq!(plugin, "pdb-audit");
            assert!(message.contains("memory"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    fleet.shutdown().await;
}

/// Through the engine: the real plugin's audits applied to a real store as the fixtures
/// change — `drain-blocked` set by a blocking finding and cleared when none remains, an
/// orphan budget alone never setting it, a forbidden list keeping the previous findings
/// and condition, and the status never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_blocked_follows_the_fixtures_through_the_engine() {
    use vigil::serve::EngineProber;
    use vigil_decision::{ClusterStatus, ConditionType, ProbeOutcome};
    use vigil_domain::probe::wall_clock;
    use vigil_engine::auditing::audit_cluster;
    use vigil_store::{DiscoveredClusterRow, Store};

    let temp = tempfile::tempdir().expect("tempdir");
    // The engine reads a kubeconfig only under its credential directories.
    let runtime = load_under(
        &plugin_dir(temp.path(), &shipped_manifest()),
        vec![temp.path().join("kube")],
    )
    .await;
    let auditor = EngineProber::Plugins(runtime);
    let (fleet, targets) = fleet(
        vec![clean().yaml()],
        AccessPolicy::default(),
        &temp.path().join("kube"),
    )
    .await;
    let cluster = &fleet.clusters()[0];
    let store = Store::open_path(&temp.path().join("vigil.db"))
        .await
        .expect("store");
    store
        .upsert_discovered(
            &[DiscoveredClusterRow {
                name: targets[0].name.clone(),
                endpoint: targets[0].endpoint.clone(),
                reference: targets[0].reference.to_string(),
            }],
            wall_clock(),
        )
        .await
        .expect("discovered");
    let name = targets[0].name.as_str();
    let id = store.cluster(name).await.expect("cluster").id;
    let now = wall_clock();
    let apply = vigil_engine::worker::WorkerSettings::new(
        vigil_decision::HealthPolicy::default(),
        vigil_decision::BrakeConfig {
            enabled: false,
            ratio: 1.0,
            min_failed: 1,
            window_millis: 0,
        },
        1,
    )
    .apply();
    store
        .apply_probe(
            id,
            &ProbeOutcome::Healthy,
            now,
            now.plus_millis(3_600_000),
            &apply,
        )
        .await
        .expect("probe");

    let audit = |expect_report: bool| {
        let store = store.clone();
        let auditor = &auditor;
        async move {
            let record = store.cluster(name).await.expect("cluster");
            let result = audit_cluster(auditor, &record, BUDGET).await;
            assert_eq!(
                matches!(result, vigil_store::AuditResult::Report { .. }),
                expect_report,
                "{result:?}"
            );
            let now = wall_clock();
            store
                .apply_audit(record.id, &result, now, now.plus_millis(3_600_000))
                .await
                .expect("applied")
                .expect("the cluster exists");
            let after = store.cluster(name).await.expect("cluster");
            assert_eq!(
                after.health.status,
                ClusterStatus::Online,
                "never the status"
            );
            (
                after.health.has_condition(ConditionType::DrainBlocked),
                store.audit(name).await.expect("audit"),
            )
        }
    };
    let codes_of = |audit: &vigil_store::AuditRecord| -> Vec<String> {
        audit.findings.iter().map(|f| f.code.clone()).collect()
    };

    let (blocked, findings) = audit(true).await;
    assert!(!blocked);
    assert!(findings.findings.is_empty(), "{findings:?}");

    let mut zero = clean();
    zero.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 0\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [0, 3, 3, 3],
        ),
    )];
    cluster.set_fixtures(Fixtures::from_yaml(&zero.yaml()).expect("fixtures"));
    let (blocked, findings) = audit(true).await;
    assert!(blocked, "{findings:?}");
    assert_eq!(codes_of(&findings), [codes::ZERO_DISRUPTIONS]);

    // Every list answered 403: an error, the findings and the condition kept.
    cluster.fail_with(403).await.expect("fault");
    let (blocked, kept) = audit(false).await;
    assert!(blocked, "the condition is kept");
    assert_eq!(codes_of(&kept), [codes::ZERO_DISRUPTIONS]);
    assert_eq!(kept.audited_at, findings.audited_at);
    assert!(kept.failure.is_some(), "{kept:?}");
    cluster.set_fault(Default::default()).await.expect("clear");

    // An orphan budget alone: a warning, and the condition cleared.
    let mut orphan = clean();
    orphan.budgets = vec![(
        "api",
        budget(
            "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow",
            [0, 0, 0, 0],
        )
        .replace("{matchLabels: {app: api}}", "{matchLabels: {app: renamed}}"),
    )];
    cluster.set_fixtures(Fixtures::from_yaml(&orphan.yaml()).expect("fixtures"));
    let (blocked, findings) = audit(true).await;
    assert!(
        !blocked,
        "an orphan budget never blocks a drain: {findings:?}"
    );
    assert_eq!(codes_of(&findings), [codes::ORPHAN]);
    assert_eq!(findings.failure, None);
}
