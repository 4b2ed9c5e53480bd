//! Catalog template sends on `POST /api/v1/integrations/messages/template`: conversation
//! initiation (`ensure_conversation: true`) and synchronized campaign recipients (a plain
//! template send that carries `template_uuid` and `consent`). The rules are in
//! `ops::sending::catalog`; this module checks the body's shape and shapes the response, inside the
//! same scope, idempotency and rate-limit frame as every send (`messages::send_frame`).

use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::ops::sending::{
    CatalogCompletion, CatalogExtra, CatalogMode, CatalogRequest, CatalogSendInput, send_catalog,
};
use crate::providers::ProviderError;
use crate::views::templates::{ConsentOut, TemplateOut};
use switchboard_domain::ValidationErrors;
use switchboard_domain::contact::validate_contact_name;
use switchboard_domain::template::parse_request_template;
use switchboard_store::{ClaimToken, RecordedOutbound, StoredResponse};

use super::auth::Principal;
use super::error::ApiError;
use super::messages::{
    Addressing, SendPlan, SendResponse, SendTemplateRequest, addressing, send_context, send_error,
    send_outcome, stored_response,
};
use super::state::AppState;

/// A catalog send, checked for shape.
pub struct CatalogPlan {
    pub mode: CatalogMode,
    pub request: CatalogRequest,
    pub first_name: Option<String>,
}

/// The opt-in evidence of a catalog template send (documentation of the `consent` object).
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
pub struct ConsentInput {
    /// Must be `true`.
    confirmed: bool,
    /// `utility`, `marketing` or `authentication`; must match the template's category.
    purpose: String,
    /// `customer_request`, `website_form`, `checkout`, `in_person`, `phone_call` or `import`.
    source: String,
    /// Where the opt-in can be found (a form submission id, an order number, ...): 1 to 256
    /// characters.
    reference: String,
    /// When the opt-in was captured: RFC 3339, not in the future (an operator may allow some
    /// clock skew with `SWITCHBOARD_CONSENT_CLOCK_SKEW`; none by default).
    #[schema(value_type = String, format = DateTime)]
    captured_at: String,
}

/// The body of a successful catalog send: the send response plus the consent evidence stored
/// and the catalog template used.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CatalogSendResponse {
    #[serde(flatten)]
    pub send: SendResponse,
    pub consent: ConsentOut,
    pub template: TemplateOut,
}

/// Checks the shape of a catalog send: the addressing, `phone` (required for an initiation
/// unless `contact_uuid` is given), `first_name`, and the `template` object (optional: the
/// catalog template gives name and language). Field problems are one 422
/// `validation_failed`; the catalogue and consent rules come later.
pub fn catalog_request(r: SendTemplateRequest) -> Result<SendPlan, ApiError> {
    let mode = if r.ensure_conversation == Some(true) {
        CatalogMode::Initiation
    } else {
        CatalogMode::Campaign
    };
    let mut errors = ValidationErrors::new();
    let addressing: Addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
    );
    if r.phone.is_none() && r.contact_uuid.is_none() {
        errors.add(
            "phone",
            match mode {
                CatalogMode::Initiation => {
                    "is required: the number to start the conversation with, e.g. +4915123456789"
                }
                CatalogMode::Campaign => {
                    "is required (or give contact_uuid): the recipient, e.g. +4915123456789"
                }
            },
        );
    }
    let first_name = r.first_name.as_deref().and_then(|n| {
        validate_contact_name(n)
            .map_err(|e| errors.add("first_name", e))
            .ok()
    });
    let template = match parse_request_template(r.template.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok(SendPlan::Catalog(
        addressing,
        CatalogPlan {
            mode,
            request: CatalogRequest {
                template_uuid: r.template_uuid,
                template,
                consent: r.consent,
            },
            first_name,
        },
    ))
}

/// The stored (and live) response of a recorded catalog send: 201 with the send response, the
/// consent and the template, or the 422 of a provider rejection.
fn catalog_response(
    recorded: &RecordedOutbound,
    extra: &CatalogExtra,
    rejection: Option<&ProviderError>,
) -> StoredResponse {
    match rejection {
        Some(_) => stored_response(recorded, rejection),
        None => StoredResponse {
            status: 201,
            body: serde_json::to_vec(&CatalogSendResponse {
                send: SendResponse::from(recorded),
                consent: ConsentOut::new(extra.consent_uuid, &extra.consent, extra.recorded_at),
                template: TemplateOut::from(&extra.template),
            })
            .expect("responses serialize"),
        },
    }
}

/// Runs a catalog send and shapes its response (marked recorded when the idempotency claim was
/// completed in the send's transaction).
pub async fn perform(
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
    };
    let completion = token.map(|token| CatalogCompletion {
        token,
        respond: Box::new(catalog_response),
    });
    let recorded = completion.is_some();
    let result = send_catalog(&send_context(&state), input, completion).await;
    send_outcome(
        result,
        recorded,
        |sent| catalog_response(&sent.recorded, &sent.extra, None).body,
        |e| send_error(e).into_response(),
    )
}
