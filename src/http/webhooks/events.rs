//! `GET /webhook-events`: the event catalogue of this deployment.

use axum::Json;

use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue::{self, EventType};

use crate::http::auth::Principal;
use crate::http::error::ApiResult;
use crate::http::pagination::Page;

/// The event catalogue of this deployment: every event an endpoint can subscribe to.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-events",
    operation_id = "list_webhook_events",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "All 146 events, in one page.", body = Page<EventType>))
)]
pub async fn list_events(principal: Principal) -> ApiResult<Json<Page<EventType>>> {
    principal.require(Scope::WebhooksRead)?;
    Ok(Json(Page::complete(catalogue::EVENTS.to_vec())))
}
