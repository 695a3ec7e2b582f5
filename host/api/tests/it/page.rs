//! The status page's files through `oneshot`: served without a token even with read auth
//! (they hold no data) while every read of data still needs one, under the page's headers;
//! the Host rule still guards them; and they are not part of the OpenAPI document.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;
use vigil_api::{Access, ApiState, Readiness, app};
use vigil_engine::worker::Worker;
use vigil_test_support::api::NoCatalog;
use vigil_test_support::engine::{Behaviour, Sandbox, ScriptedProber, settings};

const TOKEN: &str = "page-token-0123456789";

async fn router(sandbox: &Sandbox, access: Access) -> Router {
    let store = sandbox.store().await;
    let settings = settings(60, 2);
    let worker = Worker::new(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings,
    );
    app(ApiState {
        store,
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access,
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    })
}

/// Sends `method uri` with the `Host` given and no token; the status, the headers and the body.
async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    host: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, host)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn the_page_needs_no_token_and_data_still_does() {
    let sandbox = Sandbox::new();
    let router = router(&sandbox, Access::new(Some(TOKEN), None, true).unwrap()).await;
    let local = "127.0.0.1:8080";
    for (path, content_type, marker) in [
        ("/", "text/html; charset=utf-8", "<script type=\"module\""),
        (
            "/assets/app.js",
            "text/javascript; charset=utf-8",
            "Authorization",
        ),
        (
            "/assets/app.css",
            "text/css; charset=utf-8",
            "prefers-color-scheme",
        ),
    ] {
        let (status, headers, body) = send(&router, Method::GET, path, local).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], content_type, "{path}");
        assert!(body.contains(marker), "{path}");
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(policy.starts_with("default-src 'self'; script-src 'self'; style-src 'self';"));
        assert!(policy.contains("frame-ancestors 'none'"));
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer");
        let (status, _, _) = send(&router, Method::HEAD, path, local).await;
        assert_eq!(status, StatusCode::OK, "HEAD {path}");
    }
    // Every read of data, and any other path, still needs the token; so does a change.
    for (method, path) in [
        (Method::GET, "/api/v1/clusters"),
        (Method::GET, "/api/v1/events"),
        (Method::GET, "/assets/other.js"),
        (Method::GET, "/assets/app.js/x"),
        (Method::POST, "/"),
    ] {
        let (status, _, _) = send(&router, method.clone(), path, local).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
}

#[tokio::test]
async fn the_host_rule_guards_the_page_too() {
    let sandbox = Sandbox::new();
    let router = router(&sandbox, Access::new(None, None, false).unwrap()).await;
    let (status, _, _) = send(&router, Method::GET, "/", "localhost:8080").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = send(&router, Method::GET, "/", "rebound.example:8080").await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
}

#[test]
fn the_page_is_not_part_of_the_api_document() {
    let doc = vigil_api::openapi();
    assert!(!doc.paths.paths.contains_key("/"));
    assert!(
        doc.paths
            .paths
            .keys()
            .all(|path| !path.starts_with("/assets"))
    );
}
