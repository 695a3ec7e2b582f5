//! The live plugin directory of a running `vigil serve` (replacement): files
//! dropped into, replaced in and removed from the directory while the engine probes a
//! fake fleet over TLS — no restart. A broken file never stops what works, a
//! replacement that traps is rolled back after its probation with no cluster changing
//! status, a good one is promoted and produces the next outcomes, a removed plugin
//! leaves its clusters `not-probeable` with their status and apps untouched; SIGHUP
//! and `POST /api/v1/plugins/reload` reload too; the history records each change of
//! generation.

use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use vigil::client::ApiClient;
use vigil_decision::{AppStatus, ClusterStatus, ConditionType};
use vigil_domain::probe::wall_clock;
use vigil_fake_kube::{AddressPlan, Fixtures, Fleet, KubeconfigOptions, KubeconfigShape};
use vigil_store::{ClusterRecord, Store};
use vigil_test_support::wait;

use crate::process;
use vigil_test_support as plugins;

use plugins::{install, plugin_file, plugin_variant};
use process::message;

const GRANTS: &str = "log = true\ncredentials = true\nhttp = true\n";

/// A running `vigil serve`, its database open and a client of its API.
struct Vigil {
    process: process::Vigil,
    store: Store,
    api: ApiClient,
}

impl Vigil {
    async fn start(dir: &Path, kubeconfigs: &Path, plugin_dir: &Path) -> Self {
        Self::start_with(dir, kubeconfigs, plugin_dir, &[]).await
    }

    async fn start_with(
        dir: &Path,
        kubeconfigs: &Path,
        plugin_dir: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        let process = process::serve(dir)
            .kubeconfigs(kubeconfigs)
            .plugins(plugin_dir)
            .cache(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-live-cache"))
            .policy(1, 2, 2)
            // Judged on 3 probes, the second inconclusive one fails a replacement.
            .env("VIGIL_PLUGIN_PROBATION_PROBES", "3")
            .env("VIGIL_PLUGIN_PROBATION_MAX_INCONCLUSIVE", "0.34")
            .json_log("info")
            .envs(env.iter().copied())
            .until_discovered()
            .start()
            .await;
        let store = Store::open(&format!("sqlite://{}", dir.join("vigil.db").display()))
            .await
            .unwrap();
        let api = ApiClient::new(&process.url(), None).unwrap();
        Self {
            process,
            store,
            api,
        }
    }

    async fn cluster(&self, name: &str) -> ClusterRecord {
        self.store.cluster(name).await.unwrap()
    }

    async fn plugin(&self, name: &str) -> Value {
        self.api
            .plugins()
            .await
            .unwrap()
            .into_iter()
            .find(|p| p["name"] == name)
            .unwrap_or(Value::Null)
    }

    /// Its log lines so far.
    fn log_lines(&self) -> Vec<Value> {
        self.process.log_lines()
    }

    /// Waits until `check` holds for the plugin `name` as the API lists it (`Null` when it
    /// is not listed), failing with `what`, the plugins and the log's tail.
    async fn wait(&self, what: &str, (name, check): (&str, impl Fn(&Value) -> bool)) {
        let listed = RefCell::new(Value::Null);
        wait::until_async(
            what,
            Duration::from_secs(60),
            || format!("plugins: {:#}\n{}", listed.borrow(), self.process.tail()),
            async || {
                let plugins = self.api.plugins().await.unwrap();
                let plugin = plugins
                    .iter()
                    .find(|p| p["name"] == name)
                    .cloned()
                    .unwrap_or(Value::Null);
                *listed.borrow_mut() = Value::Array(plugins);
                check(&plugin).then_some(())
            },
        )
        .await;
    }

    /// Waits until cluster `name` is `status`.
    async fn wait_status(&self, name: &str, status: ClusterStatus, within: Duration) {
        wait::until_async(
            &format!("{name} is {}", status.as_str()),
            within,
            || self.process.tail(),
            async || (self.cluster(name).await.health.status == status).then_some(()),
        )
        .await;
    }

    /// Waits for a probe of `name` that started after now, and returns the cluster then.
    async fn next_probe(&self, name: &str) -> ClusterRecord {
        let after = wall_clock();
        wait::until_async(
            &format!("{name} is probed"),
            Duration::from_secs(30),
            || self.process.tail(),
            async || {
                let cluster = self.cluster(name).await;
                cluster
                    .health
                    .last_probe
                    .is_some_and(|at| at > after)
                    .then_some(cluster)
            },
        )
        .await
    }

    /// Stops vigil with SIGTERM.
    async fn stop(self) {
        self.store.close().await;
        self.process.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_directory_is_live() {
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().unwrap();
    let kubeconfigs = temp.path().join("kube");
    fleet
        .write_kubeconfigs(&kubeconfigs, &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let names: Vec<String> = fleet
        .clusters()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let plugin_dir = temp.path().join("plugins.d");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let wasm = plugin_dir.join("kube.wasm");
    install(
        &wasm,
        &std::fs::read(plugin_file("kubeconfig-file")).unwrap(),
    );
    std::fs::write(plugin_dir.join("kube.toml"), GRANTS).unwrap();

    let mut vigil = Vigil::start(temp.path(), &kubeconfigs, &plugin_dir).await;
    for name in &names {
        vigil
            .wait_status(name, ClusterStatus::Online, Duration::from_secs(60))
            .await;
    }
    let now = wall_clock();
    vigil
        .store
        .register_app("web", &names[0], AppStatus::Deployed, now)
        .await
        .unwrap();
    let cluster = vigil.next_probe(&names[0]).await;
    assert_eq!(
        cluster
            .last_probed_by
            .as_ref()
            .map(|b| (b.plugin.as_str(), b.generation)),
        Some(("kube", 1))
    );
    let history_before = vigil
        .store
        .cluster_history(&names[0], None, 100)
        .await
        .unwrap()
        .len();

    // 1. A broken file: refused, named in the API and the log; generation 1 serves on.
    install(&wasm, b"this is text, not wasm");
    vigil
        .wait(
            "the broken candidate is named",
            ("kube", |p: &Value| {
                p["last_failure"]["stage"] == "compile" && p["last_failure"]["generation"] == 2
            }),
        )
        .await;
    let kube = vigil.plugin("kube").await;
    assert_eq!(kube["state"], "active", "{kube:#}");
    assert_eq!(kube["generation"], 1, "{kube:#}");
    assert!(
        kube["last_failure"]["file"]
            .as_str()
            .unwrap()
            .ends_with("plugins.d/kube.wasm"),
        "{kube:#}"
    );
    assert!(
        vigil.log_lines().iter().any(|l| l["level"] == "WARN"
            && message(l).contains("kube.wasm is not a WebAssembly component")),
        "the log names the failed candidate:\n{}",
        vigil.process.tail()
    );
    let cluster = vigil.next_probe(&names[0]).await;
    assert_eq!(cluster.last_outcome.as_deref(), Some("healthy"));
    assert_eq!(
        cluster.last_probed_by.as_ref().map(|b| b.generation),
        Some(1)
    );

    // 2. A replacement that traps in probe(): promoted, then rolled back after its
    // probation; no cluster changes status, no app moves.
    install(&wasm, &std::fs::read(plugin_file("panic")).unwrap());
    vigil
        .wait(
            "the trapping generation is rolled back",
            ("kube", |p: &Value| {
                p["last_failure"]["stage"] == "probation" && p["last_failure"]["generation"] == 3
            }),
        )
        .await;
    let kube = vigil.plugin("kube").await;
    assert_eq!(
        (&kube["state"], &kube["generation"]),
        (&Value::from("active"), &Value::from(1)),
        "{kube:#}"
    );
    // The guest's panic message reached the log through its stderr, tagged with the plugin.
    assert!(
        vigil
            .log_lines()
            .iter()
            .any(|l| l["fields"]["plugin"] == "kube"
                && l["fields"]["stream"] == "stderr"
                && message(l).contains("vigil test plugin: deliberate panic while probing")),
        "the log has the plugin's panic message:\n{}",
        vigil.process.tail()
    );
    let cluster = vigil.next_probe(&names[0]).await;
    assert_eq!(cluster.last_outcome.as_deref(), Some("healthy"));
    assert_eq!(
        cluster.last_probed_by.as_ref().map(|b| b.generation),
        Some(1)
    );

    // 3. A good new version: promoted as generation 4, and the next outcomes are its.
    install(&wasm, &plugin_variant("kubeconfig-file", "v4"));
    vigil
        .wait(
            "generation 4 serves",
            ("kube", |p: &Value| p["generation"] == 4),
        )
        .await;
    for name in &names {
        let mut cluster = vigil.next_probe(name).await;
        if cluster.last_probed_by.as_ref().map(|b| b.generation) != Some(4) {
            cluster = vigil.next_probe(name).await; // one started before the swap
        }
        assert_eq!(cluster.last_outcome.as_deref(), Some("healthy"), "{name}");
        assert_eq!(
            cluster.last_probed_by.as_ref().map(|b| b.generation),
            Some(4),
            "{name}"
        );
    }
    vigil
        .wait(
            "generation 4 passes its probation",
            ("kube", |p: &Value| p["state"] == "active"),
        )
        .await;

    // Through all of it, the clusters stayed ONLINE and the app DEPLOYED.
    for name in &names {
        assert_eq!(
            vigil.cluster(name).await.health.status,
            ClusterStatus::Online
        );
    }
    assert_eq!(
        vigil
            .store
            .cluster_history(&names[0], None, 100)
            .await
            .unwrap()
            .len(),
        history_before,
        "no transition, condition or failure was recorded"
    );

    // 4. SIGHUP reloads (and does not stop vigil); the API's reload answers.
    vigil.process.signal("HUP");
    vigil
        .process
        .wait_log(
            "SIGHUP reloads the plugin directory",
            Duration::from_secs(10),
            |log| {
                log.contains("SIGHUP: reloading the plugin directory")
                    .then_some(())
            },
        )
        .await;
    let reload = vigil.api.reload_plugins().await.unwrap();
    assert_eq!(
        reload["unchanged"],
        serde_json::json!(["kube"]),
        "{reload:#}"
    );

    // 5. Removed: retired; its clusters are not-probeable at their next probe, status
    // kept, the app untouched.
    std::fs::remove_file(&wasm).unwrap();
    vigil
        .wait(
            "kube retires",
            ("kube", |p: &Value| p["state"] == "retired"),
        )
        .await;
    for name in &names {
        let mut cluster = vigil.next_probe(name).await;
        if cluster.last_outcome.as_deref() != Some("not-probeable") {
            cluster = vigil.next_probe(name).await;
        }
        assert_eq!(
            cluster.last_outcome.as_deref(),
            Some("not-probeable"),
            "{name}"
        );
        assert_eq!(
            cluster.last_reason_class.as_deref(),
            Some("no-plugin"),
            "{name}"
        );
        assert_eq!(cluster.health.status, ClusterStatus::Online, "{name}");
        assert!(
            cluster
                .health
                .condition(ConditionType::NotProbeable)
                .is_some(),
            "{name}"
        );
        assert_eq!(cluster.last_probed_by, None);
    }
    let apps = vigil.store.apps_on(&names[0]).await.unwrap();
    assert_eq!(apps[0].status, AppStatus::Deployed);

    // 6. The history tells each change of the plugin's generations, in order (recorded
    // as they happen, so the last one may still be on its way).
    let seen = RefCell::new(Vec::new());
    let (events, told) = wait::until_async(
        "the retirement is in the history",
        Duration::from_secs(10),
        || format!("the history tells: {:?}", seen.borrow()),
        async || {
            let events = vigil.store.events_after(0, 10_000).await.unwrap();
            let told: Vec<(String, Value)> = events
                .iter()
                .filter(|e| e.kind.starts_with("plugin-"))
                .map(|e| (e.kind.clone(), serde_json::from_str(&e.detail).unwrap()))
                .collect();
            if told.iter().any(|(kind, _)| kind == "plugin-retired") {
                return Some((events, told));
            }
            *seen.borrow_mut() = told;
            None
        },
    )
    .await;
    assert!(
        events
            .iter()
            .any(|e| e.kind == "plugins-reloaded" && e.cluster_name.is_none()),
        "the API's reload is recorded too"
    );
    let summary: Vec<(&str, u64)> = told
        .iter()
        .map(|(kind, detail)| (kind.as_str(), detail["generation"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            ("plugin-refused", 2),
            ("plugin-promoted", 3),
            ("plugin-rolled-back", 3),
            ("plugin-promoted", 4),
            ("plugin-probation-passed", 4),
            ("plugin-retired", 4),
        ],
        "{told:#?}"
    );
    assert_eq!(told[0].1["stage"], "compile", "{told:#?}");
    assert_eq!(told[2].1["restored"], 1, "{told:#?}");
    assert!(
        told.iter().all(|(_, detail)| detail["plugin"] == "kube"),
        "{told:#?}"
    );
    // And the metrics count them, for an alert on a rollback.
    let (status, scrape) = send(&vigil.api, "GET", "/metrics", None).await;
    assert_eq!(status, 200, "{scrape}");
    for (change, count) in [
        ("promoted", 2),
        ("refused", 1),
        ("rolled-back", 1),
        ("probation-passed", 1),
        ("retired", 1),
    ] {
        let series = format!(
            r#"vigil_plugin_generation_changes_total{{plugin="kube",change="{change}"}} {count}"#
        );
        assert!(scrape.contains(&series), "{series} in:\n{scrape}");
    }

    vigil.stop().await;
}

/// `POST path` with a JSON body to vigil's API (no token: loopback, no token set).
/// One request to the API over a fresh connection: the status and the whole answer.
async fn send(api: &ApiClient, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = api.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

async fn post(api: &ApiClient, path: &str, body: &Value) -> (u16, String) {
    send(api, "POST", path, Some(body)).await
}

/// The drop-in promise: a cluster no plugin can probe becomes probeable when the right
/// plugin file is dropped into the directory of a running vigil.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_kube_secret_in_makes_a_secret_cluster_probeable_without_restart() {
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let [management, target] = fleet.clusters() else {
        panic!("two clusters");
    };
    let temp = tempfile::tempdir().unwrap();
    let secret = |key: &str, value: &str| {
        std::collections::BTreeMap::from([(key.to_owned(), value.as_bytes().to_vec())])
    };
    let kubeconfig = target.kubeconfig(KubeconfigShape::Embedded).unwrap();
    let mut fixtures = Fixtures::empty();
    fixtures.insert_secret("vigil", "remote", secret("kubeconfig", &kubeconfig));
    fixtures.insert_secret(
        "vigil",
        "bad",
        secret("kubeconfig", "clusters: {not: a list}\n"),
    );
    fixtures.insert_secret("other", "remote", secret("kubeconfig", &kubeconfig));
    management.set_fixtures(fixtures);
    let management_file = temp.path().join("management.yaml");
    std::fs::write(
        &management_file,
        management.kubeconfig(KubeconfigShape::Token).unwrap(),
    )
    .unwrap();

    // No discovered cluster; the plugin directory holds the kubeconfig-file plugin only.
    let kubeconfigs = temp.path().join("kube");
    std::fs::create_dir_all(&kubeconfigs).unwrap();
    let plugin_dir = temp.path().join("plugins.d");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    install(
        &plugin_dir.join("kubeconfig-file.wasm"),
        &std::fs::read(plugin_file("kubeconfig-file")).unwrap(),
    );
    std::fs::write(plugin_dir.join("kubeconfig-file.toml"), GRANTS).unwrap();
    let management_path = management_file.display().to_string();
    let vigil = Vigil::start_with(
        temp.path(),
        &kubeconfigs,
        &plugin_dir,
        &[("VIGIL_MANAGEMENT_KUBECONFIG", management_path.as_str())],
    )
    .await;

    for (name, reference) in [
        ("remote", "secret://vigil/remote?key=kubeconfig"),
        ("broken", "secret://vigil/bad"),
        ("elsewhere", "secret://other/remote"),
    ] {
        let (status, answer) = post(
            &vigil.api,
            "/api/v1/clusters",
            &serde_json::json!({
                "name": name,
                "endpoint": target.server_url(),
                "kubeconfig_secret_ref": reference,
            }),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
    }
    let now = wall_clock();
    vigil
        .store
        .register_app("shop", "broken", AppStatus::Deployed, now)
        .await
        .unwrap();
    let remote = vigil.next_probe("remote").await;
    assert_eq!(remote.health.status, ClusterStatus::Unknown);
    assert_eq!(remote.last_outcome.as_deref(), Some("not-probeable"));
    assert_eq!(remote.last_reason_class.as_deref(), Some("no-plugin"));
    assert!(target.log().entries_for("/api/v1/namespaces").is_empty());

    // Dropped in, with a grant for the namespace `vigil` only.
    std::fs::write(
        plugin_dir.join("kube-secret.toml"),
        format!("{GRANTS}secret-namespaces = [\"vigil\"]\n"),
    )
    .unwrap();
    install(
        &plugin_dir.join("kube-secret.wasm"),
        &std::fs::read(plugin_file("kube-secret")).unwrap(),
    );
    vigil
        .wait_status("remote", ClusterStatus::Online, Duration::from_secs(60))
        .await;
    let remote = vigil.cluster("remote").await;
    assert_eq!(
        remote.last_probed_by.as_ref().map(|b| b.plugin.as_str()),
        Some("kube-secret")
    );
    // The API shows what the plugin may reach, as its NAME.toml grants it.
    let listed = vigil.plugin("kube-secret").await;
    assert_eq!(
        listed["grants"],
        json!(["log", "credentials", "http"]),
        "{listed:#}"
    );
    assert_eq!(listed["secret_namespaces"], json!(["vigil"]), "{listed:#}");
    assert_eq!(listed["allowed_hosts"], json!([]), "{listed:#}");
    assert_eq!(listed["memory_mib"], 64, "{listed:#}");
    assert!(
        !target.log().entries_for("/api/v1/namespaces").is_empty(),
        "probed through the kubeconfig held by the Secret"
    );
    assert!(
        !management
            .log()
            .entries_for("/api/v1/namespaces/vigil/secrets/remote")
            .is_empty()
    );

    // A Secret holding a bad kubeconfig: reference-broken, status kept, nothing degraded.
    let broken = vigil.next_probe("broken").await;
    let broken = if broken.last_probed_by.is_none() {
        vigil.next_probe("broken").await
    } else {
        broken
    };
    assert_eq!(
        broken.last_outcome.as_deref(),
        Some("not-probeable"),
        "{broken:?}"
    );
    assert_eq!(
        broken.last_reason_class.as_deref(),
        Some("reference-broken")
    );
    assert_eq!(broken.health.status, ClusterStatus::Unknown);
    assert_eq!(
        vigil.store.apps_on("broken").await.unwrap()[0].status,
        AppStatus::Deployed
    );
    // A namespace the plugin is not granted: refused, never read, never a failure.
    let elsewhere = vigil.next_probe("elsewhere").await;
    assert_eq!(elsewhere.last_outcome.as_deref(), Some("inconclusive"));
    assert_eq!(elsewhere.last_reason_class.as_deref(), Some("denied"));
    assert_eq!(elsewhere.health.status, ClusterStatus::Unknown);
    assert!(
        management
            .log()
            .entries_for("/api/v1/namespaces/other/secrets/remote")
            .is_empty()
    );

    vigil.stop().await;
}
