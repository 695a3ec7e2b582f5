//! The plugin written in JavaScript (`examples/js-version-probe`, a componentize-js
//! component with a JavaScript engine inside) loaded by the real `vigil` binary:
//! `vigil plugin check` accepts it with its grants; `vigil serve` probes fake clusters over
//! real TLS with it — every kubeconfig shape ONLINE with the server's version in the log, a
//! cluster answering 503 OFFLINE — and a request it makes outside its egress grant is
//! answered `denied`, never reaching the other port nor counting against the cluster.
//!
//! The component is built by `scripts/build-js-plugin` (componentize-js, into
//! `target/js-plugins/`), once per test binary and only when its sources changed. Its
//! compiled code goes through vigil's compiled-code cache in one directory under `target/`
//! that every test here shares: the interpreter is compiled once per build of the
//! component, not once per test.
//!
//! System tests: they need componentize-js, the example's npm packages, which
//! `scripts/install-tools componentize-js` installs; without it they fail naming that
//! command.

use std::io::{Read, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use vigil_fake_kube::kubeconfig::write_kubeconfigs;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions, KubeconfigShape, ShapePlan};
use vigil_test_support::{tools, wait};

use crate::plugins_doc::{root, run_guide};
use crate::process::{self, message, vigil};

/// The plugin's name: its file is `js-version-probe.wasm`, its grants `js-version-probe.toml`.
const NAME: &str = "js-version-probe";

/// What the fake API server answers on `/version`.
const FAKE_VERSION: &str = "v1.33.0";

/// The compiled-code cache these tests share (`VIGIL_CACHE_DIR`).
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("js-plugin-cache")
}

/// Fails, naming `scripts/install-tools componentize-js`, unless componentize-js is where
/// that command installs it: among the example's npm packages, pinned by its
/// package-lock.json. These tests never install it.
fn require_componentize_js() {
    let program = root().join("examples/js-version-probe/node_modules/.bin/componentize-js");
    assert!(
        program.is_file(),
        "{}",
        tools::missing(&program.display().to_string(), "componentize-js")
    );
}

/// The built component (its `NAME.toml` beside it), built by `scripts/build-js-plugin` and
/// compiled into [`cache_dir`] by one `vigil plugin check`, once per test binary: the tests
/// that start `vigil` at the same time then all find it compiled.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        require_componentize_js();
        let output = Command::new(root().join("scripts/build-js-plugin"))
            .output()
            .expect("run scripts/build-js-plugin");
        assert!(
            output.status.success(),
            "scripts/build-js-plugin failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let wasm = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        assert!(wasm.is_file(), "no component at {}", wasm.display());
        assert!(
            wasm.starts_with(root().join("target")),
            "{}",
            wasm.display()
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let check = vigil(dir.path())
            .args(["plugin", "check"])
            .arg(&wasm)
            .env("VIGIL_CACHE_DIR", cache_dir())
            .output()
            .expect("run vigil plugin check");
        assert!(
            check.status.success(),
            "the first load of the component failed: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        wasm
    })
}

/// A plugin directory `dir/plugins.d` holding the JavaScript plugin alone.
fn plugin_dir(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("create the plugin dir");
    let wasm = built();
    std::fs::copy(wasm, plugins.join(format!("{NAME}.wasm"))).expect("copy the plugin");
    std::fs::copy(
        wasm.with_extension("toml"),
        plugins.join(format!("{NAME}.toml")),
    )
    .expect("copy its grants");
    plugins
}

#[test]
fn vigil_plugin_check_accepts_the_javascript_plugin_with_its_grants() {
    let wasm = built();
    let dir = tempfile::tempdir().unwrap();
    let output = vigil(dir.path())
        .args(["plugin", "check", "-o", "json"])
        .arg(wasm)
        .env("VIGIL_CACHE_DIR", cache_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(json["accepted"], true, "{json}");
    let text = json.to_string();
    for expected in [
        r#""name":"js-version-probe""#,
        r#""version":"0.1.0""#,
        r#""world":"probe""#,
        r#""schemes":["file"]"#,
        r#""grants":["log","credentials","http"]"#,
        r#""memory_mib":32"#,
    ] {
        assert!(text.contains(expected), "{expected} not in {json:#}");
    }
}

/// A running `vigil serve` with only the JavaScript plugin, on the kubeconfigs of `dir`.
struct Vigil {
    process: process::Vigil,
}

impl Vigil {
    async fn start(dir: &Path, kubeconfigs: &Path) -> Self {
        let process = process::serve(dir)
            .kubeconfigs(kubeconfigs)
            .plugins(plugin_dir(dir))
            .cache(cache_dir())
            .policy(1, 2, 2)
            // The plugin's own lines (debug) and the compiled-code cache's.
            .json_log("info,vigil_plugin_host=debug")
            .start()
            .await;
        Self { process }
    }

    fn cluster(&self, name: &str) -> Value {
        let body = process::http_get(self.process.api(), &format!("/api/v1/clusters/{name}"));
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// Waits until `check` holds for the API's view of cluster `name`; returns that view.
    async fn wait_for(&mut self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let last = std::cell::RefCell::new(Value::Null);
        let log = self.process.log_path().to_owned();
        wait::until_async(
            &format!("{name} is {what}"),
            Duration::from_secs(60),
            || format!("{name} is now {:#}\n{}", last.borrow(), process::tail(&log)),
            async || {
                if let Some(status) = self.process.try_wait() {
                    panic!("vigil exited with {status}:\n{}", self.process.tail());
                }
                let cluster = self.cluster(name);
                let done = check(&cluster);
                *last.borrow_mut() = cluster.clone();
                done.then_some(cluster)
            },
        )
        .await
    }

    /// `PATCH /api/v1/clusters/{name}` with `body` (from loopback, no token configured).
    fn patch(&self, name: &str, body: &Value) -> (u16, String) {
        let body = body.to_string();
        let mut stream = std::net::TcpStream::connect(self.process.api()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "PATCH /api/v1/clusters/{name} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (status, response)
    }
}

/// A loopback port that only counts the connections it accepts: where a request outside
/// the plugin's grant would have gone.
struct CountingPort {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl CountingPort {
    fn open() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { address, accepted }
    }
}

fn status(cluster: &Value) -> &str {
    cluster["status"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_plugin_probes_clusters_online_a_5xx_offline_and_is_denied_outside_its_grant()
 {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = dir.path().join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(4)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    // Client certificate inline, client certificate and key in files, a bearer token, and a
    // token file: every kind of material the context may give the plugin.
    let written = write_kubeconfigs(
        fleet.clusters(),
        &kubeconfigs,
        &KubeconfigOptions {
            shapes: ShapePlan::Mixed,
            single_file: false,
        },
    )
    .unwrap();
    let shapes: Vec<KubeconfigShape> = written.iter().map(|w| w.shape).collect();
    assert_eq!(
        shapes,
        [
            KubeconfigShape::Embedded,
            KubeconfigShape::Files,
            KubeconfigShape::Token,
            KubeconfigShape::TokenFile,
        ]
    );
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();

    let mut vigil = Vigil::start(dir.path(), &kubeconfigs).await;
    // Routed to it by `accepts` (the only plugin, and these are kubeconfig files), every
    // cluster goes ONLINE through a probe of the JavaScript plugin.
    for name in &names {
        let cluster = vigil
            .wait_for(name, "ONLINE", |c| status(c) == "ONLINE")
            .await;
        assert_eq!(cluster["last_outcome"], "healthy", "{cluster:#}");
        assert_eq!(cluster["last_probed_by"]["plugin"], NAME, "{cluster:#}");
    }
    // It asked /version, with the context's credentials (the fake server answers a
    // request it cannot authenticate with 401, which would not be healthy).
    for cluster in fleet.clusters() {
        assert!(
            !cluster.log().entries_for("/version").is_empty(),
            "{} was never asked /version",
            cluster.name()
        );
    }
    // The server's version, as the plugin read it, for each cluster it probed.
    let lines = vigil.process.log_lines();
    for name in &names {
        assert!(
            lines.iter().any(|l| {
                l["fields"]["plugin"] == NAME
                    && message(l) == format!("server version {FAKE_VERSION}")
                    && l.to_string().contains(name.as_str())
            }),
            "no `server version {FAKE_VERSION}` line for {name}:\n{}",
            vigil.process.tail()
        );
    }
    // Compiled once: this vigil loaded the component's code from the shared cache.
    assert!(
        lines
            .iter()
            .any(|l| message(l) == "compiled component loaded from the cache"),
        "the component was compiled again:\n{}",
        vigil.process.tail()
    );

    // A cluster answering 503 is unhealthy (server-error) and goes OFFLINE at the threshold.
    let down = &names[0];
    fleet.get(0).unwrap().fail_with(503).await.unwrap();
    let cluster = vigil
        .wait_for(down, "OFFLINE", |c| status(c) == "OFFLINE")
        .await;
    assert_eq!(cluster["last_outcome"], "unhealthy", "{cluster:#}");
    assert_eq!(cluster["reason_class"], "server-error", "{cluster:#}");
    assert!(
        cluster["reason"]
            .as_str()
            .is_some_and(|r| r.contains("status 503")),
        "{cluster:#}"
    );

    // Pointed by a parameter at another loopback port, which its grants do not allow: the
    // request is denied before any connection, the probe is inconclusive (the plugin's
    // doing, never the cluster's), and the cluster keeps its status with no failure.
    let other = CountingPort::open();
    let moved = &names[1];
    let (code, response) = vigil.patch(
        moved,
        &serde_json::json!({
            "plugin": NAME,
            "parameters": { "server": format!("https://{}", other.address) },
        }),
    );
    assert_eq!(code, 200, "{response}");
    let cluster = vigil
        .wait_for(moved, "denied", |c| {
            c["last_outcome"] == "inconclusive" && c["reason_class"] == "denied"
        })
        .await;
    assert_eq!(status(&cluster), "ONLINE", "{cluster:#}");
    assert_eq!(
        cluster["counters"]["consecutive_failures"], 0,
        "{cluster:#}"
    );
    assert!(
        cluster["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("{}", other.address))),
        "the reason names the destination: {cluster:#}"
    );
    // Several more probes, none of them reaching the other port.
    vigil
        .wait_for(moved, "probed again", |c| {
            c["counters"]["consecutive_inconclusive"]
                .as_u64()
                .is_some_and(|n| n >= 3)
        })
        .await;
    assert_eq!(other.accepted.load(Ordering::SeqCst), 0);
    let cluster = vigil.cluster(moved);
    assert_eq!(status(&cluster), "ONLINE", "{cluster:#}");
    assert_eq!(
        cluster["counters"]["consecutive_failures"], 0,
        "{cluster:#}"
    );

    // The others stayed healthy throughout.
    for name in &names[2..] {
        let cluster = vigil.cluster(name);
        assert_eq!(status(&cluster), "ONLINE", "{cluster:#}");
        assert_eq!(cluster["last_outcome"], "healthy", "{cluster:#}");
    }

    vigil.process.stop();
    fleet.shutdown().await;
}

/// `src` copied into `to` as a fresh clone has it: without what `npm ci` and the build
/// leave (`node_modules/`, `dist/`).
fn copy_fresh(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if name == "node_modules" || name == "dist" {
            continue;
        }
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            copy_fresh(&entry.path(), &to.join(&name));
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).expect("copy");
        }
    }
}

/// PLUGINS.md's JavaScript guide run as a new user runs it: its ```sh javascript blocks, in
/// order, in one shell, from the root of a checkout holding a fresh copy of the example
/// (the contract linked), with the built `vigil` first on `PATH`. `npm ci` installs into
/// the copy (from the user's npm cache once warm), and `vigil plugin check` must accept
/// what the guide built.
#[test]
fn every_shell_command_of_the_javascript_guide_runs_and_its_plugin_is_accepted() {
    // The guide installs componentize-js anew, as a new user does: with Node.js and npm,
    // from the npm registry or npm's cache, which a machine that installed the tool has.
    require_componentize_js();
    let root = root();
    let guide = std::fs::read_to_string(root.join("PLUGINS.md")).expect("PLUGINS.md");
    let script = crate::plugins_doc::fenced_blocks(&guide, "sh javascript").concat();
    for step in [
        "npm ci",
        "npm run build",
        "vigil plugin check dist/js-version-probe.wasm",
        "plugins.d",
    ] {
        assert!(
            script.contains(step),
            "PLUGINS.md's JavaScript guide no longer runs `{step}`:\n{script}"
        );
    }
    assert!(
        !script.contains("--aot"),
        "the guide must not build ahead of time (it downloads a compiler from outside npm)"
    );

    // A checkout and a compiled-code cache of its own, both new at every run: two builds
    // of the same sources are not byte for byte the same component, so a cache kept across
    // runs would only grow.
    let work = root.join("target").join("js-plugin-doc");
    if work.exists() {
        std::fs::remove_dir_all(&work).expect("clean the previous run");
    }
    let checkout = work.join("checkout");
    std::fs::create_dir_all(checkout.join("examples")).expect("mkdir");
    std::os::unix::fs::symlink(root.join("wit"), checkout.join("wit")).expect("symlink");
    copy_fresh(
        &root.join("examples").join("js-version-probe"),
        &checkout.join("examples").join("js-version-probe"),
    );

    let stdout = run_guide(
        "the JavaScript guide's commands",
        &script,
        &checkout,
        &work.join("cache"),
        |_| {},
    );
    assert!(stdout.contains("(accepted)"), "{stdout}");
    assert!(
        stdout.contains("name:         js-version-probe"),
        "{stdout}"
    );
    assert!(
        stdout.contains("grants:       log, credentials, http"),
        "{stdout}"
    );
    for file in ["js-version-probe.wasm", "js-version-probe.toml"] {
        assert!(
            checkout.join("plugins.d").join(file).is_file(),
            "{file} not installed"
        );
    }
}
