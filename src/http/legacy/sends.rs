//! Legacy sends and reads: `POST /api/send`, `/api/send/media`, `/api/send/template`
//! (`messages:write`), `GET /api/messages` (`messages:read`) and `GET /api/channels`
//! (`channels:read`).
//!
//! Each route is the v1 handler's own code under another path: the same request shapes,
//! channel selection, rules, events, responses and rate-limit class (sends for `/api/send*`,
//! see `rate_limit::LimitClass::of`). The one difference: `Idempotency-Key` is honoured when
//! present (replay, 409 on conflicts) but not required.

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};

use crate::http::auth::Principal;
use crate::http::channels::{self, ChannelOut};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::json::RawJson;
use crate::http::messages::{
    self, CatalogSendResponse, HistoryQuery, Route, SendMediaRequest, SendMessageRequest,
    SendResponse, SendTemplateRequest, media_request, send_frame, template_request, text_request,
};
use crate::http::pagination::Page;
use crate::http::query::{NoParams, StrictQuery};
use crate::http::state::AppState;
use crate::views::messages::MessageOut;

pub const SEND_PATH: &str = "/api/send";
pub const SEND_MEDIA_PATH: &str = "/api/send/media";
pub const SEND_TEMPLATE_PATH: &str = "/api/send/template";
pub const MESSAGES_PATH: &str = "/api/messages";
pub const CHANNELS_PATH: &str = "/api/channels";

/// Legacy: send text or interactive content (v1: `POST /api/v1/integrations/messages`).
#[utoipa::path(
    post,
    path = "/api/send",
    tag = "legacy",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Optional here (required on v1). When present: 1 to 120 visible ASCII characters; a retry with the same key and body replays the first response.")),
    request_body = SendMessageRequest,
    responses(
        (status = 201, description = "Sent (or replayed with `Idempotency-Replayed: true`). The same body as v1.", body = SendResponse),
        (status = 400, description = "malformed_json, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "As on v1: validation_failed, channel_conflict, invalid_channel, no_default_channel, conversation_required, outside_service_window, invalid_media, provider_rejected.", body = ErrorBody),
        (status = 503, description = "provider_unavailable or service_unavailable: nothing was sent.", body = ErrorBody),
    )
)]
pub async fn send(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> Response {
    send_frame(
        state,
        principal,
        headers,
        body,
        SEND_PATH,
        Route::Legacy,
        text_request,
    )
    .await
}

/// Legacy: send media by URL (v1: `POST /api/v1/integrations/messages/media`).
#[utoipa::path(
    post,
    path = "/api/send/media",
    operation_id = "legacy_send_media",
    tag = "legacy",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Optional here (required on v1); honoured when present.")),
    request_body = SendMediaRequest,
    responses(
        (status = 201, description = "Sent (or replayed). The same body as v1.", body = SendResponse),
        (status = 400, description = "malformed_json, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "As on v1.", body = ErrorBody),
        (status = 503, description = "provider_unavailable: nothing was sent.", body = ErrorBody),
    )
)]
pub async fn send_media(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> Response {
    send_frame(
        state,
        principal,
        headers,
        body,
        SEND_MEDIA_PATH,
        Route::Legacy,
        media_request,
    )
    .await
}

/// Legacy: send a provider template (v1: `POST /api/v1/integrations/messages/template`),
/// including conversation initiation (`ensure_conversation: true`) and campaign recipients
/// (`template_uuid` and `consent`): the whole v1 template path.
#[utoipa::path(
    post,
    path = "/api/send/template",
    operation_id = "legacy_send_template",
    tag = "legacy",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Optional here (required on v1); honoured when present.")),
    request_body = SendTemplateRequest,
    responses(
        (status = 201, description = "Sent (or replayed). The same body as v1.", body = CatalogSendResponse),
        (status = 400, description = "malformed_json, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "As on v1: validation_failed, channel errors, invalid_template, consent_required, provider_rejected.", body = ErrorBody),
        (status = 503, description = "provider_unavailable: nothing was sent.", body = ErrorBody),
    )
)]
pub async fn send_template(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    RawJson(body): RawJson,
) -> Response {
    send_frame(
        state,
        principal,
        headers,
        body,
        SEND_TEMPLATE_PATH,
        Route::Legacy,
        template_request,
    )
    .await
}

/// Legacy: message history, newest first (v1: `GET /api/v1/integrations/messages`, the same
/// filters and list envelope).
#[utoipa::path(
    get,
    path = "/api/messages",
    operation_id = "legacy_list_messages",
    tag = "legacy",
    security(("bearer" = ["messages:read"])),
    params(
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50."),
        ("cursor" = Option<String>, Query, description = "The next_cursor of the previous page."),
        ("channel_id" = Option<i64>, Query, description = "Only this channel."),
        ("channel_slug" = Option<String>, Query, description = "Only this channel (slug, UUID, provider identifier or name)."),
        ("contact_uuid" = Option<String>, Query, description = "Only this contact."),
        ("conversation_uuid" = Option<String>, Query, description = "Only this conversation."),
        ("direction" = Option<String>, Query, description = "outbound or inbound."),
        ("status" = Option<String>, Query, description = "queued, sent, delivered, read, failed or received."),
        ("since" = Option<String>, Query, description = "Created at or after (RFC 3339)."),
        ("until" = Option<String>, Query, description = "Created before (RFC 3339)."),
    ),
    responses(
        (status = 200, description = "A page of messages, newest first.", body = Page<MessageOut>),
        (status = 400, description = "invalid_request: a bad limit, cursor or filter.", body = ErrorBody),
        (status = 403, description = "The key lacks messages:read.", body = ErrorBody),
    )
)]
pub async fn list_messages(
    state: State<AppState>,
    principal: Principal,
    query: Result<StrictQuery<HistoryQuery>, ApiError>,
) -> ApiResult<axum::Json<Page<MessageOut>>> {
    messages::list_messages(state, principal, query).await
}

/// Legacy: the organization's channels (v1: `GET /api/v1/integrations/channels`).
#[utoipa::path(
    get,
    path = "/api/channels",
    operation_id = "legacy_list_channels",
    tag = "legacy",
    security(("bearer" = ["channels:read"])),
    responses(
        (status = 200, description = "Every channel of the organization, in one page.", body = Page<ChannelOut>),
        (status = 400, description = "invalid_request: a query parameter (this list takes none).", body = ErrorBody),
        (status = 403, description = "The key lacks channels:read.", body = ErrorBody),
    )
)]
pub async fn list_channels(
    state: State<AppState>,
    principal: Principal,
    query: Result<StrictQuery<NoParams>, ApiError>,
) -> ApiResult<axum::Json<Page<ChannelOut>>> {
    channels::list_channels(state, principal, query).await
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(SEND_PATH, post(send))
        .route(SEND_MEDIA_PATH, post(send_media))
        .route(SEND_TEMPLATE_PATH, post(send_template))
        .route(MESSAGES_PATH, get(list_messages))
        .route(CHANNELS_PATH, get(list_channels))
}
