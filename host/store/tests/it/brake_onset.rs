//! The brake at the onset of a fleet-wide failure, on each backend: a cluster found healthy
//! just before the onset, and not probed again yet, must not keep the brake released when
//! the first cluster reaches its second failure one interval after the onset — that
//! failure is judged on the fleet since the cluster's previous counted failure. An isolated
//! failure, among clusters that keep answering, still takes its cluster OFFLINE.

use vigil_decision::{ClusterStatus, ProbeOutcome, Timestamp};
use vigil_store::{Backend, Store};

use super::backends::{Fresh, refused, register, settings, t};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    a_healthy_outcome_from_before_the_onset_does_not_hold_the_brake_off(
        Fresh::new(Backend::Sqlite).await,
    )
    .await;
}

#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    a_healthy_outcome_from_before_the_onset_does_not_hold_the_brake_off(
        Fresh::new(Backend::Postgres).await,
    )
    .await;
}

/// `t(seconds)` plus `millis`.
fn at(seconds: i64, millis: i64) -> Timestamp {
    Timestamp(t(seconds).0 + millis)
}

async fn apply(store: &Store, name: &str, outcome: &ProbeOutcome, now: Timestamp) {
    let id = store.cluster(name).await.unwrap().id;
    store
        .apply_probe(id, outcome, now, Timestamp(now.0 + 60_000), &settings())
        .await
        .unwrap()
        .unwrap();
}

async fn a_healthy_outcome_from_before_the_onset_does_not_hold_the_brake_off(db: Fresh) {
    let store = &db.store;
    // Five clusters probed every 60 s; the last one answered 300 ms before the onset.
    for (i, millis) in [0, 500, 1_000, 1_200, 1_500].into_iter().enumerate() {
        let name = format!("c{i}");
        register(store, &name).await;
        apply(store, &name, &ProbeOutcome::Healthy, at(0, millis)).await;
    }
    // Everything refuses from 1.8 s on: c0..c3 are probed and fail; c4 is not due yet.
    for (i, millis) in [2_000, 2_500, 3_000, 3_200].into_iter().enumerate() {
        apply(store, &format!("c{i}"), &refused(), at(0, millis)).await;
    }
    assert!(!store.brake_state().await.unwrap().verdict.holds());
    // One interval on, c0 fails again before c4 is probed again: the brake engages and
    // c0 stays ONLINE.
    apply(store, "c0", &refused(), at(61, 0)).await;
    let brake = store.brake_state().await.unwrap();
    assert!(brake.verdict.holds(), "{brake:?}");
    assert_eq!(
        store.cluster("c0").await.unwrap().health.status,
        ClusterStatus::Online
    );

    // An isolated failure: c5 alone fails while the others answered since its first
    // failure; it goes OFFLINE.
    let fresh = Fresh::new(store.backend()).await;
    let store = &fresh.store;
    for i in 0..5 {
        register(store, &format!("d{i}")).await;
        apply(
            store,
            &format!("d{i}"),
            &ProbeOutcome::Healthy,
            at(0, i * 100),
        )
        .await;
    }
    apply(store, "d0", &refused(), at(2, 0)).await;
    for i in 1..5 {
        apply(
            store,
            &format!("d{i}"),
            &ProbeOutcome::Healthy,
            at(30, i * 100),
        )
        .await;
    }
    apply(store, "d0", &refused(), at(62, 0)).await;
    assert!(!store.brake_state().await.unwrap().verdict.holds());
    assert_eq!(
        store.cluster("d0").await.unwrap().health.status,
        ClusterStatus::Offline
    );
}
