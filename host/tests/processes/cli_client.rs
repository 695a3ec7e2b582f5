//! `vigil status` and `vigil probe` — the real binary — against a running `vigil serve`
//! (also the real binary, probing through the first-party `kubeconfig-file` plugin of
//! `plugins.d/`) and the fake Kubernetes API server over TLS. Every address is on loopback.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, ShapePlan};
use vigil_store::Store;

use crate::process;
use vigil_test_support as plugins;

use process::{Vigil, vigil};
use vigil_test_support::wait;

/// The server's token.
const TOKEN: &str = "cli-test-token-0123456789abcdef";
/// A token the server does not know.
const WRONG_TOKEN: &str = "wrong-token-fedcba9876543210";

/// A loopback port nobody listens on (bound, read and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One run of the CLI: exit code and both outputs.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(output: &Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A working directory with kubeconfigs, a running `vigil serve` on it, and the
/// settings the CLI needs to read what the engine reads.
struct Setup {
    dir: PathBuf,
    kubeconfigs: PathBuf,
    url: String,
    server: Vigil,
    /// Every output of the CLI, scanned for secrets at the end.
    outputs: Vec<String>,
}

impl Setup {
    fn start(dir: &Path, kubeconfigs: &Path) -> Self {
        let server = process::serve(dir)
            .kubeconfigs(kubeconfigs)
            .plugins(plugins::plugin_dir_with_only(dir, "kubeconfig-file"))
            .cache(cache_dir())
            .env("VIGIL_API_TOKEN", TOKEN)
            // After the first probes nothing is due for an hour: every later probe is
            // one of this test's.
            .policy(3600, 2, 2)
            .start_blocking();
        Self {
            dir: dir.to_path_buf(),
            kubeconfigs: kubeconfigs.to_path_buf(),
            url: server.url(),
            server,
            outputs: Vec::new(),
        }
    }

    /// `vigil ARGS…` with the engine's settings and `token`.
    fn run(&mut self, args: &[&str], token: Option<&str>) -> Run {
        let mut command = vigil(&self.dir);
        command
            .args(args)
            .env("VIGIL_SERVER", &self.url)
            .env("KUBECONFIG_DIR", &self.kubeconfigs)
            .env("VIGIL_PLUGIN_DIR", self.dir.join("plugins.d"))
            .env("VIGIL_CACHE_DIR", cache_dir())
            .env("CLUSTER_HEALTH_TIMEOUT", "2");
        if let Some(token) = token {
            command.env("VIGIL_API_TOKEN", token);
        }
        let run = Run::of(&command.output().unwrap());
        self.outputs.push(run.stdout.clone());
        self.outputs.push(run.stderr.clone());
        run
    }

    /// `vigil status -o json`, as a map from cluster name to its object.
    fn clusters(&mut self) -> std::collections::BTreeMap<String, serde_json::Value> {
        let run = self.run(&["status", "-o", "json"], None);
        assert_eq!(run.code, Some(0), "{run}");
        run.json()
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap().to_owned(), c.clone()))
            .collect()
    }

    /// Waits until every cluster of `names` is ONLINE, as `vigil status` shows it.
    fn wait_online(&mut self, names: &[String]) {
        let log = self.server.log_path().to_path_buf();
        let last = std::cell::RefCell::new(String::new());
        wait::until(
            "the clusters are ONLINE",
            Duration::from_secs(120),
            || {
                format!(
                    "the clusters never became ONLINE; last status: {}\n{}",
                    last.borrow(),
                    process::tail(&log)
                )
            },
            || {
                if let Some(status) = self.server.try_wait() {
                    panic!(
                        "vigil serve exited with {status:?}:\n{}",
                        self.server.tail()
                    );
                }
                let run = self.run(&["status", "-o", "json"], None);
                if run.code == Some(0) {
                    let clusters = run.json();
                    let online = names.iter().all(|name| {
                        clusters.as_array().unwrap().iter().any(|c| {
                            c["name"].as_str() == Some(name)
                                && c["status"].as_str() == Some("ONLINE")
                        })
                    });
                    if online {
                        return Some(());
                    }
                }
                *last.borrow_mut() = run.to_string();
                None
            },
        );
    }

    async fn store(&self) -> Store {
        Store::open(&format!("sqlite://{}", self.dir.join("vigil.db").display()))
            .await
            .unwrap()
    }

    async fn event_kinds(&self, cluster: &str) -> Vec<String> {
        let store = self.store().await;
        let kinds = store
            .events(Some(cluster))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        store.close().await;
        kinds
    }

    fn stop(self) -> Vec<String> {
        self.server.stop();
        self.outputs
    }
}

/// Shared by the tests of this file (the cache is safe to share): the plugin is
/// compiled once per build of it.
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-client-cache")
}

fn field<'a>(cluster: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    cluster[name].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_probe_read_and_steer_a_running_server() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let kubeconfigs = dir.join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Mixed,
            single_file: false,
        },
    )
    .unwrap();
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let (up, down) = (names[0].as_str(), names[1].as_str());

    let mut setup = Setup::start(dir, &kubeconfigs);
    setup.wait_online(&names);

    // The table: one line per cluster, with its status, outcome and plugin.
    let table = setup.run(&["status"], None);
    assert_eq!(table.code, Some(0), "{table}");
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for column in [
        "NAME",
        "STATUS",
        "CONDITIONS",
        "LAST OUTCOME",
        "LAST PROBE",
        "PLUGIN",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    for (line, name) in lines[1..].iter().zip(&names) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells[..4],
            [name.as_str(), "ONLINE", "-", "healthy"],
            "{table}"
        );
        assert!(line.contains("s ago") && line.ends_with("auto"), "{table}");
    }

    // A probe without --apply: it reaches the cluster and records nothing.
    let before = setup.clusters();
    let kinds_before = setup.event_kinds(up).await;
    let requests_before = fleet.get(0).unwrap().log().entries().len();
    let probe = setup.run(&["probe", up], None);
    assert_eq!(probe.code, Some(0), "{probe}");
    assert!(probe.stdout.contains("outcome:  healthy"), "{probe}");
    assert!(probe.stdout.contains("(from the database)"), "{probe}");
    assert!(probe.stdout.contains("elapsed:  "), "{probe}");
    assert_eq!(
        fleet.get(0).unwrap().log().entries().len(),
        requests_before + 1,
        "the probe made its one request"
    );
    let after = setup.clusters();
    assert_eq!(
        field(&after[up], "last_probe"),
        field(&before[up], "last_probe"),
        "a probe without --apply records nothing"
    );
    assert_eq!(setup.event_kinds(up).await, kinds_before);

    // A refusing cluster: exit 3 with the reason class; its status is untouched.
    fleet.get(1).unwrap().refuse().await.unwrap();
    let refused = setup.run(&["probe", down], None);
    assert_eq!(refused.code, Some(3), "{refused}");
    assert!(refused.stdout.contains("outcome:  unhealthy"), "{refused}");
    assert!(refused.stdout.contains("reason:   refused"), "{refused}");
    let json = setup.run(&["probe", down, "-o", "json"], None);
    assert_eq!(json.code, Some(3), "{json}");
    let json = json.json();
    assert_eq!(json["outcome"], "unhealthy");
    assert_eq!(json["reason_class"], "refused");
    assert_eq!(json["applied"], false);
    let after = setup.clusters();
    assert_eq!(field(&after[down], "status"), Some("ONLINE"));
    assert_eq!(
        field(&after[down], "last_probe"),
        field(&before[down], "last_probe")
    );
    assert_eq!(field(&after[down], "last_outcome"), Some("healthy"));

    // --apply: the server probes and records (one counted failure of two).
    let kinds_before = setup.event_kinds(down).await;
    let applied = setup.run(&["probe", down, "--apply"], Some(TOKEN));
    assert_eq!(applied.code, Some(3), "{applied}");
    assert!(applied.stdout.contains("reason:   refused"), "{applied}");
    assert!(
        applied
            .stdout
            .contains("status:   ONLINE (after the outcome was recorded)"),
        "{applied}"
    );
    let after = setup.clusters();
    assert_ne!(
        field(&after[down], "last_probe"),
        field(&before[down], "last_probe")
    );
    assert_eq!(field(&after[down], "last_outcome"), Some("unhealthy"));
    assert_eq!(field(&after[down], "reason_class"), Some("refused"));
    assert_eq!(after[down]["counters"]["consecutive_failures"], 1);
    let kinds = setup.event_kinds(down).await;
    assert_eq!(
        kinds[kinds_before.len()..],
        ["failure-counted"],
        "the history has the probe's effect"
    );
    // The table shows the outcome and its class.
    let table = setup.run(&["status"], None);
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with(down) && l.contains("unhealthy (refused)")),
        "{table}"
    );

    let healthy = setup.run(&["probe", up, "--apply", "-o", "json"], Some(TOKEN));
    assert_eq!(healthy.code, Some(0), "{healthy}");
    assert_eq!(healthy.json()["outcome"], "healthy");
    assert_eq!(healthy.json()["cluster"]["name"], up);
    let after = setup.clusters();
    assert_ne!(
        field(&after[up], "last_probe"),
        field(&before[up], "last_probe")
    );

    // A wrong token: the problem's detail, never the token.
    for args in [&["probe", up, "--apply"][..], &["status"][..]] {
        let refused = setup.run(args, Some(WRONG_TOKEN));
        assert_eq!(refused.code, Some(1), "{args:?}: {refused}");
        assert!(
            refused
                .stderr
                .contains("detail: the bearer token is not valid"),
            "{refused}"
        );
        assert!(refused.stderr.contains("HTTP 401"), "{refused}");
    }
    // --apply without a token.
    let anonymous = setup.run(&["probe", up, "--apply"], None);
    assert_eq!(anonymous.code, Some(1), "{anonymous}");
    assert!(
        anonymous.stderr.contains("Authorization: Bearer"),
        "{anonymous}"
    );
    // An unknown cluster, through the server and alone.
    let unknown = setup.run(&["probe", "no-such-cluster", "--apply"], Some(TOKEN));
    assert_eq!(unknown.code, Some(1), "{unknown}");
    assert!(unknown.stderr.contains("HTTP 404"), "{unknown}");
    let unknown = setup.run(&["probe", "no-such-cluster"], None);
    assert_eq!(unknown.code, Some(1), "{unknown}");
    assert!(
        unknown
            .stderr
            .contains("no cluster named `no-such-cluster`"),
        "{unknown}"
    );

    // A cluster the database does not know is found among the kubeconfigs, and a missing
    // database is not created.
    let elsewhere = dir.join("elsewhere.db");
    let from_files = setup.run(
        &[
            "probe",
            up,
            "--database-url",
            &format!("sqlite://{}", elsewhere.display()),
        ],
        None,
    );
    assert_eq!(from_files.code, Some(0), "{from_files}");
    assert!(
        from_files.stdout.contains("(from kubeconfig "),
        "{from_files}"
    );
    assert!(
        !elsewhere.exists(),
        "the probe created {}",
        elsewhere.display()
    );

    let outputs = setup.stop();
    let mut secrets = vec![TOKEN.to_owned(), WRONG_TOKEN.to_owned()];
    for cluster in fleet.clusters() {
        secrets.push(cluster.admin_token().to_owned());
        secrets.push(cluster.reader_token().to_owned());
    }
    for output in &outputs {
        for secret in &secrets {
            assert!(
                !output.contains(secret.as_str()),
                "a secret appears in the CLI's output:\n{output}"
            );
        }
    }
}

#[test]
fn a_server_that_is_not_running_is_an_error_naming_its_url() {
    let temp = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    for args in [
        &["status"][..],
        &["status", "-o", "json"][..],
        &["probe", "any", "--apply"][..],
    ] {
        let run = Run::of(
            &vigil(temp.path())
                .args(args)
                .env("VIGIL_SERVER", &url)
                .env("VIGIL_API_TOKEN", TOKEN)
                .output()
                .unwrap(),
        );
        assert_eq!(run.code, Some(1), "{args:?}: {run}");
        assert!(
            run.stderr
                .contains(&format!("cannot reach vigil at {url}: connection refused")),
            "{run}"
        );
        assert!(run.stdout.is_empty(), "{run}");
        assert!(!run.stderr.contains(TOKEN), "{run}");
    }
    // A URL that is not one: invalid settings.
    let run = Run::of(
        &vigil(temp.path())
            .args(["status", "--server", "127.0.0.1:8080"])
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, Some(2), "{run}");
    assert!(
        run.stderr.contains("invalid server URL 127.0.0.1:8080"),
        "{run}"
    );
}
