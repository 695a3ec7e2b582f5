//! `/api/v1/plugins`: the probe plugins, their generations, and reloading them.

use axum::Extension;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::problem::{Problem, ProblemKind};
use super::views::{PluginView, ReloadView};
use super::{ApiState, Caller};

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list_plugins))
        .routes(routes!(reload_plugins))
}

/// Every plugin: those that serve, in routing order, then the failed and the retired.
/// For each: its state and generation, version, contract package, hash, reference
/// schemes, grants, probe and fault counts, a probation's progress and the last
/// failure (file, stage, message, time).
#[utoipa::path(get, path = "/api/v1/plugins", tag = "plugins",
    responses((status = 200, description = "The plugins", body = Vec<PluginView>)))]
async fn list_plugins(State(state): State<ApiState>) -> axum::Json<Vec<PluginView>> {
    axum::Json(state.plugins.plugins())
}

/// Reloads the plugin directory now, as a change to it or SIGHUP does: new or changed
/// files become candidate generations, promoted when they load (a replacement then on
/// probation), refused with their failure kept when they do not — the previous
/// generation serving on — and removed files retire their plugin. Recorded in the
/// history with the caller's token name.
#[utoipa::path(post, path = "/api/v1/plugins/reload", tag = "plugins",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the reload did", body = ReloadView),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The engine runs without plugins (no plugin directory at start, embedded plugins off)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The plugin directory cannot be read", body = Problem, content_type = "application/problem+json"),
    ))]
async fn reload_plugins(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<axum::Json<ReloadView>, Problem> {
    let reloaded = match state.plugins.reload().await {
        None => {
            return Err(Problem::new(
                ProblemKind::NoPluginDirectory,
                "vigil runs without plugins (VIGIL_PLUGIN_DIR did not exist at start and VIGIL_PLUGINS_EMBEDDED is false): restart it once the directory exists",
            ));
        }
        Some(Err(message)) => return Err(Problem::new(ProblemKind::Internal, message)),
        Some(Ok(view)) => view,
    };
    state
        .store
        .record_plugin_event(
            "plugins-reloaded",
            &serde_json::to_value(&reloaded).unwrap_or_default(),
            Some(caller.actor()),
            vigil_domain::probe::wall_clock(),
        )
        .await?;
    Ok(axum::Json(reloaded))
}
