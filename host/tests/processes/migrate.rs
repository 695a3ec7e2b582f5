//! `vigil migrate`: an installation moved from SQLite to PostgreSQL in the middle of an
//! outage goes on where it stopped — the outage still open, the degraded apps still marked,
//! the history whole — and the recovery that follows restores exactly the marked apps.
//! A system test: PostgreSQL.

use std::process::Command;

use vigil_decision::{
    AppStatus, BrakeConfig, ClusterStatus, HealthPolicy, PolicyOverrides, ProbeOutcome,
    ReasonClass, Timestamp,
};
use vigil_store::{ApplySettings, Store};

fn settings() -> ApplySettings {
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

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_secs(50_000 + seconds)
}

fn migrate(from: &str, to: &str) -> std::process::Output {
    Command::new(crate::process::binary())
        .args(["migrate", "--from", from, "--to", to])
        .env_clear()
        .output()
        .unwrap()
}

/// Everything the API shows of a store, to compare two of them.
async fn snapshot(store: &Store) -> String {
    let clusters: Vec<_> = store
        .clusters()
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.id,
                c.name,
                c.health,
                c.next_due,
                c.policy,
                c.last_outcome,
                c.last_reason_class,
            )
        })
        .collect();
    let mut outages = Vec::new();
    for (_, name, ..) in &clusters {
        outages.push(store.outages(name).await.unwrap());
    }
    format!(
        "{clusters:?}\n{:?}\n{outages:?}\n{:?}\n{:?}\n{:?}",
        store.apps().await.unwrap(),
        store.events(None).await.unwrap(),
        store.brake_state().await.unwrap(),
        store.deployments_of("web", None, 10).await.unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_moved_mid_outage_recovers_exactly_the_apps_it_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("vigil.db").display());
    let source = Store::open(&sqlite).await.unwrap();
    let policy = PolicyOverrides {
        interval_seconds: Some(60),
        ..Default::default()
    };
    let down = source
        .register_cluster(
            "down",
            "https://127.0.0.1:6443",
            "/k/d.yaml#down",
            &policy,
            t(0),
        )
        .await
        .unwrap();
    let up = source
        .register_cluster(
            "up",
            "https://127.0.0.2:6443",
            "/k/u.yaml#up",
            &policy,
            t(0),
        )
        .await
        .unwrap();
    for (app, cluster, status) in [
        ("web", "down", AppStatus::Pending),
        ("api", "down", AppStatus::Deployed),
        ("batch", "down", AppStatus::Pending),
        ("site", "up", AppStatus::Deployed),
    ] {
        source
            .register_app(app, cluster, status, t(0))
            .await
            .unwrap();
    }
    for id in [down, up] {
        source
            .apply_probe(id, &ProbeOutcome::Healthy, t(1), t(61), &settings())
            .await
            .unwrap();
    }
    source
        .record_deployment("web", Some("v1"), Some("ci"), t(2))
        .await
        .unwrap();
    let refused = ProbeOutcome::Unhealthy {
        class: ReasonClass::Refused,
        message: "connection refused".into(),
    };
    for at in [10, 50] {
        source
            .apply_probe(down, &refused, t(at), t(at + 60), &settings())
            .await
            .unwrap();
    }
    let outage = source.cluster("down").await.unwrap().health.open_outage;
    assert!(outage.is_some(), "the outage is open before the move");
    let before = snapshot(&source).await;
    source.close().await;

    let server = tokio::task::spawn_blocking(vigil_test_support::postgres::server)
        .await
        .unwrap();
    let database = server.fresh_database();
    // With a password in the URL (the test server trusts local connections, so any
    // password is accepted): it is never printed.
    let postgres = database.url.replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    let output = migrate(&sqlite, &postgres);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        !stdout.contains("s3cr3t") && !stderr.contains("s3cr3t"),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("events"), "{stdout}");

    let target = Store::open(&database.url).await.unwrap();
    assert_eq!(target.backend(), vigil_store::Backend::Postgres);
    assert_eq!(snapshot(&target).await, before, "everything came across");

    // The recovery on the new database restores the marked apps, once.
    target
        .apply_probe(down, &ProbeOutcome::Healthy, t(120), t(180), &settings())
        .await
        .unwrap();
    let apps: Vec<_> = target
        .apps()
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.name, a.status, a.degraded_by))
        .collect();
    assert_eq!(
        apps,
        [
            ("api".to_owned(), AppStatus::Deployed, None),
            ("batch".to_owned(), AppStatus::Pending, None),
            ("site".to_owned(), AppStatus::Deployed, None),
            ("web".to_owned(), AppStatus::Deployed, None),
        ]
    );
    let restored = target
        .events(Some("down"))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "apps-restored")
        .count();
    assert_eq!(restored, 1);
    let cluster = target.cluster("down").await.unwrap();
    assert_eq!(cluster.health.status, ClusterStatus::Online);
    assert_eq!(
        target.outages("down").await.unwrap()[0].closed_at,
        Some(t(120).0)
    );
    // New rows take ids after the copied ones.
    target
        .register_app("new", "up", AppStatus::Pending, t(130))
        .await
        .unwrap();
    target
        .record_deployment("new", None, None, t(131))
        .await
        .unwrap();
    target.close().await;

    // A destination that holds data is refused, and left as it is.
    let output = migrate(&sqlite, &database.url);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not empty"), "{stderr}");

    // A source an engine is running on is refused (exit 3).
    let lock = vigil_store::lock::DatabaseLock::acquire(&dir.path().join("vigil.db")).unwrap();
    let other = server.fresh_database();
    let output = migrate(&sqlite, &other.url);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    drop(lock);
}
