//! Legacy webhook records: `GET|POST /api/webhooks`, `DELETE /api/webhooks/{id}`
//! (`webhooks:read` / `webhooks:write`).
//!
//! A record is a URL and a list of events, checked by the v1 endpoint rules (exact names, `*`,
//! `namespace.*`; URL safety). It is stored as a webhook endpoint row marked `legacy` (no
//! signing secret, no custom headers), so that dispatch is unified (specification 6.2.2): each
//! event reaches every distinct URL of the organization once, the modern (signed) delivery
//! winning when a v1 endpoint holds the same URL; a URL only legacy records hold gets the
//! unsigned legacy payload (6.3.3). Deliveries, retries, health and the ledger are the v1 ones
//! (`/webhook-deliveries?endpoint_uuid={id}`). `/webhook-endpoints` does not show records, and
//! these routes do not show endpoints (404 across).

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::json::LenientJsonBody;
use crate::http::pagination::Page;
use crate::http::query::StrictQuery;
use crate::http::state::AppState;
use crate::http::webhooks::{PageParams, deps, path_uuid};
use crate::ops::webhooks::{self as ops, Kind};
use switchboard_domain::Timestamp;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::endpoint::EndpointStatus;
use switchboard_store::webhooks::EndpointRecord;

pub const WEBHOOKS_PATH: &str = "/api/webhooks";
pub const WEBHOOK_PATH: &str = "/api/webhooks/{id}";

/// A legacy webhook record.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct LegacyWebhookOut {
    /// The record's id (a UUID); deliveries to it show this as `endpoint_uuid` in
    /// `/api/v1/integrations/webhook-deliveries`.
    pub id: Uuid,
    pub url: String,
    /// Subscriptions: exact event names, `*`, or `namespace.*`.
    pub events: Vec<String>,
    /// `active`, or `disabled` after too many consecutive failed deliveries.
    pub status: EndpointStatus,
    pub disabled_reason: Option<String>,
    pub consecutive_failures: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&EndpointRecord> for LegacyWebhookOut {
    fn from(e: &EndpointRecord) -> Self {
        LegacyWebhookOut {
            id: e.uuid,
            url: e.url.clone(),
            events: e.events.clone(),
            status: e.status,
            disabled_reason: e.disabled_reason.clone(),
            consecutive_failures: e.consecutive_failures,
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

/// Body of `POST /api/webhooks`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct LegacyWebhookRequest {
    /// Public HTTPS URL on port 443, without credentials (the v1 URL rules).
    pub url: String,
    /// Exact event names, `*` or `namespace.*` (at least one).
    pub events: Vec<String>,
}

/// Legacy: list the organization's webhook records, newest first (v1:
/// `GET /api/v1/integrations/webhook-endpoints`).
#[utoipa::path(
    get,
    path = "/api/webhooks",
    tag = "legacy",
    security(("bearer" = ["webhooks:read"])),
    params(PageParams),
    responses(
        (status = 200, description = "A page of legacy records (never v1 endpoints).", body = Page<LegacyWebhookOut>),
        (status = 400, description = "Invalid limit or cursor.", body = ErrorBody),
        (status = 403, description = "The key lacks webhooks:read.", body = ErrorBody),
    )
)]
pub async fn list_records(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<LegacyWebhookOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(q) = q?;
    Ok(Json(
        super::super::webhooks::endpoints::endpoint_page(&state, &principal, &q, true)
            .await?
            .map(|e| LegacyWebhookOut::from(&e)),
    ))
}

/// Legacy: register a webhook record (v1: `POST /api/v1/integrations/webhook-endpoints`, which
/// adds a name, custom headers and a signing secret). Its deliveries are unsigned unless a v1
/// endpoint holds the same URL.
#[utoipa::path(
    post,
    path = "/api/webhooks",
    tag = "legacy",
    security(("bearer" = ["webhooks:write"])),
    request_body = LegacyWebhookRequest,
    responses(
        (status = 201, description = "Created.", body = LegacyWebhookOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "The key lacks webhooks:write.", body = ErrorBody),
        (status = 422, description = "validation_failed (unknown events, bad URL) or unsafe_url.", body = ErrorBody),
    )
)]
pub async fn create_record(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<LenientJsonBody<LegacyWebhookRequest>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let LenientJsonBody(body) = body?;
    let record = ops::create_legacy_record(
        &deps(&state),
        principal.org_id,
        body.url,
        body.events,
        principal.actor(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(LegacyWebhookOut::from(&record))).into_response())
}

/// Legacy: delete a webhook record (v1: `DELETE /api/v1/integrations/webhook-endpoints/{uuid}`).
/// Its unfinished deliveries end `failed` (`endpoint_deleted`); the ledger keeps them.
#[utoipa::path(
    delete,
    path = "/api/webhooks/{id}",
    tag = "legacy",
    security(("bearer" = ["webhooks:write"])),
    params(("id" = String, Path, description = "The record's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 403, description = "The key lacks webhooks:write.", body = ErrorBody),
        (status = 404, description = "No such record in this organization (v1 endpoints are not records).", body = ErrorBody),
    )
)]
pub async fn delete_record(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&id, "The webhook record")?;
    ops::delete_endpoint(
        &deps(&state),
        principal.org_id,
        uuid,
        Kind::LegacyRecord,
        principal.actor(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(WEBHOOKS_PATH, get(list_records).post(create_record))
        .route(WEBHOOK_PATH, delete(delete_record))
}
