//! Messaging providers: one adapter per channel type behind one trait, [`Provider`].
//!
//! * `sandbox`: no network; a send is `sent` at once with a generated provider id.
//! * `whatsapp_cloud`: the WhatsApp Cloud API (Meta Graph API).
//! * `telegram`: the Telegram Bot API.
//! * `lead_ingestion`: receives leads only; it cannot send.
//!
//! An adapter is built per use from the channel's decrypted provider configuration
//! ([`ProviderHub::for_channel`]); the HTTP client is built once, with the provider timeout,
//! and shared. Adapters never log message bodies, tokens or secrets.

pub mod pacing;
pub mod sandbox;
pub mod telegram;
pub mod telegram_kinds;
mod whatsapp_callbacks;
pub mod whatsapp_cloud;
pub mod whatsapp_kinds;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use switchboard_domain::channel::ChannelType;
use switchboard_domain::contact::Contact;
use switchboard_domain::contact::InboundSender;
use switchboard_domain::message::{
    Content, InboundContext, MessageChange, MessageKind, MessageStatus, MessageType, ReplyTo,
};
use switchboard_domain::{Timestamp, ValidationErrors};

/// The largest provider answer read (a send answer is a few hundred bytes).
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// A message the provider accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The provider's id (WhatsApp's `wamid`, Telegram's `chat:message`).
    pub provider_message_id: String,
    /// The status the message starts with (`sent`).
    pub status: MessageStatus,
}

/// A fetched and checked media file, to upload.
pub struct MediaFile {
    /// The whole file (moved into the request without a copy).
    pub bytes: Vec<u8>,
    /// Its MIME type (sniffed).
    pub mime: String,
    /// The file name the upload carries.
    pub file_name: String,
    /// The upload's time limit.
    pub timeout: Duration,
}

impl std::fmt::Debug for MediaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaFile")
            .field("size", &self.bytes.len())
            .field("mime", &self.mime)
            .finish_non_exhaustive()
    }
}

/// Why a send did not go out.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderError {
    /// The provider refused the message (a 4xx other than 429): 422 `provider_rejected`.
    Rejected {
        /// The provider's HTTP status.
        http_status: u16,
        /// The provider's error code (WhatsApp: the Graph error `code`; Telegram: `error_code`).
        code: Option<Value>,
        /// The provider's explanation.
        message: String,
        /// Further provider details (WhatsApp: subcode, `error_data.details`, `fbtrace_id`).
        details: Value,
    },
    /// The provider could not be reached or answered 5xx, 429 or something unreadable:
    /// 503 `provider_unavailable`; nothing is stored and the client may retry.
    Unavailable(String),
    /// The provider asked to slow down (WhatsApp: Graph error 130429, 131056, 80007 or 4, or
    /// HTTP 429): the message is kept `queued` and tried again later.
    Throttled {
        http_status: u16,
        code: Option<Value>,
        message: String,
    },
    /// The channel lacks the settings this needs (422 `invalid_channel`).
    NotConfigured(String),
    /// The channel type cannot do this (422 `invalid_channel`).
    Unsupported(String),
}

impl ProviderError {
    /// The `error` stored on a failed message and shown in `details`.
    pub fn to_json(&self, provider: ChannelType) -> Value {
        match self {
            ProviderError::Rejected {
                http_status,
                code,
                message,
                details,
            } => json!({
                "code": "provider_rejected",
                "message": message,
                "provider": provider,
                "provider_status": http_status,
                "provider_code": code,
                "provider_details": details,
            }),
            ProviderError::Unavailable(m) => {
                json!({"code": "provider_unavailable", "message": m, "provider": provider})
            }
            ProviderError::Throttled {
                http_status,
                code,
                message,
            } => json!({
                "code": "provider_throttled",
                "message": message,
                "provider": provider,
                "provider_status": http_status,
                "provider_code": code,
            }),
            ProviderError::NotConfigured(m) | ProviderError::Unsupported(m) => {
                json!({"code": "invalid_channel", "message": m, "provider": provider})
            }
        }
    }
}

/// Why an inbound request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboundError {
    /// Missing or wrong signature or secret (401); nothing changes.
    Unauthorized(&'static str),
    /// The verification handshake failed (403).
    Forbidden(&'static str),
    /// The body is not the provider's format (400).
    Malformed(String),
    /// This channel type takes no provider callbacks (404).
    NotSupported,
}

/// An inbound message as the provider reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedInbound {
    pub sender: InboundSender,
    pub profile_name: Option<String>,
    /// The message's kind and member (never an empty text).
    pub kind: MessageKind,
    /// `reply_to` (unresolved: the provider's id), `forwarded`, `frequently_forwarded`,
    /// `referral`.
    pub context: InboundContext,
    pub provider_message_id: String,
    /// The provider's time of the message, when it gave one.
    pub sent_at: Option<Timestamp>,
}

/// A status change of an outbound message, as the provider reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedStatus {
    pub provider_message_id: String,
    pub status: MessageStatus,
    pub error: Option<Value>,
    /// The reference the send carried, echoed ([`Outgoing::reference`]).
    pub reference: Option<String>,
    /// WhatsApp's `pricing`: `{"billable", "category", "pricing_model"}`.
    pub pricing: Option<Value>,
    /// WhatsApp's `conversation`: `{"id", "origin", "expires_at"}`.
    pub provider_conversation: Option<Value>,
}

/// One message to send: its content and what goes with it.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    pub content: &'a Content,
    /// The provider id of the message this one replies to (WhatsApp `context.message_id`,
    /// Telegram `reply_parameters`).
    pub reply_to: Option<&'a str>,
    /// Our reference of the message (its uuid), for providers that echo it in their status
    /// callbacks ([`echoes_send_reference`]: WhatsApp Cloud's `biz_opaque_callback_data`).
    pub reference: Option<&'a str>,
}

impl<'a> Outgoing<'a> {
    /// Content alone: no reply, no reference.
    pub fn of(content: &'a Content) -> Outgoing<'a> {
        Outgoing {
            content,
            reply_to: None,
            reference: None,
        }
    }

    /// Quoting the message replied to, if any.
    pub fn replying_to(self, reply: Option<&'a ReplyTo>) -> Outgoing<'a> {
        Outgoing {
            reply_to: reply.map(|r| r.provider_message_id.as_str()),
            ..self
        }
    }

    /// With our reference of the message.
    pub fn referenced(self, reference: &'a str) -> Outgoing<'a> {
        Outgoing {
            reference: Some(reference),
            ..self
        }
    }
}

/// Whether the channel type's status callbacks echo the reference a send carried
/// ([`Outgoing::reference`]), so that a send whose outcome was lost (the instance stopped
/// during the call) is learnt from the provider's callback. WhatsApp Cloud does
/// (`biz_opaque_callback_data`); Telegram's Bot API has no status callbacks; the sandbox
/// answers at once.
pub fn echoes_send_reference(channel_type: ChannelType) -> bool {
    channel_type == ChannelType::WhatsappCloud
}

/// A template review status the provider reported (WhatsApp's
/// `message_template_status_update`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedTemplateStatus {
    pub provider_template_id: Option<String>,
    pub name: Option<String>,
    pub language: Option<String>,
    /// The provider's event as given (`APPROVED`, `PAUSED`, ...).
    pub event: String,
    /// The catalogue status it means.
    pub status: switchboard_domain::template::TemplateStatus,
    /// The provider's reason, if any.
    pub reason: Option<String>,
}

/// A template of the provider's account (WhatsApp: the Business Account's
/// `message_templates`), as a catalogue sync reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteTemplate {
    pub provider_template_id: Option<String>,
    pub name: String,
    pub language: String,
    /// As the provider says it (`UTILITY`, `MARKETING`, `AUTHENTICATION`).
    pub category: String,
    /// As the provider says it (`APPROVED`, `PAUSED`, ...).
    pub status: String,
    /// The component definitions (an array).
    pub components: Value,
}

/// A customer's edit or deletion of a message they sent earlier.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedChange {
    /// The provider's id of the message changed.
    pub provider_message_id: String,
    pub change: MessageChange,
    /// When the customer made the change, when the provider says.
    pub at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedCallback {
    pub messages: Vec<ParsedInbound>,
    /// Edits and deletions (WhatsApp `edit` / `revoke`, Telegram `edited_message`).
    pub changes: Vec<ParsedChange>,
    pub statuses: Vec<ParsedStatus>,
    /// Template status changes (WhatsApp Cloud).
    pub templates: Vec<ParsedTemplateStatus>,
    /// Items that were understood but not kept (other phone numbers, unknown kinds).
    pub skipped: usize,
}

/// One messaging provider, configured for one channel.
#[async_trait]
pub trait Provider: Send + Sync {
    fn channel_type(&self) -> ChannelType;

    /// Whether this channel type can send this kind of message at all.
    fn supports(&self, message_type: MessageType) -> bool;

    /// Rules of this provider beyond the generic content rules (field paths as in the request).
    fn check_content(&self, _content: &Content) -> ValidationErrors {
        ValidationErrors::new()
    }

    /// Whether the contact can be reached on this channel; the reason for people if not.
    fn check_recipient(&self, contact: &Contact) -> Result<(), String>;

    /// The channel's pace (`max_per_second`), for paced channel types; `None`: not paced.
    fn max_per_second(&self) -> Option<u32> {
        None
    }

    /// Sends a message. Never called inside a database transaction.
    async fn send(&self, to: &Contact, out: &Outgoing<'_>) -> Result<Accepted, ProviderError>;

    /// Whether a send reaches anything outside this process (a provider's API, a media fetch):
    /// its `Idempotency-Key` is then claimed before the call; the sandbox's is written with its
    /// record.
    fn calls_out(&self) -> bool {
        true
    }

    /// Whether media sends on this channel go by an upload: the service fetches the file,
    /// checks it and hands it to [`Provider::upload_media`] (WhatsApp Cloud), instead of
    /// passing the link on (Telegram, sandbox).
    fn uploads_media(&self) -> bool {
        false
    }

    /// Uploads a media file to the provider; its media id. Never called inside a database
    /// transaction.
    async fn upload_media(&self, _file: MediaFile) -> Result<String, ProviderError> {
        Err(ProviderError::Unsupported(
            "This channel type takes media by link, not by upload.".into(),
        ))
    }

    /// Marks an inbound message read at the provider (WhatsApp: `status: read`, with the
    /// typing indicator when `typing`).
    async fn mark_read(
        &self,
        _provider_message_id: &str,
        _typing: bool,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported(
            "This channel type has no read receipts.".into(),
        ))
    }

    /// Every template of the provider account behind the channel (all pages).
    async fn list_templates(&self) -> Result<Vec<RemoteTemplate>, ProviderError> {
        Err(ProviderError::Unsupported(
            "This channel type has no provider template catalogue.".into(),
        ))
    }

    /// The provider's subscription handshake on `GET /inbound/{channel}`: the text to answer.
    fn handshake(&self, _query: &HashMap<String, String>) -> Result<String, InboundError> {
        Err(InboundError::NotSupported)
    }

    /// Checks that a callback comes from the provider (signature or secret), over the raw body.
    fn verify_callback(&self, _headers: &HeaderMap, _body: &[u8]) -> Result<(), InboundError> {
        Err(InboundError::NotSupported)
    }

    /// Reads a verified callback.
    fn parse_callback(&self, _body: &[u8]) -> Result<ParsedCallback, InboundError> {
        Err(InboundError::NotSupported)
    }
}

/// Builds adapters; holds the one HTTP client of all provider calls.
#[derive(Clone)]
pub struct ProviderHub {
    http: reqwest::Client,
    /// The pace of paced channels' sends (WhatsApp Cloud).
    pacer: std::sync::Arc<pacing::Pacer>,
    /// Wakes this process's send worker when a message is queued.
    send_wake: std::sync::Arc<tokio::sync::Notify>,
    media: crate::media::MediaFetcher,
}

impl ProviderHub {
    /// A hub whose calls time out after `timeout` (SWITCHBOARD_PROVIDER_TIMEOUT). Redirects are
    /// not followed.
    pub fn new(timeout: Duration) -> ProviderHub {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the provider HTTP client builds");
        ProviderHub {
            http,
            pacer: std::sync::Arc::new(pacing::Pacer::local(Duration::from_secs(6))),
            send_wake: Default::default(),
            media: crate::media::MediaFetcher::new(crate::url_safety::Policy::default(), timeout),
        }
    }

    /// The same hub with its pace kept by `pacer`.
    pub fn with_pacer(self, pacer: pacing::Pacer) -> ProviderHub {
        ProviderHub {
            pacer: std::sync::Arc::new(pacer),
            ..self
        }
    }

    pub fn pacer(&self) -> &pacing::Pacer {
        &self.pacer
    }

    /// Tells this process's send worker that a message was queued.
    pub fn wake_send_worker(&self) {
        self.send_wake.notify_one();
    }

    /// What the send worker waits on.
    pub fn send_worker_wakeup(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.send_wake.clone()
    }

    /// The hub with this media fetcher (the URL rules and time limit of media fetches).
    pub fn with_media(mut self, media: crate::media::MediaFetcher) -> ProviderHub {
        self.media = media;
        self
    }

    /// The fetcher of media files for providers that take uploads.
    pub fn media(&self) -> &crate::media::MediaFetcher {
        &self.media
    }

    /// The adapter of a channel type with its decrypted configuration (`Null` when none).
    /// `identifier` is the channel's provider identifier (a fallback for settings that repeat it).
    pub fn for_channel(
        &self,
        channel_type: ChannelType,
        identifier: &str,
        config: &Value,
    ) -> Box<dyn Provider> {
        match channel_type {
            ChannelType::Sandbox => Box::new(sandbox::Sandbox),
            ChannelType::WhatsappCloud => Box::new(whatsapp_cloud::WhatsappCloud::new(
                self.http.clone(),
                whatsapp_cloud::Config::from_json(config, Some(identifier)),
            )),
            ChannelType::Telegram => Box::new(telegram::Telegram::new(
                self.http.clone(),
                telegram::Config::from_json(config),
            )),
            ChannelType::LeadIngestion => Box::new(LeadIngestion),
        }
    }
}

/// Checks a provider configuration for a channel type: a JSON object whose known settings have
/// the right form. Settings may be missing (a channel can be configured later); what a use
/// needs is checked at that use.
pub fn check_config(channel_type: ChannelType, config: &Value) -> Result<(), String> {
    let obj = config
        .as_object()
        .ok_or_else(|| "expected a JSON object".to_owned())?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() && !s.chars().any(char::is_control) => {
                Ok(Some(s.clone()))
            }
            Some(Value::Number(n)) if key.ends_with("_id") => Ok(Some(n.to_string())),
            Some(_) => Err(format!("`{key}` must be a non-empty string")),
        }
    };
    let base_url = |key: &str| -> Result<(), String> {
        if let Some(u) = text(key)? {
            let url = url::Url::parse(&u)
                .map_err(|_| format!("`{key}` must be an absolute http(s) URL"))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(format!("`{key}` must be an absolute http(s) URL"));
            }
        }
        Ok(())
    };
    match channel_type {
        ChannelType::WhatsappCloud => {
            for key in [
                "phone_number_id",
                "waba_id",
                "access_token",
                "app_secret",
                "verify_token",
            ] {
                text(key)?;
            }
            base_url("api_base_url")?;
            if let Some(v) = obj.get("max_per_second").filter(|v| !v.is_null()) {
                let max = switchboard_domain::pacing::MAX_MAX_PER_SECOND;
                let n = match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.trim().parse::<u64>().ok(),
                    _ => None,
                };
                if !n.is_some_and(|n| (1..=u64::from(max)).contains(&n)) {
                    return Err(format!(
                        "`max_per_second` must be a whole number from 1 to {max}"
                    ));
                }
            }
        }
        ChannelType::Telegram => {
            if let Some(token) = text("bot_token")? {
                if !telegram::token_looks_valid(&token) {
                    return Err(
                        "`bot_token` must look like 123456:ABC-... (from @BotFather)".into(),
                    );
                }
            }
            if let Some(secret) = text("secret_token")? {
                if !telegram::secret_token_valid(&secret) {
                    return Err(
                        "`secret_token` must be 1 to 256 characters of A-Z, a-z, 0-9, '_' and '-'"
                            .into(),
                    );
                }
            }
            base_url("api_base_url")?;
        }
        ChannelType::Sandbox | ChannelType::LeadIngestion => {}
    }
    Ok(())
}

/// The lead-ingestion channel type: receives leads only.
struct LeadIngestion;

#[async_trait]
impl Provider for LeadIngestion {
    fn channel_type(&self) -> ChannelType {
        ChannelType::LeadIngestion
    }

    fn supports(&self, _: MessageType) -> bool {
        false
    }

    fn check_recipient(&self, _: &Contact) -> Result<(), String> {
        Err("lead-ingestion channels cannot send messages".into())
    }

    async fn send(&self, _: &Contact, _: &Outgoing<'_>) -> Result<Accepted, ProviderError> {
        Err(ProviderError::Unsupported(
            "Lead-ingestion channels cannot send messages.".into(),
        ))
    }
}

/// The provider types already logged as unsupported, and the most kept (the types come from
/// providers' payloads: a bounded set, so that a flood of odd types cannot grow it).
static UNSUPPORTED_SEEN: std::sync::Mutex<Vec<(&'static str, String)>> =
    std::sync::Mutex::new(Vec::new());
const UNSUPPORTED_KEPT: usize = 64;

/// An inbound message stored as `unsupported`: counted
/// (`switchboard_inbound_unsupported_total{provider}`), and logged at `warn` with its provider
/// type once per provider and type in this process (never the body), so that a stream of one
/// odd kind is one line, not one per message.
pub(crate) fn warn_unsupported_once(provider: &'static str, provider_type: Option<&str>) {
    metrics::counter!("switchboard_inbound_unsupported_total", "provider" => provider).increment(1);
    let provider_type = provider_type.unwrap_or("");
    let mut seen = UNSUPPORTED_SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.len() >= UNSUPPORTED_KEPT
        || seen
            .iter()
            .any(|(p, t)| *p == provider && t == provider_type)
    {
        return;
    }
    seen.push((provider, provider_type.to_owned()));
    drop(seen);
    tracing::warn!(
        provider,
        provider_type,
        "an inbound message of a kind the service does not show is stored as unsupported (logged once per provider type)"
    );
}

/// Reads at most [`MAX_ANSWER_BYTES`] of a provider's answer.
pub(crate) async fn read_answer(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(describe_reqwest)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err("the provider's answer is too large".into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The `traceparent` of the current trace, for a call to a provider (empty when no trace is
/// current).
pub(crate) fn trace_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(v) = crate::trace::traceparent().and_then(|t| t.parse().ok()) {
        headers.insert("traceparent", v);
    }
    headers
}

/// A reqwest failure in a sentence, without the URL (which may carry a token).
pub(crate) fn describe_reqwest(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "the answer could not be read"
    } else if e.is_request() {
        "the request could not be sent"
    } else {
        "transport error"
    };
    format!("the provider {kind}")
}

/// Constant-time comparison of two secrets.
pub(crate) fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// A provider time given as Unix seconds (a number or a string of digits).
pub(crate) fn unix_seconds(v: Option<&Value>) -> Option<Timestamp> {
    let secs = match v? {
        Value::Number(n) => n.as_i64()?,
        Value::String(s) if s.len() <= 12 => s.parse::<i64>().ok()?,
        _ => return None,
    };
    (0..=253_402_300_799)
        .contains(&secs)
        .then(|| Timestamp::from_millis(secs * 1000))
}

/// Removes NUL characters from every string of a provider's JSON (they cannot be stored).
pub(crate) fn strip_nul(v: &mut Value) {
    match v {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', ""),
        Value::Array(items) => items.iter_mut().for_each(strip_nul),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    strip_nul(&mut v);
                    map.insert(k.replace('\0', ""), v);
                }
            } else {
                map.values_mut().for_each(strip_nul);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_checked_per_type() {
        let wa = ChannelType::WhatsappCloud;
        assert!(check_config(wa, &json!({"phone_number_id": "1", "access_token": "x"})).is_ok());
        assert!(check_config(wa, &json!({"phone_number_id": 1098765})).is_ok());
        assert!(
            check_config(wa, &json!({})).is_ok(),
            "settings may come later"
        );
        assert!(check_config(wa, &json!({"access_token": 5})).is_err());
        assert!(check_config(wa, &json!({"access_token": ""})).is_err());
        assert!(check_config(wa, &json!({"api_base_url": "graph.facebook.com"})).is_err());
        assert!(check_config(wa, &json!({"api_base_url": "http://127.0.0.1:9/v21.0"})).is_ok());
        assert!(check_config(wa, &json!([1])).is_err());
        let tg = ChannelType::Telegram;
        assert!(check_config(tg, &json!({"bot_token": "123456:ABC-def_ghi"})).is_ok());
        assert!(check_config(tg, &json!({"bot_token": "nope"})).is_err());
        assert!(check_config(tg, &json!({"secret_token": "has space"})).is_err());
        assert!(check_config(ChannelType::Sandbox, &json!({"anything": [1]})).is_ok());
    }

    #[test]
    fn provider_times_and_nul_stripping() {
        assert_eq!(
            unix_seconds(Some(&json!("1786000000"))),
            Some(Timestamp::from_millis(1_786_000_000_000))
        );
        assert_eq!(
            unix_seconds(Some(&json!(1786000000))),
            Some(Timestamp::from_millis(1_786_000_000_000))
        );
        assert_eq!(unix_seconds(Some(&json!("soon"))), None);
        assert_eq!(unix_seconds(Some(&json!(-5))), None);
        assert_eq!(unix_seconds(Some(&json!("99999999999999999999"))), None);
        let mut v = json!({"a\u{0}": ["x\u{0}y", {"b": "\u{0}"}]});
        strip_nul(&mut v);
        assert_eq!(v, json!({"a": ["xy", {"b": ""}]}));
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"ab"));
    }
}
