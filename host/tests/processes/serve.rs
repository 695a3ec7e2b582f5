//! The `vigil` binary: discovery at start-up, the database lock, signals and
//! settings errors (a bad notifications file among them). Every run has its own
//! kubeconfig sources and database.

use std::path::Path;
use std::time::Duration;

use crate::process;
use vigil_test_support::engine as support;
use vigil_test_support::wait;

use process::vigil;
use support::write_kubeconfig;

/// Polls the database until `sql` returns `expected` (as text).
fn wait_for_db(db: &Path, sql: &str, expected: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sql = format!("SELECT CAST(({sql}) AS TEXT)");
    let got = std::cell::RefCell::new(None::<String>);
    wait::until(
        &format!("the database answers {expected:?} to {sql}"),
        Duration::from_secs(15),
        || {
            format!(
                "database never answered {expected:?} to {sql}; last answer {:?}",
                got.borrow()
            )
        },
        || {
            if !db.exists() {
                return None;
            }
            let answer = runtime.block_on(async {
                let url = format!("sqlite://{}?mode=ro", db.display());
                let pool = sqlx::SqlitePool::connect(&url).await.ok()?;
                let value: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
                    .fetch_optional(&pool)
                    .await
                    .ok()
                    .flatten();
                pool.close().await;
                value
            });
            let done = answer.as_deref() == Some(expected);
            *got.borrow_mut() = answer;
            done.then_some(())
        },
    );
}

#[test]
fn serve_discovers_a_directory_logs_probeability_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    std::fs::create_dir(&kubeconfigs).unwrap();
    write_kubeconfig(&kubeconfigs.join("alpha.yaml"), "alpha", 42_001);
    write_kubeconfig(&kubeconfigs.join("beta.yaml"), "beta", 42_002);
    std::fs::write(
        kubeconfigs.join("eks.yaml"),
        "apiVersion: v1\nkind: Config\ncurrent-context: eks\nclusters:\n- name: eks\n  cluster:\n    server: https://127.0.0.1:42003\ncontexts:\n- name: eks\n  context:\n    cluster: eks\n    user: eks\nusers:\n- name: eks\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n      args: [eks, get-token]\n",
    )
    .unwrap();
    std::fs::write(kubeconfigs.join("broken.yaml"), "clusters: [\n").unwrap();

    let mut child = process::serve(dir.path())
        .args(["--interval", "1"])
        .kubeconfigs(&kubeconfigs)
        .start_blocking();
    let db = dir.path().join("vigil.db");
    wait_for_db(
        &db,
        "SELECT group_concat(name, ',') FROM (SELECT name FROM clusters ORDER BY name)",
        "alpha,beta,eks",
    );
    wait_for_db(
        &db,
        "SELECT COUNT(*) FROM clusters WHERE last_probe IS NOT NULL",
        "3",
    );
    // A file added while running is discovered without a restart.
    write_kubeconfig(&kubeconfigs.join("gamma.yaml"), "gamma", 42_004);
    wait_for_db(
        &db,
        "SELECT COUNT(*) FROM clusters WHERE name = 'gamma'",
        "1",
    );

    child.signal("TERM");
    let status = child.wait_exit(Duration::from_secs(10));
    let log = child.log();
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(
        log.contains("broken.yaml"),
        "the malformed file is named:\n{log}"
    );
    assert!(log.contains("probeable: bearer token inline"), "{log}");
    assert!(log.contains("not probeable (exec-credentials)"), "{log}");
    assert!(log.contains("health worker stopped"), "{log}");
    assert!(
        !log.contains("test-token-alpha"),
        "no secret in the log:\n{log}"
    );
    wait_for_db(
        &db,
        "SELECT status || ' ' || json_extract(conditions, '$[0].type') FROM clusters WHERE name = 'eks'",
        "UNKNOWN not-probeable",
    );
}

#[test]
fn a_second_serve_on_the_same_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = process::serve(dir.path())
        .env("KUBECONFIG_PATH", dir.path().join("none.yaml"))
        .log_file(dir.path().join("first.log"))
        .start_blocking();
    let db = dir.path().join("vigil.db");
    wait_for_db(&db, "SELECT COUNT(*) > 0 FROM _sqlx_migrations", "1");

    let second = vigil(dir.path())
        .args(["serve"])
        .env("KUBECONFIG_PATH", dir.path().join("none.yaml"))
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(3), "{message}");
    assert!(
        message.contains("another `vigil serve` is already running"),
        "{message}"
    );
    assert!(message.contains("vigil.db.lock"), "{message}");

    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(10)).success());
    // Once the first has stopped, the lock is free again: the third gets past it and
    // listens (a refusal would have ended it first).
    let mut third = process::serve(dir.path())
        .env("KUBECONFIG_PATH", dir.path().join("none.yaml"))
        .log_file(dir.path().join("third.log"))
        .start_blocking();
    assert!(
        third.try_wait().is_none(),
        "the third engine runs: {}",
        third.log()
    );
    third.signal("TERM");
    assert!(third.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn a_second_serve_reaching_the_database_through_a_link_is_refused() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("data")).unwrap();
    let mut first = process::serve(&root)
        .env("KUBECONFIG_PATH", root.join("none.yaml"))
        .database("sqlite://data/vigil.db")
        .start_blocking();
    let db = root.join("data/vigil.db");
    wait_for_db(&db, "SELECT COUNT(*) > 0 FROM _sqlx_migrations", "1");
    symlink(root.join("data"), root.join("alias")).unwrap();
    symlink(&db, root.join("link.db")).unwrap();

    for url in ["sqlite://alias/vigil.db", "sqlite://link.db"] {
        let second = vigil(&root)
            .args(["serve"])
            .env("KUBECONFIG_PATH", root.join("none.yaml"))
            .env("DATABASE_URL", url)
            .output()
            .unwrap();
        let message = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(3), "{url}: {message}");
        assert!(
            message.contains("another `vigil serve` is already running"),
            "{url}: {message}"
        );
        assert!(
            message.contains(&format!("{}.lock", db.display())),
            "{url}: the lock beside the real file is named: {message}"
        );
    }
    assert!(first.try_wait().is_none(), "the first engine still runs");
    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn a_bad_notifications_file_stops_start_up_naming_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        "[[webhook]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\n\
         secret_file = \"/nonexistent\"\nretries = 3\n",
    )
    .unwrap();
    let output = vigil(dir.path())
        .arg("serve")
        .env("VIGIL_NOTIFY_CONFIG", &notify)
        .env("KUBECONFIG_PATH", dir.path().join("none"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:5:1: unknown field `retries`",
            notify.display()
        )),
        "{stderr}"
    );
}

fn check_refused(env: &[(&str, &str)], names: &[&str], absent: &[&str]) {
    check_fails_with(2, env, names, absent);
}

/// `vigil serve` with `env` exits with `code`, its message naming each of `names` and none
/// of `absent`, and writes nothing.
fn check_fails_with(code: i32, env: &[(&str, &str)], names: &[&str], absent: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = vigil(dir.path());
    command.arg("serve");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{env:?}: {message}");
    for name in names {
        assert!(message.contains(name), "{env:?}: {name} not in {message}");
    }
    for secret in absent {
        assert!(
            !message.contains(secret),
            "{env:?}: {secret} leaked in {message}"
        );
    }
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        written.is_empty(),
        "{env:?}: nothing is written, found {written:?}"
    );
}

#[test]
fn an_invalid_setting_stops_start_up_naming_the_variable_and_the_value() {
    check_refused(
        &[("CLUSTER_HEALTH_INTERVAL", "soon")],
        &["CLUSTER_HEALTH_INTERVAL", "soon"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_INTERVAL", "0")],
        &["CLUSTER_HEALTH_INTERVAL", "0"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_FAILURE_THRESHOLD", "-1")],
        &["CLUSTER_HEALTH_FAILURE_THRESHOLD", "-1"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_TIMEOUT", "ten")],
        &["CLUSTER_HEALTH_TIMEOUT", "ten"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_CONCURRENCY", "0")],
        &["CLUSTER_HEALTH_CONCURRENCY"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_MASS_FAILURE_RATIO", "1.5")],
        &["CLUSTER_HEALTH_MASS_FAILURE_RATIO", "1.5"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_MASS_FAILURE_MIN", "x")],
        &["CLUSTER_HEALTH_MASS_FAILURE_MIN", "x"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_BRAKE", "maybe")],
        &["CLUSTER_HEALTH_BRAKE", "maybe"],
        &[],
    );
    check_refused(
        &[("CLUSTER_HEALTH_START_PERIOD", "later")],
        &["CLUSTER_HEALTH_START_PERIOD", "later"],
        &[],
    );
    // A PostgreSQL server that cannot be reached stops start-up with a runtime error
    // (exit 1) that names the server, never the password, and the cause.
    for (url, shown, secret) in [
        (
            "postgres://vigil:hunter2@127.0.0.1:5432/vigil",
            "postgres://vigil:***@127.0.0.1:5432/vigil",
            "hunter2",
        ),
        (
            "postgres://127.0.0.1:5432/vigil?user=vigil&password=hunter%2F2",
            "postgres://127.0.0.1:5432/vigil?user=vigil&password=***",
            "hunter",
        ),
        (
            "postgres://vigil:hunter/2@127.0.0.1/vigil",
            "postgres://***",
            "hunter",
        ),
    ] {
        check_fails_with(
            1,
            &[("DATABASE_URL", url)],
            &["cannot open database", shown],
            &[secret],
        );
    }
    check_refused(
        &[("DATABASE_URL", "mysql://127.0.0.1/vigil")],
        &["DATABASE_URL", "mysql://127.0.0.1/vigil"],
        &[],
    );
    // Without a token the API stays on loopback (no connection is opened: refused first).
    check_refused(
        &[("VIGIL_LISTEN", "0.0.0.0:18080")],
        &["VIGIL_LISTEN", "0.0.0.0:18080", "--insecure-no-auth"],
        &[],
    );
    check_refused(
        &[("VIGIL_API_TOKEN", "short")],
        &["VIGIL_API_TOKEN", "at least 16"],
        &["short"],
    );
    check_refused(
        &[("VIGIL_API_READ_AUTH", "true")],
        &["VIGIL_API_READ_AUTH"],
        &[],
    );
    check_refused(
        &[
            ("VIGIL_PLUGIN_DIR", "/srv/vigil/plugins"),
            ("VIGIL_CACHE_DIR", "/srv/vigil/plugins/cache"),
        ],
        &[
            "VIGIL_CACHE_DIR",
            "/srv/vigil/plugins/cache",
            "inside the plugin directory",
        ],
        &[],
    );
    check_refused(
        &[
            ("VIGIL_PLUGIN_DIR", "/srv/cache"),
            ("XDG_CACHE_HOME", "/srv/cache"),
        ],
        &["VIGIL_PLUGIN_DIR", "/srv/cache/vigil"],
        &[],
    );
}

#[test]
fn serve_help_lists_every_setting() {
    let dir = tempfile::tempdir().unwrap();
    let output = vigil(dir.path())
        .args(["serve", "--help"])
        .env("DATABASE_URL", "sqlite://secret-path-hunter2.db")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    for name in [
        "CLUSTER_HEALTH_INTERVAL",
        "CLUSTER_HEALTH_FAILURE_THRESHOLD",
        "CLUSTER_HEALTH_SUCCESS_THRESHOLD",
        "CLUSTER_HEALTH_TIMEOUT",
        "CLUSTER_HEALTH_START_PERIOD",
        "CLUSTER_HEALTH_CONCURRENCY",
        "CLUSTER_HEALTH_MASS_FAILURE_RATIO",
        "CLUSTER_HEALTH_MASS_FAILURE_MIN",
        "CLUSTER_HEALTH_MASS_FAILURE_WINDOW",
        "CLUSTER_HEALTH_BRAKE",
        "KUBECONFIG_PATH",
        "KUBECONFIG_DIR",
        "DATABASE_URL",
        "VIGIL_LOG_FORMAT",
        "VIGIL_CREDENTIAL_DIRS",
        "VIGIL_PLUGIN_DIR",
        "VIGIL_CACHE_DIR",
        "VIGIL_MANAGEMENT_KUBECONFIG",
        "--management-kubeconfig",
        "VIGIL_API_TOKENS_FILE",
        "VIGIL_PUBLIC_URL",
        "--public-url",
        "VIGIL_API_ALLOWED_HOSTS",
        "VIGIL_API_WRITE_TIMEOUT",
        "VIGIL_API_MAX_CONNECTIONS_PER_PEER",
        "VIGIL_EXEC_DIR",
        "VIGIL_EXEC_LANDLOCK",
        "VIGIL_EXEC_READ",
    ] {
        assert!(help.contains(name), "{name} missing from --help:\n{help}");
    }
    assert!(
        !help.contains("hunter2"),
        "the database URL's value is not shown:\n{help}"
    );
}
