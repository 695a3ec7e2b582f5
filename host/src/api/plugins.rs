//! `/api/v1/plugins`: the loaded probe plugins.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::ApiState;
use super::views::PluginView;

pub(super) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(list_plugins))
}

/// The loaded plugins, in routing order: name, version, contract package, hash,
/// reference schemes, grants, and their probe and fault counts.
#[utoipa::path(get, path = "/api/v1/plugins", tag = "plugins",
    responses((status = 200, description = "The plugins", body = Vec<PluginView>)))]
async fn list_plugins(State(state): State<ApiState>) -> axum::Json<Vec<PluginView>> {
    axum::Json(state.plugins.plugins())
}
