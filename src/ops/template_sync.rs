//! Template catalogue sync: a `whatsapp_cloud` channel's catalogue is brought in line with the
//! templates of its WhatsApp Business Account (`GET /{waba_id}/message_templates`, every
//! page): new ones are created, changed ones updated (category, status, components, provider
//! id), and templates gone from the account become `disabled`. By `admin template sync` and
//! periodically by `serve` (`SWITCHBOARD_TEMPLATE_SYNC_INTERVAL`). Every change writes its
//! usual organization log entry (actor: system).

use serde::Serialize;
use serde_json::{Value, json};

use crate::crypto::SecretBox;
use crate::providers::{ProviderError, ProviderHub, RemoteTemplate};
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::clock::Clock;
use switchboard_domain::event::Actor;
use switchboard_domain::template::{
    TemplateCategory, TemplateStatus, parse_definition, status_of_provider_event,
};
use switchboard_store::{Store, StoreError, TemplateRecord};

use super::templates::{CreateTemplate, UpdateTemplate, create_template, update_template};
use super::{OpError, OpResult};

/// What a sync did to a channel's catalogue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyncOutcome {
    pub channel_id: i64,
    /// Templates the account has.
    pub remote: usize,
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    /// Catalogue templates gone from the account, now `disabled`.
    pub disabled: usize,
    /// Account templates that could not be taken (an unknown category or status, a name the
    /// catalogue refuses); named in `problems`.
    pub skipped: usize,
    pub problems: Vec<String>,
}

/// The catalogue's view of an account template: category, status and components as the
/// catalogue keeps them (components it cannot check are left out: the counts stay unknown).
struct Wanted {
    category: TemplateCategory,
    status: TemplateStatus,
    components: Option<Value>,
}

fn wanted(r: &RemoteTemplate) -> Result<Wanted, String> {
    let category = r
        .category
        .trim()
        .to_ascii_lowercase()
        .parse::<TemplateCategory>()
        .map_err(|_| format!("unknown category `{}`", r.category))?;
    let status = status_of_provider_event(&r.status)
        .ok_or_else(|| format!("unknown status `{}`", r.status))?;
    let components = parse_definition(&r.components, "components")
        .ok()
        .map(|_| r.components.clone());
    Ok(Wanted {
        category,
        status,
        components,
    })
}

/// The changes that bring `local` in line with `remote` (all `None`: unchanged).
fn patch(local: &TemplateRecord, remote: &RemoteTemplate, w: &Wanted) -> UpdateTemplate {
    UpdateTemplate {
        category: (local.category != w.category).then(|| w.category.as_str().to_owned()),
        status: (local.status != w.status).then(|| w.status.as_str().to_owned()),
        active: None,
        components: w.components.clone().filter(|c| *c != local.components),
        provider_template_id: remote
            .provider_template_id
            .clone()
            .filter(|id| local.provider_template_id.as_ref() != Some(id)),
    }
}

fn is_empty(u: &UpdateTemplate) -> bool {
    u.category.is_none()
        && u.status.is_none()
        && u.active.is_none()
        && u.components.is_none()
        && u.provider_template_id.is_none()
}

/// Syncs one channel's catalogue with its provider account.
pub async fn sync_channel(
    store: &dyn Store,
    secrets: &SecretBox,
    providers: &ProviderHub,
    clock: &dyn Clock,
    channel: &Channel,
) -> OpResult<SyncOutcome> {
    if channel.channel_type != ChannelType::WhatsappCloud {
        return Err(OpError::invalid_field(
            "channel_id",
            format!(
                "channel {} is a {} channel; templates are synced from whatsapp_cloud channels",
                channel.id, channel.channel_type
            ),
        ));
    }
    let provider = super::channels::provider_for(store, secrets, providers, channel).await?;
    let remote = provider.list_templates().await.map_err(|e| match e {
        ProviderError::NotConfigured(m) | ProviderError::Unsupported(m) => {
            OpError::invalid_field("channel_id", m)
        }
        ProviderError::Unavailable(m) => OpError::unavailable(format!(
            "the provider's template list could not be read: {m}"
        )),
        ProviderError::Throttled { message, .. } => OpError::unavailable(format!(
            "the provider throttled the template list (try again later): {message}"
        )),
        rejected @ ProviderError::Rejected { .. } => OpError::unavailable(format!(
            "the provider refused the template list: {}",
            rejected.to_json(channel.channel_type)
        )),
    })?;
    let mut out = SyncOutcome {
        channel_id: channel.id,
        remote: remote.len(),
        ..Default::default()
    };
    let local = store.list_channel_templates(channel.id).await?;
    for r in &remote {
        let w = match wanted(r) {
            Ok(w) => w,
            Err(why) => {
                out.skipped += 1;
                out.problems
                    .push(format!("{} ({}): {why}", r.name, r.language));
                continue;
            }
        };
        let existing = local
            .iter()
            .find(|t| t.name == r.name && t.language == r.language);
        let result = match existing {
            Some(t) => {
                let change = patch(t, r, &w);
                if is_empty(&change) {
                    out.unchanged += 1;
                    continue;
                }
                update_template(store, clock, t.uuid, change, Actor::System)
                    .await
                    .map(|_| out.updated += 1)
            }
            None => create_template(
                store,
                clock,
                CreateTemplate {
                    channel_id: channel.id,
                    name: r.name.clone(),
                    language: r.language.clone(),
                    category: w.category.as_str().to_owned(),
                    status: Some(w.status.as_str().to_owned()),
                    active: true,
                    components: Some(w.components.clone().unwrap_or(json!([]))),
                    provider_template_id: r.provider_template_id.clone(),
                },
                Actor::System,
            )
            .await
            .map(|_| out.created += 1),
        };
        match result {
            Ok(()) => {}
            // A name, language or provider id the catalogue refuses: reported, not fatal.
            Err(OpError::Invalid { .. } | OpError::Conflict { .. }) => {
                out.skipped += 1;
                out.problems.push(format!(
                    "{} ({}): not accepted by the catalogue",
                    r.name, r.language
                ));
            }
            Err(e) => return Err(e),
        }
    }
    // Templates the account no longer has.
    for t in &local {
        let gone = !remote
            .iter()
            .any(|r| r.name == t.name && r.language == t.language);
        if gone && t.status != TemplateStatus::Disabled {
            update_template(
                store,
                clock,
                t.uuid,
                UpdateTemplate {
                    status: Some(TemplateStatus::Disabled.as_str().to_owned()),
                    ..Default::default()
                },
                Actor::System,
            )
            .await?;
            out.disabled += 1;
        }
    }
    Ok(out)
}

/// `admin template sync --channel ID`.
pub async fn sync_channel_id(
    store: &dyn Store,
    secrets: &SecretBox,
    providers: &ProviderHub,
    clock: &dyn Clock,
    channel_id: i64,
) -> OpResult<SyncOutcome> {
    let channel = store.get_channel(channel_id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::not_found(format!("channel {channel_id} does not exist")),
        other => other.into(),
    })?;
    sync_channel(store, secrets, providers, clock, &channel).await
}

/// The periodic sync: every `whatsapp_cloud` channel of every organization whose provider
/// settings name a `waba_id`. One channel's failure is logged and does not stop the others.
pub async fn sync_all(
    store: &dyn Store,
    secrets: &SecretBox,
    providers: &ProviderHub,
    clock: &dyn Clock,
) -> OpResult<Vec<SyncOutcome>> {
    let mut done = Vec::new();
    for org in store.list_orgs().await? {
        for channel in store.list_channels(org.id).await? {
            if channel.channel_type != ChannelType::WhatsappCloud {
                continue;
            }
            let config = super::channels::provider_config(store, secrets, channel.id).await?;
            if config.get("waba_id").is_none() && config.get("business_account_id").is_none() {
                continue;
            }
            match sync_channel(store, secrets, providers, clock, &channel).await {
                Ok(o) => done.push(o),
                Err(e) => tracing::warn!(
                    channel_id = channel.id,
                    error = %e,
                    "template sync of a channel failed; the next run tries again"
                ),
            }
        }
    }
    Ok(done)
}
