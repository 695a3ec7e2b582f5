//! `/api/v1/apps` and `/api/v1/deployments`: apps on clusters, their status, moves and
//! deployments. The OFFLINE guard (docs/rules.md#deployment-guard) is checked inside the
//! writing transaction; the platform's writes clear the outage marker
//! (docs/rules.md#marker-cleared).

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use vigil_decision::AppStatus;

use super::auth::Caller;
use super::clusters::check_name;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::problem::Problem;
use super::views::{AppView, DeploymentPage, DeploymentView};
use super::{ApiState, PageQuery, location, newest_first_page, page_size};
use vigil_domain::probe::wall_clock;

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list_apps, register_app))
        .routes(routes!(get_app, delete_app))
        .routes(routes!(reassign_app))
        .routes(routes!(set_app_status))
        .routes(routes!(create_deployment))
        .routes(routes!(get_deployment))
        .routes(routes!(app_deployments))
}

/// Filter of the app list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct AppQuery {
    /// Only the apps on this cluster.
    cluster: Option<String>,
}

/// Lists apps, by name.
#[utoipa::path(get, path = "/api/v1/apps", tag = "apps", params(AppQuery),
    responses(
        (status = 200, description = "The apps", body = Vec<AppView>),
        (status = 400, description = "Invalid filter", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_apps(
    State(state): State<ApiState>,
    ApiQuery(query): ApiQuery<AppQuery>,
) -> Result<axum::Json<Vec<AppView>>, Problem> {
    let apps = match &query.cluster {
        Some(cluster) => state.store.apps_on(cluster).await?,
        None => state.store.apps().await?,
    };
    Ok(axum::Json(apps.iter().map(AppView::from).collect()))
}

/// An app to register on a cluster.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RegisterApp {
    /// Its unique name.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^[^/\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"
    )]
    name: String,
    /// The cluster it goes on.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^[^/\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"
    )]
    cluster: String,
}

/// Registers an app on a cluster, PENDING until deployed.
#[utoipa::path(post, path = "/api/v1/apps", tag = "apps", request_body = RegisterApp,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Registered", body = AppView,
            headers(("Location" = String, description = "The app's URL: `/api/v1/apps/{name}`, the name percent-encoded"))),
        (status = 400, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is taken", body = Problem, content_type = "application/problem+json"),
    ))]
async fn register_app(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<RegisterApp>,
) -> Result<Response, Problem> {
    check_name("body.name", &body.name)?;
    check_name("body.cluster", &body.cluster)?;
    let app = state
        .store
        .register_app_as(
            &body.name,
            &body.cluster,
            AppStatus::Pending,
            Some(caller.actor()),
            wall_clock(),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        [location("/api/v1/apps", &app.name)],
        axum::Json(AppView::from(&app)),
    )
        .into_response())
}

/// The `name` path parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct AppName {
    /// The app's name.
    name: String,
}

/// An app.
#[utoipa::path(get, path = "/api/v1/apps/{name}", tag = "apps", params(AppName),
    responses(
        (status = 200, description = "The app", body = AppView),
        (status = 404, description = "No such app", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_app(
    State(state): State<ApiState>,
    ApiPath(AppName { name }): ApiPath<AppName>,
) -> Result<axum::Json<AppView>, Problem> {
    Ok(axum::Json(AppView::from(&state.store.app(&name).await?)))
}

/// Removes an app and its deployment records; the history of the cluster it was on
/// keeps an `app-deleted` event naming the caller. A cluster can be deleted once no app
/// remains on it.
#[utoipa::path(delete, path = "/api/v1/apps/{name}", tag = "apps", params(AppName),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such app", body = Problem, content_type = "application/problem+json"),
    ))]
async fn delete_app(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(AppName { name }): ApiPath<AppName>,
) -> Result<StatusCode, Problem> {
    state
        .store
        .delete_app_as(&name, Some(caller.actor()), wall_clock())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Where to move an app.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Reassign {
    /// The target cluster.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^[^/\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"
    )]
    cluster: String,
}

/// Moves an app to another cluster: refused (409) when the target is OFFLINE, allowed
/// when it is UNKNOWN. Clears the outage marker.
#[utoipa::path(post, path = "/api/v1/apps/{name}/reassign", tag = "apps", params(AppName),
    request_body = Reassign, security(("bearer" = [])),
    responses(
        (status = 200, description = "Moved", body = AppView),
        (status = 400, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such app or cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The target cluster is OFFLINE", body = Problem, content_type = "application/problem+json"),
    ))]
async fn reassign_app(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(AppName { name }): ApiPath<AppName>,
    ApiJson(body): ApiJson<Reassign>,
) -> Result<axum::Json<AppView>, Problem> {
    check_name("body.cluster", &body.cluster)?;
    let app = state
        .store
        .reassign_app_as(&name, &body.cluster, Some(caller.actor()), wall_clock())
        .await?;
    Ok(axum::Json(AppView::from(&app)))
}

/// An app status, as the OpenAPI document lists them.
#[derive(ToSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(dead_code)]
enum AppStatusName {
    Pending,
    Deployed,
    Degraded,
    Failed,
}

/// An app status set by the platform.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SetStatus {
    /// `PENDING`, `DEPLOYED`, `DEGRADED` or `FAILED`.
    #[schema(value_type = AppStatusName, inline)]
    status: String,
}

/// Sets an app's status (for the platform). Clears the outage marker: an app the
/// platform touched is not restored by a later recovery.
#[utoipa::path(put, path = "/api/v1/apps/{name}/status", tag = "apps", params(AppName),
    request_body = SetStatus, security(("bearer" = [])),
    responses(
        (status = 200, description = "Set", body = AppView),
        (status = 400, description = "Invalid status", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such app", body = Problem, content_type = "application/problem+json"),
    ))]
async fn set_app_status(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(AppName { name }): ApiPath<AppName>,
    ApiJson(body): ApiJson<SetStatus>,
) -> Result<axum::Json<AppView>, Problem> {
    let status: AppStatus = body
        .status
        .parse()
        .map_err(|e: vigil_decision::UnknownName| Problem::invalid("body.status", e.to_string()))?;
    let app = state
        .store
        .set_app_status_as(&name, status, Some(caller.actor()), wall_clock())
        .await?;
    Ok(axum::Json(AppView::from(&app)))
}

/// A deployment of an app on its cluster.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct NewDeployment {
    /// The app.
    app: String,
    /// The version deployed, if the platform tracks one.
    #[serde(default)]
    version: Option<String>,
}

/// A recorded deployment.
#[derive(Debug, Serialize, ToSchema)]
struct Deployment {
    /// Its id.
    id: i64,
    /// The app, now DEPLOYED.
    app: AppView,
}

/// Records a deployment of an app on its cluster: refused (409) when the cluster is
/// OFFLINE; sets DEPLOYED and clears the outage marker.
#[utoipa::path(post, path = "/api/v1/deployments", tag = "apps", request_body = NewDeployment,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Recorded", body = Deployment,
            headers(("Location" = String, description = "The deployment's URL: `/api/v1/deployments/{id}`"))),
        (status = 400, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such app", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The cluster is OFFLINE", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_deployment(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<NewDeployment>,
) -> Result<Response, Problem> {
    if let Some(version) = &body.version
        && version.len() > 253
    {
        return Err(Problem::invalid(
            "body.version",
            "a version has at most 253 characters",
        ));
    }
    let (id, app) = state
        .store
        .deploy_as(
            &body.app,
            body.version.as_deref(),
            Some(caller.actor()),
            wall_clock(),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        [location("/api/v1/deployments", &id.to_string())],
        axum::Json(Deployment {
            id,
            app: AppView::from(&app),
        }),
    )
        .into_response())
}

/// The `id` path parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DeploymentId {
    /// The deployment's id.
    id: i64,
}

/// A recorded deployment: the app, the cluster it went to, the version, who recorded it
/// and when.
#[utoipa::path(get, path = "/api/v1/deployments/{id}", tag = "apps", params(DeploymentId),
    responses(
        (status = 200, description = "The deployment", body = DeploymentView),
        (status = 400, description = "The id is not an integer", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such deployment", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_deployment(
    State(state): State<ApiState>,
    ApiPath(DeploymentId { id }): ApiPath<DeploymentId>,
) -> Result<axum::Json<DeploymentView>, Problem> {
    Ok(axum::Json(DeploymentView::from(
        &state.store.deployment(id).await?,
    )))
}

/// The app's deployments, newest first: where each went (the app's cluster then), the
/// version, who recorded it and when.
#[utoipa::path(get, path = "/api/v1/apps/{name}/deployments", tag = "apps",
    params(AppName, PageQuery),
    responses(
        (status = 200, description = "A page of deployments", body = DeploymentPage),
        (status = 400, description = "Invalid paging", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such app", body = Problem, content_type = "application/problem+json"),
    ))]
async fn app_deployments(
    State(state): State<ApiState>,
    ApiPath(AppName { name }): ApiPath<AppName>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<axum::Json<DeploymentPage>, Problem> {
    let limit = page_size(query.limit, "query.limit")?;
    let deployments = state
        .store
        .deployments_of(&name, query.before, limit + 1)
        .await?;
    let (items, next) = newest_first_page(&deployments, limit, |d| d.id);
    Ok(axum::Json(DeploymentPage { items, next }))
}
