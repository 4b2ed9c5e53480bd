//! The delivery ledger: `GET /webhook-deliveries`, `GET /webhook-deliveries/{delivery_id}` and
//! `POST /webhook-deliveries/{delivery_id}/retry`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::http::pagination::{Cursor, Page, PageRequest};
use crate::http::path::Path;
use crate::http::query::StrictQuery;
use crate::ops::webhooks as ops;
use switchboard_domain::Timestamp;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue;
use switchboard_store::webhooks::{
    AttemptRecord, DeliveryQuery, DeliveryRecord, DeliveryStatus, EventFilter,
};

use super::{deps, path_uuid};
use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::state::AppState;

/// A delivery: one event to one endpoint, with its latest outcome.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryOut {
    /// Stable across attempts; sent as `X-Switchboard-Delivery`.
    pub delivery_id: Uuid,
    /// The event (`metadata.event_id` of the envelope).
    pub event_id: Uuid,
    /// The event name.
    pub event: String,
    pub endpoint_uuid: Option<Uuid>,
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempts: i64,
    /// The HTTP status of the latest answer (`null` when there was none).
    pub response_status: Option<i64>,
    /// Why the latest attempt failed (`timeout`, `connection_failed`, `http_error`, ...).
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// When the next attempt is scheduled (`null` when none is).
    pub next_attempt_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    pub delivered_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// How the delivery came to be: `event` (an event the endpoint subscribes to), `manual`
    /// (retried by hand), `test` or `recovery`.
    pub trigger: String,
    /// On an ordered endpoint, its number in its contact's chain (`X-Switchboard-Sequence`);
    /// `null` otherwise.
    pub sequence: Option<i64>,
}

impl From<&DeliveryRecord> for DeliveryOut {
    fn from(d: &DeliveryRecord) -> Self {
        DeliveryOut {
            delivery_id: d.uuid,
            event_id: d.event_uuid,
            event: d.event_name.clone(),
            endpoint_uuid: d.endpoint_uuid,
            status: d.status,
            attempts: d.attempts,
            response_status: d.response_status,
            error_code: d.error_code.clone(),
            error_message: d.error_message.clone(),
            next_attempt_at: d.next_attempt_at,
            last_attempt_at: d.last_attempt_at,
            delivered_at: d.delivered_at,
            created_at: d.created_at,
            updated_at: d.updated_at,
            trigger: d.trigger.clone(),
            sequence: d.sequence,
        }
    }
}

/// One attempt of a delivery.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptOut {
    /// One-based; sent as `X-Switchboard-Attempt`.
    pub number: i64,
    pub url: Option<String>,
    pub started_at: Timestamp,
    /// `null` when the attempt was interrupted.
    pub duration_ms: Option<i64>,
    pub response_status: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The first KiB of the response body.
    pub response_body_excerpt: Option<String>,
    /// Which secrets signed the request, by their non-secret ids (`sec_` + 12 hex digits of
    /// the SHA-256 of the secret; compute it to tell which of yours it was): the current one
    /// first, then any still in a rotation's grace period. `null` when the request was not
    /// signed (legacy records) or not made.
    pub signed_with: Option<Vec<String>>,
}

impl From<AttemptRecord> for AttemptOut {
    fn from(a: AttemptRecord) -> Self {
        AttemptOut {
            number: a.number,
            url: a.url,
            started_at: a.started_at,
            duration_ms: a.duration_ms,
            response_status: a.response_status,
            error_code: a.error_code,
            error_message: a.error_message,
            response_body_excerpt: a.response_body_excerpt,
            signed_with: a.signed_with,
        }
    }
}

/// A delivery with its attempt log and the envelope it sends.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryDetailOut {
    #[serde(flatten)]
    pub delivery: DeliveryOut,
    /// Every attempt, oldest first.
    pub attempt_log: Vec<AttemptOut>,
    /// The request body (the envelope of specification 2.11).
    #[schema(value_type = Object)]
    pub payload: Value,
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// 1 to 200 (default 50).
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// pending, retrying, delivered, failed or retries_exhausted.
    pub status: Option<String>,
    /// An event name, or `namespace.*`.
    pub event: Option<String>,
    pub endpoint_uuid: Option<String>,
    /// Deliveries created at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Deliveries created before this RFC 3339 time.
    pub until: Option<String>,
}

fn parse_time(param: &str, raw: &str) -> ApiResult<Timestamp> {
    Timestamp::parse_rfc3339(raw).map_err(|_| {
        ApiError::invalid_request(
            param,
            format!(
                "{param} must be an RFC 3339 time such as 2026-08-14T09:30:00Z (encode `+` as %2B)."
            ),
        )
    })
}

fn delivery_query(p: &DeliveryParams) -> ApiResult<(DeliveryQuery, PageRequest)> {
    let page = PageRequest::parse(p.limit.as_deref(), p.cursor.as_deref())?;
    let status = p
        .status
        .as_deref()
        .map(|s| {
            DeliveryStatus::parse(s).ok_or_else(|| {
                ApiError::invalid_request(
                    "status",
                    "status must be one of pending, retrying, delivered, failed, retries_exhausted.",
                )
            })
        })
        .transpose()?;
    let event = p
        .event
        .as_deref()
        .map(|e| match catalogue::Pattern::parse(e) {
            Ok(catalogue::Pattern::Exact(name)) => Ok(EventFilter::Exact(name)),
            Ok(catalogue::Pattern::Namespace(ns)) => Ok(EventFilter::Namespace(ns)),
            _ => Err(ApiError::invalid_request(
                "event",
                "event must be an event name of the catalogue or `namespace.*`.",
            )),
        })
        .transpose()?;
    let endpoint_uuid = p
        .endpoint_uuid
        .as_deref()
        .map(|u| {
            Uuid::parse_str(u).map_err(|_| {
                ApiError::invalid_request("endpoint_uuid", "endpoint_uuid must be a UUID.")
            })
        })
        .transpose()?;
    let since = p
        .since
        .as_deref()
        .map(|t| parse_time("since", t))
        .transpose()?;
    let until = p
        .until
        .as_deref()
        .map(|t| parse_time("until", t))
        .transpose()?;
    Ok((
        DeliveryQuery {
            status,
            event,
            endpoint_uuid,
            since,
            until,
            before: page
                .cursor
                .map(|c| (Timestamp::from_millis(c.time_ms), c.id)),
            limit: page.fetch_limit(),
        },
        page,
    ))
}

/// The delivery ledger, newest first, with filters.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-deliveries",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(DeliveryParams),
    responses(
        (status = 200, description = "A page of deliveries.", body = Page<DeliveryOut>),
        (status = 400, description = "A filter, limit or cursor is not valid (invalid_request, details.param).", body = ErrorBody),
    )
)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<StrictQuery<DeliveryParams>, ApiError>,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(params) = params?;
    let (query, page) = delivery_query(&params)?;
    let rows = state
        .store
        .list_deliveries(principal.org_id, &query)
        .await?;
    Ok(Json(
        Page::from_rows(rows, &page, |d| Cursor {
            time_ms: d.created_at.millis(),
            id: d.id,
        })
        .map(|d| DeliveryOut::from(&d)),
    ))
}

/// One delivery with its attempt log (per attempt: number, start, duration, response status,
/// error, the first KiB of the response body) and the envelope it sends.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-deliveries/{delivery_id}",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(("delivery_id" = String, Path, description = "The delivery's UUID.")),
    responses(
        (status = 200, description = "The delivery.", body = DeliveryDetailOut),
        (status = 404, description = "No such delivery in this organization.", body = ErrorBody),
    )
)]
pub async fn get_delivery(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<DeliveryDetailOut>> {
    principal.require(Scope::WebhooksRead)?;
    let id = path_uuid(&id, "The delivery")?;
    let (d, attempts, event) = state
        .store
        .get_delivery(principal.org_id, id)
        .await
        .map_err(|e| match e {
            switchboard_store::StoreError::NotFound => ApiError::not_found("The delivery"),
            other => other.into(),
        })?;
    Ok(Json(DeliveryDetailOut {
        delivery: DeliveryOut::from(&d),
        attempt_log: attempts.into_iter().map(AttemptOut::from).collect(),
        payload: event.envelope(),
    }))
}

/// Redeliver now. A finished delivery (delivered, failed, retries_exhausted) becomes `pending`
/// and is attempted at once, with the next attempt number; a pending or retrying one is
/// attempted at once instead of at its scheduled time; one with an attempt under way is left
/// as it is. Answers 202 with the delivery.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-deliveries/{delivery_id}/retry",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("delivery_id" = String, Path, description = "The delivery's UUID.")),
    responses(
        (status = 202, description = "Scheduled now.", body = DeliveryOut),
        (status = 404, description = "No such delivery in this organization.", body = ErrorBody),
        (status = 409, description = "endpoint_deleted: the delivery's endpoint was deleted.", body = ErrorBody),
    )
)]
pub async fn retry_delivery(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let id = path_uuid(&id, "The delivery")?;
    let d = ops::retry_delivery(&deps(&state), principal.org_id, id).await?;
    Ok((StatusCode::ACCEPTED, Json(DeliveryOut::from(&d))).into_response())
}
