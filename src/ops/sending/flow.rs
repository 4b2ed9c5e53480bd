//! Flow triggers (legacy `POST /api/flows/{id}/trigger`): a flow's action (a text, or a catalog
//! template with parameters) sent to one contact as a plain send on the flow's channel.

use serde_json::{Value, json};
use uuid::Uuid;

use switchboard_domain::FieldError;
use switchboard_domain::message::{Content, TextInput, validate_template, validate_text};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::TemplateStatus;
use switchboard_store::legacy::FlowRecord;
use switchboard_store::{RecordedOutbound, Store, StoreError};

use super::plain::{SendCompletion, SendInput, send};
use super::{Refusal, SendContext, SendError};

/// A trigger: the flow, and the contact to send its action to (`contact_uuid` or `phone`).
#[derive(Clone, Debug)]
pub struct FlowTrigger {
    pub org_id: i64,
    pub api_key_id: i64,
    pub flow_uuid: Uuid,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
}

/// Sends a flow's action: the flow must exist in the organization (`not_found`) and be active
/// (`validation_failed` on `id`); a template action's catalog template must still exist, belong
/// to the flow's channel, be active and approved (`invalid_template`, with the reason and the
/// flow). Then it is a plain send on the flow's channel (no default channel applies).
pub async fn send_flow(
    ctx: &SendContext<'_>,
    trigger: FlowTrigger,
    completion: Option<SendCompletion>,
) -> Result<RecordedOutbound, SendError> {
    let flow = ctx
        .store
        .find_flow(trigger.org_id, trigger.flow_uuid)
        .await?
        .ok_or(SendError::FlowNotFound)?;
    if !flow.active {
        return Err(SendError::Validation(
            FieldError::new("id", "names an inactive flow").into(),
        ));
    }
    let content = flow_content(ctx.store, trigger.org_id, &flow).await?;
    let input = SendInput {
        org_id: trigger.org_id,
        api_key_id: Some(trigger.api_key_id),
        key_default_channel: None,
        channel_id: Some(flow.channel_id),
        channel_slug: None,
        contact_uuid: trigger.contact_uuid,
        phone: trigger.phone,
        content,
        reply_to: None,
    };
    send(ctx, input, completion).await.map_err(|e| match e {
        // The contact went away during the send.
        SendError::Store(StoreError::NotFound) => SendError::Validation(
            FieldError::new("contact_uuid", "names no contact of this organization").into(),
        ),
        e => e,
    })
}

/// The content a flow sends.
async fn flow_content(
    store: &dyn Store,
    org_id: i64,
    flow: &FlowRecord,
) -> Result<Content, SendError> {
    let action = &flow.action;
    match action.get("type").and_then(Value::as_str) {
        Some("text") => validate_text(&TextInput {
            message: action.get("text").and_then(Value::as_str),
            kind: None,
            interactive: None,
            preview_url: None,
        })
        .map_err(SendError::Validation),
        Some("template") => {
            let bad = |reason: &str, message: &str| Refusal::flow_template(reason, message, flow);
            let uuid = action
                .get("template_uuid")
                .and_then(Value::as_str)
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(|| bad("not_found", "The flow's template is not valid."))?;
            let t = store
                .find_template(org_id, uuid)
                .await?
                .ok_or_else(|| bad("not_found", "The flow's catalog template no longer exists."))?;
            if t.channel_id != flow.channel_id {
                return Err(bad(
                    "wrong_channel",
                    "The flow's template belongs to another channel.",
                )
                .into());
            }
            if !t.active {
                return Err(bad("inactive", "The flow's catalog template is inactive.").into());
            }
            if t.status != TemplateStatus::Approved {
                return Err(bad(
                    "not_approved",
                    "The flow's catalog template is not approved.",
                )
                .into());
            }
            let language = action
                .get("language")
                .and_then(Value::as_str)
                .unwrap_or(&t.language);
            let params = action.get("params").cloned().unwrap_or(json!([]));
            validate_template(Some(&json!({
                "name": t.name,
                "language": language,
                "components": params,
            })))
            .map_err(SendError::Validation)
        }
        _ => Err(SendError::Store(StoreError::Other(
            "a flow with an unknown action type".into(),
        ))),
    }
}
