//! The first-party plugins built into the `vigil` binary: with no plugin directory at all
//! they probe a fake cluster ONLINE; a file of the plugin directory overrides one of them
//! and removing it brings the embedded one back; `VIGIL_PLUGINS_EMBEDDED=false` turns them
//! off; `vigil --version` names them with the digests of the built files.
//!
//! [`embedded_plugins_serve`] is shared with install.rs, which runs it on the binary that
//! `cargo install` gives.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use vigil_fake_kube::{AddressPlan, Fleet, KubeconfigOptions};
use vigil_test_support as plugins;
use vigil_test_support::serve::Serve;
use vigil_test_support::wait;

use crate::process::{self, vigil};

/// The API token of the servers these tests start.
const TOKEN: &str = "embedded-test-token-0123456789ab";

/// The plugins built into vigil.
const EMBEDDED: [&str; 4] = ["http", "kube-secret", "kubeconfig-file", "pdb-audit"];

/// A running `vigil serve` and where it answers.
struct Server {
    process: process::Vigil,
    address: SocketAddr,
}

impl Server {
    /// `vigil serve` from `program`, in `dir`, discovering `kubeconfigs`, with the plugin
    /// directory `dir/plugins.d` (which does not exist unless the caller made it).
    async fn start(program: &Path, dir: &Path, kubeconfigs: &Path, embedded: bool) -> Self {
        let process = Serve::new(program, dir)
            .env("VIGIL_PLUGINS_EMBEDDED", embedded.to_string())
            .kubeconfigs(kubeconfigs)
            .plugins(dir.join("plugins.d"))
            .cache(dir.join("cache"))
            .env("VIGIL_API_TOKEN", TOKEN)
            .env("CLUSTER_HEALTH_INTERVAL", "1")
            .env("CLUSTER_HEALTH_TIMEOUT", "5")
            .start()
            .await;
        let address = process.api();
        Self { process, address }
    }

    fn get(&self, path: &str) -> Value {
        request(self.address, "GET", path)
    }

    fn plugins(&self) -> Vec<Value> {
        self.get("/api/v1/plugins").as_array().unwrap().clone()
    }

    fn plugin(&self, name: &str) -> Value {
        self.plugins()
            .into_iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no plugin {name}: {:?}", self.plugins()))
    }

    fn reload(&self) -> Value {
        request(self.address, "POST", "/api/v1/plugins/reload")
    }

    /// Waits until `check` holds for the API's view of `cluster`, and returns that view.
    /// The view is `Null` until discovery has run (the cluster is not found before).
    async fn wait_cluster(
        &mut self,
        cluster: &str,
        what: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let address = self.address;
        let last = std::cell::RefCell::new(Value::Null);
        let log = self.process.log_path().to_owned();
        let running = &mut self.process;
        wait::until_async(
            &format!("{cluster} is {what}"),
            within,
            || {
                format!(
                    "{cluster} is now {}\n{}",
                    last.borrow(),
                    process::tail(&log)
                )
            },
            async || {
                if let Some(status) = running.try_wait() {
                    panic!("vigil serve exited with {status}:\n{}", running.tail());
                }
                let view = try_request(address, "GET", &format!("/api/v1/clusters/{cluster}"))
                    .unwrap_or_default();
                let done = check(&view);
                *last.borrow_mut() = view.clone();
                done.then_some(view)
            },
        )
        .await
    }

    /// Waits until `cluster` is ONLINE, last probed by generation `generation` of the
    /// `kubeconfig-file` plugin.
    async fn wait_probed_online(&mut self, cluster: &str, generation: u64) {
        self.wait_cluster(
            cluster,
            &format!("ONLINE by kubeconfig-file generation {generation}"),
            Duration::from_secs(120),
            |view| {
                view["status"] == "ONLINE"
                    && view["last_probed_by"]["plugin"] == "kubeconfig-file"
                    && view["last_probed_by"]["generation"] == generation
            },
        )
        .await;
    }

    fn stop(self) {
        self.process.stop();
    }
}

/// One fake cluster on loopback and a kubeconfig directory that names it.
async fn one_cluster(dir: &Path) -> (Fleet, PathBuf, String) {
    let kubeconfigs = dir.join("kubeconfigs");
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .unwrap();
    fleet
        .write_kubeconfigs(&kubeconfigs, &KubeconfigOptions::default())
        .unwrap();
    let name = fleet.clusters()[0].name().to_owned();
    (fleet, kubeconfigs, name)
}

/// What a user of an installed `vigil` sees: the embedded plugins probe a cluster ONLINE
/// with no plugin directory anywhere, and are listed with their source; a
/// `kubeconfig-file.wasm` dropped into the plugin directory overrides the embedded one (a
/// new generation, its file as source), and removing it brings the embedded one back.
pub async fn embedded_plugins_serve(program: &Path) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let (_fleet, kubeconfigs, cluster) = one_cluster(dir).await;
    let plugin_dir = dir.join("plugins.d");
    assert!(!plugin_dir.exists());

    let mut server = Server::start(program, dir, &kubeconfigs, true).await;
    server.wait_probed_online(&cluster, 1).await;
    every_metric_of_the_alert_rules_is_exported(&server);
    let listed = server.plugins();
    let names: Vec<&str> = listed.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names.len(), EMBEDDED.len(), "{listed:#?}");
    for name in EMBEDDED {
        let plugin = server.plugin(name);
        assert_eq!(plugin["source"], "embedded", "{plugin}");
        assert_eq!(plugin["state"], "active", "{plugin}");
        assert_eq!(plugin["generation"], 1, "{plugin}");
    }

    // The same plugin as a file of the directory: a new generation, served from the file.
    std::fs::create_dir_all(&plugin_dir).unwrap();
    for file in ["kubeconfig-file.toml", "kubeconfig-file.wasm"] {
        std::fs::copy(plugins::first_party_dir().join(file), plugin_dir.join(file)).unwrap();
    }
    let reloaded = server.reload();
    assert_eq!(
        reloaded["promoted"],
        serde_json::json!([{"plugin": "kubeconfig-file", "generation": 2}]),
        "{reloaded}"
    );
    let overriding = server.plugin("kubeconfig-file");
    let file = plugin_dir.join("kubeconfig-file.wasm");
    assert_eq!(
        overriding["source"],
        file.display().to_string(),
        "{overriding}"
    );
    assert_eq!(overriding["generation"], 2, "{overriding}");
    assert_eq!(server.plugin("http")["source"], "embedded");
    server.wait_probed_online(&cluster, 2).await;
    let log = server.process.log();
    assert!(
        log.lines().any(|l| l.contains("plugin generation promoted")
            && l.contains("kubeconfig-file")
            && l.contains("overrides_embedded=true")),
        "the override is logged:\n{log}"
    );

    // The file removed: the embedded plugin serves again.
    for file in ["kubeconfig-file.wasm", "kubeconfig-file.toml"] {
        std::fs::remove_file(plugin_dir.join(file)).unwrap();
    }
    let reloaded = server.reload();
    assert_eq!(
        reloaded["promoted"],
        serde_json::json!([{"plugin": "kubeconfig-file", "generation": 3}]),
        "{reloaded}"
    );
    let back = server.plugin("kubeconfig-file");
    assert_eq!(back["source"], "embedded", "{back}");
    assert_eq!(back["generation"], 3, "{back}");
    server.wait_probed_online(&cluster, 3).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_plugins_serve_without_a_plugin_directory_and_a_file_overrides_one() {
    embedded_plugins_serve(process::binary()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_plugins_can_be_turned_off() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let (_fleet, kubeconfigs, cluster) = one_cluster(dir).await;
    std::fs::create_dir_all(dir.join("plugins.d")).unwrap();
    let mut server = Server::start(process::binary(), dir, &kubeconfigs, false).await;
    // Discovered, but with no plugin nothing can probe it.
    let view = server
        .wait_cluster(&cluster, "probed", Duration::from_secs(60), |view| {
            view["last_probe"].is_string()
        })
        .await;
    assert_eq!(server.plugins(), Vec::<Value>::new());
    assert_eq!(view["last_outcome"], "not-probeable", "{view}");
    assert_ne!(view["status"], "ONLINE", "{view}");
    server.stop();
}

/// `vigil --version -o json` names the contract and the embedded plugins, whose digests
/// are those of the files the build made.
#[test]
fn the_version_names_the_contract_and_the_embedded_plugins_digests() {
    let temp = tempfile::tempdir().unwrap();
    let output = vigil(temp.path())
        .args(["--version", "-o", "json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let version: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        version["contracts"],
        serde_json::json!(["vigil:plugin@0.1.0"])
    );
    assert!(
        version["build_date"].as_str().unwrap().ends_with('Z'),
        "{version}"
    );
    assert!(!version["commit"].as_str().unwrap().is_empty(), "{version}");
    let embedded = version["embedded_plugins"].as_array().unwrap();
    let names: Vec<&str> = embedded.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, EMBEDDED);
    for plugin in embedded {
        let name = plugin["name"].as_str().unwrap();
        let built = plugins::first_party_dir().join(format!("{name}.wasm"));
        assert_eq!(
            plugin["sha256"].as_str().unwrap(),
            sha256_of(&built),
            "{name}: the embedded component is the built file"
        );
    }

    let text = vigil(temp.path()).arg("--version").output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.starts_with(&format!("vigil {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("vigil:plugin@0.1.0"), "{text}");
}

/// Every `vigil_…` metric that deploy/prometheus/vigil-rules.yaml names is a series (or a
/// family) of the live `/metrics` of a vigil that probes with its plugins: an alert on a
/// metric vigil does not export would never fire.
fn every_metric_of_the_alert_rules_is_exported(server: &Server) {
    let rules_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/vigil-rules.yaml");
    let rules = std::fs::read_to_string(&rules_file).unwrap();
    let named: std::collections::BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("vigil_"))
        .collect();
    assert!(
        named.len() >= 5,
        "the rules name too few metrics: {named:?}"
    );
    let metrics = exchange(server.address, "GET", "/metrics").unwrap();
    let exported: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(family) => family.split_whitespace().next(),
            None if !line.starts_with('#') => line.split(['{', ' ']).next(),
            None => None,
        })
        .collect();
    let missing: Vec<&&str> = named
        .iter()
        .filter(|name| !exported.contains(**name))
        .collect();
    assert!(
        missing.is_empty(),
        "the alert rules name metrics that /metrics does not export: {missing:?}\n{metrics}"
    );
}

/// The sha256 of a file, hex, by the system's `sha256sum`.
fn sha256_of(path: &Path) -> String {
    let output = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    assert!(output.status.success(), "sha256sum {}", path.display());
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// A plain HTTP/1.1 request with the token on loopback; the JSON body (`null` when empty).
fn request(address: SocketAddr, method: &str, path: &str) -> Value {
    try_request(address, method, path).unwrap_or_else(|failed| panic!("{failed}"))
}

/// [`request`], or what it answered when that is not a success.
fn try_request(address: SocketAddr, method: &str, path: &str) -> Result<Value, String> {
    let body = exchange(address, method, path)?;
    if body.is_empty() {
        Ok(Value::Null)
    } else {
        serde_json::from_str(&body).map_err(|e| format!("{method} {path}: {e}: {body}"))
    }
}

/// A plain HTTP/1.1 request with the token on loopback: the body of a success, or what
/// was answered instead.
fn exchange(address: SocketAddr, method: &str, path: &str) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_default();
    if head.starts_with("HTTP/1.1 2") {
        Ok(body.to_owned())
    } else {
        Err(format!("{method} {path}: {head}\n{body}"))
    }
}
