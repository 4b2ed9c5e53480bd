//! The template catalogue: templates of template-capable channels, created and changed by the
//! admin tools and by the provider's status callbacks. Sending them is `super::sending`.
//!
//! Organization log entries written here:
//! * `template.created`, `template.updated` (admin, by the admin tools),
//!   `template.status_changed` (admin, by the system on a provider callback).

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::providers::ParsedTemplateStatus;
use switchboard_domain::FieldError;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};
use switchboard_domain::template::{
    TemplateCategory, TemplateStatus, parse_definition, validate_language, validate_name,
    validate_provider_id,
};
use switchboard_store::{
    NewTemplate, ProviderTemplateStatus, Store, StoreError, TemplateChange, TemplatePatch,
    TemplateRecord,
};

use super::{OpError, OpResult};

/// Organization log types written here.
pub mod log_types {
    pub const TEMPLATE_CREATED: &str = "template.created";
    pub const TEMPLATE_UPDATED: &str = "template.updated";
    pub const TEMPLATE_STATUS_CHANGED: &str = "template.status_changed";
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
fn parse_flag<T: std::str::FromStr<Err = String>>(field: &str, v: &str) -> OpResult<T> {
    v.trim()
        .to_ascii_lowercase()
        .parse::<T>()
        .map_err(|e| OpError::invalid_field(field, e))
}

/// Checks component definitions; returns them (as an array) with the body parameter count.
fn components_arg(v: Value) -> OpResult<(Value, Option<i64>)> {
    let def = parse_definition(&v, "components").map_err(|e| {
        let first =
            e.0.first()
                .cloned()
                .unwrap_or_else(|| FieldError::new("components", "invalid"));
        OpError::invalid_field(first.field, first.issue)
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
    validate_name(&input.name).map_err(|e| OpError::invalid_field("name", e))?;
    validate_language(&input.language).map_err(|e| OpError::invalid_field("language", e))?;
    let category: TemplateCategory = parse_flag("category", &input.category)?;
    let status: TemplateStatus = match &input.status {
        Some(s) => parse_flag("status", s)?,
        None => TemplateStatus::Approved,
    };
    if let Some(p) = &input.provider_template_id {
        validate_provider_id(p).map_err(|e| OpError::invalid_field("provider_template_id", e))?;
    }
    let (components, body_parameters) = components_arg(input.components.unwrap_or(json!([])))?;
    let channel = store
        .get_channel(input.channel_id)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => {
                OpError::not_found(format!("channel {} does not exist", input.channel_id))
            }
            other => other.into(),
        })?;
    if !channel.channel_type.is_template_capable() {
        return Err(OpError::invalid_field(
            "channel_id",
            format!(
                "channel {} is a {} channel; templates belong to whatsapp_cloud channels",
                channel.id, channel.channel_type
            ),
        ));
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
            Err(if taken {
                OpError::conflict(format!(
                    "channel {} already has a template `{name}` in {language}",
                    channel.id
                ))
            } else {
                OpError::conflict_field(
                    "provider_template_id",
                    format!(
                        "another template of channel {} has this provider id",
                        channel.id
                    ),
                )
            })
        }
        Err(other) => Err(other.into()),
    }
}

/// `admin template update`: at least one change.
pub async fn update_template(
    store: &dyn Store,
    clock: &dyn Clock,
    uuid: Uuid,
    input: UpdateTemplate,
    actor: Actor,
) -> OpResult<TemplateRecord> {
    let patch = TemplatePatch {
        category: input
            .category
            .as_deref()
            .map(|c| parse_flag("category", c))
            .transpose()?,
        status: input
            .status
            .as_deref()
            .map(|s| parse_flag("status", s))
            .transpose()?,
        active: input.active,
        components: input.components.map(components_arg).transpose()?,
        provider_template_id: match input.provider_template_id {
            Some(p) => {
                validate_provider_id(&p)
                    .map_err(|e| OpError::invalid_field("provider_template_id", e))?;
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
        return Err(OpError::invalid(
            "nothing to change: give a category, status, activity, components or provider template id",
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
            StoreError::NotFound => OpError::not_found(format!("template {uuid} does not exist")),
            StoreError::UniqueViolation(_) => OpError::conflict_field(
                "provider_template_id",
                "another template of the channel has this provider id",
            ),
            other => other.into(),
        })?;
    Ok(change.after)
}

/// `admin template list`.
pub async fn list_templates(store: &dyn Store, channel_id: i64) -> OpResult<Vec<TemplateRecord>> {
    store.get_channel(channel_id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::not_found(format!("channel {channel_id} does not exist")),
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
