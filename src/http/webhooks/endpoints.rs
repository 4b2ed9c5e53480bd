//! Webhook endpoints: `GET|POST /webhook-endpoints`, `GET|PUT|DELETE
//! /webhook-endpoints/{uuid}` and `POST /webhook-endpoints/{uuid}/test`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use crate::http::json::{JsonBody, OptionalJsonBody, RawJson, Read, read_strict};
use crate::http::pagination::{Cursor, Page, PageRequest};
use crate::http::path::Path;
use crate::http::query::StrictQuery;
use crate::ops::webhooks as ops;
use switchboard_domain::Timestamp;
use switchboard_domain::scope::Scope;
use switchboard_domain::time::format_duration;
use switchboard_domain::webhooks::catalogue;
use switchboard_domain::webhooks::destination::DestinationType;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};
use switchboard_store::webhooks::EndpointRecord;

use super::{PageParams, deps, path_uuid};
use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::state::AppState;

/// A webhook endpoint. `signing_secret` appears only in the answers of create and
/// rotate-secret.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointOut {
    pub uuid: Uuid,
    pub name: String,
    /// `https`, or the broker the deliveries go to.
    #[serde(rename = "type")]
    pub destination: DestinationType,
    /// Public HTTPS URL on port 443 (a broker endpoint: its target URL, credentials masked).
    pub url: String,
    /// A broker endpoint's target (`null` for https): for `redis_stream`
    /// `{"url", "stream", "max_len"}`, the URL's credentials masked (`redis://user:***@host`).
    #[schema(value_type = Option<Object>)]
    pub target: Option<serde_json::Value>,
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
    /// `none` (default) or `per_contact`: each contact's deliveries in order, with
    /// `X-Switchboard-Sequence` (docs/webhooks.md, "Ordered delivery").
    pub ordering: EndpointOrdering,
    /// The filter on the envelope (`null`: every subscribed event); docs/webhooks.md,
    /// "Filters".
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Value>,
    /// The endpoint's own attempt time limit (`null`: the deployment's
    /// `SWITCHBOARD_WEBHOOK_TIMEOUT`).
    #[schema(example = "5s")]
    pub timeout: Option<String>,
    /// The endpoint's own delays between attempts (`null`: the deployment's
    /// `SWITCHBOARD_WEBHOOK_RETRY_DELAYS`); attempts = delays + 1.
    #[schema(example = json!(["10s", "1m", "10m"]))]
    pub retry_delays: Option<Vec<String>>,
    /// The most deliveries per second to this endpoint, across instances (`null`: no limit).
    pub max_per_second: Option<i64>,
    /// How deliveries authenticate to an https endpoint (`null`: the signature only):
    /// `{"type": "oauth2_client_credentials", "token_url", "client_id", "scope"}` (the client
    /// secret is never answered) or `{"type": "mtls", "certificate_sha256"}` (the SHA-256 of
    /// the client certificate, lower-case hex; neither the certificate nor its private key is
    /// answered).
    #[schema(value_type = Option<Object>)]
    pub auth: Option<serde_json::Value>,
    /// `whsec_` + base64 of 32 random bytes; only on create and rotate-secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// On create and update only, when there is something to say: e.g. `never_emitted` when
    /// the subscriptions match only events this deployment never emits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<EndpointWarning>>,
}

/// A warning about an endpoint that was nevertheless created or changed.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointWarning {
    /// `never_emitted`: the subscriptions match only events that this deployment never emits
    /// (`GET /webhook-events` says which it emits); the endpoint will receive nothing but tests.
    pub code: String,
    /// The subscriptions the warning is about.
    pub events: Vec<String>,
}

impl EndpointOut {
    /// The endpoint as the answer of a create or an update: with its warnings.
    pub fn with_warnings(e: &EndpointRecord) -> Self {
        let mut out = EndpointOut::from(e);
        out.warnings = catalogue::never_emitted(&e.events).map(|events| {
            vec![EndpointWarning {
                code: "never_emitted".into(),
                events,
            }]
        });
        out
    }
}

impl From<&EndpointRecord> for EndpointOut {
    fn from(e: &EndpointRecord) -> Self {
        EndpointOut {
            uuid: e.uuid,
            name: e.name.clone(),
            destination: e.controls.destination,
            url: e.url.clone(),
            target: e
                .controls
                .target
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok()),
            events: e.events.clone(),
            headers: e.headers.clone(),
            status: e.status,
            disabled_reason: e.disabled_reason.clone(),
            disabled_at: e.disabled_at,
            consecutive_failures: e.consecutive_failures,
            created_at: e.created_at,
            updated_at: e.updated_at,
            ordering: e.ordering,
            filter: e
                .controls
                .filter
                .as_deref()
                .and_then(|f| serde_json::from_str(f).ok()),
            timeout: e.controls.timeout().map(format_duration),
            retry_delays: e
                .controls
                .retry_delays()
                .map(|ds| ds.into_iter().map(format_duration).collect()),
            max_per_second: e.controls.max_per_second,
            auth: e
                .controls
                .auth
                .as_deref()
                .and_then(|a| serde_json::from_str(a).ok()),
            signing_secret: None,
            warnings: None,
        }
    }
}

/// Body of `POST /webhook-endpoints`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateEndpointBody {
    /// A label (1 to 200 characters); defaults to the URL's host.
    pub name: Option<String>,
    /// Public HTTPS URL on port 443, without credentials (required for `https`, refused for a
    /// broker: its address is `target.url`).
    #[serde(default)]
    pub url: Option<String>,
    /// `https` (default) or `redis_stream` (`nats_jetstream` and `rabbitmq` are not available
    /// in this version).
    #[serde(default, rename = "type")]
    pub destination: Option<DestinationType>,
    /// A broker endpoint's target: for `redis_stream` `{"url": "redis://...", "stream",
    /// "max_len"}` (`stream` may use `{event}`, `{namespace}`, `{contact_uuid}`,
    /// `{channel_slug}`; `max_len` 1 to 100 000 000, default 100 000). Credentials in the URL
    /// are sealed and answered masked.
    #[serde(default)]
    #[schema(value_type = Option<Object>, example = json!({"url": "redis://:secret@redis.example.com:6379/0", "stream": "switchboard:{namespace}", "max_len": 100000}))]
    pub target: Option<serde_json::Value>,
    /// Exact event names, `*` or `namespace.*` (at least one).
    pub events: Vec<String>,
    /// Custom request headers (at most 20).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// `active` (default) or `disabled`.
    #[serde(default)]
    pub status: Option<EndpointStatus>,
    /// `none` (default) or `per_contact`.
    #[serde(default)]
    pub ordering: Option<EndpointOrdering>,
    /// A predicate on the envelope as delivered: dotted paths (`"channel.type"`) to a literal
    /// (equality) or to operators `$eq`, `$ne`, `$in`, `$nin`, `$exists`, `$gt`, `$gte`,
    /// `$lt`, `$lte`; `$and` / `$or` take lists. An event that does not match creates no
    /// delivery for this endpoint.
    #[serde(default)]
    #[schema(value_type = Option<Object>, example = json!({"channel.type": {"$in": ["whatsapp_cloud"]}, "data.direction": "inbound"}))]
    pub filter: Option<serde_json::Value>,
    /// The endpoint's own attempt time limit, `1s` to `30s` (default: the deployment's).
    #[serde(default)]
    #[schema(example = "5s")]
    pub timeout: Option<String>,
    /// The endpoint's own delays between attempts: 1 to 10 durations, each `1s` to `72h`
    /// (default: the deployment's).
    #[serde(default)]
    #[schema(example = json!(["10s", "1m", "10m"]))]
    pub retry_delays: Option<Vec<String>>,
    /// The most deliveries per second to this endpoint, 1 to 10 000, across instances
    /// (default: no limit).
    #[serde(default)]
    pub max_per_second: Option<i64>,
    /// Authentication to an https endpoint: `{"type": "oauth2_client_credentials",
    /// "token_url", "client_id", "client_secret", "scope"}` (a token fetched with the client
    /// credentials grant, cached until it expires, sent as `Authorization: Bearer`; after a 401
    /// a new token once), or `{"type": "mtls", "certificate", "private_key"}` (PEM: a client
    /// certificate, or a chain starting with it, and its private key; each connection presents
    /// it). Secrets (the client secret, the certificate and its key) are sealed and never
    /// answered.
    #[serde(default)]
    #[schema(value_type = Option<Object>, example = json!({"type": "oauth2_client_credentials", "token_url": "https://auth.example.com/oauth/token", "client_id": "switchboard", "client_secret": "s3cret", "scope": "webhooks"}))]
    pub auth: Option<serde_json::Value>,
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
    /// `none` or `per_contact`; applies to deliveries written from now on.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<EndpointOrdering>)]
    pub ordering: Option<Option<EndpointOrdering>>,
    /// Replaces a broker endpoint's target (the whole object).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub target: Option<Option<serde_json::Value>>,
    /// Replaces the filter; `null` removes it (every subscribed event is delivered).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Option<serde_json::Value>>,
    /// `1s` to `30s`; `null` restores the deployment's time limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub timeout: Option<Option<String>>,
    /// 1 to 10 durations, each `1s` to `72h`; `null` restores the deployment's delays.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub retry_delays: Option<Option<Vec<String>>>,
    /// 1 to 10 000; `null` removes the limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>)]
    pub max_per_second: Option<Option<i64>>,
    /// Replaces the authentication (the whole object, secret included); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub auth: Option<Option<serde_json::Value>>,
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
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<EndpointOut>>> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(q) = q?;
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
    body: Result<RawJson, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let RawJson(bytes) = body?;
    let Read { value, mut errors } = read_strict::<CreateEndpointBody>(&bytes)?;
    // `url` is required by the default type (https), not by a broker's: named with the body's
    // other problems.
    if let Ok(serde_json::Value::Object(raw)) = serde_json::from_slice(&bytes) {
        let https = raw.get("type").is_none_or(|t| t == "https");
        if https && !raw.contains_key("url") && !errors.0.iter().any(|e| e.field == "url") {
            errors.add("url", "is required");
        }
    }
    let body = match value {
        Some(body) if errors.is_empty() => body,
        _ => return Err(ApiError::validation(errors)),
    };
    let (record, secret) = ops::create_endpoint(
        &deps(&state),
        principal.org_id,
        ops::CreateEndpoint {
            name: body.name,
            url: body.url,
            destination: body.destination,
            target: body.target,
            events: body.events,
            headers: body.headers.unwrap_or_default(),
            status: body.status,
            ordering: body.ordering,
            filter: body.filter.filter(|f| !f.is_null()),
            timeout: body.timeout,
            retry_delays: body.retry_delays,
            max_per_second: body.max_per_second,
            auth: body.auth.filter(|a| !a.is_null()),
        },
        principal.actor(),
    )
    .await?;
    let mut out = EndpointOut::with_warnings(&record);
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

/// Update an endpoint with any subset of `name`, `url`, `events`, `headers`, `status`,
/// `ordering`, `filter`, `timeout`, `retry_delays`, `max_per_second`.
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
        ordering: not_null(body.ordering, "ordering", &mut errors),
        filter: body.filter,
        target: not_null(body.target, "target", &mut errors),
        timeout: body.timeout,
        retry_delays: body.retry_delays,
        max_per_second: body.max_per_second,
        auth: body.auth,
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
    Ok(Json(EndpointOut::with_warnings(&e)))
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

/// The answer of the test operation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TestOut {
    /// The delivery to follow in the ledger.
    pub delivery_id: Uuid,
    /// The test event (`metadata.event_id` of the envelope).
    pub event_id: Uuid,
}

/// Body of `POST .../test` (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct TestBody {
    /// A catalogue event this deployment emits (`emitted: true` in `GET /webhook-events`): the
    /// endpoint receives a realistic sample of it, marked `metadata.test: true`. Default
    /// `integration.test`.
    #[schema(example = "message.sent")]
    pub event: Option<String>,
}

/// Send a test event to this endpoint alone (whatever its subscriptions, even when
/// disabled): `integration.test`, or a sample of any event this deployment emits. Limited to
/// 10 per minute per key by default.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/test",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    request_body(content = Option<TestBody>, description = "Optional: which event to sample."),
    responses(
        (status = 202, description = "Queued for delivery.", body = TestOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
        (status = 422, description = "`event` is not an event this deployment emits.", body = ErrorBody),
    )
)]
pub async fn test_endpoint(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: Result<OptionalJsonBody<TestBody>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let OptionalJsonBody(body) =
        super::body_for_endpoint(&state, principal.org_id, uuid, body).await?;
    let (delivery_id, event_id) =
        ops::send_test(&deps(&state), principal.org_id, uuid, body.event.as_deref()).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TestOut {
            delivery_id,
            event_id,
        }),
    )
        .into_response())
}
