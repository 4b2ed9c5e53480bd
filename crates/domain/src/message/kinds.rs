//! Every kind of message, in and out (CONVENTIONS "Every kind of message, in and out").
//!
//! A message is `type` plus a member named after it: `{"type": "reaction", "reaction": {...}}`.
//! [`MessageKind`] is that pair as one enum; the provider adapters map their payloads into it
//! (inbound) and out of it (outbound). Inbound messages also carry, beside `type`, the members
//! of [`InboundContext`]: `reply_to`, `forwarded`, `frequently_forwarded` and `referral`.
//!
//! The stored form is the message's `type` and its member (see [`MessageKind::member`] and
//! [`MessageKind::from_stored`]); a deleted message keeps its `type` and loses its member.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{MessageType, check_text};
use crate::ValidationErrors;

/// A message's kind and content: serialized as `{"type": "<kind>", "<kind>": {...member}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessageKind {
    Text {
        text: TextMember,
    },
    Media {
        media: MediaMember,
    },
    /// The WhatsApp Cloud API `interactive` object; inbound replies are `button_reply`,
    /// `list_reply`, `button` (a template quick reply) or `nfm_reply` (a Flow reply, see
    /// [`inbound_interactive`]).
    Interactive {
        interactive: Value,
    },
    Reaction {
        reaction: ReactionMember,
    },
    Location {
        location: LocationMember,
    },
    Contacts {
        contacts: ContactsMember,
    },
    Order {
        order: OrderMember,
    },
    System {
        system: SystemMember,
    },
    Unsupported {
        unsupported: UnsupportedMember,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TextMember {
    pub body: String,
}

/// Inbound media: the provider's media id (fetch it through the provider), with `voice` for
/// voice notes and `animated` for animated stickers and animations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MediaMember {
    pub media_type: super::MediaType,
    pub media_id: Option<String>,
    pub mime_type: Option<String>,
    pub sha256: Option<String>,
    pub caption: Option<String>,
    pub file_name: Option<String>,
    #[serde(default)]
    pub voice: bool,
    #[serde(default)]
    pub animated: bool,
}

/// A reaction to a message: `emoji` null when the reaction was removed; the message reacted to
/// by its provider id and, when it is one of ours, its uuid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReactionMember {
    pub emoji: Option<String>,
    pub message_uuid: Option<Uuid>,
    pub provider_message_id: String,
}

/// A location (WhatsApp `location`, Telegram `location` and `venue`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LocationMember {
    pub latitude: f64,
    pub longitude: f64,
    pub name: Option<String>,
    pub address: Option<String>,
    pub url: Option<String>,
}

/// Shared contacts: WhatsApp contact objects (`name` `{"formatted_name", ...}`, `phones`
/// `[{"phone", "type", "wa_id"}]`, `emails`, `org`, `urls`, `addresses`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContactsMember {
    #[schema(value_type = Vec<Object>)]
    pub contacts: Vec<Value>,
}

/// A catalogue order (WhatsApp `order`; `items` is its `product_items`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderMember {
    pub catalog_id: Option<String>,
    pub text: Option<String>,
    pub items: Vec<OrderItem>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrderItem {
    pub product_retailer_id: Option<String>,
    pub quantity: Option<f64>,
    pub item_price: Option<f64>,
    pub currency: Option<String>,
}

/// A notice from the provider's system (WhatsApp `system`): `kind` is `user_changed_number`,
/// `customer_identity_changed` or the provider's word; `new_phone` the customer's new number
/// (E.164) on a number change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SystemMember {
    pub kind: String,
    pub body: Option<String>,
    pub new_phone: Option<String>,
}

/// A message the service cannot show: the most specific type the provider names, and the
/// provider's errors (WhatsApp `errors`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UnsupportedMember {
    pub provider_type: Option<String>,
    pub errors: Vec<ProviderIssue>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderIssue {
    #[schema(value_type = Option<Object>)]
    pub code: Option<Value>,
    pub title: Option<String>,
    pub message: Option<String>,
}

/// The members every inbound message has beside `type`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboundContext {
    /// Null when the message is not a reply.
    pub reply_to: Option<ReplyTo>,
    #[serde(default)]
    pub forwarded: bool,
    #[serde(default)]
    pub frequently_forwarded: bool,
    /// A click-to-chat ad the customer came from (WhatsApp).
    pub referral: Option<Referral>,
}

impl InboundContext {
    /// The context of an outbound reply: only `reply_to`.
    pub fn replying_to(reply_to: ReplyTo) -> InboundContext {
        InboundContext {
            reply_to: Some(reply_to),
            ..InboundContext::default()
        }
    }
}

/// The message a message replies to: its provider id and, when it is a message of the same
/// organization, its uuid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplyTo {
    pub message_uuid: Option<Uuid>,
    pub provider_message_id: String,
}

/// WhatsApp's click-to-chat ad referral.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Referral {
    pub source_url: Option<String>,
    pub source_id: Option<String>,
    pub source_type: Option<String>,
    pub headline: Option<String>,
    pub body: Option<String>,
    pub media_type: Option<String>,
    pub ctwa_clid: Option<String>,
}

impl MessageKind {
    pub fn text(body: impl Into<String>) -> MessageKind {
        MessageKind::Text {
            text: TextMember { body: body.into() },
        }
    }

    /// An `unsupported` message of the provider's type, without errors.
    pub fn unsupported(provider_type: Option<&str>) -> MessageKind {
        MessageKind::Unsupported {
            unsupported: UnsupportedMember {
                provider_type: provider_type.map(str::to_owned),
                errors: vec![],
            },
        }
    }

    pub fn message_type(&self) -> MessageType {
        match self {
            MessageKind::Text { .. } => MessageType::Text,
            MessageKind::Media { .. } => MessageType::Media,
            MessageKind::Interactive { .. } => MessageType::Interactive,
            MessageKind::Reaction { .. } => MessageType::Reaction,
            MessageKind::Location { .. } => MessageType::Location,
            MessageKind::Contacts { .. } => MessageType::Contacts,
            MessageKind::Order { .. } => MessageType::Order,
            MessageKind::System { .. } => MessageType::System,
            MessageKind::Unsupported { .. } => MessageType::Unsupported,
        }
    }

    /// The member (the object under the `type` key): the stored and shown content.
    pub fn member(&self) -> Value {
        let v = serde_json::to_value(self).expect("message kinds serialize");
        v.get(self.message_type().as_str())
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// A kind read back from its stored form; `None` when the member is not one of that type
    /// (or the type has no [`MessageKind`], such as `template`).
    pub fn from_stored(message_type: MessageType, member: &Value) -> Option<MessageKind> {
        let tag = message_type.as_str();
        let mut obj = Map::new();
        obj.insert("type".into(), Value::String(tag.into()));
        obj.insert(tag.into(), member.clone());
        serde_json::from_value(Value::Object(obj)).ok()
    }

    /// Whether nothing of the message would show (an empty text): never stored (CONVENTIONS).
    pub fn is_blank(&self) -> bool {
        matches!(self, MessageKind::Text { text } if text.body.trim().is_empty())
    }

    /// The provider id of the message this one refers to as its subject (a reaction's target),
    /// to resolve into our uuid.
    pub fn target_provider_id(&self) -> Option<&str> {
        match self {
            MessageKind::Reaction { reaction } => Some(&reaction.provider_message_id),
            _ => None,
        }
    }

    /// Sets the uuid of the message a reaction is to, once resolved.
    pub fn set_target_uuid(&mut self, uuid: Option<Uuid>) {
        if let MessageKind::Reaction { reaction } = self {
            reaction.message_uuid = uuid;
        }
    }
}

/// A change the customer made to a message they sent earlier.
#[derive(Clone, Debug, PartialEq)]
pub enum MessageChange {
    /// Edited: the message's new kind and content.
    Edited(MessageKind),
    /// Deleted: the content is gone.
    Deleted,
}

impl MessageChange {
    /// `data.change` of the `message.status.update` it causes, and its timeline step's kind.
    pub fn as_str(&self) -> &'static str {
        match self {
            MessageChange::Edited(_) => "edited",
            MessageChange::Deleted => "deleted",
        }
    }
}

impl InboundContext {
    /// Whether the context says nothing (not a reply, not forwarded, no referral).
    pub fn is_empty(&self) -> bool {
        self == &InboundContext::default()
    }
}

/// Normalizes an inbound WhatsApp `interactive` object: a Flow reply (`nfm_reply`) gets
/// `response`, the parsed `response_json` (a JSON string) with all its fields, and
/// `flow_token` copied beside it (null when absent); `response_json` itself is dropped once
/// parsed. A `response_json` that is not a JSON object is kept as it came, with `response`
/// null. Other replies are kept as they are.
pub fn inbound_interactive(mut v: Value) -> Value {
    if v.get("type").and_then(Value::as_str) != Some("nfm_reply") {
        return v;
    }
    let Some(reply) = v.get_mut("nfm_reply").and_then(Value::as_object_mut) else {
        return v;
    };
    let parsed = match reply.get("response_json") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object),
        Some(o @ Value::Object(_)) => Some(o.clone()),
        _ => None,
    };
    let flow_token = parsed
        .as_ref()
        .and_then(|p| p.get("flow_token"))
        .and_then(|t| match t {
            Value::String(s) => Some(Value::String(s.clone())),
            Value::Number(n) => Some(Value::String(n.to_string())),
            _ => None,
        })
        .unwrap_or(Value::Null);
    if parsed.is_some() {
        reply.remove("response_json");
    }
    reply.insert("response".into(), parsed.unwrap_or(Value::Null));
    reply.insert("flow_token".into(), flow_token);
    v
}

// ---------------------------------------------------------------------------------------------
// Outbound: reaction, location and contacts sends.

/// Checks a location: latitude in [-90, 90], longitude in [-180, 180], finite; `name` and
/// `address` up to 1000 characters.
pub fn validate_location(
    latitude: Option<f64>,
    longitude: Option<f64>,
    name: Option<&str>,
    address: Option<&str>,
) -> Result<LocationMember, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let mut coordinate = |field: &str, v: Option<f64>, max: f64| match v {
        None => errors.add(field, "is required"),
        Some(x) if !x.is_finite() || !(-max..=max).contains(&x) => {
            errors.add(field, format!("must be between -{max} and {max}"))
        }
        Some(_) => {}
    };
    coordinate("location.latitude", latitude, 90.0);
    coordinate("location.longitude", longitude, 180.0);
    check_text(&mut errors, "location.name", name, 1000, false);
    check_text(&mut errors, "location.address", address, 1000, false);
    match (latitude, longitude) {
        (Some(latitude), Some(longitude)) if errors.is_empty() => Ok(LocationMember {
            latitude,
            longitude,
            name: name.map(str::to_owned),
            address: address.map(str::to_owned),
            url: None,
        }),
        _ => Err(errors),
    }
}

/// The most contacts one message shares.
pub const MAX_SHARED_CONTACTS: usize = 20;

/// Checks a contacts send: a non-empty list (up to 20) of WhatsApp contact objects, each with
/// `name.formatted_name` (1 to 512 characters); `phones`, when given, a list of objects with a
/// `phone`.
pub fn validate_contacts(contacts: Option<&Value>) -> Result<ContactsMember, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let list = match contacts {
        None | Some(Value::Null) => {
            errors.add("contacts", "is required");
            return Err(errors);
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            errors.add("contacts", "must be an array of contact objects");
            return Err(errors);
        }
    };
    if list.is_empty() {
        errors.add("contacts", "must not be empty");
    }
    if list.len() > MAX_SHARED_CONTACTS {
        errors.add(
            "contacts",
            format!("must hold at most {MAX_SHARED_CONTACTS} contacts"),
        );
    }
    for (i, c) in list.iter().enumerate() {
        let path = format!("contacts[{i}]");
        let Some(obj) = c.as_object() else {
            errors.add(path, "must be an object");
            continue;
        };
        let formatted = obj
            .get("name")
            .and_then(|n| n.get("formatted_name"))
            .and_then(Value::as_str);
        check_text(
            &mut errors,
            &format!("{path}.name.formatted_name"),
            formatted,
            512,
            true,
        );
        match obj.get("phones") {
            None | Some(Value::Null) => {}
            Some(Value::Array(phones)) => {
                for (j, p) in phones.iter().enumerate() {
                    let phone = p.get("phone").and_then(Value::as_str);
                    check_text(
                        &mut errors,
                        &format!("{path}.phones[{j}].phone"),
                        phone,
                        64,
                        true,
                    );
                }
            }
            Some(_) => errors.add(format!("{path}.phones"), "must be an array"),
        }
        if super::contains_nul(c) {
            errors.add(path, "must not contain NUL characters");
        }
    }
    if errors.is_empty() {
        Ok(ContactsMember {
            contacts: list.clone(),
        })
    } else {
        Err(errors)
    }
}

/// Checks a reaction's emoji: empty (removes the reaction) or one emoji (at most 10 characters:
/// an emoji may be several code points); the stored member has `emoji` null for a removal.
pub fn validate_reaction_emoji(emoji: Option<&str>) -> Result<Option<String>, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    match emoji {
        None => errors.add("reaction.emoji", "is required (empty removes the reaction)"),
        Some("") => return Ok(None),
        Some(e) if e.trim().is_empty() || e.chars().any(char::is_control) => {
            errors.add("reaction.emoji", "must be an emoji or empty")
        }
        Some(e) if e.chars().count() > 10 || e.is_ascii() => {
            errors.add("reaction.emoji", "must be one emoji or empty")
        }
        Some(e) => return Ok(Some(e.to_owned())),
    }
    Err(errors)
}

/// A reaction member with the emoji and the message reacted to.
pub fn reaction(
    emoji: Option<String>,
    message_uuid: Option<Uuid>,
    provider_message_id: &str,
) -> MessageKind {
    MessageKind::Reaction {
        reaction: ReactionMember {
            emoji,
            message_uuid,
            provider_message_id: provider_message_id.to_owned(),
        },
    }
}

/// The shown message's `type` and member and inbound context as one JSON object (for tests and
/// samples): `{"type", "<type>": member, "reply_to", "forwarded", ...}`.
pub fn shown(kind: &MessageKind, context: &InboundContext) -> Value {
    let mut v = serde_json::to_value(kind).expect("message kinds serialize");
    if let (Value::Object(o), Value::Object(c)) = (&mut v, json!(context)) {
        o.extend(c);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(e: &ValidationErrors) -> Vec<&str> {
        e.0.iter().map(|f| f.field.as_str()).collect()
    }

    #[test]
    fn kinds_serialize_as_type_and_member() {
        let k = reaction(None, None, "wamid.X");
        assert_eq!(
            serde_json::to_value(&k).unwrap(),
            json!({"type": "reaction", "reaction": {"emoji": null, "message_uuid": null, "provider_message_id": "wamid.X"}})
        );
        assert_eq!(k.message_type(), MessageType::Reaction);
        assert_eq!(
            k.member(),
            json!({"emoji": null, "message_uuid": null, "provider_message_id": "wamid.X"})
        );
        assert_eq!(
            MessageKind::from_stored(MessageType::Reaction, &k.member()),
            Some(k)
        );
        let t = MessageKind::text("hi");
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"type": "text", "text": {"body": "hi"}})
        );
        assert!(!t.is_blank());
        assert!(MessageKind::text(" ").is_blank());
        let u = MessageKind::unsupported(Some("pool"));
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            json!({"type": "unsupported", "unsupported": {"provider_type": "pool", "errors": []}})
        );
        // A template has no kind; a member of the wrong shape is not one.
        assert_eq!(
            MessageKind::from_stored(MessageType::Template, &json!({})),
            None
        );
        assert_eq!(
            MessageKind::from_stored(MessageType::Location, &json!({"latitude": "x"})),
            None
        );
    }

    #[test]
    fn every_kind_round_trips() {
        let kinds = [
            MessageKind::text("a"),
            MessageKind::Media {
                media: MediaMember {
                    media_type: super::super::MediaType::Audio,
                    media_id: Some("m1".into()),
                    mime_type: Some("audio/ogg; codecs=opus".into()),
                    sha256: None,
                    caption: None,
                    file_name: None,
                    voice: true,
                    animated: false,
                },
            },
            MessageKind::Interactive {
                interactive: json!({"type": "button_reply", "button_reply": {"id": "a", "title": "A"}}),
            },
            reaction(Some("😮".into()), Some(Uuid::nil()), "p"),
            MessageKind::Location {
                location: validate_location(Some(52.5), Some(13.4), Some("Office"), None).unwrap(),
            },
            MessageKind::Contacts {
                contacts: validate_contacts(Some(&json!([{"name": {"formatted_name": "Ann"}}])))
                    .unwrap(),
            },
            MessageKind::Order {
                order: OrderMember {
                    catalog_id: Some("c".into()),
                    text: None,
                    items: vec![OrderItem {
                        product_retailer_id: Some("sku".into()),
                        quantity: Some(2.0),
                        item_price: Some(9.5),
                        currency: Some("EUR".into()),
                    }],
                },
            },
            MessageKind::System {
                system: SystemMember {
                    kind: "user_changed_number".into(),
                    body: None,
                    new_phone: Some("+4915123456789".into()),
                },
            },
            MessageKind::unsupported(None),
        ];
        for k in kinds {
            let v = serde_json::to_value(&k).unwrap();
            let tag = k.message_type().as_str();
            assert_eq!(v["type"], tag);
            assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
            assert_eq!(v[tag], k.member());
            assert_eq!(serde_json::from_value::<MessageKind>(v).unwrap(), k);
            assert_eq!(
                MessageKind::from_stored(k.message_type(), &k.member()),
                Some(k)
            );
        }
    }

    #[test]
    fn flow_replies_are_parsed() {
        let raw = json!({"type": "nfm_reply", "nfm_reply": {
            "name": "flow", "body": "Sent",
            "response_json": "{\"flow_token\": \"tok-1\", \"choice\": \"b\", \"n\": 3}"
        }});
        let v = inbound_interactive(raw);
        assert_eq!(
            v["nfm_reply"],
            json!({"name": "flow", "body": "Sent", "flow_token": "tok-1",
                   "response": {"flow_token": "tok-1", "choice": "b", "n": 3}})
        );
        // Without a flow token; a response_json that is not JSON is kept as it came.
        let v =
            inbound_interactive(json!({"type": "nfm_reply", "nfm_reply": {"response_json": "{}"}}));
        assert_eq!(v["nfm_reply"], json!({"response": {}, "flow_token": null}));
        let v = inbound_interactive(
            json!({"type": "nfm_reply", "nfm_reply": {"response_json": "not json"}}),
        );
        assert_eq!(
            v["nfm_reply"],
            json!({"response_json": "not json", "response": null, "flow_token": null})
        );
        let other = json!({"type": "list_reply", "list_reply": {"id": "1", "title": "One"}});
        assert_eq!(inbound_interactive(other.clone()), other);
    }

    #[test]
    fn locations_are_checked() {
        assert!(validate_location(Some(90.0), Some(-180.0), None, None).is_ok());
        let e = validate_location(Some(90.5), Some(181.0), Some(""), None).unwrap_err();
        assert_eq!(
            fields(&e),
            ["location.latitude", "location.longitude", "location.name"]
        );
        let e = validate_location(None, Some(f64::NAN), None, None).unwrap_err();
        assert_eq!(fields(&e), ["location.latitude", "location.longitude"]);
    }

    #[test]
    fn contacts_are_checked() {
        assert_eq!(
            fields(&validate_contacts(Some(&json!([]))).unwrap_err()),
            ["contacts"]
        );
        assert_eq!(fields(&validate_contacts(None).unwrap_err()), ["contacts"]);
        assert_eq!(
            fields(&validate_contacts(Some(&json!({}))).unwrap_err()),
            ["contacts"]
        );
        let e = validate_contacts(Some(&json!([
            {"name": {"formatted_name": "Ann"}, "phones": [{"phone": ""}]},
            {"name": {}},
            7
        ])))
        .unwrap_err();
        assert_eq!(
            fields(&e),
            [
                "contacts[0].phones[0].phone",
                "contacts[1].name.formatted_name",
                "contacts[2]"
            ]
        );
        let ok = validate_contacts(Some(&json!([
            {"name": {"formatted_name": "Ann"}, "phones": [{"phone": "+4915123456789", "type": "CELL"}]}
        ])))
        .unwrap();
        assert_eq!(ok.contacts.len(), 1);
    }

    #[test]
    fn reaction_emojis() {
        assert_eq!(validate_reaction_emoji(Some("")).unwrap(), None);
        assert_eq!(
            validate_reaction_emoji(Some("👍🏽")).unwrap().as_deref(),
            Some("👍🏽")
        );
        for bad in [None, Some(" "), Some("ok"), Some("😀😀😀😀😀😀😀😀😀😀😀")]
        {
            assert_eq!(
                fields(&validate_reaction_emoji(bad).unwrap_err()),
                ["reaction.emoji"],
                "{bad:?}"
            );
        }
    }

    #[test]
    fn inbound_context_and_shown_form() {
        let ctx = InboundContext {
            reply_to: Some(ReplyTo {
                message_uuid: None,
                provider_message_id: "wamid.A".into(),
            }),
            forwarded: true,
            frequently_forwarded: false,
            referral: None,
        };
        assert!(!ctx.is_empty());
        assert!(InboundContext::default().is_empty());
        assert_eq!(
            shown(&MessageKind::text("x"), &ctx),
            json!({"type": "text", "text": {"body": "x"},
                   "reply_to": {"message_uuid": null, "provider_message_id": "wamid.A"},
                   "forwarded": true, "frequently_forwarded": false, "referral": null})
        );
        let mut k = reaction(Some("👍".into()), None, "wamid.A");
        assert_eq!(k.target_provider_id(), Some("wamid.A"));
        let id = Uuid::now_v7();
        k.set_target_uuid(Some(id));
        assert_eq!(k.member()["message_uuid"], json!(id));
    }
}
