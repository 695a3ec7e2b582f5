//! `vigil backup`'s copy of a SQLite store (`vigil_store::backup`): consistent while
//! another connection keeps committing, checked, never over an existing file, and never of
//! a PostgreSQL or in-memory database.

use std::path::Path;
use std::time::Duration;

use vigil_decision::{PolicyOverrides, Timestamp};
use vigil_store::Store;
use vigil_store::backup::{BackupError, backup_sqlite, partial_path};
use vigil_test_support::wait::until_async_true;

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn names(store: &Store) -> Vec<String> {
    store
        .clusters()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_taken_while_clusters_are_registered_is_one_whole_commit() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("vigil.db");
    let store = Store::open_path(&source).await.unwrap();
    // Registrations keep committing (each a cluster and its event) while copies are made.
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for n in 0..400 {
                store
                    .register_cluster(
                        &format!("c{n:03}"),
                        "https://127.0.0.1:6443",
                        &format!("/k/{n}.yaml#c{n}"),
                        &PolicyOverrides::default(),
                        Timestamp::from_secs(1_000 + n),
                    )
                    .await
                    .unwrap();
            }
        })
    };
    let mut copies = Vec::new();
    for n in 0..5 {
        // Each copy after some more registrations, so that copies fall between commits.
        until_async_true(
            &format!("{} registrations are committed", n * 40 + 1),
            Duration::from_secs(60),
            async || names(&store).await.len() > n * 40 || writer.is_finished(),
        )
        .await;
        let file = dir.path().join(format!("copy-{n}.db"));
        let backup = backup_sqlite(&url(&source), &file).await.unwrap();
        assert_eq!(backup.file, file);
        assert_eq!(backup.bytes, std::fs::metadata(&file).unwrap().len());
        assert!(!partial_path(&file).exists());
        copies.push(file);
    }
    writer.await.unwrap();
    let all = names(&store).await;
    assert_eq!(all.len(), 400);
    let events = store.events(None).await.unwrap();
    let mut partial = false;
    for file in &copies {
        let copy = Store::open_path(file).await.unwrap();
        let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(copy.pool())
            .await
            .unwrap();
        assert_eq!(integrity, "ok");
        // A prefix of the registrations, each with its event: never a cluster without
        // the event its commit wrote, nor an event without its cluster.
        let copied = names(&copy).await;
        partial |= !copied.is_empty() && copied.len() < all.len();
        assert_eq!(copied[..], all[..copied.len()], "{}", file.display());
        let copied_events = copy.events(None).await.unwrap();
        assert_eq!(copied_events.len(), copied.len(), "{}", file.display());
        for (copied, source) in copied_events.iter().zip(&events) {
            assert_eq!(
                (copied.id, &copied.kind, &copied.cluster_name),
                (source.id, &source.kind, &source.cluster_name)
            );
        }
        copy.close().await;
    }
    assert!(
        partial,
        "at least one copy was taken between two registrations"
    );
    store.close().await;
}

#[tokio::test]
async fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("vigil.db");
    Store::open_path(&source).await.unwrap().close().await;
    let file = dir.path().join("taken.db");
    std::fs::write(&file, b"an earlier backup").unwrap();
    let error = backup_sqlite(&url(&source), &file).await.unwrap_err();
    assert!(matches!(error, BackupError::Exists { .. }), "{error:?}");
    assert!(!error.is_setting());
    assert!(
        error.to_string().contains("taken.db already exists"),
        "{error}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"an earlier backup");
    assert!(!partial_path(&file).exists());

    // A partial file left by an interrupted backup is named, and left alone.
    let file = dir.path().join("new.db");
    std::fs::write(partial_path(&file), b"half").unwrap();
    let error = backup_sqlite(&url(&source), &file).await.unwrap_err();
    assert!(
        error.to_string().contains("new.db.partial already exists"),
        "{error}"
    );
    assert_eq!(std::fs::read(partial_path(&file)).unwrap(), b"half");
    assert!(!file.exists());
}

#[tokio::test]
async fn postgres_memory_missing_and_blank_databases_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.db");
    let error = backup_sqlite("postgres://vigil:hunter2-secret@127.0.0.1/vigil", &file)
        .await
        .unwrap_err();
    assert!(matches!(error, BackupError::Postgres { .. }), "{error:?}");
    assert!(error.is_setting());
    assert!(error.to_string().contains("pg_dump"), "{error}");
    assert!(!error.to_string().contains("hunter2-secret"), "{error}");

    let error = backup_sqlite("sqlite::memory:", &file).await.unwrap_err();
    assert!(matches!(error, BackupError::InMemory { .. }), "{error:?}");
    assert!(error.is_setting());

    let error = backup_sqlite("mysql://localhost/vigil", &file)
        .await
        .unwrap_err();
    assert!(error.is_setting(), "{error:?}");

    let missing = dir.path().join("none.db");
    let error = backup_sqlite(&url(&missing), &file).await.unwrap_err();
    assert!(matches!(error, BackupError::Missing { .. }), "{error:?}");
    assert!(!missing.exists(), "the database is not created by looking");
    assert!(!file.exists() && !partial_path(&file).exists());

    // A SQLite file without vigil's schema (an engine that has not created it yet).
    let blank = dir.path().join("blank.db");
    std::fs::write(&blank, b"").unwrap();
    let error = backup_sqlite(&url(&blank), &file).await.unwrap_err();
    assert!(matches!(error, BackupError::Blank { .. }), "{error:?}");
    assert!(!error.is_setting());
    assert!(!file.exists() && !partial_path(&file).exists());
}

#[tokio::test]
async fn a_store_no_engine_holds_is_copied_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("vigil.db");
    let store = Store::open_path(&source).await.unwrap();
    store
        .register_cluster(
            "only",
            "https://127.0.0.1:6443",
            "/k/only.yaml#only",
            &PolicyOverrides::default(),
            Timestamp::from_secs(1),
        )
        .await
        .unwrap();
    store.close().await;
    let before: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let file = dir.path().join("copy.db");
    backup_sqlite(&url(&source), &file).await.unwrap();
    let mut after: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name != "copy.db")
        .collect();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(after, before, "nothing but the copy is left behind");
    let copy = Store::open_path(&file).await.unwrap();
    assert_eq!(names(&copy).await, ["only"]);
    copy.close().await;
}
