//! The send endpoints: `POST /api/v1/integrations/messages` (text and interactive),
//! `/messages/media` and `/messages/template` (plain template sends, conversation initiation and
//! campaign recipients), and the frame the legacy `/api/send*` routes and flow triggers share:
//! scope `messages:write`, `Idempotency-Key`, the send through `ops::sending`, and the response
//! stored in the send's own transaction.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::ops::sending::{
    CatalogSendInput, SendCompletion, SendContext, SendError, SendInput, prepare, send_catalog,
    send_prepared,
};
use crate::views::sends::created_body;
use switchboard_domain::scope::Scope;
use switchboard_store::{ClaimRef, ClaimToken, RecordedOutbound, RecordedSend};

use super::requests::{
    Addressing, CatalogPlan, FixedMembers, SendPlan, media_request, template_request, text_request,
};
use super::views::{
    CatalogSendResponse, SendMediaRequest, SendMessageRequest, SendResponse, SendTemplateRequest,
};
use super::{MEDIA_PATH, MESSAGES_PATH, TEMPLATE_PATH};
use crate::http::auth::Principal;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::idempotency::{self, ClaimLost, ClaimTaken, Deferred, SendClaim};
use crate::http::json::{RawJson, Read, read_lenient, read_strict};
use crate::http::recorded::send_answer;
use crate::http::request_id;
use crate::http::state::AppState;

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
    let status = match e {
        SendError::ProviderUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        SendError::FlowNotFound => StatusCode::NOT_FOUND,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let mut err = ApiError::new(status, e.code(), e.message());
    err.details = e.details();
    if unavailable {
        err = err.with_header(axum::http::header::RETRY_AFTER, "1");
    }
    err
}

/// One send: parse, validate, send, and shape the response (marked recorded when the claim was
/// completed in the send's transaction).
async fn perform<T, F, R>(
    state: AppState,
    principal: Principal,
    body: Bytes,
    route: Route,
    claim: Option<SendClaim>,
    prepare: F,
) -> Response
where
    T: DeserializeOwned + utoipa::PartialSchema + FixedMembers,
    F: FnOnce(T) -> Result<R, ApiError>,
    R: Into<SendPlan>,
{
    let (addressing, content) = match plan_of(&body, route, prepare) {
        Err(e) => return e.into_response(),
        Ok(SendPlan::Plain(addressing, content)) => (addressing, content),
        Ok(SendPlan::Catalog(addressing, plan)) => {
            // A catalog send's key is claimed first, whatever its channel.
            let (token, taken) = match claim {
                None => (None, false),
                Some(SendClaim::Held(token)) => (Some(token), false),
                Some(SendClaim::Deferred(deferred)) => match deferred.claim().await {
                    Ok(token) => (Some(token), true),
                    Err(answer) => return answer,
                },
            };
            let response = run_catalog_send(state, principal, addressing, plan, token).await;
            return match token {
                Some(token) if taken => claim_taken(response, token),
                _ => response,
            };
        }
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
        reply_to: addressing.reply_to,
    };
    run_plain_send(&state, input, claim).await
}

/// A send's body read (strictly on v1) and checked for shape by `prepare`: the body's own
/// problems (unknown fields, wrong types) and the send's field checks are one 422.
pub(super) fn plan_of<T, F, R>(body: &[u8], route: Route, prepare: F) -> Result<SendPlan, ApiError>
where
    T: DeserializeOwned + utoipa::PartialSchema + FixedMembers,
    F: FnOnce(T) -> Result<R, ApiError>,
    R: Into<SendPlan>,
{
    let Read { value, errors } = match route {
        Route::V1 => read_strict::<T>(body)?,
        Route::Legacy => read_lenient::<T>(body)?,
    };
    let Some(request) = value else {
        return Err(ApiError::validation(errors));
    };
    let mut errors = errors;
    if route == Route::V1 {
        errors.0.extend(request.unknown_members().0);
    }
    match prepare(request).map(Into::into) {
        Err(e) => Err(e.with_fields(errors)),
        Ok(_) if !errors.is_empty() => Err(ApiError::validation(errors)),
        Ok(plan) => Ok(plan),
    }
}

/// Which API a send arrived on: the v1 paths require `Idempotency-Key` and refuse body fields
/// they do not know; the legacy `/api/send*` routes honour the key when present and stay
/// lenient about fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    V1,
    Legacy,
}

/// The scope and idempotency frame of a send: `messages:write`, then `Idempotency-Key`
/// (required on the v1 paths; legacy `/api/send*` routes get the same rules when the header
/// is present: [`Route`]), then the send itself, whose result and
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
    route: Route,
    prepare: F,
) -> Response
where
    T: DeserializeOwned + utoipa::PartialSchema + FixedMembers + Send + 'static,
    F: FnOnce(T) -> Result<R, ApiError> + Send + 'static,
    R: Into<SendPlan> + 'static,
{
    if let Err(e) = principal.require(Scope::MessagesWrite) {
        return e.into_response();
    }
    let (work_state, work_principal, work_body) = (state.clone(), principal.clone(), body.clone());
    idempotency::run_send(
        &state,
        &principal,
        &headers,
        route == Route::V1,
        path,
        &body,
        move |claim| {
            perform::<T, F, R>(work_state, work_principal, work_body, route, claim, prepare)
        },
    )
    .await
}

/// The idempotency completion of a send (the claim keeps the record), when the request holds
/// a claim; the request's id is captured here, in its own task.
pub(crate) fn send_completion(token: Option<ClaimToken>) -> Option<SendCompletion> {
    token.map(|token| SendCompletion {
        claim: token.into(),
        request_id: request_id::current(),
    })
}

/// Marks a response of work that claimed its key itself, for the idempotency layer to settle.
fn claim_taken(mut response: Response, token: ClaimToken) -> Response {
    response.extensions_mut().insert(ClaimTaken(token));
    response
}

/// Shapes a plain send's outcome ([`send_outcome`] with the send response).
pub(crate) fn plain_outcome(
    result: Result<RecordedOutbound, SendError>,
    recorded: bool,
) -> Response {
    send_outcome(result, recorded, |r| created_body(r, None))
}

/// Runs a plain (not catalog) send and shapes its response for the idempotency layer. Shared by
/// the v1 and legacy send paths.
async fn run_plain_send(state: &AppState, input: SendInput, claim: Option<SendClaim>) -> Response {
    let token = match claim {
        None => None,
        Some(SendClaim::Held(token)) => Some(token),
        Some(SendClaim::Deferred(deferred)) => {
            return run_deferred_send(state, input, deferred).await;
        }
    };
    let completion = send_completion(token);
    let recorded = completion.is_some();
    plain_outcome(
        crate::ops::sending::send(&send_context(state), input, completion).await,
        recorded,
    )
}

/// A plain send whose key was free when the request came: a send that reaches nothing outside
/// the process (the sandbox) writes its key with its record, one write where a claim and its
/// completion were two; any other claims the key after its checks and before its provider call.
/// A record that finds the key taken meanwhile wrote nothing: the key is then claimed as usual
/// (a replay, a conflict, or the send recorded under the claim).
async fn run_deferred_send(state: &AppState, input: SendInput, deferred: Deferred) -> Response {
    let ctx = send_context(state);
    let prepared = match prepare(&ctx, input).await {
        Ok(prepared) => prepared,
        Err(e) => return plain_outcome(Err(e), false),
    };
    if !prepared.calls_out() {
        let completion = SendCompletion {
            claim: ClaimRef::New(deferred.new_key()),
            request_id: request_id::current(),
        };
        match send_prepared(&ctx, &prepared, Some(completion)).await {
            Err(SendError::LostClaim) => {}
            result => return plain_outcome(result, true),
        }
    }
    let token = match deferred.claim().await {
        Ok(token) => token,
        Err(answer) => return answer,
    };
    let result = send_prepared(&ctx, &prepared, send_completion(Some(token))).await;
    claim_taken(plain_outcome(result, true), token)
}

/// Runs a catalog send and shapes its response (marked recorded when the idempotency claim was
/// completed in the send's transaction).
async fn run_catalog_send(
    state: AppState,
    principal: Principal,
    addressing: Addressing,
    plan: CatalogPlan,
    token: Option<ClaimToken>,
) -> Response {
    let input = CatalogSendInput {
        mode: plan.mode,
        org_id: principal.org_id,
        api_key_id: principal.key_id,
        api_key_prefix: principal.key_prefix.clone(),
        key_default_channel: principal.default_channel_id,
        channel_id: addressing.channel_id,
        channel_slug: addressing.channel_slug,
        contact_uuid: addressing.contact_uuid,
        phone: addressing.phone,
        first_name: plan.first_name,
        request: plan.request,
        rules: state.config.consent_rules(),
        reply_to: addressing.reply_to,
    };
    let completion = send_completion(token);
    let recorded = completion.is_some();
    let result = send_catalog(&send_context(&state), input, completion).await;
    send_outcome(result, recorded, |sent| {
        created_body(&sent.recorded, Some(&sent.extra.shown()))
    })
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
/// body, a provider rejection's stored 422, `idempotency_in_progress` when the claim was lost,
/// every other error as [`send_error`] gives it. `recorded`: the idempotency claim was completed
/// in the send's own transaction.
pub(crate) fn send_outcome<T>(
    result: Result<T, SendError>,
    recorded: bool,
    created: impl FnOnce(&T) -> Vec<u8>,
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
        Err(SendError::ProviderRejected { recorded: r, .. }) => {
            // As the claim keeps it (the rejection is the failed message's error).
            let (status, body) = send_answer(&RecordedSend {
                status: StatusCode::UNPROCESSABLE_ENTITY.as_u16(),
                request_id: request_id::current(),
                extra: None,
                recorded: *r,
            });
            mark(idempotency::json_response(status, body))
        }
        Err(SendError::LostClaim) => {
            let mut r = ApiError::idempotency_in_progress().into_response();
            r.extensions_mut().insert(ClaimLost);
            r
        }
        Err(e) => send_error(e).into_response(),
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
        (status = 422, description = "validation_failed (also reply_to: not a message of the recipient's, or a reaction), channel_conflict, invalid_channel, no_default_channel, unsupported_for_channel (details.channel_type: the channel's type cannot send this kind), conversation_required, outside_service_window, provider_rejected.", body = ErrorBody),
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
        Route::V1,
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
        (status = 422, description = "validation_failed, channel errors, unsupported_for_channel (details.channel_type), conversation_required, outside_service_window, invalid_media (whatsapp_cloud media: details.reason too_large, unsupported_type or unreachable; nothing sent or recorded), provider_rejected.", body = ErrorBody),
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
        Route::V1,
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
        (status = 422, description = "validation_failed (details.fields: phone, first_name, template.*, contact_uuid, ...), channel_conflict, no_default_channel (plain and campaign sends), invalid_channel (details.reason: channel_id_required, not_found, inactive, not_template_capable, cannot_send, not_configured), unsupported_for_channel (plain template sends on a channel type without templates; details.channel_type), invalid_template (details.reason: template_uuid_required, not_found, wrong_channel, inactive, not_approved, mismatch, parameters_mismatch; details.fields), consent_required (details.fields under consent.*: missing, not confirmed, unknown purpose or source, blank reference, captured_at malformed or in the future, purpose not matching the template's category), provider_rejected. Nothing is written, except the campaign_send.refused audit entry of a refused campaign send.", body = ErrorBody),
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
        Route::V1,
        template_request,
    )
    .await
}
