//! WhatsApp Cloud API webhooks read: the messages of a phone number (typed by
//! `whatsapp_kinds`), their statuses with pricing and conversation, and template status
//! changes. The signature is checked before (`whatsapp_cloud::verify_signature`).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{
    InboundError, ParsedCallback, ParsedInbound, ParsedStatus, ParsedTemplateStatus, strip_nul,
    unix_seconds, whatsapp_kinds,
};
use switchboard_domain::contact::{InboundSender, clean_profile_name};
use switchboard_domain::message::{MessageStatus, parse_reported_status};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::status_of_provider_event;

/// A bounded text of a provider's JSON (a string, or a number as its digits).
fn short_text(v: Option<&Value>, max: usize) -> Option<String> {
    let s = match v? {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)).then_some(s)
}

/// Reads a `message_template_status_update` change: `{"event", "message_template_id",
/// "message_template_name", "message_template_language", "reason"}`. `None` when the event
/// changes no status (e.g. `FLAGGED`) or the template cannot be identified.
fn template_status(value: &Value) -> Option<ParsedTemplateStatus> {
    let event = short_text(value.get("event"), 64)?;
    let status = status_of_provider_event(&event)?;
    let provider_template_id = short_text(value.get("message_template_id"), 128);
    let name = short_text(value.get("message_template_name"), 512);
    let language = short_text(value.get("message_template_language"), 32);
    if provider_template_id.is_none() && (name.is_none() || language.is_none()) {
        return None;
    }
    Some(ParsedTemplateStatus {
        provider_template_id,
        name,
        language,
        event,
        status,
        reason: short_text(value.get("reason"), 512).filter(|r| r != "NONE"),
    })
}

/// Reads a WhatsApp Cloud API webhook body. Changes for another phone number id than
/// `phone_number_id` (when configured) are skipped. Template status changes
/// (`message_template_status_update`) concern the whole business account and are kept.
pub fn parse_callback(
    phone_number_id: Option<&str>,
    body: &[u8],
) -> Result<ParsedCallback, InboundError> {
    let root: Value = serde_json::from_slice(body)
        .map_err(|_| InboundError::Malformed("the body is not JSON".into()))?;
    let root = root
        .as_object()
        .ok_or_else(|| InboundError::Malformed("the body is not a JSON object".into()))?;
    let mut out = ParsedCallback::default();
    let entries = root
        .get("entry")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for entry in &entries {
        let changes = entry
            .get("changes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for change in &changes {
            if change.get("field").and_then(Value::as_str) == Some("message_template_status_update")
            {
                match change.get("value").and_then(template_status) {
                    Some(t) => out.templates.push(t),
                    None => out.skipped += 1,
                }
                continue;
            }
            if change.get("field").and_then(Value::as_str) != Some("messages") {
                out.skipped += 1;
                continue;
            }
            let Some(value) = change.get("value").and_then(Value::as_object) else {
                out.skipped += 1;
                continue;
            };
            let target = value
                .get("metadata")
                .and_then(|m| m.get("phone_number_id"))
                .and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                });
            if let (Some(mine), Some(target)) = (phone_number_id, &target) {
                if mine != target {
                    out.skipped += 1;
                    continue;
                }
            }
            let names = profile_names(value.get("contacts"));
            for m in value
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(m) = m.as_object() else {
                    out.skipped += 1;
                    continue;
                };
                let from = m.get("from").and_then(Value::as_str);
                let id = m
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty() && id.len() <= 512);
                let (Some(from), Some(id)) = (from, id) else {
                    out.skipped += 1;
                    continue;
                };
                let Some(phone) = Phone::from_provider_id(from) else {
                    out.skipped += 1;
                    continue;
                };
                let mut clean = Value::Object(m.clone());
                strip_nul(&mut clean);
                let clean = clean.as_object().expect("an object stays one");
                if let Some(change) = whatsapp_kinds::change_of(clean) {
                    match change {
                        Some(c) => out.changes.push(c),
                        None => out.skipped += 1,
                    }
                    continue;
                }
                out.messages.push(ParsedInbound {
                    sender: InboundSender::Phone(phone),
                    profile_name: names.get(from).and_then(|n| clean_profile_name(n)),
                    kind: whatsapp_kinds::kind_of(clean),
                    context: whatsapp_kinds::context_of(clean),
                    provider_message_id: id.replace('\0', ""),
                    sent_at: unix_seconds(m.get("timestamp")),
                });
            }
            for s in value
                .get("statuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match parse_status(s) {
                    Some(status) => out.statuses.push(status),
                    None => out.skipped += 1,
                }
            }
        }
    }
    Ok(out)
}

/// The customers' profile names of a change's `contacts`, by `wa_id`.
fn profile_names(contacts: Option<&Value>) -> HashMap<String, String> {
    contacts
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    let wa_id = c.get("wa_id")?.as_str()?;
                    let name = c.get("profile")?.get("name")?.as_str()?;
                    Some((wa_id.to_owned(), name.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One entry of a callback's `statuses` (`None`: without an id or a status we know).
fn parse_status(s: &Value) -> Option<ParsedStatus> {
    let id = s
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 512);
    let status = s
        .get("status")
        .and_then(Value::as_str)
        .and_then(parse_reported_status);
    let (Some(id), Some(status)) = (id, status) else {
        return None;
    };
    let error = (status == MessageStatus::Failed).then(|| {
        let first = s.get("errors").and_then(|e| e.get(0));
        let mut e = json!({
            "code": "delivery_failed",
            "message": first
                .and_then(|e| e.get("message").or_else(|| e.get("title")))
                .and_then(Value::as_str)
                .unwrap_or("The provider could not deliver the message."),
            "provider": "whatsapp_cloud",
            "provider_code": first.and_then(|e| e.get("code")).cloned(),
            "provider_details": first
                .and_then(|e| e.get("error_data"))
                .and_then(|d| d.get("details"))
                .cloned(),
        });
        strip_nul(&mut e);
        e
    });
    let (pricing, provider_conversation) = whatsapp_kinds::billing_of(s);
    Some(ParsedStatus {
        provider_message_id: id.replace('\0', ""),
        status,
        error,
        pricing,
        provider_conversation,
        reference: s
            .get("biz_opaque_callback_data")
            .and_then(Value::as_str)
            .filter(|r| r.len() <= 512)
            .map(str::to_owned),
    })
}
