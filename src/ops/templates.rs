//! The template catalogue (admin tools, provider status callbacks) and catalog template sends:
//! conversation initiation (specification 4.3.1–4.3.5) and synchronized campaign recipients
//! (4.3.6), with their consent evidence and audit entries.
//!
//! Organization log entries written here:
//! * `template.created`, `template.updated` (admin, by the admin tools),
//!   `template.status_changed` (admin, by the system on a provider callback);
//! * `conversation.initiated` (audit, actor the API key): who initiated which conversation,
//!   with which template, under which consent;
//! * `campaign_send.validated` (audit, with the recorded message) and `campaign_send.refused`
//!   (audit, in a transaction of its own, with the refusal code).
//!
//! Every `audit` entry also goes to webhooks as `audit.recorded` (the store does that).

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::providers::{ParsedTemplateStatus, ProviderError};
use crate::views::templates::{ConsentOut, TemplateOut};
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::channel_selection::{ChannelRequest, SelectionError, select_channel};
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};
use switchboard_domain::message::{Content, MessageType, Template};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::{
    Consent, ConsentRules, RequestTemplate, TemplateCategory, TemplateStatus, fit_parameters,
    parse_consent, parse_definition, purpose_allows, same_language, validate_language,
    validate_name, validate_provider_id,
};
use switchboard_domain::{FieldError, Timestamp, ValidationErrors};
use switchboard_store::{
    ClaimToken, ConsentContext, ConversationPolicy, IdempotencyCompletion, NewConsent, NewOutbound,
    NewTemplate, ProviderTemplateStatus, RecipientRef, RecordedOutbound, Store, StoreError,
    StoredResponse, TemplateChange, TemplatePatch, TemplateRecord,
};

use super::messages::{
    SendContext, SendError, classify_outcome, find_recipient, provider_for, recipient_contact,
    recorded_effects,
};
use super::{OpError, OpResult};

/// Organization log types written here.
pub mod log_types {
    pub const TEMPLATE_CREATED: &str = "template.created";
    pub const TEMPLATE_UPDATED: &str = "template.updated";
    pub const TEMPLATE_STATUS_CHANGED: &str = "template.status_changed";
    pub const CONVERSATION_INITIATED: &str = "conversation.initiated";
    pub const CAMPAIGN_SEND_VALIDATED: &str = "campaign_send.validated";
    pub const CAMPAIGN_SEND_REFUSED: &str = "campaign_send.refused";
}

fn template_summary(t: &TemplateRecord) -> Value {
    json!({
        "uuid": t.uuid,
        "name": t.name,
        "language": t.language,
        "category": t.category,
    })
}

// ---------------------------------------------------------------------------------------------
// Admin tools

pub struct CreateTemplate {
    pub channel_id: i64,
    pub name: String,
    pub language: String,
    pub category: String,
    /// Default `approved`: the catalogue mirrors templates the provider approved.
    pub status: Option<String>,
    pub active: bool,
    pub components: Option<Value>,
    pub provider_template_id: Option<String>,
}

#[derive(Default)]
pub struct UpdateTemplate {
    pub category: Option<String>,
    pub status: Option<String>,
    pub active: Option<bool>,
    pub components: Option<Value>,
    pub provider_template_id: Option<String>,
}

/// A category or status flag, in any case (`utility`, `UTILITY`).
fn parse_flag<T: std::str::FromStr<Err = String>>(flag: &str, v: &str) -> OpResult<T> {
    v.trim()
        .to_ascii_lowercase()
        .parse::<T>()
        .map_err(|e| OpError::Invalid(format!("{flag}: {e}")))
}

/// Checks component definitions; returns them (as an array) with the body parameter count.
fn components_arg(v: Value) -> OpResult<(Value, Option<i64>)> {
    let def = parse_definition(&v, "--components").map_err(|e| {
        let first =
            e.0.first()
                .cloned()
                .unwrap_or_else(|| FieldError::new("--components", "invalid"));
        OpError::Invalid(format!("{}: {}", first.field, first.issue))
    })?;
    let v = if v.is_null() { json!([]) } else { v };
    Ok((v, def.map(|d| d.body_parameters as i64)))
}

fn admin_log(t: &TemplateRecord, event_type: &str, details: Value, actor: &Actor) -> Effects {
    Effects::none().log(OrgEvent::new(
        t.org_id,
        event_type,
        EventCategory::Admin,
        actor.clone(),
        Some(Subject::new("template", t.uuid)),
        details,
        t.updated_at,
    ))
}

fn template_details(t: &TemplateRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("template_uuid".into(), json!(t.uuid));
    m.insert("channel_id".into(), json!(t.channel_id));
    m.insert("name".into(), json!(t.name));
    m.insert("language".into(), json!(t.language));
    m.insert("category".into(), json!(t.category));
    m.insert("status".into(), json!(t.status));
    m.insert("active".into(), json!(t.active));
    m.insert("provider_template_id".into(), json!(t.provider_template_id));
    m
}

/// `admin template create`: a template of a template-capable channel.
pub async fn create_template(
    store: &dyn Store,
    clock: &dyn Clock,
    input: CreateTemplate,
    actor: Actor,
) -> OpResult<TemplateRecord> {
    validate_name(&input.name).map_err(|e| OpError::Invalid(format!("--name: {e}")))?;
    validate_language(&input.language).map_err(|e| OpError::Invalid(format!("--language: {e}")))?;
    let category: TemplateCategory = parse_flag("--category", &input.category)?;
    let status: TemplateStatus = match &input.status {
        Some(s) => parse_flag("--status", s)?,
        None => TemplateStatus::Approved,
    };
    if let Some(p) = &input.provider_template_id {
        validate_provider_id(p)
            .map_err(|e| OpError::Invalid(format!("--provider-template-id: {e}")))?;
    }
    let (components, body_parameters) = components_arg(input.components.unwrap_or(json!([])))?;
    let channel = store
        .get_channel(input.channel_id)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => {
                OpError::NotFound(format!("channel {} does not exist", input.channel_id))
            }
            other => other.into(),
        })?;
    if !channel.channel_type.is_template_capable() {
        return Err(OpError::Invalid(format!(
            "--channel: channel {} is a {} channel; templates belong to whatsapp_cloud channels",
            channel.id, channel.channel_type
        )));
    }
    let (name, language) = (input.name.clone(), input.language.clone());
    let created = store
        .create_template(
            NewTemplate {
                uuid: Uuid::now_v7(),
                org_id: channel.org_id,
                channel_id: channel.id,
                name: input.name,
                language: input.language,
                category,
                status,
                active: input.active,
                components,
                body_parameters,
                provider_template_id: input.provider_template_id,
                now: clock.now(),
            },
            Box::new(move |t| {
                let mut d = template_details(t);
                d.insert("body_parameters".into(), json!(t.body_parameters));
                admin_log(t, log_types::TEMPLATE_CREATED, Value::Object(d), &actor)
            }),
        )
        .await;
    match created {
        Ok(t) => Ok(t),
        Err(StoreError::UniqueViolation(_)) => {
            // Which unique rule: the name and language, or the provider id (the backends do
            // not all name the constraint).
            let taken = store
                .list_channel_templates(channel.id)
                .await?
                .iter()
                .any(|t| t.name == name && t.language == language);
            Err(OpError::Conflict(if taken {
                format!(
                    "channel {} already has a template `{name}` in {language}",
                    channel.id
                )
            } else {
                format!(
                    "--provider-template-id: another template of channel {} has this provider id",
                    channel.id
                )
            }))
        }
        Err(other) => Err(other.into()),
    }
}

/// `admin template update`.
pub async fn update_template(
    store: &dyn Store,
    clock: &dyn Clock,
    uuid: &str,
    input: UpdateTemplate,
    actor: Actor,
) -> OpResult<TemplateRecord> {
    let uuid = Uuid::parse_str(uuid.trim())
        .map_err(|_| OpError::Invalid("UUID: expected a template UUID".into()))?;
    let patch = TemplatePatch {
        category: input
            .category
            .as_deref()
            .map(|c| parse_flag("--category", c))
            .transpose()?,
        status: input
            .status
            .as_deref()
            .map(|s| parse_flag("--status", s))
            .transpose()?,
        active: input.active,
        components: input.components.map(components_arg).transpose()?,
        provider_template_id: match input.provider_template_id {
            Some(p) => {
                validate_provider_id(&p)
                    .map_err(|e| OpError::Invalid(format!("--provider-template-id: {e}")))?;
                Some(p)
            }
            None => None,
        },
    };
    if patch.category.is_none()
        && patch.status.is_none()
        && patch.active.is_none()
        && patch.components.is_none()
        && patch.provider_template_id.is_none()
    {
        return Err(OpError::Invalid(
            "nothing to change: give --status, --active, --inactive, --category, --components or --provider-template-id".into(),
        ));
    }
    let change = store
        .update_template(
            uuid,
            patch,
            clock.now(),
            Box::new(move |c: &TemplateChange| {
                let (b, a) = (&c.before, &c.after);
                let mut changed = Vec::new();
                if b.category != a.category {
                    changed.push("category");
                }
                if b.status != a.status {
                    changed.push("status");
                }
                if b.active != a.active {
                    changed.push("active");
                }
                if b.components != a.components {
                    changed.push("components");
                }
                if b.provider_template_id != a.provider_template_id {
                    changed.push("provider_template_id");
                }
                let mut d = template_details(a);
                d.insert("changed".into(), json!(changed));
                d.insert("previous_status".into(), json!(b.status));
                d.insert("previous_active".into(), json!(b.active));
                d.insert("body_parameters".into(), json!(a.body_parameters));
                admin_log(a, log_types::TEMPLATE_UPDATED, Value::Object(d), &actor)
            }),
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound => OpError::NotFound(format!("template {uuid} does not exist")),
            StoreError::UniqueViolation(_) => OpError::Conflict(
                "--provider-template-id: another template of the channel has this provider id"
                    .into(),
            ),
            other => other.into(),
        })?;
    Ok(change.after)
}

/// `admin template list`.
pub async fn list_templates(store: &dyn Store, channel_id: i64) -> OpResult<Vec<TemplateRecord>> {
    store.get_channel(channel_id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::NotFound(format!("channel {channel_id} does not exist")),
        other => other.into(),
    })?;
    Ok(store.list_channel_templates(channel_id).await?)
}

// ---------------------------------------------------------------------------------------------
// Provider status callbacks

/// What a callback's template status changes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TemplateStatusOutcome {
    /// Templates whose status (or provider id) changed.
    pub applied: usize,
    /// Changes for unknown templates, or that changed nothing.
    pub ignored: usize,
}

/// Applies the template status changes a provider reported for a channel, each in its own
/// transaction with a `template.status_changed` log entry (actor: system).
pub async fn apply_provider_statuses(
    store: &dyn Store,
    clock: &dyn Clock,
    channel: &Channel,
    updates: Vec<ParsedTemplateStatus>,
) -> OpResult<TemplateStatusOutcome> {
    let mut outcome = TemplateStatusOutcome::default();
    if !channel.channel_type.is_template_capable() {
        outcome.ignored = updates.len();
        return Ok(outcome);
    }
    for u in updates {
        let event = u.event.clone();
        let reason = u.reason.clone();
        let changed = store
            .apply_template_status(
                channel.id,
                ProviderTemplateStatus {
                    provider_template_id: u.provider_template_id,
                    name: u.name,
                    language: u.language,
                    status: u.status,
                },
                clock.now(),
                Box::new(move |c: &TemplateChange| {
                    let mut d = template_details(&c.after);
                    d.insert("previous_status".into(), json!(c.before.status));
                    d.insert("provider_event".into(), json!(event));
                    d.insert("reason".into(), json!(reason));
                    admin_log(
                        &c.after,
                        log_types::TEMPLATE_STATUS_CHANGED,
                        Value::Object(d),
                        &Actor::System,
                    )
                }),
            )
            .await?;
        match changed {
            Some(_) => outcome.applied += 1,
            None => outcome.ignored += 1,
        }
    }
    Ok(outcome)
}

// ---------------------------------------------------------------------------------------------
// Validation of a catalog template send

/// Why a catalog send is refused: a 422 with a stable code and details.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// `invalid_channel`, `invalid_template`, `consent_required` or `validation_failed`.
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

impl Refusal {
    fn channel(reason: &str, channel_ids: Vec<i64>, field: &str, message: String) -> Self {
        Refusal {
            code: "invalid_channel",
            details: json!({
                "reason": reason,
                "channel_ids": channel_ids,
                "fields": [FieldError::new(field, message.clone())],
            }),
            message,
        }
    }

    fn template(reason: &str, message: String, fields: Vec<FieldError>, extra: Value) -> Self {
        let mut details = json!({ "reason": reason, "fields": fields });
        if let (Some(d), Value::Object(extra)) = (details.as_object_mut(), extra) {
            d.extend(extra);
        }
        Refusal {
            code: "invalid_template",
            message,
            details,
        }
    }

    fn consent(errors: ValidationErrors, extra: Value) -> Self {
        let message = match errors.0.as_slice() {
            [one] => format!(
                "Consent evidence is required and must be valid: {}: {}",
                one.field, one.issue
            ),
            many => format!(
                "Consent evidence is required and must be valid: {} problems.",
                many.len()
            ),
        };
        let mut details = json!({ "fields": errors.0 });
        if let (Some(d), Value::Object(extra)) = (details.as_object_mut(), extra) {
            d.extend(extra);
        }
        Refusal {
            code: "consent_required",
            message,
            details,
        }
    }

    /// The refusal of a failed send's error, when the error is one (for the campaign audit).
    fn of_send_error(e: &SendError) -> Option<Refusal> {
        match e {
            SendError::Refused(r) => Some(r.clone()),
            SendError::Validation(errors) => Some(Refusal {
                code: "validation_failed",
                message: "The request is invalid.".into(),
                details: json!({ "fields": errors.0 }),
            }),
            SendError::Channel(sel) => Some(Refusal {
                code: match sel {
                    SelectionError::Conflict => "channel_conflict",
                    SelectionError::NoDefault => "no_default_channel",
                    SelectionError::Invalid { .. } => "invalid_channel",
                },
                message: sel.message(),
                details: match sel {
                    SelectionError::Invalid {
                        reason,
                        source,
                        channel_ids,
                    } => {
                        json!({ "reason": reason, "selected_by": source, "channel_ids": channel_ids })
                    }
                    _ => json!({}),
                },
            }),
            SendError::ChannelUnusable {
                channel_id,
                reason,
                message,
            } => Some(Refusal {
                code: "invalid_channel",
                message: message.clone(),
                details: json!({ "reason": reason, "channel_ids": [channel_id] }),
            }),
            _ => None,
        }
    }
}

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
) -> Result<ValidatedCatalogSend, CatalogCheckError> {
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
    let given = request.template.clone().unwrap_or_default();
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

/// A catalog validation failure: a refusal, or the store could not be read.
#[derive(Debug)]
pub enum CatalogCheckError {
    Refused(Refusal),
    Store(StoreError),
}

impl From<Refusal> for CatalogCheckError {
    fn from(r: Refusal) -> Self {
        CatalogCheckError::Refused(r)
    }
}

impl From<StoreError> for CatalogCheckError {
    fn from(e: StoreError) -> Self {
        CatalogCheckError::Store(e)
    }
}

impl From<CatalogCheckError> for SendError {
    fn from(e: CatalogCheckError) -> Self {
        match e {
            CatalogCheckError::Refused(r) => SendError::Refused(r),
            CatalogCheckError::Store(s) => SendError::Store(s),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Catalog sends

/// Which catalog send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogMode {
    /// `ensure_conversation: true`: explicit `channel_id`; the conversation is opened or
    /// continued.
    Initiation,
    /// A synchronized campaign recipient: normal channel selection; no conversation is opened.
    Campaign,
}

/// A catalog send, its fields already checked for shape.
#[derive(Clone, Debug)]
pub struct CatalogSendInput {
    pub mode: CatalogMode,
    pub org_id: i64,
    /// The API key sending (the actor of the audit entries).
    pub api_key_id: i64,
    pub api_key_prefix: String,
    pub key_default_channel: Option<i64>,
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
    /// The name of a contact created by the send.
    pub first_name: Option<String>,
    pub request: CatalogRequest,
    pub rules: ConsentRules,
}

/// What a catalog send adds to the send response.
#[derive(Clone, Debug)]
pub struct CatalogExtra {
    pub template: TemplateOut,
    pub consent: ConsentOut,
}

/// Builds the stored (and live) response of a recorded catalog send.
pub type CatalogResponder = Box<
    dyn FnOnce(&RecordedOutbound, &CatalogExtra, Option<&ProviderError>) -> StoredResponse + Send,
>;

/// Completes an idempotency claim in the transaction of the send.
pub struct CatalogCompletion {
    pub token: ClaimToken,
    pub respond: CatalogResponder,
}

/// A recorded catalog send.
#[derive(Clone, Debug)]
pub struct CatalogSent {
    pub recorded: RecordedOutbound,
    pub extra: CatalogExtra,
}

/// The channel of an initiation: `channel_id` of an active, template-capable channel of the
/// organization; `channel_slug` and defaults do not count.
fn explicit_channel(
    channels: &[Channel],
    channel_id: Option<i64>,
    channel_slug: Option<&str>,
) -> Result<Channel, SendError> {
    let id = match (channel_id, channel_slug) {
        (Some(_), Some(_)) => return Err(SendError::Channel(SelectionError::Conflict)),
        (Some(id), None) => id,
        (None, slug) => {
            let message = if slug.is_some() {
                "Conversation initiation needs an explicit channel_id; channel_slug does not count."
            } else {
                "Conversation initiation needs an explicit channel_id; the key's and the organization's default channels do not count."
            };
            return Err(Refusal::channel(
                "channel_id_required",
                Vec::new(),
                "channel_id",
                message.into(),
            )
            .into_send());
        }
    };
    let Some(channel) = channels.iter().find(|c| c.id == id) else {
        return Err(Refusal::channel(
            "not_found",
            Vec::new(),
            "channel_id",
            "The channel does not exist in this organization.".into(),
        )
        .into_send());
    };
    Ok(channel.clone())
}

impl Refusal {
    fn into_send(self) -> SendError {
        SendError::Refused(self)
    }
}

/// A compact, bounded copy of the consent object as given (for refusal audits).
fn consent_as_given(v: Option<&Value>) -> Value {
    let Some(Value::Object(o)) = v else {
        return Value::Null;
    };
    let mut out = Map::new();
    for key in ["confirmed", "purpose", "source", "reference", "captured_at"] {
        match o.get(key) {
            Some(Value::String(s)) => {
                out.insert(key.into(), json!(s.chars().take(256).collect::<String>()));
            }
            Some(b @ Value::Bool(_)) => {
                out.insert(key.into(), b.clone());
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                out.insert(key.into(), json!("(not a string)"));
            }
        }
    }
    Value::Object(out)
}

fn consent_details(uuid: Uuid, c: &Consent) -> Value {
    json!({
        "uuid": uuid,
        "confirmed": true,
        "purpose": c.purpose,
        "source": c.source,
        "reference": c.reference,
        "captured_at": c.captured_at,
    })
}

/// Sends a catalog template (conversation initiation or campaign recipient): chooses the
/// channel, validates template and consent ([`validate_catalog_send`]), finds the recipient,
/// calls the provider (outside any transaction) and records the message with its consent
/// evidence, its events (`contact.created` and `conversation.created` when new,
/// `message.sent`) and its audit entry, and the completion of the idempotency claim, in one
/// transaction. A campaign send refused before the provider call writes a
/// `campaign_send.refused` audit entry in a transaction of its own.
pub async fn send_catalog(
    ctx: &SendContext<'_>,
    input: CatalogSendInput,
    completion: Option<CatalogCompletion>,
) -> Result<CatalogSent, SendError> {
    let actor = Actor::ApiKey {
        api_key_id: input.api_key_id,
        api_key_prefix: input.api_key_prefix.clone(),
    };
    let mut chosen: Option<i64> = None;
    let checked = check_catalog_send(ctx, &input, &mut chosen).await;
    let (channel, validated, existing) = match checked {
        Ok(x) => x,
        Err(e) => {
            if input.mode == CatalogMode::Campaign {
                if let Some(refusal) = Refusal::of_send_error(&e) {
                    audit_refusal(ctx, &input, &actor, chosen, &refusal).await?;
                }
            }
            return Err(e);
        }
    };
    let ValidatedCatalogSend {
        template,
        consent,
        content,
    } = validated;
    let provider = provider_for(ctx.store, ctx.secrets, ctx.providers, &channel).await?;
    let now = ctx.clock.now();
    let recipient = recipient_contact(
        existing.as_ref(),
        input.org_id,
        input.phone.as_ref(),
        input.first_name.as_deref(),
        now,
    );

    // The provider call: no transaction is open.
    let started = std::time::Instant::now();
    let outcome = provider.send(&recipient, &content).await;
    metrics::histogram!("provider_send_duration_seconds", "channel_type" => channel.channel_type.as_str())
        .record(started.elapsed().as_secs_f64());
    let (status, provider_message_id, error) = match classify_outcome(&outcome, &channel) {
        Ok(x) => x,
        Err(e) => {
            // A channel that lacks its provider settings refuses the recipient too.
            if let (CatalogMode::Campaign, SendError::ChannelUnusable { .. }) = (input.mode, &e) {
                if let Some(refusal) = Refusal::of_send_error(&e) {
                    audit_refusal(ctx, &input, &actor, Some(channel.id), &refusal).await?;
                }
            }
            return Err(e);
        }
    };
    let rejection = outcome.as_ref().err().cloned();
    let policy = match (input.mode, &rejection) {
        (CatalogMode::Initiation, None) => ConversationPolicy::OpenOrContinue,
        // A failed message never opens a conversation; campaign sends never do.
        _ => ConversationPolicy::ContinueIfOpen,
    };
    let consent_uuid = Uuid::now_v7();
    let now = ctx.clock.now();
    let extra = CatalogExtra {
        template: TemplateOut::from(&template),
        consent: ConsentOut::new(consent_uuid, &consent, now),
    };
    let mut stored_content = content.to_json();
    stored_content["template_uuid"] = json!(template.uuid);
    stored_content["category"] = json!(template.category);
    let new = NewOutbound {
        org_id: input.org_id,
        channel_id: channel.id,
        api_key_id: Some(input.api_key_id),
        recipient: match (&existing, &input.phone) {
            (Some(c), _) => RecipientRef::Contact(c.id),
            (None, Some(p)) => RecipientRef::Phone(p.clone()),
            (None, None) => unreachable!("find_recipient requires one"),
        },
        conversation: policy,
        uuid: Uuid::now_v7(),
        message_type: MessageType::Template,
        status,
        content: stored_content,
        provider_message_id,
        error,
        now,
    };
    let new_consent = NewConsent {
        uuid: consent_uuid,
        template_id: template.id,
        api_key_id: Some(input.api_key_id),
        context: match input.mode {
            CatalogMode::Initiation => ConsentContext::Initiation,
            CatalogMode::Campaign => ConsentContext::Campaign,
        },
        purpose: consent.purpose,
        source: consent.source,
        reference: consent.reference.clone(),
        captured_at: consent.captured_at,
    };
    let rejected = rejection.is_some();
    let rejection_for_response = rejection.clone();
    let extra_for_response = extra.clone();
    let completion = completion.map(|c| IdempotencyCompletion {
        token: c.token,
        respond: Box::new(move |r: &RecordedOutbound| {
            (c.respond)(r, &extra_for_response, rejection_for_response.as_ref())
        }) as Box<dyn FnOnce(&RecordedOutbound) -> StoredResponse + Send>,
    });
    let mode = input.mode;
    let summary = template_summary(&template);
    let consent_json = consent_details(consent_uuid, &consent);
    let effects = Box::new(move |r: &RecordedOutbound| {
        let effects = recorded_effects(r, "message.sent");
        let m = &r.message;
        let phone = r.contact.phone.as_ref().map(|p| p.as_str().to_owned());
        match mode {
            CatalogMode::Initiation if !rejected => {
                let c = r
                    .conversation
                    .as_ref()
                    .expect("an initiation opens a conversation");
                effects.log(OrgEvent::new(
                    m.org_id,
                    log_types::CONVERSATION_INITIATED,
                    EventCategory::Audit,
                    actor.clone(),
                    Some(Subject::new("conversation", c.uuid)),
                    json!({
                        "conversation_uuid": c.uuid,
                        "conversation_created": r.conversation_created,
                        "contact_uuid": r.contact.uuid,
                        "contact_created": r.contact_created,
                        "phone": phone,
                        "channel_id": m.channel.id,
                        "message_id": m.id,
                        "message_uuid": m.uuid,
                        "provider_message_id": m.provider_message_id,
                        "template": summary,
                        "consent": consent_json,
                    }),
                    m.updated_at,
                ))
            }
            CatalogMode::Initiation => effects,
            CatalogMode::Campaign => effects.log(OrgEvent::new(
                m.org_id,
                log_types::CAMPAIGN_SEND_VALIDATED,
                EventCategory::Audit,
                actor.clone(),
                Some(Subject::new("message", m.uuid)),
                json!({
                    "message_id": m.id,
                    "message_uuid": m.uuid,
                    "status": m.status,
                    "contact_uuid": r.contact.uuid,
                    "contact_created": r.contact_created,
                    "phone": phone,
                    "conversation_uuid": m.conversation_uuid,
                    "channel_id": m.channel.id,
                    "template": summary,
                    "consent": consent_json,
                }),
                m.updated_at,
            )),
        }
    });
    let recorded = ctx
        .store
        .record_consented_outbound(
            new,
            input.first_name.clone(),
            new_consent,
            completion,
            effects,
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => SendError::LostClaim,
            other => SendError::Store(other),
        })?;
    match rejection {
        None => Ok(CatalogSent { recorded, extra }),
        Some(error) => Err(SendError::ProviderRejected {
            recorded: Box::new(recorded),
            error,
        }),
    }
}

/// Everything checked before the provider call: the channel, template and consent, the
/// recipient. `chosen` receives the channel's id once known (for the refusal audit).
async fn check_catalog_send(
    ctx: &SendContext<'_>,
    input: &CatalogSendInput,
    chosen: &mut Option<i64>,
) -> Result<
    (
        Channel,
        ValidatedCatalogSend,
        Option<switchboard_domain::contact::Contact>,
    ),
    SendError,
> {
    let channels = ctx.channels(input.org_id).await?;
    let channel = match input.mode {
        CatalogMode::Initiation => {
            explicit_channel(&channels, input.channel_id, input.channel_slug.as_deref())?
        }
        CatalogMode::Campaign => {
            // Normal selection (channel_id, channel_slug, the key's default, the organization's).
            select_channel(
                &channels,
                &ChannelRequest {
                    channel_id: input.channel_id,
                    channel_slug: input.channel_slug.as_deref(),
                    key_default: input.key_default_channel,
                },
            )
            .map_err(SendError::Channel)?
            .clone()
        }
    };
    *chosen = Some(channel.id);
    let validated = validate_catalog_send(
        ctx.store,
        input.org_id,
        &channel,
        &input.request,
        ctx.clock.now(),
        &input.rules,
    )
    .await?;
    let existing = find_recipient(
        ctx.store,
        input.org_id,
        input.contact_uuid,
        input.phone.as_ref(),
    )
    .await?;
    if let Some(c) = &existing {
        if c.phone.is_none() && channel.channel_type == ChannelType::WhatsappCloud {
            return Err(SendError::Validation(
                FieldError::new(
                    "contact_uuid",
                    "the contact has no phone number, which WhatsApp needs",
                )
                .into(),
            ));
        }
    }
    Ok((channel, validated, existing))
}

/// Writes the `campaign_send.refused` audit entry of a refused campaign send (its own
/// transaction: the request fails, so nothing else is written).
async fn audit_refusal(
    ctx: &SendContext<'_>,
    input: &CatalogSendInput,
    actor: &Actor,
    channel_id: Option<i64>,
    refusal: &Refusal,
) -> Result<(), SendError> {
    let template_uuid = input
        .request
        .template_uuid
        .as_deref()
        .and_then(|s| Uuid::parse_str(s.trim()).ok());
    let details = json!({
        "code": refusal.code,
        "message": refusal.message,
        "reason": refusal.details.get("reason"),
        "fields": refusal.details.get("fields"),
        "channel_id": channel_id.or(input.channel_id),
        "channel_slug": input.channel_slug.as_deref().map(|s| s.chars().take(200).collect::<String>()),
        "template_uuid": template_uuid,
        "template_name": input.request.template.as_ref().and_then(|t| t.name.clone()),
        "contact_uuid": input.contact_uuid,
        "phone": input.phone.as_ref().map(|p| p.as_str()),
        "consent": consent_as_given(input.request.consent.as_ref()),
    });
    ctx.store
        .write_effects(Effects::none().log(OrgEvent::new(
            input.org_id,
            log_types::CAMPAIGN_SEND_REFUSED,
            EventCategory::Audit,
            actor.clone(),
            template_uuid.map(|u| Subject::new("template", u)),
            details,
            ctx.clock.now(),
        )))
        .await?;
    Ok(())
}
