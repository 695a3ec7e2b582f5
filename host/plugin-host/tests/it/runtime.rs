//! The plugin runtime running real `.wasm` plugins: the first-party `kubeconfig-file`
//! plugin as the positive control, and the hostile test plugins of `tests/plugins/`
//! (built by cargo for the tests, see `vigil-test-support`), against fake API
//! servers on loopback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::{self, Reference, Resolution};
use vigil_fake_kube::{
    AddressPlan, AuthUsed, Fleet, HangPoint, KubeconfigOptions, WrittenKubeconfig,
};
use vigil_plugin_host::{
    CacheStatus, LoadReport, PluginRuntime, Refusal, RuntimeSettings, TICKER_LINGER,
};

/// The workspace root.
use vigil_test_support::plugin_file;
use vigil_test_support::wait::until_async_true;

/// Grants for the test plugins.
const ALL_GRANTS: &str = "log = true\ncredentials = true\nhttp = true\n";

/// Grants for the first-party plugin, ahead of the test plugins (which accept
/// everything) in routing.
const CONTROL_GRANTS: &str = "log = true\ncredentials = true\nhttp = true\npriority = 10\n";

/// A plugin directory holding `plugins` (name, NAME.toml text).
fn plugin_dir(dir: &Path, plugins: &[(&str, &str)]) -> PathBuf {
    let plugins_dir = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins_dir).expect("create the plugin dir");
    for (name, manifest) in plugins {
        std::fs::copy(plugin_file(name), plugins_dir.join(format!("{name}.wasm")))
            .expect("copy the plugin");
        std::fs::write(plugins_dir.join(format!("{name}.toml")), manifest)
            .expect("write the manifest");
    }
    plugins_dir
}

async fn load(plugin_dir: &Path, cache_dir: Option<&Path>) -> (PluginRuntime, LoadReport) {
    load_with(plugin_dir, cache_dir, Vec::new()).await
}

async fn load_with(
    plugin_dir: &Path,
    cache_dir: Option<&Path>,
    credential_dirs: Vec<PathBuf>,
) -> (PluginRuntime, LoadReport) {
    PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugin_dir.to_path_buf(),
        cache_dir: cache_dir.map(Path::to_path_buf),
        concurrency: 4,
        credential_dirs,
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts")
}

/// The probe target of a written kubeconfig, resolved by the host as the worker does.
fn target(
    written: &WrittenKubeconfig,
    endpoint: &str,
    plugin: Option<&str>,
    timeout: Duration,
) -> ProbeTarget {
    let reference = Reference::parse(&format!("{}#{}", written.path.display(), written.context))
        .expect("reference");
    let connection = match reference::resolve(&reference) {
        Resolution::Connection(material) => Some(material),
        other => panic!("the test kubeconfig does not resolve: {other}"),
    };
    ProbeTarget {
        cluster: ClusterId(1),
        name: written.cluster.clone(),
        endpoint: endpoint.to_owned(),
        reference,
        connection,
        plugin: plugin.map(str::to_owned),
        timeout,
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    }
}

/// A cluster `c` whose kubeconfig file does not exist, sent to `plugin`: for plugins that
/// answer without reading it.
fn unread_target(plugin: &str) -> ProbeTarget {
    ProbeTarget {
        cluster: ClusterId(1),
        name: "c".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("/nonexistent/kubeconfig#c").expect("reference"),
        connection: None,
        plugin: Some(plugin.to_owned()),
        timeout: Duration::from_secs(5),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    }
}

fn assert_fault(outcome: &ProbeOutcome, needle: &str) {
    match outcome {
        ProbeOutcome::Inconclusive {
            class: ReasonClass::PluginFault,
            message,
        } => assert!(
            message.contains(needle),
            "expected {needle:?} in the message, got {message:?}"
        ),
        other => panic!("expected inconclusive(plugin-fault), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_refused_by_name_and_good_ones_load_and_cache() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(
        temp.path(),
        &[
            ("kubeconfig-file", ALL_GRANTS),
            ("wrong-world", ""),
            ("future-version", ""),
            ("trap-info", ""),
            ("long-info", ""),
        ],
    );
    std::fs::write(dir.join("not-a-component.wasm"), b"this is text, not wasm").expect("write");
    let good = std::fs::read(plugin_file("kubeconfig-file")).expect("read");
    std::fs::write(dir.join("truncated.wasm"), &good[..good.len() / 2]).expect("write");
    std::fs::write(dir.join("bad-manifest.wasm"), &good).expect("write");
    std::fs::write(dir.join("bad-manifest.toml"), "shell = true\n").expect("write");
    let cache = temp.path().join("cache");

    let (runtime, report) = load(&dir, Some(&cache)).await;
    let loaded: Vec<&str> = report.loaded.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(loaded, ["kubeconfig-file"], "{report:#?}");
    assert_eq!(report.loaded[0].cache, CacheStatus::Miss);
    assert_eq!(runtime.plugins().len(), 1);

    let refusal = |file: &str| {
        report
            .refused
            .iter()
            .find(|r| r.origin == vigil_plugin_host::PluginSource::File(dir.join(file)))
            .unwrap_or_else(|| panic!("{file} was not refused: {report:#?}"))
            .clone()
    };
    assert_eq!(refusal("not-a-component.wasm").reason, Refusal::NotWasm);
    assert!(matches!(
        refusal("truncated.wasm").reason,
        Refusal::Invalid(_)
    ));
    assert!(matches!(
        refusal("wrong-world.wasm").reason,
        Refusal::WrongWorld { .. }
    ));
    assert!(matches!(refusal("trap-info.wasm").reason, Refusal::Info(_)));
    assert_eq!(
        refusal("long-info.wasm").reason,
        Refusal::Info("name or version longer than 256 bytes".to_owned())
    );
    assert!(matches!(
        refusal("bad-manifest.wasm").reason,
        Refusal::Manifest(_)
    ));
    let future = refusal("future-version.wasm");
    assert_eq!(
        future.reason,
        Refusal::UnsupportedVersion {
            package: "vigil:plugin".to_owned(),
            version: "0.9.0".to_owned()
        }
    );
    let text = future.to_string();
    assert!(
        text.contains("future-version.wasm") && text.contains("0.9.0"),
        "{text}"
    );
    drop(runtime);

    let (_runtime, again) = load(&dir, Some(&cache)).await;
    assert_eq!(again.loaded[0].cache, CacheStatus::Hit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_are_inconclusive_next_to_a_healthy_control() {
    let fleet = Fleet::builder()
        .clusters(2)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let own = &kubeconfigs[0];
    let sibling_name = kubeconfigs[1]
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name")
        .to_owned();
    let cluster = &fleet.clusters()[0];
    let other = &fleet.clusters()[1];
    let endpoint = cluster.server_url();

    let sibling_toml = format!("{ALL_GRANTS}[parameters]\nsibling = \"{sibling_name}\"\n");
    let egress_toml = format!(
        "{ALL_GRANTS}[parameters]\nforeign-url = \"{}/api\"\n",
        other.server_url()
    );
    let dir = plugin_dir(
        temp.path(),
        &[
            ("kubeconfig-file", CONTROL_GRANTS),
            ("loop", ALL_GRANTS),
            ("alloc", ALL_GRANTS),
            ("panic", ALL_GRANTS),
            ("malformed", ALL_GRANTS),
            ("liar", ALL_GRANTS),
            ("sibling", sibling_toml.as_str()),
            ("egress", egress_toml.as_str()),
        ],
    );
    let (runtime, report) = load(&dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");

    let timeout = Duration::from_millis(800);
    let probe = |plugin: &str| {
        let target = target(own, &endpoint, Some(plugin), timeout);
        let runtime = runtime.clone();
        async move {
            let started = Instant::now();
            let outcome = runtime.probe(&target).await;
            (outcome, started.elapsed())
        }
    };

    // The positive control: the first-party plugin, routed by `accepts`, is healthy.
    let routed = target(own, &endpoint, None, timeout);
    assert_eq!(runtime.probe(&routed).await, ProbeOutcome::Healthy);
    assert!(!cluster.log().entries_for("/api/v1/namespaces").is_empty());

    let (outcome, elapsed) = probe("loop").await;
    assert_fault(&outcome, "deadline");
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(1),
        "{elapsed:?}"
    );

    let (outcome, _) = probe("alloc").await;
    assert_fault(&outcome, "memory limit of 64 MiB");

    let (outcome, _) = probe("panic").await;
    assert_fault(&outcome, "trapped");

    let (outcome, _) = probe("malformed").await;
    assert_fault(&outcome, "malformed");

    let (outcome, _) = probe("liar").await;
    assert_fault(&outcome, "without a request to the cluster");

    // The sibling plugin answers healthy only when its own kubeconfig was readable and
    // every read of the sibling was denied.
    let (outcome, _) = probe("sibling").await;
    assert_eq!(outcome, ProbeOutcome::Healthy);

    // The egress plugin answers healthy only when the foreign request was denied and
    // the cluster's own endpoint was reached.
    let before = other.log().count();
    let (outcome, _) = probe("egress").await;
    assert_eq!(outcome, ProbeOutcome::Healthy);
    assert_eq!(
        other.log().count(),
        before,
        "the foreign cluster was reached"
    );

    let stats = runtime.stats("loop").expect("loop is loaded");
    assert_eq!((stats.probes, stats.faults), (1, 1));
    let stats = runtime.stats("kubeconfig-file").expect("loaded");
    assert_eq!(stats.faults, 0);

    // The control still works after all of it.
    assert_eq!(probe("kubeconfig-file").await.0, ProbeOutcome::Healthy);
}

/// Waits until the runtime is at rest: no call for [`TICKER_LINGER`], its epoch ticker
/// asleep.
async fn until_idle(runtime: &PluginRuntime) {
    until_async_true(
        "the runtime comes to rest",
        TICKER_LINGER + Duration::from_secs(5),
        async || runtime.is_idle(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_started_while_the_runtime_was_at_rest_is_still_interrupted() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(temp.path(), &[("loop", ALL_GRANTS), ("noop", ALL_GRANTS)]);
    let (runtime, report) = load(&dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");

    // After loading (each plugin's info() is a call) the runtime comes to rest.
    until_idle(&runtime).await;

    // A CPU deadline only passes while the epoch advances: a loop started now must wake
    // the ticker. Were it left asleep, the guest would neither yield nor trap and the probe
    // would never end, so the probe runs in a task of its own and the test process exits
    // with a failure instead of hanging.
    let mut looping = unread_target("loop");
    looping.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let probe = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.probe(&looping).await }
    });
    let Ok(joined) = tokio::time::timeout(Duration::from_secs(10), probe).await else {
        // Straight to stderr: the harness's capture would lose a message printed now.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"the loop was never interrupted: the epoch ticker slept through the call\n",
        );
        std::process::exit(101);
    };
    assert_fault(&joined.expect("the probe task"), "deadline");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!runtime.is_idle(), "at rest right after a call");

    // The control: at rest again, a well-behaved plugin answers as before.
    until_idle(&runtime).await;
    assert_eq!(
        runtime.probe(&unread_target("noop")).await,
        ProbeOutcome::Healthy
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_call_held_past_the_budget_is_bounded_and_attributed_to_the_cluster() {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();
    let dir = plugin_dir(
        temp.path(),
        &[("kubeconfig-file", ALL_GRANTS), ("stall", ALL_GRANTS)],
    );
    let (runtime, _) = load(&dir, None).await;
    let timeout = Duration::from_millis(700);

    // Control: the stall plugin against an answering server gets an answer.
    let control = target(&kubeconfigs[0], &endpoint, Some("kubeconfig-file"), timeout);
    assert_eq!(runtime.probe(&control).await, ProbeOutcome::Healthy);

    cluster.hang(HangPoint::Request).await.expect("hang");
    let stalled = target(&kubeconfigs[0], &endpoint, Some("stall"), timeout);
    let started = Instant::now();
    let outcome = runtime.probe(&stalled).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(
            outcome,
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(
        elapsed < timeout + Duration::from_millis(500),
        "{elapsed:?}"
    );

    // The first-party plugin against the hanging cluster: a cluster timeout too.
    let outcome = runtime.probe(&control).await;
    assert!(
        matches!(
            outcome,
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                ..
            }
        ),
        "{outcome:?}"
    );
    cluster.come_back().await.expect("come back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_no_plugin_accepts_is_not_probeable() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(temp.path(), &[("kubeconfig-file", ALL_GRANTS)]);
    let (runtime, _) = load(&dir, None).await;
    let target = ProbeTarget {
        cluster: ClusterId(7),
        name: "web".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference: Reference::parse("https://127.0.0.1:9/healthz").expect("reference"),
        connection: None,
        plugin: None,
        timeout: Duration::from_millis(500),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    };
    match runtime.probe(&target).await {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            ..
        } => {}
        other => panic!("expected not-probeable(no-plugin), got {other:?}"),
    }
    let unknown = ProbeTarget {
        plugin: Some("nope".to_owned()),
        ..target
    };
    assert!(matches!(
        runtime.probe(&unknown).await,
        ProbeOutcome::NotProbeable {
            class: ReasonClass::NoPlugin,
            ..
        }
    ));
}

/// `credentials.context` serves the host's resolution of a file reference to a plugin
/// granted `credentials`, and only to it: without the grant it is `denied`, and for a file
/// reference the host could not resolve it is `not-found` (the `context-agrees` plugin
/// quotes the host's message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolved_context_is_served_only_with_the_credentials_grant() {
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfig = temp.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:9\n    tls-server-name: api.test\nusers:\n- name: u\n  user:\n    token: context-test-token\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n",
    )
    .expect("write the kubeconfig");
    let reference = Reference::parse(&format!("{}#c", kubeconfig.display())).expect("reference");
    let Resolution::Connection(material) = reference::resolve(&reference) else {
        panic!("the test kubeconfig does not resolve");
    };
    let target = ProbeTarget {
        cluster: ClusterId(1),
        name: "c".to_owned(),
        endpoint: "https://127.0.0.1:9".to_owned(),
        reference,
        connection: Some(material),
        plugin: Some("context-agrees".to_owned()),
        timeout: Duration::from_secs(2),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    };
    let not_probeable = |outcome: ProbeOutcome, needle: &str| match outcome {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message,
        } => assert!(message.contains(needle), "{needle:?} not in {message:?}"),
        other => panic!("expected not-probeable, got {other:?}"),
    };

    let granted = plugin_dir(
        &temp.path().join("granted"),
        &[("context-agrees", "credentials = true\n")],
    );
    let (runtime, _) = load(&granted, None).await;
    assert_eq!(runtime.probe(&target).await, ProbeOutcome::Healthy);
    let unresolved = ProbeTarget {
        connection: None,
        ..target.clone()
    };
    not_probeable(
        runtime.probe(&unresolved).await,
        "credentials.context failed: the kubeconfig",
    );

    let ungranted = plugin_dir(&temp.path().join("ungranted"), &[("context-agrees", "")]);
    let (runtime, _) = load(&ungranted, None).await;
    not_probeable(
        runtime.probe(&target).await,
        "credentials.context failed: credentials are not granted",
    );
}

/// A loopback listener that counts the connections it is offered and answers each
/// request with `200 ok` (a plain HTTP server, for hosts outside the cluster).
struct PlainServer {
    url: String,
    port: u16,
    connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PlainServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0_u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        Self {
            url: format!("http://127.0.0.1:{port}/health"),
            port,
            connections,
            task,
        }
    }

    fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for PlainServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_http_requests_meet_the_same_egress_policy_next_to_a_healthy_control() {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();

    // The cluster's bearer token, as a credential parameter in a credential directory;
    // the same token in a directory that is not one.
    let credentials = temp.path().join("credentials");
    let outside = temp.path().join("outside");
    for dir in [&credentials, &outside] {
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(dir.join("token"), format!("{}\n", cluster.admin_token())).expect("write");
    }
    let token = format!("file://{}", credentials.join("token").display());
    let outside_token = format!("file://{}", outside.join("token").display());

    let foreign = PlainServer::start().await;
    let extra = PlainServer::start().await;
    // The manifest's defaults: the URLs, and a mode the cluster's own parameter overrides.
    // The token file may go to the cluster's server only (`credential-hosts`).
    let manifest = format!(
        "{ALL_GRANTS}allowed-hosts = [\"127.0.0.1:{}\"]\n[parameters]\nmode = \"extra-only\"\nforeign-url = \"{}\"\nextra-url = \"{}\"\n[credential-hosts]\n\"{}\" = [\"{}\"]\n",
        extra.port,
        foreign.url,
        extra.url,
        credentials.display(),
        endpoint.trim_start_matches("https://")
    );
    let dir = plugin_dir(
        temp.path(),
        &[
            ("kubeconfig-file", CONTROL_GRANTS),
            ("wasi-http", manifest.as_str()),
        ],
    );
    let (runtime, report) = load_with(&dir, None, vec![credentials.clone()]).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    let timeout = Duration::from_millis(800);
    let wasi = |parameters: &[(&str, &str)]| {
        let mut target = target(&kubeconfigs[0], &endpoint, Some("wasi-http"), timeout);
        target.parameters = params(parameters);
        target
    };
    let version_requests = || {
        cluster
            .log()
            .entries_for("/version")
            .into_iter()
            .filter(|entry| {
                matches!(entry.auth, AuthUsed::Token { .. }) && entry.status == Some(200)
            })
            .count()
    };

    // The positive control.
    let control = target(&kubeconfigs[0], &endpoint, None, timeout);
    assert_eq!(runtime.probe(&control).await, ProbeOutcome::Healthy);

    // Healthy only when the foreign request was denied, the cluster answered 200 over TLS
    // (verified with the kubeconfig's CA) to the token read through
    // `credentials.parameter`, and the extra host answered.
    let outcome = runtime
        .probe(&wasi(&[("mode", "policy"), ("token", &token)]))
        .await;
    assert_eq!(outcome, ProbeOutcome::Healthy);
    assert_eq!(
        version_requests(),
        1,
        "the cluster saw the wasi:http request"
    );
    assert_eq!(extra.connections(), 1, "the extra host saw the request");
    assert_eq!(foreign.connections(), 0, "the foreign host was reached");

    // A credential parameter outside the credential directories is refused, and the
    // plugin says so instead of probing.
    let outcome = runtime
        .probe(&wasi(&[("mode", "probe"), ("token", &outside_token)]))
        .await;
    match &outcome {
        ProbeOutcome::Inconclusive {
            class: ReasonClass::Denied,
            message,
        } => assert!(
            message.contains("outside the credential directories")
                && !message.contains(cluster.admin_token()),
            "{message}"
        ),
        other => panic!("expected inconclusive(denied), got {other:?}"),
    }
    assert_eq!(version_requests(), 1);

    // A request to an extra host is not one to the cluster: an `unhealthy` after it alone
    // is not believed.
    assert_fault(
        &runtime.probe(&wasi(&[])).await,
        "without a request to the cluster",
    );
    assert_eq!(extra.connections(), 2);

    // The same plugin probing through wasi:http: healthy, then a hanging cluster is a
    // timeout bounded by the probe's budget and attributed to the cluster.
    let probing = wasi(&[("mode", "probe"), ("token", &token)]);
    assert_eq!(runtime.probe(&probing).await, ProbeOutcome::Healthy);
    cluster.hang(HangPoint::Request).await.expect("hang");
    let started = Instant::now();
    let outcome = runtime.probe(&probing).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(
            outcome,
            ProbeOutcome::Unhealthy {
                class: ReasonClass::Timeout,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(500),
        "{elapsed:?}"
    );
    // A connect timeout of 0 is the plugin's own doing, even against a hanging cluster:
    // the request never started, and the cluster is not blamed.
    let before = cluster.log().counts().connections;
    assert_fault(
        &runtime
            .probe(&wasi(&[("mode", "connect-zero"), ("token", &token)]))
            .await,
        "unhealthy (timeout) without a request to the cluster",
    );
    assert_eq!(
        cluster.log().counts().connections,
        before,
        "a request with a zero connect timeout was sent"
    );
    cluster.come_back().await.expect("come back");

    // Without the `http` grant every wasi:http request is denied, the cluster's too.
    let denied_dir = temp.path().join("denied");
    let denied = plugin_dir(
        &denied_dir,
        &[("wasi-http", "log = true\ncredentials = true\n")],
    );
    let (ungranted, _) = load_with(&denied, None, vec![credentials.clone()]).await;
    let before = cluster.log().count();
    let outcome = ungranted
        .probe(&wasi(&[("mode", "policy"), ("token", &token)]))
        .await;
    assert_fault(&outcome, &format!("own {endpoint}: denied"));
    assert_eq!(cluster.log().count(), before, "the cluster was reached");

    // The control still works after all of it, and the foreign host never saw a thing.
    assert_eq!(runtime.probe(&control).await, ProbeOutcome::Healthy);
    assert_eq!(foreign.connections(), 0, "the foreign host was reached");
}

/// Every probe call runs on an instance no other call has used: the `once` plugin answers
/// healthy only on its instance's first call. One plugin called again and again, then
/// bursts of calls at the runtime's concurrency bound across six plugins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_runs_on_an_instance_no_call_has_used() {
    let temp = tempfile::tempdir().expect("tempdir");
    let plugins_dir = temp.path().join("plugins.d");
    std::fs::create_dir_all(&plugins_dir).expect("create the plugin dir");
    let names: Vec<String> = (0..6).map(|i| format!("once-{i}")).collect();
    for name in &names {
        std::fs::copy(
            plugin_file("once"),
            plugins_dir.join(format!("{name}.wasm")),
        )
        .expect("copy the plugin");
        std::fs::write(plugins_dir.join(format!("{name}.toml")), ALL_GRANTS)
            .expect("write the manifest");
    }
    // The runtime is sized for 4 calls at once (`load`).
    let (runtime, report) = load(&plugins_dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    let target = unread_target;

    for call in 0..20 {
        let outcome = runtime.probe(&target("once-0")).await;
        assert_eq!(outcome, ProbeOutcome::Healthy, "call {call}");
    }
    for round in 0..6 {
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let name = names[(round + i) % names.len()].clone();
                let runtime = runtime.clone();
                let target = target(&name);
                tokio::spawn(async move { (name, runtime.probe(&target).await) })
            })
            .collect();
        for call in calls {
            let (name, outcome) = call.await.expect("the call's task");
            assert_eq!(outcome, ProbeOutcome::Healthy, "{name}, round {round}");
        }
    }
    let calls: u64 = names
        .iter()
        .map(|name| runtime.stats(name).expect("loaded").probes)
        .sum();
    assert_eq!(calls, 20 + 6 * 4);
}

/// Routing follows what `accepts` is shown: the `picky` plugin (ahead in priority) accepts
/// only clusters labelled `route=picky`, `noop` accepts every kubeconfig file reference.
/// The same cluster, with the same reference, is routed again when its labels change (as
/// `PATCH /api/v1/clusters/{name}` changes them), both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_follows_the_labels_accepts_reads() {
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = plugin_dir(
        temp.path(),
        &[("picky", "priority = 10\n"), ("noop", "priority = 1\n")],
    );
    let (runtime, report) = load(&dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    let target = |labels: &[(&str, &str)]| ProbeTarget {
        plugin: None,
        labels: labels
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        ..unread_target("")
    };
    let routed_to = |target: ProbeTarget| {
        let runtime = runtime.clone();
        async move {
            let probed = runtime.probe_attributed(&target).await;
            assert_eq!(probed.outcome, ProbeOutcome::Healthy, "{probed:?}");
            probed.by.map(|by| by.plugin)
        }
    };

    // How many times each plugin's `accepts` has been asked.
    let asked = |name: &str| runtime.stats(name).expect("loaded").accepts;

    let picky = [("route", "picky")];
    assert_eq!(routed_to(target(&picky)).await.as_deref(), Some("picky"));
    assert_eq!(routed_to(target(&picky)).await.as_deref(), Some("picky"));
    // The second probe of the same cluster, shown the same, was routed by the answer
    // remembered from the first: `accepts` is not asked at every probe.
    assert_eq!((asked("picky"), asked("noop")), (1, 0));
    assert_eq!(routed_to(target(&[])).await.as_deref(), Some("noop"));
    assert_eq!(
        routed_to(target(&[("route", "other")])).await.as_deref(),
        Some("noop")
    );
    assert_eq!(routed_to(target(&picky)).await.as_deref(), Some("picky"));
    // Each change of labels asked again, in priority order until one accepted.
    assert_eq!((asked("picky"), asked("noop")), (4, 2));
}

/// Only a real answer of `accepts` is remembered. The `picky` plugin answers from a file
/// parameter read at each call, so what it is shown of the cluster stays the same while
/// its answer changes: an `accepts` that spins into its deadline, or traps, is not taken
/// for a refusal, and the next probe asks again and routes by the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_accepts_is_not_remembered_and_the_next_probe_asks_again() {
    let temp = tempfile::tempdir().expect("tempdir");
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("credentials dir");
    let answer = credentials.join("accepts");
    let picky = "credentials = true\npriority = 10\n";
    let target = |cluster: i64| ProbeTarget {
        cluster: ClusterId(cluster),
        plugin: None,
        parameters: BTreeMap::from([(
            "accepts-from".to_owned(),
            format!("file://{}", answer.display()),
        )]),
        ..unread_target("")
    };

    // Beside a plugin that takes every cluster: the failed one is skipped this time only.
    let both = plugin_dir(
        &temp.path().join("both"),
        &[("picky", picky), ("noop", "priority = 1\n")],
    );
    let (runtime, report) = load_with(&both, None, vec![credentials.clone()]).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    for (cluster, failure) in [(1, "spin"), (2, "trap")] {
        std::fs::write(&answer, failure).expect("write the answer");
        let probed = runtime.probe_attributed(&target(cluster)).await;
        assert_eq!(
            probed.outcome,
            ProbeOutcome::Healthy,
            "{failure}: {probed:?}"
        );
        assert_eq!(
            probed.by.map(|by| by.plugin).as_deref(),
            Some("noop"),
            "{failure}"
        );
        std::fs::write(&answer, "yes").expect("write the answer");
        for _ in 0..2 {
            let probed = runtime.probe_attributed(&target(cluster)).await;
            assert_eq!(
                probed.by.map(|by| by.plugin).as_deref(),
                Some("picky"),
                "after {failure}, the next probe asks picky again"
            );
        }
    }
    // Each cluster: the failed call, then the answer, remembered for the probe after. The
    // two failed calls are the plugin's faults.
    assert_eq!(runtime.stats("picky").expect("loaded").accepts, 4);
    assert_eq!(runtime.stats("picky").expect("loaded").faults, 2);

    // Alone, a failed `accepts` leaves the probe inconclusive (the plugin's fault), not
    // "no plugin accepts": nothing is said about the cluster.
    let alone = plugin_dir(&temp.path().join("alone"), &[("picky", picky)]);
    let (runtime, _) = load_with(&alone, None, vec![credentials.clone()]).await;
    std::fs::write(&answer, "spin").expect("write the answer");
    let probed = runtime.probe_attributed(&target(3)).await;
    assert_fault(&probed.outcome, "accepts failed");
    assert_eq!(probed.by, None);
    std::fs::write(&answer, "yes").expect("write the answer");
    let probed = runtime.probe_attributed(&target(3)).await;
    assert_eq!(probed.outcome, ProbeOutcome::Healthy, "{probed:?}");
    assert_eq!(probed.by.map(|by| by.plugin).as_deref(), Some("picky"));
}

/// `log.enabled` answers what vigil's log takes, for the plugin granted `log` only, and the
/// SDK's macros format nothing vigil would not record. One thread: the subscriber set for
/// each case is the one the host calls see.
#[tokio::test(flavor = "current_thread")]
async fn a_plugin_asks_which_log_levels_are_recorded_and_formats_nothing_else() {
    let temp = tempfile::tempdir().expect("tempdir");
    let granted = plugin_dir(&temp.path().join("granted"), &[("log-levels", ALL_GRANTS)]);
    let silent = plugin_dir(
        &temp.path().join("silent"),
        &[("log-levels", "credentials = true\nhttp = true\n")],
    );
    let (granted, _) = load(&granted, None).await;
    let (silent, _) = load(&silent, None).await;
    let target = unread_target("log-levels");

    for (filter, runtime, expected) in [
        (
            "info",
            &granted,
            "enabled: info,warn,error; debug formatted: 0",
        ),
        ("warn", &granted, "enabled: warn,error; debug formatted: 0"),
        (
            "trace",
            &granted,
            "enabled: trace,debug,info,warn,error; debug formatted: 1",
        ),
        ("off", &granted, "enabled: ; debug formatted: 0"),
        ("trace", &silent, "enabled: ; debug formatted: 0"),
    ] {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::sink)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        match runtime.probe(&target).await {
            ProbeOutcome::NotProbeable {
                class: ReasonClass::NoPlugin,
                message,
            } => assert_eq!(message, expected, "at {filter}"),
            other => panic!("at {filter}: {other:?}"),
        }
    }
}

/// A plugin that makes its own requests fail — a zero or very short timeout, a CA that is
/// not a certificate — and blames the cluster is never believed: each probe is
/// inconclusive (the plugin's fault), on a healthy cluster and on one that hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_a_plugin_caused_itself_are_never_the_clusters() {
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let cluster = &fleet.clusters()[0];
    let endpoint = cluster.server_url();
    let plugins = temp.path().join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    for mode in ["timeout-zero", "timeout-short", "garbage-ca"] {
        std::fs::copy(
            plugin_file("shortcut"),
            plugins.join(format!("{mode}.wasm")),
        )
        .expect("copy");
        std::fs::write(
            plugins.join(format!("{mode}.toml")),
            format!("{ALL_GRANTS}[parameters]\nmode = \"{mode}\"\n"),
        )
        .expect("manifest");
    }
    let (runtime, report) = load(&plugins, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    let probe = |plugin: &'static str| {
        let target = target(
            &kubeconfigs[0],
            &endpoint,
            Some(plugin),
            Duration::from_secs(3),
        );
        let runtime = runtime.clone();
        async move { runtime.probe(&target).await }
    };
    let check = |outcome: &ProbeOutcome, plugin: &str| {
        assert!(
            matches!(
                outcome,
                ProbeOutcome::Inconclusive {
                    class: ReasonClass::PluginFault,
                    ..
                }
            ),
            "{plugin}: {outcome:?}"
        );
    };
    // The positive control: with the cluster answering, only the zero timeout and the
    // garbage CA fail (the short timeout is answered in time).
    assert_eq!(probe("timeout-short").await, ProbeOutcome::Healthy);
    check(&probe("timeout-zero").await, "timeout-zero");
    check(&probe("garbage-ca").await, "garbage-ca");

    cluster.hang(HangPoint::Request).await.expect("hang");
    for plugin in ["timeout-zero", "timeout-short", "garbage-ca"] {
        check(&probe(plugin).await, plugin);
    }
    fleet.shutdown().await;
}

/// A component built against the contract before `credentials.exec-credential` was added
/// imports `credentials` without it: it still loads, and its `credentials` calls are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_before_exec_credentials_still_loads_and_is_served() {
    // The function's name as a component encodes it: its length, then its bytes (the
    // reason class `exec-credentials` is one byte longer).
    const FUNCTION: &[u8] = b"\x0fexec-credential";
    let mentions = |plugin: &str, needle: &[u8]| {
        let component = std::fs::read(plugin_file(plugin)).expect("read");
        component.windows(needle.len()).any(|w| w == needle)
    };
    assert!(
        mentions("kubeconfig-file", FUNCTION),
        "the positive control"
    );
    assert!(
        mentions("contract-before-exec", b"vigil:plugin/credentials@0.1.0")
            && !mentions("contract-before-exec", FUNCTION),
        "the test plugin must be built against the contract before exec-credential"
    );
    let fleet = Fleet::builder()
        .clusters(1)
        .addresses(AddressPlan::Auto)
        .start()
        .await
        .expect("fleet");
    let temp = tempfile::tempdir().expect("tempdir");
    let kubeconfigs = fleet
        .write_kubeconfigs(&temp.path().join("kube"), &KubeconfigOptions::default())
        .expect("kubeconfigs");
    let dir = plugin_dir(temp.path(), &[("contract-before-exec", ALL_GRANTS)]);
    let (runtime, report) = load(&dir, None).await;
    assert!(report.refused.is_empty(), "{report:#?}");
    let written = &kubeconfigs[0];
    let endpoint = fleet.clusters()[0].server_url();
    let outcome = runtime
        .probe(&target(
            written,
            &endpoint,
            Some("contract-before-exec"),
            Duration::from_secs(5),
        ))
        .await;
    match outcome {
        ProbeOutcome::NotProbeable { message, .. } => assert_eq!(
            message,
            format!("served context {} of server {endpoint}", written.context)
        ),
        other => panic!("expected the served context, got {other:?}"),
    }
}
