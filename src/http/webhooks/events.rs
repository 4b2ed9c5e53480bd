//! `GET /webhook-events`: the event catalogue of this deployment.

use axum::Json;

use serde::Serialize;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue;

use crate::http::auth::Principal;
use crate::http::error::ApiResult;
use crate::http::pagination::Page;

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
/// whether this deployment emits it.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-events",
    operation_id = "list_webhook_events",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "All 146 events, in one page.", body = Page<EventTypeOut>))
)]
pub async fn list_events(principal: Principal) -> ApiResult<Json<Page<EventTypeOut>>> {
    principal.require(Scope::WebhooksRead)?;
    Ok(Json(Page::complete(
        catalogue::EVENTS
            .iter()
            .map(|e| EventTypeOut {
                name: e.name,
                namespace: e.namespace,
                description: e.description,
                emitted: catalogue::is_emitted(e.name),
            })
            .collect(),
    )))
}
