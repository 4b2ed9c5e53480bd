//! `GET /api/v1/integrations/events`: the organization's audit, admin and security log,
//! newest first, filtered; `GET /api/v1/integrations/events/{uuid}`: one entry.

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::event::{EventCategory, OrgEvent};
use switchboard_domain::org_log::{ActorFilter, OrgEventFilter, TypeFilter};
use switchboard_domain::scope::Scope;
use switchboard_store::{OrgEventQuery, StoreError};

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::list_query::{parsed, time};
use super::pagination::{Cursor, Page, PageRequest};
use super::query::StrictQuery;
use super::state::AppState;

/// Query parameters of the events list.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// `next_cursor` of the previous page (repeat the same filters).
    cursor: Option<String>,
    /// Only entries of this category.
    #[param(value_type = Option<EventCategory>)]
    category: Option<String>,
    /// An exact type (`security.api_key_created`), a prefix (`team.*`) or `*` (every type).
    #[param(rename = "type", example = "security.*")]
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// `api_key:ID` (one key), `api_key` (any key), `admin` (the admin tools) or `system`.
    #[param(example = "api_key:12")]
    actor: Option<String>,
    /// Entries created at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    since: Option<String>,
    /// Entries created before this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    until: Option<String>,
}

fn parse_filter(q: &EventsParams) -> Result<OrgEventFilter, ApiError> {
    let filter = OrgEventFilter {
        category: parsed("category", q.category.as_deref(), |c| {
            c.parse::<EventCategory>()
        })?,
        // `*` selects every type, like a webhook subscription (specification 6.2).
        event_type: parsed("type", q.event_type.as_deref(), |t| match t {
            "*" => Ok(None),
            _ => TypeFilter::parse(t).map(Some),
        })?
        .flatten(),
        actor: parsed("actor", q.actor.as_deref(), ActorFilter::parse)?,
        since: time("since", q.since.as_deref())?,
        until: time("until", q.until.as_deref())?,
    };
    if let (Some(since), Some(until)) = (filter.since, filter.until) {
        if until < since {
            return Err(ApiError::invalid_request(
                "until",
                "until must not be before since.",
            ));
        }
    }
    Ok(filter)
}

/// The organization's audit, admin and security events, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/events",
    tag = "organization",
    params(EventsParams),
    security(("bearer" = ["events:read"])),
    responses(
        (status = 200, description = "A page of log entries, newest first.", body = Page<OrgEvent>),
        (status = 400, description = "An unknown parameter or filter value, a malformed time, a bad limit or cursor (`invalid_request`, `details.param`).", body = ErrorBody),
        (status = 401, description = "Missing, invalid, expired or revoked key.", body = ErrorBody),
        (status = 403, description = "The key lacks events:read.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn list_events(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<EventsParams>, ApiError>,
) -> ApiResult<Json<Page<OrgEvent>>> {
    principal.require(Scope::EventsRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let filter = parse_filter(&q)?;
    let rows = state
        .store
        .query_org_events(
            principal.org_id,
            &OrgEventQuery {
                filter,
                before: page
                    .cursor
                    .map(|c| (Timestamp::from_millis(c.time_ms), c.id)),
                limit: page.fetch_limit(),
            },
        )
        .await?;
    let page = Page::from_rows(rows, &page, |r| Cursor {
        time_ms: r.event.created_at.millis(),
        id: r.id,
    });
    Ok(Json(page.map(|r| r.event)))
}

/// One entry of the organization's log.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/events/{uuid}",
    tag = "organization",
    params(("uuid" = String, Path, description = "The entry's UUID.")),
    security(("bearer" = ["events:read"])),
    responses(
        (status = 200, description = "The entry.", body = OrgEvent),
        (status = 401, description = "Missing, invalid, expired or revoked key.", body = ErrorBody),
        (status = 403, description = "The key lacks events:read.", body = ErrorBody),
        (status = 404, description = "No such entry in this organization.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn get_event(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<OrgEvent>> {
    principal.require(Scope::EventsRead)?;
    let not_found = || ApiError::not_found("The event");
    let uuid = Uuid::parse_str(&uuid).map_err(|_| not_found())?;
    match state.store.get_org_event(principal.org_id, uuid).await {
        Ok(r) => Ok(Json(r.event)),
        Err(StoreError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/integrations/events", get(list_events))
        .route("/api/v1/integrations/events/{uuid}", get(get_event))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(list_events, get_event),
    components(schemas(
        OrgEvent,
        EventCategory,
        switchboard_domain::event::Actor,
        switchboard_domain::event::Subject
    ))
)]
pub struct EventsApi;
