//! History retention on a temporary SQLite file: old events and closed outages are
//! pruned, recent ones kept, an open outage and its events never pruned, an outage
//! an app still points at never pruned, deployments kept; the background loop; and
//! the setting of `vigil serve`.

use std::time::Duration;

use crate::process;
use vigil_test_support::wait;

use vigil_decision::{AppStatus, PolicyOverrides, Timestamp};
use vigil_domain::probe::wall_clock;
use vigil_engine::retention::{retention_cutoff, retention_loop};
use vigil_store::{PRUNE_BATCH, PrunedHistory, Store};

const DAY: i64 = 86_400;

fn day(n: i64) -> Timestamp {
    Timestamp::from_secs(n * DAY)
}

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_path(&dir.path().join("vigil.db"))
        .await
        .unwrap();
    for name in ["a", "b"] {
        store
            .register_cluster(
                name,
                "https://127.0.0.1:6443",
                &format!("/k/{name}.yaml#{name}"),
                &PolicyOverrides::default(),
                day(1),
            )
            .await
            .unwrap();
    }
    // The registrations' own events are old history too; start from none.
    sqlx::query("DELETE FROM events")
        .execute(store.pool())
        .await
        .unwrap();
    (dir, store)
}

async fn cluster_id(store: &Store, name: &str) -> i64 {
    store.cluster(name).await.unwrap().id.0
}

async fn outage(store: &Store, cluster: &str, opened: i64, closed: Option<i64>) -> i64 {
    let cluster = cluster_id(store, cluster).await;
    sqlx::query_scalar(
        "INSERT INTO outages (cluster_id, opened_at, closed_at) VALUES (?, ?, ?) RETURNING id",
    )
    .bind(cluster)
    .bind(day(opened).0)
    .bind(closed.map(|d| day(d).0))
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Records an event at `at` (an engine-wide event when `cluster` is `None`); its
/// kind names it in the assertions.
async fn event(
    store: &Store,
    at: Timestamp,
    cluster: Option<&str>,
    outage: Option<i64>,
    kind: &str,
) {
    let id = match cluster {
        Some(name) => Some(cluster_id(store, name).await),
        None => None,
    };
    sqlx::query(
        "INSERT INTO events (at, cluster_id, cluster_name, outage_id, kind) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(at.0)
    .bind(id)
    .bind(cluster)
    .bind(outage)
    .bind(kind)
    .execute(store.pool())
    .await
    .unwrap();
}

async fn kinds(store: &Store) -> Vec<String> {
    store
        .events(None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

async fn outage_ids(store: &Store) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM outages ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn old_history_goes_while_open_outages_referenced_outages_and_deployments_stay() {
    let (_dir, store) = store().await;
    // Kept 30 days as of day 100: everything before day 70 is old.
    let before = retention_cutoff(day(100), 30);
    assert_eq!(before, day(70));

    let closed_old = outage(&store, "a", 10, Some(11)).await;
    let referenced = outage(&store, "a", 20, Some(21)).await;
    let closed_recent = outage(&store, "a", 79, Some(80)).await;
    let open = outage(&store, "b", 5, None).await;
    sqlx::query("UPDATE clusters SET status = 'OFFLINE', open_outage_id = ? WHERE name = 'b'")
        .bind(open)
        .execute(store.pool())
        .await
        .unwrap();
    // An app deployed long ago and still marked by the old outage of `a` (a marker
    // is only cleared by recovery, a redeploy, a reassignment or the platform).
    store
        .register_app("shop", "a", AppStatus::Pending, day(1))
        .await
        .unwrap();
    store
        .record_deployment("shop", Some("v1"), None, day(2))
        .await
        .unwrap();
    sqlx::query("UPDATE apps SET status = 'DEGRADED', degraded_by_outage = ?")
        .bind(referenced)
        .execute(store.pool())
        .await
        .unwrap();

    event(
        &store,
        day(10),
        Some("a"),
        Some(closed_old),
        "old-outage-opened",
    )
    .await;
    event(
        &store,
        day(11),
        Some("a"),
        Some(closed_old),
        "old-outage-closed",
    )
    .await;
    event(
        &store,
        day(20),
        Some("a"),
        Some(referenced),
        "referenced-outage-opened",
    )
    .await;
    event(&store, day(4), Some("b"), None, "b-before-its-outage").await;
    event(&store, day(5), Some("b"), Some(open), "open-outage-opened").await;
    event(&store, day(6), Some("b"), None, "b-during-its-outage").await;
    event(&store, day(30), None, None, "old-brake-engaged").await;
    event(&store, day(69), Some("a"), None, "a-day-69").await;
    event(&store, day(70), Some("a"), None, "a-day-70").await;
    event(
        &store,
        day(79),
        Some("a"),
        Some(closed_recent),
        "recent-outage-opened",
    )
    .await;
    event(&store, day(95), Some("a"), None, "a-day-95").await;

    let pruned = store.prune_history(before).await.unwrap();
    assert_eq!(
        pruned,
        PrunedHistory {
            // Six written above, and the history events of the app's registration
            // (day 1) and deployment (day 2).
            events: 8,
            outages: 1
        }
    );
    assert_eq!(
        kinds(&store).await,
        [
            "open-outage-opened",
            "b-during-its-outage",
            "a-day-70",
            "recent-outage-opened",
            "a-day-95",
        ]
    );
    assert_eq!(
        outage_ids(&store).await,
        [referenced, closed_recent, open],
        "the old closed outage goes; the referenced, the recent and the open one stay"
    );
    let deployments: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deployments")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(deployments, 1, "deployments are records, not history");

    // Once the platform clears the marker, the old outage may go too.
    store
        .set_app_status("shop", AppStatus::Deployed, day(100))
        .await
        .unwrap();
    let pruned = store.prune_history(before).await.unwrap();
    assert_eq!(
        pruned,
        PrunedHistory {
            events: 0,
            outages: 1
        }
    );
    assert_eq!(outage_ids(&store).await, [closed_recent, open]);

    // Much later the open outage and its events are still there.
    let pruned = store.prune_history(day(10_000)).await.unwrap();
    assert_eq!(pruned.outages, 1, "only the closed recent outage goes");
    assert_eq!(outage_ids(&store).await, [open]);
    assert_eq!(
        kinds(&store).await,
        ["open-outage-opened", "b-during-its-outage"]
    );
}

#[tokio::test]
async fn a_large_backlog_is_pruned_in_batches() {
    let (_dir, store) = store().await;
    let old = usize::try_from(PRUNE_BATCH).unwrap() * 2 + 17;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) \
         INSERT INTO events (at, kind) SELECT ?, 'old' FROM n",
    )
    .bind(i64::try_from(old).unwrap())
    .bind(day(1).0)
    .execute(store.pool())
    .await
    .unwrap();
    event(&store, day(99), Some("a"), None, "recent").await;
    let pruned = store.prune_history(day(70)).await.unwrap();
    assert_eq!(pruned.events, u64::try_from(old).unwrap());
    assert_eq!(kinds(&store).await, ["recent"]);
}

#[tokio::test]
async fn the_retention_loop_prunes_at_start_up_and_stops_on_shutdown() {
    let (_dir, store) = store().await;
    let now = wall_clock();
    event(
        &store,
        now.plus_secs(-40 * DAY),
        Some("a"),
        None,
        "forty-days-ago",
    )
    .await;
    event(
        &store,
        now.plus_secs(-20 * DAY),
        Some("a"),
        None,
        "twenty-days-ago",
    )
    .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let owner = vigil_engine::sharing::Owner::alone();
    let task = tokio::spawn(retention_loop(store.clone(), 30, owner, async {
        let _ = stopped.await;
    }));
    let last = std::cell::RefCell::new(Vec::new());
    wait::until_async(
        "the old event is pruned",
        Duration::from_secs(10),
        || format!("never pruned: {:?}", last.borrow()),
        async || {
            let kinds = kinds(&store).await;
            let pruned = kinds == ["twenty-days-ago"];
            *last.borrow_mut() = kinds;
            pruned.then_some(())
        },
    )
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();
}

#[test]
fn serve_refuses_a_retention_of_zero_or_not_a_number() {
    for value in ["0", "a month", "-3"] {
        let dir = tempfile::tempdir().unwrap();
        let output = process::vigil(dir.path())
            .arg("serve")
            .env("VIGIL_HISTORY_RETENTION_DAYS", value)
            .output()
            .unwrap();
        let message = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{value}: {message}");
        assert!(
            message.contains("VIGIL_HISTORY_RETENTION_DAYS") && message.contains(value),
            "{value}: {message}"
        );
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
    let dir = tempfile::tempdir().unwrap();
    let help = process::vigil(dir.path())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("VIGIL_HISTORY_RETENTION_DAYS"), "{help}");
    assert!(help.contains("[default: 30]"), "{help}");
}
