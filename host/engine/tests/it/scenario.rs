//! The cascade and recovery cases of docs/rules.md, played on a real SQLite file. Probe results are applied
//! through the store at chosen instants (interval 300 s, threshold 2), so the
//! half-interval spacing is exercised without waiting minutes; the last case
//! goes through the worker's probe-now path to resolve a real kubeconfig.

use vigil_test_support::engine as support;

use support::{Behaviour, Sandbox, ScriptedProber, refused, settings};
use vigil_decision::{
    AppStatus, BrakeConfig, ClusterId, ClusterStatus, ConditionType, HealthPolicy, PolicyOverrides,
    ProbeOutcome, Timestamp,
};
use vigil_engine::worker::probe_now;
use vigil_store::{ApplySettings, Store, StoreError};

const T0: i64 = 1_800_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_secs(T0 + seconds)
}

fn apply_settings() -> ApplySettings {
    ApplySettings {
        defaults: HealthPolicy::default(),
        brake: BrakeConfig {
            enabled: true,
            ratio: 1.0,
            min_failed: 3,
            window_millis: 300_000,
        },
        brake_window_explicit: false,
        replicas: Default::default(),
    }
}

struct Scenario {
    store: Store,
    _sandbox: Sandbox,
}

impl Scenario {
    async fn new() -> Self {
        let sandbox = Sandbox::new();
        Self {
            store: sandbox.store().await,
            _sandbox: sandbox,
        }
    }

    async fn cluster(&self, name: &str) -> ClusterId {
        self.store
            .register_cluster(
                name,
                "https://127.0.0.1:6443",
                &format!("/nonexistent/{name}.yaml#{name}"),
                &PolicyOverrides::default(),
                at(-1000),
            )
            .await
            .unwrap()
    }

    async fn app(&self, name: &str, cluster: &str, status: AppStatus) {
        self.store
            .register_app(name, cluster, status, at(-1000))
            .await
            .unwrap();
    }

    async fn probe(&self, cluster: ClusterId, outcome: ProbeOutcome, seconds: i64) {
        self.store
            .apply_probe(
                cluster,
                &outcome,
                at(seconds),
                at(seconds + 300),
                &apply_settings(),
            )
            .await
            .unwrap()
            .unwrap();
    }

    async fn status(&self, cluster: &str) -> ClusterStatus {
        self.store.cluster(cluster).await.unwrap().health.status
    }

    async fn app_state(&self, app: &str) -> (AppStatus, bool, String) {
        let app = self.store.app(app).await.unwrap();
        (app.status, app.degraded_by.is_some(), app.cluster)
    }
}

#[tokio::test]
async fn a_fresh_cluster_goes_offline_without_degrading_and_recovers_without_restoring() {
    let s = Scenario::new().await;
    let fresh = s.cluster("fresh").await;
    s.app("f-web", "fresh", AppStatus::Deployed).await;
    s.app("f-broken", "fresh", AppStatus::Degraded).await;

    s.probe(fresh, refused(), 0).await;
    assert_eq!(s.status("fresh").await, ClusterStatus::Unknown);
    s.probe(fresh, refused(), 200).await;
    assert_eq!(
        s.status("fresh").await,
        ClusterStatus::Offline,
        "UNKNOWN→OFFLINE at the threshold"
    );
    assert_eq!(
        s.app_state("f-web").await,
        (AppStatus::Deployed, false, "fresh".into())
    );
    assert!(
        s.store.outages("fresh").await.unwrap().is_empty(),
        "no outage from UNKNOWN"
    );

    s.probe(fresh, ProbeOutcome::Healthy, 400).await;
    assert_eq!(s.status("fresh").await, ClusterStatus::Online);
    assert_eq!(
        s.app_state("f-web").await,
        (AppStatus::Deployed, false, "fresh".into())
    );
    assert_eq!(
        s.app_state("f-broken").await,
        (AppStatus::Degraded, false, "fresh".into())
    );
    let kinds: Vec<String> = s
        .store
        .events(Some("fresh"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        !kinds
            .iter()
            .any(|k| k == "apps-degraded" || k == "apps-restored"),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn an_online_cluster_degrades_its_deployed_apps_at_the_threshold_and_restores_only_those() {
    let s = Scenario::new().await;
    let prod = s.cluster("prod").await;
    s.cluster("spare").await;
    s.app("web", "prod", AppStatus::Deployed).await;
    s.app("api", "prod", AppStatus::Deployed).await;
    s.app("moving", "prod", AppStatus::Deployed).await;
    s.app("broken", "prod", AppStatus::Degraded).await;
    s.app("pending", "prod", AppStatus::Pending).await;

    s.probe(prod, ProbeOutcome::Healthy, 0).await;
    assert_eq!(s.status("prod").await, ClusterStatus::Online);

    s.probe(prod, refused(), 10).await;
    assert_eq!(
        s.status("prod").await,
        ClusterStatus::Online,
        "one failure is a blip"
    );
    assert_eq!(s.app_state("web").await.0, AppStatus::Deployed);

    s.probe(prod, refused(), 200).await;
    assert_eq!(s.status("prod").await, ClusterStatus::Offline);
    for app in ["web", "api", "moving"] {
        assert_eq!(
            s.app_state(app).await,
            (AppStatus::Degraded, true, "prod".into()),
            "{app}"
        );
    }
    assert_eq!(
        s.app_state("broken").await,
        (AppStatus::Degraded, false, "prod".into())
    );
    assert_eq!(
        s.app_state("pending").await,
        (AppStatus::Pending, false, "prod".into())
    );

    // The deployment guard: the OFFLINE cluster refuses deployments and reassignments; UNKNOWN does not.
    let refused_deploy = s
        .store
        .record_deployment("pending", None, None, at(210))
        .await;
    assert!(
        matches!(refused_deploy, Err(StoreError::ClusterOffline { .. })),
        "{refused_deploy:?}"
    );
    s.app("elsewhere", "spare", AppStatus::Deployed).await;
    let refused_move = s.store.reassign_app("elsewhere", "prod", at(210)).await;
    assert!(
        matches!(refused_move, Err(StoreError::ClusterOffline { .. })),
        "{refused_move:?}"
    );
    // Marker cleared: reassigned away during the outage, the app loses its marker.
    s.store
        .reassign_app("moving", "spare", at(220))
        .await
        .unwrap();
    assert_eq!(
        s.app_state("moving").await,
        (AppStatus::Degraded, false, "spare".into())
    );

    s.probe(prod, ProbeOutcome::Healthy, 400).await;
    assert_eq!(s.status("prod").await, ClusterStatus::Online);
    for app in ["web", "api"] {
        assert_eq!(
            s.app_state(app).await,
            (AppStatus::Deployed, false, "prod".into()),
            "{app}"
        );
    }
    assert_eq!(
        s.app_state("moving").await,
        (AppStatus::Degraded, false, "spare".into()),
        "not touched"
    );
    assert_eq!(
        s.app_state("broken").await,
        (AppStatus::Degraded, false, "prod".into()),
        "not restored"
    );
    assert_eq!(s.app_state("pending").await.0, AppStatus::Pending);
    let outages = s.store.outages("prod").await.unwrap();
    assert_eq!(outages.len(), 1);
    assert_eq!(outages[0].closed_at, Some(at(400).0));

    // A second outage degrades what is DEPLOYED now, with a new marker.
    s.probe(prod, refused(), 500).await;
    s.probe(prod, refused(), 700).await;
    assert_eq!(s.store.outages("prod").await.unwrap().len(), 2);
    assert_eq!(
        s.app_state("web").await,
        (AppStatus::Degraded, true, "prod".into())
    );
    assert_eq!(
        s.app_state("broken").await,
        (AppStatus::Degraded, false, "prod".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_kubeconfig_disappears_keeps_its_status() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let reference = sandbox.kubeconfig("vanishing", 40_100);
    store
        .register_cluster(
            "vanishing",
            "https://127.0.0.1:40100",
            &reference,
            &PolicyOverrides::default(),
            at(0),
        )
        .await
        .unwrap();
    store
        .register_app("v-app", "vanishing", AppStatus::Deployed, at(0))
        .await
        .unwrap();
    let prober = ScriptedProber::new(Behaviour::healthy());
    let settings = settings(300, 1);
    probe_now(&store, &prober, &settings, "vanishing")
        .await
        .unwrap();
    assert_eq!(
        store.cluster("vanishing").await.unwrap().health.status,
        ClusterStatus::Online
    );

    std::fs::remove_file(sandbox.kubeconfigs().join("vanishing.yaml")).unwrap();
    // Threshold 1: were this counted as a failure, the cluster would go OFFLINE.
    prober.set_all(Behaviour::refused());
    let (outcome, _) = probe_now(&store, &prober, &settings, "vanishing")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.outcome.label(), "not-probeable");
    assert_eq!(outcome.by, None, "no plugin answered");
    assert_eq!(
        prober.total_calls(),
        1,
        "an unresolvable reference is never handed to the prober"
    );
    let record = store.cluster("vanishing").await.unwrap();
    assert_eq!(record.health.status, ClusterStatus::Online);
    assert_eq!(record.health.consecutive_failures, 0);
    let condition = record
        .health
        .condition(ConditionType::ReferenceBroken)
        .unwrap();
    assert_eq!(condition.reason, "reference-broken");
    let app = store.app("v-app").await.unwrap();
    assert_eq!((app.status, app.degraded_by), (AppStatus::Deployed, None));
}
