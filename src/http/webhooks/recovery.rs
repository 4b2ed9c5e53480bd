//! After an outage: `POST /webhook-endpoints/{uuid}/recover`, `GET
//! /webhook-endpoints/{uuid}/recoveries/{recovery_id}`, `POST /webhook-deliveries/retry`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::json::JsonBody;
use crate::http::path::Path;
use crate::http::state::AppState;
use crate::ops::recovery as ops;
use switchboard_domain::Timestamp;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue;
use switchboard_store::recovery::{BulkRetry, RecoveryRecord};
use switchboard_store::webhooks::{DeliveryStatus, EventFilter};

use super::{deps, path_uuid};

/// Body of `POST .../recover`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RecoverBody {
    /// RFC 3339; within the delivery retention (90 days by default), not in the future.
    #[schema(example = "2026-11-22T08:00:00Z")]
    pub since: String,
    /// RFC 3339, after `since`, not in the future; default now.
    pub until: Option<String>,
}

/// A recovery: a background job that queues one new delivery for every event of the window
/// that the endpoint's subscriptions match and that it has not received (`trigger:
/// recovery`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RecoveryOut {
    pub recovery_id: Uuid,
    pub endpoint_uuid: Uuid,
    pub since: Timestamp,
    pub until: Timestamp,
    /// `running`, `completed` or `failed`.
    pub status: String,
    /// Events of the window that the endpoint's subscriptions match.
    pub events_matched: i64,
    /// New deliveries queued (the matched events minus those already delivered, pending or
    /// retrying to this endpoint).
    pub deliveries_queued: i64,
    /// Why it failed (`null` unless `failed`).
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

impl From<RecoveryRecord> for RecoveryOut {
    fn from(r: RecoveryRecord) -> Self {
        RecoveryOut {
            recovery_id: r.uuid,
            endpoint_uuid: r.endpoint_uuid,
            since: r.since,
            until: r.until,
            status: r.status,
            events_matched: r.events_matched,
            deliveries_queued: r.deliveries_queued,
            error: r.error,
            created_at: r.created_at,
            completed_at: r.completed_at,
        }
    }
}

fn body_time(field: &str, raw: &str) -> ApiResult<Timestamp> {
    Timestamp::parse_rfc3339(raw).map_err(|_| {
        ApiError::validation_field(
            field,
            "must be an RFC 3339 time such as 2026-08-14T09:30:00Z",
        )
    })
}

/// Recover an endpoint after an outage: re-queue every event since a time that it missed,
/// including events from while it was disabled and from before it existed. Runs in the
/// background (durably: a restart resumes it); follow it with `GET .../recoveries/{id}`.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/recover",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    request_body = RecoverBody,
    responses(
        (status = 202, description = "Started.", body = RecoveryOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
        (status = 422, description = "`endpoint_disabled`, or a window out of bounds (`validation_failed` on since/until).", body = ErrorBody),
    )
)]
pub async fn recover(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: Result<JsonBody<RecoverBody>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let JsonBody(body) = body?;
    let since = body_time("since", &body.since)?;
    let until = body
        .until
        .as_deref()
        .map(|u| body_time("until", u))
        .transpose()?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let r = ops::start_recovery(
        &deps(&state),
        principal.org_id,
        uuid,
        ops::RecoveryWindow { since, until },
        state.config.delivery_retention,
    )
    .await?;
    state.recovery_wake.notify_one();
    Ok((StatusCode::ACCEPTED, Json(RecoveryOut::from(r))).into_response())
}

/// Read a recovery of this endpoint.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/recoveries/{recovery_id}",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(
        ("uuid" = String, Path, description = "The endpoint's UUID."),
        ("recovery_id" = String, Path, description = "The recovery's id."),
    ),
    responses(
        (status = 200, description = "The recovery.", body = RecoveryOut),
        (status = 404, description = "No such recovery of this endpoint.", body = ErrorBody),
    )
)]
pub async fn get_recovery(
    State(state): State<AppState>,
    principal: Principal,
    Path((uuid, recovery_id)): Path<(String, String)>,
) -> ApiResult<Json<RecoveryOut>> {
    principal.require(Scope::WebhooksRead)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let recovery_id = path_uuid(&recovery_id, "The recovery")?;
    let r = ops::get_recovery(&deps(&state), principal.org_id, uuid, recovery_id).await?;
    Ok(Json(r.into()))
}

/// Body of `POST /webhook-deliveries/retry`: the ledger's filters; `status` or
/// `endpoint_uuid` (or both) is required.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct BulkRetryBody {
    /// pending, retrying, failed or retries_exhausted.
    pub status: Option<String>,
    /// An event name, or `namespace.*`.
    pub event: Option<String>,
    pub endpoint_uuid: Option<String>,
    /// Deliveries created at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Deliveries created before this RFC 3339 time.
    pub until: Option<String>,
}

/// How many deliveries were redelivered.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkRetryOut {
    pub retried: u64,
}

/// Redeliver, at once, every matching delivery that is not `delivered` and not in flight
/// (`trigger` becomes `manual`; a finished one becomes `pending` again).
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-deliveries/retry",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    request_body = BulkRetryBody,
    responses(
        (status = 202, description = "Redelivered.", body = BulkRetryOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
        (status = 422, description = "Neither status nor endpoint_uuid, or a value out of bounds.", body = ErrorBody),
    )
)]
pub async fn retry_deliveries(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<JsonBody<BulkRetryBody>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let JsonBody(body) = body?;
    let status = body
        .status
        .as_deref()
        .map(|s| match DeliveryStatus::parse(s) {
            Some(DeliveryStatus::Delivered) | None => Err(ApiError::validation_field(
                "status",
                "must be one of pending, retrying, failed, retries_exhausted",
            )),
            Some(s) => Ok(s),
        })
        .transpose()?;
    let event = body
        .event
        .as_deref()
        .map(|e| match catalogue::Pattern::parse(e) {
            Ok(catalogue::Pattern::Exact(name)) => Ok(EventFilter::Exact(name)),
            Ok(catalogue::Pattern::Namespace(ns)) => Ok(EventFilter::Namespace(ns)),
            _ => Err(ApiError::validation_field(
                "event",
                "must be an event name of the catalogue or `namespace.*`",
            )),
        })
        .transpose()?;
    let endpoint_uuid = body
        .endpoint_uuid
        .as_deref()
        .map(|u| {
            Uuid::parse_str(u)
                .map_err(|_| ApiError::validation_field("endpoint_uuid", "must be a UUID"))
        })
        .transpose()?;
    let since = body
        .since
        .as_deref()
        .map(|t| body_time("since", t))
        .transpose()?;
    let until = body
        .until
        .as_deref()
        .map(|t| body_time("until", t))
        .transpose()?;
    let retried = ops::retry_deliveries(
        &deps(&state),
        principal.org_id,
        BulkRetry {
            status,
            event,
            endpoint_uuid,
            since,
            until,
        },
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(BulkRetryOut { retried })).into_response())
}
