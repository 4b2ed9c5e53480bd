//! Legacy template catalogue: `GET /api/templates` (`templates:read`): the catalog templates of
//! the organization's channels (the template object of CONVENTIONS.md), newest first, filtered
//! by `channel_id`, `status` and `name`: the v1 list (`crate::http::templates`) under its legacy
//! path.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

use crate::views::templates::TemplateOut;

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::pagination::Page;
use super::super::query::StrictQuery;
use super::super::state::AppState;
use crate::http::templates::TemplateListParams;

/// The organization's template catalogue, newest first.
#[utoipa::path(
    get,
    path = "/api/templates",
    tag = "legacy",
    params(TemplateListParams),
    security(("bearer" = ["templates:read"])),
    responses(
        (status = 200, description = "A page of catalog templates, newest first.", body = Page<TemplateOut>),
        (status = 400, description = "invalid_request: an unknown parameter, a bad channel_id, status, limit or cursor.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_templates(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<TemplateListParams>, ApiError>,
) -> ApiResult<Json<Page<TemplateOut>>> {
    crate::http::templates::list_page(&state, &principal, q).await
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/templates", get(list_templates))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_templates), components(schemas(TemplateOut)))]
pub struct TemplatesApi;
