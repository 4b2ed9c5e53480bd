//! `POST /api/v1/integrations/messages/{uuid}/read` (`messages:write`): marks an inbound
//! message read at the provider (WhatsApp Cloud: `status: read`; with `{"typing": true}` also
//! the typing indicator). 202; on a channel without read receipts (Telegram, ...) a 422
//! `unsupported_for_channel`; on an outbound message a 422 `validation_failed`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use switchboard_domain::channel::ChannelType;
use switchboard_domain::message::Direction;
use switchboard_domain::scope::Scope;
use switchboard_store::StoreError;

use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::path::Path;
use crate::http::state::AppState;
use crate::providers::ProviderError;

pub const READ_PATH: &str = "/api/v1/integrations/messages/{uuid}/read";

/// The optional body of a read receipt.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    /// Also show the customer the typing indicator (WhatsApp; it ends when a message is sent
    /// or after 25 seconds).
    pub typing: Option<bool>,
}

/// The answer: the message marked read.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReadAccepted {
    pub message_uuid: Uuid,
    pub typing: bool,
}

#[utoipa::path(
    post,
    path = "/api/v1/integrations/messages/{uuid}/read",
    operation_id = "mark_message_read_v1",
    tag = "messages",
    params(("uuid" = String, Path, description = "The inbound message's UUID.")),
    request_body(content = Option<ReadRequest>, description = "Optional: `{\"typing\": true}`."),
    security(("bearer" = ["messages:write"])),
    responses(
        (status = 202, description = "The provider took the read receipt.", body = ReadAccepted),
        (status = 404, description = "not_found (also another organization's message).", body = ErrorBody),
        (status = 422, description = "validation_failed (an outbound message, or one without a provider id), unsupported_for_channel (the channel type has no read receipts), provider_rejected.", body = ErrorBody),
        (status = 503, description = "provider_unavailable.", body = ErrorBody),
    )
)]
pub async fn mark_read(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<ReadAccepted>)> {
    principal.require(Scope::MessagesWrite)?;
    let not_found = || ApiError::not_found("The message");
    let uuid = match Uuid::parse_str(&uuid) {
        Ok(u) if uuid.len() <= 64 => u,
        _ => return Err(not_found()),
    };
    let request: ReadRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReadRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::malformed_json(format!("The body is not a read request: {e}")))?
    };
    let typing = request.typing.unwrap_or(false);
    let message = match state.store.find_message(principal.org_id, uuid).await {
        Ok(m) => m,
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    if message.direction != Direction::Inbound {
        return Err(ApiError::validation_field(
            "uuid",
            "is an outbound message: only inbound messages are marked read",
        ));
    }
    if message.channel.channel_type != ChannelType::WhatsappCloud {
        let mut err = ApiError::unprocessable(
            "unsupported_for_channel",
            format!(
                "{} channels have no read receipts.",
                message.channel.channel_type
            ),
        );
        err.details = Some(serde_json::json!({ "channel_type": message.channel.channel_type }));
        return Err(err);
    }
    let Some(provider_message_id) = message.provider_message_id.as_deref() else {
        return Err(ApiError::validation_field(
            "uuid",
            "has no provider message id",
        ));
    };
    let channel = state.store.get_channel(message.channel.id).await?;
    let provider = crate::ops::channels::provider_for(
        state.store.as_ref(),
        &state.secrets,
        &state.providers,
        &channel,
    )
    .await
    .map_err(|e| match e {
        crate::ops::OpError::Store(s) => ApiError::from(s),
        other => ApiError::internal(other.to_string()),
    })?;
    match provider.mark_read(provider_message_id, typing).await {
        Ok(()) => Ok((
            StatusCode::ACCEPTED,
            Json(ReadAccepted {
                message_uuid: message.uuid,
                typing,
            }),
        )),
        Err(ProviderError::Rejected { message, .. }) => Err(ApiError::unprocessable(
            "provider_rejected",
            format!("The provider rejected the read receipt: {message}"),
        )),
        Err(ProviderError::NotConfigured(m)) | Err(ProviderError::Unsupported(m)) => {
            Err(ApiError::unprocessable("invalid_channel", m))
        }
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            "The provider could not be reached; nothing was marked. Retry later.",
        )),
    }
}
