//! The engine's audit schedule and what an audit does to a cluster, on a
//! real SQLite file with a scripted auditor at the plugin boundary (the real
//! `pdb-audit` plugin against the fake API server is `audit_e2e.rs`): `drain-blocked`
//! set by a blocking finding and cleared when none remains, the status never touched, a
//! failed audit keeping the previous findings and condition, only ONLINE clusters
//! audited, each on its own interval; the findings API and the condition filter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use tower::ServiceExt;
use vigil_decision::{ClusterStatus, ConditionType, ProbeOutcome, ProbedBy, Timestamp};
use vigil_domain::probe::{ProbeTarget, wall_clock};
use vigil_engine::auditing::{AuditSettings, Auditor, audit_loop};
use vigil_store::{AuditResult, DiscoveredClusterRow, Finding, ObjectRef, Severity, Store};

use vigil_test_support::engine as support;

use support::{Sandbox, settings, wait_until};
use vigil_test_support::wait::until_async_true;

/// An auditor answering what the test scripted for each cluster, counting its calls.
#[derive(Default, Clone)]
struct ScriptedAuditor {
    results: Arc<Mutex<HashMap<String, AuditResult>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl ScriptedAuditor {
    fn set(&self, cluster: &str, result: AuditResult) {
        self.results
            .lock()
            .unwrap()
            .insert(cluster.to_owned(), result);
    }

    fn calls(&self, cluster: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(cluster)
            .copied()
            .unwrap_or(0)
    }
}

impl Auditor for ScriptedAuditor {
    async fn audit(&self, target: &ProbeTarget) -> AuditResult {
        assert_eq!(target.plugin, None, "audits are routed among audit plugins");
        *self
            .calls
            .lock()
            .unwrap()
            .entry(target.name.clone())
            .or_default() += 1;
        self.results
            .lock()
            .unwrap()
            .get(&target.name)
            .cloned()
            .unwrap_or_else(|| report(vec![]))
    }
}

fn finding(code: &str, severity: Severity) -> Finding {
    Finding {
        code: code.to_owned(),
        severity,
        objects: vec![ObjectRef {
            kind: "PodDisruptionBudget".to_owned(),
            namespace: Some("shop".to_owned()),
            name: "web".to_owned(),
        }],
        message: format!("{code} on shop/web"),
        fix: "set maxUnavailable: 1".to_owned(),
    }
}

fn report(findings: Vec<Finding>) -> AuditResult {
    AuditResult::Report {
        findings,
        kinds_read: vec!["poddisruptionbudgets".to_owned(), "pods".to_owned()],
        by: Some(ProbedBy {
            plugin: "pdb-audit".to_owned(),
            generation: 1,
        }),
    }
}

fn forbidden() -> AuditResult {
    AuditResult::Failed {
        kind: Some("pods".to_owned()),
        message: "listing pods: 403 Forbidden".to_owned(),
    }
}

/// A store with clusters `names`, all ONLINE (a healthy probe each) but `unknown`.
async fn fleet(sandbox: &Sandbox, names: &[&str], unknown: &[&str]) -> Store {
    let store = sandbox.store().await;
    let rows: Vec<DiscoveredClusterRow> = names
        .iter()
        .chain(unknown)
        .map(|name| DiscoveredClusterRow {
            name: (*name).to_owned(),
            endpoint: "https://127.0.0.1:6443".to_owned(),
            reference: sandbox.kubeconfig(name, 6443),
        })
        .collect();
    store.upsert_discovered(&rows, wall_clock()).await.unwrap();
    for name in names {
        bring_online(&store, name).await;
    }
    store
}

/// Takes the UNKNOWN cluster `name` ONLINE (a healthy probe).
async fn bring_online(store: &Store, name: &str) {
    let id = store.cluster(name).await.unwrap().id;
    let now = wall_clock();
    store
        .apply_probe(
            id,
            &ProbeOutcome::Healthy,
            now,
            now.plus_millis(3_600_000),
            &settings(1, 1).apply(),
        )
        .await
        .unwrap();
}

async fn apply(store: &Store, name: &str, result: &AuditResult, now: Timestamp) {
    let id = store.cluster(name).await.unwrap().id;
    store
        .apply_audit(id, result, now, now.plus_millis(60_000))
        .await
        .unwrap()
        .expect("the cluster exists");
}

#[tokio::test]
async fn blocking_findings_set_drain_blocked_and_nothing_else() {
    let sandbox = Sandbox::new();
    let store = fleet(&sandbox, &["a"], &[]).await;
    let before = store.cluster("a").await.unwrap();
    let t = wall_clock();

    apply(
        &store,
        "a",
        &report(vec![
            finding("pdb-zero-disruptions", Severity::Blocking),
            finding("pdb-orphan", Severity::Warning),
        ]),
        t,
    )
    .await;
    let blocked = store.cluster("a").await.unwrap();
    let condition = blocked
        .health
        .condition(ConditionType::DrainBlocked)
        .expect("drain-blocked is set");
    assert_eq!(condition.reason, "blocking-findings");
    assert!(
        condition.message.starts_with("pdb-zero-disruptions: "),
        "{}",
        condition.message
    );
    assert_eq!(blocked.health.status, ClusterStatus::Online);
    assert_eq!(
        blocked.health.consecutive_failures,
        before.health.consecutive_failures
    );
    assert_eq!(blocked.health.last_probe, before.health.last_probe);
    assert_eq!(
        blocked.next_due, before.next_due,
        "the probe schedule is untouched"
    );

    // A failed audit keeps the findings and the condition.
    apply(&store, "a", &forbidden(), t.plus_millis(1000)).await;
    let kept = store.cluster("a").await.unwrap();
    assert!(kept.health.has_condition(ConditionType::DrainBlocked));
    let audit = store.audit("a").await.unwrap();
    assert_eq!(audit.findings.len(), 2);
    assert_eq!(audit.audited_at, Some(t));
    let failure = audit.failure.expect("the failure is recorded");
    assert_eq!(failure.kind.as_deref(), Some("pods"));
    assert_eq!(failure.at, t.plus_millis(1000));

    // Only a warning left: cleared, with its history event.
    apply(
        &store,
        "a",
        &report(vec![finding("pdb-orphan", Severity::Warning)]),
        t.plus_millis(2000),
    )
    .await;
    let cleared = store.cluster("a").await.unwrap();
    assert!(!cleared.health.has_condition(ConditionType::DrainBlocked));
    assert_eq!(cleared.health.status, ClusterStatus::Online);
    let audit = store.audit("a").await.unwrap();
    assert_eq!(audit.failure, None, "a successful audit clears the failure");
    assert_eq!(audit.findings.len(), 1);
    let kinds: Vec<String> = store
        .cluster_history("a", None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| k.starts_with("condition")).count(),
        2,
        "set once, cleared once: {kinds:?}"
    );
}

#[tokio::test]
async fn the_loop_audits_online_clusters_on_their_interval() {
    let sandbox = Sandbox::new();
    // The witnesses come ONLINE one at a time later, each audited on a later tick.
    let witnesses = ["w1", "w2", "w3"];
    let unknown: Vec<&str> = ["new"].into_iter().chain(witnesses).collect();
    let store = fleet(&sandbox, &["a", "b"], &unknown).await;
    let auditor = ScriptedAuditor::default();
    auditor.set(
        "a",
        report(vec![finding("pdb-zero-disruptions", Severity::Blocking)]),
    );
    auditor.set("b", forbidden());
    let mut settings = AuditSettings::new(Duration::from_secs(3600), Duration::from_secs(5));
    settings.tick = Duration::from_millis(20);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(audit_loop(
        store.clone(),
        Arc::new(auditor.clone()),
        settings,
        vigil_engine::sharing::Owner::alone(),
        async {
            let _ = stopped.await;
        },
    ));

    wait_until(Duration::from_secs(10), "a is drain-blocked", || {
        let store = store.clone();
        async move {
            store
                .cluster("a")
                .await
                .unwrap()
                .health
                .has_condition(ConditionType::DrainBlocked)
        }
    })
    .await;
    wait_until(Duration::from_secs(10), "b's failure is recorded", || {
        let store = store.clone();
        async move { store.audit("b").await.unwrap().failure.is_some() }
    })
    .await;
    // Several ticks later (a witness taken ONLINE and audited at each): each audited
    // once (the interval is an hour), the UNKNOWN cluster never.
    for witness in witnesses {
        bring_online(&store, witness).await;
        until_async_true(
            &format!("the witness {witness} is audited"),
            Duration::from_secs(10),
            async || auditor.calls(witness) == 1,
        )
        .await;
    }
    assert_eq!((auditor.calls("a"), auditor.calls("b")), (1, 1));
    assert_eq!(auditor.calls("new"), 0);
    assert!(
        !store
            .cluster("b")
            .await
            .unwrap()
            .health
            .has_condition(ConditionType::DrainBlocked)
    );
    assert!(store.audit("new").await.unwrap().next_audit.is_none());
    let _ = stop.send(());
    running.await.unwrap();
}

#[tokio::test]
async fn the_findings_api_and_the_condition_filter() {
    let sandbox = Sandbox::new();
    let store = fleet(&sandbox, &["a", "b"], &[]).await;
    let t = wall_clock();
    apply(
        &store,
        "a",
        &report(vec![
            finding("pdb-orphan", Severity::Warning),
            finding("pdb-zero-disruptions", Severity::Blocking),
        ]),
        t,
    )
    .await;
    apply(&store, "b", &forbidden(), t).await;
    let router = vigil_test_support::api::router(store.clone());

    let get = |uri: String| {
        let router = router.clone();
        async move {
            let response = router
                .oneshot(axum::http::Request::get(uri).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    let (status, a) = get("/api/v1/clusters/a/findings".to_owned()).await;
    assert_eq!(status, 200, "{a:#}");
    assert_eq!(a["blocking"], 1);
    assert_eq!(
        a["findings"][0]["code"], "pdb-zero-disruptions",
        "blocking first"
    );
    assert_eq!(a["findings"][0]["severity"], "blocking");
    assert_eq!(a["findings"][0]["objects"][0]["namespace"], "shop");
    assert_eq!(a["findings"][1]["fix"], "set maxUnavailable: 1");
    assert_eq!(a["audited_by"]["plugin"], "pdb-audit");
    assert_eq!(
        a["kinds_read"],
        serde_json::json!(["poddisruptionbudgets", "pods"])
    );
    assert_eq!(a["last_failure"], serde_json::Value::Null);

    let (_, b) = get("/api/v1/clusters/b/findings".to_owned()).await;
    assert_eq!(b["audited_at"], serde_json::Value::Null);
    assert_eq!(b["last_failure"]["kind"], "pods");
    assert_eq!(b["findings"], serde_json::json!([]));

    let (status, missing) = get("/api/v1/clusters/nope/findings".to_owned()).await;
    assert_eq!(status, 404, "{missing:#}");

    let (_, blocked) = get("/api/v1/clusters?condition=drain-blocked".to_owned()).await;
    let names: Vec<&str> = blocked["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a"]);
    let (_, cluster) = get("/api/v1/clusters/a".to_owned()).await;
    assert!(
        cluster["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "drain-blocked"),
        "{cluster:#}"
    );
}
