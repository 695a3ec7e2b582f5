//! The health worker with real time on a real SQLite file.

use vigil_test_support::engine as support;

use std::time::{Duration, Instant};

use support::{Behaviour, Running, Sandbox, ScriptedProber, refused, settings, wait_until};
use vigil_decision::{AppStatus, ClusterStatus, PolicyOverrides, Timestamp};
use vigil_engine::worker::probe_now;
use vigil_store::Store;

async fn register(sandbox: &Sandbox, store: &Store, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let reference = sandbox.kubeconfig(name, 40_000 + u16::try_from(i).unwrap());
        store
            .register_cluster(
                name,
                "https://127.0.0.1",
                &reference,
                &PolicyOverrides::default(),
                now(),
            )
            .await
            .unwrap();
    }
}

fn now() -> Timestamp {
    vigil_domain::probe::wall_clock()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:02}")).collect()
}

async fn status(store: &Store, name: &str) -> ClusterStatus {
    store.cluster(name).await.unwrap().health.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_cluster_times_out_while_the_others_are_probed_on_time() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let clusters = names("c", 20);
    register(&sandbox, &store, &clusters).await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    prober.set("c07", Behaviour::Hang);
    let mut settings = settings(1, 2);
    // Few slots: the hanging probe holds one, and must not hold up the rest.
    settings.concurrency = 4;
    let started = Instant::now();
    let running = Running::start(store.clone(), prober.clone(), settings);

    let healthy: Vec<&String> = clusters.iter().filter(|n| *n != "c07").collect();
    wait_until(
        Duration::from_secs(6),
        "the 19 others are probed three times",
        || {
            let prober = prober.clone();
            let healthy = healthy.clone();
            async move { healthy.iter().all(|n| prober.call_count(n) >= 3) }
        },
    )
    .await;
    wait_until(
        Duration::from_secs(4),
        "the hanging probe is abandoned",
        || {
            let store = store.clone();
            async move {
                store.cluster("c07").await.unwrap().last_outcome.as_deref() == Some("inconclusive")
            }
        },
    )
    .await;
    running.stop().await;

    for name in &healthy {
        let calls = prober.calls(name);
        assert!(
            calls[0].duration_since(started) < Duration::from_millis(900),
            "{name} first probed late"
        );
        for pair in calls.windows(2).take(2) {
            let gap = pair[1].duration_since(pair[0]);
            assert!(
                gap >= Duration::from_millis(900) && gap < Duration::from_millis(1600),
                "{name} probed {gap:?} after its previous probe"
            );
        }
        assert_eq!(status(&store, name).await, ClusterStatus::Online);
    }
    let hung = store.cluster("c07").await.unwrap();
    assert_eq!(hung.health.status, ClusterStatus::Unknown);
    assert_eq!(hung.last_reason_class.as_deref(), Some("plugin-fault"));
    assert_eq!(
        hung.health.consecutive_failures, 0,
        "a hang is the probe's fault, not the cluster's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_transaction_rolls_back_that_cluster_only() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let clusters = names("t", 5);
    register(&sandbox, &store, &clusters).await;
    // A real SQLite error on one row: any write of a probe result to t02 aborts.
    sqlx::query(
        "CREATE TRIGGER fail_t02 BEFORE UPDATE OF last_probe ON clusters \
         WHEN NEW.name = 't02' BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings(1, 2));
    wait_until(
        Duration::from_secs(5),
        "the others are ONLINE and t02 was tried",
        || {
            let store = store.clone();
            let prober = prober.clone();
            async move {
                let mut all = prober.call_count("t02") >= 2;
                for name in ["t00", "t01", "t03", "t04"] {
                    all &=
                        store.cluster(name).await.unwrap().health.status == ClusterStatus::Online;
                }
                all
            }
        },
    )
    .await;
    let stats = running.stop().await;
    assert!(stats.failed >= 2, "t02's transactions failed: {stats:?}");

    let t02 = store.cluster("t02").await.unwrap();
    assert_eq!(t02.health.status, ClusterStatus::Unknown);
    assert_eq!(t02.health.last_probe, None);
    assert_eq!(t02.last_outcome, None);
    let events = store.events(Some("t02")).await.unwrap();
    assert!(
        events.iter().all(|e| e.kind == "cluster-registered"),
        "nothing of t02's probes was written: {events:?}"
    );
    for name in ["t00", "t01", "t03", "t04"] {
        let events = store.events(Some(name)).await.unwrap();
        assert!(
            events.iter().any(|e| e.kind == "status-changed"),
            "{name}: {events:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_no_count_and_no_marker() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    register(&sandbox, &store, &["prod".to_owned()]).await;
    for app in ["web", "api"] {
        store
            .register_app(app, "prod", AppStatus::Deployed, now())
            .await
            .unwrap();
    }
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings(1, 2));
    wait_until(Duration::from_secs(5), "prod is ONLINE", || {
        let store = store.clone();
        async move { status(&store, "prod").await == ClusterStatus::Online }
    })
    .await;
    prober.set_all(Behaviour::refused());
    wait_until(Duration::from_secs(5), "one failure is counted", || {
        let store = store.clone();
        async move {
            store
                .cluster("prod")
                .await
                .unwrap()
                .health
                .consecutive_failures
                == 1
        }
    })
    .await;
    running.stop().await;
    store.close().await;
    drop(store);

    // A new engine on the same file: one more failure confirms the outage.
    let store = sandbox.store().await;
    let record = store.cluster("prod").await.unwrap();
    assert_eq!(record.health.status, ClusterStatus::Online);
    assert_eq!(record.health.consecutive_failures, 1);
    let running = Running::start(store.clone(), prober.clone(), settings(1, 2));
    wait_until(Duration::from_secs(5), "prod is OFFLINE", || {
        let store = store.clone();
        async move { status(&store, "prod").await == ClusterStatus::Offline }
    })
    .await;
    running.stop().await;
    let outage = store.cluster("prod").await.unwrap().health.open_outage;
    assert!(outage.is_some());
    for app in ["web", "api"] {
        let app = store.app(app).await.unwrap();
        assert_eq!(app.status, AppStatus::Degraded);
        assert_eq!(app.degraded_by, outage);
    }
    store.close().await;
    drop(store);

    // Restarted in the middle of the outage: recovery still restores them.
    let store = sandbox.store().await;
    prober.set_all(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings(1, 2));
    wait_until(Duration::from_secs(5), "prod is ONLINE again", || {
        let store = store.clone();
        async move { status(&store, "prod").await == ClusterStatus::Online }
    })
    .await;
    running.stop().await;
    for app in ["web", "api"] {
        let app = store.app(app).await.unwrap();
        assert_eq!((app.status, app.degraded_by), (AppStatus::Deployed, None));
    }
    let outages = store.outages("prod").await.unwrap();
    assert_eq!(outages.len(), 1);
    assert!(outages[0].closed_at.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_probes_only_overdue_and_new_clusters() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let clusters = names("r", 3);
    register(&sandbox, &store, &clusters).await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings(60, 2));
    wait_until(
        Duration::from_secs(5),
        "each cluster is probed once",
        || {
            let prober = prober.clone();
            let clusters = clusters.clone();
            async move { clusters.iter().all(|n| prober.call_count(n) == 1) }
        },
    )
    .await;
    running.stop().await;
    store.close().await;
    drop(store);

    let store = sandbox.store().await;
    // r02 became overdue while the engine was down.
    sqlx::query("UPDATE clusters SET next_due = 0 WHERE name = 'r02'")
        .execute(store.pool())
        .await
        .unwrap();
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings(60, 2));
    wait_until(
        Duration::from_secs(3),
        "the overdue cluster is probed",
        || {
            let prober = prober.clone();
            async move { prober.call_count("r02") == 1 }
        },
    )
    .await;
    register(&sandbox, &store, &["fresh".to_owned()]).await;
    wait_until(
        Duration::from_secs(3),
        "a newly inserted cluster is probed at once",
        || {
            let prober = prober.clone();
            async move { prober.call_count("fresh") == 1 }
        },
    )
    .await;
    // A wrong probe would have come by the time the worker, reading its schedule again
    // and again, has probed three more clusters registered one after the other.
    let witnesses = names("w", 3);
    for witness in &witnesses {
        register(&sandbox, &store, std::slice::from_ref(witness)).await;
        wait_until(
            Duration::from_secs(3),
            &format!("the witness {witness} is probed"),
            || {
                let prober = prober.clone();
                let witness = witness.clone();
                async move { prober.call_count(&witness) == 1 }
            },
        )
        .await;
    }
    running.stop().await;
    assert_eq!(prober.call_count("r00"), 0, "r00 was not due");
    assert_eq!(prober.call_count("r01"), 0, "r01 was not due");
    assert_eq!(prober.total_calls() - witnesses.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_failures_in_the_same_second_count_once() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    register(&sandbox, &store, &["edge".to_owned()]).await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let settings = settings(10, 2);
    probe_now(&store, &prober, &settings, "edge").await.unwrap();
    assert_eq!(status(&store, "edge").await, ClusterStatus::Online);

    prober.set_all(Behaviour::refused());
    let first = Instant::now();
    probe_now(&store, &prober, &settings, "edge").await.unwrap();
    probe_now(&store, &prober, &settings, "edge").await.unwrap();
    assert!(first.elapsed() < Duration::from_secs(1));
    let edge = store.cluster("edge").await.unwrap();
    assert_eq!(edge.health.consecutive_failures, 1);
    assert_eq!(
        edge.health.status,
        ClusterStatus::Online,
        "threshold 2 is not reached"
    );
    let kinds: Vec<String> = store
        .events(Some("edge"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "failure-counted").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "failure-not-counted").count(),
        1,
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_tick_leaves_each_cluster_fully_updated_or_untouched() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let clusters = names("s", 30);
    register(&sandbox, &store, &clusters).await;
    for name in &clusters {
        store
            .register_app(&format!("app-{name}"), name, AppStatus::Deployed, now())
            .await
            .unwrap();
    }
    let mut settings = settings(3600, 1);
    settings.brake.enabled = false;
    settings.concurrency = 6;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = Running::start(store.clone(), prober.clone(), settings);
    wait_until(Duration::from_secs(10), "all are ONLINE", || {
        let store = store.clone();
        async move {
            store
                .clusters()
                .await
                .unwrap()
                .iter()
                .all(|c| c.health.status == ClusterStatus::Online)
        }
    })
    .await;
    running.stop().await;

    // Every cluster is due again, and every probe now fails slowly.
    sqlx::query("UPDATE clusters SET next_due = 0")
        .execute(store.pool())
        .await
        .unwrap();
    for (i, name) in clusters.iter().enumerate() {
        let delay = Duration::from_millis(100 + 37 * (i as u64 % 9));
        prober.set(name, Behaviour::Slow(delay, refused()));
    }
    let before: Vec<_> = store.clusters().await.unwrap();
    let running = Running::start(store.clone(), prober.clone(), settings);
    wait_until(
        Duration::from_secs(10),
        "some clusters went OFFLINE",
        || {
            let store = store.clone();
            async move {
                store
                    .clusters()
                    .await
                    .unwrap()
                    .iter()
                    .filter(|c| c.health.status == ClusterStatus::Offline)
                    .count()
                    >= 6
            }
        },
    )
    .await;
    let stats = running.stop().await;
    assert!(stats.abandoned > 0, "the stop came mid-tick: {stats:?}");

    let mut updated = 0;
    for old in before {
        let new = store.cluster(&old.name).await.unwrap();
        let app = store.app(&format!("app-{}", old.name)).await.unwrap();
        let outages = store.outages(&old.name).await.unwrap();
        if new.health.last_probe == old.health.last_probe {
            assert_eq!(new.health.status, ClusterStatus::Online, "{}", old.name);
            assert_eq!((app.status, app.degraded_by), (AppStatus::Deployed, None));
            assert!(outages.is_empty(), "{}", old.name);
        } else {
            updated += 1;
            assert_eq!(new.health.status, ClusterStatus::Offline, "{}", old.name);
            assert_eq!(outages.len(), 1, "{}", old.name);
            assert_eq!(app.status, AppStatus::Degraded, "{}", old.name);
            assert_eq!(app.degraded_by.map(|o| o.0), Some(outages[0].id));
            let events = store.events(Some(&old.name)).await.unwrap();
            assert!(events.iter().any(|e| e.kind == "apps-degraded"));
        }
    }
    assert!((6..30).contains(&updated), "{updated} clusters updated");
}

/// A prober that keeps the targets it is handed.
#[derive(Debug, Clone, Default)]
struct CapturingProber {
    targets: std::sync::Arc<std::sync::Mutex<Vec<vigil_domain::probe::ProbeTarget>>>,
}

impl vigil_domain::probe::Prober for CapturingProber {
    async fn probe(
        &self,
        target: &vigil_domain::probe::ProbeTarget,
    ) -> vigil_decision::ProbeOutcome {
        self.targets.lock().unwrap().push(target.clone());
        vigil_decision::ProbeOutcome::Healthy
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prober_is_handed_the_clusters_labels_and_parameters_as_stored() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let clusters = names("p", 2);
    register(&sandbox, &store, &clusters).await;
    // Stored as the API stores them: JSON objects; a credential as a reference, and a
    // value of another JSON type taken as its text.
    sqlx::query("UPDATE clusters SET labels = ?, plugin_parameters = ? WHERE name = ?")
        .bind(r#"{"env":"prod","zone":"eu-1"}"#)
        .bind(r#"{"token":"file:///etc/vigil/token","retries":3}"#)
        .bind("p00")
        .execute(store.pool())
        .await
        .unwrap();

    let record = store.cluster("p00").await.unwrap();
    assert_eq!(record.labels.get("zone").map(String::as_str), Some("eu-1"));
    assert_eq!(
        record.parameters.get("retries").map(String::as_str),
        Some("3")
    );

    let prober = CapturingProber::default();
    let settings = settings(60, 2);
    for name in &clusters {
        probe_now(&store, &prober, &settings, name).await.unwrap();
    }
    let targets = prober.targets.lock().unwrap().clone();
    assert_eq!(targets.len(), 2);
    let labelled = targets.iter().find(|t| t.name == "p00").unwrap();
    let pairs = |map: &std::collections::BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(pairs(&labelled.labels), ["env=prod", "zone=eu-1"]);
    assert_eq!(
        pairs(&labelled.parameters),
        ["retries=3", "token=file:///etc/vigil/token"]
    );
    let plain = targets.iter().find(|t| t.name == "p01").unwrap();
    assert!(plain.labels.is_empty() && plain.parameters.is_empty());
}
