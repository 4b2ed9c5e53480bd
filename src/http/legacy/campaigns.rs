//! Legacy campaigns: `POST /api/campaigns` and `GET /api/campaigns/{id}` (`campaigns:write`).
//!
//! A campaign sends one catalog template to a group or a list of contacts. The request is
//! checked at once (channel, template and parameters with the rules of every campaign send,
//! recipients, consent evidence for each recipient); then the campaign and one pending row per
//! recipient are created in one transaction with `campaign.scheduled` and `campaign.started`,
//! and the answer is 202. The campaign worker (`ops::campaigns`) sends each recipient through
//! the campaign-mode catalog send (`ops::sending::send_catalog`: the same validation, audit
//! entries and events as `POST /messages/template` with `template_uuid` and `consent`), and
//! emits `campaign.completed` (at least one sent) or `campaign.failed` (none) at the end.

use std::collections::HashMap;

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::http::messages::send_error;
use crate::ops::campaigns;
use crate::ops::sending::{CatalogRequest, validate_catalog_send};
use crate::views::campaigns::{CampaignOut, RecipientOut};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::scope::Scope;
use switchboard_domain::template::{
    ConsentRules, RequestTemplate, TemplateCategory, parse_consent, parse_request_template,
    purpose_allows,
};
use switchboard_domain::{FieldError, ValidationErrors};
use switchboard_store::legacy::{
    CampaignCounts, CampaignStatus, NewCampaign, PageQuery, RecipientStatus,
};

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::json::LenientJsonBody;
use super::super::state::AppState;
use super::groups::{contact_uuids, unknown_contacts};
use super::path_uuid;

/// The most recipients one campaign has.
pub const MAX_RECIPIENTS: usize = 10_000;
/// The most recipients `GET /api/campaigns/{id}` lists.
pub const RECIPIENTS_SHOWN: i64 = 1000;

/// Start a campaign.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CampaignRequest {
    /// 1 to 200 characters.
    pub name: Option<String>,
    /// The channel (an active `whatsapp_cloud` channel of the organization).
    pub channel_id: Option<i64>,
    /// The catalog template to send (approved, active, of this channel).
    pub template_uuid: Option<String>,
    /// `{name?, language?, components?}`: name and language must agree with the catalog
    /// template; `components` carry the parameters (the same for every recipient).
    pub template: Option<Value>,
    /// The recipients: a group's members (its UUID) ...
    pub group_id: Option<String>,
    /// ... or a list of contact UUIDs (1 to 10000). Exactly one of the two.
    pub contact_uuids: Option<Vec<String>>,
    /// The consent evidence applied to every recipient without an entry in `consents`.
    #[schema(value_type = Option<crate::http::messages::ConsentInput>)]
    pub consent: Option<Value>,
    /// Consent evidence per recipient: contact UUID -> consent object (wins over `consent`).
    #[schema(value_type = Option<Object>)]
    pub consents: Option<Map<String, Value>>,
}

/// Start a campaign: checked now, sent in the background (202).
#[utoipa::path(
    post,
    path = "/api/campaigns",
    tag = "legacy",
    request_body = CampaignRequest,
    security(("bearer" = ["campaigns:write"])),
    responses(
        (status = 202, description = "Accepted: the campaign and its pending recipients are stored; follow progress with GET /api/campaigns/{id}.", body = CampaignOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 422, description = "validation_failed (name, channel_id, template.*, group_id, contact_uuids, consents keys; no recipients; too many), invalid_channel (unknown, inactive or not template-capable channel), invalid_template (as on POST /messages/template), consent_required (details.fields: consent.* or consents.<contact_uuid>.*: missing, malformed, or purpose not matching the template's category).", body = ErrorBody),
    )
)]
pub async fn create_campaign(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<LenientJsonBody<CampaignRequest>, ApiError>,
) -> ApiResult<(StatusCode, Json<CampaignOut>)> {
    principal.require(Scope::CampaignsWrite)?;
    let LenientJsonBody(body) = body?;
    let Shape {
        name,
        channel_id,
        template,
        per_contact,
    } = shape(&body)?;
    let org_id = principal.org_id;
    let now = state.clock.now();

    // The channel and the template, with the rules of every campaign send.
    let channels = state.store.list_channels(org_id).await?;
    let Some(channel) = channels.iter().find(|c| c.id == channel_id) else {
        return Err(ApiError::unprocessable(
            "invalid_channel",
            "The channel does not exist in this organization.",
        )
        .with_details(json!({
            "reason": "not_found",
            "channel_ids": [],
            "fields": [FieldError::new("channel_id", "names no channel of this organization")],
        })));
    };

    // The recipients.
    let (group_uuid, contacts) = recipients(&state, org_id, &body).await?;
    let stray: Vec<&Uuid> = per_contact
        .keys()
        .filter(|u| !contacts.iter().any(|c| c.uuid == **u))
        .collect();
    if !stray.is_empty() {
        return Err(ApiError::validation(ValidationErrors(
            stray
                .into_iter()
                .map(|u| {
                    FieldError::new(
                        format!("consents.{u}"),
                        "is not a recipient of this campaign",
                    )
                })
                .collect(),
        )));
    }

    // Consent evidence per recipient.
    let consent_of = |uuid: &Uuid| per_contact.get(uuid).or(body.consent.as_ref());
    let first = consent_of(&contacts[0].uuid).cloned();
    let request = CatalogRequest {
        template_uuid: body.template_uuid.clone(),
        template: template.clone(),
        consent: first,
    };
    let rules = state.config.consent_rules();
    // The channel and template rules; consent is checked below, per recipient (so that its
    // problems name the recipient's entry).
    let category =
        match validate_catalog_send(state.store.as_ref(), org_id, channel, &request, now, &rules)
            .await
        {
            Ok(checked) => checked.template.category,
            Err(e) if e.code() == "consent_required" => {
                // Template checks passed (consent comes last): read its category.
                let uuid = body
                    .template_uuid
                    .as_deref()
                    .and_then(|u| Uuid::parse_str(u.trim()).ok());
                let template = match uuid {
                    Some(u) => state.store.find_template(org_id, u).await?,
                    None => None,
                };
                match template {
                    Some(t) => t.category,
                    None => return Err(send_error(e)),
                }
            }
            Err(e) => return Err(send_error(e)),
        };
    let recipients = recipient_consents(
        &contacts,
        &per_contact,
        body.consent.as_ref(),
        category,
        now,
        &rules,
    )?;

    let new = NewCampaign {
        uuid: Uuid::now_v7(),
        org_id,
        api_key_id: principal.key_id,
        api_key_prefix: principal.key_prefix.clone(),
        name,
        channel_id,
        group_uuid,
        request: json!({
            "template_uuid": body.template_uuid.as_deref().map(str::trim),
            "template": body.template.clone().unwrap_or(Value::Null),
        }),
        recipients,
        now,
    };
    let campaign = campaigns::create_campaign(state.store.as_ref(), new).await?;
    Ok((StatusCode::ACCEPTED, Json(CampaignOut::from(&campaign))))
}

/// A campaign body checked for shape.
struct Shape {
    name: String,
    channel_id: i64,
    template: Option<RequestTemplate>,
    /// Consent evidence by recipient.
    per_contact: HashMap<Uuid, Value>,
}

/// A campaign body checked for shape: its name, channel, template and per-recipient consents
/// (keys are contact UUIDs); every problem at once, as one 422 `validation_failed`.
fn shape(body: &CampaignRequest) -> ApiResult<Shape> {
    let mut errors = ValidationErrors::new();
    let name = match body.name.as_deref().map(str::trim) {
        Some(n) if !n.is_empty() && n.chars().count() <= 200 && !n.contains(char::is_control) => {
            Some(n.to_owned())
        }
        Some(_) => {
            errors.add("name", "must be 1 to 200 characters");
            None
        }
        None => {
            errors.add("name", "is required");
            None
        }
    };
    if body.channel_id.is_none() {
        errors.add("channel_id", "is required");
    }
    let template = match parse_request_template(body.template.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    };
    match (&body.group_id, &body.contact_uuids) {
        (Some(_), Some(_)) => errors.add("group_id", "give group_id or contact_uuids, not both"),
        (None, None) => errors.add(
            "contact_uuids",
            "the recipients are required: give group_id or contact_uuids",
        ),
        _ => {}
    }
    let mut per_contact: HashMap<Uuid, Value> = HashMap::new();
    for (k, v) in body.consents.iter().flatten() {
        match Uuid::parse_str(k) {
            Ok(u) if k.len() <= 64 => {
                per_contact.insert(u, v.clone());
            }
            _ => errors.add(format!("consents.{k}"), "keys must be contact UUIDs"),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok(Shape {
        name: name.expect("checked"),
        channel_id: body.channel_id.expect("checked"),
        template,
        per_contact,
    })
}

/// A campaign's recipients: the group's members, or the contacts named (in the order given);
/// 1 to `MAX_RECIPIENTS` of them.
async fn recipients(
    state: &AppState,
    org_id: i64,
    body: &CampaignRequest,
) -> ApiResult<(Option<Uuid>, Vec<Contact>)> {
    let (group_uuid, contacts) = if let Some(raw) = &body.group_id {
        let group = match Uuid::parse_str(raw.trim()) {
            Ok(u) => state.store.find_group(org_id, u).await?,
            Err(_) => None,
        }
        .ok_or_else(|| {
            ApiError::validation_field("group_id", "names no group of this organization")
        })?;
        let members = state
            .store
            .list_group_members(
                group.id,
                PageQuery {
                    after: None,
                    limit: MAX_RECIPIENTS as i64 + 1,
                },
            )
            .await?;
        (
            Some(group.uuid),
            members.into_iter().map(|m| m.contact).collect::<Vec<_>>(),
        )
    } else {
        let uuids = contact_uuids_bounded(body.contact_uuids.as_deref())?;
        let found = state.store.resolve_contacts(org_id, &uuids).await?;
        let unknown: Vec<Uuid> = uuids
            .iter()
            .filter(|u| !found.iter().any(|c| c.uuid == **u))
            .copied()
            .collect();
        if !unknown.is_empty() {
            return Err(unknown_contacts("contact_uuids", &unknown));
        }
        // In the order given.
        let mut ordered = found;
        ordered.sort_by_key(|c| uuids.iter().position(|u| *u == c.uuid));
        (None, ordered)
    };
    if contacts.is_empty() {
        return Err(ApiError::validation_field(
            if group_uuid.is_some() {
                "group_id"
            } else {
                "contact_uuids"
            },
            "the campaign has no recipients",
        ));
    }
    if contacts.len() > MAX_RECIPIENTS {
        return Err(ApiError::validation_field(
            "group_id",
            format!("a campaign has at most {MAX_RECIPIENTS} recipients"),
        ));
    }
    Ok((group_uuid, contacts))
}

/// Each recipient's consent evidence (its own in `consents`, else `consent`), checked, and
/// its purpose allowed by the template's category: `(contact id, evidence)` per recipient, or
/// a 422 `consent_required` naming every broken entry (at most 50).
fn recipient_consents(
    contacts: &[Contact],
    per_contact: &HashMap<Uuid, Value>,
    consent: Option<&Value>,
    category: TemplateCategory,
    now: Timestamp,
    rules: &ConsentRules,
) -> ApiResult<Vec<(i64, Value)>> {
    let mut consent_errors = ValidationErrors::new();
    let mut recipients = Vec::with_capacity(contacts.len());
    for c in contacts {
        let (field, value) = match per_contact.get(&c.uuid) {
            Some(v) => (format!("consents.{}", c.uuid), Some(v)),
            None => ("consent".to_owned(), consent),
        };
        match parse_consent(value, now, rules) {
            Ok(parsed) if purpose_allows(parsed.purpose, category) => {
                recipients.push((c.id, value.cloned().unwrap_or(Value::Null)));
            }
            Ok(parsed) => consent_errors.add(
                format!("{field}.purpose"),
                format!(
                    "is {} but the template's category is {}",
                    parsed.purpose, category
                ),
            ),
            Err(e) => {
                for fe in e.0 {
                    let sub = fe
                        .field
                        .strip_prefix("consent")
                        .unwrap_or(&fe.field)
                        .to_owned();
                    let name = format!("{field}{sub}");
                    if !consent_errors.0.iter().any(|x| x.field == name) {
                        consent_errors.add(name, fe.issue);
                    }
                }
            }
        }
        if consent_errors.0.len() >= 50 {
            break;
        }
    }
    if !consent_errors.is_empty() {
        return Err(ApiError::unprocessable(
            "consent_required",
            "Consent evidence is required for every recipient and must be valid.",
        )
        .with_details(json!({ "fields": consent_errors.0, "template_category": category })));
    }
    Ok(recipients)
}

fn contact_uuids_bounded(list: Option<&[String]>) -> ApiResult<Vec<Uuid>> {
    if list.is_some_and(|l| l.len() > MAX_RECIPIENTS) {
        return Err(ApiError::validation_field(
            "contact_uuids",
            format!("must list 1 to {MAX_RECIPIENTS} contact UUIDs"),
        ));
    }
    if list.is_some_and(|l| l.len() > super::groups::MAX_CONTACTS_PER_CHANGE) {
        // Longer than a membership change allows: check each here.
        let mut errors = ValidationErrors::new();
        let mut out = Vec::new();
        for (i, raw) in list.unwrap_or_default().iter().enumerate() {
            match Uuid::parse_str(raw.trim()) {
                Ok(u) if raw.len() <= 64 => {
                    if !out.contains(&u) {
                        out.push(u)
                    }
                }
                _ => errors.add(format!("contact_uuids[{i}]"), "must be a UUID"),
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::validation(errors));
        }
        return Ok(out);
    }
    contact_uuids(list, "contact_uuids")
}

/// A campaign with its progress and its first 1000 recipients.
#[utoipa::path(
    get,
    path = "/api/campaigns/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The campaign's UUID.")),
    security(("bearer" = ["campaigns:write"])),
    responses(
        (status = 200, description = "The campaign, its counts per recipient state and its recipients.", body = CampaignOut),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn get_campaign(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<CampaignOut>> {
    principal.require(Scope::CampaignsWrite)?;
    let uuid = path_uuid(&id, "The campaign")?;
    let campaign = state
        .store
        .find_campaign(principal.org_id, uuid)
        .await?
        .ok_or_else(|| ApiError::not_found("The campaign"))?;
    let recipients = state
        .store
        .list_campaign_recipients(campaign.id, RECIPIENTS_SHOWN)
        .await?;
    let mut out = CampaignOut::from(&campaign);
    out.recipients = Some(recipients.iter().map(RecipientOut::from).collect());
    Ok(Json(out))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/campaigns", post(create_campaign))
        .route("/api/campaigns/{id}", get(get_campaign))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(create_campaign, get_campaign),
    components(schemas(
        CampaignRequest,
        CampaignOut,
        RecipientOut,
        CampaignCounts,
        CampaignStatus,
        RecipientStatus
    ))
)]
pub struct CampaignsApi;
