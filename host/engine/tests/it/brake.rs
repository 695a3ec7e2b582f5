//! The mass-failure brake (docs/rules.md#brake) through the worker, on a real SQLite file,
//! with a control run where the brake is off.

use vigil_test_support::engine as support;

use std::time::Duration;

use support::{Behaviour, Running, Sandbox, ScriptedProber, settings, wait_until};
use vigil_decision::{AppStatus, BrakeVerdict, ClusterStatus, PolicyOverrides};
use vigil_engine::worker::WorkerSettings;
use vigil_store::Store;

const FLEET: [&str; 5] = ["b0", "b1", "b2", "b3", "b4"];
const THRESHOLD: u32 = 2;

async fn fleet(sandbox: &Sandbox) -> Store {
    let store = sandbox.store().await;
    for (i, name) in FLEET.iter().enumerate() {
        let reference = sandbox.kubeconfig(name, 41_000 + i as u16);
        let now = vigil_domain::probe::wall_clock();
        store
            .register_cluster(
                name,
                "https://127.0.0.1",
                &reference,
                &PolicyOverrides::default(),
                now,
            )
            .await
            .unwrap();
        store
            .register_app(&format!("app-{name}"), name, AppStatus::Deployed, now)
            .await
            .unwrap();
    }
    store
}

fn brake_settings(enabled: bool) -> WorkerSettings {
    let mut settings = settings(1, THRESHOLD);
    settings.brake.enabled = enabled;
    settings
}

/// Runs the fleet healthy until ONLINE, then failing until every cluster has
/// failed `THRESHOLD + 1` probes. Returns the running worker.
async fn fail_all(store: &Store, prober: &ScriptedProber, settings: WorkerSettings) -> Running {
    let running = Running::start(store.clone(), prober.clone(), settings);
    wait_until(Duration::from_secs(5), "the fleet is ONLINE", || {
        let store = store.clone();
        async move {
            statuses(&store)
                .await
                .iter()
                .all(|s| *s == ClusterStatus::Online)
        }
    })
    .await;
    let before: Vec<usize> = FLEET.iter().map(|n| prober.call_count(n)).collect();
    prober.set_all(Behaviour::refused());
    let target = THRESHOLD as usize + 1;
    wait_until(
        Duration::from_secs(10),
        "every cluster failed threshold + 1 probes",
        || {
            let prober = prober.clone();
            let before = before.clone();
            async move {
                FLEET
                    .iter()
                    .zip(&before)
                    .all(|(n, b)| prober.call_count(n) >= b + target)
            }
        },
    )
    .await;
    running
}

async fn statuses(store: &Store) -> Vec<ClusterStatus> {
    let mut statuses = Vec::new();
    for name in FLEET {
        statuses.push(store.cluster(name).await.unwrap().health.status);
    }
    statuses
}

async fn app_statuses(store: &Store) -> Vec<AppStatus> {
    let mut statuses = Vec::new();
    for name in FLEET {
        statuses.push(store.app(&format!("app-{name}")).await.unwrap().status);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_brake_a_fleet_wide_failure_takes_everything_offline() {
    let sandbox = Sandbox::new();
    let store = fleet(&sandbox).await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = fail_all(&store, &prober, brake_settings(false)).await;
    running.stop().await;
    assert_eq!(statuses(&store).await, vec![ClusterStatus::Offline; 5]);
    assert_eq!(app_statuses(&store).await, vec![AppStatus::Degraded; 5]);
    assert!(!store.brake_state().await.unwrap().verdict.holds());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brake_holds_through_a_restart_and_a_full_threshold_is_needed_after_release() {
    let sandbox = Sandbox::new();
    let store = fleet(&sandbox).await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let running = fail_all(&store, &prober, brake_settings(true)).await;
    running.stop().await;

    let brake = store.brake_state().await.unwrap();
    assert!(brake.verdict.holds(), "{brake:?}");
    assert!(
        brake.suppressed >= 5,
        "suppressed failures are recorded: {brake:?}"
    );
    assert_eq!(statuses(&store).await, vec![ClusterStatus::Online; 5]);
    assert_eq!(app_statuses(&store).await, vec![AppStatus::Deployed; 5]);

    // Restarted while the brake holds: still held, nothing degraded.
    store.close().await;
    drop(store);
    let store = sandbox.store().await;
    let running = Running::start(store.clone(), prober.clone(), brake_settings(true));
    let before: Vec<usize> = FLEET.iter().map(|n| prober.call_count(n)).collect();
    wait_until(Duration::from_secs(6), "two more failing rounds", || {
        let prober = prober.clone();
        let before = before.clone();
        async move {
            FLEET
                .iter()
                .zip(&before)
                .all(|(n, b)| prober.call_count(n) >= b + 2)
        }
    })
    .await;
    assert!(store.brake_state().await.unwrap().verdict.holds());
    assert_eq!(statuses(&store).await, vec![ClusterStatus::Online; 5]);
    assert_eq!(app_statuses(&store).await, vec![AppStatus::Deployed; 5]);

    // b0 answers again: vigil can reach clusters, the brake releases, and the
    // others must fail a whole threshold anew before going OFFLINE.
    let before_release = store
        .events(None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .max()
        .unwrap_or(0);
    prober.set("b0", Behaviour::healthy());
    wait_until(
        Duration::from_secs(6),
        "the others go OFFLINE after release",
        || {
            let store = store.clone();
            async move {
                statuses(&store).await[1..]
                    .iter()
                    .all(|s| *s == ClusterStatus::Offline)
            }
        },
    )
    .await;
    running.stop().await;

    let BrakeVerdict::Released { since: Some(_) } = store.brake_state().await.unwrap().verdict
    else {
        panic!("the brake released");
    };
    // Counted from the release that let them go: the first one after b0 answered. (While
    // the four fail on, the brake may engage and release again: its state's `since` is then
    // later than their counted failures.)
    let released = store
        .events(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.id > before_release && e.kind == "brake-released")
        .map(|e| vigil_decision::Timestamp(e.at))
        .next()
        .expect("a brake-released event after b0 answered");
    assert_eq!(statuses(&store).await[0], ClusterStatus::Online);
    assert_eq!(&app_statuses(&store).await[1..], &[AppStatus::Degraded; 4]);
    for name in &FLEET[1..] {
        let counted: Vec<serde_json::Value> = store
            .events(Some(name))
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.at >= released.0 && e.kind == "failure-counted")
            .map(|e| serde_json::from_str(&e.detail).unwrap())
            .collect();
        let counts: Vec<u64> = counted
            .iter()
            .map(|d| d["count"].as_u64().unwrap())
            .collect();
        assert_eq!(
            &counts[..2],
            &[1, 2],
            "{name} counted from zero after release: {counts:?}"
        );
    }
}
