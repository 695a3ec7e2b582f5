//! `vigil backup FILE` while `vigil serve` probes a fake fleet through the real
//! `kubeconfig-file` plugin: one cluster refuses connections, goes OFFLINE with an open
//! outage and marks the apps it degraded, and the engine keeps writing every second while
//! the copy is taken. The copy passes SQLite's integrity check, opens as a store, and holds
//! every cluster, the outage and the markers the source holds, and a prefix of its history.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use vigil_decision::{AppStatus, ClusterStatus};
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, KubeconfigShape, ShapePlan};
use vigil_store::{ExistingDatabase, Store};

use crate::process::{self, vigil};
use vigil_test_support as plugins;
use vigil_test_support::wait;

/// Everything a restore must bring back, in a form two stores can be compared by.
async fn state(store: &Store) -> String {
    let mut text = String::new();
    for cluster in store.clusters().await.unwrap() {
        text.push_str(&format!(
            "{} {} outage={:?} {:?}\n",
            cluster.name,
            cluster.health.status.as_str(),
            cluster.health.open_outage,
            store.outages(&cluster.name).await.unwrap()
        ));
    }
    for app in store.apps().await.unwrap() {
        text.push_str(&format!(
            "app {} on {}: {:?} degraded_by={:?}\n",
            app.name, app.cluster, app.status, app.degraded_by
        ));
    }
    text
}

fn backup(dir: &Path, database: &Path, file: &str) -> Output {
    vigil(dir)
        .args(["backup", file])
        .env("DATABASE_URL", format!("sqlite://{}", database.display()))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_the_engine_writes_restores_the_fleet_its_outage_and_markers() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(4)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Only(KubeconfigShape::Token),
            single_file: false,
        },
    )
    .unwrap();
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let (down, up) = (&names[0], &names[1]);

    let database = dir.path().join("vigil.db");
    let mut child = process::serve(dir.path())
        .kubeconfigs(&kubeconfigs)
        .plugins(plugins::plugin_dir_with_only(dir.path(), "kubeconfig-file"))
        .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-e2e-cache"))
        .policy(1, 5, 2)
        .env("VIGIL_LOG_FORMAT", "json")
        .until_discovered()
        .start()
        .await;
    let log = child.log_path().to_path_buf();
    let source = Store::open(&format!("sqlite://{}", database.display()))
        .await
        .unwrap();
    let wait_for = async |what: &str, check: &dyn Fn(&[vigil_store::ClusterRecord]) -> bool| {
        let last = std::cell::RefCell::new(Vec::new());
        wait::until_async(
            what,
            Duration::from_secs(60),
            || format!("never {what}: {:?}\n{}", last.borrow(), process::tail(&log)),
            async || {
                let clusters = source.clusters().await.unwrap();
                if check(&clusters) {
                    return Some(());
                }
                *last.borrow_mut() = clusters
                    .iter()
                    .map(|c| (c.name.clone(), c.health.status))
                    .collect::<Vec<_>>();
                None
            },
        )
        .await;
    };
    wait_for("all ONLINE", &|clusters| {
        clusters.len() == 4
            && clusters
                .iter()
                .all(|c| c.health.status == ClusterStatus::Online)
    })
    .await;

    // Apps on the cluster that goes down, and one elsewhere.
    let now = wall_clock();
    for app in ["shop", "search"] {
        source
            .register_app(app, down, AppStatus::Pending, now)
            .await
            .unwrap();
        source
            .record_deployment(app, Some("1.0"), None, now)
            .await
            .unwrap();
    }
    source
        .register_app("elsewhere", up, AppStatus::Deployed, now)
        .await
        .unwrap();
    fleet.get(0).unwrap().refuse().await.unwrap();
    wait_for("OFFLINE", &|clusters| {
        clusters
            .iter()
            .any(|c| &c.name == down && c.health.status == ClusterStatus::Offline)
    })
    .await;
    let outage = source.cluster(down).await.unwrap().health.open_outage;
    assert!(outage.is_some());
    for app in source.apps().await.unwrap() {
        if app.cluster == *down {
            assert_eq!(
                (app.status, app.degraded_by),
                (AppStatus::Degraded, outage),
                "{app:?}"
            );
        }
    }

    // Copies while the engine goes on probing (and writing) every second.
    let last_probe = async || {
        source
            .clusters()
            .await
            .unwrap()
            .iter()
            .filter_map(|c| c.health.last_probe)
            .max()
            .unwrap()
    };
    let probed_before = last_probe().await;
    let events_before = source.events(None).await.unwrap().len();
    let copied = backup(dir.path(), &database, "copy.db");
    let stdout = String::from_utf8_lossy(&copied.stdout);
    let stderr = String::from_utf8_lossy(&copied.stderr);
    assert_eq!(copied.status.code(), Some(0), "{stdout}{stderr}");
    let copy = dir.path().join("copy.db");
    let size = std::fs::metadata(&copy).unwrap().len();
    assert_eq!(stdout, format!("backed up to copy.db ({size} bytes)\n"));
    assert!(!dir.path().join("copy.db.partial").exists());
    // The same name again is refused, naming it, and the copy is left as it was.
    let again = backup(dir.path(), &database, "copy.db");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: copy.db already exists"),
        "{stderr}"
    );
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), size);

    // The engine kept writing after the copy; then it stops, and the source is read.
    let probed_after_copy = last_probe().await;
    wait::until_async(
        "a probe is written after the copy",
        Duration::from_secs(30),
        || format!("no probe written after the copy\n{}", process::tail(&log)),
        async || (last_probe().await > probed_after_copy).then_some(()),
    )
    .await;
    child.signal("TERM");
    let status = child.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", child.tail());
    let expected = state(&source).await;
    let source_events = source.events(None).await.unwrap();
    let probed_last = last_probe().await;
    source.close().await;
    fleet.shutdown().await;

    // The copy is whole and checked…
    let integrity: String = {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", copy.display()))
            .await
            .unwrap();
        let answer = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        answer
    };
    assert_eq!(integrity, "ok");
    // …is this vigil's schema, and holds the fleet as the source left it.
    let url = format!("sqlite://{}", copy.display());
    match Store::open_existing(&url).await.unwrap() {
        ExistingDatabase::Ready(store) => store.close().await,
        other => panic!("the copy is not a vigil store of this version: {other:?}"),
    }
    let restored = Store::open(&url).await.unwrap();
    assert_eq!(state(&restored).await, expected);
    assert!(expected.contains(&format!("{down} OFFLINE outage=Some(")));
    // Probes written before the copy are in it, those after are not.
    let copy_probed = restored
        .clusters()
        .await
        .unwrap()
        .iter()
        .filter_map(|c| c.health.last_probe)
        .max()
        .unwrap();
    assert!(
        probed_before <= copy_probed && copy_probed < probed_last,
        "{probed_before:?} {copy_probed:?} {probed_last:?}"
    );
    let copied_events = restored.events(None).await.unwrap();
    assert!(copied_events.len() >= events_before);
    assert!(copied_events.len() <= source_events.len());
    for (copied, source) in copied_events.iter().zip(&source_events) {
        assert_eq!(
            (
                copied.id,
                &copied.kind,
                &copied.cluster_name,
                &copied.detail
            ),
            (
                source.id,
                &source.kind,
                &source.cluster_name,
                &source.detail
            )
        );
    }
    restored.close().await;

    // The binary reads it as its own database: discovery would change nothing in it.
    let preview = vigil(dir.path())
        .args(["discover", "--dry-run", "-o", "json"])
        .env("DATABASE_URL", &url)
        .env("KUBECONFIG_DIR", &kubeconfigs)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&preview.stdout);
    assert_eq!(preview.status.code(), Some(0), "{text}");
    let preview: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(preview["summary"]["unchanged"], 4, "{preview:#}");
}

#[test]
fn postgres_is_refused_with_pg_dump_and_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let refused = vigil(dir.path())
        .args(["backup", "copy.db"])
        .env(
            "DATABASE_URL",
            "postgres://vigil:hunter2-password@127.0.0.1:1/vigil",
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pg_dump"), "{stderr}");
    assert!(!stderr.contains("hunter2-password"), "{stderr}");
    assert!(!dir.path().join("copy.db").exists());
    assert!(!dir.path().join("copy.db.partial").exists());
}
