//! The store's suite, run on each backend: every test here is an `async fn` taking a fresh
//! store, and [`on_each_backend!`] runs it once on a temporary SQLite file and once on a
//! fresh database of a throwaway PostgreSQL server. What a test needs of one backend only
//! (SQLite's journal, its file lock) is in the other modules.

use std::time::Duration;

use vigil_decision::{
    AppStatus, BrakeConfig, ClusterId, ClusterStatus, HealthPolicy, PolicyOverrides, ProbeOutcome,
    ReasonClass, Timestamp,
};
use vigil_store::{
    ApplySettings, Backend, ClusterSource, DiscoveredClusterRow, ProbeResult, Store, StoreError,
};

/// A fresh, empty store, and what keeps its database alive.
pub struct Fresh {
    pub store: Store,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Fresh {
    pub async fn new(backend: Backend) -> Self {
        let (url, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("vigil.db").display());
                (url, Some(dir))
            }
            Backend::Postgres => {
                let database = tokio::task::spawn_blocking(|| {
                    vigil_test_support::postgres::server().fresh_database()
                })
                .await
                .unwrap();
                (database.url, None)
            }
        };
        let store = Store::open(&url).await.unwrap();
        assert_eq!(store.backend(), backend);
        Self {
            store,
            url,
            _dir: dir,
        }
    }

    /// The same database, opened again (as a restarted vigil, or a second replica, would).
    pub async fn reopen(&self) -> Store {
        Store::open(&self.url).await.unwrap()
    }
}

/// Runs each named `async fn(Fresh)` as two tests, `NAME::sqlite` and `NAME::postgres`;
/// the second, which needs a PostgreSQL server, is of the system tier.
macro_rules! on_each_backend {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$test(super::Fresh::new(vigil_store::Backend::Sqlite).await).await;
            }
            #[cfg(feature = "system-tests")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$test(super::Fresh::new(vigil_store::Backend::Postgres).await).await;
            }
        }
    )+};
}

on_each_backend!(
    discovery_upserts_insert_update_and_never_delete_or_touch_manual_and_ignored,
    everything_the_rules_need_survives_a_reopen,
    recovery_restores_exactly_the_apps_the_outage_degraded,
    deployments_to_an_offline_cluster_are_refused,
    a_mass_failure_holds_the_brake_and_nothing_goes_offline,
    a_batch_of_results_rolls_back_only_the_cluster_whose_write_failed,
    pages_filter_by_status_condition_label_and_name,
    every_write_gives_a_cluster_a_revision_never_given_before,
    history_is_pruned_but_an_open_outage_keeps_its_events,
    a_schema_newer_than_this_vigil_is_refused,
    the_clock_is_the_databases,
    concurrent_deployments_racing_an_outage_never_leave_an_unmarked_deployed_app,
);

pub(crate) fn settings() -> ApplySettings {
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

fn row(name: &str, endpoint: &str, reference: &str) -> DiscoveredClusterRow {
    DiscoveredClusterRow {
        name: name.to_owned(),
        endpoint: endpoint.to_owned(),
        reference: reference.to_owned(),
    }
}

/// The name and revision of a page's entry.
fn key(entry: &vigil_store::PageEntry) -> (String, i64) {
    match entry {
        vigil_store::PageEntry::Known { name, revision, .. } => (name.clone(), *revision),
        vigil_store::PageEntry::Read { record, revision } => (record.name.clone(), *revision),
    }
}

fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    Timestamp(i64::try_from(since_epoch.as_millis()).unwrap())
}

pub(crate) fn t(seconds: i64) -> Timestamp {
    Timestamp::from_secs(10_000 + seconds)
}

pub(crate) fn refused() -> ProbeOutcome {
    ProbeOutcome::Unhealthy {
        class: ReasonClass::Refused,
        message: "connection refused".into(),
    }
}

pub(crate) async fn register(store: &Store, name: &str) -> ClusterId {
    store
        .register_cluster(
            name,
            "https://127.0.0.1:6443",
            &format!("/k/{name}.yaml#{name}"),
            &PolicyOverrides {
                interval_seconds: Some(60),
                ..Default::default()
            },
            t(0),
        )
        .await
        .unwrap()
}

/// Applies `outcome` to `cluster` at `t(at)`.
pub(crate) async fn probe(store: &Store, cluster: ClusterId, outcome: &ProbeOutcome, at: i64) {
    store
        .apply_probe(cluster, outcome, t(at), t(at + 30), &settings())
        .await
        .unwrap()
        .unwrap();
}

/// Takes an ONLINE cluster OFFLINE: two failures (the default threshold), further apart
/// than half the interval of 60 s.
pub(crate) async fn take_down(store: &Store, cluster: ClusterId, from: i64) {
    for at in [from, from + 40] {
        probe(store, cluster, &refused(), at).await;
    }
}

async fn discovery_upserts_insert_update_and_never_delete_or_touch_manual_and_ignored(db: Fresh) {
    let store = &db.store;
    let first = store
        .upsert_discovered(
            &[
                row("kind", "https://127.0.0.1:6443", "/k/a.yaml#kind"),
                row("k3s", "https://127.0.0.2:6443", "/k/b.yaml#k3s"),
            ],
            t(0),
        )
        .await
        .unwrap();
    assert_eq!(first.inserted, ["kind", "k3s"]);
    let kind = store.cluster("kind").await.unwrap();
    assert_eq!(kind.health.status, ClusterStatus::Unknown);
    assert_eq!(kind.source, ClusterSource::Discovered);
    assert_eq!(
        kind.next_due,
        t(0),
        "a newly inserted cluster is due at once"
    );

    register(store, "manual").await;
    store.delete_cluster("k3s", None, t(1)).await.unwrap();

    // A plan is what the upsert would do, and writes nothing.
    let rows = [
        row("kind", "https://127.0.0.1:7443", "/k/a2.yaml#kind"),
        row("k3s", "https://127.0.0.2:7443", "/k/b.yaml#k3s"),
        row("manual", "https://127.0.0.3:6443", "/k/c.yaml#manual"),
    ];
    let plan = store.plan_discovered(&rows, t(2)).await.unwrap();
    assert_eq!(
        store.cluster("kind").await.unwrap().endpoint,
        "https://127.0.0.1:6443"
    );
    let second = store.upsert_discovered(&rows, t(2)).await.unwrap();
    assert_eq!(plan, second);
    assert_eq!(second.updated, ["kind"]);
    assert_eq!(second.ignored, ["k3s"]);
    assert_eq!(second.kept_manual, ["manual"]);
    let kind = store.cluster("kind").await.unwrap();
    assert_eq!(
        (kind.endpoint.as_str(), kind.kubeconfig_secret_ref.as_str()),
        ("https://127.0.0.1:7443", "/k/a2.yaml#kind")
    );
    assert_eq!(kind.health.first_seen, t(0), "an update keeps the history");
    let third = store.upsert_discovered(&rows[..1], t(3)).await.unwrap();
    assert_eq!(third.unchanged, ["kind"]);
    assert_eq!(
        store.clusters().await.unwrap().len(),
        3,
        "discovery never deletes"
    );
    let kinds: Vec<String> = store
        .events(Some("kind"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["cluster-discovered", "cluster-rediscovered"]);
}

async fn everything_the_rules_need_survives_a_reopen(db: Fresh) {
    let store = &db.store;
    let id = register(store, "c").await;
    store
        .register_app("a", "c", AppStatus::Deployed, t(0))
        .await
        .unwrap();
    let stale = ProbeOutcome::Inconclusive {
        class: ReasonClass::PluginFault,
        message: "trap".into(),
    };
    probe(store, id, &ProbeOutcome::Healthy, 0).await;
    take_down(store, id, 10).await;
    for at in [100, 110, 120] {
        probe(store, id, &stale, at).await;
    }
    let before = store.cluster("c").await.unwrap();
    assert_eq!(before.health.status, ClusterStatus::Offline);
    assert_eq!(before.health.consecutive_inconclusive, 3);
    assert!(before.health.open_outage.is_some());
    store.close().await;

    let store = db.reopen().await;
    let after = store.cluster("c").await.unwrap();
    assert_eq!(after.health, before.health);
    assert_eq!(after.next_due, t(150));
    assert_eq!(after.last_reason_class.as_deref(), Some("plugin-fault"));
    let app = store.app("a").await.unwrap();
    assert_eq!(
        (app.status, app.degraded_by),
        (AppStatus::Degraded, before.health.open_outage)
    );
    let gone = store
        .apply_probe(
            ClusterId(999_999),
            &ProbeOutcome::Healthy,
            t(130),
            t(160),
            &settings(),
        )
        .await
        .unwrap();
    assert!(gone.is_none());
}

async fn recovery_restores_exactly_the_apps_the_outage_degraded(db: Fresh) {
    let store = &db.store;
    let id = register(store, "c").await;
    probe(store, id, &ProbeOutcome::Healthy, 0).await;
    for (app, status) in [
        ("web", AppStatus::Deployed),
        ("api", AppStatus::Deployed),
        ("batch", AppStatus::Pending),
        ("broken", AppStatus::Failed),
    ] {
        store.register_app(app, "c", status, t(0)).await.unwrap();
    }
    take_down(store, id, 10).await;
    let outage = store
        .cluster("c")
        .await
        .unwrap()
        .health
        .open_outage
        .unwrap();
    let statuses = |apps: Vec<vigil_store::AppRecord>| {
        apps.into_iter()
            .map(|a| (a.name, a.status, a.degraded_by))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        statuses(store.apps().await.unwrap()),
        [
            ("api".to_owned(), AppStatus::Degraded, Some(outage)),
            ("batch".to_owned(), AppStatus::Pending, None),
            ("broken".to_owned(), AppStatus::Failed, None),
            ("web".to_owned(), AppStatus::Degraded, Some(outage)),
        ]
    );
    // The platform takes one app over: its marker goes, and recovery leaves it alone.
    store
        .set_app_status("api", AppStatus::Failed, t(100))
        .await
        .unwrap();
    for at in [200, 230] {
        probe(store, id, &ProbeOutcome::Healthy, at).await;
    }
    assert_eq!(
        store.cluster("c").await.unwrap().health.status,
        ClusterStatus::Online
    );
    assert_eq!(
        statuses(store.apps().await.unwrap()),
        [
            ("api".to_owned(), AppStatus::Failed, None),
            ("batch".to_owned(), AppStatus::Pending, None),
            ("broken".to_owned(), AppStatus::Failed, None),
            ("web".to_owned(), AppStatus::Deployed, None),
        ]
    );
    let outages = store.outages("c").await.unwrap();
    assert_eq!(outages.len(), 1);
    assert_eq!(outages[0].closed_at, Some(t(200).0), "one success recovers");
    // Each confirmed transition carries its number: UNKNOWN→ONLINE, ONLINE→OFFLINE (the
    // outage's), OFFLINE→ONLINE.
    let numbers: Vec<serde_json::Value> = store
        .events(Some("c"))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "status-changed")
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.detail).unwrap()["transition"].clone()
        })
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    let transition: Option<i64> =
        sqlx::query_scalar("SELECT transition FROM outages WHERE id = $1")
            .bind(outages[0].id)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(transition, Some(2));
    let kinds: Vec<String> = store
        .events(Some("c"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| k.starts_with("apps-") || k == "status-changed")
        .collect();
    assert_eq!(
        kinds,
        [
            "status-changed",
            "status-changed",
            "apps-degraded",
            "status-changed",
            "apps-restored"
        ]
    );
}

async fn deployments_to_an_offline_cluster_are_refused(db: Fresh) {
    let store = &db.store;
    let id = register(store, "c").await;
    register(store, "other").await;
    store
        .register_app("web", "c", AppStatus::Pending, t(0))
        .await
        .unwrap();
    store
        .register_app("moving", "other", AppStatus::Pending, t(0))
        .await
        .unwrap();
    probe(store, id, &ProbeOutcome::Healthy, 0).await;
    take_down(store, id, 10).await;
    let refused = store
        .record_deployment("web", Some("v2"), None, t(100))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::ClusterOffline { .. }),
        "{refused}"
    );
    let refused = store.reassign_app("moving", "c", t(100)).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::ClusterOffline { .. }),
        "{refused}"
    );
    assert_eq!(store.app("web").await.unwrap().status, AppStatus::Pending);
    for at in [200, 230] {
        probe(store, id, &ProbeOutcome::Healthy, at).await;
    }
    store
        .record_deployment("web", Some("v2"), None, t(300))
        .await
        .unwrap();
    assert_eq!(store.app("web").await.unwrap().status, AppStatus::Deployed);
}

async fn a_mass_failure_holds_the_brake_and_nothing_goes_offline(db: Fresh) {
    let store = &db.store;
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
    for i in 0..5 {
        let cluster = store.cluster(&format!("c{i}")).await.unwrap();
        assert_eq!(cluster.health.status, ClusterStatus::Online, "c{i}");
    }
    let brake = store.brake_state().await.unwrap();
    assert!(brake.verdict.holds(), "{brake:?}");
    assert!(brake.suppressed > 0, "{brake:?}");
    let engaged = store
        .events(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "brake-engaged")
        .count();
    assert_eq!(engaged, 1);
}

async fn a_batch_of_results_rolls_back_only_the_cluster_whose_write_failed(db: Fresh) {
    let store = &db.store;
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        ids.push(register(store, name).await);
    }
    // The database refuses one statement of b's write, as a constraint would.
    let refuse_b = match store.backend() {
        Backend::Sqlite => vec![
            "CREATE TRIGGER refuse_b BEFORE UPDATE OF last_outcome ON clusters \
             WHEN NEW.name = 'b' BEGIN SELECT RAISE(ABORT, 'refused'); END",
        ],
        Backend::Postgres => vec![
            "CREATE FUNCTION refuse_b() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
            "CREATE TRIGGER refuse_b BEFORE UPDATE OF last_outcome ON clusters \
             FOR EACH ROW WHEN (NEW.name = 'b') EXECUTE FUNCTION refuse_b()",
        ],
    };
    for statement in refuse_b {
        sqlx::raw_sql(statement)
            .execute(store.pool())
            .await
            .unwrap();
    }
    let results: Vec<ProbeResult<'_>> = ids
        .iter()
        .map(|&cluster| ProbeResult {
            cluster,
            outcome: &ProbeOutcome::Healthy,
            by: None,
            now: t(5),
            next_due: t(65),
            claim: None,
            duration: None,
        })
        .collect();
    let applied = store.apply_probes(&results, &settings()).await.unwrap();
    assert!(matches!(&applied[0], Ok(Some(a)) if a.cluster == "a"));
    assert!(applied[1].is_err(), "{:?}", applied[1].as_ref().err());
    assert!(matches!(&applied[2], Ok(Some(c)) if c.cluster == "c"));
    for (name, written) in [("a", true), ("b", false), ("c", true)] {
        let record = store.cluster(name).await.unwrap();
        let expected = if written {
            (ClusterStatus::Online, Some("healthy"), t(65))
        } else {
            (ClusterStatus::Unknown, None, t(0))
        };
        assert_eq!(
            (
                record.health.status,
                record.last_outcome.as_deref(),
                record.next_due
            ),
            expected,
            "{name}"
        );
        let events = store.events(Some(name)).await.unwrap();
        assert_eq!(
            events.iter().any(|e| e.kind == "status-changed"),
            written,
            "{name}"
        );
    }
}

async fn pages_filter_by_status_condition_label_and_name(db: Fresh) {
    let store = &db.store;
    for name in ["a", "b", "c", "d"] {
        let id = register(store, name).await;
        if name != "d" {
            probe(store, id, &ProbeOutcome::Healthy, 0).await;
        }
    }
    store
        .update_cluster(
            "b",
            &vigil_store::ClusterPatch {
                labels: Some([("env".to_owned(), "prod".to_owned())].into()),
                ..Default::default()
            },
            None,
            t(1),
        )
        .await
        .unwrap();
    let names =
        |entries: Vec<vigil_store::PageEntry>| entries.iter().map(|e| key(e).0).collect::<Vec<_>>();
    let all = vigil_store::ClusterFilter::default();
    let page = store
        .list_clusters(&all, None, 2, |keys| vec![false; keys.len()])
        .await
        .unwrap();
    assert_eq!(names(page), ["a", "b"]);
    let page = store
        .list_clusters(&all, Some("b"), 10, |keys| vec![false; keys.len()])
        .await
        .unwrap();
    assert_eq!(names(page), ["c", "d"]);
    let online = vigil_store::ClusterFilter {
        status: Some(ClusterStatus::Online),
        ..Default::default()
    };
    let page = store
        .list_clusters(&online, None, 10, |k| vec![false; k.len()])
        .await
        .unwrap();
    assert_eq!(names(page), ["a", "b", "c"]);
    let prod = vigil_store::ClusterFilter {
        label: Some(("env".to_owned(), "prod".to_owned())),
        ..Default::default()
    };
    let page = store
        .list_clusters(&prod, None, 10, |k| vec![false; k.len()])
        .await
        .unwrap();
    assert_eq!(names(page), ["b"]);
    // `d` was never probed: its start period keeps no condition; the others have none
    // either, and the counts agree with the pages.
    let counts = store.status_counts().await.unwrap();
    assert_eq!(counts.get(&ClusterStatus::Online), Some(&3));
    assert_eq!(counts.get(&ClusterStatus::Unknown), Some(&1));
    let conditions = store.condition_counts().await.unwrap();
    for (condition, count) in &conditions {
        let filter = vigil_store::ClusterFilter {
            condition: Some(*condition),
            ..Default::default()
        };
        let page = store
            .list_clusters(&filter, None, 10, |k| vec![false; k.len()])
            .await
            .unwrap();
        assert_eq!(u64::try_from(page.len()).unwrap(), *count, "{condition:?}");
    }
}

async fn every_write_gives_a_cluster_a_revision_never_given_before(db: Fresh) {
    let store = &db.store;
    let revisions = |store: &Store| {
        let store = store.clone();
        async move {
            let page = store
                .list_clusters(&Default::default(), None, 100, |keys| {
                    vec![false; keys.len()]
                })
                .await
                .unwrap();
            page.iter().map(|e| key(e).1).collect::<Vec<i64>>()
        }
    };
    let a = register(store, "a").await;
    let first = revisions(store).await;
    probe(store, a, &ProbeOutcome::Healthy, 0).await;
    let second = revisions(store).await;
    assert_ne!(first, second, "a write changes the revision");
    store.delete_cluster("a", None, t(1)).await.unwrap();
    register(store, "a").await;
    let third = revisions(store).await;
    assert!(
        !first.contains(&third[0]) && !second.contains(&third[0]),
        "a new row never takes a revision given before: {first:?} {second:?} {third:?}"
    );
}

async fn history_is_pruned_but_an_open_outage_keeps_its_events(db: Fresh) {
    let store = &db.store;
    let down = register(store, "down").await;
    let up = register(store, "up").await;
    probe(store, down, &ProbeOutcome::Healthy, 0).await;
    probe(store, up, &ProbeOutcome::Healthy, 0).await;
    take_down(store, down, 10).await;
    let pruned = store.prune_history(t(1_000)).await.unwrap();
    assert!(pruned.events > 0);
    let up_events = store.events(Some("up")).await.unwrap();
    assert!(up_events.is_empty(), "{up_events:?}");
    let down_events = store.events(Some("down")).await.unwrap();
    assert!(
        down_events
            .iter()
            .any(|e| e.kind == "apps-degraded" || e.kind == "status-changed"),
        "the open outage keeps its events: {down_events:?}"
    );
    assert_eq!(store.outages("down").await.unwrap().len(), 1);
}

async fn a_schema_newer_than_this_vigil_is_refused(db: Fresh) {
    let store = &db.store;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99999, 'from a newer vigil', TRUE, $1, 0)",
    )
    .bind(vec![0_u8; 48])
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;
    let refused = Store::open(&db.url).await.map(drop).unwrap_err();
    assert!(matches!(refused, StoreError::Migrate { .. }), "{refused:?}");
    let message = format!(
        "{refused}: {}",
        std::error::Error::source(&refused).unwrap()
    );
    assert!(message.contains("99999"), "{message}");
}

async fn the_clock_is_the_databases(db: Fresh) {
    let before = wall_clock();
    let now = db.store.now().await.unwrap();
    let after = wall_clock();
    // The database runs on this machine: its clock reads between the two.
    assert!(
        before.0 - 1_000 <= now.0 && now.0 <= after.0 + 1_000,
        "{before:?} {now:?} {after:?}"
    );
}

/// A deployment racing the result that takes its cluster OFFLINE either commits first
/// (then the cascade finds the app DEPLOYED and degrades it, marked) or finds the cluster
/// OFFLINE and is refused: never a DEPLOYED app without a marker on an OFFLINE cluster.
async fn concurrent_deployments_racing_an_outage_never_leave_an_unmarked_deployed_app(db: Fresh) {
    const ROUNDS: usize = 40;
    const APPS: usize = 6;
    let store = db.store.clone();
    let mut degraded = 0;
    let mut refused_count = 0;
    for round in 0..ROUNDS {
        let name = format!("c{round}");
        // Each round far from the last, so that the brake never sees the earlier
        // rounds' OFFLINE clusters as a mass failure.
        let base = i64::try_from(round).unwrap() * 1_000;
        let id = register(&store, &name).await;
        probe(&store, id, &ProbeOutcome::Healthy, base).await;
        probe(&store, id, &refused(), base + 10).await;
        let apps: Vec<String> = (0..APPS).map(|i| format!("{name}-app{i}")).collect();
        for app in &apps {
            store
                .register_app(app, &name, AppStatus::Pending, t(0))
                .await
                .unwrap();
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (i, app) in apps.iter().enumerate() {
            let (store, app) = (store.clone(), app.clone());
            tasks.spawn(async move {
                tokio::time::sleep(Duration::from_micros(400 * i as u64)).await;
                store
                    .record_deployment(&app, Some("v1"), None, t(base + 89))
                    .await
                    .map(drop)
            });
        }
        let down = {
            let store = store.clone();
            // Starts among the deployments, earlier or later from round to round.
            let delay = Duration::from_micros(300 * (round % 6) as u64);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                store
                    .apply_probe(id, &refused(), t(base + 90), t(base + 150), &settings())
                    .await
                    .unwrap()
                    .unwrap()
            })
        };
        while let Some(deployed) = tasks.join_next().await {
            match deployed.unwrap() {
                Ok(()) => {}
                Err(StoreError::ClusterOffline { .. }) => refused_count += 1,
                Err(other) => panic!("{other}"),
            }
        }
        down.await.unwrap();
        let cluster = store.cluster(&name).await.unwrap();
        assert_eq!(cluster.health.status, ClusterStatus::Offline);
        for app in &apps {
            let record = store.app(app).await.unwrap();
            assert!(
                !(record.status == AppStatus::Deployed && record.degraded_by.is_none()),
                "round {round}: {app} is DEPLOYED and unmarked on an OFFLINE cluster"
            );
            if record.status == AppStatus::Degraded {
                assert_eq!(record.degraded_by, cluster.health.open_outage, "{app}");
                degraded += 1;
            }
        }
    }
    // Both orders happened: some deployments came first and were degraded, some came
    // after and were refused (otherwise the race was never run).
    assert!(
        degraded > 0 && refused_count > 0,
        "degraded {degraded}, refused {refused_count}"
    );
}

/// Event ids are handed out at insert, and PostgreSQL commits transactions in another
/// order: a transaction that inserted its event first and committed last must still reach
/// a reader that already read past a later id. A trigger holds the first writer for a
/// moment right after its insert, inside its transaction, while a second writer commits.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_a_later_id_still_reaches_a_resumed_reader() {
    use std::cell::RefCell;
    use vigil_test_support::wait::{until_async, until_async_true};
    let db = Fresh::new(Backend::Postgres).await;
    let store = db.store.clone();
    for statement in [
        "CREATE FUNCTION hold_slow() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$",
        "CREATE TRIGGER hold_slow AFTER INSERT ON events FOR EACH ROW \
         WHEN (NEW.kind = 'slow') EXECUTE FUNCTION hold_slow()",
    ] {
        sqlx::raw_sql(statement)
            .execute(store.pool())
            .await
            .unwrap();
    }
    store
        .record_plugin_event("before", &serde_json::json!({}), None, t(0))
        .await
        .unwrap();
    let start = store.last_event_id().await.unwrap();

    let slow = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .record_plugin_event("slow", &serde_json::json!({}), None, t(1))
                .await
        })
    };
    // The fast event commits while the slow one is held in its trigger, its id taken.
    until_async_true(
        "the slow event's insert is held in its trigger",
        Duration::from_secs(10),
        async || {
            let held: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event = 'PgSleep'",
            )
            .fetch_one(store.pool())
            .await
            .unwrap();
            held > 0
        },
    )
    .await;
    store
        .record_plugin_event("fast", &serde_json::json!({}), None, t(2))
        .await
        .unwrap();

    // A reader resuming after the last event it saw, as a stream does, until both came.
    let mut after = start;
    let delivered: RefCell<Vec<(i64, String)>> = RefCell::default();
    until_async(
        "both events are delivered",
        Duration::from_secs(10),
        || format!("delivered only {:?}", delivered.borrow()),
        async || {
            for event in store.events_after(after, 100).await.unwrap() {
                after = event.id;
                delivered.borrow_mut().push((event.id, event.kind));
            }
            (delivered.borrow().len() >= 2).then_some(())
        },
    )
    .await;
    let delivered = delivered.into_inner();
    slow.await.unwrap().unwrap();
    let kinds: Vec<&str> = delivered.iter().map(|(_, kind)| kind.as_str()).collect();
    assert_eq!(kinds, ["fast", "slow"], "in commit order: {delivered:?}");
    assert!(
        delivered[1].0 < delivered[0].0,
        "the slow event has the smaller id (the case a reader by id would skip): {delivered:?}"
    );
    assert_eq!(store.last_event_id().await.unwrap(), delivered[1].0);
    assert!(store.events_after(after, 100).await.unwrap().is_empty());
}

/// Claims among replicas: a claimed cluster is no other replica's until its claim lapses;
/// a result is written only under its claim, and ends it; a lapsed claim taken by another
/// replica makes the first one's result stale; a replica does not claim, for one lease, a
/// cluster whose last counted failure is its own while another replica lives — and says
/// so when asked how long to wait.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_fence_results_and_leave_a_counted_failure_to_another_replica() {
    use vigil_store::Lease;
    use vigil_test_support::wait::until_async_true;
    let db = Fresh::new(Backend::Postgres).await;
    let store = &db.store;
    let lease = Lease {
        minimum: Duration::from_millis(1_500),
        margin: Duration::ZERO,
    };
    let no_timeout = Duration::ZERO;
    for name in ["a", "b", "c"] {
        register(store, name).await;
    }
    assert!(store.heartbeat("r1", "i1", None).await.unwrap());
    assert!(store.heartbeat("r2", "i2", None).await.unwrap());
    // Another process with r1's id while r1 is alive: refused, r1 untouched.
    assert!(!store.heartbeat("r1", "i3", None).await.unwrap());
    assert!(store.heartbeat("r1", "i1", None).await.unwrap());
    // Registered clusters are due at once (at t(0), long past on the database's clock).
    let first = store
        .claim_due("r1", &[], 2, lease, no_timeout)
        .await
        .unwrap();
    assert_eq!(first.len(), 2, "bounded by the free slots");
    let rest = store
        .claim_due("r2", &[], 10, lease, no_timeout)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1, "what r1 holds is not r2's");
    assert!(
        store
            .claim_due("r2", &[], 10, lease, no_timeout)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.claims_held("r1").await.unwrap(), 2);
    let wait = store
        .next_claimable_in("r2", &[], lease)
        .await
        .unwrap()
        .unwrap();
    assert!(
        wait > Duration::from_millis(500),
        "until r1's claims lapse: {wait:?}"
    );

    // r1 writes one result under its claim: written, and the claim ends.
    let (written, lapsing) = (&first[0], &first[1]);
    fn result<'a>(claimed: &'a vigil_store::Claimed, outcome: &'a ProbeOutcome) -> ProbeResult<'a> {
        ProbeResult {
            cluster: claimed.record.id,
            outcome,
            by: None,
            now: t(100),
            next_due: t(100),
            claim: Some(&claimed.claim),
            duration: None,
        }
    }
    let failure = refused();
    let applied = store
        .apply_probes(&[result(written, &failure)], &settings())
        .await
        .unwrap();
    assert!(matches!(&applied[0], Ok(Some(_))), "{applied:?}");
    assert_eq!(store.claims_held("r1").await.unwrap(), 1);

    // The failure r1 counted: for one lease r1 does not claim that cluster again while
    // r2 lives, and knows how long to wait; r2 may.
    sqlx::query("UPDATE clusters SET next_due = 0 WHERE id = $1")
        .bind(written.record.id.0)
        .execute(store.pool())
        .await
        .unwrap();
    let again = store
        .claim_due("r1", &[lapsing.record.id.0], 10, lease, no_timeout)
        .await
        .unwrap();
    assert!(
        again.is_empty(),
        "r1 counted the cluster's last failure: {again:?}"
    );
    let wait = store
        .next_claimable_in("r1", &[lapsing.record.id.0], lease)
        .await
        .unwrap()
        .unwrap();
    assert!(wait > Duration::ZERO, "r1 waits for the lease: {wait:?}");
    let by_r2 = store
        .claim_now("r2", written.record.id, lease, no_timeout)
        .await
        .unwrap();
    assert!(by_r2.is_some());

    // r1's other claim lapses and r2 takes the cluster: r1's late result is stale.
    until_async_true(
        "r1's claim lapses (by the database's clock)",
        Duration::from_secs(10),
        async || store.claims_held("r1").await.unwrap() == 0,
    )
    .await;
    let taken = store
        .claim_due("r2", &[], 10, lease, no_timeout)
        .await
        .unwrap();
    let ids: Vec<ClusterId> = taken.iter().map(|c| c.record.id).collect();
    assert!(ids.contains(&lapsing.record.id), "{ids:?}");
    let late = store
        .apply_probes(&[result(lapsing, &ProbeOutcome::Healthy)], &settings())
        .await
        .unwrap();
    assert!(
        matches!(&late[0], Err(StoreError::StaleClaim { .. })),
        "{late:?}"
    );
    let untouched = store.cluster(&lapsing.record.name).await.unwrap();
    assert_eq!(
        untouched.last_outcome, None,
        "nothing of a stale result is written"
    );
    assert!(store.release_claims("r2").await.unwrap() >= 1);
    assert_eq!(store.claims_held("r2").await.unwrap(), 0);
}

/// Among replicas, the failure that takes a cluster OFFLINE must come from another
/// replica — on another node, when nodes are known — than the previous counted failure:
/// a replica on the same node only adds to the count.
#[cfg(feature = "system-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_opinion_comes_from_another_node() {
    use vigil_store::Lease;
    let db = Fresh::new(Backend::Postgres).await;
    let store = &db.store;
    let lease = Lease {
        minimum: Duration::from_secs(30),
        margin: Duration::ZERO,
    };
    let id = register(store, "c").await;
    for (replica, node) in [("r1", "n1"), ("r2", "n1"), ("r3", "n2")] {
        assert!(store.heartbeat(replica, replica, Some(node)).await.unwrap());
    }
    let probe_by = async |replica: &str, outcome: ProbeOutcome| {
        let claim = store
            .claim_now(replica, id, lease, Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        let result = ProbeResult {
            cluster: id,
            outcome: &outcome,
            by: None,
            now: t(0),
            next_due: t(60),
            claim: Some(&claim),
            duration: None,
        };
        let applied = store.apply_probes(&[result], &settings()).await.unwrap();
        let applied = applied.into_iter().next().unwrap().unwrap().unwrap();
        // The next failure comes a whole interval later, on the database's clock.
        sqlx::query(
            "UPDATE clusters SET last_counted_failure = last_counted_failure - 60000 \
             WHERE id = $1",
        )
        .bind(id.0)
        .execute(store.pool())
        .await
        .unwrap();
        applied
    };
    probe_by("r1", ProbeOutcome::Healthy).await;
    probe_by("r1", refused()).await;
    let same_node = probe_by("r2", refused()).await;
    assert_eq!(same_node.decision.health.status, ClusterStatus::Online);
    assert!(
        same_node
            .decision
            .events
            .iter()
            .any(|e| matches!(e, vigil_decision::HealthEvent::AwaitingSecondOpinion { .. })),
        "{:?}",
        same_node.decision.events
    );
    let other_node = probe_by("r3", refused()).await;
    assert_eq!(other_node.decision.health.status, ClusterStatus::Offline);
    assert_eq!(store.outages("c").await.unwrap().len(), 1);
}
