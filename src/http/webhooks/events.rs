//! `GET /webhook-events`: the event catalogue of this deployment.

use axum::Json;

use serde::Serialize;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue;

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{Cursor, Page, PageRequest};
use crate::http::query::StrictQuery;

/// One event of the catalogue.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EventTypeOut {
    /// The full event name, such as `message.sent`.
    pub name: &'static str,
    /// The namespace: the part before the first dot.
    pub namespace: &'static str,
    /// What the event means, in one line.
    pub description: &'static str,
    /// Whether this deployment ever emits it (the catalogue also holds events of modules this
    /// deployment does not run; subscribing to them is allowed, with a warning).
    pub emitted: bool,
}

/// The event catalogue of this deployment: every event an endpoint can subscribe to, and
/// whether this deployment emits it. A list like the others: `limit` (1 to 200, default 50)
/// and `cursor`, in catalogue order.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-events",
    operation_id = "list_webhook_events",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(super::PageParams),
    responses(
        (status = 200, description = "A page of the 146 events.", body = Page<EventTypeOut>),
        (status = 400, description = "A bad limit, cursor or parameter.", body = ErrorBody),
    )
)]
pub async fn list_events(
    principal: Principal,
    q: Result<StrictQuery<super::PageParams>, ApiError>,
) -> ApiResult<Json<Page<EventTypeOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    // A position is the index of the last event served.
    let start = match page.cursor {
        None => 0,
        Some(c) => usize::try_from(c.id)
            .ok()
            .filter(|i| *i < catalogue::EVENTS.len())
            .map(|i| i + 1)
            .ok_or_else(|| ApiError::invalid_cursor("The cursor is not valid for this list."))?,
    };
    let rows: Vec<(usize, EventTypeOut)> = catalogue::EVENTS
        .iter()
        .enumerate()
        .skip(start)
        .take(usize::try_from(page.fetch_limit()).unwrap_or(usize::MAX))
        .map(|(i, e)| {
            (
                i,
                EventTypeOut {
                    name: e.name,
                    namespace: e.namespace,
                    description: e.description,
                    emitted: catalogue::is_emitted(e.name),
                },
            )
        })
        .collect();
    let page = Page::from_rows(rows, &page, |(i, _)| Cursor {
        time_ms: 0,
        id: *i as i64,
    });
    Ok(Json(page.map(|(_, e)| e)))
}

/// The answer of the trigger operation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TriggerOut {
    /// The event recorded (`metadata.event_id` of its envelope).
    pub event_id: uuid::Uuid,
    /// Its name.
    pub event: String,
}

/// Emit a typed sample of an event (`switchboard trigger EVENT`, `listen --trigger EVENT`):
/// the sample (`metadata.test: true`, realistic `data`) is recorded as the real event would
/// be: it is in the event feed and stream and goes to every endpoint of the organization
/// subscribed to it. 202 once recorded. Any event this deployment emits except
/// `integration.test` (which goes to one endpoint: `POST .../webhook-endpoints/{uuid}/test`).
/// Limited like the test operation (10 per minute per key by default).
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-events/{name}/trigger",
    operation_id = "trigger_webhook_event",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("name" = String, Path, description = "The event, such as `message.received`.")),
    responses(
        (status = 202, description = "Recorded: in the feed, delivered to subscribed endpoints.", body = TriggerOut),
        (status = 422, description = "Not an event this deployment emits, or `integration.test`.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn trigger_event(
    axum::extract::State(state): axum::extract::State<crate::http::state::AppState>,
    principal: Principal,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> ApiResult<(axum::http::StatusCode, Json<TriggerOut>)> {
    principal.require(Scope::WebhooksWrite)?;
    let event_id =
        crate::ops::webhooks::trigger_sample(&super::deps(&state), principal.org_id, &name).await?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(TriggerOut {
            event_id,
            event: name,
        }),
    ))
}
