//! The real engine (real SQLite, real time, short intervals) against the fake
//! Kubernetes API server over real TLS, through the native prober. Every
//! address is on loopback.

use std::path::Path;
use std::time::Duration;

use vigil_decision::{AppStatus, ClusterStatus, PolicyOverrides};
use vigil_domain::discovery::{self, Sources};
use vigil_domain::probe::wall_clock;
use vigil_e2e::NativeProber;
use vigil_fake_kube::{AddressPlan, Fleet, HangPoint, KubeconfigOptions, ShapePlan};
use vigil_store::{DiscoveredClusterRow, Store};
use vigil_test_support::engine::{Running, settings};
use vigil_test_support::wait::until_async_true;

const NAMESPACES: &str = "/api/v1/namespaces";

/// Starts `n` fake clusters, writes their kubeconfigs in every shape, and
/// discovers them into a fresh database.
async fn setup(n: usize, dir: &Path) -> (Fleet, Store) {
    let fleet = Fleet::builder()
        .clusters(n)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    let kubeconfigs = dir.join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfigs).unwrap();
    fleet
        .write_kubeconfigs(
            &kubeconfigs,
            &KubeconfigOptions {
                shapes: ShapePlan::Mixed,
                single_file: false,
            },
        )
        .unwrap();
    let report = discovery::discover(&Sources::new([], Some(kubeconfigs)));
    assert!(report.errors.is_empty(), "{report}");
    assert_eq!(report.clusters.len(), n, "{report}");
    let store = Store::open_path(&dir.join("vigil.db")).await.unwrap();
    let rows: Vec<DiscoveredClusterRow> = report
        .clusters
        .iter()
        .map(|c| DiscoveredClusterRow {
            name: c.name.clone(),
            endpoint: c.endpoint.clone(),
            reference: c.reference.clone(),
        })
        .collect();
    store.upsert_discovered(&rows, wall_clock()).await.unwrap();
    (fleet, store)
}

async fn all_status(store: &Store, status: ClusterStatus) -> bool {
    store
        .clusters()
        .await
        .unwrap()
        .iter()
        .all(|c| c.health.status == status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_kubeconfigs_go_online_then_an_outage_cascades_and_recovery_restores_exactly_the_marked_apps()
 {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, store) = setup(4, dir.path()).await;
    let clusters = store.clusters().await.unwrap();
    assert!(
        clusters
            .iter()
            .all(|c| c.health.status == ClusterStatus::Unknown)
    );
    let victim = fleet.get(1).unwrap().clone();
    let name = victim.name().to_owned();
    for app in ["web", "api"] {
        store
            .register_app(app, &name, AppStatus::Deployed, wall_clock())
            .await
            .unwrap();
    }
    store
        .register_app("broken", &name, AppStatus::Degraded, wall_clock())
        .await
        .unwrap();

    let engine = Running::start(store.clone(), NativeProber::default(), settings(1, 2));
    until_async_true(
        "every cluster is ONLINE",
        Duration::from_secs(10),
        async || all_status(&store, ClusterStatus::Online).await,
    )
    .await;
    for cluster in fleet.clusters() {
        let probes = cluster.log().entries_for(NAMESPACES);
        assert!(!probes.is_empty(), "{} was probed", cluster.name());
        assert!(
            probes
                .iter()
                .all(|p| p.query.as_deref() == Some("limit=1") && p.status == Some(200))
        );
    }

    victim.refuse().await.unwrap();
    until_async_true(
        "the refusing cluster is OFFLINE",
        Duration::from_secs(10),
        async || store.cluster(&name).await.unwrap().health.status == ClusterStatus::Offline,
    )
    .await;
    let offline = store.cluster(&name).await.unwrap();
    assert_eq!(offline.last_reason_class.as_deref(), Some("refused"));
    for app in ["web", "api"] {
        let app = store.app(app).await.unwrap();
        assert_eq!(app.status, AppStatus::Degraded);
        assert_eq!(app.degraded_by, offline.health.open_outage);
    }
    assert_eq!(store.app("broken").await.unwrap().degraded_by, None);
    for other in fleet.clusters().iter().filter(|c| c.name() != name) {
        assert_eq!(
            store.cluster(other.name()).await.unwrap().health.status,
            ClusterStatus::Online
        );
    }

    victim.come_back().await.unwrap();
    until_async_true(
        "the cluster is ONLINE again",
        Duration::from_secs(10),
        async || store.cluster(&name).await.unwrap().health.status == ClusterStatus::Online,
    )
    .await;
    engine.stop().await;
    for app in ["web", "api"] {
        let app = store.app(app).await.unwrap();
        assert_eq!((app.status, app.degraded_by), (AppStatus::Deployed, None));
    }
    let broken = store.app("broken").await.unwrap();
    assert_eq!(
        broken.status,
        AppStatus::Degraded,
        "a platform-degraded app is never restored"
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_cluster_times_out_while_the_server_sees_the_other_49_probed_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, store) = setup(50, dir.path()).await;
    let hanging = fleet.get(17).unwrap().clone();
    hanging.hang(HangPoint::Request).await.unwrap();

    let started = std::time::SystemTime::now();
    let engine = Running::start(store.clone(), NativeProber::default(), settings(1, 2));
    until_async_true(
        "the 49 others were probed three times",
        Duration::from_secs(15),
        async || {
            fleet
                .clusters()
                .iter()
                .filter(|c| c.name() != hanging.name())
                .all(|c| c.log().entries_for(NAMESPACES).len() >= 3)
        },
    )
    .await;
    // Its second timeout (the failure threshold) is written a moment after the others'
    // third probe: results wait briefly for others to share their commit.
    until_async_true(
        "the hanging cluster timed out to the failure threshold",
        Duration::from_secs(5),
        async || {
            let record = store.cluster(hanging.name()).await.unwrap();
            record.last_reason_class.as_deref() == Some("timeout")
                && record.health.status == ClusterStatus::Offline
        },
    )
    .await;
    engine.stop().await;

    for cluster in fleet
        .clusters()
        .iter()
        .filter(|c| c.name() != hanging.name())
    {
        let times: Vec<_> = cluster
            .log()
            .entries_for(NAMESPACES)
            .iter()
            .map(|e| e.at)
            .collect();
        let first = times[0].duration_since(started).unwrap();
        assert!(
            first < Duration::from_millis(1500),
            "{} first probed after {first:?}",
            cluster.name()
        );
        for pair in times.windows(2).take(2) {
            let gap = pair[1].duration_since(pair[0]).unwrap();
            assert!(
                gap > Duration::from_millis(800) && gap < Duration::from_millis(1800),
                "{} probed {gap:?} after the previous probe",
                cluster.name()
            );
        }
    }
    let hung = store.cluster(hanging.name()).await.unwrap();
    // Its timeouts are the cluster's failures: UNKNOWN→OFFLINE, which opens no
    // outage and degrades nothing.
    assert_eq!(hung.health.status, ClusterStatus::Offline);
    assert_eq!(hung.last_outcome.as_deref(), Some("unhealthy"));
    assert!(store.outages(hanging.name()).await.unwrap().is_empty());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_clusters_not_yet_due_are_not_probed() {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, store) = setup(5, dir.path()).await;
    let engine = Running::start(store.clone(), NativeProber::default(), settings(60, 2));
    until_async_true(
        "every cluster is ONLINE",
        Duration::from_secs(10),
        async || all_status(&store, ClusterStatus::Online).await,
    )
    .await;
    engine.stop().await;
    store.close().await;
    let before: Vec<usize> = fleet
        .clusters()
        .iter()
        .map(|c| c.log().entries_for(NAMESPACES).len())
        .collect();
    assert!(before.iter().all(|n| *n == 1), "{before:?}");

    let store = Store::open_path(&dir.path().join("vigil.db"))
        .await
        .unwrap();
    let overdue = fleet.get(3).unwrap().name().to_owned();
    sqlx::query("UPDATE clusters SET next_due = 0 WHERE name = ?")
        .bind(&overdue)
        .execute(store.pool())
        .await
        .unwrap();
    let engine = Running::start(store.clone(), NativeProber::default(), settings(60, 2));
    until_async_true(
        "the overdue cluster is probed",
        Duration::from_secs(5),
        async || fleet.get(3).unwrap().log().entries_for(NAMESPACES).len() == 2,
    )
    .await;
    // A wrong probe would have come by the time the engine, reading its schedule again
    // and again, has probed three more clusters registered one after the other (whose
    // kubeconfigs are missing: no request reaches the fleet).
    for witness in ["w1", "w2", "w3"] {
        store
            .register_cluster(
                witness,
                "https://127.0.0.1:1",
                &format!("{}#{witness}", dir.path().join("missing.yaml").display()),
                &PolicyOverrides::default(),
                wall_clock(),
            )
            .await
            .unwrap();
        until_async_true(
            &format!("the witness {witness} is probed"),
            Duration::from_secs(5),
            async || store.cluster(witness).await.unwrap().last_outcome.is_some(),
        )
        .await;
    }
    engine.stop().await;
    let after: Vec<usize> = fleet
        .clusters()
        .iter()
        .map(|c| c.log().entries_for(NAMESPACES).len())
        .collect();
    assert_eq!(
        after,
        [1, 1, 1, 2, 1],
        "only the overdue cluster was probed after the restart"
    );
    fleet.shutdown().await;
}
