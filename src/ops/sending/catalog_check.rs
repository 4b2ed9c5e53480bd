//! The rules of a catalog template send (conversation initiation and campaign recipients),
//! checked without writing anything.

use serde_json::{Value, json};
use uuid::Uuid;

use switchboard_domain::FieldError;
use switchboard_domain::Timestamp;
use switchboard_domain::channel::Channel;
use switchboard_domain::message::{Content, Template};
use switchboard_domain::template::{
    Consent, ConsentRules, RequestTemplate, TemplateStatus, fit_parameters, parse_consent,
    parse_definition, purpose_allows, same_language,
};
use switchboard_store::{Store, TemplateRecord};

use super::{Refusal, SendError};

/// What a catalog send says about its template and consent, as given.
#[derive(Clone, Debug, Default)]
pub struct CatalogRequest {
    /// `template_uuid` as given.
    pub template_uuid: Option<String>,
    /// The `template` object (name, language, components), already checked for shape.
    pub template: Option<RequestTemplate>,
    /// `consent` as given.
    pub consent: Option<Value>,
}

/// A catalog send that passed validation: the catalog template, the consent and the content
/// to send (the catalog's name and language, the request's components).
#[derive(Clone, Debug)]
pub struct ValidatedCatalogSend {
    pub template: TemplateRecord,
    pub consent: Consent,
    pub content: Content,
}

/// Checks a catalog template send on a chosen channel, without writing anything: the one rule
/// set of conversation initiation and of every campaign recipient message.
///
/// 1. The channel must be active and template-capable (`invalid_channel`).
/// 2. `template_uuid` must name a template of the organization (`invalid_template`, reason
///    `template_uuid_required` or `not_found`, also for another organization's template),
///    owned by this channel (`wrong_channel`), active (`inactive`) and approved
///    (`not_approved`); `template.name` / `template.language`, when given, must agree with it
///    (`mismatch`); the parameters of `template.components` must fit its component
///    definitions (`parameters_mismatch`, with `fields`).
/// 3. `consent` must be valid ([`parse_consent`]) and its purpose must allow the template's
///    category (`consent_required`, with `fields`).
pub async fn validate_catalog_send(
    store: &dyn Store,
    org_id: i64,
    channel: &Channel,
    request: &CatalogRequest,
    now: Timestamp,
    rules: &ConsentRules,
) -> Result<ValidatedCatalogSend, SendError> {
    check_channel(channel)?;
    let raw_uuid = request.template_uuid.as_deref().map(str::trim);
    let Some(raw_uuid) = raw_uuid else {
        return Err(Refusal::template(
            "template_uuid_required",
            "template_uuid is required: the catalog template to send.".into(),
            vec![FieldError::new("template_uuid", "is required")],
            json!({}),
        )
        .into());
    };
    let not_found = || {
        Refusal::template(
            "not_found",
            "template_uuid names no template of this organization.".into(),
            vec![FieldError::new(
                "template_uuid",
                "names no template of this organization",
            )],
            json!({}),
        )
    };
    let uuid = match Uuid::parse_str(raw_uuid) {
        Ok(u) if raw_uuid.len() <= 64 => u,
        _ => {
            return Err(Refusal::template(
                "not_found",
                "template_uuid must be a template's UUID.".into(),
                vec![FieldError::new("template_uuid", "must be a UUID")],
                json!({}),
            )
            .into());
        }
    };
    let template = store
        .find_template(org_id, uuid)
        .await?
        .ok_or_else(not_found)?;
    check_template(&template, channel)?;
    let given = request.template.clone().unwrap_or_default();
    check_given(&template, &given)?;

    let consent = parse_consent(request.consent.as_ref(), now, rules)
        .map_err(|e| Refusal::consent(e, json!({ "template_category": template.category })))?;
    if !purpose_allows(consent.purpose, template.category) {
        return Err(Refusal::consent(
            FieldError::new(
                "consent.purpose",
                format!(
                    "is {} but the template's category is {}: the purpose must match the category (a {} template needs {} consent)",
                    consent.purpose, template.category, template.category, template.category
                ),
            )
            .into(),
            json!({ "template_category": template.category }),
        )
        .into());
    }
    let content = Content::Template(Template {
        name: template.name.clone(),
        language: template.language.clone(),
        components: given.components,
    });
    Ok(ValidatedCatalogSend {
        template,
        consent,
        content,
    })
}

/// The channel of a catalog send: active and template-capable (`invalid_channel`).
fn check_channel(channel: &Channel) -> Result<(), SendError> {
    if !channel.is_active() {
        return Err(Refusal::channel(
            "inactive",
            vec![channel.id],
            "channel_id",
            format!("Channel {} is inactive.", channel.id),
        )
        .into());
    }
    if !channel.channel_type.is_template_capable() {
        return Err(Refusal::channel(
            "not_template_capable",
            vec![channel.id],
            "channel_id",
            format!(
                "Channel {} is a {} channel; catalog templates, consent and conversation initiation need a whatsapp_cloud channel.",
                channel.id, channel.channel_type
            ),
        )
        .into());
    }
    Ok(())
}

/// The catalog template: the channel's own, active and approved (`invalid_template`).
fn check_template(template: &TemplateRecord, channel: &Channel) -> Result<(), SendError> {
    let about = json!({ "template_uuid": template.uuid });
    if template.channel_id != channel.id {
        return Err(Refusal::template(
            "wrong_channel",
            format!(
                "The template belongs to channel {}, not to channel {}.",
                template.channel_id, channel.id
            ),
            vec![FieldError::new(
                "template_uuid",
                format!("belongs to channel {}", template.channel_id),
            )],
            json!({ "template_uuid": template.uuid, "template_channel_id": template.channel_id }),
        )
        .into());
    }
    if !template.active {
        return Err(Refusal::template(
            "inactive",
            "The template is inactive.".into(),
            vec![FieldError::new(
                "template_uuid",
                "names an inactive template",
            )],
            about,
        )
        .into());
    }
    if template.status != TemplateStatus::Approved {
        return Err(Refusal::template(
            "not_approved",
            format!(
                "The template is {}; only approved templates can be sent.",
                template.status
            ),
            vec![FieldError::new(
                "template_uuid",
                format!("names a template that is {}, not approved", template.status),
            )],
            json!({ "template_uuid": template.uuid, "status": template.status }),
        )
        .into());
    }
    Ok(())
}

/// What the request gives of the template: its name and language agree with the catalog's
/// (`mismatch`), its parameters fit the definition (`parameters_mismatch`).
fn check_given(template: &TemplateRecord, given: &RequestTemplate) -> Result<(), SendError> {
    let mut mismatch = Vec::new();
    if let Some(name) = &given.name {
        if *name != template.name {
            mismatch.push(FieldError::new(
                "template.name",
                format!(
                    "does not match the catalog template's name `{}`",
                    template.name
                ),
            ));
        }
    }
    if let Some(language) = &given.language {
        if !same_language(language, &template.language) {
            mismatch.push(FieldError::new(
                "template.language",
                format!(
                    "does not match the catalog template's language `{}`",
                    template.language
                ),
            ));
        }
    }
    if !mismatch.is_empty() {
        return Err(Refusal::template(
            "mismatch",
            "template.name and template.language must agree with the catalog template.".into(),
            mismatch,
            json!({ "template_uuid": template.uuid, "template_name": template.name, "template_language": template.language }),
        )
        .into());
    }
    if let Some(def) = parse_definition(&template.components, "components")
        .ok()
        .flatten()
    {
        let errors = fit_parameters(&def, &given.components);
        if !errors.is_empty() {
            return Err(Refusal::template(
                "parameters_mismatch",
                match errors.0.as_slice() {
                    [one] => format!(
                        "The parameters do not fit the template: {}: {}",
                        one.field, one.issue
                    ),
                    many => format!(
                        "The parameters do not fit the template: {} problems.",
                        many.len()
                    ),
                },
                errors.0,
                json!({
                    "template_uuid": template.uuid,
                    "body_parameters": def.body_parameters,
                    "header_parameters": def.header_parameters(),
                    "button_parameters": def.button_parameters(),
                }),
            )
            .into());
        }
    }
    Ok(())
}
