//! What the worker records for the uptime: its run in the engines' coverage (opened at
//! start, closed at a clean stop; a run that died is closed at its last heartbeat by the
//! next start), and each conclusive probe's duration in its cluster's latency history.

use std::time::Duration;

use vigil_decision::{PolicyOverrides, Timestamp};
use vigil_domain::probe::wall_clock;
use vigil_store::Store;
use vigil_test_support::engine::{
    Behaviour, Running, Sandbox, ScriptedProber, settings, wait_until,
};

/// The coverage rows, oldest first: `(started, heartbeat, stopped)`.
async fn runs(store: &Store) -> Vec<(i64, i64, Option<i64>)> {
    sqlx::query_as("SELECT started, heartbeat, stopped FROM engine_coverage ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_records_its_run_and_its_probes_durations() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    // A run that died an hour ago, its last heartbeat ten minutes after its start.
    let dead_start = wall_clock().plus_millis(-3_600_000);
    let dead = store.open_coverage("", dead_start).await.unwrap();
    store
        .extend_coverage(dead, dead_start.plus_millis(600_000))
        .await
        .unwrap();
    let reference = sandbox.kubeconfig("a", 40_100);
    store
        .register_cluster(
            "a",
            "https://127.0.0.1",
            &reference,
            &PolicyOverrides::default(),
            wall_clock(),
        )
        .await
        .unwrap();

    let running = Running::start(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings(1, 2),
    );
    wait_until(
        Duration::from_secs(10),
        "the run is recorded and a probe's duration with it",
        || {
            let store = store.clone();
            async move {
                runs(&store).await.len() == 2
                    && !store
                        .probe_latency("a", Timestamp(0))
                        .await
                        .unwrap()
                        .is_empty()
            }
        },
    )
    .await;
    running.stop().await;

    let recorded = runs(&store).await;
    assert_eq!(
        recorded[0],
        (
            dead_start.0,
            dead_start.0 + 600_000,
            Some(dead_start.0 + 600_000)
        ),
        "the dead run ends at its last heartbeat"
    );
    let (started, heartbeat, stopped) = recorded[1];
    let stopped = stopped.expect("a clean stop closes the run");
    assert!(started <= heartbeat && heartbeat == stopped, "{recorded:?}");
    assert!(stopped <= wall_clock().0, "{recorded:?}");
    let buckets = store.probe_latency("a", Timestamp(0)).await.unwrap();
    assert!(
        buckets.iter().map(|b| b.probes).sum::<u64>() >= 1,
        "{buckets:?}"
    );
    let uptime = store.cluster_uptime("a", wall_clock(), 1).await.unwrap();
    assert!(uptime.last_24h.online > 0, "{uptime:?}");
    assert_eq!(uptime.last_24h.offline, 0, "{uptime:?}");
}
