//! What only SQLite has: its migrations and journal, the durability of its commits, the
//! database lock, a transaction the database undoes whole, and `DATABASE_URL`'s reading.
//! Everything else the store does is tested on both backends (`backends`).

use vigil_decision::{
    BrakeConfig, ClusterId, ClusterStatus, HealthPolicy, PolicyOverrides, ProbeOutcome, Timestamp,
};
use vigil_store::lock::{DatabaseLock, LockError};
use vigil_store::{ApplySettings, ProbeResult, Store, redact_url, sqlite_path};

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

#[tokio::test]
async fn migrations_run_once_and_the_database_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vigil.db");
    let store = Store::open_path(&db).await.unwrap();
    store.close().await;
    let store = Store::open_path(&db).await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count();
    assert_eq!(
        applied,
        i64::try_from(files).unwrap(),
        "each migration ran once"
    );
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

/// The checksum the database recorded for migration `version`.
async fn checksum(store: &Store, version: i64) -> Vec<u8> {
    sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = ?")
        .bind(version)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A database that applied a migration under the text it was released with opens after
/// that migration's comments were reworded; one whose migration differs otherwise is still
/// refused, as the migrator refuses it.
#[tokio::test]
async fn a_migration_reworded_in_comments_only_still_opens_older_databases() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vigil.db");
    let store = Store::open_path(&db).await.unwrap();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let current: Vec<(i64, Vec<u8>)> = {
        let mut all = Vec::new();
        for (version, _) in vigil_store::REWORDED_MIGRATIONS {
            all.push((version, checksum(&store, version).await));
        }
        all
    };
    for (version, released) in vigil_store::REWORDED_MIGRATIONS {
        assert_ne!(
            hex(&checksum(&store, version).await),
            released,
            "the text did change"
        );
        let bytes: Vec<u8> = (0..released.len() / 2)
            .map(|i| u8::from_str_radix(&released[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        sqlx::query("UPDATE _sqlx_migrations SET checksum = ? WHERE version = ?")
            .bind(bytes)
            .bind(version)
            .execute(store.pool())
            .await
            .unwrap();
    }
    store.close().await;

    // As written by a release before the rewording: it opens, with today's checksums.
    let store = Store::open_path(&db).await.unwrap();
    for (version, expected) in &current {
        assert_eq!(&checksum(&store, *version).await, expected);
    }
    // A migration changed in any other way is still refused.
    sqlx::query("UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 1")
        .execute(store.pool())
        .await
        .unwrap();
    store.close().await;
    let refused = Store::open_path(&db).await.map(|_| ()).unwrap_err();
    assert!(
        matches!(refused, vigil_store::StoreError::Migrate { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn every_connection_of_the_pool_syncs_each_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_path(&dir.path().join("vigil.db"))
        .await
        .unwrap();
    // Several connections held at once, so that the pool opens more than the first.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(store.pool().acquire().await.unwrap());
    }
    for connection in &mut held {
        // 2 is FULL: in WAL mode, each commit syncs the log before it returns.
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut **connection)
            .await
            .unwrap();
        assert_eq!(synchronous, 2);
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut **connection)
            .await
            .unwrap();
        assert_eq!(mode, "wal");
    }
}

#[test]
fn database_urls_are_checked_and_passwords_redacted() {
    assert_eq!(
        redact_url("postgres://vigil:hunter2@db:5432/vigil"),
        "postgres://vigil:***@db:5432/vigil"
    );
    assert_eq!(
        redact_url("postgres://vigil@db/vigil"),
        "postgres://vigil@db/vigil"
    );
    assert_eq!(redact_url("sqlite://vigil.db"), "sqlite://vigil.db");
    assert_eq!(
        redact_url("sqlite:///var/lib/vigil/v.db?mode=rwc"),
        "sqlite:///var/lib/vigil/v.db?mode=rwc"
    );
    // Every shape a password can take: each is redacted, and what is not secret is kept.
    let check = |url: &str, expected: &str| {
        let redacted = redact_url(url);
        assert_eq!(redacted, expected, "{url}");
        for secret in ["hunter", "s3cr3t"] {
            assert!(!redacted.contains(secret), "{url} -> {redacted}");
        }
    };
    check(
        "postgres://vigil:hunter%2F2%3F%23@db:5432/vigil",
        "postgres://vigil:***@db:5432/vigil",
    );
    check(
        "postgres://vigil:hun@ter2@db/vigil",
        "postgres://vigil:***@db/vigil",
    );
    check(
        "postgres://vigil:hun:ter2@db/vigil",
        "postgres://vigil:***@db/vigil",
    );
    // Unencoded `/`, `?` or `#` end the authority early for a URL parser: the password then
    // reads as a port or a path, so nothing after the scheme is shown.
    check("postgres://vigil:hunter/2@db:5432/vigil", "postgres://***");
    check("postgres://vigil:12/hunter@db:5432/vigil", "postgres://***");
    check("postgres://vigil:hunter?2@db/vigil", "postgres://***");
    check("postgres://vigil:hunter#2@db/vigil", "postgres://***");
    check(
        "postgres://vigil:hunter2@db:notaport/vigil?sslpassword=s3cr3t",
        "postgres://vigil:***@db:notaport/vigil?***",
    );
    check(
        "postgres://db/vigil?user=vigil&password=hunter2",
        "postgres://db/vigil?user=vigil&password=***",
    );
    check(
        "postgres://db/vigil?sslmode=require&sslpassword=s3cr3t&application_name=v",
        "postgres://db/vigil?sslmode=require&sslpassword=***&***",
    );
    check(
        "postgres://db/vigil?%70assword=hunter2",
        "postgres://db/vigil?password=***",
    );
    check(
        "postgres://db/vigil?PASSWORD=hunter%262#s3cr3t",
        "postgres://db/vigil?PASSWORD=***#***",
    );
    check(
        "postgres://db/vigil?password=hunter&2",
        "postgres://db/vigil?password=***&***",
    );
    check(
        "postgres://vigil:hunter2@db/vigil?user=x@y&token=s3cr3t",
        "postgres://vigil:***@db/vigil?user=x%40y&token=***",
    );
    check("sqlite:vigil.db?key=s3cr3t", "sqlite:vigil.db?key=***");
    assert_eq!(
        sqlite_path("sqlite://vigil.db").unwrap(),
        Some("vigil.db".into())
    );
    assert_eq!(
        sqlite_path("sqlite:///var/lib/vigil/v.db?mode=rwc").unwrap(),
        Some("/var/lib/vigil/v.db".into())
    );
    assert_eq!(sqlite_path("sqlite::memory:").unwrap(), None);
    // PostgreSQL names no file.
    assert_eq!(
        sqlite_path("postgres://vigil:hunter2@db/vigil").unwrap(),
        None
    );
    let error = sqlite_path("mysql://vigil:hunter2@db/vigil")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("mysql://vigil:***@db/vigil") && !error.contains("hunter2"),
        "{error}"
    );
    assert!(sqlite_path("vigil.db").is_err());
}

#[test]
fn the_database_lock_is_exclusive_and_released_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vigil.db");
    let lock = DatabaseLock::acquire(&db).unwrap();
    assert_eq!(lock.path(), dir.path().join("vigil.db.lock"));
    let refused = DatabaseLock::acquire(&db).unwrap_err();
    assert!(matches!(refused, LockError::Held { .. }), "{refused}");
    assert!(refused.to_string().contains("vigil.db.lock"));
    drop(lock);
    DatabaseLock::acquire(&db).unwrap();
}

#[test]
fn the_database_lock_holds_whatever_link_names_the_file() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let data = root.join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("vigil.db");
    // A link to a database that does not exist yet: the file will be created at its target.
    symlink(&db, root.join("early.db")).unwrap();
    let lock = DatabaseLock::acquire(&root.join("early.db")).unwrap();
    assert_eq!(lock.path(), data.join("vigil.db.lock"));
    drop(lock);

    std::fs::write(&db, b"").unwrap();
    symlink(&db, root.join("link.db")).unwrap();
    symlink(&data, root.join("alias")).unwrap();
    let lock = DatabaseLock::acquire(&db).unwrap();
    for other in [
        root.join("link.db"),
        root.join("alias/vigil.db"),
        root.join("alias/../data/vigil.db"),
        root.join("early.db"),
    ] {
        let refused = DatabaseLock::acquire(&other).unwrap_err();
        let LockError::Held {
            database,
            lock: held,
        } = &refused
        else {
            panic!("{}: {refused}", other.display());
        };
        assert_eq!(held, &data.join("vigil.db.lock").display().to_string());
        assert!(
            database.contains(&db.display().to_string())
                && database.contains(&other.display().to_string()),
            "the message names the file and the link: {refused}"
        );
    }
    drop(lock);
    DatabaseLock::acquire(&root.join("alias/vigil.db")).unwrap();
}

/// A healthy result for each of `ids`, ended at `now`, due again at `next_due`.
fn healthy_at(ids: &[ClusterId], now: Timestamp, next_due: Timestamp) -> Vec<ProbeResult<'static>> {
    ids.iter()
        .map(|&cluster| ProbeResult {
            cluster,
            outcome: &ProbeOutcome::Healthy,
            by: None,
            now,
            next_due,
            claim: None,
            duration: None,
        })
        .collect()
}

/// Three clusters registered at `t(0)`, for the batch tests.
async fn three_clusters(store: &Store, t: impl Fn(i64) -> Timestamp) -> Vec<ClusterId> {
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let id = store
            .register_cluster(
                name,
                "https://127.0.0.1:6443",
                &format!("/k/{name}.yaml#{name}"),
                &PolicyOverrides::default(),
                t(0),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn a_batch_the_database_rolls_back_whole_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_path(&dir.path().join("vigil.db"))
        .await
        .unwrap();
    let t = |s: i64| Timestamp::from_secs(10_000 + s);
    let ids = three_clusters(&store, t).await;
    // c's write makes the database undo the whole transaction, as an I/O error does.
    sqlx::query(
        "CREATE TRIGGER undo_all BEFORE UPDATE OF last_outcome ON clusters \
         WHEN NEW.name = 'c' BEGIN SELECT RAISE(ROLLBACK, 'undone'); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let results = healthy_at(&ids, t(5), t(65));
    assert!(store.apply_probes(&results, &settings()).await.is_err());
    for name in ["a", "b", "c"] {
        let record = store.cluster(name).await.unwrap();
        assert_eq!(
            (record.health.status, record.last_outcome, record.next_due),
            (ClusterStatus::Unknown, None, t(0)),
            "{name}"
        );
    }
    // The store is usable afterwards.
    sqlx::query("DROP TRIGGER undo_all")
        .execute(store.pool())
        .await
        .unwrap();
    let applied = store.apply_probes(&results, &settings()).await.unwrap();
    assert!(applied.iter().all(|a| matches!(a, Ok(Some(_)))));
}
