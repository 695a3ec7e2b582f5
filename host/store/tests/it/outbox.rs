//! The notifications outbox, on each backend: a notification is committed with its change
//! (and only notifiable changes have one), completed with the cluster's reason as the
//! change left it; a sink moves through the rows one at a time, in order, only under its
//! lease; pruning keeps what a sink has not been sent.

use std::collections::BTreeMap;

use vigil_decision::{AppStatus, ProbeOutcome};
use vigil_store::outbox::{OutboxRecord, Passed, sink_lease};
use vigil_store::{Backend, ClusterPatch, Store};

use super::backends::{Fresh, probe, refused, register, t, take_down};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    outbox_rows_follow_their_changes_and_sinks_move_one_row_at_a_time(
        Fresh::new(Backend::Sqlite).await,
    )
    .await;
}

#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    outbox_rows_follow_their_changes_and_sinks_move_one_row_at_a_time(
        Fresh::new(Backend::Postgres).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brake_changes_and_plugin_rollbacks_are_notified_sqlite() {
    brake_changes_and_plugin_rollbacks_are_notified(Fresh::new(Backend::Sqlite).await).await;
}

#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brake_changes_and_plugin_rollbacks_are_notified_postgres() {
    brake_changes_and_plugin_rollbacks_are_notified(Fresh::new(Backend::Postgres).await).await;
}

/// The fleet's own events: the brake engaging (and what it suppressed, nothing going
/// OFFLINE) and a plugin generation rolled back are notified; a promotion is not.
async fn brake_changes_and_plugin_rollbacks_are_notified(db: Fresh) {
    let store = &db.store;
    store.register_sink("hook", None).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = register(store, &format!("c{i}")).await;
        probe(store, id, &ProbeOutcome::Healthy, 0).await;
        ids.push(id);
    }
    for round in 0..4 {
        for &id in &ids {
            probe(store, id, &refused(), 10 + round * 40).await;
        }
    }
    for (kind, detail) in [
        (
            "plugin-promoted",
            serde_json::json!({"plugin": "kube", "generation": 2}),
        ),
        (
            "plugin-rolled-back",
            serde_json::json!({"plugin": "kube", "generation": 2}),
        ),
    ] {
        store
            .record_plugin_event(kind, &detail, None, t(500))
            .await
            .unwrap();
    }
    let rows = pending(store, "hook").await;
    let kinds: Vec<&str> = rows.iter().map(|row| row.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "status-changed",
            "status-changed",
            "status-changed",
            "status-changed",
            "status-changed",
            "brake-engaged",
            "plugin-rolled-back"
        ],
        "the first statuses, then the brake, never an OFFLINE: {rows:?}"
    );
    assert!(rows[5].cluster_name.is_none());
    assert_eq!(payload(&rows[6])["detail"]["generation"], 2);
}

fn payload(row: &OutboxRecord) -> serde_json::Value {
    serde_json::from_str(&row.payload).unwrap()
}

async fn pending(store: &Store, sink: &str) -> Vec<OutboxRecord> {
    store.outbox_after(sink, 100).await.unwrap()
}

async fn outbox_rows_follow_their_changes_and_sinks_move_one_row_at_a_time(db: Fresh) {
    let store = &db.store;
    let hook = store.register_sink("hook", None).await.unwrap();
    assert_eq!((hook.attempts, hook.delivered), (0, 0));

    let id = register(store, "c").await;
    store
        .update_cluster(
            "c",
            &ClusterPatch {
                labels: Some(BTreeMap::from([("env".to_owned(), "prod".to_owned())])),
                ..Default::default()
            },
            Some("ops"),
            t(1),
        )
        .await
        .unwrap();
    store
        .register_app("shop", "c", AppStatus::Deployed, t(1))
        .await
        .unwrap();
    probe(store, id, &ProbeOutcome::Healthy, 2).await;
    take_down(store, id, 100).await;

    let rows = pending(store, "hook").await;
    let kinds: Vec<(&str, serde_json::Value)> = rows
        .iter()
        .map(|row| (row.kind.as_str(), payload(row)["detail"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "status-changed",
                serde_json::json!({"from": "UNKNOWN", "to": "ONLINE", "transition": 1})
            ),
            (
                "status-changed",
                serde_json::json!({"from": "ONLINE", "to": "OFFLINE", "transition": 2})
            ),
            ("apps-degraded", payload(&rows[2])["detail"].clone()),
        ],
        "registrations, label changes and counted failures are not notified: {rows:?}"
    );
    let offline = &rows[1];
    assert_eq!(offline.cluster_name.as_deref(), Some("c"));
    assert_eq!(offline.reason_class.as_deref(), Some("refused"));
    assert_eq!(offline.reason.as_deref(), Some("connection refused"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&offline.labels).unwrap(),
        serde_json::json!({"env": "prod"})
    );
    assert_eq!(payload(&rows[2])["apps"], serde_json::json!(["shop"]));
    // The history keeps the names too.
    let degraded = store
        .events(None)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "apps-degraded")
        .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&degraded.detail).unwrap()["app_names"],
        serde_json::json!(["shop"])
    );
    assert!(payload(&rows[2])["outage"].is_i64(), "{rows:?}");
    assert!(
        rows.windows(2)
            .all(|w| (w[0].position, w[0].event_id) < (w[1].position, w[1].event_id)),
        "{rows:?}"
    );

    // With replicas, a sink moves only under its lease (one engine holds every lease of
    // a SQLite file).
    if store.backend() == Backend::Postgres {
        assert!(
            !store
                .sink_advanced(
                    "hook",
                    &sink_lease("hook"),
                    &rows[0],
                    Passed::Delivered,
                    "r1",
                    t(200)
                )
                .await
                .unwrap(),
            "no lease, no move"
        );
    }
    assert!(
        store
            .hold_lease(
                &sink_lease("hook"),
                "r1",
                std::time::Duration::from_secs(30)
            )
            .await
            .unwrap()
    );

    // One row at a time, in order: not past a row it was not sent, not twice.
    assert!(
        !store
            .sink_advanced(
                "hook",
                &sink_lease("hook"),
                &rows[1],
                Passed::Delivered,
                "r1",
                t(200)
            )
            .await
            .unwrap()
    );
    assert!(
        store
            .sink_advanced(
                "hook",
                &sink_lease("hook"),
                &rows[0],
                Passed::Delivered,
                "r1",
                t(200)
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .sink_advanced(
                "hook",
                &sink_lease("hook"),
                &rows[0],
                Passed::Delivered,
                "r1",
                t(200)
            )
            .await
            .unwrap()
    );
    assert_eq!(pending(store, "hook").await, rows[1..]);
    assert_eq!(store.outbox_pending("hook").await.unwrap(), 2);

    // Failed attempts count, and from the third in a row the sink is failing.
    for attempt in 1..=3 {
        let sink = store
            .sink_failed("hook", "connection refused", 3, t(200 + attempt))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(sink.attempts, attempt);
        assert_eq!(sink.failing_since.is_some(), attempt >= 3, "{sink:?}");
    }

    // With replicas, only the holder of the sink's lease moves it.
    if store.backend() == Backend::Postgres {
        assert!(
            !store
                .sink_advanced(
                    "hook",
                    &sink_lease("hook"),
                    &rows[1],
                    Passed::Delivered,
                    "r2",
                    t(210)
                )
                .await
                .unwrap(),
            "a replica without the lease moves nothing"
        );
    }
    assert!(
        store
            .sink_advanced(
                "hook",
                &sink_lease("hook"),
                &rows[1],
                Passed::Delivered,
                "r1",
                t(210)
            )
            .await
            .unwrap()
    );
    let sinks = store.sinks().await.unwrap();
    assert_eq!(sinks.len(), 1);
    assert_eq!(
        (
            sinks[0].attempts,
            sinks[0].failing_since,
            sinks[0].delivered
        ),
        (0, None, 2),
        "{sinks:?}"
    );

    // A sink configured later is sent what happens from then on.
    assert_eq!(
        store.register_sink("late", None).await.unwrap().event_id,
        rows[2].event_id
    );
    assert!(pending(store, "late").await.is_empty());

    // Pruning keeps what some sink was not sent; once every sink had it, it goes.
    assert_eq!(store.prune_outbox(t(0)).await.unwrap(), 2);
    assert_eq!(pending(store, "hook").await, rows[2..]);
    assert!(
        store
            .sink_advanced(
                "hook",
                &sink_lease("hook"),
                &rows[2],
                Passed::Filtered,
                "r1",
                t(220)
            )
            .await
            .unwrap()
    );
    assert_eq!(store.prune_outbox(t(0)).await.unwrap(), 1);
    assert_eq!(
        store
            .forget_sinks_except(&["hook".to_owned()])
            .await
            .unwrap(),
        1
    );

    // Recovery and its restoration are notified too, and the open outage is gone.
    assert_eq!(store.open_outages().await.unwrap().len(), 1);
    probe(store, id, &ProbeOutcome::Healthy, 300).await;
    let kinds: Vec<String> = pending(store, "hook")
        .await
        .into_iter()
        .map(|row| row.kind)
        .collect();
    assert_eq!(kinds, ["status-changed", "apps-restored"]);
    assert!(store.open_outages().await.unwrap().is_empty());

    // A position split in several (a sink given a second receiver URL) goes on from where
    // the sink's was, and each part moves on its own.
    let split = store.register_sink("hook#2", Some("hook")).await.unwrap();
    assert_eq!(split.event_id, rows[2].event_id);
    let rows = pending(store, "hook#2").await;
    assert_eq!(rows, pending(store, "hook").await);

    // A notification given up on: passed over, counted with its event and why; the
    // position's failing state stays until one is delivered.
    for attempt in 1..=3 {
        store
            .sink_failed("hook#2", "the receiver answered 503", 2, t(400 + attempt))
            .await
            .unwrap();
    }
    assert!(
        store
            .sink_advanced(
                "hook#2",
                &sink_lease("hook"),
                &rows[0],
                Passed::DeadLettered {
                    error: "3 attempts failed, the last: the receiver answered 503"
                },
                "r1",
                t(410),
            )
            .await
            .unwrap()
    );
    let split = store.register_sink("hook#2", Some("hook")).await.unwrap();
    assert_eq!(
        (
            split.event_id,
            split.attempts,
            split.failing_since.is_some(),
            split.delivered,
            split.dead_letters,
            split.last_dead_letter_event,
            split.last_dead_letter_error.as_deref(),
        ),
        (
            rows[0].event_id,
            0,
            true,
            0,
            1,
            Some(rows[0].event_id),
            Some("3 attempts failed, the last: the receiver answered 503"),
        ),
        "{split:?}"
    );
    assert_eq!(pending(store, "hook#2").await, rows[1..]);
    assert_eq!(
        pending(store, "hook").await,
        rows,
        "the other part did not move"
    );
    assert!(
        store
            .sink_advanced(
                "hook#2",
                &sink_lease("hook"),
                &rows[1],
                Passed::Delivered,
                "r1",
                t(420)
            )
            .await
            .unwrap()
    );
    let split = store.register_sink("hook#2", None).await.unwrap();
    assert_eq!(
        (split.failing_since, split.last_error, split.dead_letters),
        (None, None, 1),
        "a delivery ends the failure; the dead letters stay counted"
    );
}
