//! `GET /api/v1/integrations/messages/{uuid}` (`messages:read`): one message with its
//! `timeline`, the journey "the API said 200 but the customer never got it" asks about:
//! accepted, the provider request and response, each status change (with the provider's code
//! when it failed) and each attempt to deliver one of its events to a webhook endpoint, oldest
//! first.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::views::messages::MessageOut;
use switchboard_domain::Timestamp;
use switchboard_domain::message::timeline::StepKind;
use switchboard_domain::scope::Scope;
use switchboard_store::{MessageStep, StoreError};

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::path::Path;
use crate::http::state::AppState;

/// One step of a message's journey. Besides `at` and `kind`, a step has the fields of its
/// kind: `provider_request`: `provider`; `provider_response`: `outcome` (`accepted` or
/// `rejected`) with `provider_message_id`, or `code` and `provider_code`; `status`: `status`,
/// with `code` and `provider_code` when it is `failed`; `webhook_attempt`: `event`,
/// `event_id`, `endpoint_uuid`, `delivery_id`, `attempt`, `response_status`, `duration_ms`
/// and `error_code` (`null` when the endpoint answered).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TimelineStep {
    pub at: Timestamp,
    pub kind: StepKind,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub detail: Map<String, Value>,
}

impl From<MessageStep> for TimelineStep {
    fn from(s: MessageStep) -> Self {
        TimelineStep {
            at: s.at,
            kind: s.kind,
            detail: match s.detail {
                Value::Object(m) => m,
                _ => Map::new(),
            },
        }
    }
}

/// A message with its journey.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct MessageWithTimeline {
    #[serde(flatten)]
    pub message: MessageOut,
    /// Oldest first.
    pub timeline: Vec<TimelineStep>,
}

#[utoipa::path(
    get,
    path = "/api/v1/integrations/messages/{uuid}",
    operation_id = "get_message_v1",
    tag = "messages",
    params(("uuid" = String, Path, description = "The message's UUID.")),
    security(("bearer" = ["messages:read"])),
    responses(
        (status = 200, description = "The message with its timeline, oldest step first.", body = MessageWithTimeline),
        (status = 404, description = "not_found (also another organization's message).", body = ErrorBody),
    )
)]
pub async fn get_message(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<MessageWithTimeline>> {
    principal.require(Scope::MessagesRead)?;
    let not_found = || ApiError::not_found("The message");
    let uuid = match Uuid::parse_str(&uuid) {
        Ok(u) if uuid.len() <= 64 => u,
        _ => return Err(not_found()),
    };
    let message = match state.store.find_message(principal.org_id, uuid).await {
        Ok(m) => m,
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let timeline = state.store.message_timeline(message.id).await?;
    Ok(Json(MessageWithTimeline {
        message: MessageOut::from(&message),
        timeline: timeline.into_iter().map(TimelineStep::from).collect(),
    }))
}
