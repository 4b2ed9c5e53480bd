//! Legacy template catalogue: `GET /api/templates` (`templates:read`): the catalog templates of
//! the organization's channels (the template object of CONVENTIONS.md), newest first, filtered
//! by `channel_id` and `status`.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

use crate::views::templates::TemplateOut;
use switchboard_domain::scope::Scope;
use switchboard_domain::template::TemplateStatus;

use super::super::auth::Principal;
use super::super::error::{ApiResult, ErrorBody};
use super::super::list_query::ListQuery;
use super::super::pagination::Page;
use super::super::query::QueryParams;
use super::super::state::AppState;
use super::{cursor, page_query};

/// Query parameters of the catalogue (for the OpenAPI document).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct TemplatesParams {
    /// Page size, 1 to 200 (default 50).
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only this channel's templates (a channel of another organization gives an empty list).
    channel_id: Option<i64>,
    /// `approved`, `pending`, `rejected`, `paused` or `disabled`.
    status: Option<String>,
}

/// The organization's template catalogue, newest first.
#[utoipa::path(
    get,
    path = "/api/templates",
    tag = "legacy",
    params(TemplatesParams),
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
    QueryParams(pairs): QueryParams<Vec<(String, String)>>,
) -> ApiResult<Json<Page<TemplateOut>>> {
    principal.require(Scope::TemplatesRead)?;
    let q = ListQuery::parse(pairs, &["limit", "cursor", "channel_id", "status"])?;
    let page = q.page()?;
    let channel_id = q.parsed("channel_id", |raw| {
        raw.trim()
            .parse::<i64>()
            .map_err(|_| "channel_id must be a channel's numeric id".to_owned())
    })?;
    let status = q.parsed("status", |raw| {
        raw.parse::<TemplateStatus>().map_err(|_| {
            "status must be approved, pending, rejected, paused or disabled".to_owned()
        })
    })?;
    let rows = state
        .store
        .list_templates_page(
            principal.org_id,
            channel_id,
            status,
            None,
            page_query(&page),
        )
        .await?;
    let page = Page::from_rows(rows, &page, |t| cursor(t.created_at, t.id));
    Ok(Json(page.map(|t| TemplateOut::from(&t))))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/templates", get(list_templates))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_templates), components(schemas(TemplateOut)))]
pub struct TemplatesApi;
