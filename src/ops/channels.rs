//! Channel administration (the admin tools create and update channels).

use serde_json::{Value, json};
use uuid::Uuid;

use crate::crypto::{AAD_PROVIDER_CONFIG, SecretBox};
use crate::providers::{Provider, ProviderHub};
use switchboard_domain::channel::{
    Channel, ChannelStatus, ChannelType, validate_name, validate_slug,
};
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};
use switchboard_store::{ChannelPatch, NewChannel, Store, StoreError};

use super::{OpError, OpResult};

pub struct CreateChannel {
    pub org_id: i64,
    pub channel_type: ChannelType,
    pub name: String,
    pub slug: Option<String>,
    pub identifier: Option<String>,
    pub is_default: bool,
    pub active: bool,
    pub provider_config: Option<Value>,
}

#[derive(Default)]
pub struct UpdateChannel {
    pub name: Option<String>,
    pub slug: Option<String>,
    pub identifier: Option<String>,
    pub active: Option<bool>,
    pub make_default: bool,
    pub provider_config: Option<Value>,
}

fn check_identifier(id: &str) -> OpResult<()> {
    if id.trim().is_empty() || id.len() > 200 || id.chars().any(char::is_control) {
        return Err(OpError::invalid_field(
            "identifier",
            "expected 1 to 200 printable characters",
        ));
    }
    Ok(())
}

/// Checks a provider configuration: a JSON object of string settings, with the known settings
/// of the channel type in the right form (`providers::check_config`).
fn check_provider_config(channel_type: ChannelType, v: &Value) -> OpResult<()> {
    crate::providers::check_config(channel_type, v)
        .map_err(|e| OpError::invalid_field("provider_config", e))?;
    let obj = v
        .as_object()
        .ok_or_else(|| OpError::invalid_field("provider_config", "expected a JSON object"))?;
    for (k, v) in obj {
        if !(v.is_string() || v.is_number() || v.is_boolean() || v.is_null()) {
            return Err(OpError::invalid_field(
                "provider_config",
                format!("`{k}` must be a string, number or boolean"),
            ));
        }
    }
    Ok(())
}

/// The identifier a channel gets when none is given: the provider's own id where the
/// configuration has one, else a short name from the random part of the channel's UUID (its
/// leading part is a timestamp: channels created close together would share it).
pub fn default_identifier(channel_type: ChannelType, uuid: Uuid, config: Option<&Value>) -> String {
    let from_config = |field: &str| {
        config
            .and_then(|c| c.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let provider_id = match channel_type {
        ChannelType::WhatsappCloud => from_config("phone_number_id"),
        ChannelType::Telegram => from_config("bot_token")
            .and_then(|t| t.split_once(':').map(|(id, _)| id.to_owned()))
            .filter(|id| !id.is_empty()),
        _ => None,
    };
    provider_id.unwrap_or_else(|| {
        format!(
            "{}-{}",
            channel_type.as_str().replace('_', "-"),
            &uuid.simple().to_string()[20..]
        )
    })
}

fn seal(secrets: &SecretBox, config: &Value) -> Vec<u8> {
    secrets.seal(config.to_string().as_bytes(), AAD_PROVIDER_CONFIG)
}

fn slug_taken(slug: &str) -> impl Fn(StoreError) -> OpError + '_ {
    move |e| match e {
        StoreError::UniqueViolation(_) => OpError::conflict_field(
            "slug",
            format!("`{slug}` is already used by another channel of this organization"),
        ),
        other => other.into(),
    }
}

fn admin_log(c: &Channel, event_type: &str, details: Value, actor: &Actor) -> Effects {
    Effects::none().log(OrgEvent::new(
        c.org_id,
        event_type,
        EventCategory::Admin,
        actor.clone(),
        Some(Subject::new("channel", c.id)),
        details,
        c.updated_at,
    ))
}

pub async fn create_channel(
    store: &dyn Store,
    secrets: &SecretBox,
    clock: &dyn Clock,
    input: CreateChannel,
    actor: Actor,
) -> OpResult<Channel> {
    validate_name(&input.name).map_err(|e| OpError::invalid_field("name", e))?;
    if let Some(slug) = &input.slug {
        validate_slug(slug).map_err(|e| OpError::invalid_field("slug", e))?;
    }
    if let Some(id) = &input.identifier {
        check_identifier(id)?;
    }
    if let Some(config) = &input.provider_config {
        check_provider_config(input.channel_type, config)?;
    }
    super::orgs::require_org(store, input.org_id).await?;
    let uuid = Uuid::now_v7();
    let identifier = input.identifier.clone().unwrap_or_else(|| {
        default_identifier(input.channel_type, uuid, input.provider_config.as_ref())
    });
    let slug_for_error = input.slug.clone().unwrap_or_default();
    store
        .create_channel(
            NewChannel {
                org_id: input.org_id,
                uuid,
                slug: input.slug,
                channel_type: input.channel_type,
                name: input.name.trim().to_owned(),
                identifier,
                status: if input.active { ChannelStatus::Active } else { ChannelStatus::Inactive },
                is_default: input.is_default,
                provider_config: input.provider_config.as_ref().map(|c| seal(secrets, c)),
                now: clock.now(),
            },
            Box::new(move |c| {
                admin_log(
                    c,
                    "channel.created",
                    json!({ "channel_id": c.id, "type": c.channel_type, "slug": c.slug, "name": c.name, "status": c.status, "is_default": c.is_default }),
                    &actor,
                )
            }),
        )
        .await
        .map_err(slug_taken(&slug_for_error))
}

pub async fn update_channel(
    store: &dyn Store,
    secrets: &SecretBox,
    clock: &dyn Clock,
    id: i64,
    input: UpdateChannel,
    actor: Actor,
) -> OpResult<Channel> {
    if let Some(name) = &input.name {
        validate_name(name).map_err(|e| OpError::invalid_field("name", e))?;
    }
    if let Some(slug) = &input.slug {
        validate_slug(slug).map_err(|e| OpError::invalid_field("slug", e))?;
    }
    if let Some(ident) = &input.identifier {
        check_identifier(ident)?;
    }
    if let Some(config) = &input.provider_config {
        let current = store.get_channel(id).await.map_err(|e| match e {
            StoreError::NotFound => OpError::not_found(format!("channel {id} does not exist")),
            other => other.into(),
        })?;
        check_provider_config(current.channel_type, config)?;
    }
    let slug_for_error = input.slug.clone().unwrap_or_default();
    let changed: Vec<&str> = [
        input.name.as_ref().map(|_| "name"),
        input.slug.as_ref().map(|_| "slug"),
        input.identifier.as_ref().map(|_| "identifier"),
        input.active.map(|_| "status"),
        input.make_default.then_some("is_default"),
        input.provider_config.as_ref().map(|_| "provider_config"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let changed = json!(changed);
    store
        .update_channel(
            id,
            ChannelPatch {
                name: input.name.map(|n| n.trim().to_owned()),
                slug: input.slug,
                identifier: input.identifier,
                status: input.active.map(|a| if a { ChannelStatus::Active } else { ChannelStatus::Inactive }),
                make_default: input.make_default,
                provider_config: input.provider_config.as_ref().map(|c| seal(secrets, c)),
            },
            clock.now(),
            Box::new(move |c| {
                admin_log(c, "channel.updated", json!({ "channel_id": c.id, "changed": changed, "status": c.status, "is_default": c.is_default }), &actor)
            }),
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound => OpError::not_found(format!("channel {id} does not exist")),
            other => slug_taken(&slug_for_error)(other),
        })
}

/// The decrypted provider configuration of a channel (`Null` when it has none).
pub async fn provider_config(
    store: &dyn Store,
    secrets: &SecretBox,
    channel_id: i64,
) -> OpResult<Value> {
    let Some(sealed) = store.get_channel_provider_config(channel_id).await? else {
        return Ok(Value::Null);
    };
    let plain = secrets.open(&sealed, AAD_PROVIDER_CONFIG).map_err(|e| {
        OpError::invalid(format!(
            "the provider configuration of channel {channel_id} cannot be opened: {e}"
        ))
    })?;
    serde_json::from_slice(&plain)
        .map_err(|e| OpError::invalid(format!("stored provider configuration is not JSON: {e}")))
}

/// The adapter of a channel, with its configuration decrypted.
pub async fn provider_for(
    store: &dyn Store,
    secrets: &SecretBox,
    providers: &ProviderHub,
    channel: &Channel,
) -> OpResult<Box<dyn Provider>> {
    let config = match channel.channel_type {
        ChannelType::Sandbox | ChannelType::LeadIngestion => Value::Null,
        _ => provider_config(store, secrets, channel.id).await?,
    };
    Ok(providers.for_channel(channel.channel_type, &channel.identifier, &config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_identifiers_differ_for_channels_created_together() {
        let a = default_identifier(ChannelType::Sandbox, Uuid::now_v7(), None);
        let b = default_identifier(ChannelType::Sandbox, Uuid::now_v7(), None);
        assert!(a.starts_with("sandbox-") && a.len() == "sandbox-".len() + 12);
        assert_ne!(
            a, b,
            "the UUIDs' timestamps agree, their random parts do not"
        );
    }

    #[test]
    fn provider_ids_are_used_when_configured() {
        let config = serde_json::json!({"phone_number_id": "1098765"});
        let id = default_identifier(ChannelType::WhatsappCloud, Uuid::now_v7(), Some(&config));
        assert_eq!(id, "1098765");
        let config = serde_json::json!({"bot_token": "4242:secret"});
        let id = default_identifier(ChannelType::Telegram, Uuid::now_v7(), Some(&config));
        assert_eq!(id, "4242");
    }
}
