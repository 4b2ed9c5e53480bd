//! The message kinds in the OpenAPI document (CONVENTIONS "Every kind of message, in and
//! out"): `MessageKind`, a `oneOf` with the discriminator `type`, one object per kind with
//! `type` and the member named after it; `MessageOut` (the API's message, and `message` in
//! every `message.*` event's data) carries `type` and the members.

use serde_json::{Map, Value, json};

use switchboard_domain::message::MessageType;

/// The member schema of each kind (components registered by `openapi::BaseApi`; `null` when
/// the member is a free-form object).
fn member_schema(t: MessageType) -> Value {
    let component = match t {
        MessageType::Text => Some("TextMember"),
        MessageType::Media => None,
        MessageType::Interactive | MessageType::Template => None,
        MessageType::Reaction => Some("ReactionMember"),
        MessageType::Location => Some("LocationMember"),
        MessageType::Contacts => Some("ContactsMember"),
        MessageType::Order => Some("OrderMember"),
        MessageType::System => Some("SystemMember"),
        MessageType::Unsupported => Some("UnsupportedMember"),
    };
    match (component, t) {
        (Some(c), _) => json!({"$ref": format!("#/components/schemas/{c}")}),
        (None, MessageType::Media) => json!({
            "description": "Outbound: `{\"media_type\", \"media_url\", \"caption\", \"file_name\"}`; inbound: the `MediaMember` (the provider's media id, `voice`, `animated`).",
            "oneOf": [{"$ref": "#/components/schemas/MediaMember"}, {"type": "object"}],
        }),
        (None, MessageType::Interactive) => json!({
            "type": "object",
            "description": "The WhatsApp Cloud API `interactive` object. Inbound replies: `button_reply` `{\"id\", \"title\"}`, `list_reply` `{\"id\", \"title\", \"description\"}`, `button` (a template quick reply) `{\"payload\", \"text\"}`, `nfm_reply` (a Flow reply) `{\"name\", \"body\", \"response\": the parsed response_json, \"flow_token\"}`.",
        }),
        (None, _) => json!({
            "type": "object",
            "description": "`{\"name\", \"language\", \"components\"}`.",
        }),
    }
}

/// `Message` + the type's name in CamelCase: `reaction` -> `ReactionMessage`.
fn kind_schema_name(t: MessageType) -> String {
    let s = t.as_str();
    let mut out: String = s[..1].to_uppercase();
    out.push_str(&s[1..]);
    out.push_str("Message");
    out
}

/// Adds `MessageKind` and one schema per kind to the rendered document, and makes
/// `MessageOut` one of them.
pub fn add_to(doc: &mut Value) {
    let mut schemas = Map::new();
    let mut mapping = Map::new();
    let mut one_of = Vec::new();
    for t in MessageType::ALL {
        let name = kind_schema_name(*t);
        let reference = format!("#/components/schemas/{name}");
        schemas.insert(
            name.clone(),
            json!({
                "type": "object",
                "description": format!("A `{}` message: `type` and the member `{}` (null when the customer deleted the message).", t, t),
                "required": ["type", t.as_str()],
                "properties": {
                    "type": {"type": "string", "enum": [t.as_str()]},
                    t.as_str(): member_schema(*t),
                },
            }),
        );
        mapping.insert(t.as_str().into(), json!(reference));
        one_of.push(json!({"$ref": reference}));
    }
    schemas.insert(
        "MessageKind".into(),
        json!({
            "description": "Every kind of message: `{\"type\": \"<kind>\", \"<kind>\": {...member}}`, on the API, in `message.*` event data and in the console.",
            "oneOf": one_of,
            "discriminator": {"propertyName": "type", "mapping": mapping},
        }),
    );
    let Some(components) = doc["components"]["schemas"].as_object_mut() else {
        return;
    };
    components.extend(schemas);
    // `MessageOut` has `type` and every member as properties of its own (the one `type` names
    // is present): it points at `MessageKind` rather than being an `allOf` of it, which client
    // generators cannot take (an `allOf` of a `oneOf`).
    if let Some(message) = components.get_mut("MessageOut") {
        message["description"] = json!(
            "A message: `type` and the member named after it (see `MessageKind`, a `oneOf` with the discriminator `type`), with its channel, contact, status and, inbound, its context."
        );
    }
}
