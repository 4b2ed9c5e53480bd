//! The document's `webhooks` (OpenAPI 3.1) and `servers`: one operation per event this
//! deployment emits, whose request body is that event's envelope exactly as a delivery carries
//! it. Each event's schema and example come from the same builders as the typed test events
//! (`ops::samples`), so they cannot drift from what is delivered: the example is a real
//! envelope, and the schema is read off it, with the resources it embeds (`message`,
//! `contact`, `conversation`, `channel`) pointing at their component schemas.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::ops::samples::{SampleContext, sample_event};
use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::catalogue::{self, EMITTED};

/// Members of an event's `data` that are whole resources, and their component schemas.
const RESOURCES: &[(&str, &str)] = &[
    ("message", "MessageOut"),
    ("contact", "ContactOut"),
    ("conversation", "ConversationOut"),
    ("channel", "ChannelIdentity"),
];

/// The headers of every delivery (CONVENTIONS "Webhooks" and Standard Webhooks).
const DELIVERY_HEADERS: &[(&str, &str)] = &[
    ("X-Switchboard-Event", "The event name."),
    (
        "X-Switchboard-Delivery",
        "The delivery's UUID (the same in every attempt).",
    ),
    (
        "X-Switchboard-Timestamp",
        "Unix seconds: the signed timestamp.",
    ),
    ("X-Switchboard-Attempt", "The attempt number, from 1."),
    (
        "X-Switchboard-Signature",
        "v1= and the lowercase hex HMAC-SHA256 of `{timestamp}.{raw body}` keyed with the UTF-8 bytes of the whole signing_secret; during a rotation's grace one v1= value per valid secret, comma-separated.",
    ),
    ("webhook-id", "Standard Webhooks: the delivery's UUID."),
    ("webhook-timestamp", "Standard Webhooks: Unix seconds."),
    (
        "webhook-signature",
        "Standard Webhooks: v1, and the base64 HMAC-SHA256 with the secret's key bytes; verify with the official libraries.",
    ),
];

/// Adds `servers`, the envelope's component schemas and `webhooks` to the rendered document.
pub fn add_to(doc: &mut Value) {
    doc["servers"] = json!([
        {"url": "http://127.0.0.1:8080", "description": "A local `switchboard serve` (the default listen address)."},
        {"url": "{base_url}", "description": "Your deployment.",
         "variables": {"base_url": {"default": "https://switchboard.example.com",
                                    "description": "The public base URL of the deployment (behind its TLS proxy)."}}}
    ]);
    let known: Vec<String> = doc["components"]["schemas"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut schemas = Map::new();
    schemas.insert("EventMetadata".into(), metadata_schema());
    let mut webhooks = Map::new();
    let cx = sample_context();
    for name in EMITTED {
        let Some(event) = sample_event(name, &cx) else {
            continue;
        };
        let envelope = event.envelope();
        let schema_name = schema_name(name);
        schemas.insert(
            schema_name.clone(),
            event_schema(name, &envelope["data"], &known),
        );
        let description = catalogue::lookup(name).map_or("", |e| e.description);
        webhooks.insert(
            (*name).to_owned(),
            json!({"post": {
                "operationId": format!("event_{}", name.replace('.', "_")),
                "summary": description,
                "description": format!("The envelope of `{name}` as every delivery of it carries it (and the event feed and stream serve it). Verify the signature over the raw bytes before parsing; answer any 2xx to acknowledge. The example is a typed test sample (`metadata.test: true`)."),
                "tags": ["webhook events"],
                "parameters": DELIVERY_HEADERS.iter().map(|(h, d)| json!({
                    "name": h, "in": "header", "required": true,
                    "description": d, "schema": {"type": "string"},
                })).collect::<Vec<_>>(),
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": {"$ref": format!("#/components/schemas/{schema_name}")},
                    "example": envelope,
                }}},
                "responses": {
                    "200": {"description": "Any 2xx acknowledges the delivery."},
                    "410": {"description": "Any other 4xx but 408, 425 and 429 is a permanent rejection: not retried."},
                    "503": {"description": "408, 425, 429, 5xx or no answer in time: retried (30 s, 5 min, 30 min by default)."},
                },
            }}),
        );
    }
    if let Some(components) = doc["components"]["schemas"].as_object_mut() {
        components.extend(schemas);
    }
    doc["webhooks"] = Value::Object(webhooks);
}

/// `message.status.update` -> `MessageStatusUpdateEvent`.
pub fn schema_name(event: &str) -> String {
    let mut out = String::new();
    for part in event.split(['.', '_']) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out.push_str("Event");
    out
}

fn sample_context() -> SampleContext<'static> {
    SampleContext {
        org_id: 1,
        endpoint_uuid: Uuid::nil(),
        endpoint_name: "CRM",
        endpoint_url: "https://crm.example.com/hooks/switchboard",
        channel: None,
        now: Timestamp::from_millis(1_786_000_000_000),
    }
}

fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "required": ["event_id", "event_type", "api_version", "occurred_at", "organization_id"],
        "properties": {
            "event_id": {"type": "string", "format": "uuid", "description": "The deduplication key for consumers."},
            "event_type": {"type": "string", "description": "The event name."},
            "api_version": {"type": "string", "enum": ["v1"]},
            "occurred_at": {"type": "string", "format": "date-time"},
            "organization_id": {"type": "integer"},
            "test": {"type": "boolean", "description": "Present and true on typed test events only."},
        },
    })
}

fn event_schema(name: &str, data: &Value, known: &[String]) -> Value {
    json!({
        "type": "object",
        "description": format!("The envelope of `{name}`."),
        "required": ["event", "data", "metadata", "channel"],
        "properties": {
            "event": {"type": "string", "enum": [name]},
            "data": infer(data, known),
            "metadata": {"$ref": "#/components/schemas/EventMetadata"},
            "channel": {"oneOf": [
                {"$ref": "#/components/schemas/ChannelIdentity"},
                {"type": "null"},
            ]},
        },
    })
}

/// A schema read off a sample value: its types, objects with every member required (the
/// builders always write every member), RFC 3339 times and UUIDs as formats, and the
/// resources of [`RESOURCES`] as references to their component schemas.
fn infer(v: &Value, known: &[String]) -> Value {
    match v {
        Value::Null => json!({"description": "Null in the sample; may carry a value."}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"type": "integer"}),
        Value::Number(_) => json!({"type": "number"}),
        Value::String(s) if Uuid::parse_str(s).is_ok() => {
            json!({"type": "string", "format": "uuid"})
        }
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => {
            json!({"type": "string", "format": "date-time"})
        }
        Value::String(_) => json!({"type": "string"}),
        Value::Array(items) => json!({
            "type": "array",
            "items": items.first().map_or_else(|| json!({}), |first| infer(first, known)),
        }),
        Value::Object(map) => {
            let mut properties = Map::new();
            for (key, member) in map {
                let resource = RESOURCES
                    .iter()
                    .find(|(k, schema)| k == key && known.iter().any(|s| s == schema));
                let schema = match (resource, member) {
                    (Some((_, schema)), Value::Null) => json!({"oneOf": [
                        {"$ref": format!("#/components/schemas/{schema}")},
                        {"type": "null"},
                    ]}),
                    (Some((_, schema)), _) => {
                        json!({"$ref": format!("#/components/schemas/{schema}")})
                    }
                    (None, member) => infer(member, known),
                };
                properties.insert(key.clone(), schema);
            }
            json!({
                "type": "object",
                "required": map.keys().collect::<Vec<_>>(),
                "properties": properties,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_emitted_event_has_a_webhook_with_its_envelope() {
        let mut doc = serde_json::to_value(super::super::openapi::document()).unwrap();
        add_to(&mut doc);
        let webhooks = doc["webhooks"].as_object().unwrap();
        for name in EMITTED {
            let op = &webhooks[*name]["post"];
            let content = &op["requestBody"]["content"]["application/json"];
            assert_eq!(content["example"]["event"], *name, "{name}");
            let reference = content["schema"]["$ref"].as_str().unwrap();
            let schema_name = reference.rsplit('/').next().unwrap();
            let schema = &doc["components"]["schemas"][schema_name];
            assert_eq!(schema["properties"]["event"]["enum"][0], *name);
            // Every member of the example's data is described.
            for key in content["example"]["data"].as_object().unwrap().keys() {
                assert!(
                    schema["properties"]["data"]["properties"][key].is_object(),
                    "{name}: data.{key}"
                );
            }
        }
        assert_eq!(
            webhooks["message.sent"]["post"]["requestBody"]["content"]["application/json"]["example"]
                ["data"]["message"]["type"],
            "text"
        );
        let sent = &doc["components"]["schemas"]["MessageSentEvent"];
        assert_eq!(
            sent["properties"]["data"]["properties"]["message"]["$ref"],
            "#/components/schemas/MessageOut"
        );
        assert!(doc["servers"][0]["url"].is_string());
    }

    #[test]
    fn schema_names_are_pascal_case() {
        assert_eq!(
            schema_name("message.status.update"),
            "MessageStatusUpdateEvent"
        );
        assert_eq!(
            schema_name("webhook.endpoint_disabled"),
            "WebhookEndpointDisabledEvent"
        );
    }
}
