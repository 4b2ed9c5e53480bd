//! The Telegram Bot API.
//!
//! Sends: `POST {api_base_url}/bot{bot_token}/{method}` with a JSON body: `sendMessage` for
//! text and interactive content (reply buttons and list rows become an inline keyboard whose
//! `callback_data` is the button or row id), `sendPhoto`, `sendDocument`, `sendAudio`,
//! `sendVideo` and `sendSticker` with the media URL. Telegram has no provider templates. The
//! provider message id is `{chat_id}:{message_id}` (Telegram numbers messages per chat).
//!
//! Callbacks on `/inbound/{channel_uuid}` (register it with `setWebhook` and the channel's
//! `secret_token`): updates are accepted only with `X-Telegram-Bot-Api-Secret-Token` equal to
//! the channel's `secret_token`. Telegram reports no delivery statuses.
//!
//! Provider configuration: `{"bot_token", "secret_token"?, "api_base_url"?}`.

use async_trait::async_trait;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::{
    Accepted, InboundError, Outgoing, ParsedCallback, ParsedChange, ParsedInbound, Provider,
    ProviderError, describe_reqwest, read_answer, secrets_equal, strip_nul, telegram_kinds,
    unix_seconds,
};
use switchboard_domain::ValidationErrors;
use switchboard_domain::channel::ChannelType;
use switchboard_domain::contact::InboundSender;
use switchboard_domain::contact::{Contact, clean_profile_name};
use switchboard_domain::message::{Content, MediaType, MessageChange, MessageStatus, MessageType};

pub const DEFAULT_API_BASE_URL: &str = "https://api.telegram.org";
/// Telegram's limit on `callback_data`.
const MAX_CALLBACK_DATA_BYTES: usize = 64;

/// Whether a text looks like a bot token (`123456789:AA...`).
pub fn token_looks_valid(token: &str) -> bool {
    match token.split_once(':') {
        Some((id, secret)) => {
            !id.is_empty()
                && id.len() <= 20
                && id.bytes().all(|b| b.is_ascii_digit())
                && !secret.is_empty()
                && secret.len() <= 200
                && secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        }
        None => false,
    }
}

/// Telegram's rule for `setWebhook`'s `secret_token`.
pub fn secret_token_valid(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[derive(Clone, Default)]
pub struct Config {
    pub bot_token: Option<String>,
    pub secret_token: Option<String>,
    pub api_base_url: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("api_base_url", &self.api_base_url)
            .finish_non_exhaustive()
    }
}

impl Config {
    pub fn from_json(config: &Value) -> Config {
        // The documented name first, then accepted aliases.
        let get = |keys: &[&str]| {
            keys.iter().find_map(|k| {
                config
                    .get(*k)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            })
        };
        Config {
            bot_token: get(&["bot_token", "token"]),
            secret_token: get(&["secret_token", "webhook_secret"]),
            api_base_url: get(&["api_base_url", "base_url"]),
        }
    }
}

pub struct Telegram {
    http: reqwest::Client,
    config: Config,
}

impl Telegram {
    pub fn new(http: reqwest::Client, config: Config) -> Self {
        Telegram { http, config }
    }

    fn method_url(&self, token: &str, method: &str) -> Result<url::Url, ProviderError> {
        let base = self
            .config
            .api_base_url
            .as_deref()
            .unwrap_or(DEFAULT_API_BASE_URL);
        let bad =
            || ProviderError::NotConfigured("The channel's api_base_url is not a URL.".into());
        let mut url = url::Url::parse(base).map_err(|_| bad())?;
        url.path_segments_mut()
            .map_err(|_| bad())?
            .pop_if_empty()
            .push(&format!("bot{token}"))
            .push(method);
        Ok(url)
    }
}

fn chat_id_json(chat_id: &str) -> Value {
    chat_id
        .parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(chat_id))
}

/// The text of an interactive message: header, body and footer, one per paragraph.
fn interactive_text(v: &Value) -> String {
    let part = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
    [
        part("/header/text"),
        part("/body/text"),
        part("/footer/text"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("\n\n")
}

fn keyboard(v: &Value) -> Value {
    let button = |id: &Value, title: &Value| json!({ "text": title, "callback_data": id });
    if let Some(buttons) = v.pointer("/action/buttons").and_then(Value::as_array) {
        let row: Vec<Value> = buttons
            .iter()
            .map(|b| button(&b["reply"]["id"], &b["reply"]["title"]))
            .collect();
        return json!({ "inline_keyboard": [row] });
    }
    let rows: Vec<Value> = v
        .pointer("/action/sections")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|s| s["rows"].as_array().cloned().unwrap_or_default())
        .map(|r| json!([button(&r["id"], &r["title"])]))
        .collect();
    json!({ "inline_keyboard": rows })
}

/// The Bot API method and body of a send.
pub fn request(chat_id: &str, content: &Content) -> Result<(&'static str, Value), ProviderError> {
    let chat_id = chat_id_json(chat_id);
    Ok(match content {
        Content::Text { body, preview_url } => (
            "sendMessage",
            json!({ "chat_id": chat_id, "text": body, "link_preview_options": { "is_disabled": !preview_url } }),
        ),
        Content::Interactive(v) => (
            "sendMessage",
            json!({ "chat_id": chat_id, "text": interactive_text(v), "reply_markup": keyboard(v) }),
        ),
        Content::Media(m) => {
            let (method, field) = match m.media_type {
                MediaType::Image => ("sendPhoto", "photo"),
                MediaType::Document => ("sendDocument", "document"),
                MediaType::Audio => ("sendAudio", "audio"),
                MediaType::Video => ("sendVideo", "video"),
                MediaType::Sticker => ("sendSticker", "sticker"),
            };
            let mut body = json!({ "chat_id": chat_id });
            body[field] = json!(m.media_url);
            if let Some(c) = &m.caption {
                body["caption"] = json!(c);
            }
            (method, body)
        }
        Content::Template(_) => {
            return Err(ProviderError::Unsupported(
                "Telegram channels have no provider templates.".into(),
            ));
        }
        // `setMessageReaction` on the message reacted to (our provider id is `chat:message`);
        // an empty emoji removes the reaction (an empty list).
        Content::Reaction(r) => {
            let message_id = r
                .provider_message_id
                .rsplit(':')
                .next()
                .and_then(|id| id.parse::<i64>().ok())
                .ok_or_else(|| {
                    ProviderError::Unsupported(
                        "The message reacted to has no Telegram message id.".into(),
                    )
                })?;
            let reaction = match r.emoji.as_deref().filter(|e| !e.is_empty()) {
                Some(emoji) => json!([{ "type": "emoji", "emoji": emoji }]),
                None => json!([]),
            };
            (
                "setMessageReaction",
                json!({ "chat_id": chat_id, "message_id": message_id, "reaction": reaction }),
            )
        }
        // A venue when it has a name and an address (Telegram needs both), else a location.
        Content::Location(l) => match (&l.name, &l.address) {
            (Some(title), Some(address)) => (
                "sendVenue",
                json!({ "chat_id": chat_id, "latitude": l.latitude, "longitude": l.longitude,
                        "title": title, "address": address }),
            ),
            _ => (
                "sendLocation",
                json!({ "chat_id": chat_id, "latitude": l.latitude, "longitude": l.longitude }),
            ),
        },
        // One contact per message (checked before: `check_content`).
        Content::Contacts(c) => {
            let contact = c.contacts.first().cloned().unwrap_or(Value::Null);
            let name = |k: &str| {
                contact
                    .pointer(&format!("/name/{k}"))
                    .and_then(Value::as_str)
            };
            let first = name("first_name")
                .or_else(|| name("formatted_name"))
                .unwrap_or("");
            let mut body = json!({
                "chat_id": chat_id,
                "phone_number": contact.pointer("/phones/0/phone").and_then(Value::as_str).unwrap_or(""),
                "first_name": first,
            });
            if let Some(last) = name("last_name") {
                body["last_name"] = json!(last);
            }
            ("sendContact", body)
        }
    })
}

/// Classifies the answer to `setMessageReaction` (`{"ok": true, "result": true}`: a reaction
/// is no message of its own at Telegram). The reaction's provider id is the message reacted to
/// and a unique suffix, so that every reaction is a message of its own here.
pub fn read_reaction_answer(
    chat_id: &str,
    request: &Value,
    status: u16,
    body: &[u8],
) -> Result<Accepted, ProviderError> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let ok = parsed
        .as_ref()
        .and_then(|v| v.get("ok"))
        .and_then(Value::as_bool)
        == Some(true);
    if (200..300).contains(&status) && ok {
        return Ok(Accepted {
            provider_message_id: format!(
                "{chat_id}:{}:reaction:{}",
                request["message_id"],
                uuid::Uuid::new_v4().simple()
            ),
            status: MessageStatus::Sent,
        });
    }
    // Any other answer is classified as a send's would be.
    read_send_answer(chat_id, status, body)
}

/// Classifies a Bot API answer.
pub fn read_send_answer(
    chat_id: &str,
    status: u16,
    body: &[u8],
) -> Result<Accepted, ProviderError> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if (200..300).contains(&status) {
        let ok = parsed
            .as_ref()
            .and_then(|v| v.get("ok"))
            .and_then(Value::as_bool)
            == Some(true);
        let message_id = parsed
            .as_ref()
            .and_then(|v| v.pointer("/result/message_id"))
            .and_then(Value::as_i64);
        return match (ok, message_id) {
            (true, Some(id)) => Ok(Accepted {
                provider_message_id: format!("{chat_id}:{id}"),
                status: MessageStatus::Sent,
            }),
            _ => Err(ProviderError::Unavailable(
                "the provider's answer has no message id".into(),
            )),
        };
    }
    if status == 429 || !(400..500).contains(&status) {
        return Err(ProviderError::Unavailable(format!(
            "the provider answered HTTP {status}"
        )));
    }
    let get = |k: &str| parsed.as_ref().and_then(|v| v.get(k)).cloned();
    let mut details = get("parameters").unwrap_or(Value::Null);
    strip_nul(&mut details);
    Err(ProviderError::Rejected {
        http_status: status,
        code: get("error_code"),
        message: get("description")
            .and_then(|d| d.as_str().map(|s| s.chars().take(1000).collect()))
            .unwrap_or_else(|| format!("the provider refused the message (HTTP {status})")),
        details,
    })
}

#[async_trait]
impl Provider for Telegram {
    fn channel_type(&self) -> ChannelType {
        ChannelType::Telegram
    }

    fn supports(&self, message_type: MessageType) -> bool {
        matches!(
            message_type,
            MessageType::Text
                | MessageType::Interactive
                | MessageType::Media
                | MessageType::Reaction
                | MessageType::Location
                | MessageType::Contacts
        )
    }

    fn check_content(&self, content: &Content) -> ValidationErrors {
        let mut errors = ValidationErrors::new();
        if let Content::Contacts(c) = content {
            if c.contacts.len() != 1 {
                errors.add("contacts", "Telegram sends one contact per message");
            }
            if c.contacts
                .first()
                .and_then(|c| c.pointer("/phones/0/phone"))
                .is_none()
            {
                errors.add("contacts[0].phones", "Telegram needs the contact's phone");
            }
        }
        if let Content::Interactive(v) = content {
            let too_long = |id: &Value| {
                id.as_str()
                    .is_some_and(|s| s.len() > MAX_CALLBACK_DATA_BYTES)
            };
            for (i, b) in v
                .pointer("/action/buttons")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if too_long(&b["reply"]["id"]) {
                    errors.add(
                        format!("interactive.action.buttons[{i}].reply.id"),
                        "must be at most 64 bytes on Telegram channels",
                    );
                }
            }
            for (i, s) in v
                .pointer("/action/sections")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                for (j, r) in s["rows"].as_array().into_iter().flatten().enumerate() {
                    if too_long(&r["id"]) {
                        errors.add(
                            format!("interactive.action.sections[{i}].rows[{j}].id"),
                            "must be at most 64 bytes on Telegram channels",
                        );
                    }
                }
            }
        }
        errors
    }

    fn check_recipient(&self, contact: &Contact) -> Result<(), String> {
        if contact.telegram_chat_id.is_some() {
            Ok(())
        } else {
            Err("the contact has no Telegram chat yet: a bot can only message people who wrote to it first".into())
        }
    }

    /// The Bot API method of the content; a reply carries `reply_parameters` with the
    /// replied-to message's id in the chat (sent without the quote when that message is gone).
    async fn send(&self, to: &Contact, out: &Outgoing<'_>) -> Result<Accepted, ProviderError> {
        let Some(token) = &self.config.bot_token else {
            return Err(ProviderError::NotConfigured(
                "The channel's provider configuration lacks bot_token.".into(),
            ));
        };
        let chat_id = to.telegram_chat_id.as_deref().ok_or_else(|| {
            ProviderError::Unsupported("The contact has no Telegram chat.".into())
        })?;
        let (method, mut body) = request(chat_id, out.content)?;
        if let (Some(reply_to), false) = (out.reply_to, method == "setMessageReaction") {
            body["reply_parameters"] = json!({
                "message_id": message_id_in_chat(reply_to)?,
                "allow_sending_without_reply": true,
            });
        }
        let resp = self
            .http
            .post(self.method_url(token, method)?)
            .json(&body)
            .headers(super::trace_headers())
            .send()
            .await
            .map_err(|e| ProviderError::Unavailable(describe_reqwest(e)))?;
        let status = resp.status().as_u16();
        let answer = read_answer(resp)
            .await
            .map_err(ProviderError::Unavailable)?;
        if method == "setMessageReaction" {
            return read_reaction_answer(chat_id, &body, status, &answer);
        }
        read_send_answer(chat_id, status, &answer)
    }

    fn verify_callback(&self, headers: &HeaderMap, _body: &[u8]) -> Result<(), InboundError> {
        let Some(expected) = &self.config.secret_token else {
            return Err(InboundError::Unauthorized(
                "the channel has no secret_token configured, so updates cannot be verified",
            ));
        };
        let given = headers
            .get("x-telegram-bot-api-secret-token")
            .map(|v| v.as_bytes())
            .ok_or(InboundError::Unauthorized(
                "X-Telegram-Bot-Api-Secret-Token is missing",
            ))?;
        if secrets_equal(given, expected.as_bytes()) {
            Ok(())
        } else {
            Err(InboundError::Unauthorized(
                "X-Telegram-Bot-Api-Secret-Token does not match",
            ))
        }
    }

    fn parse_callback(&self, body: &[u8]) -> Result<ParsedCallback, InboundError> {
        parse_update(body)
    }
}

/// The message id within its chat of one of our Telegram provider ids (`chat:message_id`).
fn message_id_in_chat(provider_message_id: &str) -> Result<i64, ProviderError> {
    provider_message_id
        .split_once(':')
        .and_then(|(_, id)| id.parse().ok())
        .ok_or_else(|| {
            ProviderError::Unsupported(
                "The message replied to has no Telegram message id in its chat.".into(),
            )
        })
}

fn id_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => n.as_i64().map(|n| n.to_string()),
        Value::String(s) if !s.is_empty() && s.len() <= 64 => Some(s.clone()),
        _ => None,
    }
}

/// A chat id as Telegram sends it: an integer (also accepted as a string of one).
fn chat_id_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => n.as_i64().map(|n| n.to_string()),
        Value::String(s) => s.parse::<i64>().ok().map(|n| n.to_string()),
        _ => None,
    }
}

/// Whether an update's chat is a one-to-one chat with a person: groups, supergroups and
/// channels are not contacts (a reply would go to everyone in them), nor are other bots.
fn private_chat_with_a_person(chat: Option<&Value>, from: Option<&Value>) -> bool {
    let chat_type = chat.and_then(|c| c.get("type")).and_then(Value::as_str);
    let is_bot = from
        .and_then(|f| f.get("is_bot"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    matches!(chat_type, None | Some("private")) && !is_bot
}

fn sender_name(from: Option<&Value>) -> Option<String> {
    let from = from?;
    let first = from.get("first_name").and_then(Value::as_str).unwrap_or("");
    let last = from.get("last_name").and_then(Value::as_str).unwrap_or("");
    let full = format!("{first} {last}");
    clean_profile_name(&full).or_else(|| {
        from.get("username")
            .and_then(Value::as_str)
            .and_then(clean_profile_name)
    })
}

/// Reads a Telegram `Update`: a `message` in a private chat with a person, a `callback_query`
/// (an inline button press), a `message_reaction` or an `edited_message` from one. Other updates (group,
/// supergroup and channel messages, messages from bots, ...) are skipped.
pub fn parse_update(body: &[u8]) -> Result<ParsedCallback, InboundError> {
    let mut update: Value = serde_json::from_slice(body)
        .map_err(|_| InboundError::Malformed("the body is not JSON".into()))?;
    if !update.is_object() {
        return Err(InboundError::Malformed(
            "the body is not a JSON object".into(),
        ));
    }
    strip_nul(&mut update);
    let mut out = ParsedCallback::default();
    if let Some(m) = update.get("message") {
        let chat_id = chat_id_of(m.pointer("/chat/id"));
        let message_id = id_text(m.get("message_id"));
        match (chat_id, message_id) {
            (Some(chat_id), Some(message_id))
                if private_chat_with_a_person(m.get("chat"), m.get("from")) =>
            {
                out.messages.push(ParsedInbound {
                    provider_message_id: format!("{chat_id}:{message_id}"),
                    profile_name: sender_name(m.get("from")),
                    kind: telegram_kinds::kind_of(m),
                    context: telegram_kinds::context_of(m, &chat_id),
                    sender: InboundSender::Telegram { chat_id },
                    sent_at: unix_seconds(m.get("date")),
                });
            }
            _ => out.skipped += 1,
        }
    } else if let Some(m) = update.get("edited_message") {
        let chat_id = chat_id_of(m.pointer("/chat/id"));
        let message_id = id_text(m.get("message_id"));
        match (chat_id, message_id) {
            (Some(chat_id), Some(message_id))
                if private_chat_with_a_person(m.get("chat"), m.get("from")) =>
            {
                out.changes.push(ParsedChange {
                    provider_message_id: format!("{chat_id}:{message_id}"),
                    change: MessageChange::Edited(telegram_kinds::kind_of(m)),
                    at: unix_seconds(m.get("edit_date")),
                });
            }
            _ => out.skipped += 1,
        }
    } else if let Some(q) = update.get("callback_query") {
        let chat_id =
            chat_id_of(q.pointer("/message/chat/id")).or_else(|| chat_id_of(q.pointer("/from/id")));
        let query_id = id_text(q.get("id"));
        match (chat_id, query_id) {
            (Some(chat_id), Some(query_id))
                if private_chat_with_a_person(q.pointer("/message/chat"), q.get("from")) =>
            {
                out.messages.push(ParsedInbound {
                    provider_message_id: format!("callback:{query_id}"),
                    sender: InboundSender::Telegram { chat_id },
                    profile_name: sender_name(q.get("from")),
                    kind: telegram_kinds::button_reply(q),
                    context: Default::default(),
                    sent_at: None,
                });
            }
            _ => out.skipped += 1,
        }
    } else if let Some(r) = update.get("message_reaction") {
        let chat_id = chat_id_of(r.pointer("/chat/id"));
        let update_id = id_text(update.get("update_id"));
        let kind = chat_id
            .as_deref()
            .and_then(|c| telegram_kinds::reaction_of(r, c));
        match (chat_id, update_id, kind) {
            (Some(chat_id), Some(update_id), Some(kind))
                if r.get("user").is_some()
                    && private_chat_with_a_person(r.get("chat"), r.get("user")) =>
            {
                out.messages.push(ParsedInbound {
                    // Unique per reaction: the update's id.
                    provider_message_id: format!("reaction:{chat_id}:{update_id}"),
                    profile_name: sender_name(r.get("user")),
                    sender: InboundSender::Telegram { chat_id },
                    kind,
                    context: Default::default(),
                    sent_at: unix_seconds(r.get("date")),
                });
            }
            _ => out.skipped += 1,
        }
    } else {
        out.skipped += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::message::{Media, MessageKind};

    #[test]
    fn tokens_and_secrets() {
        assert!(token_looks_valid(
            "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
        ));
        assert!(!token_looks_valid("AAH:123"));
        assert!(!token_looks_valid("123456789"));
        assert!(secret_token_valid("abc-DEF_123"));
        assert!(!secret_token_valid(""));
        assert!(!secret_token_valid("with space"));
    }

    #[test]
    fn locations_venues_and_contacts_follow_the_bot_api() {
        use switchboard_domain::message::{ContactsMember, LocationMember};
        let place = |name: Option<&str>, address: Option<&str>| {
            request(
                "42",
                &Content::Location(LocationMember {
                    latitude: 1.0,
                    longitude: 2.0,
                    name: name.map(str::to_owned),
                    address: address.map(str::to_owned),
                    url: None,
                }),
            )
            .unwrap()
        };
        assert_eq!(place(None, None).0, "sendLocation");
        assert_eq!(
            place(Some("Cafe"), None).0,
            "sendLocation",
            "a venue needs both"
        );
        let (m, b) = place(Some("Cafe"), Some("Main St"));
        assert_eq!(m, "sendVenue");
        assert_eq!(
            (b["title"].as_str(), b["address"].as_str()),
            (Some("Cafe"), Some("Main St"))
        );
        let (m, b) = request(
            "42",
            &Content::Contacts(ContactsMember {
                contacts: vec![json!({"name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
                    "phones": [{"phone": "+4915123456789"}]})],
            }),
        )
        .unwrap();
        assert_eq!(m, "sendContact");
        assert_eq!(
            b,
            json!({"chat_id": 42, "phone_number": "+4915123456789", "first_name": "Ann", "last_name": "Lee"})
        );
    }

    #[test]
    fn reactions_are_set_on_the_message_and_get_ids_of_their_own() {
        use switchboard_domain::message::ReactionMember;
        let reaction = |emoji: Option<&str>| {
            Content::Reaction(ReactionMember {
                emoji: emoji.map(str::to_owned),
                message_uuid: None,
                provider_message_id: "42:7".into(),
            })
        };
        let (m, b) = request("42", &reaction(Some("👍"))).unwrap();
        assert_eq!(m, "setMessageReaction");
        assert_eq!(
            b,
            json!({"chat_id": 42, "message_id": 7, "reaction": [{"type": "emoji", "emoji": "👍"}]})
        );
        assert_eq!(
            request("42", &reaction(Some(""))).unwrap().1["reaction"],
            json!([])
        );
        assert_eq!(
            request("42", &reaction(None)).unwrap().1["reaction"],
            json!([])
        );
        let ok = br#"{"ok": true, "result": true}"#;
        let a = read_reaction_answer("42", &b, 200, ok).unwrap();
        let b2 = read_reaction_answer("42", &b, 200, ok).unwrap();
        assert!(a.provider_message_id.starts_with("42:7:reaction:"));
        assert_ne!(
            a.provider_message_id, b2.provider_message_id,
            "one id per reaction"
        );
        assert!(
            read_reaction_answer("42", &b, 400, br#"{"ok": false, "error_code": 400, "description": "Bad Request: REACTION_INVALID"}"#)
                .is_err()
        );
    }

    #[test]
    fn requests_follow_the_bot_api() {
        let (m, b) = request(
            "42",
            &Content::Text {
                body: "hi".into(),
                preview_url: false,
            },
        )
        .unwrap();
        assert_eq!(m, "sendMessage");
        assert_eq!(b["chat_id"], 42);
        assert_eq!(b["text"], "hi");
        let (m, b) = request(
            "@channel",
            &Content::Media(Media {
                media_type: MediaType::Document,
                media_url: "https://x.test/a.pdf".into(),
                caption: Some("c".into()),
                file_name: None,
                media_id: None,
            }),
        )
        .unwrap();
        assert_eq!(m, "sendDocument");
        assert_eq!(
            b,
            json!({"chat_id": "@channel", "document": "https://x.test/a.pdf", "caption": "c"})
        );
        let (m, b) = request(
            "42",
            &Content::Interactive(
                json!({"type": "button", "body": {"text": "Pick"}, "footer": {"text": "f"},
                "action": {"buttons": [{"type": "reply", "reply": {"id": "y", "title": "Yes"}},
                                       {"type": "reply", "reply": {"id": "n", "title": "No"}}]}}),
            ),
        )
        .unwrap();
        assert_eq!(m, "sendMessage");
        assert_eq!(b["text"], "Pick\n\nf");
        assert_eq!(
            b["reply_markup"]["inline_keyboard"],
            json!([[{"text": "Yes", "callback_data": "y"}, {"text": "No", "callback_data": "n"}]])
        );
        let (_, b) = request(
            "42",
            &Content::Interactive(
                json!({"type": "list", "body": {"text": "Pick"}, "action": {"button": "Menu",
                "sections": [{"rows": [{"id": "a", "title": "A"}, {"id": "b", "title": "B"}]}]}}),
            ),
        )
        .unwrap();
        assert_eq!(
            b["reply_markup"]["inline_keyboard"],
            json!([[{"text": "A", "callback_data": "a"}], [{"text": "B", "callback_data": "b"}]])
        );
    }

    #[test]
    fn answers_are_classified() {
        let ok = read_send_answer(
            "42",
            200,
            br#"{"ok":true,"result":{"message_id":7,"chat":{"id":42}}}"#,
        )
        .unwrap();
        assert_eq!(ok.provider_message_id, "42:7");
        assert!(matches!(
            read_send_answer("42", 200, b"{\"ok\":true}"),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_send_answer("42", 502, b"Bad Gateway"),
            Err(ProviderError::Unavailable(_))
        ));
        assert!(matches!(
            read_send_answer(
                "42",
                429,
                br#"{"ok":false,"error_code":429,"parameters":{"retry_after":3}}"#
            ),
            Err(ProviderError::Unavailable(_))
        ));
        match read_send_answer(
            "42",
            403,
            br#"{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}"#,
        ) {
            Err(ProviderError::Rejected { code, message, .. }) => {
                assert_eq!(code, Some(json!(403)));
                assert_eq!(message, "Forbidden: bot was blocked by the user");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn updates_are_parsed() {
        let p = parse_update(
            br#"{"update_id":1,"message":{"message_id":5,"date":1786000000,"chat":{"id":42,"type":"private"},
                 "from":{"id":42,"first_name":"Ada","last_name":"L"},"text":"hello"}}"#,
        )
        .unwrap();
        assert_eq!(p.messages.len(), 1);
        let m = &p.messages[0];
        assert_eq!(m.provider_message_id, "42:5");
        assert_eq!(m.profile_name.as_deref(), Some("Ada L"));
        assert_eq!(m.kind, MessageKind::text("hello"));
        assert!(matches!(&m.sender, InboundSender::Telegram { chat_id } if chat_id == "42"));
        let photo = parse_update(
            br#"{"update_id":2,"message":{"message_id":6,"chat":{"id":42},"caption":"c",
                 "photo":[{"file_id":"small"},{"file_id":"large"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            photo.messages[0].kind.member(),
            json!({"media_type": "image", "media_id": "large", "caption": "c",
                "mime_type": null, "sha256": null, "file_name": null, "voice": false, "animated": false})
        );
        let press = parse_update(
            br#"{"update_id":3,"callback_query":{"id":"99","from":{"id":42},"message":{"chat":{"id":42}},"data":"yes"}}"#,
        )
        .unwrap();
        assert_eq!(press.messages[0].provider_message_id, "callback:99");
        assert_eq!(
            press.messages[0].kind.message_type(),
            MessageType::Interactive
        );
        let reacted = parse_update(
            br#"{"update_id":11,"message_reaction":{"chat":{"id":42,"type":"private"},"message_id":5,
                 "user":{"id":42,"first_name":"Ada"},"date":1786000000,"old_reaction":[],
                 "new_reaction":[{"type":"emoji","emoji":"\u2764"}]}}"#,
        )
        .unwrap();
        assert_eq!(reacted.messages[0].provider_message_id, "reaction:42:11");
        assert_eq!(
            reacted.messages[0].kind.member(),
            json!({"emoji": "\u{2764}", "message_uuid": null, "provider_message_id": "42:5"})
        );
        let other = parse_update(br#"{"update_id":4,"edited_message":{}}"#).unwrap();
        assert_eq!((other.messages.len(), other.skipped), (0, 1));
        let edited = parse_update(
            br#"{"update_id":12,"edited_message":{"message_id":5,"date":1786000000,"edit_date":1786000060,
                 "chat":{"id":42,"type":"private"},"from":{"id":42},"text":"hello again"}}"#,
        )
        .unwrap();
        assert_eq!(edited.messages.len(), 0);
        assert_eq!(edited.changes[0].provider_message_id, "42:5");
        assert_eq!(
            edited.changes[0].change,
            MessageChange::Edited(MessageKind::text("hello again"))
        );
        assert_eq!(edited.changes[0].at.unwrap().millis(), 1_786_000_060_000);
        let unknown = parse_update(br#"{"update_id":13,"my_chat_member":{}}"#).unwrap();
        assert_eq!((unknown.messages.len(), unknown.skipped), (0, 1));
        // Groups, supergroups, channels, bots and chat ids that are not numbers are skipped.
        for update in [
            r#"{"update_id":5,"message":{"message_id":9,"chat":{"id":-1009999,"type":"supergroup"},"from":{"id":7,"is_bot":false},"text":"hi"}}"#,
            r#"{"update_id":6,"message":{"message_id":9,"chat":{"id":-42,"type":"group"},"from":{"id":7},"text":"hi"}}"#,
            r#"{"update_id":7,"message":{"message_id":9,"chat":{"id":7,"type":"private"},"from":{"id":7,"is_bot":true},"text":"hi"}}"#,
            r#"{"update_id":8,"message":{"message_id":9,"chat":{"id":"abc","type":"private"},"text":"hi"}}"#,
            r#"{"update_id":9,"callback_query":{"id":"1","from":{"id":7},"message":{"chat":{"id":-5,"type":"supergroup"}},"data":"x"}}"#,
        ] {
            let p = parse_update(update.as_bytes()).unwrap();
            assert_eq!((p.messages.len(), p.skipped), (0, 1), "{update}");
        }
        let as_string = parse_update(
            br#"{"update_id":10,"message":{"message_id":9,"chat":{"id":"42","type":"private"},"text":"hi"}}"#,
        )
        .unwrap();
        assert_eq!(as_string.messages[0].provider_message_id, "42:9");
        assert!(parse_update(b"[]").is_err());
    }
}
