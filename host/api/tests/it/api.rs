//! The REST API through `oneshot`, without a socket: every route, each 409 guard and its
//! UNKNOWN counterpart, problem+json bodies, auth, markers cleared by the platform's
//! writes, bad input naming the field with nothing written, the OpenAPI document, and
//! the event stream with resumption. The store is a real SQLite file; probes go through
//! the worker's on-demand path with a scripted prober.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use vigil_api::{
    Access, ApiState, BoxFuture, PluginCatalog, PluginView, ProbedByView, Readiness, ReloadView,
    app,
};
use vigil_decision::{ClusterStatus, ProbeOutcome, Timestamp};
use vigil_domain::probe::wall_clock;
use vigil_engine::metrics::Metrics;
use vigil_engine::worker::{Worker, WorkerSettings};
use vigil_store::Store;

use vigil_test_support::engine as support;
use vigil_test_support::wait::until_async_true;

use support::{Behaviour, Sandbox, ScriptedProber, refused, settings};

const TOKEN: &str = "ops-token-0123456789";
const OTHER: &str = "ci-token-abcdefghijk";

#[derive(Default)]
struct Catalog {
    reloads: std::sync::atomic::AtomicUsize,
}

impl PluginCatalog for Catalog {
    fn plugins(&self) -> Vec<PluginView> {
        vec![PluginView {
            name: "kubeconfig-file".to_owned(),
            state: "active".to_owned(),
            generation: Some(2),
            world: Some("probe".to_owned()),
            self_name: Some("kubeconfig-file".to_owned()),
            version: Some("0.1.0".to_owned()),
            source: Some("embedded".to_owned()),
            package: "vigil:plugin@0.1.0".to_owned(),
            hash: Some("ab".repeat(32)),
            schemes: vec!["file".to_owned()],
            priority: 0,
            grants: vec!["credentials".to_owned(), "http".to_owned()],
            secret_namespaces: vec!["vigil".to_owned()],
            allowed_hosts: Vec::new(),
            credential_hosts: Default::default(),
            memory_mib: 64,
            probes: 3,
            faults: 1,
            accepts: 2,
            previous_generation: None,
            candidate_generation: None,
            probation: None,
            last_failure: None,
        }]
    }

    fn reload(&self) -> BoxFuture<'_, Option<Result<ReloadView, String>>> {
        let count = self
            .reloads
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            Some(Ok(ReloadView {
                promoted: vec![ProbedByView {
                    plugin: "kubeconfig-file".to_owned(),
                    generation: 2 + count as u64,
                }],
                ..ReloadView::default()
            }))
        })
    }
}

struct Api {
    router: Router,
    store: Store,
    prober: ScriptedProber,
    settings: WorkerSettings,
    sandbox: Sandbox,
}

async fn api_with(read_auth: bool) -> Api {
    let sandbox = Sandbox::new();
    let store = sandbox.store().await;
    let tokens = sandbox.dir.path().join("tokens");
    std::fs::write(&tokens, format!("# operators\nci:{OTHER}\n")).unwrap();
    let access = Access::new(Some(TOKEN), Some(&tokens), read_auth).unwrap();
    let prober = ScriptedProber::new(Behaviour::healthy());
    let settings = settings(60, 2);
    let metrics = Metrics::new(false);
    let worker = Worker::new(store.clone(), prober.clone(), settings).with_metrics(metrics.clone());
    let readiness = Arc::new(Readiness::default());
    let state = ApiState {
        store: store.clone(),
        prober: Arc::new(worker.on_demand()),
        plugins: Arc::new(Catalog::default()),
        access,
        credential_roots: vec![sandbox.kubeconfigs()].into(),
        defaults: settings.defaults,
        readiness,
        metrics: Some(Arc::new(metrics)),
        wake: worker.handle(),
        views: Arc::default(),
        registration_allow: Default::default(),
        events: Arc::default(),
    };
    Api {
        router: app(state),
        store,
        prober,
        settings,
        sandbox,
    }
}

async fn api() -> Api {
    api_with(false).await
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    text: String,
}

impl Api {
    async fn send(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body)),
            None => request.body(Body::empty()),
        }
        .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, None).await
    }

    async fn post(&self, uri: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, Some(TOKEN), Some(body.to_string()))
            .await
    }

    fn reference(&self, name: &str) -> String {
        format!(
            "{}/{name}.yaml#{name}",
            self.sandbox.kubeconfigs().display()
        )
    }

    async fn register(&self, name: &str) -> Reply {
        let reply = self
            .post(
                "/api/v1/clusters",
                json!({
                    "name": name,
                    "endpoint": "https://127.0.0.1:6443",
                    "kubeconfig_secret_ref": self.reference(name),
                }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply
    }

    async fn app(&self, name: &str, cluster: &str) {
        let reply = self
            .post("/api/v1/apps", json!({ "name": name, "cluster": cluster }))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }

    async fn deploy(&self, app: &str) -> Reply {
        self.post(
            "/api/v1/deployments",
            json!({ "app": app, "version": "1.2.3" }),
        )
        .await
    }

    /// Applies outcomes through the store's real path, one interval apart so that each
    /// failure counts (docs/rules.md#failure-spacing).
    async fn apply(&self, cluster: &str, outcomes: &[ProbeOutcome]) {
        let id = self.store.cluster(cluster).await.unwrap().id;
        let start = wall_clock().0;
        for (i, outcome) in outcomes.iter().enumerate() {
            let now = Timestamp(start + 60_000 * i64::try_from(i).unwrap());
            self.store
                .apply_probe(
                    id,
                    outcome,
                    now,
                    Timestamp(now.0 + 60_000),
                    &self.settings.apply(),
                )
                .await
                .unwrap();
        }
    }

    async fn make_offline(&self, cluster: &str) {
        self.apply(cluster, &[ProbeOutcome::Healthy, refused(), refused()])
            .await;
        assert_eq!(
            self.store.cluster(cluster).await.unwrap().health.status,
            ClusterStatus::Offline
        );
    }
}

/// Asserts a problem+json reply of `status` and `slug`, naming `field` when given.
fn check_problem(reply: &Reply, status: StatusCode, slug: &str, field: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(
        reply.headers.get(header::CONTENT_TYPE).unwrap(),
        "application/problem+json",
        "{}",
        reply.text
    );
    assert_eq!(
        reply.body["type"],
        format!("https://vigil.dev/problems/{slug}"),
        "{}",
        reply.text
    );
    assert_eq!(reply.body["status"], status.as_u16());
    assert!(reply.body["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(reply.body["detail"].as_str().is_some_and(|t| !t.is_empty()));
    if let Some(field) = field {
        assert_eq!(reply.body["field"], field, "{}", reply.text);
    }
}

#[tokio::test]
async fn clusters_register_get_list_filter_and_page() {
    let api = api().await;
    for name in ["alpha", "beta", "gamma"] {
        api.register(name).await;
    }
    let reply = api
        .send(
            Method::PATCH,
            "/api/v1/clusters/beta",
            Some(TOKEN),
            Some(
                json!({ "labels": { "env": "prod" }, "policy": { "interval_seconds": 30 } })
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["labels"]["env"], "prod");
    assert_eq!(reply.body["policy"]["interval_seconds"], 30);
    assert_eq!(
        reply.body["policy"]["failure_threshold"], 2,
        "the default in force"
    );
    assert_eq!(
        reply.body["policy_overrides"],
        json!({ "interval_seconds": 30 })
    );

    let one = api.get("/api/v1/clusters/alpha").await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.body["status"], "UNKNOWN");
    assert_eq!(one.body["source"], "manual");
    assert_eq!(one.body["reference"], api.reference("alpha"));

    let page = api.get("/api/v1/clusters?limit=2").await;
    let names: Vec<&str> = page.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(page.body["next"], "beta");
    let rest = api.get("/api/v1/clusters?limit=2&after=beta").await;
    assert_eq!(rest.body["items"][0]["name"], "gamma");
    assert_eq!(rest.body["next"], Value::Null);

    let labelled = api.get("/api/v1/clusters?label=env%3Dprod").await;
    assert_eq!(labelled.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(labelled.body["items"][0]["name"], "beta");

    api.make_offline("gamma").await;
    let offline = api.get("/api/v1/clusters?status=OFFLINE").await;
    assert_eq!(offline.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(offline.body["items"][0]["name"], "gamma");
    assert_eq!(offline.body["items"][0]["reason_class"], "refused");
    let manual = api
        .get("/api/v1/clusters?source=manual&status=UNKNOWN")
        .await;
    assert_eq!(manual.body["items"].as_array().unwrap().len(), 2);

    let history = api.get("/api/v1/clusters/beta/history").await;
    assert_eq!(history.status, StatusCode::OK);
    let kinds: Vec<&str> = history.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["cluster-updated", "cluster-registered"],
        "newest first"
    );
    assert_eq!(
        history.body["items"][0]["actor"], "default",
        "the token's name"
    );
    let gamma = api.get("/api/v1/clusters/gamma/history?limit=1").await;
    assert_eq!(gamma.body["items"].as_array().unwrap().len(), 1);
    let older = gamma.body["next"].as_i64().expect("a next page");
    let rest = api
        .get(&format!(
            "/api/v1/clusters/gamma/history?before={older}&limit=1000"
        ))
        .await;
    assert!(
        rest.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["id"].as_i64().unwrap() < older),
        "{}",
        rest.text
    );
    let all = api.get("/api/v1/clusters/gamma/history").await;
    assert!(
        all.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "status-changed" && e["detail"]["to"] == "OFFLINE"),
        "{}",
        all.text
    );
}

/// The list page (assembled from views kept while their rows are unchanged) must be the
/// same as each cluster read alone, after any kind of write.
async fn assert_page_is_current(api: &Api, when: &str) -> Value {
    let page = api.get("/api/v1/clusters?limit=1000").await;
    assert_eq!(page.status, StatusCode::OK, "{when}: {}", page.text);
    let mut alone = Vec::new();
    for item in page.body["items"].as_array().unwrap() {
        let name = item["name"].as_str().unwrap();
        alone.push(api.get(&format!("/api/v1/clusters/{name}")).await.body);
    }
    assert_eq!(
        page.body,
        json!({ "items": alone, "next": null }),
        "{when}: the page differs from the clusters read one by one"
    );
    page.body
}

#[tokio::test]
async fn list_pages_show_every_write_made_since_the_last_page() {
    let api = api().await;
    for name in ["alpha", "beta", "gamma"] {
        api.register(name).await;
    }
    assert_page_is_current(&api, "registered").await;
    assert_page_is_current(&api, "again, unchanged").await;

    let reply = api
        .send(
            Method::PATCH,
            "/api/v1/clusters/beta",
            Some(TOKEN),
            Some(json!({ "labels": { "env": "prod" } }).to_string()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let page = assert_page_is_current(&api, "labels changed").await;
    assert_eq!(page["items"][1]["labels"]["env"], "prod");

    api.make_offline("gamma").await;
    let page = assert_page_is_current(&api, "probed").await;
    assert_eq!(page["items"][2]["status"], "OFFLINE");

    // An outcome that changes nothing but the last outcome still shows.
    api.apply(
        "alpha",
        &[ProbeOutcome::Inconclusive {
            class: vigil_decision::ReasonClass::PluginFault,
            message: "the plugin trapped".to_owned(),
        }],
    )
    .await;
    let page = assert_page_is_current(&api, "inconclusive").await;
    assert_eq!(page["items"][0]["last_outcome"], "inconclusive");

    // A deleted cluster's id is given again to the next one registered (SQLite reuses the
    // largest rowid): its kept view must not be served for the new cluster.
    let gamma = api.store.cluster("gamma").await.unwrap().id;
    register_again(&api, "gamma", "https://127.0.0.2:6443").await;
    assert_eq!(
        api.store.cluster("gamma").await.unwrap().id,
        gamma,
        "the id is reused"
    );
    let page = assert_page_is_current(&api, "deleted and registered again").await;
    assert_eq!(page["items"][2]["status"], "UNKNOWN");
    assert_eq!(page["items"][2]["endpoint"], "https://127.0.0.2:6443");

    // The same with a cluster never written after its registration: the new row must not
    // start at the revision the old one had when its view was kept.
    api.register("delta").await;
    assert_page_is_current(&api, "delta registered").await;
    register_again(&api, "delta", "https://127.0.0.3:6443").await;
    let page = assert_page_is_current(&api, "delta registered again").await;
    assert_eq!(page["items"][2]["name"], "delta");
    assert_eq!(page["items"][2]["endpoint"], "https://127.0.0.3:6443");
}

/// Deletes cluster `name` and registers it again at `endpoint`.
async fn register_again(api: &Api, name: &str, endpoint: &str) {
    let reply = api
        .send(
            Method::DELETE,
            &format!("/api/v1/clusters/{name}"),
            Some(TOKEN),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = api
        .post(
            "/api/v1/clusters",
            json!({
                "name": name,
                "endpoint": endpoint,
                "kubeconfig_secret_ref": api.reference(name),
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn deployments_and_moves_to_an_offline_cluster_are_refused_but_allowed_when_unknown() {
    let api = api().await;
    api.register("down").await;
    api.register("new").await;
    api.app("shop", "down").await;
    api.app("cart", "new").await;
    assert_eq!(api.deploy("shop").await.status, StatusCode::CREATED);
    api.make_offline("down").await;
    let shop = api.get("/api/v1/apps/shop").await;
    assert_eq!(shop.body["status"], "DEGRADED");
    assert!(
        shop.body["degraded_by_outage"].is_i64(),
        "the cascade set the marker"
    );

    // Deploy to OFFLINE: 409; to UNKNOWN: allowed.
    check_problem(
        &api.deploy("shop").await,
        StatusCode::CONFLICT,
        "cluster-offline",
        None,
    );
    let cart = api.deploy("cart").await;
    assert_eq!(cart.status, StatusCode::CREATED, "{}", cart.text);
    assert_eq!(cart.body["app"]["status"], "DEPLOYED");

    // Reassign to OFFLINE: 409 and nothing moved; to UNKNOWN: allowed, marker cleared.
    let refused_move = api
        .post("/api/v1/apps/cart/reassign", json!({ "cluster": "down" }))
        .await;
    check_problem(&refused_move, StatusCode::CONFLICT, "cluster-offline", None);
    assert_eq!(api.get("/api/v1/apps/cart").await.body["cluster"], "new");
    let moved = api
        .post("/api/v1/apps/shop/reassign", json!({ "cluster": "new" }))
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    assert_eq!(moved.body["cluster"], "new");
    assert_eq!(
        moved.body["degraded_by_outage"],
        Value::Null,
        "reassign clears the marker"
    );

    let listed = api.get("/api/v1/apps?cluster=new").await;
    assert_eq!(listed.body.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_platform_clears_the_outage_marker_by_status_and_by_deployment() {
    let api = api().await;
    api.register("edge").await;
    for app in ["a", "b"] {
        api.app(app, "edge").await;
        api.deploy(app).await;
    }
    api.make_offline("edge").await;
    for app in ["a", "b"] {
        assert!(api.get(&format!("/api/v1/apps/{app}")).await.body["degraded_by_outage"].is_i64());
    }
    let set = api
        .send(
            Method::PUT,
            "/api/v1/apps/a/status",
            Some(TOKEN),
            Some(json!({ "status": "FAILED" }).to_string()),
        )
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    assert_eq!(set.body["status"], "FAILED");
    assert_eq!(set.body["degraded_by_outage"], Value::Null);

    // Recovery restores only the app whose marker is still set.
    api.apply("edge", &[ProbeOutcome::Healthy]).await;
    assert_eq!(api.get("/api/v1/apps/a").await.body["status"], "FAILED");
    assert_eq!(api.get("/api/v1/apps/b").await.body["status"], "DEPLOYED");

    let bad = api
        .send(
            Method::PUT,
            "/api/v1/apps/a/status",
            Some(TOKEN),
            Some(json!({ "status": "GONE" }).to_string()),
        )
        .await;
    check_problem(
        &bad,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("body.status"),
    );
}

#[tokio::test]
async fn an_app_is_removed_with_its_deployments_which_frees_its_cluster_for_deletion() {
    let api = api().await;
    api.register("old").await;
    api.app("svc", "old").await;
    api.app("other", "old").await;
    let deployed = api.deploy("svc").await;
    let deployment = deployed.headers[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned();
    api.make_offline("old").await;

    // Needs a token; an unknown app is a 404 problem.
    let anonymous = api
        .send(Method::DELETE, "/api/v1/apps/svc", None, None)
        .await;
    assert_eq!(
        anonymous.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        anonymous.text
    );
    check_problem(
        &api.send(Method::DELETE, "/api/v1/apps/none", Some(TOKEN), None)
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );

    // Allowed on an OFFLINE cluster: removing deploys nothing there.
    let removed = api
        .send(Method::DELETE, "/api/v1/apps/svc", Some(TOKEN), None)
        .await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.text);
    for gone in [
        "/api/v1/apps/svc",
        "/api/v1/apps/svc/deployments",
        deployment.as_str(),
    ] {
        check_problem(
            &api.get(gone).await,
            StatusCode::NOT_FOUND,
            "not-found",
            None,
        );
    }
    let history = api.get("/api/v1/clusters/old/history?limit=1").await;
    let event = &history.body["items"][0];
    assert_eq!(event["kind"], "app-deleted", "{event}");
    assert_eq!(event["actor"], "default");
    assert_eq!(event["detail"]["app"], "svc");
    assert_eq!(event["detail"]["status"], "DEGRADED", "the status it had");
    assert_eq!(event["detail"]["deployments"], 1);
    assert_eq!(
        api.get("/api/v1/apps/other").await.status,
        StatusCode::OK,
        "only that app"
    );

    // The cluster is deleted once its last app is gone.
    let refused = api
        .send(Method::DELETE, "/api/v1/clusters/old", Some(TOKEN), None)
        .await;
    check_problem(&refused, StatusCode::CONFLICT, "cluster-has-apps", None);
    api.send(Method::DELETE, "/api/v1/apps/other", Some(TOKEN), None)
        .await;
    let deleted = api
        .send(Method::DELETE, "/api/v1/clusters/old", Some(TOKEN), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
}

#[tokio::test]
async fn delete_is_refused_while_apps_remain_and_a_discovered_cluster_is_remembered() {
    let api = api().await;
    api.register("busy").await;
    api.app("svc", "busy").await;
    let refused_delete = api
        .send(Method::DELETE, "/api/v1/clusters/busy", Some(TOKEN), None)
        .await;
    check_problem(
        &refused_delete,
        StatusCode::CONFLICT,
        "cluster-has-apps",
        None,
    );
    assert!(
        refused_delete.body["detail"]
            .as_str()
            .unwrap()
            .contains("svc")
    );
    assert_eq!(
        api.get("/api/v1/clusters/busy").await.status,
        StatusCode::OK
    );

    api.register("idle").await;
    let deleted = api
        .send(Method::DELETE, "/api/v1/clusters/idle", Some(TOKEN), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    check_problem(
        &api.get("/api/v1/clusters/idle").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );

    // A discovered cluster: remembered as ignored, not re-added by discovery, and
    // registered again by hand.
    let rows = [vigil_store::DiscoveredClusterRow {
        name: "found".to_owned(),
        endpoint: "https://127.0.0.1:6444".to_owned(),
        reference: api.reference("found"),
    }];
    api.store
        .upsert_discovered(&rows, wall_clock())
        .await
        .unwrap();
    assert_eq!(
        api.get("/api/v1/clusters/found").await.body["source"],
        "discovered"
    );
    let gone = api
        .send(Method::DELETE, "/api/v1/clusters/found", Some(TOKEN), None)
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    api.store
        .upsert_discovered(&rows, wall_clock())
        .await
        .unwrap();
    assert_eq!(
        api.get("/api/v1/clusters/found").await.status,
        StatusCode::NOT_FOUND
    );
    assert!(
        api.get("/api/v1/clusters").await.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "found")
    );
    let again = api.register("found").await;
    assert_eq!(again.body["source"], "manual");
}

#[tokio::test]
async fn mutations_need_a_valid_token_and_record_its_name() {
    let api = api().await;
    let body = json!({ "name": "x", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": api.reference("x") }).to_string();
    let anonymous = api
        .send(Method::POST, "/api/v1/clusters", None, Some(body.clone()))
        .await;
    check_problem(&anonymous, StatusCode::UNAUTHORIZED, "unauthorized", None);
    assert_eq!(
        anonymous.headers.get(header::WWW_AUTHENTICATE).unwrap(),
        "Bearer realm=\"vigil\""
    );
    let wrong = api
        .send(
            Method::POST,
            "/api/v1/clusters",
            Some("not-a-token-at-all"),
            Some(body.clone()),
        )
        .await;
    check_problem(&wrong, StatusCode::UNAUTHORIZED, "unauthorized", None);
    assert!(!wrong.text.contains("not-a-token-at-all"));
    assert_eq!(
        api.get("/api/v1/clusters/x").await.status,
        StatusCode::NOT_FOUND,
        "nothing written"
    );

    let named = api
        .send(Method::POST, "/api/v1/clusters", Some(OTHER), Some(body))
        .await;
    assert_eq!(named.status, StatusCode::CREATED);
    let history = api.get("/api/v1/clusters/x/history").await;
    assert_eq!(history.body["items"][0]["actor"], "ci");
    // Reads are open without read auth...
    assert_eq!(api.get("/api/v1/clusters").await.status, StatusCode::OK);

    // ...and closed with it.
    let closed = api_with(true).await;
    check_problem(
        &closed.get("/api/v1/clusters").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        None,
    );
    let allowed = closed
        .send(Method::GET, "/api/v1/clusters", Some(TOKEN), None)
        .await;
    assert_eq!(allowed.status, StatusCode::OK);
}

#[tokio::test]
async fn bad_input_is_a_4xx_naming_the_field_and_writes_nothing() {
    let api = api().await;
    let reference = api.reference("c");
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "colour": "red" }),
            "invalid-request",
            "body.colour",
        ),
        (
            json!({ "name": 7, "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference }),
            "invalid-request",
            "body.name",
        ),
        (
            json!({ "name": "c", "endpoint": "not a url", "kubeconfig_secret_ref": reference }),
            "invalid-request",
            "body.endpoint",
        ),
        (
            json!({ "name": "a/b", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference }),
            "invalid-request",
            "body.name",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": "/etc/kubernetes/admin.conf#x" }),
            "reference-not-allowed",
            "body.kubeconfig_secret_ref",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": format!("{}/../../etc/passwd", api.sandbox.kubeconfigs().display()) }),
            "reference-not-allowed",
            "body.kubeconfig_secret_ref",
        ),
        // `..` is refused even where, by name, it stays inside: through a link it could
        // lead anywhere.
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": format!("{}/link/../c.yaml#c", api.sandbox.kubeconfigs().display()) }),
            "reference-not-allowed",
            "body.kubeconfig_secret_ref",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "parameters": { "token": format!("file://{}/link/%2E%2e/token", api.sandbox.kubeconfigs().display()) } }),
            "reference-not-allowed",
            "body.parameters.token",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": "relative.yaml" }),
            "invalid-request",
            "body.kubeconfig_secret_ref",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "plugin": "nope" }),
            "invalid-request",
            "body.plugin",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "policy": { "interval_seconds": 0 } }),
            "invalid-request",
            "body.policy.interval_seconds",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "policy": { "every": 5 } }),
            "invalid-request",
            "body.policy",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "parameters": { "token": "file:///etc/shadow" } }),
            "reference-not-allowed",
            "body.parameters.token",
        ),
        // The fields in order, as an array: serde would read the struct from it.
        (
            json!(["c", "https://127.0.0.1:1", reference]),
            "invalid-request",
            "body",
        ),
        (
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1", "kubeconfig_secret_ref": reference, "policy": [30] }),
            "invalid-request",
            "body.policy",
        ),
    ];
    for (body, slug, field) in cases {
        let reply = api.post("/api/v1/clusters", body.clone()).await;
        assert!(reply.status.is_client_error(), "{body}: {}", reply.text);
        assert_eq!(
            reply.body["type"],
            format!("https://vigil.dev/problems/{slug}"),
            "{body}: {}",
            reply.text
        );
        assert!(
            reply.body["field"]
                .as_str()
                .is_some_and(|f| f.starts_with(field)),
            "{body}: field {} not {field}",
            reply.body["field"]
        );
        assert_eq!(
            api.get("/api/v1/clusters/c").await.status,
            StatusCode::NOT_FOUND,
            "{body}: nothing written"
        );
    }
    // A change that is not an object changes nothing either.
    api.register("kept").await;
    for body in [
        "[null, null]",
        "[]",
        "null",
        "\"prod\"",
        r#"{"policy": [null, null]}"#,
    ] {
        let reply = api
            .send(
                Method::PATCH,
                "/api/v1/clusters/kept",
                Some(TOKEN),
                Some(body.to_owned()),
            )
            .await;
        check_problem(
            &reply,
            StatusCode::BAD_REQUEST,
            "invalid-request",
            Some(if body.starts_with('{') {
                "body.policy"
            } else {
                "body"
            }),
        );
    }
    let kept = api.get("/api/v1/clusters/kept").await;
    assert_eq!(kept.body["policy_overrides"], json!({}), "{}", kept.text);
    let syntax = api
        .send(
            Method::POST,
            "/api/v1/clusters",
            Some(TOKEN),
            Some("{".to_owned()),
        )
        .await;
    check_problem(
        &syntax,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("body"),
    );
    let huge = api
        .send(
            Method::POST,
            "/api/v1/clusters",
            Some(TOKEN),
            Some(format!("{{\"name\":\"{}\"}}", "x".repeat(200_000))),
        )
        .await;
    check_problem(
        &huge,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        Some("body"),
    );
    check_problem(
        &api.get("/api/v1/clusters?status=SIDEWAYS").await,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("query.status"),
    );
    check_problem(
        &api.get("/api/v1/clusters?colour=red").await,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("query.colour"),
    );
    check_problem(
        &api.get("/api/v1/clusters?limit=0").await,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("query.limit"),
    );
    check_problem(
        &api.get("/api/v1/clusters/none").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.get("/api/v1/apps/none").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.get("/api/v1/nothing").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.deploy("none").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.post("/api/v1/apps", json!({ "name": "a", "cluster": "none" }))
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    api.register("c").await;
    check_problem(
        &api.register_raw("c").await,
        StatusCode::CONFLICT,
        "already-exists",
        None,
    );
}

impl Api {
    async fn register_raw(&self, name: &str) -> Reply {
        self.post(
            "/api/v1/clusters",
            json!({ "name": name, "endpoint": "https://127.0.0.1:6443", "kubeconfig_secret_ref": self.reference(name) }),
        )
        .await
    }
}

/// A kubeconfig file reference is stored as its path normalised by name: `.` components
/// and repeated slashes dropped, the context kept.
#[tokio::test]
async fn a_file_reference_is_stored_normalised() {
    let api = api().await;
    let dir = api.sandbox.kubeconfigs();
    let reply = api
        .post(
            "/api/v1/clusters",
            json!({ "name": "c", "endpoint": "https://127.0.0.1:1",
                    "kubeconfig_secret_ref": format!("{}/.//c.yaml#c", dir.display()) }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["reference"], api.reference("c"));
    let stored = api.store.cluster("c").await.expect("stored");
    assert_eq!(stored.kubeconfig_secret_ref, api.reference("c"));
}

#[tokio::test]
async fn credential_parameters_are_stored_as_references_and_never_returned() {
    let api = api().await;
    let token_file = format!("file://{}/token", api.sandbox.kubeconfigs().display());
    let reply = api
        .post(
            "/api/v1/clusters",
            json!({
                "name": "web",
                "endpoint": "https://127.0.0.1:8443",
                "kubeconfig_secret_ref": "https://127.0.0.1:8443/healthz",
                "parameters": { "method": "GET", "header.Authorization": token_file, "header.X-Key": "secret://ops/web?key=key" },
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    for text in [
        reply.text,
        api.get("/api/v1/clusters/web").await.text,
        api.get("/api/v1/clusters").await.text,
        api.get("/api/v1/clusters/web/history").await.text,
    ] {
        assert!(
            !text.contains(&token_file) && !text.contains("secret://ops"),
            "{text}"
        );
        assert!(
            text.contains("(credential reference)") || !text.contains("header."),
            "{text}"
        );
    }
    assert_eq!(
        api.get("/api/v1/clusters/web").await.body["parameters"]["method"],
        "GET"
    );
    let stored = api.store.cluster("web").await.unwrap();
    assert_eq!(
        stored.parameters["header.Authorization"], token_file,
        "stored as the reference"
    );
}

#[tokio::test]
async fn probe_now_applies_one_outcome_and_refuses_a_second_concurrent_probe() {
    let api = api().await;
    // A kubeconfig that resolves, so that the prober is asked.
    api.sandbox.kubeconfig("p", 6443);
    api.register("p").await;
    let reply = api
        .send(Method::POST, "/api/v1/clusters/p/probe", Some(TOKEN), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["outcome"], "healthy", "{}", reply.text);
    assert_eq!(reply.body["cluster"]["status"], "ONLINE");
    assert_eq!(api.prober.call_count("p"), 1);

    api.prober
        .set("p", Behaviour::Slow(Duration::from_millis(800), refused()));
    let first = {
        let router = api.router.clone();
        tokio::spawn(async move {
            let request = Request::post("/api/v1/clusters/p/probe")
                .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .unwrap();
            router.oneshot(request).await.unwrap().status()
        })
    };
    // The first probe is with the prober (its second call), slow to answer.
    until_async_true(
        "the first probe reaches the prober",
        Duration::from_secs(10),
        async || api.prober.call_count("p") == 2,
    )
    .await;
    let second = api
        .send(Method::POST, "/api/v1/clusters/p/probe", Some(TOKEN), None)
        .await;
    check_problem(&second, StatusCode::CONFLICT, "probe-in-progress", None);
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    let after = api.get("/api/v1/clusters/p").await;
    assert_eq!(after.body["last_outcome"], "unhealthy");
    assert_eq!(after.body["counters"]["consecutive_failures"], 1);
    check_problem(
        &api.send(
            Method::POST,
            "/api/v1/clusters/none/probe",
            Some(TOKEN),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
}

#[tokio::test]
async fn plugins_health_readiness_and_metrics_answer() {
    let api = api().await;
    let plugins = api.get("/api/v1/plugins").await;
    assert_eq!(plugins.body[0]["name"], "kubeconfig-file");
    assert_eq!(plugins.body[0]["package"], "vigil:plugin@0.1.0");
    assert_eq!(plugins.body[0]["faults"], 1);
    assert_eq!(plugins.body[0]["accepts"], 2);
    assert_eq!(plugins.body[0]["state"], "active");
    assert_eq!(plugins.body[0]["generation"], 2);
    assert_eq!(plugins.body[0]["secret_namespaces"][0], "vigil");
    assert_eq!(plugins.body[0]["memory_mib"], 64);
    assert_eq!(api.get("/healthz").await.body["status"], "ok");
    // With a token: the details.
    let ready = api.send(Method::GET, "/readyz", Some(TOKEN), None).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "discovery has not run"
    );
    assert_eq!(ready.body["database"], true);
    assert_eq!(ready.body["discovered"], false);
    // Without one (tokens are configured): ready, and why not, nothing more.
    let anonymous = api.get("/readyz").await;
    assert_eq!(anonymous.status, ready.status);
    assert_eq!(anonymous.body["reasons"], ready.body["reasons"]);
    assert!(
        anonymous.body.get("database").is_none(),
        "{}",
        anonymous.text
    );
    let metrics = api.get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(metrics.text.contains("vigil_clusters{"), "{}", metrics.text);
}

#[tokio::test]
async fn every_documented_route_is_served_and_every_served_route_is_documented() {
    let api = api().await;
    api.register("doc").await;
    api.app("doc-app", "doc").await;
    let doc = api.get("/openapi.json").await;
    assert_eq!(doc.status, StatusCode::OK);
    let paths = doc.body["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    documented.sort();
    let served = [
        "DELETE /api/v1/apps/{name}",
        "DELETE /api/v1/clusters/{name}",
        "GET /api/v1/apps",
        "GET /api/v1/apps/{name}",
        "GET /api/v1/apps/{name}/deployments",
        "GET /api/v1/clusters",
        "GET /api/v1/clusters/{name}",
        "GET /api/v1/clusters/{name}/findings",
        "GET /api/v1/clusters/{name}/history",
        "GET /api/v1/clusters/{name}/latency",
        "GET /api/v1/clusters/{name}/uptime",
        "GET /api/v1/deployments/{id}",
        "GET /api/v1/events",
        "GET /api/v1/plugins",
        "GET /api/v1/summary",
        "GET /healthz",
        "GET /metrics",
        "GET /openapi.json",
        "GET /readyz",
        "PATCH /api/v1/clusters/{name}",
        "POST /api/v1/apps",
        "POST /api/v1/apps/{name}/reassign",
        "POST /api/v1/clusters",
        "POST /api/v1/clusters/{name}/probe",
        "POST /api/v1/deployments",
        "POST /api/v1/plugins/reload",
        "PUT /api/v1/apps/{name}/status",
    ];
    assert_eq!(documented, served);
    // Each documented route answers something other than the router's "no such route".
    for route in &documented {
        let (method, path) = route.split_once(' ').unwrap();
        if path == "/api/v1/events" {
            continue; // a stream: its own test
        }
        let name = if path.contains("/apps/") {
            "doc-app"
        } else {
            "doc"
        };
        let uri = path.replace("{name}", name).replace("{id}", "1");
        let reply = api
            .send(
                method.parse().unwrap(),
                &uri,
                Some(TOKEN),
                (method != "GET" && method != "DELETE").then(|| "{}".to_owned()),
            )
            .await;
        assert!(
            reply.body["detail"] != "no such route"
                && reply.status != StatusCode::METHOD_NOT_ALLOWED,
            "{route}: {} {}",
            reply.status,
            reply.text
        );
    }
}

#[tokio::test]
async fn the_event_stream_delivers_transitions_and_cascades_in_order_and_resumes() {
    let api = api().await;
    api.register("s").await;
    api.app("s-app", "s").await;
    api.deploy("s-app").await;
    let start = api.store.last_event_id().await.unwrap();

    let stream = |after: i64| {
        let router = api.router.clone();
        async move {
            let request = Request::get("/api/v1/events")
                .header("last-event-id", after.to_string())
                .body(Body::empty())
                .unwrap();
            let response = router.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert!(
                response.headers()[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with("text/event-stream")
            );
            response.into_body()
        }
    };
    let mut body = stream(start).await;
    api.make_offline("s").await;

    // Read until the cascade has arrived.
    let mut events: Vec<(i64, String, Value)> = Vec::new();
    let mut buffer = String::new();
    while !events.iter().any(|(_, kind, _)| kind == "apps-degraded") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.push_str(&String::from_utf8_lossy(&data));
        }
        events = parse_sse(&buffer);
    }
    let offline = events
        .iter()
        .position(|(_, kind, data)| kind == "status-changed" && data["detail"]["to"] == "OFFLINE")
        .expect("the transition to OFFLINE");
    let degraded = events
        .iter()
        .position(|(_, kind, _)| kind == "apps-degraded")
        .unwrap();
    assert!(
        offline < degraded,
        "the transition, then its cascade: {events:?}"
    );
    assert_eq!(
        events[degraded].2["detail"]["apps"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{events:?}"
    );
    assert!(
        events.windows(2).all(|w| w[0].0 < w[1].0),
        "ids increase: {events:?}"
    );
    drop(body);

    // Reconnect from the middle: exactly the events after it, none lost, none repeated.
    let middle = events[events.len() / 2].0;
    let mut body = stream(middle).await;
    let expected: Vec<i64> = events
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| *id > middle)
        .collect();
    let mut buffer = String::new();
    let mut resumed = Vec::new();
    while resumed.len() < expected.len() {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.push_str(&String::from_utf8_lossy(&data));
        }
        resumed = parse_sse(&buffer)
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
    }
    assert_eq!(resumed[..expected.len()], expected[..]);
}

/// `(id, event, data)` of each complete SSE message in `text`.
fn parse_sse(text: &str) -> Vec<(i64, String, Value)> {
    let complete = &text[..text.rfind("\n\n").map_or(0, |i| i + 2)];
    complete
        .split("\n\n")
        .filter(|m| m.contains("data:"))
        .filter_map(|message| {
            let mut id = None;
            let mut kind = None;
            let mut data = None;
            for line in message.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = serde_json::from_str(v.trim()).ok();
                }
            }
            Some((id?, kind?, data?))
        })
        .collect()
}

// What Schemathesis found against a running vigil (scripts/api-conformance), one
// regression each.

#[tokio::test]
async fn an_undeclared_method_is_a_405_problem_naming_the_allowed_ones() {
    let api = api().await;
    for (method, uri) in [
        (Method::TRACE, "/readyz"),
        (Method::PUT, "/api/v1/clusters"),
        (Method::DELETE, "/api/v1/apps/some-app/status"),
    ] {
        let reply = api
            .send(method.clone(), uri, Some(TOKEN), Some("{}".to_owned()))
            .await;
        check_problem(
            &reply,
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            Some("method"),
        );
        let allow = reply
            .headers
            .get(header::ALLOW)
            .unwrap_or_else(|| panic!("{method} {uri}: no Allow header"))
            .to_str()
            .unwrap()
            .to_owned();
        assert!(!allow.contains(method.as_str()), "{method} {uri}: {allow}");
        assert!(allow.contains("GET") || allow.contains("PUT"), "{allow}");
    }
}

#[tokio::test]
async fn names_are_counted_in_characters_as_the_document_counts_them() {
    let api = api().await;
    api.register("wide").await;
    let longest = "é".repeat(253);
    api.app(&longest, "wide").await;
    let reply = api
        .post(
            "/api/v1/apps",
            json!({ "name": "é".repeat(254), "cluster": "wide" }),
        )
        .await;
    check_problem(
        &reply,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("body.name"),
    );
    assert_eq!(api.store.apps().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_creation_answers_with_the_location_of_what_it_created() {
    let api = api().await;
    // Characters a URL path cannot carry as they are: `?` and `#` would end the path,
    // `%` starts an escape, and non-ASCII is sent as its UTF-8 bytes.
    let cluster = "prod?eu#1%é";
    let created = api
        .post(
            "/api/v1/clusters",
            json!({
                "name": cluster,
                "endpoint": "https://127.0.0.1:6443",
                "kubeconfig_secret_ref": api.reference("prod"),
            }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let location = created.headers[header::LOCATION].to_str().unwrap();
    assert_eq!(location, "/api/v1/clusters/prod%3Feu%231%25%C3%A9");
    let fetched = api.get(location).await;
    assert_eq!(fetched.status, StatusCode::OK, "{}", fetched.text);
    assert_eq!(
        fetched.body, created.body,
        "the Location serves what was created"
    );

    let reply = api
        .post(
            "/api/v1/apps",
            json!({ "name": "shop&cart", "cluster": cluster }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let location = reply.headers[header::LOCATION].to_str().unwrap();
    assert_eq!(location, "/api/v1/apps/shop%26cart");
    let fetched = api.get(location).await;
    assert_eq!(fetched.status, StatusCode::OK, "{}", fetched.text);
    assert_eq!(fetched.body["name"], "shop&cart");
    assert_eq!(fetched.body["cluster"], cluster);

    // The document says so, for clients generated from it.
    let doc = api.get("/openapi.json").await.body;
    for path in ["/api/v1/clusters", "/api/v1/apps", "/api/v1/deployments"] {
        let created = &doc["paths"][path]["post"]["responses"]["201"];
        assert!(
            created["headers"]["Location"].is_object(),
            "POST {path}: 201 documents no Location: {created}"
        );
    }
    // A refused creation points nowhere.
    let taken = api
        .post(
            "/api/v1/apps",
            json!({ "name": "shop&cart", "cluster": cluster }),
        )
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "{}", taken.text);
    assert!(taken.headers.get(header::LOCATION).is_none());
}

#[tokio::test]
async fn deployments_are_read_back_by_id_and_per_app_newest_first() {
    let api = api().await;
    api.register("blue").await;
    api.register("green").await;
    api.app("shop", "blue").await;
    api.app("cart", "blue").await;

    let first = api.deploy("shop").await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let id = first.body["id"].as_i64().unwrap();
    let location = first.headers[header::LOCATION].to_str().unwrap();
    assert_eq!(location, format!("/api/v1/deployments/{id}"));
    let fetched = api.get(location).await;
    assert_eq!(fetched.status, StatusCode::OK, "{}", fetched.text);
    assert_eq!(fetched.body["id"], id);
    assert_eq!(fetched.body["app"], "shop");
    assert_eq!(fetched.body["cluster"], "blue");
    assert_eq!(fetched.body["version"], "1.2.3");
    assert_eq!(fetched.body["actor"], "default", "the caller's token name");
    assert!(
        fetched.body["at"].as_str().unwrap().ends_with('Z'),
        "{}",
        fetched.body
    );

    // A move, then a second deployment, and one of another app in between.
    api.deploy("cart").await;
    let moved = api
        .post("/api/v1/apps/shop/reassign", json!({ "cluster": "green" }))
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    let second = api
        .post(
            "/api/v1/deployments",
            json!({ "app": "shop", "version": "2.0.0" }),
        )
        .await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.text);
    let second_id = second.body["id"].as_i64().unwrap();

    let page = api.get("/api/v1/apps/shop/deployments").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let seen: Vec<(i64, &str, &str)> = page.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_i64().unwrap(),
                d["cluster"].as_str().unwrap(),
                d["version"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [(second_id, "green", "2.0.0"), (id, "blue", "1.2.3")],
        "newest first, each on the cluster it went to, none of the other app's"
    );
    assert_eq!(page.body["next"], Value::Null, "one page");

    // Paged one at a time, the pages join up.
    let one = api.get("/api/v1/apps/shop/deployments?limit=1").await;
    assert_eq!(one.body["items"][0]["id"], second_id);
    let next = one.body["next"].as_i64().unwrap();
    let rest = api
        .get(&format!(
            "/api/v1/apps/shop/deployments?limit=1&before={next}"
        ))
        .await;
    assert_eq!(rest.body["items"][0]["id"], id);
    assert_eq!(rest.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest.body["next"], Value::Null);

    // Unknown and malformed: problems naming what was wrong.
    check_problem(
        &api.get(&format!("/api/v1/deployments/{}", second_id + 100))
            .await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.get("/api/v1/deployments/latest").await,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("path.id"),
    );
    check_problem(
        &api.get("/api/v1/apps/none/deployments").await,
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    );
    check_problem(
        &api.get("/api/v1/apps/shop/deployments?limit=0").await,
        StatusCode::BAD_REQUEST,
        "invalid-request",
        Some("query.limit"),
    );

    // A refused deployment records nothing and points nowhere.
    api.make_offline("green").await;
    let refused = api.deploy("shop").await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    assert!(refused.headers.get(header::LOCATION).is_none());
    let after = api.get("/api/v1/apps/shop/deployments").await;
    assert_eq!(after.body["items"].as_array().unwrap().len(), 2);
}

/// The parameters of `method path` in the document, by name.
fn parameter<'a>(doc: &'a Value, method: &str, path: &str, name: &str) -> &'a Value {
    doc["paths"][path][method]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{method} {path}: no parameter {name}"))
}

/// The characters a `^[^…]+$` pattern of `\uXXXX`, `\uXXXX-\uXXXX` and plain characters
/// excludes.
fn excluded_by(pattern: &str) -> impl Fn(char) -> bool {
    let class = pattern
        .strip_prefix("^[^")
        .and_then(|p| p.strip_suffix("]+$"))
        .unwrap_or_else(|| panic!("unexpected pattern {pattern}"));
    let mut items: Vec<char> = Vec::new();
    let mut rest = class;
    while !rest.is_empty() {
        if let Some(hex) = rest.strip_prefix("\\u") {
            items.push(char::from_u32(u32::from_str_radix(&hex[..4], 16).unwrap()).unwrap());
            rest = &hex[4..];
        } else {
            let c = rest.chars().next().unwrap();
            items.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    // Fold `a - b` triples into ranges.
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < items.len() {
        if i + 2 < items.len() && items[i + 1] == '-' {
            ranges.push((items[i], items[i + 2]));
            i += 3;
        } else {
            ranges.push((items[i], items[i]));
            i += 1;
        }
    }
    move |c| ranges.iter().any(|&(low, high)| (low..=high).contains(&c))
}

#[test]
fn the_document_states_the_rules_the_handlers_check() {
    let doc = serde_json::to_value(vigil_api::openapi()).unwrap();
    for (path, name) in [
        ("/api/v1/clusters", "limit"),
        ("/api/v1/clusters/{name}/history", "limit"),
    ] {
        let schema = &parameter(&doc, "get", path, name)["schema"];
        assert_eq!(schema["minimum"], 1, "{path} {name}: {schema}");
        assert_eq!(schema["maximum"], 1000, "{path} {name}: {schema}");
    }
    let enumerated = |name: &str| -> Vec<String> {
        let schema = &parameter(&doc, "get", "/api/v1/clusters", name)["schema"];
        serde_json::from_value(schema["enum"].clone())
            .unwrap_or_else(|_| panic!("{name}: {schema}"))
    };
    let names = |all: &[&str]| all.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        enumerated("status"),
        names(&["ONLINE", "OFFLINE", "UNKNOWN"])
    );
    assert_eq!(
        enumerated("condition"),
        vigil_decision::ConditionType::ALL
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect::<Vec<_>>()
    );
    assert_eq!(enumerated("source"), names(&["discovered", "manual"]));
    let schemas = &doc["components"]["schemas"];
    let app_status: Vec<String> = serde_json::from_value(
        schemas["SetStatus"]["properties"]["status"]["oneOf"][0]["enum"].clone(),
    )
    .unwrap_or_else(|_| panic!("{}", schemas["SetStatus"]));
    assert_eq!(
        app_status,
        vigil_decision::AppStatus::ALL
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect::<Vec<_>>()
    );
    // Every checked name: 1–253 characters and exactly the characters `check_name` allows.
    let mut patterns = Vec::new();
    for (schema, field) in [
        ("RegisterCluster", "name"),
        ("RegisterApp", "name"),
        ("RegisterApp", "cluster"),
        ("Reassign", "cluster"),
    ] {
        let property = &schemas[schema]["properties"][field];
        assert_eq!(property["minLength"], 1, "{schema}.{field}");
        assert_eq!(property["maxLength"], 253, "{schema}.{field}");
        patterns.push(property["pattern"].as_str().unwrap().to_owned());
    }
    patterns.dedup();
    assert_eq!(patterns.len(), 1, "{patterns:?}");
    let excluded = excluded_by(&patterns[0]);
    for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
        assert_eq!(
            excluded(c),
            c == '/' || c.is_whitespace() || c.is_control(),
            "U+{:04X}",
            u32::from(c)
        );
    }
    // Query strings are checked (unknown fields, bad values): a 400 is documented.
    for path in [
        "/api/v1/apps",
        "/api/v1/clusters",
        "/api/v1/clusters/{name}/history",
    ] {
        assert!(
            doc["paths"][path]["get"]["responses"]["400"].is_object(),
            "GET {path} does not document 400"
        );
    }
}

#[tokio::test]
async fn a_plugin_reload_needs_a_token_and_is_recorded_with_its_caller() {
    let api = api().await;
    let anonymous = api
        .send(Method::POST, "/api/v1/plugins/reload", None, None)
        .await;
    assert_eq!(
        anonymous.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        anonymous.text
    );
    let before = api.store.last_event_id().await.unwrap();

    let reload = api
        .send(Method::POST, "/api/v1/plugins/reload", Some(TOKEN), None)
        .await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text);
    assert_eq!(reload.body["promoted"][0]["plugin"], "kubeconfig-file");
    assert_eq!(reload.body["promoted"][0]["generation"], 2);

    let events = api.store.events_after(before, 10).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, "plugins-reloaded");
    assert_eq!(events[0].actor.as_deref(), Some("default"));
    assert!(
        events[0].detail.contains("kubeconfig-file"),
        "{}",
        events[0].detail
    );
}

#[tokio::test]
async fn a_busy_database_answers_503_with_retry_after_not_500() {
    use sqlx::Connection;
    let api = api().await;
    // Another writer holds the database's write lock past the store's busy timeout.
    let url = format!("sqlite://{}", api.sandbox.db().display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let reply = api.register_raw("busy").await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text
    );
    assert_eq!(
        reply.headers[header::RETRY_AFTER],
        vigil_api::problem::BUSY_RETRY_AFTER_SECONDS.to_string()
    );
    assert_eq!(reply.body["type"], "https://vigil.dev/problems/unavailable");
    assert!(
        reply.body["detail"].as_str().unwrap().contains("busy") && !reply.text.contains("code:"),
        "the client is told to retry, without the database's own message: {}",
        reply.text
    );
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    // Nothing was written, and once the lock is free the same request succeeds.
    let reply = api.register_raw("busy").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);

    // The document says so on every route of the API.
    let doc = serde_json::to_value(vigil_api::openapi()).unwrap();
    for (path, method) in [
        ("/api/v1/clusters", "post"),
        ("/api/v1/clusters/{name}", "get"),
        ("/api/v1/deployments", "post"),
    ] {
        let unavailable = &doc["paths"][path][method]["responses"]["503"];
        assert!(
            unavailable["headers"]["Retry-After"].is_object(),
            "{method} {path}: {unavailable}"
        );
    }
}

#[tokio::test]
async fn an_http_reference_carrying_a_credential_is_refused_naming_the_field_not_the_secret() {
    let api = api().await;
    for (reference, named) in [
        (
            "https://127.0.0.1:8443/healthz?access_token=vigil-url-secret-41",
            "`access_token`",
        ),
        (
            "https://127.0.0.1:8443/healthz?verbose&X-Amz-Signature=vigil-url-secret-41",
            "`X-Amz-Signature`",
        ),
        (
            "https://monitor:vigil-url-secret-41@127.0.0.1:8443/healthz",
            "user@host",
        ),
    ] {
        let reply = api
            .post(
                "/api/v1/clusters",
                json!({
                    "name": "leaky",
                    "endpoint": "https://127.0.0.1:8443",
                    "kubeconfig_secret_ref": reference,
                }),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{reference}: {}",
            reply.text
        );
        assert_eq!(
            reply.body["field"], "body.kubeconfig_secret_ref",
            "{}",
            reply.text
        );
        let detail = reply.body["detail"].as_str().unwrap();
        assert!(
            detail.contains(named) && detail.contains("credential parameter"),
            "{reference}: {detail}"
        );
        assert!(
            !reply.text.contains("vigil-url-secret-41"),
            "{}",
            reply.text
        );
    }
    // The endpoint is stored and shown as it is too.
    for (endpoint, named) in [
        (
            "https://127.0.0.1:8443/?access_token=vigil-url-secret-41",
            "`access_token`",
        ),
        (
            "https://monitor:vigil-url-secret-41@127.0.0.1:8443",
            "user@host",
        ),
    ] {
        let reply = api
            .post(
                "/api/v1/clusters",
                json!({
                    "name": "leaky",
                    "endpoint": endpoint,
                    "kubeconfig_secret_ref": "https://127.0.0.1:8443/readyz",
                }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
        assert_eq!(reply.body["field"], "body.endpoint", "{}", reply.text);
        let detail = reply.body["detail"].as_str().unwrap();
        assert!(
            detail.contains(named) && detail.contains("credential parameter"),
            "{endpoint}: {detail}"
        );
        assert!(
            !reply.text.contains("vigil-url-secret-41"),
            "{}",
            reply.text
        );
    }
    assert_eq!(
        api.get("/api/v1/clusters/leaky").await.status,
        StatusCode::NOT_FOUND,
        "nothing was registered"
    );
    let reply = api
        .post(
            "/api/v1/clusters",
            json!({
                "name": "plain",
                "endpoint": "https://127.0.0.1:8443",
                "kubeconfig_secret_ref": "https://127.0.0.1:8443/readyz?verbose&exclude=etcd",
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}
