//! The REST API of vigil: the only crate that knows axum and serves HTTP.
//!
//! [`app`] builds the whole router from an [`ApiState`]; tests drive it with `oneshot`
//! and no socket. Every route is declared with `utoipa`, so `/openapi.json` is generated
//! from the code and cannot forget a route. Errors are `application/problem+json`,
//! built in one place ([`problem`]). A bearer token protects every mutation (and every
//! read with read auth); the token's *name* is recorded with each change. Without a valid
//! token a request must also be addressed to vigil (its `Host`), and a change must not come
//! from another origin's page (its `Origin`): see [`auth`].

#![forbid(unsafe_code)]

pub mod auth;
pub mod problem;
pub mod server;

// utoipa's `path` macro expands `params(Type)` to fully qualified paths.
#[allow(unused_qualifications)]
mod apps;
#[allow(unused_qualifications)]
mod clusters;
#[allow(unused_qualifications)]
mod events;
mod extract;
mod page;
mod plugins;
#[allow(unused_qualifications)]
mod uptime;
mod view_cache;
mod views;

use std::fmt::Write as _;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, middleware};
use serde::Serialize;
use utoipa::openapi::OpenApi as OpenApiDoc;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use vigil_decision::HealthPolicy;

pub use self::auth::{Access, Caller, PublicUrl, TokensError};
pub use self::events::EventFeed;
pub use self::problem::{Problem, ProblemKind};
pub use self::view_cache::ViewCache;
pub use self::views::{
    PluginFailureView, PluginView, ProbationView, ProbedByView, ReloadView, rfc3339,
};
use vigil_domain::probe::Probed;
use vigil_engine::worker::WorkerHandle;
use vigil_store::Store;

/// The largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The largest page a list returns.
pub const MAX_PAGE: u32 = 1000;

/// Paging of a list read newest first (a cluster's history, an app's deployments).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The `next` value of the previous page.
    before: Option<i64>,
}

/// A page of a list read newest first: `rows` holds up to one row more than `limit`
/// (read so, to know whether another page follows); answers the page's views (`V::from`
/// each row) and the `next` cursor, the id of its last row, when another page follows.
fn newest_first_page<R, V>(rows: &[R], limit: u32, id: impl Fn(&R) -> i64) -> (Vec<V>, Option<i64>)
where
    V: for<'a> From<&'a R>,
{
    let page = &rows[..rows.len().min(limit as usize)];
    let next = (rows.len() > page.len())
        .then(|| page.last().map(&id))
        .flatten();
    (page.iter().map(V::from).collect(), next)
}

/// The page size asked for in `field`, 100 if none.
fn page_size(limit: Option<u32>, field: &str) -> Result<u32, Problem> {
    match limit {
        None => Ok(100),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(Problem::invalid(
            field,
            format!("limit must be between 1 and {MAX_PAGE}, not {n}"),
        )),
    }
}

/// Why a probe asked through the API did not run.
#[derive(Debug, thiserror::Error)]
pub enum ProbeNowError {
    /// No such cluster.
    #[error("cluster `{0}` does not exist")]
    NotFound(String),
    /// The worker (or another API call) is probing it right now.
    #[error("a probe of cluster `{0}` is already running; try again when it ends")]
    InProgress(String),
    /// The probes on demand take up their share of the concurrency bound.
    #[error(
        "too many probes are running to probe cluster `{cluster}` now; try again in {}s",
        retry_after.as_secs()
    )]
    Busy {
        /// The cluster asked for.
        cluster: String,
        /// When to try again (`Retry-After`).
        retry_after: std::time::Duration,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] vigil_store::StoreError),
}

/// A boxed future, for the object-safe services below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Probes one cluster now under the worker's rules, never while the worker probes it.
pub trait ProbeNow: Send + Sync + 'static {
    /// Probes `cluster` once and applies the outcome; returns it.
    fn probe_now<'a>(&'a self, cluster: &'a str) -> BoxFuture<'a, Result<Probed, ProbeNowError>>;
}

/// What the engine knows of its plugins.
pub trait PluginCatalog: Send + Sync + 'static {
    /// Every plugin: the serving ones in routing order, then the failed and retired.
    fn plugins(&self) -> Vec<PluginView>;

    /// Compares the plugin directory with what serves and acts on the differences;
    /// `None` when the engine runs without a plugin directory.
    fn reload(&self) -> BoxFuture<'_, Option<Result<ReloadView, String>>>;
}

/// How far start-up has come; `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Readiness {
    /// The first discovery finished.
    pub discovered: AtomicBool,
    /// When the engine started (milliseconds since the epoch).
    pub started: AtomicI64,
    /// Latched once every cluster that was UNKNOWN and unprobed at start-up has been
    /// probed (a status persisted from before counts as known).
    pub caught_up: AtomicBool,
    /// Whether the store takes the probes' results (the worker's own record).
    pub writes: Arc<vigil_engine::worker::StoreWrites>,
    /// This replica's id, when replicas share the fleet on PostgreSQL.
    pub replica: Option<String>,
    /// The notification sinks' state, when a notifications file is configured: details of
    /// `/readyz` (a failing sink does not make vigil unready).
    pub notifications: Option<NotificationsReport>,
}

/// Reports the notification sinks' state when asked.
#[derive(Clone)]
pub struct NotificationsReport(pub Arc<dyn Fn() -> NotificationsView + Send + Sync>);

impl std::fmt::Debug for NotificationsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NotificationsReport")
    }
}

/// The notification sinks, as `/readyz` shows them.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct NotificationsView {
    /// Each configured sink.
    pub sinks: Vec<SinkView>,
    /// Why the notifications file last read again (SIGHUP) was refused: the one before it
    /// stays in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
}

/// One notification sink.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SinkView {
    /// Its name in the notifications file.
    pub name: String,
    /// `webhook` or `alertmanager`.
    pub kind: String,
    /// Whether its last attempts failed, `failing_after` times in a row or more.
    pub failing: bool,
    /// Failed attempts in a row.
    pub attempts: u64,
    /// The last failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Notifications passed over undelivered since the sink was configured: refused for
    /// good by the receiver (a 4xx other than 408 and 429) or after `dead_letter_after`
    /// attempts. Not sent again; the ones after them were. Never makes vigil unready.
    pub dead_letters: u64,
    /// The last of them: its event id and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_dead_letter: Option<String>,
}

impl Readiness {
    /// Whether vigil is ready, and why not: the one judgement that `/readyz` answers and
    /// `/metrics` reports as `vigil_ready`. Ready when the database answers and takes the
    /// probes' results, discovery has run, and the clusters overdue at start-up have been
    /// probed.
    async fn assess(&self, store: &Store) -> Ready {
        let brake = store.brake_state().await;
        let database = brake.is_ok();
        let discovered = self.discovered.load(Ordering::Acquire);
        let caught_up = self.caught_up(store).await;
        let write_failure = self.writes.failing();
        let (claims, cut_off) = match &self.replica {
            Some(replica) => (
                store.claims_held(replica).await.ok(),
                store.replica_cut_off(replica).await.ok(),
            ),
            None => (None, None),
        };
        let mut reasons = Vec::new();
        if !database {
            reasons.push("the database does not answer".to_owned());
        }
        if let Some(failure) = &write_failure {
            reasons.push(format!(
                "store writes failing since {} ({} results not written): {}; the log has the error",
                rfc3339(failure.since),
                failure.failures,
                failure.reason
            ));
        }
        if !discovered {
            reasons.push("the first discovery has not finished".to_owned());
        }
        if discovered && !caught_up {
            reasons.push("clusters overdue at start-up are still being probed".to_owned());
        }
        Ready {
            ready: reasons.is_empty(),
            database: Some(database),
            store_writes: Some(write_failure.is_none()),
            discovered: Some(discovered),
            caught_up: Some(caught_up),
            brake_holding: Some(brake.is_ok_and(|b| b.verdict.holds())),
            replica: self.replica.clone(),
            claims,
            cut_off,
            notifications: self.notifications.as_ref().map(|report| (report.0)()),
            reasons,
        }
    }

    /// Whether the clusters overdue at start-up have been probed; checked against the
    /// store until it holds once, then latched.
    async fn caught_up(&self, store: &Store) -> bool {
        if self.caught_up.load(Ordering::Acquire) {
            return true;
        }
        if !self.discovered.load(Ordering::Acquire) {
            return false;
        }
        let started = vigil_decision::Timestamp(self.started.load(Ordering::Acquire));
        let done = store
            .awaiting_first_probe(started)
            .await
            .is_ok_and(|n| n == 0);
        if done {
            self.caught_up.store(true, Ordering::Release);
        }
        done
    }
}

/// Everything the API needs, handed in.
#[derive(Clone)]
pub struct ApiState {
    /// The database.
    pub store: Store,
    /// Probing on demand.
    pub prober: Arc<dyn ProbeNow>,
    /// The loaded plugins.
    pub plugins: Arc<dyn PluginCatalog>,
    /// Tokens.
    pub access: Access,
    /// Where a manually registered file reference may lie: under `KUBECONFIG_PATH`'s files,
    /// `KUBECONFIG_DIR` or `VIGIL_CREDENTIAL_DIRS`.
    pub credential_roots: Arc<[PathBuf]>,
    /// Where a registered endpoint or `http(s)://` URL may point
    /// (`VIGIL_REGISTRATION_ALLOW`).
    pub registration_allow: Arc<vigil_domain::address_rule::AddressRule>,
    /// The global policy defaults, to show the policy in force.
    pub defaults: HealthPolicy,
    /// Start-up progress.
    pub readiness: Arc<Readiness>,
    /// Renders `/metrics`, when metrics are enabled.
    pub metrics: Option<Arc<dyn MetricsRenderer>>,
    /// Wakes the worker after a registration or a policy change.
    pub wake: WorkerHandle,
    /// Rendered cluster views reused by list pages while their rows are unchanged.
    pub views: Arc<ViewCache>,
    /// What open event streams share: their cap and one notifier of new events.
    pub events: Arc<EventFeed>,
}

/// Renders the Prometheus exposition.
pub trait MetricsRenderer: Send + Sync + 'static {
    /// The text to serve and its content type; `ready` is whether `/readyz` would answer
    /// 200 now (`vigil_ready`).
    fn render<'a>(
        &'a self,
        store: &'a Store,
        ready: bool,
    ) -> BoxFuture<'a, Result<(String, &'static str), vigil_store::StoreError>>;
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("access", &self.access)
            .field("credential_roots", &self.credential_roots)
            .finish_non_exhaustive()
    }
}

impl<P: vigil_domain::probe::Prober> ProbeNow for vigil_engine::worker::OnDemand<P> {
    fn probe_now<'a>(&'a self, cluster: &'a str) -> BoxFuture<'a, Result<Probed, ProbeNowError>> {
        use vigil_engine::worker::OnDemandError;
        use vigil_store::StoreError;
        Box::pin(async move {
            match self.probe(cluster).await {
                Ok(Some(probed)) => Ok(probed),
                Ok(None) | Err(OnDemandError::Store(StoreError::NotFound { .. })) => {
                    Err(ProbeNowError::NotFound(cluster.to_owned()))
                }
                // Probing here, or on another replica that holds the cluster's claim.
                Err(OnDemandError::InProgress(name) | OnDemandError::ClaimedElsewhere(name)) => {
                    Err(ProbeNowError::InProgress(name))
                }
                Err(OnDemandError::Busy {
                    cluster,
                    retry_after,
                }) => Err(ProbeNowError::Busy {
                    cluster,
                    retry_after,
                }),
                Err(OnDemandError::Store(error)) => Err(ProbeNowError::Store(error)),
            }
        })
    }
}

impl MetricsRenderer for vigil_engine::metrics::Metrics {
    fn render<'a>(
        &'a self,
        store: &'a Store,
        ready: bool,
    ) -> BoxFuture<'a, Result<(String, &'static str), vigil_store::StoreError>> {
        Box::pin(async move {
            let text = self.render_with_readiness(store, ready).await?;
            Ok((text, vigil_engine::metrics::CONTENT_TYPE))
        })
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "vigil",
        description = "Cluster health engine: clusters, their status and history, apps and deployments, plugins.",
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
    tags(
        (name = "clusters", description = "Clusters, their status, policy and history"),
        (name = "apps", description = "Apps and deployments"),
        (name = "plugins", description = "Probe plugins"),
        (name = "events", description = "The live stream of transitions and cascades"),
        (name = "health", description = "vigil's own health"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut OpenApiDoc) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The router and its OpenAPI document, built together.
fn routes() -> (Router<ApiState>, OpenApiDoc) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(clusters::routes())
        .merge(apps::routes())
        .merge(plugins::routes())
        .merge(events::routes())
        .merge(uptime::routes())
        .routes(utoipa_axum::routes!(healthz))
        .routes(utoipa_axum::routes!(readyz))
        .routes(utoipa_axum::routes!(metrics))
        .routes(utoipa_axum::routes!(openapi_json))
        .split_for_parts();
    auth::declare_guard_responses(&mut doc);
    problem::document_unavailable(&mut doc);
    (router, doc)
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a path segment
/// or a query value: any cluster or app name, put in a URL, means that name and no other.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The `Location` header of a `201 Created` answer (RFC 9110 §10.2.2): the path of the
/// resource named `name` in `collection` (e.g. `/api/v1/clusters`), the name encoded as
/// one path segment.
pub(crate) fn location(collection: &str, name: &str) -> (header::HeaderName, HeaderValue) {
    let path = format!("{collection}/{}", percent_encode(name));
    let value = HeaderValue::try_from(path)
        .expect("a path of unreserved characters and %XX escapes is a valid header value");
    (header::LOCATION, value)
}

/// The OpenAPI document of the API, built once.
pub fn openapi() -> &'static OpenApiDoc {
    static DOC: OnceLock<OpenApiDoc> = OnceLock::new();
    DOC.get_or_init(|| routes().1)
}

/// The whole HTTP application.
pub fn app(state: ApiState) -> Router {
    let (router, _) = routes();
    router
        .merge(page::routes())
        .fallback(|| async { Problem::new(ProblemKind::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                ProblemKind::MethodNotAllowed,
                "this route does not accept that method",
            )
            .field("method")
        })
        .layer(middleware::from_fn_with_state(
            state.access.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// vigil's liveness.
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    /// `ok`.
    status: &'static str,
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Alive", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// vigil's readiness. Without a token (when tokens are configured) only `ready` and
/// `reasons`.
#[derive(Debug, Default, Serialize, ToSchema)]
struct Ready {
    /// Whether vigil is ready.
    ready: bool,
    /// The database answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    database: Option<bool>,
    /// The database takes the probes' results: false from a failed write (a full disk, a
    /// database that refuses writes) until one succeeds again.
    #[serde(skip_serializing_if = "Option::is_none")]
    store_writes: Option<bool>,
    /// The first discovery finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    discovered: Option<bool>,
    /// The clusters overdue at start-up have been probed.
    #[serde(skip_serializing_if = "Option::is_none")]
    caught_up: Option<bool>,
    /// Whether the mass-failure brake holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    brake_holding: Option<bool>,
    /// This replica's id, when replicas share the fleet on PostgreSQL.
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<String>,
    /// The claims on clusters this replica holds now (probes in flight), when replicas
    /// share the fleet.
    #[serde(skip_serializing_if = "Option::is_none")]
    claims: Option<u64>,
    /// Whether this replica considers itself cut off: its own recent probes fail while
    /// the other replicas' succeed. It then probes only a few canaries, and its failures
    /// are not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_off: Option<bool>,
    /// The notification sinks, when a notifications file is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    notifications: Option<NotificationsView>,
    /// Why vigil is not ready, one line each; empty when it is.
    reasons: Vec<String>,
}

/// Ready when the database answers and takes the probes' results, discovery has run, and
/// the clusters overdue at start-up have been probed; otherwise `reasons` says why.
/// Reports the brake, the sinks and the replica to a request with a token (or to every
/// request when no token is configured); without one, only `ready` and `reasons`.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "Not ready, and why", body = Ready),
    ))]
async fn readyz(
    State(state): State<ApiState>,
    caller: Option<axum::Extension<Caller>>,
) -> Response {
    let ready = state.readiness.assess(&state.store).await;
    let status = if ready.ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    if state
        .access
        .sees_details(caller.as_ref().map(|caller| &caller.0))
    {
        return (status, Json(ready)).into_response();
    }
    // Without a token (when tokens exist): whether vigil is ready and why not, nothing of
    // its sinks, replica or claims.
    let brief = Ready {
        ready: ready.ready,
        reasons: ready.reasons,
        ..Ready::default()
    };
    (status, Json(brief)).into_response()
}

/// This document: the OpenAPI description of every route, generated from the code.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
async fn openapi_json() -> Json<&'static OpenApiDoc> {
    Json(openapi())
}

/// Prometheus metrics (text exposition format 0.0.4): clusters by status and condition,
/// probe durations by plugin and outcome, failures by reason class, transitions,
/// cascades, the brake, plugin faults, scheduling ticks, and `vigil_ready` (1 while
/// `/readyz` answers 200). No per-cluster label unless `VIGIL_METRICS_PER_CLUSTER=true`.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
        (status = 404, description = "Metrics are not enabled", body = Problem, content_type = "application/problem+json"),
    ))]
async fn metrics(State(state): State<ApiState>) -> Response {
    let Some(renderer) = &state.metrics else {
        return Problem::new(ProblemKind::NotFound, "metrics are not enabled").into_response();
    };
    let ready = state.readiness.assess(&state.store).await.ready;
    match renderer.render(&state.store, ready).await {
        Ok((text, content_type)) => ([(header::CONTENT_TYPE, content_type)], text).into_response(),
        Err(error) => Problem::internal("rendering the metrics", &error).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(percent_encode("kind-dev_1.x~"), "kind-dev_1.x~");
        assert_eq!(percent_encode("a b?c#d%"), "a%20b%3Fc%23d%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
        let (name, value) = location("/api/v1/clusters", "a/b");
        assert_eq!(name, header::LOCATION);
        assert_eq!(value, "/api/v1/clusters/a%2Fb");
    }
}
