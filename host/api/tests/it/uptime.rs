//! What a status page reads through the API: a cluster's uptime, its probe latency and
//! the fleet's summary, from a real SQLite store, their bad queries, read auth, and their
//! place in the OpenAPI document.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use vigil_api::{Access, ApiState, Readiness, app};
use vigil_decision::{PolicyOverrides, ProbeOutcome, Timestamp};
use vigil_engine::worker::Worker;
use vigil_store::{ProbeResult, Store};
use vigil_test_support::api::{NoCatalog, router};
use vigil_test_support::engine::{Behaviour, Sandbox, ScriptedProber, refused, settings};

const HOUR: i64 = 3_600_000;

async fn get(router: &Router, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = Request::builder().uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn register(store: &Store, name: &str, at: Timestamp) -> vigil_decision::ClusterId {
    store
        .register_cluster(
            name,
            "https://127.0.0.1:6443",
            &format!("/k/{name}.yaml#{name}"),
            &PolicyOverrides::default(),
            at,
        )
        .await
        .unwrap()
}

async fn probe(
    store: &Store,
    cluster: vigil_decision::ClusterId,
    outcome: &ProbeOutcome,
    at: Timestamp,
    millis: u64,
) {
    let result = ProbeResult {
        cluster,
        outcome,
        by: None,
        now: at,
        next_due: at.plus_secs(300),
        claim: None,
        duration: Some(Duration::from_millis(millis)),
    };
    let applied = store
        .apply_probes(&[result], &settings(300, 2).apply())
        .await
        .unwrap();
    assert!(matches!(&applied[0], Ok(Some(_))));
}

/// A cluster registered three hours ago, ONLINE from 2.5 hours ago, watched by an engine
/// running for the last two hours: its uptime is 100 % of the watched time, the rest of
/// every window no data.
#[tokio::test]
async fn uptime_splits_each_window_and_day_by_what_vigil_watched() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let now = store.now().await.unwrap();
    let id = register(&store, "prod-eu", now.plus_millis(-3 * HOUR)).await;
    probe(
        &store,
        id,
        &ProbeOutcome::Healthy,
        now.plus_millis(-5 * HOUR / 2),
        40,
    )
    .await;
    let run = store
        .open_coverage("", now.plus_millis(-2 * HOUR))
        .await
        .unwrap();
    store.extend_coverage(run, now).await.unwrap();
    let router = router(store.clone());

    let (status, body) = get(&router, "/api/v1/clusters/prod-eu/uptime", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cluster"], "prod-eu");
    assert_eq!(body["status"], "ONLINE");
    let windows: Vec<&str> = body["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(windows, ["24h", "7d", "30d", "90d"]);
    for window in body["windows"].as_array().unwrap() {
        // Two hours watched, give or take the milliseconds between the store's clock
        // here and in the request.
        let online = window["online_seconds"].as_u64().unwrap();
        assert!((7_199..=7_201).contains(&online), "{window}");
        assert_eq!(window["offline_seconds"], 0, "{window}");
        assert_eq!(window["unknown_seconds"], 0, "{window}");
        assert_eq!(window["uptime_percent"], 100.0, "{window}");
        let parts: u64 = ["online", "offline", "unknown", "no_data"]
            .iter()
            .map(|class| window[format!("{class}_seconds")].as_u64().unwrap())
            .sum();
        let seconds = window["seconds"].as_u64().unwrap();
        assert!(seconds - parts <= 3, "whole seconds add up: {window}");
    }
    assert_eq!(body["windows"][0]["seconds"], 86_400);
    let days = body["days"].as_array().unwrap();
    assert_eq!(days.len(), 90);
    let today = &days[89];
    assert_eq!(today["date"], &body["at"].as_str().unwrap()[..10]);
    assert_eq!(today["to"], body["at"]);
    assert_eq!(days[0]["no_data_seconds"], 86_400, "before vigil ran");
    assert_eq!(
        days[0]["uptime_percent"],
        Value::Null,
        "nothing to judge by"
    );

    let (status, body) = get(&router, "/api/v1/clusters/prod-eu/uptime?days=7", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["days"].as_array().unwrap().len(), 7);
    assert_eq!(body["windows"].as_array().unwrap().len(), 4);

    for (uri, status, field) in [
        (
            "/api/v1/clusters/prod-eu/uptime?days=0",
            StatusCode::BAD_REQUEST,
            Some("query.days"),
        ),
        (
            "/api/v1/clusters/prod-eu/uptime?days=401",
            StatusCode::BAD_REQUEST,
            Some("query.days"),
        ),
        (
            "/api/v1/clusters/prod-eu/uptime?days=many",
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            "/api/v1/clusters/prod-eu/uptime?window=1d",
            StatusCode::BAD_REQUEST,
            None,
        ),
        ("/api/v1/clusters/nope/uptime", StatusCode::NOT_FOUND, None),
    ] {
        let (got, body) = get(&router, uri, None).await;
        assert_eq!(got, status, "{uri}: {body}");
        if let Some(field) = field {
            assert_eq!(body["field"], field, "{uri}: {body}");
        }
    }
}

#[tokio::test]
async fn latency_lists_the_conclusive_probes_per_bucket() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let now = store.now().await.unwrap();
    // The start of the bucket before this one, and a minute into it.
    let bucket = now.0 - now.0.rem_euclid(300_000) - 300_000;
    let id = register(&store, "a", Timestamp(bucket - HOUR)).await;
    probe(
        &store,
        id,
        &ProbeOutcome::Healthy,
        Timestamp(bucket + 60_000),
        100,
    )
    .await;
    probe(&store, id, &refused(), Timestamp(bucket + 120_000), 300).await;
    let inconclusive = ProbeOutcome::Inconclusive {
        class: vigil_decision::ReasonClass::PluginFault,
        message: "trapped".into(),
    };
    probe(
        &store,
        id,
        &inconclusive,
        Timestamp(bucket + 180_000),
        9_000,
    )
    .await;
    let router = router(store);

    let (status, body) = get(&router, "/api/v1/clusters/a/latency", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cluster"], "a");
    assert_eq!(body["bucket_seconds"], 300);
    let buckets = body["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 1, "{body}");
    assert_eq!(buckets[0]["probes"], 2);
    assert_eq!(buckets[0]["mean_ms"], 200.0);
    assert_eq!(buckets[0]["max_ms"], 300);
    assert_eq!(buckets[0]["total_ms"], 400);
    assert_eq!(
        buckets[0]["start"],
        vigil_api::rfc3339(Timestamp(bucket)),
        "{body}"
    );

    let (_, later) = get(
        &router,
        "/api/v1/clusters/a/latency?since=2999-01-01T00:00:00Z",
        None,
    )
    .await;
    assert_eq!(later["buckets"], Value::Array(Vec::new()));
    for uri in [
        "/api/v1/clusters/a/latency?since=yesterday",
        "/api/v1/clusters/a/latency?since=2026-01-01",
    ] {
        let (status, body) = get(&router, uri, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert_eq!(body["field"], "query.since", "{body}");
    }
    let (status, _) = get(&router, "/api/v1/clusters/nope/latency", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_summary_counts_the_fleet_by_status_and_label() {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let now = store.now().await.unwrap();
    let mut ids = Vec::new();
    for (name, labels) in [
        ("a", r#"{"env":"prod","region":"eu"}"#),
        ("b", r#"{"env":"prod","region":"us"}"#),
        ("c", r#"{"env":"dev"}"#),
    ] {
        ids.push(register(&store, name, now.plus_millis(-HOUR)).await);
        sqlx::query("UPDATE clusters SET labels = $1 WHERE name = $2")
            .bind(labels)
            .bind(name)
            .execute(store.pool())
            .await
            .unwrap();
    }
    probe(
        &store,
        ids[0],
        &ProbeOutcome::Healthy,
        now.plus_millis(-50 * 60_000),
        10,
    )
    .await;
    probe(
        &store,
        ids[1],
        &ProbeOutcome::Healthy,
        now.plus_millis(-50 * 60_000),
        10,
    )
    .await;
    probe(
        &store,
        ids[1],
        &refused(),
        now.plus_millis(-40 * 60_000),
        10,
    )
    .await;
    probe(
        &store,
        ids[1],
        &refused(),
        now.plus_millis(-30 * 60_000),
        10,
    )
    .await;
    let router = router(store);

    let (status, body) = get(&router, "/api/v1/summary", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["clusters"], 3);
    assert_eq!(
        body["statuses"],
        serde_json::json!({ "ONLINE": 1, "OFFLINE": 1, "UNKNOWN": 1 })
    );
    assert_eq!(body["brake_holding"], false);
    let prod = body["labels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "env" && g["value"] == "prod")
        .unwrap();
    assert_eq!(prod["clusters"], 2);
    assert_eq!(
        prod["statuses"],
        serde_json::json!({ "ONLINE": 1, "OFFLINE": 1, "UNKNOWN": 0 })
    );
    assert_eq!(body["labels"].as_array().unwrap().len(), 4);

    let (_, regions) = get(&router, "/api/v1/summary?label=region", None).await;
    let keys: Vec<(&str, &str)> = regions["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].as_str().unwrap(), g["value"].as_str().unwrap()))
        .collect();
    assert_eq!(keys, [("region", "eu"), ("region", "us")]);
    let (status, _) = get(&router, "/api/v1/summary?group=env", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// With read auth, these reads need a token like every other.
#[tokio::test]
async fn read_auth_covers_the_status_page_reads() {
    const TOKEN: &str = "ops-token-0123456789";
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    register(&store, "a", store.now().await.unwrap()).await;
    let settings = settings(60, 2);
    let worker = Worker::new(
        store.clone(),
        ScriptedProber::new(Behaviour::healthy()),
        settings,
    );
    let router = app(ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(NoCatalog),
        access: Access::new(Some(TOKEN), None, true).unwrap(),
        credential_roots: Vec::new().into(),
        defaults: settings.defaults,
        readiness: Arc::new(Readiness::default()),
        metrics: None,
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    });
    for uri in [
        "/api/v1/summary",
        "/api/v1/clusters/a/uptime",
        "/api/v1/clusters/a/latency",
    ] {
        let (status, body) = get(&router, uri, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}: {body}");
        let (status, body) = get(&router, uri, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    }
}

#[test]
fn the_openapi_document_describes_the_status_page_reads() {
    let doc = serde_json::to_value(vigil_api::openapi()).unwrap();
    for path in [
        "/api/v1/clusters/{name}/uptime",
        "/api/v1/clusters/{name}/latency",
        "/api/v1/summary",
    ] {
        let get = &doc["paths"][path]["get"];
        assert!(get.is_object(), "{path} is documented");
        assert!(get["responses"]["200"].is_object(), "{path}");
    }
    for schema in ["UptimeView", "LatencyView", "SummaryView", "UptimeSpanView"] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "{schema} is documented"
        );
    }
}
