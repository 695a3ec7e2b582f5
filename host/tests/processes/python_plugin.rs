//! The Python example plugin, `examples/python-http-probe`, built by componentize-py
//! (`scripts/build-python-plugin`) and run by the real binary: `vigil plugin check`
//! accepts it, and `vigil serve` probes loopback health URLs through it — a healthy URL is
//! `ONLINE`, a failing condition `OFFLINE` with the value seen, and a redirect to a port its
//! grants do not allow is answered `denied`, inconclusive, never counted against the
//! cluster (and the other port is never dialled). The ```sh python blocks of PLUGINS.md
//! run as a new user runs them, in a fresh copy of the example.
//!
//! Its compiled code goes through vigil's compiled-code cache in one directory under
//! `target/` shared by these tests and kept between runs: the interpreter inside the
//! component is compiled once per build of the component, not once per test.
//!
//! System tests: they need componentize-py, which `scripts/install-tools componentize-py`
//! installs; without it they fail naming that command.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use vigil_decision::ClusterStatus;
use vigil_store::{ClusterRecord, Store};
use vigil_test_support::{tools, wait};

use crate::plugins_doc::{root, run_guide};
use crate::process::{self, vigil};

const NAME: &str = "python-http-probe";
const API_TOKEN: &str = "python-plugin-test-token-0123456789";

/// Fails, naming `scripts/install-tools componentize-py`, unless componentize-py is where
/// that command installs it: in a venv named by the version the example's requirements.txt
/// pins, where scripts/build-python-plugin finds it. These tests never install it.
fn require_componentize_py() {
    let requirements = root().join("examples").join(NAME).join("requirements.txt");
    let pins = std::fs::read_to_string(&requirements).expect("the example's requirements.txt");
    let version = pins
        .lines()
        .find_map(|line| line.strip_prefix("componentize-py=="))
        .and_then(|rest| rest.split([' ', '\\']).next())
        .unwrap_or_else(|| panic!("no componentize-py==VERSION in {}", requirements.display()));
    let program = root()
        .join("target/tools")
        .join(format!("componentize-py-{version}"))
        .join("bin/componentize-py");
    assert!(
        program.is_file(),
        "{}",
        tools::missing(&program.display().to_string(), "componentize-py")
    );
}

/// The built component (and its `.toml` beside it), built once per test binary by the
/// project's own script, which does nothing when it is up to date.
fn component() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            require_componentize_py();
            let output = Command::new(root().join("scripts/build-python-plugin"))
                .env_remove("VIRTUAL_ENV")
                .output()
                .expect("run scripts/build-python-plugin");
            assert!(
                output.status.success(),
                "scripts/build-python-plugin failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            assert!(path.is_file(), "{} was not built", path.display());
            path
        })
        .clone()
}

/// The compiled-code cache these tests share, kept between runs.
fn cache_dir() -> PathBuf {
    root().join("target").join("python-plugin-cache")
}

/// A plugin directory in `dir` holding the component and its `NAME.toml`.
fn plugin_dir(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    let wasm = component();
    std::fs::copy(&wasm, plugins.join(format!("{NAME}.wasm"))).expect("copy the plugin");
    std::fs::copy(
        wasm.with_extension("toml"),
        plugins.join(format!("{NAME}.toml")),
    )
    .expect("copy the grants");
    plugins
}

#[test]
fn plugin_check_accepts_the_python_component_with_its_grants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = plugin_dir(dir.path());
    let output = vigil(dir.path())
        .args(["plugin", "check", "-o", "json"])
        .arg(plugins.join(format!("{NAME}.wasm")))
        .env("VIGIL_CACHE_DIR", cache_dir())
        .output()
        .expect("run vigil plugin check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["accepted"], true, "{report:#}");
    let text = report.to_string();
    for expected in [
        "\"python-http-probe\"",
        "\"0.1.0\"",
        "\"https\"",
        "vigil:plugin@0.1.0",
    ] {
        assert!(text.contains(expected), "{expected} missing: {report:#}");
    }
    assert!(text.contains("\"grants\":[\"http\"]"), "grants: {report:#}");

    // Its compiled code is in the shared cache, written for this build of the component
    // (by this check or by a test before it), where the other tests find it.
    let built = std::fs::metadata(component())
        .and_then(|m| m.modified())
        .expect("the component's time");
    let artifacts = cache_artifacts(&cache_dir());
    assert!(
        artifacts.iter().any(|(_, written)| *written >= built),
        "no compiled artifact newer than the component in the cache: {artifacts:?}"
    );
}

/// The compiled artifacts under `dir`, with the time each was written.
fn cache_artifacts(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(cache_artifacts(&path));
        } else if path.extension().is_some_and(|e| e == "cwasm") {
            let written = entry.metadata().and_then(|m| m.modified()).expect("mtime");
            found.push((path, written));
        }
    }
    found
}

/// A loopback HTTP server answering each path with a fixed status, headers and body; it
/// counts the connections it accepted.
struct Health {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Health {
    fn start(routes: Vec<(&'static str, u16, String, &'static str)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                accepted.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, headers, body) = routes
                    .iter()
                    .find(|(p, ..)| *p == path)
                    .map(|(_, s, h, b)| (*s, h.clone(), *b))
                    .unwrap_or((404, String::new(), "not found"));
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                    body.len()
                );
            }
        });
        Self { addr, connections }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// One request to vigil's API with the token; the status and the body.
fn api(address: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect to the API");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {API_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

async fn wait_for(
    store: &Store,
    vigil: &process::Vigil,
    name: &str,
    what: &str,
    check: impl Fn(&ClusterRecord) -> bool,
) -> ClusterRecord {
    let seen = RefCell::new(String::new());
    wait::until_async(
        &format!("{name} is {what}"),
        Duration::from_secs(60),
        || format!("{name} is now {}\n{}", seen.borrow(), vigil.tail()),
        async || {
            let cluster = store.cluster(name).await.expect("the cluster");
            *seen.borrow_mut() = format!(
                "{:?}, last {:?} ({:?}: {:?})",
                cluster.health.status,
                cluster.last_outcome,
                cluster.last_reason_class,
                cluster.last_reason,
            );
            check(&cluster).then_some(cluster)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vigil_serve_probes_through_the_python_plugin_and_its_egress_stays_in_its_grant() {
    // Not in the plugin's grants: the cluster's reference names another port.
    let elsewhere = Health::start(vec![("/healthz", 200, String::new(), "ok")]);
    let health = Health::start(vec![
        ("/healthz", 200, String::new(), "ok: all checks passed"),
        ("/down", 503, String::new(), "maintenance"),
        (
            "/moved",
            302,
            format!("location: {}\r\n", elsewhere.url("/healthz")),
            "",
        ),
    ]);

    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = plugin_dir(dir.path());
    let vigil = process::serve(dir.path())
        .plugins(&plugins)
        .cache(cache_dir())
        .env("VIGIL_API_TOKEN", API_TOKEN)
        .kubeconfigs(dir.path().join("no-kubeconfigs"))
        .policy(1, 5, 2)
        .json_log("info")
        .start()
        .await;
    let address = vigil.api().to_string();
    let store = Store::open(&format!(
        "sqlite://{}",
        dir.path().join("vigil.db").display()
    ))
    .await
    .expect("the database");

    for (name, path, parameters) in [
        (
            "up",
            "/healthz",
            json!({ "body-contains": "checks passed" }),
        ),
        ("down", "/down", json!({ "body-contains": "ok" })),
        ("redirected", "/moved", json!({})),
    ] {
        let cluster = json!({
            "name": name,
            "endpoint": format!("http://{}", health.addr),
            "kubeconfig_secret_ref": health.url(path),
            "plugin": NAME,
            "parameters": parameters,
        });
        let (status, body) = api(&address, "POST", "/api/v1/clusters", Some(cluster));
        assert_eq!(status, 201, "{name}: {body}");
    }

    let up = wait_for(&store, &vigil, "up", "ONLINE", |c| {
        c.health.status == ClusterStatus::Online
    })
    .await;
    assert_eq!(
        up.last_probed_by.as_ref().map(|p| p.plugin.as_str()),
        Some(NAME)
    );

    // Both conditions fail, each named with what was seen (the body never quoted).
    let down = wait_for(&store, &vigil, "down", "OFFLINE", |c| {
        c.health.status == ClusterStatus::Offline
    })
    .await;
    assert_eq!(down.last_reason_class.as_deref(), Some("server-error"));
    let reason = down.last_reason.clone().unwrap_or_default();
    assert!(reason.contains("status 503, expected 200"), "{reason}");
    assert!(
        reason.contains("the body (11 bytes) does not contain 'ok'"),
        "{reason}"
    );
    assert!(!reason.contains("maintenance"), "{reason}");

    // The redirect's request is denied by vigil: inconclusive, the cluster's status and
    // failures untouched, and the other port never dialled.
    let redirected = wait_for(&store, &vigil, "redirected", "inconclusive twice", |c| {
        c.health.consecutive_inconclusive >= 2
    })
    .await;
    assert_eq!(redirected.last_outcome.as_deref(), Some("inconclusive"));
    assert_eq!(redirected.last_reason_class.as_deref(), Some("denied"));
    assert_eq!(redirected.health.status, ClusterStatus::Unknown);
    assert_eq!(redirected.health.consecutive_failures, 0);
    assert_eq!(elsewhere.connections.load(Ordering::SeqCst), 0);
    assert!(health.connections.load(Ordering::SeqCst) >= 4);

    store.close().await;
    vigil.stop();
}

#[test]
fn every_python_shell_command_of_plugins_md_runs_and_the_plugin_is_accepted() {
    // The guide installs componentize-py anew, as a new user does: with python3's venv and
    // pip, from PyPI or pip's cache, which a machine that installed the tool has.
    require_componentize_py();
    let root = root();
    let guide = std::fs::read_to_string(root.join("PLUGINS.md")).expect("PLUGINS.md");
    let script = crate::plugins_doc::fenced_blocks(&guide, "sh python").concat();
    // The guide must keep its promise: install the pinned componentize-py, build, check,
    // install.
    for step in [
        "pip install --require-hashes -r requirements.txt",
        "-w probe componentize app",
        "vigil plugin check ",
        "plugins.d",
    ] {
        assert!(
            script.contains(step),
            "PLUGINS.md no longer runs `{step}`:\n{script}"
        );
    }

    // A checkout as the guide sees it, made anew on every run: the contract, and the
    // example's own files (not a virtual environment or a build left in it).
    let work = root.join("target").join("plugins-doc-python");
    let checkout = work.join("checkout");
    if checkout.exists() {
        std::fs::remove_dir_all(&checkout).expect("clean the previous run");
    }
    let cache = work.join("cache");
    if cache.exists() {
        std::fs::remove_dir_all(&cache).expect("clean the previous run's cache");
    }
    let example = checkout.join("examples").join(NAME);
    std::fs::create_dir_all(&example).expect("mkdir");
    std::os::unix::fs::symlink(root.join("wit"), checkout.join("wit")).expect("symlink");
    for entry in std::fs::read_dir(root.join("examples").join(NAME)).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("file type").is_file() {
            std::fs::copy(entry.path(), example.join(entry.file_name())).expect("copy");
        }
    }

    // The cache was emptied above: componentize-py's output differs from one build to the
    // next, so an artifact of a previous run would never be found again, only kept.
    let stdout = run_guide(
        "PLUGINS.md's Python commands",
        &script,
        &checkout,
        &cache,
        |bash| {
            bash.env_remove("VIRTUAL_ENV");
        },
    );
    assert!(stdout.contains("componentize-py 0.25.1"), "{stdout}");
    assert!(stdout.contains("(accepted)"), "{stdout}");
    assert!(
        stdout.contains("name:         python-http-probe"),
        "{stdout}"
    );
    assert!(stdout.contains("grants:       http"), "{stdout}");
    for file in [format!("{NAME}.wasm"), format!("{NAME}.toml")] {
        assert!(
            checkout.join("plugins.d").join(&file).is_file(),
            "{file} not installed"
        );
    }
}
