//! Messages: `POST /api/v1/integrations/messages` (text and interactive), `/messages/media`,
//! `/messages/template` (scope `messages:write`, `Idempotency-Key` required) and `GET
//! /api/v1/integrations/messages` (history, scope `messages:read`).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::ops::sending::{SendCompletion, SendContext, SendError, SendInput};
use crate::providers::ProviderError;
use crate::views::messages::{ContactOut, ConversationOut, MessageOut};
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::channel_selection::match_slug;
use switchboard_domain::message::{
    Content, Direction, MediaInput, MessageStatus, TextInput, contains_nul, validate_media,
    validate_template, validate_text,
};
use switchboard_domain::phone::Phone;
use switchboard_domain::scope::Scope;
use switchboard_domain::{Timestamp, ValidationErrors};
use switchboard_store::{
    ClaimToken, HistoryCursor, MessageFilter, RecordedOutbound, StoredResponse,
};

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody, ErrorObject};
use super::idempotency::{self, ClaimLost};
use super::initiation::CatalogSendResponse;
use super::json::{RawJson, parse};
use super::pagination::{Page, PageRequest};
use super::query::QueryParams;
use super::request_id;
use super::state::AppState;

pub const MESSAGES_PATH: &str = "/api/v1/integrations/messages";
pub const MEDIA_PATH: &str = "/api/v1/integrations/messages/media";
pub const TEMPLATE_PATH: &str = "/api/v1/integrations/messages/template";

/// The longest `channel_slug` looked at.
const MAX_SLUG_INPUT: usize = 200;

// ---------------------------------------------------------------------------------------------
// Request bodies

/// Send text or interactive content.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendMessageRequest {
    /// The channel, by numeric id. Mutually exclusive with `channel_slug`.
    pub channel_id: Option<i64>,
    /// The channel by slug, UUID, provider identifier or normalized name.
    pub channel_slug: Option<String>,
    /// The recipient (preferred).
    pub contact_uuid: Option<String>,
    /// Legacy: the recipient's phone (E.164 or international form), resolved in the
    /// organization; a contact is created when none has it.
    pub phone: Option<String>,
    /// The body text (1 to 4096 characters); required for `type: text`. For `interactive`, the
    /// body text when `interactive.body.text` is absent.
    pub message: Option<String>,
    /// `text` (default) or `interactive`.
    #[serde(rename = "type")]
    pub message_type: Option<String>,
    /// A WhatsApp Cloud API `interactive` object of type `button` (1 to 3 reply buttons) or
    /// `list` (up to 10 rows).
    #[schema(value_type = Option<Object>)]
    pub interactive: Option<Value>,
    /// Show a preview of the first URL in the text (WhatsApp, Telegram).
    pub preview_url: Option<bool>,
}

/// Send media by URL.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendMediaRequest {
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<String>,
    pub phone: Option<String>,
    /// `document`, `image`, `audio`, `video` or `sticker`.
    pub media_type: Option<String>,
    /// An absolute http(s) URL the provider downloads the media from.
    pub media_url: Option<String>,
    /// The file name shown to the recipient (documents).
    pub file_name: Option<String>,
    /// Caption (up to 1024 characters; not for audio and stickers).
    pub caption: Option<String>,
}

/// Send a provider template. Three forms:
///
/// * a plain template send: `template` (`name`, `language`, `components`) to `contact_uuid` or
///   `phone`, on the channel chosen as for every send;
/// * a conversation initiation (`ensure_conversation: true`): explicit `channel_id` of an
///   active whatsapp_cloud channel, `phone` (or `contact_uuid`), `template_uuid` of an active,
///   approved catalog template of that channel, `consent`, optionally `first_name` and
///   `template` (whose `name`/`language` must agree with the catalog; its `components` carry
///   the parameters, which must fit the template);
/// * a synchronized campaign recipient: a plain template send that also carries
///   `template_uuid` and `consent`; the same template and consent rules apply, on the channel
///   chosen as for every send, without opening a conversation, and every such send is audited
///   (`campaign_send.validated` / `campaign_send.refused`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendTemplateRequest {
    /// The channel by id. Required for conversation initiation (an active whatsapp_cloud
    /// channel); `channel_slug` and default channels do not count there.
    pub channel_id: Option<i64>,
    /// The channel by slug, UUID, provider identifier or normalized name (not for initiation).
    pub channel_slug: Option<String>,
    /// The recipient (preferred for plain sends).
    pub contact_uuid: Option<String>,
    /// The recipient's phone, normalized to E.164 (`+4915123456789`); the organization's contact
    /// with it is used, or created (with `first_name` on initiation).
    pub phone: Option<String>,
    /// `{"name": "order_update", "language": "en_US", "components": [...]}` (WhatsApp Cloud API
    /// components with their parameters; `language` may also be `{"code": "en_US"}`). Required
    /// for plain sends; optional for catalog sends (the catalog template gives name and
    /// language, which must agree when given).
    #[schema(value_type = Option<Object>)]
    pub template: Option<Value>,
    /// `true`: conversation initiation (specification 4.3).
    pub ensure_conversation: Option<bool>,
    /// The catalog template (initiation and campaign sends): active, approved, owned by the
    /// channel.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub template_uuid: Option<String>,
    /// Opt-in evidence (initiation and campaign sends).
    #[schema(value_type = Option<crate::http::initiation::ConsentInput>)]
    pub consent: Option<Value>,
    /// The name of a contact created by an initiation (1 to 200 characters).
    pub first_name: Option<String>,
}

/// The channel and recipient fields shared by the three sends.
pub struct Addressing {
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
}

/// What a send's body asks for, once checked for shape: a plain send of validated content,
/// or a catalog template send (conversation initiation or a campaign recipient), whose rules
/// need the catalogue and are checked by `ops::sending::catalog`.
pub enum SendPlan {
    Plain(Addressing, Content),
    Catalog(Addressing, super::initiation::CatalogPlan),
}

impl From<(Addressing, Content)> for SendPlan {
    fn from((addressing, content): (Addressing, Content)) -> Self {
        SendPlan::Plain(addressing, content)
    }
}

/// Checks the channel and recipient fields of a send, adding field errors.
pub fn addressing(
    errors: &mut ValidationErrors,
    channel_id: Option<i64>,
    channel_slug: Option<&str>,
    contact_uuid: Option<&str>,
    phone: Option<&str>,
) -> Addressing {
    let channel_slug = match channel_slug {
        Some(s) if s.trim().is_empty() => {
            errors.add("channel_slug", "must not be blank");
            None
        }
        Some(s) if s.chars().count() > MAX_SLUG_INPUT || s.contains('\0') => {
            errors.add(
                "channel_slug",
                format!("must be at most {MAX_SLUG_INPUT} characters"),
            );
            None
        }
        other => other.map(str::to_owned),
    };
    let contact_uuid = contact_uuid.and_then(|s| match Uuid::parse_str(s.trim()) {
        Ok(u) if s.len() <= 64 => Some(u),
        _ => {
            errors.add("contact_uuid", "must be a UUID");
            None
        }
    });
    let phone = phone.and_then(|p| match Phone::parse(p) {
        Ok(p) => Some(p),
        Err(e) => {
            errors.add("phone", e.to_string());
            None
        }
    });
    Addressing {
        channel_id,
        channel_slug,
        contact_uuid,
        phone,
    }
}

fn merge(
    errors: &mut ValidationErrors,
    result: Result<Content, ValidationErrors>,
) -> Option<Content> {
    match result {
        Ok(c) => Some(c),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    }
}

/// The body of a successful send: `201 {"message", "channel", "contact", "conversation"}`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SendResponse {
    pub message: MessageOut,
    /// The channel actually used.
    pub channel: ChannelIdentity,
    pub contact: ContactOut,
    /// The conversation the message belongs to (null when it belongs to none, e.g. a template
    /// on a WhatsApp channel without an open conversation).
    pub conversation: Option<ConversationOut>,
}

impl From<&RecordedOutbound> for SendResponse {
    fn from(r: &RecordedOutbound) -> Self {
        SendResponse {
            message: MessageOut::from(&r.message),
            channel: r.message.channel.clone(),
            contact: ContactOut::from(&r.contact),
            conversation: r.conversation.as_ref().map(ConversationOut::from),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors of a send

pub(super) fn body_bytes(code: &'static str, message: &str, details: Option<Value>) -> Vec<u8> {
    serde_json::to_vec(&ErrorBody {
        error: ErrorObject {
            code: code.to_owned(),
            message: message.to_owned(),
            request_id: request_id::current(),
            details,
        },
    })
    .expect("error bodies serialize")
}

/// The response stored for a recorded send (and given live): 201 with the send response, or
/// the 422 of a provider rejection.
pub(super) fn stored_response(
    recorded: &RecordedOutbound,
    rejection: Option<&ProviderError>,
) -> StoredResponse {
    match rejection {
        None => StoredResponse {
            status: 201,
            body: serde_json::to_vec(&SendResponse::from(recorded)).expect("responses serialize"),
        },
        Some(e) => {
            let err = send_error(SendError::ProviderRejected {
                recorded: Box::new(recorded.clone()),
                error: e.clone(),
            });
            StoredResponse {
                status: err.status.as_u16(),
                body: body_bytes(err.code, &err.message, err.details),
            }
        }
    }
}

/// The API error of a failed send: its code, message and details, with the status of the code
/// (422 for the rules of a send, 503 `provider_unavailable` with `Retry-After: 1`, 409
/// `idempotency_in_progress`, the store's own errors as everywhere).
pub fn send_error(e: SendError) -> ApiError {
    let e = match e {
        SendError::Store(s) => return ApiError::from(s),
        SendError::LostClaim => return ApiError::idempotency_in_progress(),
        e => e,
    };
    let unavailable = matches!(e, SendError::ProviderUnavailable(_));
    let status = if unavailable {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    let mut err = ApiError::new(status, e.code(), e.message());
    err.details = e.details();
    if unavailable {
        err = err.with_header(axum::http::header::RETRY_AFTER, "1");
    }
    err
}

// ---------------------------------------------------------------------------------------------
// Sends

/// One send: parse, validate, send, and shape the response (marked recorded when the claim was
/// completed in the send's transaction).
async fn perform<T, F, R>(
    state: AppState,
    principal: Principal,
    body: Bytes,
    token: Option<ClaimToken>,
    prepare: F,
) -> Response
where
    T: DeserializeOwned,
    F: FnOnce(T) -> Result<R, ApiError>,
    R: Into<SendPlan>,
{
    let request: T = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (addressing, content) = match prepare(request).map(Into::into) {
        Ok(SendPlan::Plain(addressing, content)) => (addressing, content),
        Ok(SendPlan::Catalog(addressing, plan)) => {
            return super::initiation::perform(state, principal, addressing, plan, token).await;
        }
        Err(e) => return e.into_response(),
    };
    let input = SendInput {
        org_id: principal.org_id,
        api_key_id: Some(principal.key_id),
        key_default_channel: principal.default_channel_id,
        channel_id: addressing.channel_id,
        channel_slug: addressing.channel_slug,
        contact_uuid: addressing.contact_uuid,
        phone: addressing.phone,
        content,
    };
    run_plain_send(&state, input, token, |e| send_error(e).into_response()).await
}

/// The scope and idempotency frame of a send: `messages:write`, then `Idempotency-Key`
/// (required on the v1 paths; legacy `/api/send*` routes pass `idempotency_required: false`
/// and get the same rules when the header is present), then the send itself, whose result and
/// completed idempotency record are written in one transaction. `prepare` turns the parsed
/// body into the addressing and validated content ([`text_request`], [`media_request`], or a
/// legacy route's own), or into a [`SendPlan`] ([`template_request`]: plain template sends,
/// conversation initiation and campaign recipients).
pub async fn send_frame<T, F, R>(
    state: AppState,
    principal: Principal,
    headers: HeaderMap,
    body: Bytes,
    path: &'static str,
    idempotency_required: bool,
    prepare: F,
) -> Response
where
    T: DeserializeOwned + Send + 'static,
    F: FnOnce(T) -> Result<R, ApiError> + Send + 'static,
    R: Into<SendPlan> + 'static,
{
    if let Err(e) = principal.require(Scope::MessagesWrite) {
        return e.into_response();
    }
    let (work_state, work_principal, work_body) = (state.clone(), principal.clone(), body.clone());
    idempotency::run_post(
        &state,
        &principal,
        &headers,
        idempotency_required,
        path,
        &body,
        move |token| perform::<T, F, R>(work_state, work_principal, work_body, token, prepare),
    )
    .await
}

pub fn text_request(r: SendMessageRequest) -> Result<(Addressing, Content), ApiError> {
    let mut errors = ValidationErrors::new();
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
    );
    if r.interactive.as_ref().is_some_and(contains_nul) {
        errors.add("interactive", "must not contain NUL characters");
    }
    let content = merge(
        &mut errors,
        validate_text(&TextInput {
            message: r.message.as_deref(),
            kind: r.message_type.as_deref(),
            interactive: r.interactive.as_ref(),
            preview_url: r.preview_url,
        }),
    );
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok((addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

pub fn media_request(r: SendMediaRequest) -> Result<(Addressing, Content), ApiError> {
    let mut errors = ValidationErrors::new();
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
    );
    let content = merge(
        &mut errors,
        validate_media(&MediaInput {
            media_type: r.media_type.as_deref(),
            media_url: r.media_url.as_deref(),
            caption: r.caption.as_deref(),
            file_name: r.file_name.as_deref(),
        }),
    );
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok((addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// A template send: with `ensure_conversation: true`, a conversation initiation; with
/// `template_uuid` or `consent` (and without `ensure_conversation: true`), a synchronized
/// campaign recipient; otherwise a plain template send.
pub fn template_request(r: SendTemplateRequest) -> Result<SendPlan, ApiError> {
    if r.ensure_conversation == Some(true) || r.template_uuid.is_some() || r.consent.is_some() {
        return super::initiation::catalog_request(r);
    }
    let mut errors = ValidationErrors::new();
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
    );
    let content = merge(&mut errors, validate_template(r.template.as_ref()));
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok(SendPlan::Plain(addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// Runs a plain (not catalog) send and shapes its response for the idempotency layer: 201
/// with the send response, a provider rejection's stored 422, `idempotency_in_progress` when
/// the claim was lost; `other` shapes every other error. Shared by the v1 and legacy send
/// paths and by flow triggers.
pub(crate) async fn run_plain_send(
    state: &AppState,
    input: SendInput,
    token: Option<ClaimToken>,
    other: impl FnOnce(SendError) -> Response,
) -> Response {
    let completion = token.map(|token| SendCompletion {
        token,
        respond: Box::new(stored_response),
    });
    let recorded = completion.is_some();
    let result = crate::ops::sending::send(&send_context(state), input, completion).await;
    send_outcome(result, recorded, |r| stored_response(r, None).body, other)
}

/// What a send needs from the application state.
pub(crate) fn send_context(state: &AppState) -> SendContext<'_> {
    SendContext {
        store: state.store.as_ref(),
        secrets: &state.secrets,
        clock: state.clock.as_ref(),
        providers: &state.providers,
        cache: &state.config_cache,
    }
}

/// Shapes a send's outcome (plain or catalog) for the idempotency layer: 201 with `created`'s
/// body, a provider rejection's stored 422, `idempotency_in_progress` when the claim was lost;
/// `other` shapes every other error. `recorded`: the idempotency claim was completed in the
/// send's own transaction.
pub(crate) fn send_outcome<T>(
    result: Result<T, SendError>,
    recorded: bool,
    created: impl FnOnce(&T) -> Vec<u8>,
    other: impl FnOnce(SendError) -> Response,
) -> Response {
    let mark = |mut r: Response| {
        if recorded {
            r.extensions_mut().insert(idempotency::ResponseStored);
        }
        r
    };
    match result {
        Ok(sent) => mark(idempotency::json_response(
            StatusCode::CREATED,
            created(&sent),
        )),
        Err(SendError::ProviderRejected { recorded: r, error }) => {
            let stored = stored_response(&r, Some(&error));
            mark(idempotency::json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                stored.body,
            ))
        }
        Err(SendError::LostClaim) => {
            let mut r = ApiError::idempotency_in_progress().into_response();
            r.extensions_mut().insert(ClaimLost);
            r
        }
        Err(e) => other(e),
    }
}

/// Send text or interactive content.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/messages",
    tag = "messages",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = String, Header, description = "Required. 1 to 120 visible ASCII characters; a UUID is a good choice. Retries with the same key and body replay the first response.")),
    request_body = SendMessageRequest,
    responses(
        (status = 201, description = "Sent (or replayed with `Idempotency-Replayed: true`).", body = SendResponse),
        (status = 400, description = "malformed_json, idempotency_key_missing, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "validation_failed, channel_conflict, invalid_channel, no_default_channel, conversation_required, outside_service_window, provider_rejected.", body = ErrorBody),
        (status = 503, description = "provider_unavailable or service_unavailable: nothing was sent; retry with the same key.", body = ErrorBody),
    )
)]
pub async fn send_message(
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
        MESSAGES_PATH,
        true,
        text_request,
    )
    .await
}

/// Send media (document, image, audio, video or sticker) by URL.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/messages/media",
    tag = "messages",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = String, Header, description = "Required. 1 to 120 visible ASCII characters.")),
    request_body = SendMediaRequest,
    responses(
        (status = 201, description = "Sent (or replayed).", body = SendResponse),
        (status = 400, description = "malformed_json, idempotency_key_missing, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "validation_failed, channel errors, conversation_required, outside_service_window, provider_rejected.", body = ErrorBody),
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
        MEDIA_PATH,
        true,
        media_request,
    )
    .await
}

/// Send a provider template (always allowed on WhatsApp, also outside the service window);
/// also conversation initiation (`ensure_conversation: true`) and synchronized campaign
/// recipients (`template_uuid` and `consent` without `ensure_conversation`).
#[utoipa::path(
    post,
    path = "/api/v1/integrations/messages/template",
    tag = "messages",
    security(("bearer" = ["messages:write"])),
    params(("Idempotency-Key" = String, Header, description = "Required. 1 to 120 visible ASCII characters.")),
    request_body = SendTemplateRequest,
    responses(
        (status = 201, description = "Sent (or replayed). Initiation and campaign sends also carry `consent` (the evidence stored, with its uuid) and `template` (the catalog template); an initiation's `conversation` is the open conversation (created or reused).", body = CatalogSendResponse),
        (status = 400, description = "malformed_json, idempotency_key_missing, idempotency_key_invalid.", body = ErrorBody),
        (status = 409, description = "idempotency_conflict, idempotency_in_progress.", body = ErrorBody),
        (status = 422, description = "validation_failed (details.fields: phone, first_name, template.*, contact_uuid, ...), channel_conflict, no_default_channel (plain and campaign sends), invalid_channel (details.reason: channel_id_required, not_found, inactive, not_template_capable, cannot_send, unsupported, not_configured), invalid_template (details.reason: template_uuid_required, not_found, wrong_channel, inactive, not_approved, mismatch, parameters_mismatch; details.fields), consent_required (details.fields under consent.*: missing, not confirmed, unknown purpose or source, blank reference, captured_at malformed or in the future, purpose not matching the template's category), provider_rejected. Nothing is written, except the campaign_send.refused audit entry of a refused campaign send.", body = ErrorBody),
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
        TEMPLATE_PATH,
        true,
        template_request,
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// History

#[derive(Debug, Default, Deserialize)]
pub struct HistoryQuery {
    limit: Option<String>,
    cursor: Option<String>,
    channel_id: Option<String>,
    channel_slug: Option<String>,
    contact_uuid: Option<String>,
    conversation_uuid: Option<String>,
    direction: Option<String>,
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(param, message)
}

fn uuid_param(param: &str, v: Option<&str>) -> ApiResult<Option<Uuid>> {
    v.map(|s| Uuid::parse_str(s.trim()).map_err(|_| bad(param, format!("{param} must be a UUID."))))
        .transpose()
}

fn time_param(param: &str, v: Option<&str>) -> ApiResult<Option<Timestamp>> {
    v.map(|s| {
        Timestamp::parse_rfc3339(s).map_err(|_| {
            bad(
                param,
                format!("{param} must be an RFC 3339 time such as 2026-08-14T09:30:00Z."),
            )
        })
    })
    .transpose()
}

/// The message history of the organization, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/messages",
    tag = "messages",
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
        (status = 400, description = "invalid_request: a bad limit, cursor or filter (details.param names it).", body = ErrorBody),
    )
)]
pub async fn list_messages(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<QueryParams<HistoryQuery>, ApiError>,
) -> ApiResult<axum::Json<Page<MessageOut>>> {
    principal.require(Scope::MessagesRead)?;
    let QueryParams(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let mut filter = MessageFilter {
        direction: q
            .direction
            .as_deref()
            .map(|d| {
                d.parse::<Direction>()
                    .map_err(|_| bad("direction", "direction must be outbound or inbound."))
            })
            .transpose()?,
        status: q
            .status
            .as_deref()
            .map(|s| {
                s.parse::<MessageStatus>().map_err(|_| {
                    bad(
                        "status",
                        "status must be queued, sent, delivered, read, failed or received.",
                    )
                })
            })
            .transpose()?,
        since: time_param("since", q.since.as_deref())?,
        until: time_param("until", q.until.as_deref())?,
        ..Default::default()
    };
    let empty = || {
        Ok(axum::Json(Page {
            data: Vec::new(),
            has_more: false,
            next_cursor: None,
        }))
    };
    match (q.channel_id.as_deref(), q.channel_slug.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "channel_slug",
                "Give either channel_id or channel_slug, not both.",
            ));
        }
        (Some(id), None) => {
            filter.channel_id = Some(
                id.trim()
                    .parse::<i64>()
                    .map_err(|_| bad("channel_id", "channel_id must be an integer."))?,
            );
        }
        (None, Some(slug)) => {
            if slug.trim().is_empty() || slug.len() > MAX_SLUG_INPUT {
                return Err(bad(
                    "channel_slug",
                    "channel_slug must be 1 to 200 characters.",
                ));
            }
            let channels = state.store.list_channels(principal.org_id).await?;
            match match_slug(&channels, slug).as_slice() {
                [] => return empty(),
                [one] => filter.channel_id = Some(one.id),
                _ => {
                    return Err(bad(
                        "channel_slug",
                        "channel_slug matches several channels; use channel_id.",
                    ));
                }
            }
        }
        (None, None) => {}
    }
    if let Some(uuid) = uuid_param("contact_uuid", q.contact_uuid.as_deref())? {
        // Deleted contacts included: their messages stay in the history.
        match state
            .store
            .find_contact_with_deleted(principal.org_id, uuid)
            .await?
        {
            Some(c) => filter.contact_id = Some(c.id),
            None => return empty(),
        }
    }
    if let Some(uuid) = uuid_param("conversation_uuid", q.conversation_uuid.as_deref())? {
        match state
            .store
            .find_conversation(principal.org_id, uuid)
            .await?
        {
            Some(c) => filter.conversation_id = Some(c.id),
            None => return empty(),
        }
    }
    let after = page.cursor.map(|c| HistoryCursor {
        created_at: Timestamp::from_millis(c.time_ms),
        id: c.id,
    });
    let rows = state
        .store
        .list_messages(principal.org_id, &filter, after, page.fetch_limit())
        .await?;
    let page = Page::from_rows(rows, &page, |m| super::pagination::Cursor {
        time_ms: m.created_at.millis(),
        id: m.id,
    });
    Ok(axum::Json(page.map(|m| MessageOut::from(&m))))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(MESSAGES_PATH, get(list_messages).post(send_message))
        .route(MEDIA_PATH, axum::routing::post(send_media))
        .route(TEMPLATE_PATH, axum::routing::post(send_template))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(send_message, send_media, send_template, list_messages),
    components(schemas(
        SendMessageRequest,
        SendMediaRequest,
        SendTemplateRequest,
        SendResponse,
        CatalogSendResponse,
        crate::http::initiation::ConsentInput,
        crate::views::templates::ConsentOut,
        crate::views::templates::TemplateOut,
        MessageOut,
        ContactOut,
        ConversationOut
    ))
)]
pub struct MessagesApi;
