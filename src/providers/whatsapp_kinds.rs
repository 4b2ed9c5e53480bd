//! WhatsApp Cloud API inbound messages mapped into the domain's [`MessageKind`] and
//! [`InboundContext`] (CONVENTIONS "Every kind of message, in and out").
//!
//! `messages[]` items: `text`, `image`/`video`/`audio`/`document`/`sticker`, `interactive`,
//! `button`, `reaction`, `location`, `contacts`, `order`, `system`, `unsupported` (and `unknown`,
//! its older name); `context` (a reply: `id`; `forwarded`, `frequently_forwarded`) and
//! `referral` (click-to-chat ads) beside them. Edits (`edit`) and deletions (`revoke`) are
//! changes of an earlier message ([`change_of`]). Outbound, [`payload`] is the Graph API
//! request body of each kind a send carries.

use serde_json::{Map, Value, json};

use super::{ParsedChange, unix_seconds};
use switchboard_domain::message::{
    ContactsMember, Content, InboundContext, LocationMember, MediaMember, MediaType, MessageChange,
    MessageKind, OrderItem, OrderMember, ProviderIssue, Referral, ReplyTo, SystemMember,
    UnsupportedMember, inbound_interactive, reaction,
};
use switchboard_domain::phone::Phone;

/// A string member (a number is taken as its digits), trimmed; `None` when absent or empty.
pub(crate) fn text_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A number member (also a number given as a string).
pub(crate) fn number_of(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

/// The kind of one `messages[]` item (its NUL characters already removed).
pub fn kind_of(m: &Map<String, Value>) -> MessageKind {
    let kind = m.get("type").and_then(Value::as_str).unwrap_or("unknown");
    let member = m.get(kind).unwrap_or(&Value::Null);
    let parsed = match kind {
        "text" => text_of(member.get("body")).map(MessageKind::text),
        "image" | "document" | "audio" | "video" | "sticker" => media(kind, member),
        "interactive" => member.is_object().then(|| MessageKind::Interactive {
            interactive: inbound_interactive(member.clone()),
        }),
        "button" => member.is_object().then(|| MessageKind::Interactive {
            interactive: serde_json::json!({
                "type": "button",
                "button": {
                    "payload": text_of(member.get("payload")),
                    "text": text_of(member.get("text")),
                },
            }),
        }),
        "reaction" => text_of(member.get("message_id")).map(|target| {
            // A removed reaction comes without an emoji (or with an empty one).
            reaction(text_of(member.get("emoji")), None, &target)
        }),
        "location" => location(member),
        "contacts" => member
            .as_array()
            .filter(|a| !a.is_empty())
            .map(|a| MessageKind::Contacts {
                contacts: ContactsMember {
                    contacts: a.clone(),
                },
            }),
        "order" => member.is_object().then(|| order(member)),
        "system" => member.is_object().then(|| system(member)),
        _ => None,
    };
    parsed.unwrap_or_else(|| unsupported(kind, m))
}

fn media(kind: &str, member: &Value) -> Option<MessageKind> {
    let media_type: MediaType = kind.parse().ok()?;
    member.is_object().then(|| MessageKind::Media {
        media: MediaMember {
            media_type,
            media_id: text_of(member.get("id")),
            mime_type: text_of(member.get("mime_type")),
            sha256: text_of(member.get("sha256")),
            caption: text_of(member.get("caption")),
            file_name: text_of(member.get("filename")),
            voice: member.get("voice").and_then(Value::as_bool) == Some(true),
            animated: member.get("animated").and_then(Value::as_bool) == Some(true),
        },
    })
}

fn location(member: &Value) -> Option<MessageKind> {
    let latitude = number_of(member.get("latitude")).filter(|l| (-90.0..=90.0).contains(l))?;
    let longitude = number_of(member.get("longitude")).filter(|l| (-180.0..=180.0).contains(l))?;
    Some(MessageKind::Location {
        location: LocationMember {
            latitude,
            longitude,
            name: text_of(member.get("name")),
            address: text_of(member.get("address")),
            url: text_of(member.get("url")),
        },
    })
}

fn order(member: &Value) -> MessageKind {
    let items = member
        .get("product_items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| OrderItem {
                    product_retailer_id: text_of(i.get("product_retailer_id")),
                    quantity: number_of(i.get("quantity")),
                    item_price: number_of(i.get("item_price")),
                    currency: text_of(i.get("currency")),
                })
                .collect()
        })
        .unwrap_or_default();
    MessageKind::Order {
        order: OrderMember {
            catalog_id: text_of(member.get("catalog_id")),
            text: text_of(member.get("text")),
            items,
        },
    }
}

fn system(member: &Value) -> MessageKind {
    let kind = text_of(member.get("type")).unwrap_or_else(|| "unknown".into());
    // `new_wa_id` in the current payload; `wa_id` in older ones.
    let new_phone = (kind == "user_changed_number")
        .then(|| {
            text_of(member.get("new_wa_id"))
                .or_else(|| text_of(member.get("wa_id")))
                .and_then(|id| Phone::from_provider_id(&id))
                .map(|p| p.as_str().to_owned())
        })
        .flatten();
    MessageKind::System {
        system: SystemMember {
            kind,
            body: text_of(member.get("body")),
            new_phone,
        },
    }
}

/// An `unsupported` message: WhatsApp's `unsupported.type` (such as `pool`) when it names one,
/// else the message's own type; with the message's `errors`. Logged once at `warn` with the
/// provider's type only (never the body).
fn unsupported(kind: &str, m: &Map<String, Value>) -> MessageKind {
    let provider_type = m
        .get("unsupported")
        .and_then(|u| text_of(u.get("type")))
        .or_else(|| Some(kind.to_owned()));
    super::warn_unsupported_once("whatsapp_cloud", provider_type.as_deref());
    let errors = m
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|e| ProviderIssue {
                    code: e.get("code").filter(|c| !c.is_null()).cloned(),
                    title: text_of(e.get("title")),
                    message: text_of(e.get("message"))
                        .or_else(|| text_of(e.pointer("/error_data/details"))),
                })
                .collect()
        })
        .unwrap_or_default();
    MessageKind::Unsupported {
        unsupported: UnsupportedMember {
            provider_type,
            errors,
        },
    }
}

/// An `edit` (`{"original_message_id", "message": the edited message}`) or `revoke`
/// (`{"original_message_id"}`) item: `None` when the item is neither; `Some(None)` when it is
/// one without the message it changes.
pub fn change_of(m: &Map<String, Value>) -> Option<Option<ParsedChange>> {
    let kind = m.get("type").and_then(Value::as_str)?;
    if kind != "edit" && kind != "revoke" {
        return None;
    }
    let member = m.get(kind).unwrap_or(&Value::Null);
    let Some(original) = text_of(member.get("original_message_id")).filter(|id| id.len() <= 512)
    else {
        return Some(None);
    };
    let change = if kind == "revoke" {
        MessageChange::Deleted
    } else {
        match member.get("message").and_then(Value::as_object) {
            Some(edited) => MessageChange::Edited(kind_of(edited)),
            None => return Some(None),
        }
    };
    Some(Some(ParsedChange {
        provider_message_id: original,
        change,
        at: unix_seconds(m.get("timestamp")),
    }))
}

/// A status's `pricing` (`{"billable", "category", "pricing_model"}`) and `conversation`
/// (`{"id", "origin": its origin's type, "expires_at": RFC 3339 or null}`), when it has them.
pub fn billing_of(s: &Value) -> (Option<Value>, Option<Value>) {
    let pricing = s.get("pricing").filter(|p| p.is_object()).map(|p| {
        serde_json::json!({
            "billable": p.get("billable").and_then(Value::as_bool),
            "category": text_of(p.get("category")),
            "pricing_model": text_of(p.get("pricing_model")),
        })
    });
    let conversation = s.get("conversation").filter(|c| c.is_object()).map(|c| {
        serde_json::json!({
            "id": text_of(c.get("id")),
            "origin": text_of(c.pointer("/origin/type")),
            "expires_at": unix_seconds(c.get("expiration_timestamp")),
        })
    });
    (pricing, conversation)
}

/// The context of one `messages[]` item: `context.id` (a reply; not for a reaction, whose
/// target is in its member, nor for a product enquiry without an id), `context.forwarded`,
/// `context.frequently_forwarded` and `referral`.
pub fn context_of(m: &Map<String, Value>) -> InboundContext {
    let ctx = m.get("context").filter(|c| c.is_object());
    let flag = |k: &str| ctx.and_then(|c| c.get(k)).and_then(Value::as_bool) == Some(true);
    let referral = m
        .get("referral")
        .filter(|r| r.is_object())
        .map(|r| Referral {
            source_url: text_of(r.get("source_url")),
            source_id: text_of(r.get("source_id")),
            source_type: text_of(r.get("source_type")),
            headline: text_of(r.get("headline")),
            body: text_of(r.get("body")),
            media_type: text_of(r.get("media_type")),
            ctwa_clid: text_of(r.get("ctwa_clid")),
        });
    InboundContext {
        reply_to: ctx
            .and_then(|c| text_of(c.get("id")))
            .filter(|id| id.len() <= 512)
            .map(|provider_message_id| ReplyTo {
                message_uuid: None,
                provider_message_id,
            }),
        forwarded: flag("forwarded") || flag("frequently_forwarded"),
        frequently_forwarded: flag("frequently_forwarded"),
        referral,
    }
}

/// The Graph API request body of a send.
pub fn payload(to_digits: &str, content: &Content) -> Value {
    let mut body = json!({
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": to_digits,
    });
    match content {
        Content::Text {
            body: text,
            preview_url,
        } => {
            body["type"] = json!("text");
            body["text"] = json!({ "body": text, "preview_url": preview_url });
        }
        Content::Interactive(v) => {
            body["type"] = json!("interactive");
            body["interactive"] = v.clone();
        }
        Content::Media(m) => {
            let kind = m.media_type.as_str();
            // By the id of an upload when the media pipeline made one, else by link.
            let mut obj = match &m.media_id {
                Some(id) => json!({ "id": id }),
                None => json!({ "link": m.media_url }),
            };
            if let Some(c) = &m.caption {
                if !matches!(m.media_type, MediaType::Audio | MediaType::Sticker) {
                    obj["caption"] = json!(c);
                }
            }
            if let (Some(f), MediaType::Document) = (&m.file_name, m.media_type) {
                obj["filename"] = json!(f);
            }
            body["type"] = json!(kind);
            body[kind] = obj;
        }
        Content::Template(t) => {
            let mut template = json!({ "name": t.name, "language": { "code": t.language } });
            if !t.components.is_empty() {
                template["components"] = json!(t.components);
            }
            body["type"] = json!("template");
            body["template"] = template;
        }
        Content::Reaction(r) => {
            // An empty emoji removes the reaction.
            body["type"] = json!("reaction");
            body["reaction"] = json!({
                "message_id": r.provider_message_id,
                "emoji": r.emoji.as_deref().unwrap_or(""),
            });
        }
        Content::Location(l) => {
            let mut location = json!({ "latitude": l.latitude, "longitude": l.longitude });
            if let Some(n) = &l.name {
                location["name"] = json!(n);
            }
            if let Some(a) = &l.address {
                location["address"] = json!(a);
            }
            body["type"] = json!("location");
            body["location"] = location;
        }
        Content::Contacts(c) => {
            body["type"] = json!("contacts");
            body["contacts"] = json!(c.contacts);
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(v: Value) -> Value {
        serde_json::to_value(kind_of(v.as_object().unwrap())).unwrap()
    }

    #[test]
    fn media_with_voice_and_animated() {
        assert_eq!(
            kind(json!({"from": "1", "id": "w", "type": "audio",
                "audio": {"mime_type": "audio/ogg; codecs=opus", "sha256": "abc", "id": "m1", "voice": true}})),
            json!({"type": "media", "media": {"media_type": "audio", "media_id": "m1",
                "mime_type": "audio/ogg; codecs=opus", "sha256": "abc", "caption": null,
                "file_name": null, "voice": true, "animated": false}})
        );
        let v = kind(
            json!({"type": "sticker", "sticker": {"id": "s", "mime_type": "image/webp", "animated": true}}),
        );
        assert_eq!(v["media"]["animated"], true);
        let v = kind(
            json!({"type": "document", "document": {"id": "d", "filename": "a.pdf", "caption": "c"}}),
        );
        assert_eq!(v["media"]["file_name"], "a.pdf");
        assert_eq!(v["media"]["caption"], "c");
    }

    #[test]
    fn reactions_and_their_removal() {
        assert_eq!(
            kind(
                json!({"type": "reaction", "reaction": {"message_id": "wamid.A", "emoji": "\u{1F62E}"}})
            ),
            json!({"type": "reaction", "reaction": {"emoji": "😮", "message_uuid": null, "provider_message_id": "wamid.A"}})
        );
        assert_eq!(
            kind(json!({"type": "reaction", "reaction": {"message_id": "wamid.A"}}))["reaction"]["emoji"],
            Value::Null
        );
    }

    #[test]
    fn locations_contacts_orders() {
        assert_eq!(
            kind(
                json!({"type": "location", "location": {"latitude": 38.9, "longitude": -77.03, "name": "Office", "address": "1 Main St", "url": "https://example.com"}})
            ),
            json!({"type": "location", "location": {"latitude": 38.9, "longitude": -77.03,
                "name": "Office", "address": "1 Main St", "url": "https://example.com"}})
        );
        let shared = json!([{"name": {"formatted_name": "Ann Lee", "first_name": "Ann"},
            "phones": [{"phone": "+1 555 0100", "type": "CELL", "wa_id": "15550100"}],
            "emails": [{"email": "ann@example.com", "type": "WORK"}], "org": {"company": "X"}}]);
        assert_eq!(
            kind(json!({"type": "contacts", "contacts": shared})),
            json!({"type": "contacts", "contacts": {"contacts": shared}})
        );
        assert_eq!(
            kind(
                json!({"type": "order", "order": {"catalog_id": "cat1", "text": "please",
                "product_items": [
                    {"product_retailer_id": "sku-1", "quantity": 2, "item_price": 10.5, "currency": "EUR"},
                    {"product_retailer_id": "sku-2", "quantity": "1", "item_price": "3", "currency": "EUR"}
                ]}})
            ),
            json!({"type": "order", "order": {"catalog_id": "cat1", "text": "please", "items": [
                {"product_retailer_id": "sku-1", "quantity": 2.0, "item_price": 10.5, "currency": "EUR"},
                {"product_retailer_id": "sku-2", "quantity": 1.0, "item_price": 3.0, "currency": "EUR"}
            ]}})
        );
    }

    #[test]
    fn system_number_change() {
        assert_eq!(
            kind(
                json!({"type": "system", "system": {"body": "Ann changed from 4915123456789 to 4915123456780",
                "new_wa_id": "4915123456780", "type": "user_changed_number"}})
            ),
            json!({"type": "system", "system": {"kind": "user_changed_number",
                "body": "Ann changed from 4915123456789 to 4915123456780", "new_phone": "+4915123456780"}})
        );
        let v = kind(
            json!({"type": "system", "system": {"body": "b", "identity": "h", "type": "customer_identity_changed"}}),
        );
        assert_eq!(v["system"]["kind"], "customer_identity_changed");
        assert_eq!(v["system"]["new_phone"], Value::Null);
    }

    #[test]
    fn unsupported_and_unknown_kinds() {
        assert_eq!(
            kind(
                json!({"type": "unsupported", "unsupported": {"type": "pool"},
                "errors": [{"code": 131051, "title": "Message type unknown",
                    "message": "Message type unknown", "error_data": {"details": "Message type is currently not supported."}}]})
            ),
            json!({"type": "unsupported", "unsupported": {"provider_type": "pool", "errors": [
                {"code": 131051, "title": "Message type unknown", "message": "Message type unknown"}]}})
        );
        assert_eq!(
            kind(json!({"type": "ephemeral", "ephemeral": {}})),
            json!({"type": "unsupported", "unsupported": {"provider_type": "ephemeral", "errors": []}})
        );
        // Never an empty text: a text without a body is unsupported.
        assert_eq!(
            kind(json!({"type": "text", "text": {}}))["type"],
            "unsupported"
        );
        assert_eq!(
            kind(json!({"type": "location", "location": {"latitude": 91, "longitude": 0}}))["type"],
            "unsupported"
        );
    }

    #[test]
    fn interactive_replies() {
        assert_eq!(
            kind(
                json!({"type": "button", "button": {"payload": "STOP", "text": "Stop promotions"}})
            ),
            json!({"type": "interactive", "interactive": {"type": "button",
                "button": {"payload": "STOP", "text": "Stop promotions"}}})
        );
        let v = kind(
            json!({"type": "interactive", "interactive": {"type": "nfm_reply", "nfm_reply": {
            "name": "flow", "body": "Sent",
            "response_json": "{\"flow_token\":\"FT-1\",\"rating\":\"5\",\"comment\":\"fine\"}"}}}),
        );
        assert_eq!(v["interactive"]["nfm_reply"]["flow_token"], "FT-1");
        assert_eq!(
            v["interactive"]["nfm_reply"]["response"],
            json!({"flow_token": "FT-1", "rating": "5", "comment": "fine"})
        );
        let v = kind(
            json!({"type": "interactive", "interactive": {"type": "list_reply",
            "list_reply": {"id": "r1", "title": "Row", "description": "d"}}}),
        );
        assert_eq!(v["interactive"]["list_reply"]["id"], "r1");
    }

    #[test]
    fn pricing_and_conversation() {
        let s = json!({"id": "wamid.X", "status": "sent", "timestamp": "1786000000",
            "conversation": {"id": "CONV1", "expiration_timestamp": "1786086400", "origin": {"type": "service"}},
            "pricing": {"billable": true, "pricing_model": "CBP", "category": "service", "type": "regular"}});
        let (pricing, conversation) = billing_of(&s);
        assert_eq!(
            pricing.unwrap(),
            json!({"billable": true, "category": "service", "pricing_model": "CBP"})
        );
        let c = conversation.unwrap();
        assert_eq!(
            (c["id"].as_str(), c["origin"].as_str()),
            (Some("CONV1"), Some("service"))
        );
        assert!(
            c["expires_at"].as_str().unwrap().starts_with("2026-08-"),
            "{c}"
        );
        assert_eq!(
            billing_of(&json!({"id": "x", "status": "read"})),
            (None, None)
        );
    }

    #[test]
    fn edits_and_revokes() {
        let edit = json!({"from": "4915123456789", "id": "wamid.E", "timestamp": "1786000000",
            "type": "edit", "edit": {"original_message_id": "wamid.O",
                "message": {"context": {"id": "wamid.O"}, "type": "text", "text": {"body": "fixed"}}}});
        let c = change_of(edit.as_object().unwrap()).unwrap().unwrap();
        assert_eq!(c.provider_message_id, "wamid.O");
        assert_eq!(c.change, MessageChange::Edited(MessageKind::text("fixed")));
        assert_eq!(c.at.unwrap().millis(), 1_786_000_000_000);
        let revoke = json!({"from": "4915123456789", "id": "wamid.R", "type": "revoke",
            "revoke": {"original_message_id": "wamid.O"}});
        let c = change_of(revoke.as_object().unwrap()).unwrap().unwrap();
        assert_eq!(
            (c.provider_message_id.as_str(), c.change),
            ("wamid.O", MessageChange::Deleted)
        );
        assert_eq!(
            change_of(json!({"type": "revoke", "revoke": {}}).as_object().unwrap()),
            Some(None)
        );
        assert_eq!(
            change_of(
                json!({"type": "text", "text": {"body": "x"}})
                    .as_object()
                    .unwrap()
            ),
            None
        );
    }

    #[test]
    fn contexts() {
        let m = json!({"type": "text", "text": {"body": "yes"},
            "context": {"from": "4915123456789", "id": "wamid.Q"},
            "referral": {"source_url": "https://fb.me/x", "source_id": "123", "source_type": "ad",
                "headline": "H", "body": "B", "media_type": "image", "image_url": "https://i", "ctwa_clid": "clid"}});
        let c = context_of(m.as_object().unwrap());
        assert_eq!(
            json!(c),
            json!({"reply_to": {"message_uuid": null, "provider_message_id": "wamid.Q"},
                "forwarded": false, "frequently_forwarded": false,
                "referral": {"source_url": "https://fb.me/x", "source_id": "123", "source_type": "ad",
                    "headline": "H", "body": "B", "media_type": "image", "ctwa_clid": "clid"}})
        );
        let m = json!({"type": "text", "text": {"body": "fw"}, "context": {"frequently_forwarded": true}});
        let c = context_of(m.as_object().unwrap());
        assert!(c.forwarded && c.frequently_forwarded && c.reply_to.is_none());
        let m = json!({"type": "text", "text": {"body": "x"}});
        assert!(context_of(m.as_object().unwrap()).is_empty());
    }
}
