//! Webhooks: the event catalogue, endpoints, and the delivery ledger.
//!
//! * `GET /webhook-events` (webhooks:read): the 146 events of the catalogue.
//! * `GET|POST /webhook-endpoints`, `GET|PUT|DELETE /webhook-endpoints/{uuid}`,
//!   `POST /webhook-endpoints/{uuid}/rotate-secret`, `POST /webhook-endpoints/{uuid}/test`.
//! * `GET /webhook-deliveries`, `GET /webhook-deliveries/{delivery_id}`,
//!   `POST /webhook-deliveries/{delivery_id}/retry`.

use std::collections::BTreeMap;

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::ops::webhooks::{self as ops, Deps, WebhookError};
use crate::webhooks::url_safety::Policy;
use switchboard_domain::Timestamp;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue::{self, EventType};
use switchboard_domain::webhooks::endpoint::EndpointStatus;
use switchboard_store::webhooks::{
    AttemptRecord, DeliveryQuery, DeliveryRecord, DeliveryStatus, EndpointRecord, EventFilter,
};

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::json::JsonBody;
use super::pagination::{Cursor, Page, PageRequest};
use super::query::QueryParams;
use super::state::AppState;

const BASE: &str = "/api/v1/integrations";

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Validation(errors) => ApiError::validation(errors),
            WebhookError::UnsafeUrl(m) => ApiError::unprocessable(
                "unsafe_url",
                format!("The endpoint URL is not allowed: {m}."),
            )
            .with_details(serde_json::json!({ "field": "url" })),
            WebhookError::NotFound(what) => ApiError::not_found(what),
            WebhookError::EndpointDeleted => ApiError::new(
                StatusCode::CONFLICT,
                "endpoint_deleted",
                "The endpoint of this delivery has been deleted; it cannot be redelivered.",
            ),
            WebhookError::Store(e) => e.into(),
        }
    }
}

pub(crate) fn deps(state: &AppState) -> Deps<'_> {
    Deps {
        store: state.store.as_ref(),
        secrets: &state.secrets,
        clock: state.clock.as_ref(),
        policy: Policy {
            allow_private: state.config.webhook_allow_private_targets,
        },
        lookup: &state.webhook_lookup,
    }
}

/// A UUID from the path; anything else cannot name a resource of the organization (404).
pub(crate) fn path_uuid(raw: &str, what: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(what))
}

// ---------------------------------------------------------------------------------------------
// Catalogue

/// The event catalogue of this deployment: every event an endpoint can subscribe to.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-events",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "All 146 events, in one page.", body = Page<EventType>))
)]
pub async fn list_events(principal: Principal) -> ApiResult<Json<Page<EventType>>> {
    principal.require(Scope::WebhooksRead)?;
    Ok(Json(Page::complete(catalogue::EVENTS.to_vec())))
}

// ---------------------------------------------------------------------------------------------
// Endpoints

/// A webhook endpoint. `signing_secret` appears only in the answers of create and
/// rotate-secret.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointOut {
    pub uuid: Uuid,
    pub name: String,
    /// Public HTTPS URL on port 443.
    pub url: String,
    /// Subscriptions: exact event names, `*`, or `namespace.*`.
    pub events: Vec<String>,
    /// Custom request headers sent with every delivery.
    pub headers: BTreeMap<String, String>,
    pub status: EndpointStatus,
    /// Why the endpoint is disabled (`null` when active).
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<Timestamp>,
    /// Consecutive failed deliveries (reset by any successful attempt).
    pub consecutive_failures: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// `whsec_` + 64 hex characters; only on create and rotate-secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
}

impl From<&EndpointRecord> for EndpointOut {
    fn from(e: &EndpointRecord) -> Self {
        EndpointOut {
            uuid: e.uuid,
            name: e.name.clone(),
            url: e.url.clone(),
            events: e.events.clone(),
            headers: e.headers.clone(),
            status: e.status,
            disabled_reason: e.disabled_reason.clone(),
            disabled_at: e.disabled_at,
            consecutive_failures: e.consecutive_failures,
            created_at: e.created_at,
            updated_at: e.updated_at,
            signing_secret: None,
        }
    }
}

/// Body of `POST /webhook-endpoints`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateEndpointBody {
    /// A label (1 to 200 characters); defaults to the URL's host.
    pub name: Option<String>,
    /// Public HTTPS URL on port 443, without credentials.
    pub url: String,
    /// Exact event names, `*` or `namespace.*` (at least one).
    pub events: Vec<String>,
    /// Custom request headers (at most 20).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// `active` (default) or `disabled`.
    #[serde(default)]
    pub status: Option<EndpointStatus>,
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Body of `PUT /webhook-endpoints/{uuid}`: any subset of the fields.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct UpdateEndpointBody {
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub url: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub events: Option<Option<Vec<String>>>,
    /// Replaces every custom header; `null` or `{}` removes them all.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<Option<BTreeMap<String, String>>>,
    /// `active` re-enables a disabled endpoint (its failure counter restarts at zero and its
    /// held deliveries are sent); `disabled` disables it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<EndpointStatus>)]
    pub status: Option<Option<EndpointStatus>>,
}

/// List the organization's endpoints, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-endpoints",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(PageParams),
    responses(
        (status = 200, description = "A page of endpoints.", body = Page<EndpointOut>),
        (status = 400, description = "Invalid limit or cursor.", body = ErrorBody),
    )
)]
pub async fn list_endpoints(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<QueryParams<PageParams>, ApiError>,
) -> ApiResult<Json<Page<EndpointOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let QueryParams(q) = q?;
    Ok(Json(
        endpoint_page(&state, &principal, &q, false)
            .await?
            .map(|e| EndpointOut::from(&e)),
    ))
}

/// A page of the organization's endpoints (`legacy`: its legacy webhook records instead),
/// newest first. The caller has checked `webhooks:read`.
pub(crate) async fn endpoint_page(
    state: &AppState,
    principal: &Principal,
    q: &PageParams,
    legacy: bool,
) -> ApiResult<Page<EndpointRecord>> {
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let rows = state
        .store
        .list_endpoints(
            principal.org_id,
            legacy,
            page.cursor
                .map(|c| (Timestamp::from_millis(c.time_ms), c.id)),
            page.fetch_limit(),
        )
        .await?;
    Ok(Page::from_rows(rows, &page, |e| Cursor {
        time_ms: e.created_at.millis(),
        id: e.id,
    }))
}

/// Create an endpoint. The answer carries its `signing_secret`, shown only now.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    request_body = CreateEndpointBody,
    responses(
        (status = 201, description = "Created, with the signing secret.", body = EndpointOut),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 422, description = "validation_failed (unknown events, reserved headers, ...) or unsafe_url.", body = ErrorBody),
    )
)]
pub async fn create_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<JsonBody<CreateEndpointBody>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let JsonBody(body) = body?;
    let (record, secret) = ops::create_endpoint(
        &deps(&state),
        principal.org_id,
        ops::CreateEndpoint {
            name: body.name,
            url: body.url,
            events: body.events,
            headers: body.headers.unwrap_or_default(),
            status: body.status,
        },
        principal.actor(),
    )
    .await?;
    let mut out = EndpointOut::from(&record);
    out.signing_secret = Some(secret);
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// Read one endpoint.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    responses(
        (status = 200, description = "The endpoint.", body = EndpointOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
    )
)]
pub async fn get_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    principal.require(Scope::WebhooksRead)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let e = ops::get_endpoint(&deps(&state), principal.org_id, uuid, ops::Kind::Endpoint).await?;
    Ok(Json(EndpointOut::from(&e)))
}

fn not_null<T>(
    v: Option<Option<T>>,
    field: &str,
    errors: &mut switchboard_domain::ValidationErrors,
) -> Option<T> {
    match v {
        Some(Some(v)) => Some(v),
        Some(None) => {
            errors.add(field, "must not be null");
            None
        }
        None => None,
    }
}

/// Update an endpoint with any subset of `name`, `url`, `events`, `headers`, `status`.
#[utoipa::path(
    put,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    request_body = UpdateEndpointBody,
    responses(
        (status = 200, description = "The endpoint after the change.", body = EndpointOut),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
        (status = 422, description = "validation_failed or unsafe_url.", body = ErrorBody),
    )
)]
pub async fn update_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: Result<JsonBody<UpdateEndpointBody>, ApiError>,
) -> ApiResult<Json<EndpointOut>> {
    principal.require(Scope::WebhooksWrite)?;
    let JsonBody(body) = body?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let mut errors = switchboard_domain::ValidationErrors::new();
    let input = ops::UpdateEndpoint {
        name: not_null(body.name, "name", &mut errors),
        url: not_null(body.url, "url", &mut errors),
        events: not_null(body.events, "events", &mut errors),
        headers: body.headers.map(Option::unwrap_or_default),
        status: not_null(body.status, "status", &mut errors),
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let e = ops::update_endpoint(
        &deps(&state),
        principal.org_id,
        uuid,
        input,
        principal.actor(),
    )
    .await?;
    Ok(Json(EndpointOut::from(&e)))
}

/// Delete an endpoint. It receives nothing more; its unfinished deliveries end `failed`
/// (`endpoint_deleted`); the ledger keeps its deliveries.
#[utoipa::path(
    delete,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
    )
)]
pub async fn delete_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    ops::delete_endpoint(
        &deps(&state),
        principal.org_id,
        uuid,
        ops::Kind::Endpoint,
        principal.actor(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Replace the signing secret. The new secret is in the answer, shown only now; every attempt
/// from now on (retries included) is signed with it.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/rotate-secret",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    responses(
        (status = 200, description = "The endpoint with its new signing secret.", body = EndpointOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
    )
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let (record, secret) =
        ops::rotate_secret(&deps(&state), principal.org_id, uuid, principal.actor()).await?;
    let mut out = EndpointOut::from(&record);
    out.signing_secret = Some(secret);
    Ok(Json(out))
}

/// The answer of the test operation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TestOut {
    /// The delivery to follow in the ledger.
    pub delivery_id: Uuid,
    /// The `integration.test` event (`metadata.event_id` of the envelope).
    pub event_id: Uuid,
}

/// Send an `integration.test` event to this endpoint alone (whatever its subscriptions, even
/// when disabled). Limited to 10 per minute per key by default.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/test",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    responses(
        (status = 202, description = "Queued for delivery.", body = TestOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
    )
)]
pub async fn test_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let (delivery_id, event_id) = ops::send_test(&deps(&state), principal.org_id, uuid).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TestOut {
            delivery_id,
            event_id,
        }),
    )
        .into_response())
}

// ---------------------------------------------------------------------------------------------
// Deliveries

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
pub struct PageParams {
    /// 1 to 200 (default 50).
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
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
            format!("{param} must be an RFC 3339 time such as 2026-08-14T09:30:00Z."),
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
    params: Result<QueryParams<DeliveryParams>, ApiError>,
) -> ApiResult<Json<Page<DeliveryOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let QueryParams(params) = params?;
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

pub fn router() -> Router<AppState> {
    Router::new()
        .route(&format!("{BASE}/webhook-events"), get(list_events))
        .route(
            &format!("{BASE}/webhook-endpoints"),
            get(list_endpoints).post(create_endpoint),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}"),
            get(get_endpoint)
                .put(update_endpoint)
                .delete(delete_endpoint),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}/rotate-secret"),
            post(rotate_secret),
        )
        // The rate limiter classifies this route template as `tests`.
        .route(
            "/api/v1/integrations/webhook-endpoints/{uuid}/test",
            post(test_endpoint),
        )
        .route(&format!("{BASE}/webhook-deliveries"), get(list_deliveries))
        .route(
            &format!("{BASE}/webhook-deliveries/{{delivery_id}}"),
            get(get_delivery),
        )
        .route(
            &format!("{BASE}/webhook-deliveries/{{delivery_id}}/retry"),
            post(retry_delivery),
        )
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        list_events,
        list_endpoints,
        create_endpoint,
        get_endpoint,
        update_endpoint,
        delete_endpoint,
        rotate_secret,
        test_endpoint,
        list_deliveries,
        get_delivery,
        retry_delivery
    ),
    components(schemas(
        EventType,
        EndpointOut,
        EndpointStatus,
        CreateEndpointBody,
        UpdateEndpointBody,
        TestOut,
        DeliveryOut,
        DeliveryStatus,
        AttemptOut,
        DeliveryDetailOut
    ))
)]
pub struct WebhooksApi;
