//! API key lifecycle: create, import legacy, revoke, rotate. Each records a security event in
//! the organization log and the outbox (`security.api_key_created` / `security.api_key_revoked`),
//! never with key material: only the id and the display prefix.

use serde_json::json;

use switchboard_domain::Timestamp;
use switchboard_domain::api_key::{self, GeneratedKey, KeyHash};
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects, EventCategory, NewEvent, OrgEvent, Subject};
use switchboard_domain::scope::ScopeSet;
use switchboard_store::{ApiKeyRecord, NewApiKey, Store, StoreError};

use super::{OpError, OpResult};

pub struct CreateKey {
    pub org_id: i64,
    pub name: Option<String>,
    /// `None`: a key without a scope list, which acts as a wildcard key.
    pub scopes: Option<ScopeSet>,
    pub expires_at: Option<Timestamp>,
    pub default_channel_id: Option<i64>,
}

/// A created key and its one-time value.
pub struct CreatedKey {
    pub record: ApiKeyRecord,
    pub token: String,
}

pub(crate) fn key_data(k: &ApiKeyRecord) -> serde_json::Value {
    json!({
        "api_key_id": k.id,
        "prefix": k.prefix,
        "name": k.name,
        "scopes": k.effective_scopes(),
        "expires_at": k.expires_at,
        "default_channel_id": k.default_channel_id,
        "legacy": k.legacy,
    })
}

fn created_effects(k: &ApiKeyRecord, actor: &Actor, now: Timestamp, reason: &str) -> Effects {
    let mut data = key_data(k);
    data["reason"] = json!(reason);
    Effects::none()
        .log(OrgEvent::new(
            k.org_id,
            "security.api_key_created",
            EventCategory::Security,
            actor.clone(),
            Some(Subject::new("api_key", k.id)),
            data.clone(),
            now,
        ))
        .event(NewEvent::new(
            k.org_id,
            "security.api_key_created",
            data,
            None,
            now,
        ))
}

fn revoked_effects(k: &ApiKeyRecord, actor: &Actor, now: Timestamp, reason: &str) -> Effects {
    let mut data = key_data(k);
    data["reason"] = json!(reason);
    data["revoked_at"] = json!(k.revoked_at);
    Effects::none()
        .log(OrgEvent::new(
            k.org_id,
            "security.api_key_revoked",
            EventCategory::Security,
            actor.clone(),
            Some(Subject::new("api_key", k.id)),
            data.clone(),
            now,
        ))
        .event(NewEvent::new(
            k.org_id,
            "security.api_key_revoked",
            data,
            None,
            now,
        ))
}

async fn check_default_channel(
    store: &dyn Store,
    org_id: i64,
    channel_id: Option<i64>,
) -> OpResult<()> {
    let Some(id) = channel_id else { return Ok(()) };
    match store.get_channel(id).await {
        Ok(c) if c.org_id == org_id && !c.channel_type.can_send_messages() => {
            Err(OpError::invalid_field(
                "default_channel_id",
                format!(
                    "channel {id} is of type {} and cannot send messages",
                    c.channel_type.as_str()
                ),
            ))
        }
        Ok(c) if c.org_id == org_id => Ok(()),
        Ok(_) | Err(StoreError::NotFound) => Err(OpError::invalid_field(
            "default_channel_id",
            format!("channel {id} does not belong to organization {org_id}"),
        )),
        Err(e) => Err(e.into()),
    }
}

pub async fn create_key(
    store: &dyn Store,
    clock: &dyn Clock,
    input: CreateKey,
    actor: Actor,
) -> OpResult<CreatedKey> {
    super::orgs::require_org(store, input.org_id).await?;
    check_default_channel(store, input.org_id, input.default_channel_id).await?;
    let name = input.name.unwrap_or_else(|| "API key".to_owned());
    switchboard_domain::channel::validate_name(&name)
        .map_err(|e| OpError::invalid_field("name", e))?;
    let GeneratedKey {
        token,
        hash,
        display_prefix,
    } = api_key::generate();
    let now = clock.now();
    let record = store
        .create_api_key(
            NewApiKey {
                org_id: input.org_id,
                name,
                prefix: display_prefix,
                key_hash: hash,
                scopes: input.scopes,
                legacy: false,
                default_channel_id: input.default_channel_id,
                expires_at: input.expires_at,
                created_at: now,
            },
            Box::new(move |k| created_effects(k, &actor, now, "created")),
        )
        .await?;
    Ok(CreatedKey { record, token })
}

/// Imports a pre-scope plaintext key: stored as its SHA-256 like every key, never in clear, and
/// acting as a wildcard key until revoked or rotated.
pub async fn import_legacy(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    token: &str,
    actor: Actor,
) -> OpResult<ApiKeyRecord> {
    api_key::check_legacy(token).map_err(|e| OpError::invalid_field("key", e))?;
    super::orgs::require_org(store, org_id).await?;
    let now = clock.now();
    store
        .create_api_key(
            NewApiKey {
                org_id,
                name: "legacy key".to_owned(),
                prefix: api_key::display_prefix(token),
                key_hash: KeyHash::of(token),
                scopes: None,
                legacy: true,
                default_channel_id: None,
                expires_at: None,
                created_at: now,
            },
            Box::new(move |k| created_effects(k, &actor, now, "imported")),
        )
        .await
        .map_err(|e| match e {
            StoreError::UniqueViolation(_) => OpError::conflict("this key is already stored"),
            other => other.into(),
        })
}

fn not_found(id: i64) -> impl Fn(StoreError) -> OpError {
    move |e| match e {
        StoreError::NotFound => OpError::not_found(format!("API key {id} does not exist")),
        StoreError::Conflict(m) => OpError::conflict(m),
        other => other.into(),
    }
}

pub async fn revoke_key(
    store: &dyn Store,
    clock: &dyn Clock,
    id: i64,
    actor: Actor,
) -> OpResult<ApiKeyRecord> {
    let now = clock.now();
    store
        .revoke_api_key(
            id,
            "revoked",
            now,
            Box::new(move |k| revoked_effects(k, &actor, now, "revoked")),
        )
        .await
        .map_err(not_found(id))
}

/// Replaces a key with a new one (same organization, name, scopes, default channel, expiry);
/// the old one stops working at once.
pub async fn rotate_key(
    store: &dyn Store,
    clock: &dyn Clock,
    id: i64,
    actor: Actor,
) -> OpResult<CreatedKey> {
    let GeneratedKey {
        token,
        hash,
        display_prefix,
    } = api_key::generate();
    let now = clock.now();
    let (_old, new) = store
        .rotate_api_key(
            id,
            hash,
            display_prefix,
            now,
            Box::new(move |(old, new)| {
                let mut effects = created_effects(new, &actor, now, "rotated");
                let revoked = revoked_effects(old, &actor, now, "rotated");
                effects.outbox.extend(revoked.outbox);
                effects.log.extend(revoked.log);
                effects.log.push(OrgEvent::new(
                    old.org_id,
                    "security.api_key_rotated",
                    EventCategory::Security,
                    actor.clone(),
                    Some(Subject::new("api_key", old.id)),
                    json!({ "api_key_id": old.id, "prefix": old.prefix, "replaced_by": new.id, "new_prefix": new.prefix }),
                    now,
                ));
                effects
            }),
        )
        .await
        .map_err(not_found(id))?;
    Ok(CreatedKey { record: new, token })
}
