//! Legacy flows: `GET /api/flows` (`flow:read`) and `POST /api/flows/{id}/trigger`
//! (`flow:write`). A flow is a named action on a channel of the organization (a text, or a
//! catalog template with parameters), created with `switchboard admin flow create`. Triggering
//! it sends to one contact through the shared send code (`ops::sending::send_flow`: channel rules,
//! provider, service window, events), in the `sends` rate-limit class, honouring an
//! `Idempotency-Key` header when present; the answer is the send response (201).

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::ops::sending::{FlowTrigger, send_flow};
use switchboard_domain::Timestamp;
use switchboard_domain::ValidationErrors;
use switchboard_domain::scope::Scope;
use switchboard_store::ClaimToken;
use switchboard_store::legacy::FlowRecord;

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::idempotency;
use super::super::json::parse;
use super::super::messages::{
    SendResponse, addressing, plain_outcome, send_completion, send_context,
};
use super::super::pagination::Page;
use super::super::query::StrictQuery;
use super::super::state::AppState;
use super::groups::PageParams;
use super::{cursor, page_query, path_uuid};

/// The route template of a trigger (the `sends` rate-limit class).
pub const TRIGGER_ROUTE: &str = "/api/flows/{id}/trigger";

/// A flow.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FlowOut {
    /// The flow's id (a UUID).
    pub uuid: Uuid,
    pub name: String,
    pub channel_id: i64,
    /// `{"type": "text", "text"}` or `{"type": "template", "template_uuid", "language",
    /// "params"}` (`params`: WhatsApp template components).
    #[schema(value_type = Object)]
    pub action: Value,
    pub active: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&FlowRecord> for FlowOut {
    fn from(f: &FlowRecord) -> Self {
        FlowOut {
            uuid: f.uuid,
            name: f.name.clone(),
            channel_id: f.channel_id,
            action: f.action.clone(),
            active: f.active,
            created_at: f.created_at,
            updated_at: f.updated_at,
        }
    }
}

/// Trigger a flow for one contact: `contact_uuid` or `phone` (a contact is created for a new
/// phone, as on every send).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct TriggerRequest {
    pub contact_uuid: Option<String>,
    pub phone: Option<String>,
}

/// List flows, newest first.
#[utoipa::path(
    get,
    path = "/api/flows",
    tag = "legacy",
    params(PageParams),
    security(("bearer" = ["flow:read"])),
    responses(
        (status = 200, description = "A page of flows, newest first.", body = Page<FlowOut>),
        (status = 400, description = "invalid_request.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_flows(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<FlowOut>>> {
    principal.require(Scope::FlowRead)?;
    let page = q?.0.page()?;
    let rows = state
        .store
        .list_flows(principal.org_id, page_query(&page))
        .await?;
    let page = Page::from_rows(rows, &page, |f| cursor(f.created_at, f.id));
    Ok(Json(page.map(|f| FlowOut::from(&f))))
}

/// Trigger a flow: send its action to one contact.
#[utoipa::path(
    post,
    path = "/api/flows/{id}/trigger",
    tag = "legacy",
    params(
        ("id" = String, Path, description = "The flow's UUID."),
        ("Idempotency-Key" = Option<String>, Header, description = "Optional. 1 to 120 visible ASCII characters; retries with the same key and body replay the first response."),
    ),
    request_body = TriggerRequest,
    security(("bearer" = ["flow:write"])),
    responses(
        (status = 201, description = "Sent: the send response.", body = SendResponse),
        (status = 400, description = "malformed_json, idempotency_key_invalid.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found: no such flow in this organization.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "validation_failed (contact_uuid or phone: missing, both, malformed, unknown contact; id: the flow is inactive), invalid_channel, invalid_template (the flow's catalog template is gone, inactive or not approved), conversation_required, outside_service_window, provider_rejected.", body = ErrorBody),
        (status = 503, description = "provider_unavailable: nothing was sent.", body = ErrorBody),
    )
)]
pub async fn trigger_flow(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    super::super::json::RawJson(body): super::super::json::RawJson,
) -> Response {
    if let Err(e) = principal.require(Scope::FlowWrite) {
        return e.into_response();
    }
    let uuid = match path_uuid(&id, "The flow") {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    let path = format!("/api/flows/{uuid}/trigger");
    let (work_state, work_principal, work_body) = (state.clone(), principal.clone(), body.clone());
    idempotency::run_post(
        &state,
        &principal,
        &headers,
        false,
        &path,
        &body,
        move |token| perform(work_state, work_principal, uuid, work_body, token),
    )
    .await
}

async fn perform(
    state: AppState,
    principal: Principal,
    uuid: Uuid,
    body: Bytes,
    token: Option<ClaimToken>,
) -> Response {
    let request: TriggerRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let mut errors = ValidationErrors::new();
    let addr = addressing(
        &mut errors,
        None,
        None,
        request.contact_uuid.as_deref(),
        request.phone.as_deref(),
        None,
    );
    match (&request.contact_uuid, &request.phone) {
        (None, None) => errors.add("contact_uuid", "give contact_uuid or phone"),
        (Some(_), Some(_)) => errors.add("phone", "give contact_uuid or phone, not both"),
        _ => {}
    }
    if !errors.is_empty() {
        return ApiError::validation(errors).into_response();
    }
    let trigger = FlowTrigger {
        org_id: principal.org_id,
        api_key_id: principal.key_id,
        flow_uuid: uuid,
        contact_uuid: addr.contact_uuid,
        phone: addr.phone,
    };
    let completion = send_completion(token);
    let recorded = completion.is_some();
    plain_outcome(
        send_flow(&send_context(&state), trigger, completion).await,
        recorded,
    )
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/flows", get(list_flows))
        .route(TRIGGER_ROUTE, post(trigger_flow))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(list_flows, trigger_flow),
    components(schemas(FlowOut, TriggerRequest))
)]
pub struct FlowsApi;
