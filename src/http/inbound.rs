//! Provider callbacks: `GET|POST /inbound/{channel_uuid}` (public: no API key; each provider's
//! own verification instead).
//!
//! * WhatsApp Cloud: `GET` answers the subscription handshake (`hub.mode=subscribe`,
//!   `hub.verify_token` = the channel's `verify_token`) with the raw `hub.challenge`, else 403;
//!   `POST` needs `X-Hub-Signature-256` over the raw body with the channel's `app_secret`.
//! * Telegram: `POST` needs `X-Telegram-Bot-Api-Secret-Token` = the channel's `secret_token`.
//!
//! A bad or missing signature is a 401 `invalid_signature` and changes nothing. An unknown
//! channel, or a channel type without callbacks (sandbox, lead ingestion), is a 404.

use std::collections::HashMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use uuid::Uuid;

use crate::ops::channels::provider_for;
use crate::ops::receiving::ingest;
use crate::providers::{InboundError, Provider};
use switchboard_domain::channel::Channel;
use switchboard_store::{ChangeOutcome, InboundOutcome, StatusOutcome, StoreError};

use super::error::{ApiError, ApiResult, ErrorBody};
use super::json::BODY_LIMIT;
use super::query::QueryParams;
use super::state::AppState;

/// What a callback changed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InboundResult {
    /// New inbound messages stored.
    pub received: usize,
    /// Inbound messages already stored before (provider retries).
    pub duplicates: usize,
    /// Status updates applied.
    pub statuses_applied: usize,
    /// Status updates ignored (stale, duplicate, or for an unknown message).
    pub statuses_ignored: usize,
    /// Items understood but not kept (other phone numbers, other webhook fields).
    pub skipped: usize,
    /// Customers' edits and deletions applied.
    pub changes_applied: usize,
    /// Edits and deletions ignored (an unknown or deleted message, or the same change again).
    pub changes_ignored: usize,
    /// Catalog templates whose status changed (WhatsApp `message_template_status_update`).
    pub templates_updated: usize,
    /// Template status changes for unknown templates, or that changed nothing.
    pub templates_ignored: usize,
}

fn not_found() -> ApiError {
    ApiError::not_found("The channel")
}

async fn channel_and_provider(
    state: &AppState,
    channel_uuid: &str,
) -> ApiResult<(Channel, Box<dyn Provider>)> {
    let uuid = Uuid::parse_str(channel_uuid).map_err(|_| not_found())?;
    let channel = match state.store.get_channel_by_uuid(uuid).await {
        Ok(c) => c,
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let provider = provider_for(
        state.store.as_ref(),
        &state.secrets,
        &state.providers,
        &channel,
    )
    .await
    .map_err(|e| ApiError::internal(format!("provider configuration: {e}")))?;
    Ok((channel, provider))
}

fn inbound_error(e: InboundError) -> ApiError {
    match e {
        InboundError::Unauthorized(why) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            format!("The callback could not be verified: {why}."),
        ),
        InboundError::Forbidden(why) => {
            ApiError::forbidden(format!("The verification request was refused: {why}."))
        }
        InboundError::Malformed(why) => ApiError::malformed_json(format!(
            "The callback is not in the provider's format: {why}."
        )),
        InboundError::NotSupported => ApiError::not_found("A provider callback for this channel"),
    }
}

/// The provider's subscription handshake (WhatsApp Cloud: `hub.challenge`).
#[utoipa::path(
    get,
    path = "/inbound/{channel_uuid}",
    tag = "inbound",
    params(
        ("channel_uuid" = String, Path, description = "The channel's UUID."),
        ("hub.mode" = Option<String>, Query, description = "subscribe"),
        ("hub.verify_token" = Option<String>, Query, description = "The channel's verify_token."),
        ("hub.challenge" = Option<String>, Query, description = "Echoed back when the token matches."),
    ),
    responses(
        (status = 200, description = "The raw hub.challenge, as text/plain.", body = String, content_type = "text/plain"),
        (status = 403, description = "The mode or token does not match.", body = ErrorBody),
        (status = 404, description = "Unknown channel, or a channel type without callbacks.", body = ErrorBody),
    )
)]
pub async fn handshake(
    State(state): State<AppState>,
    channel_uuid: Result<Path<String>, PathRejection>,
    QueryParams(query): QueryParams<HashMap<String, String>>,
) -> ApiResult<Response> {
    let Path(channel_uuid) = channel_uuid.map_err(|_| not_found())?;
    let (_, provider) = channel_and_provider(&state, &channel_uuid).await?;
    let challenge = provider.handshake(&query).map_err(inbound_error)?;
    Ok(([(CONTENT_TYPE, "text/plain; charset=utf-8")], challenge).into_response())
}

/// A provider callback: inbound messages and status updates, verified over the raw body.
#[utoipa::path(
    post,
    path = "/inbound/{channel_uuid}",
    tag = "inbound",
    params(
        ("channel_uuid" = String, Path, description = "The channel's UUID."),
        ("X-Hub-Signature-256" = Option<String>, Header, description = "WhatsApp Cloud: sha256=<hex HMAC-SHA256 of the raw body with the app secret>."),
        ("X-Telegram-Bot-Api-Secret-Token" = Option<String>, Header, description = "Telegram: the channel's secret_token."),
    ),
    request_body(content = Object, description = "The provider's own webhook body (WhatsApp Cloud API webhook, or a Telegram Update)."),
    responses(
        (status = 200, description = "Processed.", body = InboundResult),
        (status = 400, description = "Verified, but not the provider's format.", body = ErrorBody),
        (status = 401, description = "invalid_signature: nothing changed.", body = ErrorBody),
        (status = 404, description = "Unknown channel, or a channel type without callbacks.", body = ErrorBody),
    )
)]
pub async fn callback(
    State(state): State<AppState>,
    channel_uuid: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<InboundResult>> {
    let Path(channel_uuid) = channel_uuid.map_err(|_| not_found())?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(BODY_LIMIT)
        } else {
            ApiError::malformed_json(format!("The request body could not be read: {e}"))
        }
    })?;
    let (channel, provider) = channel_and_provider(&state, &channel_uuid).await?;
    provider
        .verify_callback(&headers, &body)
        .map_err(inbound_error)?;
    let mut parsed = provider.parse_callback(&body).map_err(inbound_error)?;
    let skipped = parsed.skipped;
    let templates = std::mem::take(&mut parsed.templates);
    let outcome = ingest(state.store.as_ref(), state.clock.as_ref(), &channel, parsed)
        .await
        .map_err(|e| match e {
            crate::ops::OpError::Store(s) => ApiError::from(s),
            other => ApiError::internal(other.to_string()),
        })?;
    let template_outcome = crate::ops::templates::apply_provider_statuses(
        state.store.as_ref(),
        state.clock.as_ref(),
        &channel,
        templates,
    )
    .await
    .map_err(|e| match e {
        crate::ops::OpError::Store(s) => ApiError::from(s),
        other => ApiError::internal(other.to_string()),
    })?;
    let received = outcome
        .messages
        .iter()
        .filter(|m| matches!(m, InboundOutcome::Stored(_)))
        .count();
    let applied = outcome
        .statuses
        .iter()
        .filter(|s| matches!(s, StatusOutcome::Applied { .. }))
        .count();
    let changes_applied = outcome
        .changes
        .iter()
        .filter(|c| matches!(c, ChangeOutcome::Applied(_)))
        .count();
    Ok(axum::Json(InboundResult {
        changes_applied,
        changes_ignored: outcome.changes.len() - changes_applied,
        received,
        duplicates: outcome.messages.len() - received,
        statuses_applied: applied,
        statuses_ignored: outcome.statuses.len() - applied,
        skipped,
        templates_updated: template_outcome.applied,
        templates_ignored: template_outcome.ignored,
    }))
}

/// The public routes of provider callbacks.
pub fn router() -> Router<AppState> {
    Router::new().route("/inbound/{channel_uuid}", get(handshake).post(callback))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(handshake, callback), components(schemas(InboundResult)))]
pub struct InboundApi;
