//! `GET /api/v1/integrations/templates` (`templates:read`): the organization's template
//! catalogue, so that an integrator can find the `template_uuid` a catalog send names
//! (CONVENTIONS "WhatsApp depth", Templates). Newest first, list conventions; filters
//! `channel_id`, `status` and `name`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use crate::views::templates::TemplateOut;
use switchboard_domain::scope::Scope;
use switchboard_domain::template::TemplateStatus;

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::list_query::parsed;
use super::pagination::{Page, PageRequest, cursor, page_query};
use super::query::StrictQuery;
use super::state::AppState;

pub const TEMPLATES_PATH: &str = "/api/v1/integrations/templates";

/// The longest template name looked at (WhatsApp's limit is 512).
const MAX_NAME: usize = 512;

/// Query parameters of the catalogue (also the legacy `GET /api/templates`'s).
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TemplateListParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>)]
    limit: Option<String>,
    /// `next_cursor` of the previous page (keep the same filters).
    cursor: Option<String>,
    /// Only this channel's templates (a channel of another organization gives an empty list).
    #[param(value_type = Option<i64>)]
    channel_id: Option<String>,
    /// `approved`, `pending`, `rejected`, `paused` or `disabled`.
    status: Option<String>,
    /// Only templates with exactly this name (every language).
    name: Option<String>,
}

/// The organization's template catalogue, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/templates",
    operation_id = "list_templates_v1",
    tag = "templates",
    params(TemplateListParams),
    security(("bearer" = ["templates:read"])),
    responses(
        (status = 200, description = "A page of catalog templates, newest first.", body = Page<TemplateOut>),
        (status = 400, description = "invalid_request (an unknown parameter, a bad channel_id, status, name or limit) or invalid_cursor.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_templates(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<TemplateListParams>, ApiError>,
) -> ApiResult<Json<Page<TemplateOut>>> {
    list_page(&state, &principal, q).await
}

/// A page of the catalogue (also the legacy `GET /api/templates`, which has the same
/// parameters).
pub(crate) async fn list_page(
    state: &AppState,
    principal: &Principal,
    q: Result<StrictQuery<TemplateListParams>, ApiError>,
) -> ApiResult<Json<Page<TemplateOut>>> {
    principal.require(Scope::TemplatesRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let channel_id = parsed("channel_id", q.channel_id.as_deref(), |raw| {
        raw.trim()
            .parse::<i64>()
            .map_err(|_| "channel_id must be a channel's numeric id".to_owned())
    })?;
    let status = parsed("status", q.status.as_deref(), |raw| {
        raw.parse::<TemplateStatus>().map_err(|_| {
            "status must be approved, pending, rejected, paused or disabled".to_owned()
        })
    })?;
    let name = parsed("name", q.name.as_deref(), |raw| {
        let raw = raw.trim();
        if raw.is_empty() || raw.chars().count() > MAX_NAME {
            Err(format!("name must be 1 to {MAX_NAME} characters"))
        } else {
            Ok(raw.to_owned())
        }
    })?;
    let rows = state
        .store
        .list_templates_page(
            principal.org_id,
            channel_id,
            status,
            name.as_deref(),
            page_query(&page),
        )
        .await?;
    let page = Page::from_rows(rows, &page, |t| cursor(t.created_at, t.id));
    Ok(Json(page.map(|t| TemplateOut::from(&t))))
}

pub fn router() -> Router<AppState> {
    Router::new().route(TEMPLATES_PATH, get(list_templates))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_templates), components(schemas(TemplateOut)))]
pub struct TemplatesApi;
