//! `vigil_ready` in `/metrics` is `/readyz`'s own judgement: 0 while `/readyz` answers 503
//! (discovery not done, clusters overdue at start-up not probed yet), 1 once it answers
//! 200, read through `oneshot` at each step.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use vigil_api::{Access, ApiState, Readiness, app};
use vigil_decision::{PolicyOverrides, ProbeOutcome, Timestamp};
use vigil_engine::metrics::Metrics;
use vigil_engine::worker::Worker;

use vigil_test_support::api::NoCatalog;
use vigil_test_support::engine::{Behaviour, Sandbox, ScriptedProber, settings};

async fn get(router: &Router, uri: &str) -> (StatusCode, String) {
    let request = Request::builder().uri(uri).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The `vigil_ready` sample of a scrape, and its family's type line.
fn vigil_ready(metrics: &str) -> &str {
    assert!(
        metrics.contains("# TYPE vigil_ready gauge\n"),
        "vigil_ready is a gauge:\n{metrics}"
    );
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("vigil_ready "))
        .unwrap_or_else(|| panic!("no vigil_ready sample:\n{metrics}"))
}

/// `/readyz`'s status and `vigil_ready` agree: 200 with 1, 503 with 0.
async fn check(router: &Router, ready: bool, reason: Option<&str>) {
    let (status, body) = get(router, "/readyz").await;
    let (metrics_status, metrics) = get(router, "/metrics").await;
    assert_eq!(metrics_status, StatusCode::OK, "{metrics}");
    let expected = if ready {
        (StatusCode::OK, "1")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "0")
    };
    assert_eq!((status, vigil_ready(&metrics)), expected, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["ready"], ready, "{body}");
    if let Some(reason) = reason {
        assert_eq!(body["reasons"][0], reason, "{body}");
    }
}

#[tokio::test]
async fn vigil_ready_follows_what_readyz_answers() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let settings = settings(60, 2);
    let metrics = Metrics::new(false);
    let worker = Worker::new(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings,
    )
    .with_metrics(metrics.clone());
    let readiness = Arc::new(Readiness::default());
    let router = app(ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: Access::new(None, None, false).unwrap(),
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::clone(&readiness),
        metrics: Some(Arc::new(metrics)),
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    });

    check(&router, false, Some("the first discovery has not finished")).await;

    // Discovery found a cluster that is still UNKNOWN and unprobed.
    let id = store
        .register_cluster(
            "unprobed",
            "https://127.0.0.1:6443",
            "/k/unprobed.yaml#unprobed",
            &PolicyOverrides::default(),
            Timestamp::from_secs(1_000),
        )
        .await
        .unwrap();
    readiness.started.store(2_000_000, Ordering::Release);
    readiness.discovered.store(true, Ordering::Release);
    check(
        &router,
        false,
        Some("clusters overdue at start-up are still being probed"),
    )
    .await;

    // Its first probe lands: ready, and the gauge says so.
    store
        .apply_probe(
            id,
            &ProbeOutcome::Healthy,
            Timestamp::from_secs(3_000),
            Timestamp::from_secs(3_060),
            &settings.apply(),
        )
        .await
        .unwrap();
    check(&router, true, None).await;
    store.close().await;
}
