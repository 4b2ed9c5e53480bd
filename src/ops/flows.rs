//! Flows of the legacy `/api/flows` routes: `admin flow create` checks and stores them.

use serde_json::{Value, json};
use uuid::Uuid;

use super::{OpError, OpResult};
use switchboard_domain::clock::Clock;
use switchboard_domain::message::{TextInput, validate_template, validate_text};
use switchboard_store::Store;
use switchboard_store::legacy::{FlowRecord, NewFlow};

/// What a flow sends.
#[derive(Clone, Debug)]
pub enum FlowAction {
    Text(String),
    Template {
        template_uuid: String,
        language: Option<String>,
        /// WhatsApp template components (a JSON array).
        params: Option<String>,
    },
}

/// `admin flow create`.
pub async fn create_flow(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    name: &str,
    channel_id: i64,
    action: FlowAction,
    active: bool,
) -> OpResult<FlowRecord> {
    super::orgs::require_org(store, org_id).await?;
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(OpError::invalid_field(
            "name",
            "must be 1 to 200 characters",
        ));
    }
    let channel = store
        .get_channel(channel_id)
        .await
        .ok()
        .filter(|c| c.org_id == org_id)
        .ok_or_else(|| {
            OpError::not_found_field(
                "channel_id",
                format!("organization {org_id} has no channel {channel_id}"),
            )
        })?;
    let action = match action {
        FlowAction::Text(text) => {
            validate_text(&TextInput {
                message: Some(&text),
                kind: None,
                interactive: None,
                preview_url: None,
            })
            .map_err(|e| OpError::invalid_field("text", issues(&e)))?;
            json!({ "type": "text", "text": text })
        }
        FlowAction::Template {
            template_uuid,
            language,
            params,
        } => {
            let uuid = Uuid::parse_str(template_uuid.trim())
                .map_err(|_| OpError::invalid_field("template_uuid", "must be a UUID"))?;
            let t = store.find_template(org_id, uuid).await?.ok_or_else(|| {
                OpError::not_found_field(
                    "template_uuid",
                    format!("organization {org_id} has no template {uuid}"),
                )
            })?;
            if t.channel_id != channel.id {
                return Err(OpError::invalid_field(
                    "template_uuid",
                    format!(
                        "the template belongs to channel {}, not {}",
                        t.channel_id, channel.id
                    ),
                ));
            }
            let params: Value = match params {
                Some(p) => serde_json::from_str(&p).map_err(|e| {
                    OpError::invalid_field("params", format!("not valid JSON: {e}"))
                })?,
                None => json!([]),
            };
            let language = language.unwrap_or_else(|| t.language.clone());
            validate_template(Some(&json!({
                "name": t.name, "language": language, "components": params,
            })))
            .map_err(|e| OpError::invalid_field("params/language", issues(&e)))?;
            json!({
                "type": "template",
                "template_uuid": t.uuid,
                "language": language,
                "params": params,
            })
        }
    };
    Ok(store
        .create_flow(NewFlow {
            uuid: Uuid::now_v7(),
            org_id,
            name: name.to_owned(),
            channel_id,
            action,
            active,
            now: clock.now(),
        })
        .await?)
}

fn issues(e: &switchboard_domain::ValidationErrors) -> String {
    e.0.iter()
        .map(|f| format!("{}: {}", f.field, f.issue))
        .collect::<Vec<_>>()
        .join("; ")
}
