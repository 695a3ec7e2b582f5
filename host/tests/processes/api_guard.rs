//! The API fails closed: a tokens file that yields no token stops start-up; without a
//! valid token, vigil answers only requests addressed to it (the Host rule, against DNS
//! rebinding) and refuses changes sent from another origin's page (the Origin rule).
//! The router through `oneshot`, and the real `vigil serve` on loopback with raw HTTP and
//! the `vigil` CLI.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use vigil_api::{
    Access, ApiState, BoxFuture, PluginCatalog, PluginView, PublicUrl, Readiness, ReloadView,
    TokensError, app,
};
use vigil_engine::worker::Worker;

use crate::process;
use vigil_test_support::engine as support;

use process::vigil;
use support::{Behaviour, Sandbox, ScriptedProber, settings};

const TOKEN: &str = "guard-token-0123456789";

/// A catalog that counts its reloads: a reload that happened passed the guard.
#[derive(Default)]
struct Counting(AtomicUsize);

impl PluginCatalog for Counting {
    fn plugins(&self) -> Vec<PluginView> {
        Vec::new()
    }

    fn reload(&self) -> BoxFuture<'_, Option<Result<ReloadView, String>>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Some(Ok(ReloadView::default())) })
    }
}

struct Api {
    router: Router,
    catalog: Arc<Counting>,
    _sandbox: Sandbox,
}

async fn api(access: Access) -> Api {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let settings = settings(60, 2);
    let worker = Worker::new(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings,
    );
    let catalog = Arc::new(Counting::default());
    let router = app(ApiState {
        store,
        prober: Arc::new(worker.on_demand()),
        plugins: catalog.clone(),
        access,
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    });
    Api {
        router,
        catalog,
        _sandbox: sandbox,
    }
}

fn no_token() -> Access {
    Access::new(None, None, false).unwrap()
}

fn public(url: &str) -> Option<PublicUrl> {
    Some(PublicUrl::parse(url).unwrap())
}

struct Reply {
    status: StatusCode,
    content_type: Option<String>,
    body: Value,
    text: String,
}

impl Api {
    /// `method uri` with the given headers (`Host`, `Origin`, a token).
    async fn send(
        &self,
        method: Method,
        uri: &str,
        host: Option<&str>,
        origin: Option<&str>,
        token: Option<&str>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Reply {
            status,
            content_type,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    async fn get(&self, uri: &str, host: Option<&str>) -> Reply {
        self.send(Method::GET, uri, host, None, None).await
    }

    async fn reload(&self, host: Option<&str>, origin: Option<&str>, token: Option<&str>) -> Reply {
        self.send(Method::POST, "/api/v1/plugins/reload", host, origin, token)
            .await
    }

    fn reloads(&self) -> usize {
        self.catalog.0.load(Ordering::SeqCst)
    }
}

fn check_problem(reply: &Reply, status: StatusCode, slug: &str, field: &str, words: &str) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(
        reply.content_type.as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        reply.body["type"],
        format!("https://vigil.dev/problems/{slug}")
    );
    assert_eq!(reply.body["status"], status.as_u16());
    assert_eq!(reply.body["field"], field);
    assert!(
        reply.body["detail"].as_str().unwrap().contains(words),
        "{words} not in {}",
        reply.text
    );
}

#[tokio::test]
async fn without_a_token_only_addresses_and_loopback_names_are_answered() {
    let api = api(no_token()).await;
    for host in [
        None,
        Some("127.0.0.1:8080"),
        Some("127.0.0.1"),
        Some("127.3.2.1:80"),
        Some("localhost"),
        Some("localhost:8080"),
        Some("vigil.localhost:8080"),
        Some("[::1]"),
        Some("[::1]:8080"),
        // An address is never what a rebinding page sends (it sends its own name).
        Some("10.0.0.1:8080"),
        Some("[::2]:8080"),
    ] {
        let reply = api.get("/api/v1/clusters", host).await;
        assert_eq!(reply.status, StatusCode::OK, "{host:?}: {}", reply.text);
    }
    for host in [
        "evil.example",
        "evil.example:8080",
        "127.0.0.1.evil.example",
        "localhost.evil.example:8080",
        "not a host",
    ] {
        let reply = api.get("/api/v1/clusters", Some(host)).await;
        check_problem(
            &reply,
            StatusCode::MISDIRECTED_REQUEST,
            "host-not-allowed",
            "header.host",
            "Host header",
        );
        // Every route, not only the API's: the metrics name the clusters too.
        let metrics = api.get("/metrics", Some(host)).await;
        assert_eq!(metrics.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
    }
    // A token vigil does not know is no token: the rule still holds.
    let reply = api
        .send(
            Method::GET,
            "/api/v1/clusters",
            Some("evil.example"),
            None,
            Some(TOKEN),
        )
        .await;
    assert_eq!(reply.status, StatusCode::MISDIRECTED_REQUEST);
    assert!(!reply.text.contains(TOKEN));
    let reload = api.reload(Some("evil.example"), None, None).await;
    assert_eq!(reload.status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(api.reloads(), 0, "nothing reloaded");

    // Liveness and readiness tell nothing and stay reachable as before.
    assert_eq!(
        api.get("/healthz", Some("evil.example")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        api.get("/readyz", Some("evil.example")).await.status,
        api.get("/readyz", Some("127.0.0.1")).await.status
    );
}

#[tokio::test]
async fn the_public_url_names_one_more_host() {
    let api = api(no_token().with_public_url(public("https://Vigil.Example.com/ui"))).await;
    for host in [
        "vigil.example.com",
        "VIGIL.example.com:8080",
        "127.0.0.1:8080",
    ] {
        let reply = api.get("/api/v1/clusters", Some(host)).await;
        assert_eq!(reply.status, StatusCode::OK, "{host}: {}", reply.text);
    }
    check_problem(
        &api.get("/api/v1/clusters", Some("evil.example")).await,
        StatusCode::MISDIRECTED_REQUEST,
        "host-not-allowed",
        "header.host",
        "VIGIL_PUBLIC_URL",
    );
}

#[tokio::test]
async fn a_valid_token_is_exempt_from_the_host_and_origin_rules() {
    let sandbox = tempfile::tempdir().unwrap();
    let tokens = sandbox.path().join("tokens");
    std::fs::write(&tokens, format!("# operators\nops:{TOKEN}\n")).unwrap();
    let api = api(Access::new(None, Some(&tokens), true).unwrap()).await;
    let reply = api
        .send(
            Method::GET,
            "/api/v1/clusters",
            Some("evil.example"),
            None,
            Some(TOKEN),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = api
        .reload(
            Some("evil.example"),
            Some("http://evil.example"),
            Some(TOKEN),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(api.reloads(), 1);
    // Without the token: refused, and nothing reloaded.
    let reply = api
        .reload(Some("127.0.0.1:8080"), Some("http://evil.example"), None)
        .await;
    check_problem(
        &reply,
        StatusCode::FORBIDDEN,
        "origin-not-allowed",
        "header.origin",
        "Origin",
    );
    let reply = api.reload(Some("127.0.0.1:8080"), None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.reloads(), 1);
    let wrong = api
        .reload(Some("127.0.0.1:8080"), None, Some("wrong-token-0123456789"))
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(!wrong.text.contains("wrong-token-0123456789"));
}

#[tokio::test]
async fn with_tokens_anonymous_reads_still_name_an_address_or_an_allowed_host() {
    // With tokens, anonymous reads are open by choice (VIGIL_API_READ_AUTH closes them), but
    // not to a page of another site that rebinds its own name to vigil's address.
    let guarded = api(Access::new(Some(TOKEN), None, false).unwrap()).await;
    check_problem(
        &guarded
            .get("/api/v1/clusters", Some("rebound.evil.example:8080"))
            .await,
        StatusCode::MISDIRECTED_REQUEST,
        "host-not-allowed",
        "header.host",
        "VIGIL_API_ALLOWED_HOSTS",
    );
    assert_eq!(
        guarded
            .get("/metrics", Some("vigil.internal:8080"))
            .await
            .status,
        StatusCode::MISDIRECTED_REQUEST
    );
    // Prometheus scrapes by the pod's address (the shipped ServiceMonitor: the pod's
    // port, no host name), and an operator may name a Service's DNS name. (This router
    // renders no metrics: 404, past the Host rule.)
    let scraped = guarded.get("/metrics", Some("10.244.1.7:8080")).await;
    assert_eq!(scraped.status, StatusCode::NOT_FOUND, "{}", scraped.text);
    let by_address = guarded
        .get("/api/v1/clusters", Some("10.244.1.7:8080"))
        .await;
    assert_eq!(by_address.status, StatusCode::OK, "{}", by_address.text);
    let named = api(Access::new(Some(TOKEN), None, false)
        .unwrap()
        .with_allowed_hosts(&["Vigil.Monitoring.svc".to_owned()]))
    .await;
    let reply = named
        .get("/api/v1/clusters", Some("vigil.monitoring.svc:8080"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // The token is proof enough, whatever the Host.
    let reply = guarded
        .send(
            Method::GET,
            "/api/v1/clusters",
            Some("rebound.evil.example"),
            None,
            Some(TOKEN),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn anonymous_readyz_says_ready_and_why_not_and_nothing_more() {
    let guarded = api(Access::new(Some(TOKEN), None, false).unwrap()).await;
    let anonymous = guarded.get("/readyz", Some("evil.example")).await;
    let fields: Vec<&String> = anonymous.body.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["ready", "reasons"], "{}", anonymous.text);
    let with_token = guarded
        .send(Method::GET, "/readyz", Some("127.0.0.1"), None, Some(TOKEN))
        .await;
    assert_eq!(with_token.status, anonymous.status);
    for detail in ["database", "discovered", "caught_up", "brake_holding"] {
        assert!(
            with_token.body.get(detail).is_some(),
            "{detail}: {}",
            with_token.text
        );
    }
    // Without any token configured (loopback only), every read shows it all.
    let open = api(no_token()).await;
    let reply = open.get("/readyz", Some("127.0.0.1")).await;
    assert!(reply.body.get("database").is_some(), "{}", reply.text);
}

#[test]
fn the_document_declares_the_guards_answers() {
    let doc = serde_json::to_value(vigil_api::openapi()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = &operation["responses"];
            let probe = matches!(path.as_str(), "/healthz" | "/readyz");
            assert_eq!(
                responses.get("421").is_some(),
                !probe,
                "{method} {path}: 421 (host-not-allowed) declared iff guarded"
            );
            let mutation = !matches!(method.as_str(), "get" | "head" | "options");
            assert_eq!(
                responses.get("403").is_some(),
                mutation,
                "{method} {path}: 403 (origin-not-allowed) declared iff a mutation"
            );
            if !probe {
                assert_eq!(
                    responses["421"]["content"]["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/Problem",
                    "{method} {path}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} operations");
}

#[tokio::test]
async fn a_change_from_another_origin_is_refused() {
    let api = api(no_token()).await;
    let host = Some("127.0.0.1:8080");
    for origin in [
        "http://evil.example",
        "http://evil.example:8080",
        "null",
        "https://127.0.0.1:8080",
        "http://127.0.0.1:9999",
        "http://localhost:8080",
        "file://",
    ] {
        let reply = api.reload(host, Some(origin), None).await;
        check_problem(
            &reply,
            StatusCode::FORBIDDEN,
            "origin-not-allowed",
            "header.origin",
            "Origin header",
        );
        for method in [Method::PUT, Method::PATCH, Method::DELETE] {
            let reply = api
                .send(
                    method.clone(),
                    "/api/v1/clusters/x",
                    host,
                    Some(origin),
                    None,
                )
                .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{method} {origin}");
        }
    }
    assert_eq!(api.reloads(), 0, "nothing reloaded");

    // Same origin, and clients that send no Origin (curl, the CLI), go through.
    for origin in [
        Some("http://127.0.0.1:8080"),
        Some("HTTP://127.0.0.1:8080"),
        None,
    ] {
        let reply = api.reload(host, origin, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{origin:?}: {}", reply.text);
    }
    assert_eq!(
        api.reload(Some("localhost"), Some("http://localhost:80"), None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(api.reloads(), 4);
    // Reads are not judged by their Origin (a browser keeps the answer from the page).
    let read = api
        .send(
            Method::GET,
            "/api/v1/clusters",
            host,
            Some("http://evil.example"),
            None,
        )
        .await;
    assert_eq!(read.status, StatusCode::OK);
}

#[tokio::test]
async fn behind_a_proxy_the_public_origin_is_vigils_own() {
    let api = api(no_token().with_public_url(public("https://vigil.example.com"))).await;
    // The proxy forwards to loopback; the browser's page is the public URL's.
    let reply = api
        .reload(
            Some("127.0.0.1:8080"),
            Some("https://vigil.example.com"),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = api
        .reload(
            Some("vigil.example.com"),
            Some("https://vigil.example.com:443"),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // Another scheme or host is another origin (`http://` and the Host is vigil's own too).
    for origin in ["http://vigil.example.com", "https://evil.example"] {
        let reply = api.reload(Some("127.0.0.1:8080"), Some(origin), None).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{origin}");
    }
    assert_eq!(api.reloads(), 2);
}

#[test]
fn a_tokens_file_without_a_token_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty", ""), ("comments", "# none yet\n\n   \n# ops:\n")] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let error = Access::new(Some(TOKEN), Some(&file), true).unwrap_err();
        assert!(matches!(error, TokensError::Empty { .. }), "{error}");
        assert!(error.to_string().contains(&file.display().to_string()));
    }
    let error = Access::new(None, Some(dir.path()), false).unwrap_err();
    assert!(matches!(error, TokensError::Read { .. }), "{error}");
}

/// `vigil serve` with `env` must stop at once with exit 2, naming each of `names`, writing
/// nothing in its working directory.
fn check_refused(env: &[(&str, &Path)], names: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = vigil(dir.path());
    command.arg("serve");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{env:?}: {message}");
    assert!(!message.contains("hunter2"), "{env:?}: {message}");
    for name in names {
        assert!(message.contains(name), "{env:?}: {name} not in {message}");
    }
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        written.is_empty(),
        "{env:?}: nothing written, found {written:?}"
    );
}

#[test]
fn serve_refuses_a_tokens_file_that_yields_no_token() {
    let files = tempfile::tempdir().unwrap();
    let empty = files.path().join("empty-tokens");
    std::fs::write(&empty, "").unwrap();
    let comments = files.path().join("comment-tokens");
    std::fs::write(&comments, "# the operators' tokens\n\n# ops:\n").unwrap();
    let directory = files.path().join("tokens.d");
    std::fs::create_dir(&directory).unwrap();
    let missing = files.path().join("missing-tokens");
    for file in [&empty, &comments, &directory, &missing] {
        let shown = file.display().to_string();
        check_refused(
            &[("VIGIL_API_TOKENS_FILE", file)],
            &["VIGIL_API_TOKENS_FILE", &shown],
        );
        // Read auth does not make it start either.
        check_refused(
            &[
                ("VIGIL_API_TOKENS_FILE", file),
                ("VIGIL_API_READ_AUTH", Path::new("true")),
            ],
            &["VIGIL_API_TOKENS_FILE", &shown],
        );
    }
    // Nor does a token beside it, nor a non-loopback listener.
    check_refused(
        &[
            ("VIGIL_API_TOKENS_FILE", &empty),
            ("VIGIL_API_TOKEN", Path::new(TOKEN)),
        ],
        &["VIGIL_API_TOKENS_FILE", &empty.display().to_string()],
    );
    check_refused(
        &[
            ("VIGIL_API_TOKENS_FILE", &empty),
            ("VIGIL_LISTEN", Path::new("0.0.0.0:18080")),
        ],
        &["VIGIL_API_TOKENS_FILE", &empty.display().to_string()],
    );
}

#[test]
fn serve_refuses_a_public_url_that_is_not_an_absolute_http_url() {
    for url in [
        "vigil.example.com",
        "ftp://vigil.example.com",
        "https://",
        "http://vigil.example.com:http",
    ] {
        check_refused(
            &[("VIGIL_PUBLIC_URL", Path::new(url))],
            &["VIGIL_PUBLIC_URL", url],
        );
    }
    // A password in it is not repeated.
    check_refused(
        &[(
            "VIGIL_PUBLIC_URL",
            Path::new("https://ops:hunter2@vigil.example.com"),
        )],
        &["VIGIL_PUBLIC_URL", "https://***@vigil.example.com"],
    );
}

/// One HTTP/1.1 request over a fresh connection: the status and the body.
fn raw(address: &str, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn get(address: &str, host: &str) -> (u16, String) {
    raw(
        address,
        &format!("GET /api/v1/clusters HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}

fn post(address: &str, host: &str, origin: Option<&str>) -> (u16, String) {
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    raw(
        address,
        &format!(
            "POST /api/v1/plugins/reload HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
}

#[test]
fn a_running_server_without_token_guards_host_and_origin_and_the_cli_still_works() {
    let dir = tempfile::tempdir().unwrap();
    // No plugin directory, no kubeconfig: an engine with nothing to probe.
    let server = process::serve(dir.path()).start_blocking();
    let address = server.api().to_string();
    let port = address.rsplit_once(':').unwrap().1;

    let (status, body) = get(&address, "evil.example");
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("host-not-allowed"), "{body}");
    assert_eq!(get(&address, &address).0, 200);
    assert_eq!(get(&address, &format!("localhost:{port}")).0, 200);

    // Cross-origin: refused before the handler (which would answer 409: no plugin directory).
    let (status, body) = post(&address, &address, Some("http://evil.example"));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("origin-not-allowed"), "{body}");
    let (status, body) = post(&address, &address, Some(&format!("http://{address}")));
    assert_eq!(status, 409, "same origin passes: {body}");
    let (status, body) = post(&address, &address, None);
    assert_eq!(status, 409, "no Origin passes: {body}");

    // The CLI sends the Host of VIGIL_SERVER and no Origin.
    let output = vigil(dir.path())
        .args(["status", "-o", "json"])
        .env("VIGIL_SERVER", format!("http://{address}"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "vigil status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let clusters: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(clusters.is_array(), "{clusters}");

    server.stop();
}
