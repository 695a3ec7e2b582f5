//! `vigil discover --dry-run`, the binary: contexts found in the corpus, the plan
//! against an existing database (update with its field, kept manual, ignored,
//! insert), clashes and malformed files named, the database left byte for byte
//! and a missing one not created, settings shared with `vigil serve`, and no
//! credential in any output.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::process;

use process::vigil;
use vigil_decision::{PolicyOverrides, Timestamp};
use vigil_store::{DiscoveredClusterRow, Store};

const EKS: &str = "arn:aws:eks:eu-west-1:111122223333:cluster/vigil-demo";

/// The corpus without `..` in its path, so references compare as written.
fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/corpus/kubeconfigs")
        .canonicalize()
        .unwrap()
}

fn file(relative: &str) -> PathBuf {
    corpus_dir().join(relative)
}

/// The sources of the main scenario: a clash (`default` in both k3s files), a
/// malformed file, a token kubeconfig, an exec kubeconfig.
fn scenario_files() -> Vec<PathBuf> {
    [
        "kind/config",
        "static-token/config",
        "k3s/k3s.yaml",
        "k3s-edge/k3s.yaml",
        "bad/syntax-error.yaml",
        "eks/config",
    ]
    .into_iter()
    .map(file)
    .collect()
}

/// Every credential value of the scenario's kubeconfigs: tokens and `*-data`
/// fields as written, and the PEM text the data decodes to.
fn secrets_of(files: &[PathBuf]) -> Vec<String> {
    let mut secrets = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for line in text.lines() {
            let line = line.trim();
            for key in ["token:", "client-key-data:", "client-certificate-data:"] {
                if let Some(value) = line.strip_prefix(key) {
                    let value = value.trim();
                    if value.len() > 16 {
                        secrets.push(value.to_owned());
                    }
                }
            }
        }
    }
    secrets.push("PRIVATE KEY".to_owned());
    secrets.push("BEGIN CERTIFICATE".to_owned());
    assert!(
        secrets.len() > 2,
        "the kubeconfigs have credentials to look for: {files:?}"
    );
    secrets
}

fn assert_no_secret(output: &Output, secrets: &[String]) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    for secret in secrets {
        assert!(
            !stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()),
            "a credential ({}…) was printed:\n{stdout}\n{stderr}",
            &secret[..secret.len().min(12)]
        );
    }
}

fn row(name: &str, endpoint: &str, reference: &str) -> DiscoveredClusterRow {
    DiscoveredClusterRow {
        name: name.to_owned(),
        endpoint: endpoint.to_owned(),
        reference: reference.to_owned(),
    }
}

/// A database where `kind-kind` is known with an old endpoint, `static` is a
/// manually registered cluster, and `default` was deleted through the API.
async fn seed_database(db: &Path) {
    let store = Store::open_path(db).await.unwrap();
    let t = Timestamp::from_secs(1_000);
    let kind_ref = format!("{}#kind-kind", file("kind/config").display());
    let k3s_ref = format!("{}#default", file("k3s/k3s.yaml").display());
    store
        .upsert_discovered(
            &[
                row("kind-kind", "https://127.0.0.1:1", &kind_ref),
                row("default", "https://127.0.0.1:6443", &k3s_ref),
            ],
            t,
        )
        .await
        .unwrap();
    store
        .register_cluster(
            "static",
            "https://127.0.0.9:8443",
            "/srv/manual/static.yaml#static",
            &PolicyOverrides::default(),
            t,
        )
        .await
        .unwrap();
    sqlx::query("UPDATE clusters SET ignored = 1 WHERE name = 'default'")
        .execute(store.pool())
        .await
        .unwrap();
    store.close().await;
}

/// The files of a directory, by name, with their bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let metadata = entry.metadata().unwrap();
            let bytes = if metadata.is_file() {
                std::fs::read(entry.path()).unwrap()
            } else {
                Vec::new()
            };
            (
                entry.file_name().to_string_lossy().into_owned(),
                bytes,
                metadata.modified().unwrap(),
            )
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

fn run(dir: &Path, args: &[&str], files: &[PathBuf]) -> Output {
    vigil(dir)
        .args(["discover"])
        .args(args)
        .args(files)
        .output()
        .unwrap()
}

#[test]
fn the_plan_against_an_existing_database_names_every_action_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vigil.db");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(seed_database(&db));
    let before = snapshot(dir.path());
    let files = scenario_files();
    let secrets = secrets_of(&files);

    let output = run(dir.path(), &["--dry-run"], &files);
    let table = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{table}\n{stderr}");
    assert_no_secret(&output, &secrets);
    let line_of = |name: &str| {
        table
            .lines()
            .find(|line| line.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{table}"))
            .to_owned()
    };
    let kind = line_of("kind-kind");
    assert!(kind.contains("update (endpoint)"), "{kind}");
    assert!(kind.contains("https://127.0.0.1:41357"), "{kind}");
    assert!(kind.contains("kind/config"), "{kind}");
    assert!(
        kind.contains("probeable: client certificate inline"),
        "{kind}"
    );
    assert!(
        table.contains("kind-kind: endpoint https://127.0.0.1:1 → https://127.0.0.1:41357"),
        "the update says from what to what:\n{table}"
    );
    assert!(line_of("static").contains("kept (manual)"), "{table}");
    assert!(line_of("default").contains("ignored (deleted)"), "{table}");
    let eks = line_of(EKS);
    assert!(eks.contains("insert"), "{eks}");
    assert!(eks.contains("not probeable (exec-credentials)"), "{eks}");
    let clash = table
        .lines()
        .find(|line| line.trim_start().starts_with("default: used from"))
        .unwrap_or_else(|| panic!("the clash is named:\n{table}"));
    assert!(
        clash.contains("k3s/k3s.yaml") && clash.contains("k3s-edge/k3s.yaml"),
        "{clash}"
    );
    let malformed = table
        .lines()
        .find(|line| line.starts_with("  ") && line.contains("bad/syntax-error.yaml"))
        .unwrap_or_else(|| panic!("the malformed file is named:\n{table}"));
    assert!(
        malformed.contains("invalid kubeconfig YAML at line"),
        "{malformed}"
    );
    assert!(
        table.contains(
            "4 context(s): 1 to insert, 1 to update, 0 unchanged, 1 kept (manual), \
             1 ignored (deleted); 1 clash(es); 1 malformed."
        ),
        "{table}"
    );
    assert!(
        table.contains("Database: sqlite://vigil.db — exists"),
        "{table}"
    );

    // The same plan for programs.
    let output = run(dir.path(), &["--dry-run", "-o", "json"], &files);
    assert_eq!(output.status.code(), Some(0));
    assert_no_secret(&output, &secrets);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let context = |name: &str| {
        json["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {json:#}"))
            .clone()
    };
    let kind = context("kind-kind");
    assert_eq!(kind["action"], "update");
    assert_eq!(
        kind["changes"],
        serde_json::json!([{ "field": "endpoint", "from": "https://127.0.0.1:1", "to": "https://127.0.0.1:41357" }])
    );
    assert_eq!(kind["probeable"], true);
    assert_eq!(context("static")["action"], "kept-manual");
    assert_eq!(context("default")["action"], "ignored");
    assert_eq!(context(EKS)["action"], "insert");
    assert_eq!(context(EKS)["probeable"], false);
    assert_eq!(json["clashes"][0]["context"], "default");
    assert!(
        json["malformed"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("bad/syntax-error.yaml")
    );
    assert_eq!(json["database"]["state"], "existing");
    assert_eq!(json["database"]["written"], false);
    assert_eq!(json["summary"]["update"], 1);

    // Nothing was written: same files, same bytes, same modification times, and
    // the store still holds the old endpoint and no new cluster.
    assert_eq!(
        snapshot(dir.path()),
        before,
        "the database directory is untouched"
    );
    let (endpoint, count) = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = Store::open_path(&db).await.unwrap();
        let endpoint = store.cluster("kind-kind").await.unwrap().endpoint;
        let count = store.clusters().await.unwrap().len();
        store.close().await;
        (endpoint, count)
    });
    assert_eq!((endpoint.as_str(), count), ("https://127.0.0.1:1", 3));
}

#[test]
fn a_missing_database_is_not_created_and_everything_would_be_inserted() {
    let dir = tempfile::tempdir().unwrap();
    let files = scenario_files();
    let output = run(dir.path(), &["--dry-run", "--output", "json"], &files);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_no_secret(&output, &secrets_of(&files));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["database"]["state"], "missing");
    assert_eq!(json["summary"]["contexts"], 4);
    assert_eq!(json["summary"]["insert"], 4);
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(written.is_empty(), "nothing is created: {written:?}");

    let output = run(dir.path(), &["--dry-run"], &files);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("does not exist (and was not created): every context would be inserted"),
        "{table}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn without_files_the_sources_of_serve_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let token = file("static-token/config");
    let output = vigil(dir.path())
        .args(["discover", "--dry-run", "-o", "json"])
        .env("KUBECONFIG_PATH", &token)
        .env("KUBECONFIG_DIR", file("bad"))
        .env("DATABASE_URL", "sqlite://elsewhere.db")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_no_secret(&output, &secrets_of(std::slice::from_ref(&token)));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["sources"]["files"], serde_json::json!([token]));
    assert_eq!(json["database"]["url"], "sqlite://elsewhere.db");
    let names: Vec<&str> = json["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["static", "works", "absent-files", "unpadded"]);
    let malformed: Vec<&str> = json["malformed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["file"].as_str().unwrap())
        .collect();
    for name in [
        "syntax-error.yaml",
        "empty.yaml",
        "deployment.yaml",
        "garbage.bin",
    ] {
        assert!(
            malformed.iter().any(|f| f.ends_with(name)),
            "{name} named among {malformed:?}"
        );
    }

    // `$KUBECONFIG` is read when KUBECONFIG_PATH is unset, as `vigil serve` does.
    let output = vigil(dir.path())
        .args(["discover", "--dry-run", "-o", "json"])
        .env("KUBECONFIG", file("kind/config"))
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["contexts"][0]["name"], "kind-kind");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn without_dry_run_or_with_bad_settings_it_refuses_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &[], &[file("kind/config")]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(message.contains("--dry-run"), "{message}");
    assert!(message.contains("vigil serve"), "{message}");

    let output = vigil(dir.path())
        .args(["discover", "--dry-run"])
        .env(
            "DATABASE_URL",
            "postgres://vigil:hunter2@127.0.0.1:5432/vigil",
        )
        .output()
        .unwrap();
    // A PostgreSQL server that cannot be reached: an error (exit 1) naming the server and
    // the cause, never the password.
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("postgres://vigil:***@127.0.0.1:5432/vigil")
            && message.contains("Connection refused"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");

    let output = run(dir.path(), &["--dry-run", "-o", "yaml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn an_unusable_database_is_an_error_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vigil.db");
    std::fs::write(&db, b"this is not a SQLite database, just text").unwrap();
    let before = snapshot(dir.path());
    let output = run(dir.path(), &["--dry-run"], &[file("kind/config")]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("vigil.db"), "{message}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn help_documents_the_exit_codes_and_the_shared_settings() {
    let dir = tempfile::tempdir().unwrap();
    let output = vigil(dir.path())
        .args(["discover", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    for needle in [
        "Exit codes: 0",
        "--dry-run",
        "KUBECONFIG_PATH",
        "KUBECONFIG_DIR",
        "DATABASE_URL",
        "[FILE]...",
        "json",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
