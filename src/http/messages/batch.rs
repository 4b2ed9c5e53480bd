//! `POST /api/v1/integrations/messages/batch` (`messages:write`, `Idempotency-Key` required):
//! up to 1 000 sends, each a text, media or template send request as on the single paths plus
//! an optional `"path"` (`text`, the default, `media` or `template`), checked all-or-nothing and
//! queued (202); and `GET /api/v1/integrations/messages/batches/{batch_id}` (`messages:read`):
//! the batch's status and its items counted by status.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use uuid::Uuid;

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::idempotency;
use crate::http::json::{RawJson, parse_strict};
use crate::http::path::Path;
use crate::http::rate_limit::LimitClass;
use crate::http::state::AppState;
use crate::ops::sending::batch::{MAX_BATCH_ITEMS, check_batch, record_batch};
use crate::ops::sending::{SendError, SendInput};
use switchboard_domain::Timestamp;
use switchboard_domain::pacing::batch_status;
use switchboard_domain::scope::Scope;
use switchboard_store::ClaimToken;
use switchboard_store::queue::BatchRecord;

use super::requests::{SendPlan, media_request, template_request, text_request};
use super::send::{Route, plan_of, send_context, send_error};
use super::views::{SendMediaRequest, SendMessageRequest, SendTemplateRequest};

pub const BATCH_PATH: &str = "/api/v1/integrations/messages/batch";
pub const BATCH_STATUS_PATH: &str = "/api/v1/integrations/messages/batches/{batch_id}";

/// A batch of sends.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct BatchRequest {
    /// 1 to 1 000 send requests: each the body of `POST /messages` (the default),
    /// `/messages/media` or `/messages/template` (plain template sends by name and language),
    /// with `"path": "text" | "media" | "template"` naming which.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
}

pub use crate::views::sends::{BatchAccepted, accepted_body};

/// A batch's progress.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchOut {
    pub batch_id: Uuid,
    /// `queued` (no item started), `sending`, `completed` (every item sent or failed).
    pub status: String,
    pub total: i64,
    /// Items by message status (`queued`, `sent`, `delivered`, `read`, `failed`).
    #[schema(value_type = Object)]
    pub counts: BTreeMap<String, i64>,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

impl From<&BatchRecord> for BatchOut {
    fn from(b: &BatchRecord) -> Self {
        let queued = b.counts.get("queued").copied().unwrap_or(0);
        BatchOut {
            batch_id: b.uuid,
            status: batch_status(b.total, queued, b.in_progress).to_owned(),
            total: b.total,
            counts: b.counts.clone(),
            created_at: b.created_at,
            completed_at: b.completed_at,
        }
    }
}

/// One item's problem: its index, code and field issues.
fn item_error(index: usize, code: &str, message: &str, details: Option<&Value>) -> Value {
    let fields = details
        .and_then(|d| d.get("fields"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    let mut v = json!({ "index": index, "code": code, "message": message, "fields": fields });
    if let Some(Value::Object(d)) = details {
        for (k, x) in d {
            if k != "fields" {
                v[k] = x.clone();
            }
        }
    }
    v
}

/// An item's body, checked for shape, as a send input.
fn item_input(principal: &Principal, item: &Value) -> Result<SendInput, ApiError> {
    let Value::Object(obj) = item else {
        return Err(ApiError::validation_field("body", "must be a JSON object"));
    };
    let path = match obj.get("path") {
        None | Some(Value::Null) => "text",
        Some(Value::String(p)) if matches!(p.as_str(), "text" | "media" | "template") => p,
        Some(_) => {
            return Err(ApiError::validation_field(
                "path",
                "must be one of text, media, template",
            ));
        }
    };
    let mut obj = obj.clone();
    obj.remove("path");
    let bytes = serde_json::to_vec(&Value::Object(obj)).expect("JSON serializes");
    let plan: SendPlan = match path {
        "media" => plan_of::<SendMediaRequest, _, _>(&bytes, Route::V1, media_request)?,
        "template" => plan_of::<SendTemplateRequest, _, _>(&bytes, Route::V1, template_request)?,
        _ => plan_of::<SendMessageRequest, _, _>(&bytes, Route::V1, text_request)?,
    };
    let SendPlan::Plain(addressing, content) = plan else {
        return Err(ApiError::validation_field(
            "template_uuid",
            "catalog template sends (template_uuid, consent, ensure_conversation) are not accepted in a batch; send the template by name and language",
        ));
    };
    Ok(SendInput {
        org_id: principal.org_id,
        api_key_id: Some(principal.key_id),
        key_default_channel: principal.default_channel_id,
        channel_id: addressing.channel_id,
        channel_slug: addressing.channel_slug,
        contact_uuid: addressing.contact_uuid,
        phone: addressing.phone,
        content,
        reply_to: addressing.reply_to,
    })
}

/// Queue up to 1 000 sends at once.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/messages/batch",
    tag = "messages",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = String, Header, description = "Required. 1 to 120 visible ASCII characters.")),
    request_body = BatchRequest,
    responses(
        (status = 202, description = "Every item was valid and is queued as a message with status `queued`; the send worker sends them within each channel's pace, each with its usual events.", body = BatchAccepted),
        (status = 400, description = "malformed_json, idempotency_key_missing, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "validation_failed: `details.fields` for the batch itself (`messages`: 1 to 1 000 items), or `details.items: [{index, code, message, fields}]` for every invalid item (nothing is queued).", body = ErrorBody),
        (status = 429, description = "rate_limited: the sends budget (a batch counts as one send) or the batch items budget (`SWITCHBOARD_RATE_LIMIT_BATCH_ITEMS` per minute).", body = ErrorBody),
    )
)]
pub async fn send_batch(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> Response {
    if let Err(e) = principal.require(Scope::MessagesWrite) {
        return e.into_response();
    }
    let (work_state, work_principal, work_body) = (state.clone(), principal.clone(), body.clone());
    idempotency::run_post(
        &state,
        &principal,
        &headers,
        true,
        BATCH_PATH,
        &body,
        move |token| perform(work_state, work_principal, work_body, token),
    )
    .await
}

async fn perform(
    state: AppState,
    principal: Principal,
    body: Bytes,
    token: Option<ClaimToken>,
) -> Response {
    let request: BatchRequest = match parse_strict(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let n = request.messages.len();
    if n == 0 || n > MAX_BATCH_ITEMS {
        return ApiError::validation_field(
            "messages",
            format!("must hold 1 to {MAX_BATCH_ITEMS} send requests (got {n})"),
        )
        .into_response();
    }
    // Every item first: shape, then the rules of a send.
    let mut errors: Vec<(usize, Value)> = Vec::new();
    let mut inputs = Vec::with_capacity(n);
    for (index, item) in request.messages.iter().enumerate() {
        match item_input(&principal, item) {
            Ok(input) => inputs.push((index, input)),
            Err(e) => errors.push((
                index,
                item_error(index, e.code, &e.message, e.details.as_ref()),
            )),
        }
    }
    let ctx = send_context(&state);
    let prepared = match check_batch(&ctx, inputs).await {
        Ok(p) => Some(p),
        Err(item_errors) => {
            for (index, e) in item_errors {
                if let SendError::Store(_) = e {
                    return send_error(e).into_response();
                }
                let api = send_error(e);
                errors.push((
                    index,
                    item_error(index, api.code, &api.message, api.details.as_ref()),
                ));
            }
            None
        }
    };
    if !errors.is_empty() {
        errors.sort_by_key(|(i, _)| *i);
        let count = errors.len();
        return ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            format!("{count} of the {n} items are invalid; nothing was queued."),
        )
        .with_details(json!({ "items": errors.into_iter().map(|(_, v)| v).collect::<Vec<_>>() }))
        .into_response();
    }
    let prepared = prepared.expect("no errors, so every item is ready");
    // The items' own budget (a batch also counted as one send in the authentication layer).
    let decision = state
        .limiter
        .check_cost(
            principal.key_id,
            LimitClass::BatchItems,
            state.config.rate_limit_batch_items,
            n as u32,
        )
        .await;
    if !decision.allowed {
        metrics::counter!("switchboard_rate_limited_total", "policy" => LimitClass::BatchItems.policy())
            .increment(1);
        return ApiError::rate_limited(LimitClass::BatchItems.policy(), decision.retry_after_secs)
            .into_response();
    }
    // The claim keeps the batch's record, from which a replay renders the same 202.
    let stored = token.is_some();
    match record_batch(&ctx, principal.org_id, principal.key_id, prepared, token).await {
        Ok(batch) => {
            let mut r = idempotency::json_response(StatusCode::ACCEPTED, accepted_body(&batch));
            if stored {
                r.extensions_mut().insert(idempotency::ResponseStored);
            }
            r
        }
        Err(SendError::LostClaim) => {
            let mut r = ApiError::idempotency_in_progress().into_response();
            r.extensions_mut().insert(idempotency::ClaimLost);
            r
        }
        Err(e) => send_error(e).into_response(),
    }
}

/// A batch's status and counts.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/messages/batches/{batch_id}",
    tag = "messages",
    params(("batch_id" = String, Path, description = "The batch's id.")),
    security(("bearer" = ["messages:read"])),
    responses(
        (status = 200, description = "The batch.", body = BatchOut),
        (status = 404, description = "not_found (also another organization's batch).", body = ErrorBody),
    )
)]
pub async fn get_batch(
    State(state): State<AppState>,
    principal: Principal,
    Path(batch_id): Path<String>,
) -> ApiResult<Json<BatchOut>> {
    principal.require(Scope::MessagesRead)?;
    let not_found = || ApiError::not_found("The batch");
    let uuid = match Uuid::parse_str(&batch_id) {
        Ok(u) if batch_id.len() <= 64 => u,
        _ => return Err(not_found()),
    };
    let batch = state
        .store
        .find_batch(principal.org_id, uuid)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(BatchOut::from(&batch)))
}
