//! The WhatsApp Cloud API (Meta Graph API).
//!
//! Sends: `POST {api_base_url}/{phone_number_id}/messages` with `Authorization: Bearer
//! {access_token}` and `{"messaging_product": "whatsapp", "recipient_type": "individual", "to":
//! "<E.164 digits without +>", "type": ..., <type>: {...}}`; the answer's `messages[0].id` (the
//! `wamid`) is the provider message id.
//!
//! Callbacks on `/inbound/{channel_uuid}`: the subscription handshake (`hub.mode=subscribe`,
//! `hub.verify_token`, `hub.challenge`) and POSTs signed with `X-Hub-Signature-256: sha256=<hex
//! HMAC-SHA256 of the raw body keyed with the app secret>`, carrying `messages` and `statuses`.
//!
//! Media: the service fetches and checks the file (`crate::media`), uploads it with
//! `POST {api_base_url}/{phone_number_id}/media` (multipart) and sends by the media `id`.
//!
//! Provider configuration: `{"phone_number_id", "access_token", "app_secret", "verify_token",
//! "api_base_url"?}` (`api_base_url` defaults to [`DEFAULT_API_BASE_URL`]).

use std::collections::HashMap;

use async_trait::async_trait;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

pub use super::whatsapp_callbacks::parse_callback;
pub use super::whatsapp_kinds::payload;
use super::{
    Accepted, InboundError, Outgoing, ParsedCallback, Provider, ProviderError, describe_reqwest,
    read_answer, secrets_equal, strip_nul,
};
use switchboard_domain::channel::ChannelType;
use switchboard_domain::contact::Contact;
use switchboard_domain::message::{MessageStatus, MessageType};
use switchboard_domain::pacing::{DEFAULT_MAX_PER_SECOND, MAX_MAX_PER_SECOND};

/// The Graph API version Switchboard speaks by default.
pub const DEFAULT_API_BASE_URL: &str = "https://graph.facebook.com/v21.0";

/// Graph error codes that mean "too fast, try again later" (sent with HTTP 400 or 429).
const THROTTLING_CODES: &[i64] = &[4, 80007, 130429, 131056];

#[derive(Clone, Default)]
pub struct Config {
    pub phone_number_id: Option<String>,
    /// The WhatsApp Business Account (template sync reads its `message_templates`).
    pub waba_id: Option<String>,
    pub access_token: Option<String>,
    pub app_secret: Option<String>,
    pub verify_token: Option<String>,
    pub api_base_url: Option<String>,
    /// Sends per second at most (`max_per_second`, default 80).
    pub max_per_second: u32,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("phone_number_id", &self.phone_number_id)
            .field("api_base_url", &self.api_base_url)
            .finish_non_exhaustive()
    }
}

/// The first of `keys` that is set (the documented name first, then accepted aliases).
fn setting(config: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|key| match config.get(*key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

impl Config {
    /// Reads the configuration. `identifier` (the channel's provider identifier) stands in for
    /// a missing `phone_number_id`: for WhatsApp Cloud channels they are the same id.
    pub fn from_json(config: &Value, identifier: Option<&str>) -> Config {
        Config {
            phone_number_id: setting(config, &["phone_number_id"]).or_else(|| {
                identifier
                    .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                    .map(str::to_owned)
            }),
            waba_id: setting(config, &["waba_id", "business_account_id"]),
            access_token: setting(config, &["access_token", "token"]),
            app_secret: setting(config, &["app_secret"]),
            verify_token: setting(config, &["verify_token"]),
            api_base_url: setting(config, &["api_base_url", "base_url", "graph_api_base_url"]),
            max_per_second: setting(config, &["max_per_second"])
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|n| (1..=MAX_MAX_PER_SECOND).contains(n))
                .unwrap_or(DEFAULT_MAX_PER_SECOND),
        }
    }
}

pub struct WhatsappCloud {
    http: reqwest::Client,
    config: Config,
}

impl WhatsappCloud {
    pub fn new(http: reqwest::Client, config: Config) -> Self {
        WhatsappCloud { http, config }
    }

    /// The phone number id and access token every send and upload needs.
    fn sender(&self) -> Result<(&str, &str), ProviderError> {
        match (&self.config.phone_number_id, &self.config.access_token) {
            (Some(id), Some(token)) => Ok((id, token)),
            _ => Err(ProviderError::NotConfigured(
                "The channel's provider configuration lacks phone_number_id or access_token."
                    .into(),
            )),
        }
    }

    fn messages_url(&self, phone_number_id: &str) -> Result<url::Url, ProviderError> {
        self.graph_url(&[phone_number_id, "messages"])
    }

    /// `{api_base_url}/{segments...}`.
    fn graph_url(&self, segments: &[&str]) -> Result<url::Url, ProviderError> {
        let base = self
            .config
            .api_base_url
            .as_deref()
            .unwrap_or(DEFAULT_API_BASE_URL);
        let mut url = url::Url::parse(base).map_err(|_| {
            ProviderError::NotConfigured("The channel's api_base_url is not a URL.".into())
        })?;
        url.path_segments_mut()
            .map_err(|_| {
                ProviderError::NotConfigured("The channel's api_base_url is not a URL.".into())
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }
}

/// The most pages of templates read in one sync (at 100 per page: 10 000 templates).
const MAX_TEMPLATE_PAGES: usize = 100;

/// Reads one page of `GET /{waba_id}/message_templates`: the templates, and the cursor of the
/// next page when there is one.
pub fn read_template_page(
    body: &[u8],
) -> Result<(Vec<super::RemoteTemplate>, Option<String>), String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|_| "the template list is not JSON".to_owned())?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| "the template list has no `data` array".to_owned())?;
    let text = |t: &Value, k: &str| {
        t.get(k)
            .and_then(|x| match x {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.trim().is_empty())
    };
    let mut out = Vec::with_capacity(data.len());
    for t in data {
        let (Some(name), Some(language)) = (text(t, "name"), text(t, "language")) else {
            continue;
        };
        out.push(super::RemoteTemplate {
            provider_template_id: text(t, "id"),
            name,
            language,
            category: text(t, "category").unwrap_or_default(),
            status: text(t, "status").unwrap_or_default(),
            components: t.get("components").cloned().unwrap_or(json!([])),
        });
    }
    // Meta gives `paging.next` only when there is a next page.
    let next = v
        .get("paging")
        .filter(|p| p.get("next").is_some())
        .and_then(|p| p.get("cursors")?.get("after")?.as_str())
        .map(str::to_owned);
    Ok((out, next))
}

/// Classifies a Graph API answer.
pub fn read_send_answer(status: u16, body: &[u8]) -> Result<Accepted, ProviderError> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        let id = parsed
            .as_ref()
            .and_then(|v| v.get("messages")?.get(0)?.get("id")?.as_str())
            .filter(|id| !id.is_empty() && id.len() <= 512 && !id.contains('\0'));
        return match id {
            Some(id) => Ok(Accepted {
                provider_message_id: id.to_owned(),
                status: MessageStatus::Sent,
            }),
            None => Err(ProviderError::Unavailable(
                "the provider's answer has no message id".into(),
            )),
        };
    }
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let code = error.and_then(|e| e.get("code")).cloned();
    let throttled = code
        .as_ref()
        .and_then(Value::as_i64)
        .is_some_and(|c| THROTTLING_CODES.contains(&c));
    let text = |k: &str| {
        error
            .and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .map(|s| s.chars().take(1000).collect::<String>())
    };
    if status == 429 || throttled {
        return Err(ProviderError::Throttled {
            http_status: status,
            code,
            message: text("message").unwrap_or_else(|| "the provider throttled the send".into()),
        });
    }
    if status >= 500 || !(400..500).contains(&status) {
        return Err(ProviderError::Unavailable(format!(
            "the provider answered HTTP {status}"
        )));
    }
    let mut details = Map::new();
    for key in [
        "type",
        "error_subcode",
        "fbtrace_id",
        "error_user_title",
        "error_user_msg",
    ] {
        if let Some(v) = error.and_then(|e| e.get(key)) {
            details.insert(key.into(), v.clone());
        }
    }
    if let Some(d) = error
        .and_then(|e| e.get("error_data"))
        .and_then(|d| d.get("details"))
    {
        details.insert("details".into(), d.clone());
    }
    let mut details = Value::Object(details);
    strip_nul(&mut details);
    Err(ProviderError::Rejected {
        http_status: status,
        code,
        message: text("message")
            .unwrap_or_else(|| format!("the provider refused the message (HTTP {status})")),
        details,
    })
}

/// Classifies the answer to a media upload (`POST /{phone_number_id}/media`): the media id, or
/// the error as for a send.
pub fn read_upload_answer(status: u16, body: &[u8]) -> Result<String, ProviderError> {
    if (200..300).contains(&status) {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        return parsed
            .as_ref()
            .and_then(|v| match v.get("id")? {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|id| !id.is_empty() && id.len() <= 512 && !id.contains('\0'))
            .ok_or_else(|| {
                ProviderError::Unavailable("the provider's answer has no media id".into())
            });
    }
    match read_send_answer(status, body) {
        Err(e) => Err(e),
        Ok(_) => Err(ProviderError::Unavailable(format!(
            "the provider answered HTTP {status}"
        ))),
    }
}

/// Makes a Graph API call (with the current `traceparent`): its HTTP status and answer, read up
/// to [`super::MAX_ANSWER_BYTES`]; a call that got no answer is `Unavailable`.
async fn graph_call(request: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), ProviderError> {
    let resp = request
        .headers(super::trace_headers())
        .send()
        .await
        .map_err(|e| ProviderError::Unavailable(describe_reqwest(e)))?;
    let status = resp.status().as_u16();
    let body = read_answer(resp)
        .await
        .map_err(ProviderError::Unavailable)?;
    Ok((status, body))
}

#[async_trait]
impl Provider for WhatsappCloud {
    fn channel_type(&self) -> ChannelType {
        ChannelType::WhatsappCloud
    }

    fn supports(&self, _: MessageType) -> bool {
        true
    }

    fn max_per_second(&self) -> Option<u32> {
        Some(self.config.max_per_second)
    }

    fn check_recipient(&self, contact: &Contact) -> Result<(), String> {
        if contact.phone.is_some() {
            Ok(())
        } else {
            Err("the contact has no phone number, which WhatsApp needs".into())
        }
    }

    /// `POST /{phone_number_id}/messages`; a reply carries `context.message_id`, a reference
    /// goes as `biz_opaque_callback_data` (the Graph API echoes it in the status webhooks).
    async fn send(&self, to: &Contact, out: &Outgoing<'_>) -> Result<Accepted, ProviderError> {
        let (phone_number_id, token) = self.sender()?;
        let phone = to
            .phone
            .as_ref()
            .ok_or_else(|| ProviderError::Unsupported("The contact has no phone number.".into()))?;
        let url = self.messages_url(phone_number_id)?;
        let mut body = payload(phone.digits(), out.content);
        if let Some(reply_to) = out.reply_to {
            body["context"] = json!({ "message_id": reply_to });
        }
        if let Some(reference) = out.reference {
            body["biz_opaque_callback_data"] = json!(reference);
        }
        let (status, body) = graph_call(self.http.post(url).bearer_auth(token).json(&body)).await?;
        read_send_answer(status, &body)
    }

    fn uploads_media(&self) -> bool {
        true
    }

    /// `POST /{phone_number_id}/messages` `{"messaging_product": "whatsapp", "status": "read",
    /// "message_id"}`, with `"typing_indicator": {"type": "text"}` when `typing`.
    async fn mark_read(
        &self,
        provider_message_id: &str,
        typing: bool,
    ) -> Result<(), ProviderError> {
        let (phone_number_id, token) = self.sender()?;
        let url = self.messages_url(phone_number_id)?;
        let mut body = json!({
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": provider_message_id,
        });
        if typing {
            body["typing_indicator"] = json!({ "type": "text" });
        }
        let (status, answer) =
            graph_call(self.http.post(url).bearer_auth(token).json(&body)).await?;
        if (200..300).contains(&status) {
            return Ok(());
        }
        // The error shape is a send's.
        read_send_answer(status, &answer).map(|_| ())
    }

    /// `POST /{phone_number_id}/media`, multipart: `messaging_product=whatsapp`, `type=<mime>`,
    /// `file=<bytes>` (the buffer is handed to the request without a copy).
    async fn upload_media(&self, file: super::MediaFile) -> Result<String, ProviderError> {
        let (phone_number_id, token) = self.sender()?;
        let url = self.graph_url(&[phone_number_id, "media"])?;
        let part = reqwest::multipart::Part::bytes(file.bytes)
            .file_name(file.file_name)
            .mime_str(&file.mime)
            .map_err(|_| ProviderError::Unsupported("The media type is not a MIME type.".into()))?;
        let form = reqwest::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", file.mime)
            .part("file", part);
        let (status, body) = graph_call(
            self.http
                .post(url)
                .bearer_auth(token)
                .multipart(form)
                .timeout(file.timeout),
        )
        .await?;
        read_upload_answer(status, &body)
    }

    async fn list_templates(&self) -> Result<Vec<super::RemoteTemplate>, ProviderError> {
        let (Some(waba_id), Some(token)) = (&self.config.waba_id, &self.config.access_token) else {
            return Err(ProviderError::NotConfigured(
                "The channel's provider configuration lacks waba_id or access_token.".into(),
            ));
        };
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_TEMPLATE_PAGES {
            let mut url = self.graph_url(&[waba_id, "message_templates"])?;
            url.query_pairs_mut()
                .append_pair("limit", "100")
                .append_pair("fields", "id,name,language,status,category,components");
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after", a);
            }
            let (status, body) = graph_call(self.http.get(url).bearer_auth(token)).await?;
            if status != 200 {
                // The Graph API's error shape is the same as a send's.
                read_send_answer(status, &body)?;
                return Err(ProviderError::Unavailable(format!(
                    "The Graph API answered {status} to the template list."
                )));
            }
            let (page, next) = read_template_page(&body).map_err(ProviderError::Unavailable)?;
            all.extend(page);
            match next {
                Some(n) if Some(&n) != after.as_ref() => after = Some(n),
                _ => return Ok(all),
            }
        }
        Ok(all)
    }

    fn handshake(&self, query: &HashMap<String, String>) -> Result<String, InboundError> {
        let Some(expected) = &self.config.verify_token else {
            return Err(InboundError::Forbidden(
                "the channel has no verify_token configured",
            ));
        };
        if query.get("hub.mode").map(String::as_str) != Some("subscribe") {
            return Err(InboundError::Forbidden("hub.mode must be subscribe"));
        }
        let given = query
            .get("hub.verify_token")
            .map(String::as_str)
            .unwrap_or("");
        if !secrets_equal(given.as_bytes(), expected.as_bytes()) {
            return Err(InboundError::Forbidden("hub.verify_token does not match"));
        }
        match query.get("hub.challenge") {
            Some(c) if !c.is_empty() && c.len() <= 512 => Ok(c.clone()),
            _ => Err(InboundError::Forbidden("hub.challenge is missing")),
        }
    }

    fn verify_callback(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), InboundError> {
        let Some(secret) = &self.config.app_secret else {
            return Err(InboundError::Unauthorized(
                "the channel has no app_secret configured, so callbacks cannot be verified",
            ));
        };
        verify_signature(secret, headers, body)
    }

    fn parse_callback(&self, body: &[u8]) -> Result<ParsedCallback, InboundError> {
        parse_callback(self.config.phone_number_id.as_deref(), body)
    }
}

/// Checks `X-Hub-Signature-256: sha256=<hex>` over the raw body, in constant time.
pub fn verify_signature(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), InboundError> {
    let header = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .ok_or(InboundError::Unauthorized("X-Hub-Signature-256 is missing"))?;
    let hex_sig = header
        .trim()
        .strip_prefix("sha256=")
        .ok_or(InboundError::Unauthorized(
            "X-Hub-Signature-256 is not sha256=<hex>",
        ))?;
    let given = hex::decode(hex_sig)
        .map_err(|_| InboundError::Unauthorized("X-Hub-Signature-256 is not sha256=<hex>"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| InboundError::Unauthorized("X-Hub-Signature-256 does not match"))
}

/// The signature header value of a body (for tests and tools).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ParsedTemplateStatus;
    use switchboard_domain::contact::InboundSender;
    use switchboard_domain::message::MediaType;
    use switchboard_domain::message::{Content, Media, MessageKind, Template};

    #[test]
    fn reactions_locations_and_contacts_follow_the_graph_api() {
        use switchboard_domain::message::{ContactsMember, LocationMember, ReactionMember};
        let reaction = |emoji: Option<&str>| {
            payload(
                "4915123456789",
                &Content::Reaction(ReactionMember {
                    emoji: emoji.map(str::to_owned),
                    message_uuid: None,
                    provider_message_id: "wamid.A".into(),
                }),
            )
        };
        assert_eq!(
            reaction(Some("👍"))["reaction"],
            json!({"message_id": "wamid.A", "emoji": "👍"})
        );
        assert_eq!(
            reaction(None)["reaction"]["emoji"],
            "",
            "an empty emoji removes it"
        );
        let location = payload(
            "4915123456789",
            &Content::Location(LocationMember {
                latitude: 1.5,
                longitude: -2.0,
                name: Some("Office".into()),
                address: None,
                url: None,
            }),
        );
        assert_eq!(location["type"], "location");
        assert_eq!(
            location["location"],
            json!({"latitude": 1.5, "longitude": -2.0, "name": "Office"})
        );
        let card = json!([{"name": {"formatted_name": "Ann"}, "phones": [{"phone": "+1 555"}]}]);
        let contacts = payload(
            "4915123456789",
            &Content::Contacts(ContactsMember {
                contacts: card.as_array().unwrap().clone(),
            }),
        );
        assert_eq!(
            (contacts["type"].as_str(), &contacts["contacts"]),
            (Some("contacts"), &card)
        );
    }

    #[test]
    fn payloads_follow_the_graph_api() {
        let text = payload(
            "4915123456789",
            &Content::Text {
                body: "hi".into(),
                preview_url: false,
            },
        );
        assert_eq!(
            text,
            json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": "4915123456789",
                   "type": "text", "text": {"body": "hi", "preview_url": false}})
        );
        let doc = payload(
            "1",
            &Content::Media(Media {
                media_type: MediaType::Document,
                media_url: "https://x.test/a.pdf".into(),
                caption: Some("c".into()),
                file_name: Some("a.pdf".into()),
                media_id: None,
            }),
        );
        assert_eq!(doc["type"], "document");
        assert_eq!(
            doc["document"],
            json!({"link": "https://x.test/a.pdf", "caption": "c", "filename": "a.pdf"})
        );
        let image = payload(
            "1",
            &Content::Media(Media {
                media_type: MediaType::Image,
                media_url: "https://x.test/a.png".into(),
                caption: None,
                file_name: Some("ignored.png".into()),
                media_id: None,
            }),
        );
        assert_eq!(image["image"], json!({"link": "https://x.test/a.png"}));
        // After an upload: by id, caption and file name kept.
        let by_id = payload(
            "1",
            &Content::Media(Media {
                media_type: MediaType::Document,
                media_url: "https://x.test/a.pdf".into(),
                caption: Some("c".into()),
                file_name: Some("a.pdf".into()),
                media_id: Some("1234567890".into()),
            }),
        );
        assert_eq!(
            by_id["document"],
            json!({"id": "1234567890", "caption": "c", "filename": "a.pdf"})
        );
        assert_eq!(
            read_upload_answer(200, br#"{"id": "998877"}"#),
            Ok("998877".into())
        );
        assert!(matches!(
            read_upload_answer(200, br#"{"ok": true}"#),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_upload_answer(
                400,
                br#"{"error": {"code": 100, "message": "(#100) Invalid parameter"}}"#
            ),
            Err(ProviderError::Rejected {
                http_status: 400,
                ..
            })
        ));
        let template = payload(
            "1",
            &Content::Template(Template {
                name: "order_update".into(),
                language: "en_US".into(),
                components: vec![json!({"type": "body", "parameters": []})],
            }),
        );
        assert_eq!(template["template"]["language"], json!({"code": "en_US"}));
        assert_eq!(template["template"]["components"][0]["type"], "body");
    }

    #[test]
    fn answers_are_classified() {
        let ok = read_send_answer(
            200,
            br#"{"messaging_product":"whatsapp","contacts":[{"input":"1","wa_id":"1"}],"messages":[{"id":"wamid.X"}]}"#,
        )
        .unwrap();
        assert_eq!(ok.provider_message_id, "wamid.X");
        assert!(matches!(
            read_send_answer(200, b"{\"messages\": []}"),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_send_answer(200, b"<html>"),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_send_answer(503, b"{}"),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_send_answer(429, b"{}"),
            Err(ProviderError::Throttled {
                http_status: 429,
                ..
            })
        ));
        for code in [130429, 131056, 80007] {
            let body = format!(r#"{{"error":{{"code":{code},"message":"Rate limit hit"}}}}"#);
            match read_send_answer(400, body.as_bytes()) {
                Err(ProviderError::Throttled { code: c, .. }) => assert_eq!(c, Some(json!(code))),
                other => panic!("{code}: {other:?}"),
            }
        }
        // A marketing cap is not a throttle: the message fails with the provider's code.
        assert!(matches!(
            read_send_answer(
                400,
                br#"{"error":{"code":131049,"message":"This message was not delivered to maintain healthy ecosystem engagement."}}"#
            ),
            Err(ProviderError::Rejected { code: Some(c), .. }) if c == json!(131049)
        ));
        let rejected = read_send_answer(
            400,
            br#"{"error":{"message":"(#131026) Message undeliverable","type":"OAuthException","code":131026,
                 "error_data":{"messaging_product":"whatsapp","details":"Receiver is incapable"},"fbtrace_id":"Az"}}"#,
        )
        .unwrap_err();
        match rejected {
            ProviderError::Rejected {
                http_status,
                code,
                message,
                details,
            } => {
                assert_eq!(http_status, 400);
                assert_eq!(code, Some(json!(131026)));
                assert_eq!(message, "(#131026) Message undeliverable");
                assert_eq!(details["details"], "Receiver is incapable");
                assert_eq!(details["fbtrace_id"], "Az");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_send_answer(401, b"not json"),
            Err(ProviderError::Rejected {
                http_status: 401,
                code: None,
                ..
            })
        ));
    }

    #[test]
    fn signatures_are_checked_over_the_raw_body() {
        let body = br#"{"object":"whatsapp_business_account"}"#;
        let mut headers = HeaderMap::new();
        headers.insert("x-hub-signature-256", sign("s3cret", body).parse().unwrap());
        assert_eq!(verify_signature("s3cret", &headers, body), Ok(()));
        assert!(verify_signature("other", &headers, body).is_err());
        assert!(verify_signature("s3cret", &headers, b"{}").is_err());
        assert!(verify_signature("s3cret", &HeaderMap::new(), body).is_err());
        headers.insert("x-hub-signature-256", "sha256=zz".parse().unwrap());
        assert!(verify_signature("s3cret", &headers, body).is_err());
        headers.insert("x-hub-signature-256", "md5=00".parse().unwrap());
        assert!(verify_signature("s3cret", &headers, body).is_err());
    }

    #[test]
    fn handshake() {
        let wa = WhatsappCloud::new(
            reqwest::Client::new(),
            Config {
                verify_token: Some("vt".into()),
                ..Default::default()
            },
        );
        let q = |mode: &str, token: &str| {
            HashMap::from([
                ("hub.mode".to_owned(), mode.to_owned()),
                ("hub.verify_token".to_owned(), token.to_owned()),
                ("hub.challenge".to_owned(), "1158201444".to_owned()),
            ])
        };
        assert_eq!(wa.handshake(&q("subscribe", "vt")), Ok("1158201444".into()));
        assert!(wa.handshake(&q("subscribe", "wrong")).is_err());
        assert!(wa.handshake(&q("unsubscribe", "vt")).is_err());
        let unconfigured = WhatsappCloud::new(reqwest::Client::new(), Config::default());
        assert!(unconfigured.handshake(&q("subscribe", "")).is_err());
    }

    #[test]
    fn status_callbacks_echo_the_sends_reference() {
        let status = |extra: Value| {
            let mut s = json!({"id": "wamid.out", "status": "sent", "timestamp": "1786000003",
                               "recipient_id": "4915123456789"});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            s
        };
        let body = json!({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [
        {"field": "messages", "value": {"metadata": {"phone_number_id": "111"}, "statuses": [
            status(json!({"biz_opaque_callback_data": "0196d1c2-8a4b-7c3d-9e5f-0a1b2c3d4e5f"})),
            status(json!({})),
            status(json!({"biz_opaque_callback_data": "x".repeat(513)})),
        ]}}]}]});
        let parsed = parse_callback(Some("111"), body.to_string().as_bytes()).unwrap();
        let references: Vec<Option<&str>> = parsed
            .statuses
            .iter()
            .map(|s| s.reference.as_deref())
            .collect();
        assert_eq!(
            references,
            vec![Some("0196d1c2-8a4b-7c3d-9e5f-0a1b2c3d4e5f"), None, None]
        );
    }

    #[test]
    fn callbacks_are_parsed() {
        let body = json!({
            "object": "whatsapp_business_account",
            "entry": [{"id": "WABA", "changes": [
                {"field": "messages", "value": {
                    "messaging_product": "whatsapp",
                    "metadata": {"display_phone_number": "15550001111", "phone_number_id": "111"},
                    "contacts": [{"profile": {"name": "Ada"}, "wa_id": "4915123456789"}],
                    "messages": [
                        {"from": "4915123456789", "id": "wamid.in1", "timestamp": "1786000000", "type": "text", "text": {"body": "hi"}},
                        {"from": "4915123456789", "id": "wamid.in2", "timestamp": "1786000001", "type": "image",
                         "image": {"id": "m1", "mime_type": "image/jpeg", "caption": "look"}},
                        {"from": "4915123456789", "id": "wamid.in3", "timestamp": "1786000002", "type": "interactive",
                         "interactive": {"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes"}}},
                        {"from": "not a phone", "id": "wamid.bad", "type": "text", "text": {"body": "x"}}
                    ],
                    "statuses": [
                        {"id": "wamid.out", "status": "delivered", "timestamp": "1786000003", "recipient_id": "4915123456789"},
                        {"id": "wamid.out2", "status": "failed", "timestamp": "1786000004", "recipient_id": "4915123456789",
                         "errors": [{"code": 131047, "title": "Re-engagement message", "message": "Re-engagement message",
                                     "error_data": {"details": "More than 24 hours have passed"}}]},
                        {"id": "wamid.out3", "status": "deleted"}
                    ]}},
                {"field": "messages", "value": {"metadata": {"phone_number_id": "222"},
                    "messages": [{"from": "4915123456789", "id": "wamid.other", "type": "text", "text": {"body": "x"}}]}},
                {"field": "message_template_status_update", "value": {"event": "APPROVED"}}
            ]}]
        });
        let parsed = parse_callback(Some("111"), body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.messages.len(), 3);
        // The bad sender, the unknown status, the other number's change, and the template
        // change that names no template.
        assert_eq!(parsed.skipped, 4);
        assert!(parsed.templates.is_empty());
        let first = &parsed.messages[0];
        assert_eq!(first.provider_message_id, "wamid.in1");
        assert_eq!(first.profile_name.as_deref(), Some("Ada"));
        assert_eq!(first.kind, MessageKind::text("hi"));
        assert_eq!(first.sent_at.unwrap().millis(), 1_786_000_000_000);
        assert!(matches!(&first.sender, InboundSender::Phone(p) if p.as_str() == "+4915123456789"));
        assert_eq!(parsed.messages[1].kind.message_type(), MessageType::Media);
        assert_eq!(parsed.messages[1].kind.member()["media_id"], "m1");
        assert_eq!(
            parsed.messages[2].kind.message_type(),
            MessageType::Interactive
        );
        assert_eq!(parsed.statuses.len(), 2);
        assert_eq!(parsed.statuses[0].status, MessageStatus::Delivered);
        let err = parsed.statuses[1].error.as_ref().unwrap();
        assert_eq!(err["provider_code"], 131047);
        assert_eq!(err["provider_details"], "More than 24 hours have passed");
        // Without a configured phone number id, every number's changes are kept.
        assert_eq!(
            parse_callback(None, body.to_string().as_bytes())
                .unwrap()
                .messages
                .len(),
            4
        );
        assert!(parse_callback(None, b"[1]").is_err());
        assert!(parse_callback(None, b"{").is_err());
        assert_eq!(
            parse_callback(None, b"{}").unwrap(),
            ParsedCallback::default()
        );
    }

    #[test]
    fn template_pages_are_read() {
        let body = json!({
            "data": [
                {"name": "order_update", "language": "en_US", "status": "APPROVED",
                 "category": "UTILITY", "id": "594425479261596",
                 "components": [{"type": "BODY", "text": "Hi {{1}}"}]},
                {"name": "no_language", "status": "APPROVED"},
                {"name": "promo", "language": "de", "status": "PAUSED", "category": "MARKETING", "id": 77}
            ],
            "paging": {"cursors": {"before": "b1", "after": "a1"}, "next": "https://graph.example/next"}
        });
        let (page, next) = read_template_page(body.to_string().as_bytes()).unwrap();
        assert_eq!(page.len(), 2, "an entry without a language is skipped");
        assert_eq!(
            page[0].provider_template_id.as_deref(),
            Some("594425479261596")
        );
        assert_eq!(page[0].components[0]["type"], "BODY");
        assert_eq!(page[1].provider_template_id.as_deref(), Some("77"));
        assert_eq!(next.as_deref(), Some("a1"));
        // The last page: cursors but no `next`.
        let last = json!({"data": [], "paging": {"cursors": {"before": "b", "after": "a"}}});
        assert_eq!(
            read_template_page(last.to_string().as_bytes()).unwrap().1,
            None
        );
        assert!(read_template_page(b"<html>").is_err());
    }

    #[test]
    fn template_status_changes_are_parsed() {
        use switchboard_domain::template::TemplateStatus;
        let change = |value: Value| {
            json!({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [
                {"field": "message_template_status_update", "value": value}]}]})
        };
        let body = change(
            json!({"event": "PAUSED", "message_template_id": 594425479261596_i64,
            "message_template_name": "order_update", "message_template_language": "en_US",
            "reason": "NONE"}),
        );
        let parsed = parse_callback(Some("111"), body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.skipped, 0);
        assert_eq!(
            parsed.templates,
            vec![ParsedTemplateStatus {
                provider_template_id: Some("594425479261596".into()),
                name: Some("order_update".into()),
                language: Some("en_US".into()),
                event: "PAUSED".into(),
                status: TemplateStatus::Paused,
                reason: None,
            }]
        );
        let rejected = change(
            json!({"event": "REJECTED", "message_template_name": "promo",
            "message_template_language": "de", "reason": "INVALID_FORMAT"}),
        );
        let parsed = parse_callback(None, rejected.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.templates[0].status, TemplateStatus::Rejected);
        assert_eq!(
            parsed.templates[0].reason.as_deref(),
            Some("INVALID_FORMAT")
        );
        assert_eq!(parsed.templates[0].provider_template_id, None);
        for skipped in [
            json!({"event": "FLAGGED", "message_template_id": "1"}),
            json!({"event": "APPROVED"}),
            json!({"event": "APPROVED", "message_template_name": "x"}),
            json!({"message_template_id": "1"}),
            json!({"event": ["APPROVED"], "message_template_id": "1"}),
            json!("APPROVED"),
        ] {
            let parsed =
                parse_callback(None, change(skipped.clone()).to_string().as_bytes()).unwrap();
            assert_eq!(
                (parsed.templates.len(), parsed.skipped),
                (0, 1),
                "{skipped}"
            );
        }
    }
}
