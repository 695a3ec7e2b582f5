//! `/api/v1/clusters`: list, get, register, update, delete, probe now, history.

use std::collections::BTreeMap;
use std::path::Path;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use vigil_decision::{ClusterStatus, ConditionType, ProbeOutcome};

use super::auth::Caller;
use super::extract::{ApiJson, ApiPath, ApiQuery, object, optional_object};
use super::problem::{Problem, ProblemKind};
use super::views::{
    AuditView, ClusterPage, ClusterView, EventPage, PolicyBody, ProbedByView, RenderedPage,
};
use super::{ApiState, PageQuery, ProbeNowError, location, newest_first_page, page_size};
use vigil_domain::address_rule::SETTING;
use vigil_domain::parameter::{OPERATOR_PARAMETER_PREFIX, is_operator_parameter};
use vigil_domain::probe::{Probed, wall_clock};
use vigil_domain::reference::{self, Reference, ReferenceError, lies_under};
use vigil_store::{ClusterFilter, ClusterPatch, ClusterSource, NewCluster, PageEntry};

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list_clusters, register_cluster))
        .routes(routes!(get_cluster, update_cluster, delete_cluster))
        .routes(routes!(probe_cluster))
        .routes(routes!(cluster_history))
        .routes(routes!(cluster_findings))
}

/// The longest cluster name, label key or value accepted.
const MAX_NAME: usize = 253;

/// Checks a name used in paths: 1–253 characters, no `/`, no white space or control.
/// The OpenAPI document states it on every body field it checks, as the pattern
/// `^[^/…]+$` (white space and control characters spelled out, so that every
/// regex dialect reads it alike).
pub(super) fn check_name(field: &str, name: &str) -> Result<(), Problem> {
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return Err(Problem::invalid(
            field,
            format!("{field} must have 1 to {MAX_NAME} characters"),
        ));
    }
    if name
        .chars()
        .any(|c| c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(Problem::invalid(
            field,
            format!("{field} must not contain '/', white space or control characters"),
        ));
    }
    Ok(())
}

fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), Problem> {
    for (key, value) in labels {
        if key.is_empty() || key.len() > MAX_NAME || value.len() > MAX_NAME {
            return Err(Problem::invalid(
                format!("{field}.{key}"),
                format!(
                    "label keys must have 1 to {MAX_NAME} characters and values at most {MAX_NAME}"
                ),
            ));
        }
    }
    Ok(())
}

fn check_endpoint(endpoint: &str) -> Result<(), Problem> {
    let uri: axum::http::Uri = endpoint
        .parse()
        .map_err(|e| Problem::invalid("body.endpoint", format!("not a URL: {e}")))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("https" | "http"), Some(host)) if !host.is_empty() => {}
        _ => {
            return Err(Problem::invalid(
                "body.endpoint",
                "the endpoint must be an http(s) URL with a host, e.g. https://10.0.0.1:6443",
            ));
        }
    }
    // The endpoint is stored and shown as it is, like an `http(s)://` reference: the same
    // rule keeps credentials (`user:password@`, `?token=`) out of it.
    let carried = match Reference::parse(endpoint) {
        Err(ReferenceError::CredentialsInUrl) => "its user@host part".to_owned(),
        Err(ReferenceError::CredentialInQuery(name)) => name.map_or_else(
            || "a query parameter".to_owned(),
            |name| format!("its query parameter `{name}`"),
        ),
        _ => return Ok(()),
    };
    Err(Problem::invalid(
        "body.endpoint",
        format!(
            "the endpoint carries a credential in {carried}: it is stored and shown as it is; give the credential as a credential parameter instead"
        ),
    ))
}

/// The host of an `http(s)://` URL (`what` names it in the detail) must lie inside
/// `VIGIL_REGISTRATION_ALLOW`: a caller must not point vigil at a metadata service or
/// any address the operator keeps out of reach. Nothing is resolved or dialled here; the
/// egress checks the addresses a name resolves to when it connects.
fn check_destination(state: &ApiState, field: &str, what: &str, url: &str) -> Result<(), Problem> {
    let Some(host) = url
        .parse::<axum::http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_owned))
    else {
        return Ok(());
    };
    state
        .registration_allow
        .check_host(&host)
        .map_err(|outside| {
            Problem::new(
                ProblemKind::ReferenceNotAllowed,
                format!(
                    "{what}: {outside}; the operator's {SETTING} bounds where clusters may point"
                ),
            )
            .field(field)
        })
}

/// Whether a parameter's value is an `http(s)://` URL (the scheme in any case).
fn is_http_url(value: &str) -> bool {
    let lower = value.get(..8).unwrap_or(value).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// A file reference or a `file:///` parameter must lie under the credential roots; an
/// `http(s)://` reference inside `VIGIL_REGISTRATION_ALLOW`. The reference's text as
/// stored: a file path lexically normalised (`..` refused; where it really lies is
/// checked at every open).
fn check_reference(state: &ApiState, field: &str, text: &str) -> Result<String, Problem> {
    let reference = Reference::parse(text)
        .map_err(|e| Problem::invalid(field, format!("invalid reference: {e}")))?;
    if let Reference::Http { url } = &reference {
        check_destination(state, field, "the reference's host", url)?;
    }
    let reference = reference::normalised(reference).map_err(|e| {
        Problem::new(
            ProblemKind::ReferenceNotAllowed,
            format!("the kubeconfig file reference is not allowed: {e}"),
        )
        .field(field)
    })?;
    if let Reference::File { path, .. } = &reference
        && !lies_under(Path::new(path), &state.credential_roots)
    {
        return Err(Problem::new(
            ProblemKind::ReferenceNotAllowed,
            "a kubeconfig file reference must lie under KUBECONFIG_PATH's files, KUBECONFIG_DIR or VIGIL_CREDENTIAL_DIRS",
        )
        .field(field));
    }
    Ok(reference.to_string())
}

fn check_parameters(
    state: &ApiState,
    parameters: &BTreeMap<String, String>,
) -> Result<(), Problem> {
    for (name, value) in parameters {
        let field = format!("body.parameters.{name}");
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(Problem::invalid(
                field,
                "parameter names must have 1 to 253 characters",
            ));
        }
        if is_operator_parameter(name) {
            return Err(Problem::invalid(
                field,
                format!(
                    "parameters named {OPERATOR_PARAMETER_PREFIX}* are the operator's settings, given only in the plugin's NAME.toml"
                ),
            ));
        }
        if is_http_url(value) {
            check_destination(state, &field, "the parameter's host", value)?;
        }
        if let Some(path) = value.strip_prefix("file://") {
            // `%2e` is a `.` once the plugin runtime decodes the path.
            if path
                .split('/')
                .any(|component| component.to_ascii_lowercase().replace("%2e", ".") == "..")
            {
                return Err(Problem::new(
                    ProblemKind::ReferenceNotAllowed,
                    "a file:/// parameter must not contain `..` components (give the file's own path)",
                )
                .field(field));
            }
            if !path.starts_with('/') || !lies_under(Path::new(path), &state.credential_roots) {
                return Err(Problem::new(
                    ProblemKind::ReferenceNotAllowed,
                    "a file:/// parameter must be an absolute path under KUBECONFIG_PATH's files, KUBECONFIG_DIR or VIGIL_CREDENTIAL_DIRS",
                )
                .field(field));
            }
        } else if value.starts_with("secret://") {
            Reference::parse(value).map_err(|e| {
                Problem::invalid(field, format!("invalid secret:// reference: {e}"))
            })?;
        }
    }
    Ok(())
}

fn check_plugin(state: &ApiState, plugin: Option<&str>) -> Result<(), Problem> {
    if let Some(plugin) = plugin
        && !state.plugins.plugins().iter().any(|p| p.name == plugin)
    {
        return Err(Problem::invalid(
            "body.plugin",
            format!("no plugin named `{plugin}` is loaded"),
        ));
    }
    Ok(())
}

/// A cluster status, as the OpenAPI document lists them.
#[derive(ToSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(dead_code)]
enum StatusName {
    Online,
    Offline,
    Unknown,
}

/// A condition type, as the OpenAPI document lists them.
#[derive(ToSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
enum ConditionName {
    ReferenceBroken,
    NotProbeable,
    CredentialsRejected,
    ProbeStale,
    ProbingDisabled,
    DrainBlocked,
}

/// A cluster source, as the OpenAPI document lists them.
#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum SourceName {
    Discovered,
    Manual,
}

/// Filters and paging of the cluster list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `ONLINE`, `OFFLINE` or `UNKNOWN`.
    #[param(value_type = Option<StatusName>, inline)]
    status: Option<String>,
    /// A condition type the cluster has.
    #[param(value_type = Option<ConditionName>, inline)]
    condition: Option<String>,
    /// `discovered` or `manual`.
    #[param(value_type = Option<SourceName>, inline)]
    source: Option<String>,
    /// A label, `KEY=VALUE`.
    #[param(pattern = "=")]
    label: Option<String>,
    /// The plugin chosen for the cluster.
    plugin: Option<String>,
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The `next` value of the previous page.
    after: Option<String>,
}

impl ListQuery {
    fn filter(&self) -> Result<ClusterFilter, Problem> {
        let status = self
            .status
            .as_deref()
            .map(|s| {
                s.parse::<ClusterStatus>()
                    .map_err(|e| Problem::invalid("query.status", e.to_string()))
            })
            .transpose()?;
        let condition = self
            .condition
            .as_deref()
            .map(|s| {
                s.parse::<ConditionType>()
                    .map_err(|e| Problem::invalid("query.condition", e.to_string()))
            })
            .transpose()?;
        let source = match self.source.as_deref() {
            None => None,
            Some("discovered") => Some(ClusterSource::Discovered),
            Some("manual") => Some(ClusterSource::Manual),
            Some(other) => {
                return Err(Problem::invalid(
                    "query.source",
                    format!("unknown source `{other}`: expected discovered or manual"),
                ));
            }
        };
        let label = self
            .label
            .as_deref()
            .map(|l| {
                l.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| Problem::invalid("query.label", "expected KEY=VALUE"))
            })
            .transpose()?;
        Ok(ClusterFilter {
            status,
            condition,
            source,
            label,
            plugin: self.plugin.clone(),
        })
    }
}

/// Lists clusters, by name, filtered and paged.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters", params(ListQuery),
    responses(
        (status = 200, description = "A page of clusters", body = ClusterPage),
        (status = 400, description = "Invalid filter", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_clusters(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<RenderedPage, Problem> {
    let filter = query.filter()?;
    let limit = page_size(query.limit, "query.limit")?;
    let mut reused = Vec::new();
    let entries = state
        .store
        .list_clusters(&filter, query.after.as_deref(), limit + 1, |revisions| {
            reused = state.views.current(revisions);
            reused.iter().map(Option::is_some).collect()
        })
        .await?;
    let more = entries.len() > limit as usize;
    let mut views = Vec::with_capacity(entries.len().min(limit as usize));
    let mut last = None;
    for (entry, held) in entries.into_iter().zip(reused).take(limit as usize) {
        let view = match (entry, held) {
            (PageEntry::Known { name, .. }, Some(view)) => {
                last = Some(name);
                view
            }
            (PageEntry::Read { record, revision }, _) => {
                let id = record.id;
                let view = ClusterView::new(*record, state.defaults);
                last = Some(view.name.clone());
                let json = Bytes::from(
                    serde_json::to_vec(&view)
                        .map_err(|error| Problem::internal("writing a cluster's view", &error))?,
                );
                state.views.keep(id, revision, json.clone());
                json
            }
            (PageEntry::Known { name, .. }, None) => {
                return Err(Problem::internal(
                    "listing clusters",
                    &std::io::Error::other(format!("no view held for cluster {name}")),
                ));
            }
        };
        views.push(view);
    }
    let next = if more { last } else { None };
    RenderedPage::new(&views, next.as_deref())
}

/// A cluster to register by hand.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RegisterCluster {
    /// Its unique name.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^[^/\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"
    )]
    name: String,
    /// The API server address, e.g. `https://10.0.0.1:6443`; its host must lie inside
    /// the operator's `VIGIL_REGISTRATION_ALLOW`.
    endpoint: String,
    /// The reference to its credentials: `/ABS/PATH#CONTEXT` (under the allowed
    /// directories), `secret://NAMESPACE/NAME?key=KEY&context=CONTEXT` or `https://…`
    /// (its host inside `VIGIL_REGISTRATION_ALLOW`).
    kubeconfig_secret_ref: String,
    /// The plugin to probe it with; default: routing by priority.
    #[serde(default)]
    plugin: Option<String>,
    /// Plugin parameters; credential values as `secret://…?key=…` or `file:///…` references,
    /// `http(s)://` values inside `VIGIL_REGISTRATION_ALLOW`; no `operator.*` names (the
    /// operator's settings, in the plugin's `NAME.toml`).
    #[serde(default)]
    parameters: BTreeMap<String, String>,
    /// Labels.
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Policy overrides.
    #[serde(default, deserialize_with = "object")]
    policy: PolicyBody,
}

/// Registers a cluster by hand. It is UNKNOWN until its first conclusive probe.
#[utoipa::path(post, path = "/api/v1/clusters", tag = "clusters", request_body = RegisterCluster,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Registered", body = ClusterView,
            headers(("Location" = String, description = "The cluster's URL: `/api/v1/clusters/{name}`, the name percent-encoded"))),
        (status = 400, description = "Invalid body or reference not allowed", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is taken", body = Problem, content_type = "application/problem+json"),
    ))]
async fn register_cluster(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<RegisterCluster>,
) -> Result<Response, Problem> {
    check_name("body.name", &body.name)?;
    check_endpoint(&body.endpoint)?;
    check_destination(
        &state,
        "body.endpoint",
        "the endpoint's host",
        &body.endpoint,
    )?;
    let reference = check_reference(
        &state,
        "body.kubeconfig_secret_ref",
        &body.kubeconfig_secret_ref,
    )?;
    check_plugin(&state, body.plugin.as_deref())?;
    check_parameters(&state, &body.parameters)?;
    check_labels("body.labels", &body.labels)?;
    let policy = body
        .policy
        .overrides("body.policy")
        .map_err(|(field, detail)| Problem::invalid(field, detail))?;
    let cluster = NewCluster {
        name: body.name,
        endpoint: body.endpoint,
        reference,
        plugin: body.plugin,
        parameters: body.parameters,
        labels: body.labels,
        policy,
    };
    state
        .store
        .register(&cluster, Some(caller.actor()), wall_clock())
        .await?;
    state.wake.wake();
    let record = state.store.cluster(&cluster.name).await?;
    Ok((
        StatusCode::CREATED,
        [location("/api/v1/clusters", &record.name)],
        axum::Json(ClusterView::new(record, state.defaults)),
    )
        .into_response())
}

/// The `name` path parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct ClusterName {
    /// The cluster's name.
    name: String,
}

/// A cluster: status, conditions, reason and its class, counters, times, plugin, policy.
#[utoipa::path(get, path = "/api/v1/clusters/{name}", tag = "clusters", params(ClusterName),
    responses(
        (status = 200, description = "The cluster", body = ClusterView),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_cluster(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
) -> Result<axum::Json<ClusterView>, Problem> {
    let record = state.store.cluster(&name).await?;
    if record.ignored {
        return Err(Problem::new(
            ProblemKind::NotFound,
            format!("cluster `{name}` does not exist"),
        ));
    }
    Ok(axum::Json(ClusterView::new(record, state.defaults)))
}

/// A change to a cluster: each field given replaces the stored one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct UpdateCluster {
    /// New policy overrides (replaces all of them).
    #[serde(default, deserialize_with = "optional_object")]
    policy: Option<PolicyBody>,
    /// New labels (replaces all of them).
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    /// New plugin parameters (replaces all of them).
    #[serde(default)]
    parameters: Option<BTreeMap<String, String>>,
    /// The plugin; `null` returns the cluster to routing by priority.
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable)]
    plugin: Option<Option<String>>,
}

/// A field that is present (possibly `null`) is `Some`; an absent one stays `None`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// Changes a cluster's policy, labels, parameters or plugin.
#[utoipa::path(patch, path = "/api/v1/clusters/{name}", tag = "clusters", params(ClusterName),
    request_body = UpdateCluster, security(("bearer" = [])),
    responses(
        (status = 200, description = "Updated", body = ClusterView),
        (status = 400, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn update_cluster(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
    ApiJson(body): ApiJson<UpdateCluster>,
) -> Result<axum::Json<ClusterView>, Problem> {
    if let Some(Some(plugin)) = &body.plugin {
        check_plugin(&state, Some(plugin))?;
    }
    if let Some(parameters) = &body.parameters {
        check_parameters(&state, parameters)?;
    }
    if let Some(labels) = &body.labels {
        check_labels("body.labels", labels)?;
    }
    let policy = body
        .policy
        .map(|p| p.overrides("body.policy"))
        .transpose()
        .map_err(|(field, detail)| Problem::invalid(field, detail))?;
    let patch = ClusterPatch {
        policy,
        labels: body.labels,
        parameters: body.parameters,
        plugin: body.plugin,
    };
    let record = state
        .store
        .update_cluster(&name, &patch, Some(caller.actor()), wall_clock())
        .await?;
    state.wake.wake();
    Ok(axum::Json(ClusterView::new(record, state.defaults)))
}

/// Deletes a cluster; refused (409) while apps remain on it. A discovered cluster is
/// remembered as ignored, so discovery does not add it back until it is registered again.
#[utoipa::path(delete, path = "/api/v1/clusters/{name}", tag = "clusters", params(ClusterName),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Apps remain on it", body = Problem, content_type = "application/problem+json"),
    ))]
async fn delete_cluster(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
) -> Result<StatusCode, Problem> {
    state
        .store
        .delete_cluster(&name, Some(caller.actor()), wall_clock())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The outcome of one probe.
#[derive(Debug, Serialize, ToSchema)]
struct ProbeResult {
    /// `healthy`, `unhealthy`, `credentials-rejected`, `not-probeable` or `inconclusive`.
    outcome: String,
    /// The reason class, for every outcome but `healthy`.
    reason_class: Option<String>,
    /// The explanation, for every outcome but `healthy`.
    message: Option<String>,
    /// The plugin and generation that produced the outcome; absent when no plugin did.
    probed_by: Option<ProbedByView>,
    /// The cluster after the outcome was applied.
    cluster: ClusterView,
}

/// Probes the cluster once, now, and applies the outcome under the worker's rules
/// (the same timeout, transaction and failure spacing). Refused (409) while a probe of
/// it is running. Probes on demand run under the worker's concurrency bound, taking at
/// most half of it: beyond that the call is refused (429) with `Retry-After`, and the
/// scheduled probes keep their slots.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/probe", tag = "clusters", params(ClusterName),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The outcome, applied", body = ProbeResult),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A probe is already running", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many probes are running; try again after `Retry-After` seconds", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds after which a slot is expected to be free"))),
    ))]
async fn probe_cluster(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
) -> Result<Response, Problem> {
    let probed = match state.prober.probe_now(&name).await {
        Ok(probed) => probed,
        Err(error @ ProbeNowError::NotFound(_)) => {
            return Err(Problem::new(ProblemKind::NotFound, error.to_string()));
        }
        Err(error @ ProbeNowError::InProgress(_)) => {
            return Err(Problem::new(
                ProblemKind::ProbeInProgress,
                error.to_string(),
            ));
        }
        Err(ref error @ ProbeNowError::Busy { retry_after, .. }) => {
            let mut response =
                Problem::new(ProblemKind::ProbesBusy, error.to_string()).into_response();
            // Whole seconds, rounded up: a client waiting that long finds the slot free.
            let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.max(1).into());
            return Ok(response);
        }
        Err(ProbeNowError::Store(error)) => return Err(error.into()),
    };
    let Probed { outcome, by } = probed;
    let record = state.store.cluster(&name).await?;
    let (reason_class, message) = match &outcome {
        ProbeOutcome::Healthy => (None, None),
        other => (
            other.class().map(|c| c.as_str().to_owned()),
            other.message().map(str::to_owned),
        ),
    };
    Ok(axum::Json(ProbeResult {
        outcome: outcome.label().to_owned(),
        reason_class,
        message,
        probed_by: by.as_ref().map(ProbedByView::from),
        cluster: ClusterView::new(record, state.defaults),
    })
    .into_response())
}

/// The cluster's history, newest first: transitions, conditions, counted failures,
/// cascades and the changes made through the API (with the caller's token name).
#[utoipa::path(get, path = "/api/v1/clusters/{name}/history", tag = "clusters",
    params(ClusterName, PageQuery),
    responses(
        (status = 200, description = "A page of history", body = EventPage),
        (status = 400, description = "Invalid paging", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn cluster_history(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<axum::Json<EventPage>, Problem> {
    let limit = page_size(query.limit, "query.limit")?;
    let events = state
        .store
        .cluster_history(&name, query.before, limit + 1)
        .await?;
    let (items, next) = newest_first_page(&events, limit, |e| e.id);
    Ok(axum::Json(EventPage { items, next }))
}

/// The cluster's latest drain-readiness audit: the findings of the last audit that
/// could read everything (what blocks node drains, and how to fix it), the kinds it
/// read and the audit plugin generation that ran it, and the failure of the last audit
/// if it could not read what it needed (the findings shown are then the previous
/// ones). Never audited: no date and no finding.
#[utoipa::path(get, path = "/api/v1/clusters/{name}/findings", tag = "clusters",
    params(ClusterName),
    responses(
        (status = 200, description = "The latest audit", body = AuditView),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    ))]
async fn cluster_findings(
    State(state): State<ApiState>,
    ApiPath(ClusterName { name }): ApiPath<ClusterName>,
) -> Result<axum::Json<AuditView>, Problem> {
    let audit = state.store.audit(&name).await?;
    Ok(axum::Json(AuditView::from(&audit)))
}
