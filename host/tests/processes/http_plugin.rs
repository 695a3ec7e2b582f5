//! The first-party `http` plugin (`http.wasm` with its `http.toml`, built by cargo for the
//! tests) run by the real plugin runtime against test servers on
//! loopback, plain HTTP and HTTPS with a private CA: every condition passes, and fails
//! with the value seen; a credential header given as a `file:///` reference reaches the
//! server and never the REST API nor the report.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::ServiceExt;
use vigil_api::{Access, ApiState, PluginCatalog, PluginView, Readiness, app};
use vigil_decision::{ClusterId, ProbeOutcome, ReasonClass};
use vigil_domain::probe::{ProbeTarget, Prober};
use vigil_domain::reference::Reference;
use vigil_engine::worker::Worker;
use vigil_fake_kube::tls::{CertificateAuthority, provider};
use vigil_plugin_host::{PluginRuntime, RuntimeSettings};
use vigil_store::Store;

use vigil_test_support::engine as support;

const TOKEN: &str = "ops-token-0123456789";
/// The credential the header reference points at; it must never come back.
const SECRET: &str = "Bearer s3cr3t-value-7f1c9a";
/// What the server at `/leak` serves: an internal page's secret, which a caller who can
/// register clusters must not be able to read through vigil.
const LEAKED: &str = "internal-p4ge-s3cret-5d0e";

/// Everything vigil logs in this test binary, at every level.
fn captured_log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    Arc::clone(LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        log
    }))
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The workspace root.
/// A plugin directory holding the installed `http.wasm` and `http.toml`, with `operator`
/// (the operator's own lines) appended to the grants.
fn plugin_dir(dir: &Path, operator: &str) -> PathBuf {
    let plugins = dir.join("plugins.d");
    std::fs::create_dir_all(&plugins).expect("create the plugin dir");
    for file in ["http.wasm", "http.toml"] {
        let built = vigil_test_support::first_party_dir().join(file);
        std::fs::copy(&built, plugins.join(file)).expect("copy the plugin");
    }
    let mut grants = std::fs::read_to_string(plugins.join("http.toml")).expect("read");
    grants.push('\n');
    grants.push_str(operator);
    std::fs::write(plugins.join("http.toml"), grants).expect("write");
    plugins
}

/// The operator's lines that quote answers and let every credential of `credential_dirs`
/// go to 127.0.0.1, where the test servers are.
fn quoting_and_bound(credential_dirs: &[PathBuf]) -> String {
    let mut lines =
        "[parameters]\n\"operator.quote-response\" = \"true\"\n[credential-hosts]\n".to_owned();
    for dir in credential_dirs {
        lines.push_str(&format!("\"{}\" = [\"127.0.0.1\"]\n", dir.display()));
    }
    lines
}

async fn runtime(dir: &Path, credential_dirs: Vec<PathBuf>) -> PluginRuntime {
    let operator = quoting_and_bound(&credential_dirs);
    runtime_with(dir, credential_dirs, &operator).await
}

async fn runtime_with(dir: &Path, credential_dirs: Vec<PathBuf>, operator: &str) -> PluginRuntime {
    let (runtime, report) = PluginRuntime::load(&RuntimeSettings {
        embedded: Vec::new(),
        plugin_dir: plugin_dir(dir, operator),
        cache_dir: None,
        concurrency: 4,
        credential_dirs,
        kubeconfig_credential_dirs: Vec::new(),
        secrets: None,
        registration_allow: Default::default(),
        exec: Default::default(),
    })
    .await
    .expect("the runtime starts");
    assert!(report.refused.is_empty(), "{report:#?}");
    assert_eq!(report.loaded[0].grants, ["log", "credentials", "http"]);
    runtime
}

/// One request as the test server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A test server on 127.0.0.1: each path answers a fixed status and body, after a delay
/// for `/slow`; `/secure` answers 200 only with the expected `Authorization`, and quotes
/// it back in its body (as a careless server might).
#[derive(Clone)]
struct TestServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl TestServer {
    async fn start(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let log = Arc::clone(&log);
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, log).await;
                            }
                        }
                        None => serve(stream, log).await,
                    }
                });
            }
        });
        Self {
            addr,
            seen,
            connections,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, log: Arc<Mutex<Vec<Seen>>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let seen = Seen {
        method,
        path: path.clone(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (status, text) = match path.as_str() {
        "/ok" => (
            200,
            r#"{"status":"UP","checks":[{"ok":true},{"ok":false}]}"#.to_owned(),
        ),
        "/down" => (503, "maintenance".to_owned()),
        "/teapot" => (418, "short and stout".to_owned()),
        "/login" => (401, "who are you".to_owned()),
        "/leak" => (
            503,
            format!(r#"{{"status":"DOWN","token":"{LEAKED}","note":"{LEAKED}"}}"#),
        ),
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (200, "late but fine".to_owned())
        }
        "/post-only" if seen.method == "POST" => (201, format!("created {}", seen.body)),
        "/post-only" => (405, "use POST".to_owned()),
        "/secure" => match seen.header("authorization") {
            Some(SECRET) => (200, format!("welcome, {SECRET}")),
            _ => (401, "no".to_owned()),
        },
        _ => (404, "not found".to_owned()),
    };
    log.lock().unwrap().push(seen);
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A probe target for a health URL with `parameters`.
fn target(url: &str, parameters: &[(&str, &str)]) -> ProbeTarget {
    ProbeTarget {
        cluster: ClusterId(1),
        name: "web".to_owned(),
        endpoint: url.to_owned(),
        reference: Reference::parse(url).expect("reference"),
        connection: None,
        plugin: None,
        timeout: Duration::from_secs(5),
        labels: BTreeMap::new(),
        parameters: parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// What a case expects: `None` healthy, or the outcome's label, class and a piece of its
/// message (the value seen).
type Expected<'a> = Option<(&'a str, ReasonClass, &'a str)>;

async fn check(
    runtime: &PluginRuntime,
    url: &str,
    parameters: &[(&str, &str)],
    expected: Expected<'_>,
) {
    let outcome = runtime.probe(&target(url, parameters)).await;
    match (expected, &outcome) {
        (None, ProbeOutcome::Healthy) => {}
        (Some((label, class, needle)), outcome)
            if outcome.label() == label
                && outcome.class() == Some(class)
                && outcome.message().is_some_and(|m| m.contains(needle)) => {}
        (expected, outcome) => {
            panic!("{url} {parameters:?}: expected {expected:?}, got {outcome:?}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_condition_passes_and_fails_with_the_value_seen() {
    use ReasonClass as R;
    let temp = tempfile::tempdir().expect("tempdir");
    let runtime = runtime(temp.path(), Vec::new()).await;
    let server = TestServer::start(None).await;
    let url = |path: &str| server.url("http", path);

    // Status: 2xx by default; lists, ranges and classes; the class follows the status seen.
    check(&runtime, &url("/ok"), &[], None).await;
    check(
        &runtime,
        &url("/down"),
        &[],
        Some(("unhealthy", R::ServerError, "status 503, expected 2xx")),
    )
    .await;
    check(&runtime, &url("/down"), &[("status", "200,500-503")], None).await;
    check(
        &runtime,
        &url("/teapot"),
        &[("status", "2xx,3xx")],
        Some(("unhealthy", R::BadResponse, "status 418, expected 2xx,3xx")),
    )
    .await;
    check(&runtime, &url("/teapot"), &[("status", "418")], None).await;
    check(
        &runtime,
        &url("/login"),
        &[],
        Some(("credentials-rejected", R::Unauthorized, "status 401")),
    )
    .await;

    // Body substring: the start of the body is quoted.
    check(
        &runtime,
        &url("/ok"),
        &[("body-contains", r#""status":"UP""#)],
        None,
    )
    .await;
    check(
        &runtime,
        &url("/down"),
        &[("status", "503"), ("body-contains", "ready")],
        Some((
            "unhealthy",
            R::BadResponse,
            r#"does not contain "ready"; it starts "maintenance""#,
        )),
    )
    .await;

    // JSON pointer: the value seen, a missing value, a body that is not JSON.
    check(
        &runtime,
        &url("/ok"),
        &[("json-pointer", "/status"), ("json-equals", "UP")],
        None,
    )
    .await;
    check(
        &runtime,
        &url("/ok"),
        &[("json-pointer", "/checks/0/ok"), ("json-equals", "true")],
        None,
    )
    .await;
    check(
        &runtime,
        &url("/ok"),
        &[("json-pointer", "/checks/1/ok"), ("json-equals", "true")],
        Some((
            "unhealthy",
            R::BadResponse,
            "JSON /checks/1/ok = \"true\", saw false",
        )),
    )
    .await;
    check(
        &runtime,
        &url("/ok"),
        &[("json-pointer", "/status"), ("json-equals", "DOWN")],
        Some(("unhealthy", R::BadResponse, "saw \"UP\"")),
    )
    .await;
    check(
        &runtime,
        &url("/ok"),
        &[("json-pointer", "/version")],
        Some(("unhealthy", R::BadResponse, "no value at /version")),
    )
    .await;
    check(
        &runtime,
        &url("/teapot"),
        &[("status", "418"), ("json-pointer", "/status")],
        Some(("unhealthy", R::BadResponse, "saw a body that is not JSON")),
    )
    .await;

    // Latency: the server waits 300 ms on /slow.
    check(&runtime, &url("/slow"), &[("max-latency-ms", "5000")], None).await;
    let outcome = runtime
        .probe(&target(&url("/slow"), &[("max-latency-ms", "100")]))
        .await;
    let ProbeOutcome::Unhealthy {
        class: R::Timeout,
        message,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    let seen: u32 = message
        .strip_prefix("latency ")
        .and_then(|rest| rest.split_once(" ms, expected at most 100 ms"))
        .and_then(|(ms, _)| ms.parse().ok())
        .unwrap_or_else(|| panic!("no latency seen in {message:?}"));
    assert!(seen >= 300, "{message}");

    // Several failures: all named, the class of the first.
    check(
        &runtime,
        &url("/down"),
        &[("body-contains", "ready"), ("max-latency-ms", "60000")],
        Some((
            "unhealthy",
            R::ServerError,
            "status 503, expected 2xx; the body does not contain \"ready\"",
        )),
    )
    .await;

    // Method, plain header and body reach the server.
    check(
        &runtime,
        &url("/post-only"),
        &[],
        Some(("unhealthy", R::BadResponse, "status 405")),
    )
    .await;
    check(
        &runtime,
        &url("/post-only"),
        &[
            ("method", "post"),
            ("body", "{\"probe\":1}"),
            ("header.X-Env", "prod"),
            ("body-contains", "created {\"probe\":1}"),
        ],
        None,
    )
    .await;
    let posted = server
        .seen()
        .into_iter()
        .rfind(|s| s.path == "/post-only")
        .expect("seen");
    assert_eq!(
        (posted.method.as_str(), posted.body.as_str()),
        ("POST", "{\"probe\":1}")
    );
    assert_eq!(posted.header("x-env"), Some("prod"));

    // A parameter that cannot be used is named; a server that is down is refused.
    check(
        &runtime,
        &url("/ok"),
        &[("status", "fine")],
        Some((
            "not-probeable",
            R::ReferenceBroken,
            "parameter status: `fine`",
        )),
    )
    .await;
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let closed_url = format!("http://{}/ok", closed.local_addr().expect("address"));
    drop(closed);
    check(
        &runtime,
        &closed_url,
        &[],
        Some(("unhealthy", R::Refused, "refused")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_private_ca_given_inline_or_as_a_file() {
    let ca = CertificateAuthority::generate("http-plugin-test-ca").expect("CA");
    let leaf = ca
        .issue_server_certificate("127.0.0.1".parse().expect("ip"))
        .expect("leaf");
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.certificate_der().clone()], leaf.key_der())
        .expect("server config");
    let server = TestServer::start(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await;
    let temp = tempfile::tempdir().expect("tempdir");
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("mkdir");
    std::fs::write(credentials.join("ca.pem"), ca.certificate_pem()).expect("write");
    let runtime = runtime(temp.path(), vec![credentials.clone()]).await;
    let url = server.url("https", "/ok");

    check(
        &runtime,
        &url,
        &[],
        Some(("unhealthy", ReasonClass::Tls, "TLS")),
    )
    .await;
    check(&runtime, &url, &[("ca", ca.certificate_pem())], None).await;
    let ca_file = format!("file://{}", credentials.join("ca.pem").display());
    check(
        &runtime,
        &url,
        &[
            ("ca", ca_file.as_str()),
            ("json-pointer", "/status"),
            ("json-equals", "UP"),
        ],
        None,
    )
    .await;
    // A CA file outside the credential directories is refused by the host.
    std::fs::write(temp.path().join("elsewhere.pem"), ca.certificate_pem()).expect("write");
    let outside = format!("file://{}", temp.path().join("elsewhere.pem").display());
    check(
        &runtime,
        &url,
        &[("ca", outside.as_str())],
        Some(("inconclusive", ReasonClass::Denied, "parameter ca")),
    )
    .await;
}

struct NoCatalog;

impl PluginCatalog for NoCatalog {
    fn plugins(&self) -> Vec<PluginView> {
        Vec::new()
    }

    fn reload(&self) -> vigil_api::BoxFuture<'_, Option<Result<vigil_api::ReloadView, String>>> {
        Box::pin(async { None })
    }
}

async fn call(
    router: &axum::Router,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .expect("request");
    let response = router.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_header_reference_is_sent_and_never_returned() {
    let temp = tempfile::tempdir().expect("tempdir");
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("mkdir");
    let token_file = credentials.join("web-token");
    std::fs::write(&token_file, format!("{SECRET}\n")).expect("write");
    let api_key_file = credentials.join("api-key");
    std::fs::write(&api_key_file, "k-9d2e4b71").expect("write");
    let runtime = runtime(temp.path(), vec![credentials.clone()]).await;
    let server = TestServer::start(None).await;

    let store = Store::open_path(&temp.path().join("vigil.db"))
        .await
        .expect("store");
    let settings = support::settings(60, 2);
    let worker = Worker::new(store.clone(), runtime, settings);
    let state = ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: Access::new(Some(TOKEN), None, false).expect("access"),
        credential_roots: vec![credentials.clone()].into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    };
    let router = app(state);
    let token_ref = format!("file://{}", token_file.display());
    let key_ref = format!("file://{}", api_key_file.display());
    let url = server.url("http", "/secure");
    let (status, text) = call(
        &router,
        Method::POST,
        "/api/v1/clusters",
        Some(json!({
            "name": "web",
            "endpoint": url,
            "kubeconfig_secret_ref": url,
            "parameters": {
                "header.Authorization": token_ref,
                "header.X-Api-Key": key_ref,
                "credential-headers": "X-Api-Key",
                "body-contains": "welcome",
            },
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let mut texts = vec![text];

    let (status, text) = call(&router, Method::POST, "/api/v1/clusters/web/probe", None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["outcome"], "healthy", "{text}");
    texts.push(text);
    let seen = server.seen();
    let secure = seen.last().expect("the server was asked");
    assert_eq!(
        secure.header("authorization"),
        Some(SECRET),
        "the resolved value is sent"
    );
    assert_eq!(secure.header("x-api-key"), Some("k-9d2e4b71"));

    // A failing condition quotes the body, which echoes the credential: it is redacted.
    let (status, text) = call(
        &router,
        Method::PATCH,
        "/api/v1/clusters/web",
        Some(json!({ "parameters": {
            "header.Authorization": token_ref,
            "header.X-Api-Key": key_ref,
            "credential-headers": "X-Api-Key",
            "body-contains": "goodbye",
        }})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    texts.push(text);
    let (status, text) = call(&router, Method::POST, "/api/v1/clusters/web/probe", None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["outcome"], "unhealthy", "{text}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("it starts \"welcome, ***\"")),
        "{text}"
    );
    texts.push(text);

    for uri in [
        "/api/v1/clusters/web",
        "/api/v1/clusters",
        "/api/v1/clusters/web/history",
    ] {
        let (status, text) = call(&router, Method::GET, uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {text}");
        texts.push(text);
    }
    for text in &texts {
        for secret in [SECRET, "s3cr3t-value", "k-9d2e4b71", &token_ref, &key_ref] {
            assert!(!text.contains(secret), "{secret:?} in {text}");
        }
    }
    let shown: Value = serde_json::from_str(&texts[texts.len() - 3]).expect("json");
    assert_eq!(
        shown["parameters"]["header.Authorization"],
        "(credential reference)"
    );
    assert_eq!(shown["parameters"]["body-contains"], "goodbye");
    let stored = store.cluster("web").await.expect("stored");
    assert_eq!(
        stored.parameters["header.Authorization"], token_ref,
        "stored as the reference"
    );
}

/// The REST API over a fresh store in `dir`, probing through `runtime`.
async fn api_over(
    dir: &Path,
    runtime: PluginRuntime,
    credential_roots: Vec<PathBuf>,
) -> axum::Router {
    let store = Store::open_path(&dir.join("vigil.db"))
        .await
        .expect("store");
    let settings = support::settings(60, 2);
    let worker = Worker::new(store.clone(), runtime, settings);
    app(ApiState {
        store,
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: Access::new(Some(TOKEN), None, false).expect("access"),
        credential_roots: credential_roots.into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    })
}

/// Registers `web` on `url` with `parameters`, probes it twice (past the failure
/// threshold), and returns every answer the API gives about it, the history included.
async fn register_probe_and_read(
    router: &axum::Router,
    url: &str,
    parameters: Value,
) -> Vec<String> {
    let (status, text) = call(
        router,
        Method::POST,
        "/api/v1/clusters",
        Some(json!({
            "name": "web",
            "endpoint": url,
            "kubeconfig_secret_ref": url,
            "parameters": parameters,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let mut texts = vec![text];
    for _ in 0..2 {
        let (status, text) = call(router, Method::POST, "/api/v1/clusters/web/probe", None).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        texts.push(text);
    }
    for uri in [
        "/api/v1/clusters/web",
        "/api/v1/clusters",
        "/api/v1/clusters/web/history",
    ] {
        let (status, text) = call(router, Method::GET, uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {text}");
        texts.push(text);
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_is_quoted_only_when_the_operator_opts_in() {
    let log = captured_log();
    let server = TestServer::start(None).await;
    let url = server.url("http", "/leak");
    let conditions = json!({
        "body-contains": "UP",
        "json-pointer": "/token",
        "json-equals": "x",
    });

    // Without the opt-in: the status and the conditions that failed, never what the body
    // holds, in the API's answers, the history or the log.
    let closed = tempfile::tempdir().expect("tempdir");
    let runtime = runtime_with(closed.path(), Vec::new(), "").await;
    let router = api_over(closed.path(), runtime, Vec::new()).await;
    // A caller cannot turn the opt-in on for its own cluster.
    let (status, text) = call(
        &router,
        Method::POST,
        "/api/v1/clusters",
        Some(json!({
            "name": "sneaky",
            "endpoint": url,
            "kubeconfig_secret_ref": url,
            "parameters": { "operator.quote-response": "true" },
        })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let texts = register_probe_and_read(&router, &url, conditions.clone()).await;
    let probed: Value = serde_json::from_str(&texts[1]).expect("json");
    assert_eq!(probed["outcome"], "unhealthy", "{}", texts[1]);
    let message = probed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("status 503, expected 2xx")
            && message.contains("the body does not contain \"UP\"")
            && message.contains("JSON /token = \"x\", saw another value"),
        "{message}"
    );
    let logged = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    for text in texts.iter().chain([&logged]) {
        assert!(!text.contains(LEAKED), "{LEAKED} in {text}");
        assert!(!text.contains("DOWN"), "the body quoted in {text}");
    }

    // With the operator's opt-in in `http.toml`, the same answer is quoted.
    let open = tempfile::tempdir().expect("tempdir");
    let runtime = runtime_with(
        open.path(),
        Vec::new(),
        "[parameters]\n\"operator.quote-response\" = \"true\"\n",
    )
    .await;
    let router = api_over(open.path(), runtime, Vec::new()).await;
    let texts = register_probe_and_read(&router, &url, conditions).await;
    let probed: Value = serde_json::from_str(&texts[1]).expect("json");
    let message = probed["message"].as_str().unwrap_or_default();
    assert!(message.contains(LEAKED), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_parameter_goes_only_where_the_operator_bound_it() {
    let temp = tempfile::tempdir().expect("tempdir");
    let credentials = temp.path().join("credentials");
    std::fs::create_dir_all(&credentials).expect("mkdir");
    let token_file = credentials.join("web-token");
    std::fs::write(&token_file, format!("{SECRET}\n")).expect("write");
    let token_ref = format!("file://{}", token_file.display());
    let bound = TestServer::start(None).await;
    let unbound = TestServer::start(None).await;
    let operator = format!(
        "[credential-hosts]\n\"{}\" = [\"127.0.0.1:{}\"]\n",
        token_file.display(),
        bound.addr.port()
    );
    let runtime = runtime_with(temp.path(), vec![credentials.clone()], &operator).await;
    let probe = |url: String, extra: &[(&str, &str)]| {
        let mut parameters = vec![("header.Authorization", token_ref.as_str())];
        parameters.extend_from_slice(extra);
        let target = target(&url, &parameters);
        let runtime = runtime.clone();
        async move { runtime.probe(&target).await }
    };
    let refused = |outcome: &ProbeOutcome, needle: &str| match outcome {
        ProbeOutcome::NotProbeable {
            class: ReasonClass::ReferenceBroken,
            message,
        } => assert!(
            message.contains("parameter header.Authorization is not bound to")
                && message.contains(needle)
                && !message.contains("s3cr3t"),
            "{message}"
        ),
        other => panic!("expected not-probeable(reference-broken), got {other:?}"),
    };

    // The bound host gets the credential.
    assert_eq!(
        probe(bound.url("http", "/secure"), &[]).await,
        ProbeOutcome::Healthy
    );
    assert_eq!(bound.seen().len(), 1);
    assert_eq!(bound.seen()[0].header("authorization"), Some(SECRET));

    // A host the caller names, which the binding does not cover, is not even connected to.
    let outcome = probe(unbound.url("http", "/secure"), &[]).await;
    refused(&outcome, &format!("127.0.0.1:{}", unbound.addr.port()));
    assert_eq!(unbound.connections(), 0, "{outcome:?}");

    // A `Host` header the binding does not cover falls under it too.
    let outcome = probe(
        bound.url("http", "/secure"),
        &[("header.Host", "evil.example")],
    )
    .await;
    refused(&outcome, "Host evil.example");
    assert_eq!(bound.connections(), 1, "{outcome:?}");

    // A request that carries no credential is not bound: the unbound host answers it.
    let plain = runtime
        .probe(&target(&unbound.url("http", "/ok"), &[]))
        .await;
    assert_eq!(plain, ProbeOutcome::Healthy);
    assert_eq!(unbound.seen().len(), 1);
    assert_eq!(unbound.seen()[0].header("authorization"), None);

    // Without a binding, a credential goes nowhere.
    let nowhere = tempfile::tempdir().expect("tempdir");
    let unbound_runtime = runtime_with(nowhere.path(), vec![credentials.clone()], "").await;
    let outcome = unbound_runtime
        .probe(&target(
            &bound.url("http", "/secure"),
            &[("header.Authorization", token_ref.as_str())],
        ))
        .await;
    refused(&outcome, &format!("127.0.0.1:{}", bound.addr.port()));
    assert_eq!(bound.connections(), 1);
}
