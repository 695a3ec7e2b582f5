//! Where a caller who registers clusters can point vigil (`VIGIL_REGISTRATION_ALLOW`):
//! registration and changes refuse endpoints and URLs outside the rule without dialling
//! anything (metadata and link-local addresses are only ever named here, never reached);
//! at probe time the egress applies the rule to the addresses a name resolves to — with the
//! rule narrowed to one loopback address, a cluster whose name resolves to another one is
//! not connected to, and stays as it was (`not-probeable`, never a failure). Every
//! connection a test opens is to 127.0.0.0/8.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::ServiceExt;
use vigil_api::{Access, ApiState, Readiness, app};
use vigil_domain::address_rule::AddressRule;
use vigil_domain::probe::{Prober, wall_clock};
use vigil_engine::worker::Worker;
use vigil_plugin_host::{PluginRuntime, RuntimeSettings};
use vigil_store::{NewCluster, Store};

use crate::process;
use vigil_test_support as plugins;
use vigil_test_support::engine as support;

use support::{Behaviour, ScriptedProber};
use vigil_test_support::api::NoCatalog;

/// The REST API over `store` with `prober` behind probe-now and `rule` as the setting.
fn router<P: Prober>(store: &Store, prober: P, rule: AddressRule) -> axum::Router {
    let settings = support::settings(60, 2);
    let worker = Worker::new(store.clone(), prober, settings);
    app(ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: Access::new(None, None, false).expect("access"),
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Arc::new(rule),
        events: Arc::default(),
    })
}

async fn call(
    router: &axum::Router,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, String, String) {
    let request = Request::builder().method(method).uri(uri);
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .expect("request");
    let response = router.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, kind, String::from_utf8_lossy(&bytes).into_owned())
}

/// Asserts a 400 problem naming the setting and `field`.
fn assert_refused(what: &str, (status, kind, text): &(StatusCode, String, String), field: &str) {
    assert_eq!(*status, StatusCode::BAD_REQUEST, "{what}: {text}");
    assert_eq!(kind, "application/problem+json", "{what}");
    let problem: Value = serde_json::from_str(text).expect("json");
    assert_eq!(problem["field"], field, "{what}: {text}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("VIGIL_REGISTRATION_ALLOW"),
        "{what}: {detail}"
    );
}

fn cluster(name: &str, endpoint: &str, reference: &str) -> Value {
    json!({ "name": name, "endpoint": endpoint, "kubeconfig_secret_ref": reference })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refuses_metadata_and_link_local_hosts_and_dials_nothing() {
    let sandbox = support::Sandbox::new();
    let store = sandbox.store().await;
    let prober = ScriptedProber::new(Behaviour::healthy());
    let api = router(&store, prober.clone(), AddressRule::default());
    let good = "https://10.0.0.7:6443";
    let health = "https://10.0.0.7:6443/healthz";
    for (what, body, field) in [
        (
            "metadata endpoint",
            cluster("a", "http://169.254.169.254", health),
            "body.endpoint",
        ),
        (
            "metadata reference",
            cluster("b", good, "http://169.254.169.254/latest/meta-data/"),
            "body.kubeconfig_secret_ref",
        ),
        (
            "mapped endpoint",
            cluster("c", "https://[::ffff:169.254.169.254]:443", health),
            "body.endpoint",
        ),
        (
            "mapped reference",
            cluster("d", good, "http://[::ffff:169.254.169.254]/"),
            "body.kubeconfig_secret_ref",
        ),
        (
            "link-local endpoint",
            cluster("e", "https://[fe80::1]:6443", health),
            "body.endpoint",
        ),
        (
            "link-local reference",
            cluster("f", good, "https://[fe80::1]/healthz"),
            "body.kubeconfig_secret_ref",
        ),
        (
            "shorthand reference",
            cluster("g", good, "http://2852039166/"),
            "body.kubeconfig_secret_ref",
        ),
        (
            "unspecified endpoint",
            cluster("h", "http://0.0.0.0:6443", health),
            "body.endpoint",
        ),
        (
            "alibaba metadata reference",
            cluster("i", good, "http://100.100.100.200/latest/meta-data/"),
            "body.kubeconfig_secret_ref",
        ),
        (
            "URL parameter",
            json!({ "name": "j", "endpoint": good, "kubeconfig_secret_ref": health,
                    "parameters": { "probe-url": "http://169.254.169.254/" } }),
            "body.parameters.probe-url",
        ),
    ] {
        let answer = call(&api, Method::POST, "/api/v1/clusters", Some(body)).await;
        assert_refused(what, &answer, field);
    }
    // An operator setting is not a cluster's to give.
    let (status, _, text) = call(
        &api,
        Method::POST,
        "/api/v1/clusters",
        Some(
            json!({ "name": "k", "endpoint": good, "kubeconfig_secret_ref": health,
                     "parameters": { "operator.quote-response": "true" } }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("operator"), "{text}");

    let (status, _, text) = call(&api, Method::GET, "/api/v1/clusters", None).await;
    assert_eq!(status, StatusCode::OK);
    let page: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0), "{text}");

    // The same through PATCH: the stored parameters stay as they were.
    let (status, _, text) = call(
        &api,
        Method::POST,
        "/api/v1/clusters",
        Some(
            json!({ "name": "web", "endpoint": good, "kubeconfig_secret_ref": health,
                     "parameters": { "status": "200" } }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let answer = call(
        &api,
        Method::PATCH,
        "/api/v1/clusters/web",
        Some(json!({ "parameters": { "probe-url": "http://[fe80::1]/" } })),
    )
    .await;
    assert_refused("PATCH", &answer, "body.parameters.probe-url");
    let (status, _, text) = call(
        &api,
        Method::PATCH,
        "/api/v1/clusters/web",
        Some(json!({ "parameters": { "operator.quote-response": "true" } })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let stored = store.cluster("web").await.expect("stored");
    assert_eq!(
        stored.parameters,
        BTreeMap::from([("status".to_owned(), "200".to_owned())])
    );
    assert_eq!(prober.total_calls(), 0, "nothing was probed");

    // A narrowed rule: only what it lists.
    let narrow = router(
        &store,
        ScriptedProber::new(Behaviour::healthy()),
        AddressRule::parse("127.0.0.1/32").expect("rule"),
    );
    for (name, endpoint, field) in [
        ("other-loopback", "http://127.0.0.2:6443", "body.endpoint"),
        ("by-name", "http://localhost:6443", "body.endpoint"),
    ] {
        let answer = call(
            &narrow,
            Method::POST,
            "/api/v1/clusters",
            Some(cluster(name, endpoint, "http://127.0.0.1:6443/")),
        )
        .await;
        assert_refused(name, &answer, field);
    }
    let (status, _, text) = call(
        &narrow,
        Method::POST,
        "/api/v1/clusters",
        Some(cluster(
            "listed",
            "http://127.0.0.1:6443",
            "http://127.0.0.1:6443/",
        )),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
}

#[test]
fn a_malformed_setting_stops_start_up_naming_the_setting_and_the_entry() {
    for (value, entry) in [
        ("127.0.0.1/32,10.0.0.0/99", "10.0.0.0/99"),
        (
            "127.0.0.1,http://169.254.169.254/",
            "http://169.254.169.254/",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = process::vigil(dir.path())
            .arg("serve")
            .env("VIGIL_REGISTRATION_ALLOW", value)
            .output()
            .expect("run vigil");
        let message = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{value}: {message}");
        assert!(
            message.contains("VIGIL_REGISTRATION_ALLOW") && message.contains(entry),
            "{value}: {message}"
        );
        let written: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert!(written.is_empty(), "nothing written: {written:?}");
    }
}

/// A plain HTTP server on 127.0.0.1 that answers 200 and counts the connections it accepts.
struct CountingServer {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl CountingServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self { port, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A plugin directory with the installed `http` plugin.
fn http_plugin_dir(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    let built = vigil_test_support::first_party_dir();
    for file in ["http.wasm", "http.toml"] {
        std::fs::copy(built.join(file), plugins.join(file)).expect("copy");
    }
    plugins
}

async fn http_runtime(dir: &Path, rule: &str) -> PluginRuntime {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: http_plugin_dir(dir),
        cache_dir: None,
        concurrency: 2,
        credential_dirs: Vec::new(),
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: AddressRule::parse(rule).expect("rule"),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_outside_the_rule_is_not_connected_to_and_not_the_clusters_fault() {
    // `localhost` resolves to 127.0.0.1 here (and perhaps ::1), where the server listens.
    let server = CountingServer::start().await;
    let url = format!("http://localhost:{}/healthz", server.port);
    let temp = tempfile::tempdir().expect("tempdir");
    let store = Store::open_path(&temp.path().join("vigil.db"))
        .await
        .expect("store");
    store
        .register(
            &NewCluster {
                name: "web".to_owned(),
                endpoint: url.clone(),
                reference: url.clone(),
                plugin: None,
                parameters: BTreeMap::new(),
                labels: BTreeMap::new(),
                policy: Default::default(),
            },
            None,
            wall_clock(),
        )
        .await
        .expect("register");
    let probe = |api: axum::Router| async move {
        let (status, _, text) = call(&api, Method::POST, "/api/v1/clusters/web/probe", None).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        serde_json::from_str::<Value>(&text).expect("json")
    };

    // The positive control: a rule that covers 127.0.0.1 reaches the server; ONLINE.
    let open = http_runtime(&temp.path().join("open"), "127.0.0.1/32").await;
    let answer = probe(router(&store, open, AddressRule::default())).await;
    assert_eq!(answer["outcome"], "healthy", "{answer}");
    assert_eq!(answer["cluster"]["status"], "ONLINE", "{answer}");
    let reached = server.connections();
    assert!(reached >= 1, "the server was reached");

    // Narrowed to another loopback address: the name's addresses are outside; nothing is
    // dialled, and however often it is probed (past the failure threshold of 2) the
    // cluster keeps its status, with a condition saying why.
    let narrow = http_runtime(&temp.path().join("narrow"), "127.0.0.2/32").await;
    let api = router(&store, narrow, AddressRule::default());
    for _ in 0..3 {
        let answer = probe(api.clone()).await;
        assert_eq!(answer["outcome"], "not-probeable", "{answer}");
        assert_eq!(answer["reason_class"], "reference-broken", "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("localhost resolves to")
                && message.contains("127.0.0.1")
                && message.contains("outside VIGIL_REGISTRATION_ALLOW"),
            "{message}"
        );
        assert_eq!(answer["cluster"]["status"], "ONLINE", "{answer}");
    }
    assert_eq!(server.connections(), reached, "no connection past the rule");
    let record = store.cluster("web").await.expect("cluster");
    assert_eq!(record.health.consecutive_failures, 0, "{record:?}");

    // An address literal outside the rule is refused the same way.
    let literal = http_runtime(&temp.path().join("literal"), "127.0.0.2/32").await;
    let mut target = vigil_domain::probe::ProbeTarget {
        cluster: record.id,
        name: "web".to_owned(),
        endpoint: format!("http://127.0.0.1:{}", server.port),
        reference: vigil_domain::reference::Reference::parse(&format!(
            "http://127.0.0.1:{}/",
            server.port
        ))
        .expect("reference"),
        connection: None,
        plugin: None,
        timeout: Duration::from_secs(5),
        labels: BTreeMap::new(),
        parameters: BTreeMap::new(),
    };
    let outcome = literal.probe(&target).await;
    assert_eq!(
        (outcome.label(), outcome.class().map(|c| c.as_str())),
        ("not-probeable", Some("reference-broken")),
        "{outcome:?}"
    );
    assert_eq!(server.connections(), reached);
    // …and allowed when listed.
    target.plugin = Some("http".to_owned());
    let listed = http_runtime(&temp.path().join("listed"), "127.0.0.0/8").await;
    assert_eq!(listed.probe(&target).await.label(), "healthy");
    assert_eq!(server.connections(), reached + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_sent_through_wasi_http_goes_only_where_it_is_bound() {
    let server = CountingServer::start().await;
    let temp = tempfile::tempdir().expect("tempdir");
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("mkdir");
    let token_file = credentials.join("token");
    std::fs::write(&token_file, "wasi-t0ken-0123456789\n").expect("write");
    let load = |name: &str, grants: String| {
        let dir = temp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::copy(
            plugins::plugin_file("wasi-http"),
            dir.join("wasi-http.wasm"),
        )
        .expect("copy");
        std::fs::write(dir.join("wasi-http.toml"), grants).expect("write");
        let credentials = credentials.clone();
        async move {
            let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
                embedded: Vec::new(),
                plugin_dir: dir,
                cache_dir: None,
                concurrency: 2,
                credential_dirs: vec![credentials],
                kubeconfig_credential_dirs: Vec::new(),
                secrets: None,
                registration_allow: AddressRule::default(),
                exec: Default::default(),
            })
            .await
            .expect("the runtime starts");
            assert!(report.refused.is_empty(), "{report:#?}");
            runtime
        }
    };
    let grants = "log = true\ncredentials = true\nhttp = true\n";
    let endpoint = format!("http://127.0.0.1:{}", server.port);
    let target = vigil_domain::probe::ProbeTarget {
        cluster: vigil_decision::ClusterId(1),
        name: "web".to_owned(),
        endpoint: endpoint.clone(),
        reference: vigil_domain::reference::Reference::parse(&format!("{endpoint}/"))
            .expect("reference"),
        connection: None,
        plugin: Some("wasi-http".to_owned()),
        timeout: Duration::from_secs(5),
        labels: BTreeMap::new(),
        parameters: BTreeMap::from([
            ("mode".to_owned(), "probe".to_owned()),
            (
                "token".to_owned(),
                format!("file://{}", token_file.display()),
            ),
        ]),
    };

    // Not bound: the request that would carry it is refused before any connection. (This
    // test plugin reports the refusal as `unhealthy(denied)`, a malformed report: its own
    // fault, never the cluster's.)
    let unbound = load("unbound", grants.to_owned()).await;
    let outcome = unbound.probe(&target).await;
    assert!(
        matches!(
            outcome,
            vigil_decision::ProbeOutcome::NotProbeable { .. }
                | vigil_decision::ProbeOutcome::Inconclusive { .. }
        ),
        "{outcome:?}"
    );
    assert!(
        !format!("{outcome:?}").contains("wasi-t0ken"),
        "{outcome:?}"
    );
    assert_eq!(server.connections(), 0);

    // Bound to the server: sent.
    let bound = load(
        "bound",
        format!(
            "{grants}[credential-hosts]\n\"{}\" = [\"127.0.0.1:{}\"]\n",
            token_file.display(),
            server.port
        ),
    )
    .await;
    assert_eq!(
        bound.probe(&target).await,
        vigil_decision::ProbeOutcome::Healthy
    );
    assert_eq!(server.connections(), 1);
}
