//! The fake API server's resource layer, tested as a pure function: `respond` over the
//! `fixtures/basic` set, with no socket. Expected values come from the fixture files (and
//! where a value is computed, from the fixture as loaded), so a fixture edit that breaks an
//! expectation fails here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use k8s_openapi::List;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ReplicationController, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use k8s_openapi::apimachinery::pkg::version::Info;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use vigil_fake_kube::resources::{
    ApiRequest, ApiResponse, FixtureError, Fixtures, respond, status_body,
};

/// What kubectl sends for `kubectl get`.
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// What kubectl 1.30+ sends for `/api` and `/apis`.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/basic")
}

static BASIC: LazyLock<Fixtures> = LazyLock::new(|| {
    Fixtures::load(&fixture_dir()).unwrap_or_else(|error| panic!("fixtures/basic: {error:?}"))
});

/// `GET path?query` with an `Accept` header.
fn request(fixtures: &Fixtures, target: &str, accept: Option<&str>) -> ApiResponse {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    respond(
        fixtures,
        &ApiRequest {
            method: "GET",
            path,
            query,
            accept,
        },
    )
}

/// A successful JSON `GET` against `fixtures/basic`, decoded.
#[track_caller]
fn get<T: DeserializeOwned>(target: &str) -> T {
    get_from(&BASIC, target, Some("application/json"))
}

#[track_caller]
fn get_from<T: DeserializeOwned>(fixtures: &Fixtures, target: &str, accept: Option<&str>) -> T {
    let response = request(fixtures, target, accept);
    let body = String::from_utf8_lossy(&response.body).into_owned();
    assert_eq!(response.status, 200, "GET {target}: {body}");
    assert!(
        response.content_type.starts_with("application/json"),
        "GET {target}: {}",
        response.content_type
    );
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("GET {target}: {error}: {body}"))
}

/// A failing `GET`: its status code and `Status` body.
#[track_caller]
fn failure(target: &str) -> (u16, Value) {
    let response = request(&BASIC, target, None);
    assert_ne!(response.status, 200, "GET {target} should fail");
    assert_eq!(response.content_type, "application/json");
    (
        response.status,
        serde_json::from_slice(&response.body).expect("a Status body"),
    )
}

fn names<
    T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
>(
    items: &[T],
) -> Vec<String> {
    items
        .iter()
        .map(|item| item.metadata().name.clone().unwrap_or_default())
        .collect()
}

/// `namespace/name` of each item.
fn keys<
    T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
>(
    items: &[T],
) -> Vec<String> {
    items
        .iter()
        .map(|item| {
            let metadata = item.metadata();
            format!(
                "{}/{}",
                metadata.namespace.clone().unwrap_or_default(),
                metadata.name.clone().unwrap_or_default()
            )
        })
        .collect()
}

/// Percent-encodes a query value as clients do.
fn encode(value: &str) -> String {
    let mut encoded = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Follows `continue` tokens from `first` to the end; returns every page.
#[track_caller]
fn pages<T: DeserializeOwned + k8s_openapi::ListableResource>(
    fixtures: &Fixtures,
    first: &str,
) -> Vec<List<T>> {
    let mut pages: Vec<List<T>> = vec![get_from(fixtures, first, None)];
    while let Some(token) = pages
        .last()
        .and_then(|page| page.metadata.continue_.clone())
    {
        assert!(pages.len() < 50, "paging does not end");
        let separator = if first.contains('?') { '&' } else { '?' };
        pages.push(get_from(
            fixtures,
            &format!("{first}{separator}continue={}", encode(&token)),
            None,
        ));
    }
    pages
}

#[test]
fn version_and_health_endpoints() {
    let info: Info = get("/version");
    assert_eq!(
        (
            info.major.as_str(),
            info.minor.as_str(),
            info.git_version.as_str()
        ),
        ("1", "33", "v1.33.0")
    );
    for probe in ["/readyz", "/livez", "/healthz", "/readyz/ping"] {
        let response = request(&BASIC, probe, None);
        assert_eq!(
            (response.status, &response.body[..]),
            (200, &b"ok"[..]),
            "{probe}"
        );
        assert!(response.content_type.starts_with("text/plain"));
    }
    let verbose = request(&BASIC, "/readyz?verbose", None);
    assert!(String::from_utf8_lossy(&verbose.body).ends_with("readyz check passed\n"));
}

#[test]
fn an_empty_set_serves_discovery_and_the_two_namespaces() {
    let empty = Fixtures::empty();
    let namespaces: List<Namespace> = get_from(&empty, "/api/v1/namespaces", None);
    assert_eq!(names(&namespaces.items), ["default", "kube-system"]);
    let phases: Vec<_> = namespaces
        .items
        .iter()
        .map(|namespace| namespace.status.clone().unwrap_or_default().phase)
        .collect();
    assert_eq!(
        phases,
        [Some("Active".to_owned()), Some("Active".to_owned())]
    );
    let core: APIResourceList = get_from(&empty, "/api/v1", None);
    assert!(
        core.resources
            .iter()
            .any(|resource| resource.name == "pods")
    );
    let pods: List<Pod> = get_from(&empty, "/api/v1/pods", None);
    assert!(pods.items.is_empty());
    assert_eq!(request(&empty, "/version", None).status, 200);
    assert_eq!(request(&empty, "/readyz", None).status, 200);
}

#[test]
fn namespace_probe_with_limit_one_pages_through_every_namespace() {
    let first: List<Namespace> = get("/api/v1/namespaces?limit=1");
    assert_eq!(names(&first.items), ["data"]);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    assert!(
        first
            .metadata
            .resource_version
            .as_deref()
            .is_some_and(|version| !version.is_empty())
    );
    let pages = pages::<Namespace>(&BASIC, "/api/v1/namespaces?limit=1");
    let all: Vec<String> = pages.iter().flat_map(|page| names(&page.items)).collect();
    assert_eq!(all, ["data", "default", "kube-system", "legacy", "shop"]);
    assert!(pages.iter().all(|page| page.items.len() == 1));
    assert_eq!(
        pages
            .last()
            .and_then(|page| page.metadata.remaining_item_count),
        None
    );
}

#[test]
fn paging_with_a_set_based_selector_returns_each_match_once_in_key_order() {
    let selector = "tier in (frontend, backend)";
    let all: List<Pod> = get("/api/v1/pods");
    let expected: Vec<String> = keys(&all.items)
        .into_iter()
        .zip(&all.items)
        .filter(|(_, pod)| {
            let tier = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("tier"));
            matches!(tier.map(String::as_str), Some("frontend" | "backend"))
        })
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        expected,
        [
            "data/db-0",
            "data/db-1",
            "data/db-2",
            "legacy/cache-h7x2k",
            "legacy/cache-q9w4m",
            "shop/web-7c9d8f6b5d-4xk2p",
            "shop/web-7c9d8f6b5d-9mzqt",
            "shop/web-7c9d8f6b5d-tw8vn",
        ],
        "the fixture changed",
    );
    let paged_pages = pages::<Pod>(
        &BASIC,
        &format!("/api/v1/pods?limit=2&labelSelector={}", encode(selector)),
    );
    assert_eq!(paged_pages.len(), 4, "8 matches, 2 a page");
    assert!(
        paged_pages
            .iter()
            .filter(|page| page.metadata.continue_.is_some())
            .count()
            >= 3
    );
    assert!(paged_pages.iter().all(|page| page.items.len() == 2));
    // The real server reports remainingItemCount only for lists without selectors.
    assert!(
        paged_pages
            .iter()
            .all(|page| page.metadata.remaining_item_count.is_none())
    );
    let paged: Vec<String> = paged_pages
        .iter()
        .flat_map(|page| keys(&page.items))
        .collect();
    assert_eq!(paged, expected);

    // Within one namespace, with a notin selector, across pages of one.
    let shop_pages = pages::<Pod>(
        &BASIC,
        &format!(
            "/api/v1/namespaces/shop/pods?limit=1&labelSelector={}",
            encode("app notin (migrate)")
        ),
    );
    let paged: Vec<String> = shop_pages
        .iter()
        .flat_map(|page| names(&page.items))
        .collect();
    assert_eq!(
        paged,
        [
            "web-7c9d8f6b5d-4xk2p",
            "web-7c9d8f6b5d-9mzqt",
            "web-7c9d8f6b5d-tw8vn"
        ]
    );
}

#[track_caller]
fn check_selector(query: &str, expected: &[&str]) {
    let pods: List<Pod> = get(&format!("/api/v1/pods?{query}"));
    assert_eq!(names(&pods.items), expected, "{query}");
}

#[test]
fn label_and_field_selectors() {
    let web = [
        "web-7c9d8f6b5d-4xk2p",
        "web-7c9d8f6b5d-9mzqt",
        "web-7c9d8f6b5d-tw8vn",
    ];
    check_selector("labelSelector=app%3Dweb", &web);
    check_selector("labelSelector=app%3D%3Dweb", &web);
    check_selector(
        &format!(
            "labelSelector={}",
            encode("app in (db),apps.kubernetes.io/pod-index>0")
        ),
        &["db-1", "db-2"],
    );
    check_selector(
        &format!("labelSelector={}", encode("!tier")),
        &[
            "coredns-668d6bf9bc-2xq8z",
            "coredns-668d6bf9bc-8kd9w",
            "migrate-schema-20250520",
        ],
    );
    check_selector(
        &format!("labelSelector={}", encode("tier notin (backend),app")),
        &[
            "migrate-schema-20250520",
            "web-7c9d8f6b5d-4xk2p",
            "web-7c9d8f6b5d-9mzqt",
            "web-7c9d8f6b5d-tw8vn",
        ],
    );
    check_selector(
        &format!("labelSelector={}", encode("app!=web,tier")),
        &["db-0", "db-1", "db-2", "cache-h7x2k", "cache-q9w4m"],
    );
    check_selector(
        &format!(
            "labelSelector={}",
            encode("statefulset.kubernetes.io/pod-name")
        ),
        &["db-0", "db-1", "db-2"],
    );
    check_selector("labelSelector=app%3Dnothing", &[]);
    check_selector("fieldSelector=metadata.name%3Ddb-1", &["db-1"]);
    check_selector(
        "fieldSelector=status.phase%3DSucceeded",
        &["migrate-schema-20250520"],
    );
    check_selector(
        "fieldSelector=spec.nodeName%3Dworker-2,metadata.namespace!%3Dlegacy",
        &["db-1", "web-7c9d8f6b5d-tw8vn"],
    );
    check_selector(
        "fieldSelector=spec.nodeName%3Dworker-2&labelSelector=app%3Dcache",
        &["cache-q9w4m"],
    );

    let namespaces: List<Namespace> =
        get("/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Ddefault");
    assert_eq!(
        names(&namespaces.items),
        ["default"],
        "the API server labels every namespace with its name"
    );
    let nodes: List<Node> = get("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue");
    assert_eq!(names(&nodes.items), ["worker-2"]);
    let secrets: List<Secret> = get("/api/v1/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls");
    assert_eq!(keys(&secrets.items), ["shop/web-tls"]);

    let (code, status) = failure(&format!(
        "/api/v1/pods?labelSelector={}",
        encode("app in web")
    ));
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let (code, status) = failure("/api/v1/pods?fieldSelector=spec.foo%3Dbar");
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("field label not supported: spec.foo"))
    );
    let (code, _) = failure("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx");
    assert_eq!(code, 400, "nodes have no namespace to select on");
}

#[track_caller]
fn check_scale(path: &str, replicas: i32, current: i32, selector: &str) {
    let scale: Scale = get(path);
    assert_eq!(
        scale.spec.and_then(|spec| spec.replicas),
        Some(replicas),
        "{path}"
    );
    let status = scale.status.unwrap_or_default();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (current, Some(selector)),
        "{path}"
    );
    assert!(
        scale.metadata.uid.is_some() && scale.metadata.resource_version.is_some(),
        "{path}"
    );
}

#[test]
fn scale_subresource_of_each_workload_kind() {
    check_scale(
        "/apis/apps/v1/namespaces/shop/deployments/web/scale",
        3,
        3,
        "app=web",
    );
    check_scale(
        "/apis/apps/v1/namespaces/shop/replicasets/web-7c9d8f6b5d/scale",
        3,
        3,
        "app=web,pod-template-hash=7c9d8f6b5d",
    );
    check_scale(
        "/apis/apps/v1/namespaces/data/statefulsets/db/scale",
        3,
        3,
        "app=db",
    );
    check_scale(
        "/api/v1/namespaces/legacy/replicationcontrollers/cache/scale",
        2,
        2,
        "app=cache",
    );
    check_scale(
        "/apis/apps/v1/namespaces/kube-system/deployments/coredns/scale",
        2,
        2,
        "k8s-app=kube-dns",
    );

    // The scale of an object agrees with the object.
    let deployment: Deployment = get("/apis/apps/v1/namespaces/shop/deployments/web");
    let scale: Scale = get("/apis/apps/v1/namespaces/shop/deployments/web/scale");
    assert_eq!(scale.metadata.uid, deployment.metadata.uid);
    assert_eq!(scale.metadata.name, deployment.metadata.name);

    let (code, status) = failure("/apis/apps/v1/namespaces/shop/deployments/nope/scale");
    assert_eq!(
        (code, status["message"].as_str()),
        (404, Some("deployments.apps \"nope\" not found"))
    );
    let (code, status) = failure("/api/v1/namespaces/shop/pods/web-7c9d8f6b5d-4xk2p/scale");
    assert_eq!(
        (code, status["message"].as_str()),
        (
            404,
            Some("the server could not find the requested resource")
        )
    );

    let table: Value = get_from(
        &BASIC,
        "/apis/apps/v1/namespaces/data/statefulsets/db/scale",
        Some(TABLE),
    );
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"][0]["cells"][0], "db");
}

#[test]
fn pod_disruption_budgets_list_get_and_status() {
    let budgets: List<PodDisruptionBudget> = get("/apis/policy/v1/poddisruptionbudgets");
    let allowed: BTreeMap<String, i32> = keys(&budgets.items)
        .into_iter()
        .zip(&budgets.items)
        .map(|(key, budget)| {
            (
                key,
                budget
                    .status
                    .as_ref()
                    .map_or(-1, |status| status.disruptions_allowed),
            )
        })
        .collect();
    let expected: BTreeMap<String, i32> = [
        ("data/db", 0),
        ("kube-system/coredns", 1),
        ("legacy/cache", 1),
        ("shop/web", 1),
    ]
    .into_iter()
    .map(|(key, allowed)| (key.to_owned(), allowed))
    .collect();
    assert_eq!(allowed, expected);
    for budget in &budgets.items {
        let status = budget.status.clone().unwrap_or_default();
        assert_eq!(
            status.disruptions_allowed,
            (status.current_healthy - status.desired_healthy).max(0),
            "{:?}: fixture statuses must be consistent",
            budget.metadata.name
        );
    }

    let in_data: List<PodDisruptionBudget> =
        get("/apis/policy/v1/namespaces/data/poddisruptionbudgets");
    assert_eq!(keys(&in_data.items), ["data/db"]);
    let db: PodDisruptionBudget = get("/apis/policy/v1/namespaces/data/poddisruptionbudgets/db");
    let status = db.status.clone().unwrap_or_default();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy
        ),
        (3, 2, 2)
    );
    let condition = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .next()
        .expect("a condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "InsufficientPods")
    );
    let via_status: PodDisruptionBudget =
        get("/apis/policy/v1/namespaces/data/poddisruptionbudgets/db/status");
    assert_eq!(via_status, db);

    let (code, status) = failure("/apis/policy/v1/namespaces/data/poddisruptionbudgets/web");
    assert_eq!(
        (code, status["message"].as_str()),
        (404, Some("poddisruptionbudgets.policy \"web\" not found"))
    );
    assert_eq!(
        status["details"],
        json!({ "name": "web", "group": "policy", "kind": "poddisruptionbudgets" })
    );
}

#[test]
fn not_found_and_other_failures_have_the_real_shapes() {
    let response = request(&BASIC, "/api/v1/namespaces/shop/pods/x", None);
    assert_eq!(response.status, 404);
    let body: Value = serde_json::from_slice(&response.body).expect("JSON");
    assert_eq!(
        body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"x\" not found", "reason": "NotFound",
            "details": { "name": "x", "kind": "pods" }, "code": 404
        })
    );
    let (code, status) = failure("/api/v1/namespaces/nope");
    assert_eq!(
        (code, status["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );
    let (code, status) = failure("/apis/apps/v1/namespaces/shop/statefulsets/web");
    assert_eq!(
        (code, status["message"].as_str()),
        (404, Some("statefulsets.apps \"web\" not found"))
    );

    for unknown in [
        "/api/v1/configmaps",
        "/apis/batch/v1/jobs",
        "/apis/nope",
        "/api/v1/pods/web",
        "/api/v1/namespaces/shop/nodes",
    ] {
        let (code, status) = failure(unknown);
        assert_eq!(
            (code, status["details"].clone()),
            (404, json!({})),
            "{unknown}"
        );
    }
    let outside = request(&BASIC, "/metrics", None);
    assert_eq!(
        (outside.status, &outside.body[..]),
        (404, &b"404 page not found\n"[..])
    );

    let post = respond(
        &BASIC,
        &ApiRequest {
            method: "POST",
            path: "/api/v1/namespaces/shop/pods",
            query: None,
            accept: None,
        },
    );
    assert_eq!(post.status, 405);
    let (code, _) = failure("/api/v1/pods?watch=true");
    assert_eq!(code, 405);
    let protobuf_only = request(
        &BASIC,
        "/api/v1/pods",
        Some("application/vnd.kubernetes.protobuf"),
    );
    assert_eq!(protobuf_only.status, 406);

    let body: Value =
        serde_json::from_slice(&status_body(401, "Unauthorized", "Unauthorized")).expect("JSON");
    assert_eq!(
        body,
        json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401 })
    );
}

#[test]
fn invalid_and_stale_continue_tokens() {
    let (code, status) = failure("/api/v1/pods?limit=2&continue=not-a-token");
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("invalid continue token"))
    );

    // A token from another fixture set (another resource version) is answered as expired.
    let mut changed = Fixtures::load(&fixture_dir()).expect("fixtures");
    changed.insert_secret("vigil", "extra", BTreeMap::new());
    let page: List<Pod> = get_from(&changed, "/api/v1/pods?limit=2", None);
    let token = page.metadata.continue_.expect("more pages");
    let (code, status) = failure(&format!("/api/v1/pods?limit=2&continue={}", encode(&token)));
    assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")));

    let page: List<Pod> = get("/api/v1/pods?limit=2");
    let token = encode(&page.metadata.continue_.expect("more pages"));
    let (code, _) = failure(&format!(
        "/api/v1/pods?limit=2&continue={token}&resourceVersion=5"
    ));
    assert_eq!(code, 400);
    let (code, _) = failure("/api/v1/pods?limit=two");
    assert_eq!(code, 400);
}

/// The column names and the cells of each row, keyed by name, from a `Table`.
#[track_caller]
fn table(target: &str) -> (Vec<String>, BTreeMap<String, Vec<Value>>, Value) {
    let table: Value = get_from(&BASIC, target, Some(TABLE));
    assert_eq!(
        (table["kind"].as_str(), table["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1")),
        "{target}"
    );
    let columns = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|column| column["priority"] == 0)
        .map(|column| column["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let rows = table["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            let cells = row["cells"].as_array().expect("cells").clone();
            (cells[0].as_str().unwrap_or_default().to_owned(), cells)
        })
        .collect();
    (columns, rows, table)
}

#[test]
fn table_form_has_the_columns_kubectl_shows() {
    let (columns, rows, whole) = table("/apis/policy/v1/poddisruptionbudgets");
    assert_eq!(
        columns,
        [
            "Name",
            "Min Available",
            "Max Unavailable",
            "Allowed Disruptions",
            "Age"
        ]
    );
    assert_eq!(
        rows["web"],
        [
            json!("web"),
            json!("2"),
            json!("N/A"),
            json!(1),
            json!("60d")
        ]
    );
    assert_eq!(
        rows["db"],
        [
            json!("db"),
            json!("N/A"),
            json!("1"),
            json!(0),
            json!("89d")
        ]
    );
    assert_eq!(rows["cache"][1], "50%");
    // kubectl takes NAMESPACE from the row's object, metadata by default.
    let object = &whole["rows"][0]["object"];
    assert_eq!(object["kind"], "PartialObjectMetadata");
    assert_eq!(object["metadata"]["namespace"], "data");

    let (columns, rows, _) = table("/api/v1/namespaces/data/pods");
    assert_eq!(columns, ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(
        rows["db-0"][1..4],
        [json!("1/1"), json!("Running"), json!("0")]
    );
    assert_eq!(
        rows["db-2"][1..5],
        [
            json!("0/1"),
            json!("CrashLoopBackOff"),
            json!("5 (20m ago)"),
            json!("36h")
        ]
    );
    assert_eq!(
        rows["db-2"][5..],
        [
            json!("10.244.1.42"),
            json!("worker-1"),
            json!("<none>"),
            json!("<none>")
        ]
    );
    let (_, rows, whole) = table("/api/v1/namespaces/shop/pods");
    assert_eq!(rows["web-7c9d8f6b5d-9mzqt"][3], "2 (120m ago)");
    assert_eq!(rows["migrate-schema-20250520"][2], "Completed");
    let finished = whole["rows"].as_array().and_then(|rows| {
        rows.iter()
            .find(|row| row["cells"][0] == "migrate-schema-20250520")
    });
    assert_eq!(
        finished.map(|row| row["conditions"][0]["reason"].clone()),
        Some(json!("Succeeded"))
    );

    let (columns, rows, _) = table("/api/v1/namespaces");
    assert_eq!(columns, ["Name", "Status", "Age"]);
    assert_eq!(
        rows["legacy"],
        [json!("legacy"), json!("Active"), json!("192d")]
    );
    assert_eq!(
        rows["default"][2], "30d",
        "objects without creationTimestamp are 30 days old"
    );

    let (columns, rows, _) = table("/api/v1/nodes");
    assert_eq!(columns, ["Name", "Status", "Roles", "Age", "Version"]);
    assert_eq!(rows["cp-1"][1..3], [json!("Ready"), json!("control-plane")]);
    assert_eq!(rows["worker-2"][1], "Ready,SchedulingDisabled");

    let (columns, rows, _) = table("/apis/apps/v1/deployments");
    assert_eq!(columns, ["Name", "Ready", "Up-to-date", "Available", "Age"]);
    assert_eq!(
        rows["web"][..4],
        [json!("web"), json!("3/3"), json!(3), json!(3)]
    );
    assert_eq!(
        rows["web"][5..],
        [
            json!("web"),
            json!("registry.example.com/shop/web:2.4.1"),
            json!("app=web")
        ]
    );
    let (columns, rows, _) = table("/apis/apps/v1/replicasets");
    assert_eq!(columns, ["Name", "Desired", "Current", "Ready", "Age"]);
    assert_eq!(
        rows["web-7c9d8f6b5d"][..4],
        [json!("web-7c9d8f6b5d"), json!(3), json!(3), json!(3)]
    );
    let (columns, rows, _) = table("/apis/apps/v1/statefulsets");
    assert_eq!(columns, ["Name", "Ready", "Age"]);
    assert_eq!(rows["db"][1], "2/3");
    let (columns, rows, _) = table("/api/v1/replicationcontrollers");
    assert_eq!(columns, ["Name", "Desired", "Current", "Ready", "Age"]);
    assert_eq!(
        rows["cache"][..4],
        [json!("cache"), json!(2), json!(2), json!(2)]
    );
    assert_eq!(rows["cache"][7], "app=cache");
    let (columns, rows, _) = table("/api/v1/namespaces/data/secrets");
    assert_eq!(columns, ["Name", "Type", "Data", "Age"]);
    assert_eq!(rows["db-credentials"][1..3], [json!("Opaque"), json!(2)]);

    // A get in table form is a one-row table; includeObject chooses what each row carries.
    let (_, rows, _) = table("/apis/apps/v1/namespaces/data/statefulsets/db");
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["db"]);
    let (_, _, whole) = table("/apis/apps/v1/namespaces/data/statefulsets/db?includeObject=Object");
    assert_eq!(whole["rows"][0]["object"]["kind"], "StatefulSet");
    let (_, _, whole) = table("/api/v1/namespaces?includeObject=None");
    assert_eq!(whole["rows"][0]["object"], Value::Null);
    // Paging works in table form too.
    let (_, rows, whole) = table("/api/v1/pods?limit=3");
    assert_eq!(rows.len(), 3);
    assert!(whole["metadata"]["continue"].is_string());
}

#[test]
fn lists_have_the_real_shapes() {
    fn check<T: DeserializeOwned + k8s_openapi::ListableResource>(
        path: &str,
        kind: &str,
        count: usize,
    ) {
        let raw: Value = get(path);
        assert_eq!(raw["kind"], kind, "{path}");
        assert!(raw["metadata"]["resourceVersion"].is_string(), "{path}");
        // The real server leaves apiVersion and kind off list items.
        assert!(
            raw["items"]
                .as_array()
                .is_some_and(|items| items.iter().all(|item| item.get("kind").is_none()))
        );
        let list: List<T> = get(path);
        assert_eq!(list.items.len(), count, "{path}");
    }
    check::<Namespace>("/api/v1/namespaces", "NamespaceList", 5);
    check::<Node>("/api/v1/nodes", "NodeList", 3);
    check::<Pod>("/api/v1/pods", "PodList", 11);
    check::<Pod>("/api/v1/namespaces/kube-system/pods", "PodList", 2);
    check::<Pod>("/api/v1/namespaces/no-such/pods", "PodList", 0);
    check::<Secret>("/api/v1/secrets", "SecretList", 2);
    check::<ReplicationController>(
        "/api/v1/replicationcontrollers",
        "ReplicationControllerList",
        1,
    );
    check::<Deployment>("/apis/apps/v1/deployments", "DeploymentList", 2);
    check::<ReplicaSet>(
        "/apis/apps/v1/namespaces/shop/replicasets",
        "ReplicaSetList",
        1,
    );
    check::<StatefulSet>("/apis/apps/v1/statefulsets", "StatefulSetList", 1);
    check::<PodDisruptionBudget>(
        "/apis/policy/v1/poddisruptionbudgets",
        "PodDisruptionBudgetList",
        4,
    );

    // Gets carry apiVersion and kind, and the server-set metadata.
    let pod: Value = get("/api/v1/namespaces/shop/pods/web-7c9d8f6b5d-4xk2p");
    assert_eq!(
        (pod["apiVersion"].as_str(), pod["kind"].as_str()),
        (Some("v1"), Some("Pod"))
    );
    assert!(pod["metadata"]["uid"].is_string() && pod["metadata"]["resourceVersion"].is_string());
    // An ownerReference written with `uid: ""` points at its owner.
    let owner: ReplicaSet = get("/apis/apps/v1/namespaces/shop/replicasets/web-7c9d8f6b5d");
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["uid"].as_str(),
        owner.metadata.uid.as_deref()
    );

    let metadata: Value = get_from(
        &BASIC,
        "/api/v1/pods?limit=1",
        Some("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
    );
    assert_eq!(metadata["kind"], "PartialObjectMetadataList");
    assert_eq!(metadata["items"][0]["metadata"]["name"], "db-0");
}

#[test]
fn secrets_get_list_and_insert() {
    let tls: Secret = get("/api/v1/namespaces/shop/secrets/web-tls");
    assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = tls.data.unwrap_or_default();
    assert!(
        data["tls.crt"]
            .0
            .starts_with(b"-----BEGIN CERTIFICATE-----")
    );
    // stringData was folded into data, as the API server does.
    let credentials: Secret = get("/api/v1/namespaces/data/secrets/db-credentials");
    let data = credentials.data.unwrap_or_default();
    assert_eq!(
        (&data["username"].0[..], &data["password"].0[..]),
        (&b"app"[..], &b"s3cr3t-for-tests"[..])
    );
    assert_eq!(credentials.string_data, None);

    let mut fixtures = Fixtures::load(&fixture_dir()).expect("fixtures");
    let kubeconfig = BTreeMap::from([(
        "value".to_owned(),
        b"apiVersion: v1\nkind: Config\n".to_vec(),
    )]);
    fixtures.insert_secret("vigil", "cluster-1-kubeconfig", kubeconfig.clone());
    let secret: Secret = get_from(
        &fixtures,
        "/api/v1/namespaces/vigil/secrets/cluster-1-kubeconfig",
        None,
    );
    assert_eq!(
        secret.data.unwrap_or_default()["value"].0,
        kubeconfig["value"]
    );
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let namespace: Namespace = get_from(&fixtures, "/api/v1/namespaces/vigil", None);
    assert_eq!(namespace.metadata.name.as_deref(), Some("vigil"));
    // Inserting again replaces.
    fixtures.insert_secret("vigil", "cluster-1-kubeconfig", BTreeMap::new());
    let secrets: List<Secret> = get_from(&fixtures, "/api/v1/namespaces/vigil/secrets", None);
    assert_eq!(secrets.items.len(), 1);
    assert_eq!(secrets.items[0].data.as_ref().map(BTreeMap::len), Some(0));
}

#[test]
fn discovery_legacy_and_aggregated() {
    let core: APIVersions = get("/api");
    assert_eq!(core.versions, ["v1"]);
    let groups: APIGroupList = get("/apis");
    let names: Vec<&str> = groups
        .groups
        .iter()
        .map(|group| group.name.as_str())
        .collect();
    assert_eq!(names, ["apps", "policy"]);
    let apps: APIResourceList = get("/apis/apps/v1");
    let scale = apps
        .resources
        .iter()
        .find(|resource| resource.name == "deployments/scale")
        .expect("deployments/scale");
    assert_eq!(
        (
            scale.group.as_deref(),
            scale.version.as_deref(),
            scale.kind.as_str()
        ),
        (Some("autoscaling"), Some("v1"), "Scale")
    );
    let policy: APIResourceList = get("/apis/policy/v1");
    let pdb = policy
        .resources
        .iter()
        .find(|resource| resource.name == "poddisruptionbudgets")
        .expect("pdb");
    assert_eq!(pdb.short_names.as_deref(), Some(&["pdb".to_owned()][..]));
    assert!(pdb.namespaced);
    let core: APIResourceList = get("/api/v1");
    let namespaces = core
        .resources
        .iter()
        .find(|resource| resource.name == "namespaces")
        .expect("namespaces");
    assert!(!namespaces.namespaced);
    let _: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup = get("/apis/policy");

    let response = request(&BASIC, "/apis", Some(AGGREGATED));
    assert_eq!(
        response.content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let aggregated: Value = serde_json::from_slice(&response.body).expect("JSON");
    assert_eq!(aggregated["kind"], "APIGroupDiscoveryList");
    assert_eq!(aggregated["items"][0]["metadata"]["name"], "apps");
    let deployments = &aggregated["items"][0]["versions"][0]["resources"][0];
    assert_eq!(deployments["resource"], "deployments");
    assert_eq!(deployments["shortNames"], json!(["deploy"]));
    assert_eq!(
        deployments["subresources"][0]["responseKind"]["kind"],
        "Scale"
    );
    let core: Value = get_from(&BASIC, "/api", Some(AGGREGATED));
    assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    assert!(
        core["items"][0]["metadata"].get("name").is_none(),
        "the core group has no name"
    );
}

#[track_caller]
fn fixture_error(yaml: &str) -> FixtureError {
    match Fixtures::from_yaml(yaml) {
        Ok(fixtures) => panic!("should not load: {fixtures:?}"),
        Err(error) => error,
    }
}

#[test]
fn fixture_format() {
    // A kind: List is unpacked; namespaces are created for the objects in them; an implied
    // namespace is replaced by a declared one, in whatever order the manifests come.
    let fixtures = Fixtures::from_yaml(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: team}\n  spec: {containers: [{name: c, image: i}]}\n\
         ---\napiVersion: v1\nkind: Namespace\nmetadata: {name: default, labels: {declared: \"yes\"}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
    )
    .expect("valid fixtures");
    let namespaces: List<Namespace> = get_from(&fixtures, "/api/v1/namespaces", None);
    assert_eq!(names(&namespaces.items), ["default", "kube-system", "team"]);
    let declared = namespaces.items[0]
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    assert_eq!(declared.get("declared").map(String::as_str), Some("yes"));
    let pod: Pod = get_from(&fixtures, "/api/v1/namespaces/team/pods/a", None);
    assert_eq!(
        pod.status.and_then(|status| status.phase).as_deref(),
        Some("Pending")
    );
    let _: Secret = get_from(&fixtures, "/api/v1/namespaces/default/secrets/s", None);
    assert!(format!("{fixtures:?}").contains("pods: 1"));

    assert!(matches!(
        fixture_error("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"),
        FixtureError::UnsupportedKind { document: 1, .. }
    ));
    assert!(matches!(
        fixture_error(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: default}\n"
        ),
        FixtureError::Duplicate { document: 2, .. }
    ));
    assert!(matches!(
        fixture_error(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n"
        ),
        FixtureError::InvalidObject { .. }
    ));
    assert!(matches!(
        fixture_error("apiVersion: v1\nkind: Pod\nmetadata: {}\n"),
        FixtureError::MissingName { .. }
    ));
    assert!(matches!(
        fixture_error("just: [text\n"),
        FixtureError::Yaml { .. }
    ));
    assert!(matches!(
        fixture_error("- 1\n- 2\n"),
        FixtureError::NotAnObject { .. }
    ));
    assert!(matches!(
        Fixtures::load(&fixture_dir().join("no-such-file.yaml")),
        Err(FixtureError::Read { .. })
    ));
    // A single file loads as well as a folder.
    let one = Fixtures::load(&fixture_dir().join("30-data-db.yaml")).expect("one file");
    let pods: List<Pod> = get_from(&one, "/api/v1/pods", None);
    assert_eq!(names(&pods.items), ["db-0", "db-1", "db-2"]);
}

/// The health probe is answered thousands of times a second per cluster; a generous bound
/// (even for an unoptimised build) catches an accidental per-request re-serialisation.
#[test]
fn the_namespace_probe_is_cheap() {
    let started = std::time::Instant::now();
    for _ in 0..20_000 {
        let response = request(
            &BASIC,
            "/api/v1/namespaces?limit=1",
            Some("application/json"),
        );
        assert_eq!(response.status, 200);
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < std::time::Duration::from_secs(4),
        "20,000 probes took {elapsed:?}"
    );
}
