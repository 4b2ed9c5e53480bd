//! The OpenAPI document, generated from the handlers' annotations and served at
//! `/api/v1/integrations/openapi.json`.

use std::sync::OnceLock;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};

use super::error::{ErrorBody, ErrorObject};
use super::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Switchboard Integrations API",
        version = "v1",
        description = "Organization-scoped API keys with scopes, channel-aware message sending, organization data reads and signed webhooks with durable delivery. Every error has the body {\"error\": {\"code\", \"message\", \"request_id\", \"details\"}}; every authenticated response carries RateLimit headers; every response carries X-Request-Id."
    ),
    components(schemas(
        ErrorBody, ErrorObject, switchboard_domain::FieldError, switchboard_domain::channel::ChannelIdentity,
        switchboard_domain::message::TextMember, switchboard_domain::message::MediaMember,
        switchboard_domain::message::ReactionMember, switchboard_domain::message::LocationMember,
        switchboard_domain::message::ContactsMember, switchboard_domain::message::OrderMember,
        switchboard_domain::message::OrderItem, switchboard_domain::message::SystemMember,
        switchboard_domain::message::UnsupportedMember, switchboard_domain::message::ProviderIssue,
        switchboard_domain::message::InboundContext, switchboard_domain::message::ReplyTo,
        switchboard_domain::message::Referral,
    )),
    tags(
        (name = "channels", description = "Messaging channels."),
        (name = "contacts", description = "The organization's contacts: find the contact_uuid a send or a filter needs."),
        (name = "organization", description = "Organization data: members with roles and effective permissions, the permission and scope catalogues, and the audit, admin and security log."),
        (name = "messages", description = "Sending messages (text, interactive, media, templates; Idempotency-Key required), message history and each message's journey."),
        (name = "templates", description = "The template catalogue: find the template_uuid a catalog send names."),
        (name = "inbound", description = "Provider callbacks (WhatsApp Cloud API webhooks, Telegram updates); public, verified by the provider's signature or secret."),
        (name = "webhooks", description = "The event catalogue, webhook endpoints and the delivery ledger."),
        (name = "operations", description = "Health, readiness, metrics and this document.")
    )
)]
struct BaseApi;

/// The whole document.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = BaseApi::openapi();
    for part in [
        super::channels::ChannelsApi::openapi(),
        super::contacts::ContactsApi::openapi(),
        super::users::UsersApi::openapi(),
        super::permissions::PermissionsApi::openapi(),
        super::events::EventsApi::openapi(),
        super::messages::MessagesApi::openapi(),
        super::templates::TemplatesApi::openapi(),
        super::inbound::InboundApi::openapi(),
        super::webhooks::WebhooksApi::openapi(),
        super::health::HealthApi::openapi(),
        super::console::ConsoleApi::openapi(),
        super::legacy::LegacyApi::openapi(),
        OpenApiDocApi::openapi(),
    ] {
        doc.merge(part);
    }
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("sbk_ API key")
                .description(Some("Authorization: Bearer <API_KEY>. Keys are created with `switchboard admin key create`."))
                .build(),
        ),
    );
    add_standard_errors(&mut doc);
    doc
}

/// Adds the error responses every authenticated operation can give, where not documented.
fn add_standard_errors(doc: &mut utoipa::openapi::OpenApi) {
    let error = |description: &str| -> RefOr<utoipa::openapi::Response> {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
            .into()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let v1 = path.starts_with("/api/v1/integrations/");
        for (write, op) in [
            (false, &mut item.get),
            (true, &mut item.post),
            (true, &mut item.put),
            (true, &mut item.delete),
            (true, &mut item.patch),
        ]
        .into_iter()
        .filter_map(|(w, op)| op.as_mut().map(|op| (w, op)))
        {
            let authenticated = op.security.as_ref().is_some_and(|s| !s.is_empty());
            let has_body = op.request_body.is_some();
            let responses = &mut op.responses.responses;
            if has_body {
                responses.entry("400".into()).or_insert_with(|| {
                    error(
                        "malformed_json (the body is not a JSON object), or a bad Idempotency-Key.",
                    )
                });
            }
            if authenticated && write && v1 {
                // Idempotency-Key is honoured on every v1 write (CONVENTIONS "Idempotency").
                responses.entry("400".into()).or_insert_with(|| {
                    error("idempotency_key_invalid: a malformed Idempotency-Key.")
                });
                responses.entry("409".into()).or_insert_with(|| {
                    error("idempotency_conflict (the key was used with another request) or idempotency_in_progress.")
                });
            }
            if authenticated {
                responses
                    .entry("401".into())
                    .or_insert_with(|| error("Missing, invalid, expired or revoked API key."));
                responses
                    .entry("403".into())
                    .or_insert_with(|| error("The key lacks the required scope."));
                responses
                    .entry("429".into())
                    .or_insert_with(|| error("Rate limited; see Retry-After."));
            }
            responses
                .entry("500".into())
                .or_insert_with(|| error("Internal error."));
            responses
                .entry("503".into())
                .or_insert_with(|| error("Temporarily unavailable; retry with backoff."));
        }
    }
}

fn rendered() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = serde_json::to_value(document()).expect("the OpenAPI document serializes");
        super::openapi_kinds::add_to(&mut doc);
        super::openapi_webhooks::add_to(&mut doc);
        serde_json::to_string_pretty(&doc).expect("the OpenAPI document serializes")
    })
}

/// This document.
#[utoipa::path(get, path = "/api/v1/integrations/openapi.json", tag = "operations", responses((status = 200, description = "The OpenAPI document of this deployment.")))]
pub async fn openapi_json() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], rendered())
}

#[derive(OpenApi)]
#[openapi(paths(openapi_json))]
struct OpenApiDocApi;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/integrations/openapi.json", get(openapi_json))
}

#[cfg(test)]
mod tests {
    /// The message kinds (`openapi_kinds`): a `oneOf` with the discriminator `type`.
    #[test]
    fn every_kind_is_a_one_of_with_a_discriminator() {
        let doc: serde_json::Value = serde_json::from_str(super::rendered()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let kind = &schemas["MessageKind"];
        assert_eq!(kind["discriminator"]["propertyName"], "type");
        assert_eq!(
            kind["oneOf"].as_array().unwrap().len(),
            switchboard_domain::message::MessageType::ALL.len()
        );
        for t in switchboard_domain::message::MessageType::ALL {
            let reference = kind["discriminator"]["mapping"][t.as_str()]
                .as_str()
                .unwrap();
            let name = reference.rsplit('/').next().unwrap();
            let schema = &schemas[name];
            assert_eq!(
                schema["properties"]["type"]["enum"],
                serde_json::json!([t.as_str()])
            );
            // Every member schema it points at is in the document.
            let member = &schema["properties"][t.as_str()];
            for r in member.get("$ref").into_iter().chain(
                member["oneOf"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.get("$ref")),
            ) {
                let target = r.as_str().unwrap().rsplit('/').next().unwrap();
                assert!(schemas[target].is_object(), "{target} is not a component");
            }
        }
        // MessageOut has `type` and every member as its own properties, and names MessageKind.
        let parts = schemas["MessageOut"]["allOf"].as_array().unwrap();
        let own = parts
            .iter()
            .find_map(|p| p["properties"].as_object())
            .unwrap();
        for t in switchboard_domain::message::MessageType::ALL {
            assert!(own.contains_key(t.as_str()), "MessageOut lacks {t}");
        }
        assert!(own.contains_key("type"));
        assert!(
            schemas["MessageOut"]["description"]
                .as_str()
                .unwrap()
                .contains("MessageKind")
        );
        // The flattened inbound context (null for outbound messages).
        assert!(
            serde_json::json!(parts)
                .to_string()
                .contains("#/components/schemas/InboundContext")
        );
        let own = parts.iter().find(|p| p["properties"].is_object()).unwrap();
        for field in [
            "reaction",
            "location",
            "contacts",
            "order",
            "system",
            "unsupported",
            "deleted_at",
        ] {
            assert!(
                own["properties"][field].is_object(),
                "MessageOut lacks {field}"
            );
        }
        for field in ["reply_to", "forwarded", "frequently_forwarded", "referral"] {
            assert!(
                schemas["InboundContext"]["properties"][field].is_object(),
                "InboundContext lacks {field}"
            );
        }
    }

    #[test]
    fn every_operation_documents_errors() {
        let doc = super::document();
        let json = serde_json::to_value(&doc).unwrap();
        let paths = json["paths"].as_object().unwrap();
        assert!(paths.contains_key("/api/v1/integrations/channels"));
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                assert!(
                    op["responses"]["500"].is_object(),
                    "{method} {path} lacks a 500 response"
                );
            }
        }
        assert!(json["components"]["securitySchemes"]["bearer"].is_object());
    }

    /// Client generators name a method per operationId: two operations with one id collide.
    #[test]
    fn operation_ids_are_unique() {
        let json = serde_json::to_value(super::document()).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for (path, item) in json["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap_or_default().to_owned();
                assert!(!id.is_empty(), "{method} {path} has no operationId");
                if let Some(first) = seen.insert(id.clone(), format!("{method} {path}")) {
                    panic!("operationId {id} is used by {first} and by {method} {path}");
                }
            }
        }
    }
}
