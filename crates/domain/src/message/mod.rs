//! Messages: types, directions, the status lifecycle, and the validation of outbound content
//! (text, WhatsApp Cloud API `interactive` objects, media and templates) with field paths.
//!
//! Outbound status: `queued` → `sent` → `delivered` → `read`, or `failed`; inbound messages
//! are `received`. Provider status updates only ever move a message forward; `failed` is
//! terminal and only reachable before delivery.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ValidationErrors;

mod kinds;
mod media;
mod template;
mod text;
pub mod timeline;

pub use kinds::{
    ContactsMember, InboundContext, LocationMember, MAX_SHARED_CONTACTS, MediaMember,
    MessageChange, MessageKind, OrderItem, OrderMember, ProviderIssue, ReactionMember, Referral,
    ReplyTo, SystemMember, TextMember, UnsupportedMember, inbound_interactive, reaction, shown,
    validate_contacts, validate_location, validate_reaction_emoji,
};
pub use media::{
    MEDIA_UPLOAD_REUSE, MediaInput, MediaIssue, MediaLimit, SNIFF_BYTES, WHATSAPP_AUDIO_TYPES,
    check_media_url, check_whatsapp_media, sniff_mime, validate_media, whatsapp_media_limit,
};
pub use template::{check_language, validate_template, validate_template_components};
pub use text::{TextInput, validate_text};

/// Longest text body (WhatsApp Cloud API and Telegram both allow 4096 characters).
pub const MAX_TEXT_CHARS: usize = 4096;
/// Longest body text of an interactive message.
pub const MAX_INTERACTIVE_BODY_CHARS: usize = 1024;
/// Longest header text and footer text of an interactive message.
pub const MAX_HEADER_TEXT_CHARS: usize = 60;
pub const MAX_FOOTER_TEXT_CHARS: usize = 60;
/// Reply buttons: 1 to 3, titles up to 20 characters, ids up to 256.
pub const MAX_BUTTONS: usize = 3;
pub const MAX_BUTTON_TITLE_CHARS: usize = 20;
pub const MAX_BUTTON_ID_CHARS: usize = 256;
/// Lists: up to 10 sections and 10 rows in all; row titles up to 24 characters.
pub const MAX_LIST_SECTIONS: usize = 10;
pub const MAX_LIST_ROWS: usize = 10;
pub const MAX_LIST_BUTTON_CHARS: usize = 20;
pub const MAX_SECTION_TITLE_CHARS: usize = 24;
pub const MAX_ROW_TITLE_CHARS: usize = 24;
pub const MAX_ROW_DESCRIPTION_CHARS: usize = 72;
pub const MAX_ROW_ID_CHARS: usize = 200;
/// Media captions and file names.
pub const MAX_CAPTION_CHARS: usize = 1024;
pub const MAX_FILE_NAME_CHARS: usize = 240;
pub const MAX_MEDIA_URL_LEN: usize = 2048;
/// Templates.
pub const MAX_TEMPLATE_NAME_CHARS: usize = 512;
pub const MAX_TEMPLATE_COMPONENTS: usize = 20;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err(format!(
                        "`{}` is not one of {}",
                        s.chars().take(40).collect::<String>(),
                        [$($text),*].join(", ")
                    )),
                }
            }
        }
    };
}

pub(crate) use string_enum;

string_enum!(
    /// The kind of content a message carries.
    MessageType {
        Text => "text",
        Interactive => "interactive",
        Media => "media",
        Template => "template",
        Reaction => "reaction",
        Location => "location",
        Contacts => "contacts",
        Order => "order",
        System => "system",
        Unsupported => "unsupported",
    }
);

string_enum!(
    /// Which way a message travelled.
    Direction {
        Outbound => "outbound",
        Inbound => "inbound",
    }
);

string_enum!(
    /// Message status. Outbound: queued → sent → delivered → read, or failed. Inbound: received.
    MessageStatus {
        Queued => "queued",
        Sent => "sent",
        Delivered => "delivered",
        Read => "read",
        Failed => "failed",
        Received => "received",
    }
);

string_enum!(
    /// Media kinds (CONVENTIONS.md).
    MediaType {
        Document => "document",
        Image => "image",
        Audio => "audio",
        Video => "video",
        Sticker => "sticker",
    }
);

impl MessageStatus {
    /// The position on the outbound path (`failed` and `received` are off it).
    fn rank(self) -> Option<u8> {
        match self {
            MessageStatus::Queued => Some(0),
            MessageStatus::Sent => Some(1),
            MessageStatus::Delivered => Some(2),
            MessageStatus::Read => Some(3),
            MessageStatus::Failed | MessageStatus::Received => None,
        }
    }

    /// Whether an outbound message in status `self` may move to `next`: only forward along
    /// queued → sent → delivered → read (skipping steps is fine: `read` implies delivered),
    /// or to `failed` before delivery. `failed`, `read` and `received` are final; a status
    /// update to the current status (a duplicate) is not a move.
    pub fn can_advance_to(self, next: MessageStatus) -> bool {
        match (self.rank(), next) {
            (Some(current), MessageStatus::Failed) => current <= 1,
            (Some(current), next) => next.rank().is_some_and(|n| n > current),
            (None, _) => false,
        }
    }

    /// The statuses from which `next` can be reached (for conditional updates in SQL).
    pub fn predecessors(next: MessageStatus) -> Vec<MessageStatus> {
        MessageStatus::ALL
            .iter()
            .copied()
            .filter(|s| s.can_advance_to(next))
            .collect()
    }
}

/// A status a provider (or the sandbox tools) reports for an outbound message (WhatsApp's
/// `played`, a voice message listened to, counts as `read`).
pub fn parse_reported_status(s: &str) -> Option<MessageStatus> {
    match s {
        "sent" => Some(MessageStatus::Sent),
        "played" => Some(MessageStatus::Read),
        "delivered" => Some(MessageStatus::Delivered),
        "read" => Some(MessageStatus::Read),
        "failed" => Some(MessageStatus::Failed),
        _ => None,
    }
}

/// Validated outbound content, ready for a provider adapter and for storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    Text {
        body: String,
        preview_url: bool,
    },
    /// A WhatsApp Cloud API `interactive` object (type `button` or `list`), validated.
    Interactive(Value),
    Media(Media),
    Template(Template),
    /// A reaction to a message of the recipient's: `message_uuid` is ours, `provider_message_id`
    /// the provider's (resolved by the send before the provider call); `emoji` null removes it.
    Reaction(ReactionMember),
    Location(LocationMember),
    Contacts(ContactsMember),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Media {
    pub media_type: MediaType,
    pub media_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// The provider's id of an upload of the file (WhatsApp Cloud: set by the media pipeline
    /// just before the send, which then goes by id instead of by link). Never stored or shown.
    #[serde(skip)]
    pub media_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Template {
    pub name: String,
    /// A language code such as `en_US`.
    pub language: String,
    pub components: Vec<Value>,
}

impl Content {
    pub fn message_type(&self) -> MessageType {
        match self {
            Content::Text { .. } => MessageType::Text,
            Content::Interactive(_) => MessageType::Interactive,
            Content::Media(_) => MessageType::Media,
            Content::Template(_) => MessageType::Template,
            Content::Reaction(_) => MessageType::Reaction,
            Content::Location(_) => MessageType::Location,
            Content::Contacts(_) => MessageType::Contacts,
        }
    }

    /// Content read back from its stored form ([`Content::to_json`]) and the message's type;
    /// `None` when the stored object is not content of that type.
    pub fn from_stored(message_type: MessageType, v: &Value) -> Option<Content> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(match message_type {
            MessageType::Text => Content::Text {
                body: text("body")?,
                preview_url: v
                    .get("preview_url")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            MessageType::Interactive => Content::Interactive(v.clone()),
            MessageType::Media => Content::Media(Media {
                media_type: text("media_type")?.parse().ok()?,
                media_url: text("media_url")?,
                caption: text("caption"),
                file_name: text("file_name"),
                media_id: None,
            }),
            MessageType::Template => Content::Template(Template {
                name: text("name")?,
                language: text("language")?,
                components: v
                    .get("components")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            }),
            MessageType::Reaction => Content::Reaction(serde_json::from_value(v.clone()).ok()?),
            MessageType::Location => Content::Location(serde_json::from_value(v.clone()).ok()?),
            MessageType::Contacts => Content::Contacts(serde_json::from_value(v.clone()).ok()?),
            // Kinds without an outbound [`Content`] form (see [`MessageKind`]).
            MessageType::Order | MessageType::System | MessageType::Unsupported => return None,
        })
    }

    /// The stored (and shown) form: the object under the message's `type` key.
    pub fn to_json(&self) -> Value {
        match self {
            Content::Text { body, preview_url } => {
                let mut v = json!({ "body": body });
                if *preview_url {
                    v["preview_url"] = Value::Bool(true);
                }
                v
            }
            Content::Interactive(v) => v.clone(),
            Content::Media(m) => serde_json::to_value(m).expect("media serializes"),
            Content::Template(t) => serde_json::to_value(t).expect("template serializes"),
            Content::Reaction(r) => serde_json::to_value(r).expect("reaction serializes"),
            Content::Location(l) => serde_json::to_value(l).expect("location serializes"),
            Content::Contacts(c) => serde_json::to_value(c).expect("contacts serialize"),
        }
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Whether a JSON value holds a NUL character in any string or key (PostgreSQL cannot store
/// one in `TEXT` or `JSONB`, and no provider accepts one).
pub fn contains_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// Checks a required text: present, not blank, within `max` characters, no NUL.
fn check_text(
    errors: &mut ValidationErrors,
    field: &str,
    value: Option<&str>,
    max: usize,
    required: bool,
) {
    match value {
        None if required => errors.add(field, "is required"),
        None => {}
        Some(s) if s.trim().is_empty() => errors.add(field, "must not be blank"),
        Some(s) if s.contains('\0') => errors.add(field, "must not contain NUL characters"),
        Some(s) if chars(s) > max => errors.add(
            field,
            format!("must be at most {max} characters (got {})", chars(s)),
        ),
        Some(_) => {}
    }
}

/// A string member of a JSON object, with a type error reported when it is not a string.
fn str_member<'a>(
    errors: &mut ValidationErrors,
    obj: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Option<&'a str> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            errors.add(format!("{path}.{key}"), "must be a string");
            None
        }
    }
}

fn object<'a>(
    errors: &mut ValidationErrors,
    value: Option<&'a Value>,
    path: &str,
    required: bool,
) -> Option<&'a Map<String, Value>> {
    match value {
        None | Some(Value::Null) => {
            if required {
                errors.add(path, "is required");
            }
            None
        }
        Some(Value::Object(m)) => Some(m),
        Some(_) => {
            errors.add(path, "must be an object");
            None
        }
    }
}

fn array<'a>(
    errors: &mut ValidationErrors,
    value: Option<&'a Value>,
    path: &str,
    required: bool,
) -> Option<&'a Vec<Value>> {
    match value {
        None | Some(Value::Null) => {
            if required {
                errors.add(path, "is required");
            }
            None
        }
        Some(Value::Array(a)) => Some(a),
        Some(_) => {
            errors.add(path, "must be an array");
            None
        }
    }
}

#[cfg(test)]
mod tests;
