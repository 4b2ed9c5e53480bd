//! Messages: types, directions, the status lifecycle, and the validation of outbound content
//! (text, WhatsApp Cloud API `interactive` objects, media and templates) with field paths.
//!
//! Outbound status: `queued` → `sent` → `delivered` → `read`, or `failed`; inbound messages
//! are `received`. Provider status updates only ever move a message forward; `failed` is
//! terminal and only reachable before delivery.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ValidationErrors;

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

/// A status a provider (or the sandbox tools) reports for an outbound message.
pub fn parse_reported_status(s: &str) -> Option<MessageStatus> {
    match s {
        "sent" => Some(MessageStatus::Sent),
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
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Media {
    pub media_type: MediaType,
    pub media_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
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
        }
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

/// The text/interactive send request's content fields, as received.
#[derive(Clone, Debug, Default)]
pub struct TextInput<'a> {
    pub message: Option<&'a str>,
    /// `text` (default) or `interactive`.
    pub kind: Option<&'a str>,
    pub interactive: Option<&'a Value>,
    pub preview_url: Option<bool>,
}

/// Validates a text or interactive send. For `interactive`, `message` is optional and, when
/// given, is the body text unless `interactive.body.text` is set.
pub fn validate_text(input: &TextInput<'_>) -> Result<Content, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let kind = match input.kind {
        None | Some("text") => MessageType::Text,
        Some("interactive") => MessageType::Interactive,
        Some(other) => {
            errors.add(
                "type",
                format!(
                    "must be `text` or `interactive` (got `{}`); media and templates have their own endpoints",
                    other.chars().take(40).collect::<String>()
                ),
            );
            return Err(errors);
        }
    };
    match kind {
        MessageType::Text => {
            check_text(&mut errors, "message", input.message, MAX_TEXT_CHARS, true);
            if input.interactive.is_some_and(|v| !v.is_null()) {
                errors.add("interactive", "is only allowed with `type: interactive`");
            }
            errors.into_result()?;
            Ok(Content::Text {
                body: input.message.unwrap_or_default().to_owned(),
                preview_url: input.preview_url.unwrap_or(false),
            })
        }
        _ => {
            check_text(
                &mut errors,
                "message",
                input.message,
                MAX_INTERACTIVE_BODY_CHARS,
                false,
            );
            // `validate_interactive` reports why whenever it returns no value.
            match validate_interactive(input.interactive, input.message, &mut errors) {
                Some(value) if errors.is_empty() => Ok(Content::Interactive(value)),
                _ => Err(errors),
            }
        }
    }
}

/// Validates a WhatsApp Cloud API `interactive` object of type `button` or `list` and returns
/// it normalized (unknown members dropped, `body.text` filled from `message` when absent).
fn validate_interactive(
    value: Option<&Value>,
    message: Option<&str>,
    errors: &mut ValidationErrors,
) -> Option<Value> {
    let before = errors.0.len();
    let obj = object(errors, value, "interactive", true)?;
    let kind = str_member(errors, obj, "type", "interactive");
    let mut out = Map::new();

    // body.text: required (or taken from `message`), at most 1024 characters.
    let body = object(errors, obj.get("body"), "interactive.body", false);
    let body_text = match body {
        Some(b) => str_member(errors, b, "text", "interactive.body"),
        None => None,
    };
    match (body_text, message) {
        (Some(t), _) => {
            check_text(
                errors,
                "interactive.body.text",
                Some(t),
                MAX_INTERACTIVE_BODY_CHARS,
                true,
            );
            out.insert("body".into(), json!({ "text": t }));
        }
        (None, Some(m)) => {
            out.insert("body".into(), json!({ "text": m }));
        }
        (None, None) => errors.add(
            "interactive.body.text",
            "is required (or give the body text as `message`)",
        ),
    }

    // footer.text: optional, at most 60 characters.
    if let Some(footer) = object(errors, obj.get("footer"), "interactive.footer", false) {
        let t = str_member(errors, footer, "text", "interactive.footer");
        check_text(
            errors,
            "interactive.footer.text",
            t,
            MAX_FOOTER_TEXT_CHARS,
            true,
        );
        if let Some(t) = t {
            out.insert("footer".into(), json!({ "text": t }));
        }
    }

    let header = object(errors, obj.get("header"), "interactive.header", false);

    match kind {
        None => errors.add(
            "interactive.type",
            "is required: `button` (reply buttons) or `list`",
        ),
        Some("button") => {
            out.insert("type".into(), json!("button"));
            if let Some(h) = header {
                if let Some(h) = validate_header(h, &["text", "image", "video", "document"], errors)
                {
                    out.insert("header".into(), h);
                }
            }
            let action = object(errors, obj.get("action"), "interactive.action", true);
            if let Some(action) = action {
                if let Some(buttons) = validate_buttons(action, errors) {
                    out.insert("action".into(), json!({ "buttons": buttons }));
                }
            }
        }
        Some("list") => {
            out.insert("type".into(), json!("list"));
            if let Some(h) = header {
                if let Some(h) = validate_header(h, &["text"], errors) {
                    out.insert("header".into(), h);
                }
            }
            let action = object(errors, obj.get("action"), "interactive.action", true);
            if let Some(action) = action {
                if let Some(a) = validate_list_action(action, errors) {
                    out.insert("action".into(), a);
                }
            }
        }
        Some(other) => errors.add(
            "interactive.type",
            format!(
                "must be `button` or `list` (got `{}`)",
                other.chars().take(40).collect::<String>()
            ),
        ),
    }
    (errors.0.len() == before).then_some(Value::Object(out))
}

fn validate_header(
    header: &Map<String, Value>,
    allowed: &[&str],
    errors: &mut ValidationErrors,
) -> Option<Value> {
    let path = "interactive.header";
    let kind = str_member(errors, header, "type", path);
    match kind {
        None => {
            errors.add(
                "interactive.header.type",
                format!("is required: one of {}", allowed.join(", ")),
            );
            None
        }
        Some(k) if !allowed.contains(&k) => {
            errors.add(
                "interactive.header.type",
                format!("must be one of {}", allowed.join(", ")),
            );
            None
        }
        Some("text") => {
            let t = str_member(errors, header, "text", path);
            check_text(
                errors,
                "interactive.header.text",
                t,
                MAX_HEADER_TEXT_CHARS,
                true,
            );
            t.map(|t| json!({ "type": "text", "text": t }))
        }
        Some(media) => {
            let field = format!("interactive.header.{media}");
            let obj = object(errors, header.get(media), &field, true)?;
            let link = str_member(errors, obj, "link", &field);
            match link {
                Some(l) => {
                    if let Err(issue) = check_media_url(l) {
                        errors.add(format!("{field}.link"), issue);
                        return None;
                    }
                    Some(json!({ "type": media, media: { "link": l } }))
                }
                None => {
                    errors.add(format!("{field}.link"), "is required");
                    None
                }
            }
        }
    }
}

fn validate_buttons(action: &Map<String, Value>, errors: &mut ValidationErrors) -> Option<Value> {
    let buttons = array(
        errors,
        action.get("buttons"),
        "interactive.action.buttons",
        true,
    )?;
    if buttons.is_empty() || buttons.len() > MAX_BUTTONS {
        errors.add(
            "interactive.action.buttons",
            format!(
                "must hold 1 to {MAX_BUTTONS} reply buttons (got {})",
                buttons.len()
            ),
        );
        return None;
    }
    let mut ids = HashSet::new();
    let mut titles = HashSet::new();
    let mut out = Vec::new();
    for (i, b) in buttons.iter().enumerate() {
        let path = format!("interactive.action.buttons[{i}]");
        let Some(b) = object(errors, Some(b), &path, true) else {
            continue;
        };
        match str_member(errors, b, "type", &path) {
            None | Some("reply") => {}
            Some(_) => errors.add(format!("{path}.type"), "must be `reply`"),
        }
        let reply_path = format!("{path}.reply");
        let Some(reply) = object(errors, b.get("reply"), &reply_path, true) else {
            continue;
        };
        let id = str_member(errors, reply, "id", &reply_path);
        let title = str_member(errors, reply, "title", &reply_path);
        check_text(
            errors,
            &format!("{reply_path}.id"),
            id,
            MAX_BUTTON_ID_CHARS,
            true,
        );
        check_text(
            errors,
            &format!("{reply_path}.title"),
            title,
            MAX_BUTTON_TITLE_CHARS,
            true,
        );
        if let Some(id) = id {
            if !ids.insert(id) {
                errors.add(
                    format!("{reply_path}.id"),
                    "must be unique among the buttons",
                );
            }
        }
        if let Some(title) = title {
            if !titles.insert(title) {
                errors.add(
                    format!("{reply_path}.title"),
                    "must be unique among the buttons",
                );
            }
        }
        out.push(json!({ "type": "reply", "reply": { "id": id, "title": title } }));
    }
    Some(Value::Array(out))
}

fn validate_list_action(
    action: &Map<String, Value>,
    errors: &mut ValidationErrors,
) -> Option<Value> {
    let button = str_member(errors, action, "button", "interactive.action");
    check_text(
        errors,
        "interactive.action.button",
        button,
        MAX_LIST_BUTTON_CHARS,
        true,
    );
    let sections = array(
        errors,
        action.get("sections"),
        "interactive.action.sections",
        true,
    )?;
    if sections.is_empty() || sections.len() > MAX_LIST_SECTIONS {
        errors.add(
            "interactive.action.sections",
            format!(
                "must hold 1 to {MAX_LIST_SECTIONS} sections (got {})",
                sections.len()
            ),
        );
        return None;
    }
    let mut total_rows = 0;
    let mut ids = HashSet::new();
    let mut out_sections = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        let path = format!("interactive.action.sections[{i}]");
        let Some(s) = object(errors, Some(s), &path, true) else {
            continue;
        };
        let title = str_member(errors, s, "title", &path);
        check_text(
            errors,
            &format!("{path}.title"),
            title,
            MAX_SECTION_TITLE_CHARS,
            sections.len() > 1,
        );
        let rows_path = format!("{path}.rows");
        let Some(rows) = array(errors, s.get("rows"), &rows_path, true) else {
            continue;
        };
        if rows.is_empty() {
            errors.add(&rows_path, "must hold at least one row");
        }
        total_rows += rows.len();
        let mut out_rows = Vec::new();
        for (j, r) in rows.iter().enumerate() {
            let row_path = format!("{rows_path}[{j}]");
            let Some(r) = object(errors, Some(r), &row_path, true) else {
                continue;
            };
            let id = str_member(errors, r, "id", &row_path);
            let row_title = str_member(errors, r, "title", &row_path);
            let description = str_member(errors, r, "description", &row_path);
            check_text(
                errors,
                &format!("{row_path}.id"),
                id,
                MAX_ROW_ID_CHARS,
                true,
            );
            check_text(
                errors,
                &format!("{row_path}.title"),
                row_title,
                MAX_ROW_TITLE_CHARS,
                true,
            );
            check_text(
                errors,
                &format!("{row_path}.description"),
                description,
                MAX_ROW_DESCRIPTION_CHARS,
                false,
            );
            if let Some(id) = id {
                if !ids.insert(id) {
                    errors.add(format!("{row_path}.id"), "must be unique in the list");
                }
            }
            let mut row = json!({ "id": id, "title": row_title });
            if let Some(d) = description {
                row["description"] = json!(d);
            }
            out_rows.push(row);
        }
        let mut section = json!({ "rows": out_rows });
        if let Some(t) = title {
            section["title"] = json!(t);
        }
        out_sections.push(section);
    }
    if total_rows > MAX_LIST_ROWS {
        errors.add(
            "interactive.action.sections",
            format!("must hold at most {MAX_LIST_ROWS} rows in all (got {total_rows})"),
        );
    }
    Some(json!({ "button": button, "sections": out_sections }))
}

/// Checks a media URL: absolute `http` or `https` with a host, at most 2048 characters.
pub fn check_media_url(s: &str) -> Result<(), String> {
    if s.len() > MAX_MEDIA_URL_LEN {
        return Err(format!("must be at most {MAX_MEDIA_URL_LEN} characters"));
    }
    let url = url::Url::parse(s.trim()).map_err(|_| {
        "must be an absolute http(s) URL such as https://example.com/file.pdf".to_owned()
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    Ok(())
}

/// The media send request's content fields, as received.
#[derive(Clone, Debug, Default)]
pub struct MediaInput<'a> {
    pub media_type: Option<&'a str>,
    pub media_url: Option<&'a str>,
    pub caption: Option<&'a str>,
    pub file_name: Option<&'a str>,
}

/// Validates a media send. `caption` is not allowed on audio and stickers (no provider shows
/// one); `file_name` is kept for every type but only documents carry it to the provider.
pub fn validate_media(input: &MediaInput<'_>) -> Result<Content, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let media_type = match input.media_type {
        None => {
            errors.add(
                "media_type",
                "is required: document, image, audio, video or sticker",
            );
            None
        }
        Some(t) => match t.parse::<MediaType>() {
            Ok(t) => Some(t),
            Err(e) => {
                errors.add("media_type", e);
                None
            }
        },
    };
    match input.media_url {
        None => errors.add("media_url", "is required"),
        Some(u) => {
            if let Err(issue) = check_media_url(u) {
                errors.add("media_url", issue);
            }
        }
    }
    check_text(
        &mut errors,
        "caption",
        input.caption,
        MAX_CAPTION_CHARS,
        false,
    );
    if input.caption.is_some() && matches!(media_type, Some(MediaType::Audio | MediaType::Sticker))
    {
        errors.add("caption", "is not supported for audio and sticker media");
    }
    if let Some(name) = input.file_name {
        check_text(
            &mut errors,
            "file_name",
            Some(name),
            MAX_FILE_NAME_CHARS,
            true,
        );
        if name
            .chars()
            .any(|c| c.is_control() || c == '/' || c == '\\')
        {
            errors.add(
                "file_name",
                "must not contain control characters or path separators",
            );
        }
    }
    // A missing or unknown media type and a missing URL were reported above.
    match (media_type, input.media_url) {
        (Some(media_type), Some(media_url)) if errors.is_empty() => Ok(Content::Media(Media {
            media_type,
            media_url: media_url.trim().to_owned(),
            caption: input.caption.map(str::to_owned),
            file_name: input.file_name.map(str::to_owned),
        })),
        _ => Err(errors),
    }
}

/// Checks a template language code such as `en`, `en_US`, `pt_BR` or `zh_Hant_HK`.
pub fn check_language(code: &str) -> Result<(), String> {
    let ok = (2..=15).contains(&code.len())
        && code.as_bytes()[0].is_ascii_alphabetic()
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err("must be a language code such as en, en_US or pt_BR".into())
    }
}

const COMPONENT_TYPES: &[&str] = &["header", "body", "footer", "button", "buttons"];

/// Validates a template send's `template` object: `name` and `language` required (`language`
/// as a code, or the WhatsApp form `{"code": "en_US"}`), `components` an optional array of
/// component objects.
pub fn validate_template(value: Option<&Value>) -> Result<Content, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let Some(obj) = object(&mut errors, value, "template", true) else {
        return Err(errors);
    };
    let name = str_member(&mut errors, obj, "name", "template");
    check_text(
        &mut errors,
        "template.name",
        name,
        MAX_TEMPLATE_NAME_CHARS,
        true,
    );
    if let Some(n) = name {
        if n.chars().any(char::is_control) {
            errors.add("template.name", "must not contain control characters");
        }
    }
    let language = match obj.get("language") {
        None | Some(Value::Null) => {
            errors.add("template.language", "is required (a code such as en_US)");
            None
        }
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Object(m)) => match m.get("code") {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => {
                errors.add(
                    "template.language.code",
                    "is required (a code such as en_US)",
                );
                None
            }
        },
        Some(_) => {
            errors.add("template.language", "must be a language code such as en_US");
            None
        }
    };
    if let Some(l) = language {
        if let Err(issue) = check_language(l) {
            errors.add("template.language", issue);
        }
    }
    let components = validate_template_components(&mut errors, obj.get("components"));
    // A missing name or language was reported above.
    match (name, language) {
        (Some(name), Some(language)) if errors.is_empty() => Ok(Content::Template(Template {
            name: name.to_owned(),
            language: language.to_owned(),
            components,
        })),
        _ => Err(errors),
    }
}

/// Checks the `components` of a template send (an optional array of at most
/// [`MAX_TEMPLATE_COMPONENTS`] component objects, each with a known `type` and typed
/// `parameters`), adding errors under `template.components`; returns the components as given.
pub fn validate_template_components(
    errors: &mut ValidationErrors,
    value: Option<&Value>,
) -> Vec<Value> {
    match array(errors, value, "template.components", false) {
        None => Vec::new(),
        Some(items) => {
            if items.len() > MAX_TEMPLATE_COMPONENTS {
                errors.add(
                    "template.components",
                    format!("must hold at most {MAX_TEMPLATE_COMPONENTS} components"),
                );
            }
            for (i, c) in items.iter().enumerate() {
                let path = format!("template.components[{i}]");
                let Some(c) = object(errors, Some(c), &path, true) else {
                    continue;
                };
                match str_member(errors, c, "type", &path) {
                    None => errors.add(
                        format!("{path}.type"),
                        "is required: header, body, footer or button",
                    ),
                    Some(t) if !COMPONENT_TYPES.contains(&t.to_ascii_lowercase().as_str()) => {
                        errors.add(
                            format!("{path}.type"),
                            "must be header, body, footer or button",
                        )
                    }
                    Some(_) => {}
                }
                if let Some(params) = array(
                    errors,
                    c.get("parameters"),
                    &format!("{path}.parameters"),
                    false,
                ) {
                    for (j, p) in params.iter().enumerate() {
                        let ppath = format!("{path}.parameters[{j}]");
                        if let Some(p) = object(errors, Some(p), &ppath, true) {
                            if str_member(errors, p, "type", &ppath).is_none()
                                && !errors.0.iter().any(|e| e.field == format!("{ppath}.type"))
                            {
                                errors.add(format!("{ppath}.type"), "is required");
                            }
                        }
                    }
                }
                if contains_nul(&Value::Object(c.clone())) {
                    errors.add(&path, "must not contain NUL characters");
                }
            }
            items.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(e: &ValidationErrors) -> Vec<&str> {
        e.0.iter().map(|f| f.field.as_str()).collect()
    }

    #[test]
    fn statuses_move_forward_only() {
        use MessageStatus::*;
        assert!(Queued.can_advance_to(Sent));
        assert!(Sent.can_advance_to(Delivered));
        assert!(Sent.can_advance_to(Read), "read implies delivered");
        assert!(Delivered.can_advance_to(Read));
        assert!(Sent.can_advance_to(Failed));
        assert!(Queued.can_advance_to(Failed));
        assert!(!Delivered.can_advance_to(Sent));
        assert!(!Read.can_advance_to(Delivered));
        assert!(!Read.can_advance_to(Read), "a duplicate is not a move");
        assert!(!Delivered.can_advance_to(Failed));
        assert!(!Failed.can_advance_to(Delivered));
        assert!(!Received.can_advance_to(Read));
        assert_eq!(MessageStatus::predecessors(Delivered), vec![Queued, Sent]);
        assert_eq!(MessageStatus::predecessors(Failed), vec![Queued, Sent]);
        assert_eq!(parse_reported_status("read"), Some(Read));
        assert_eq!(parse_reported_status("received"), None);
    }

    #[test]
    fn text_rules() {
        let ok = validate_text(&TextInput {
            message: Some("hello"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ok.message_type(), MessageType::Text);
        assert_eq!(ok.to_json(), json!({"body": "hello"}));
        let long = "é".repeat(4096);
        assert!(
            validate_text(&TextInput {
                message: Some(&long),
                ..Default::default()
            })
            .is_ok(),
            "4096 characters, not bytes"
        );
        let too_long = "a".repeat(4097);
        for (input, field) in [
            (TextInput::default(), "message"),
            (
                TextInput {
                    message: Some("  "),
                    ..Default::default()
                },
                "message",
            ),
            (
                TextInput {
                    message: Some(&too_long),
                    ..Default::default()
                },
                "message",
            ),
            (
                TextInput {
                    message: Some("a\0b"),
                    ..Default::default()
                },
                "message",
            ),
            (
                TextInput {
                    message: Some("x"),
                    kind: Some("video"),
                    ..Default::default()
                },
                "type",
            ),
        ] {
            let e = validate_text(&input).unwrap_err();
            assert_eq!(fields(&e), vec![field], "{input:?}");
        }
    }

    fn interactive(v: Value) -> Result<Content, ValidationErrors> {
        validate_text(&TextInput {
            kind: Some("interactive"),
            interactive: Some(&v),
            ..Default::default()
        })
    }

    #[test]
    fn reply_buttons() {
        let ok = interactive(json!({
            "type": "button",
            "body": {"text": "Pick one"},
            "footer": {"text": "thanks"},
            "action": {"buttons": [
                {"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
                {"type": "reply", "reply": {"id": "no", "title": "No"}}
            ]},
            "unknown": 1
        }))
        .unwrap();
        let Content::Interactive(v) = ok else {
            panic!()
        };
        assert_eq!(v["action"]["buttons"][1]["reply"]["id"], "no");
        assert!(v.get("unknown").is_none());

        let four = json!({"type": "button", "body": {"text": "x"}, "action": {"buttons": [
            {"type": "reply", "reply": {"id": "1", "title": "a"}},
            {"type": "reply", "reply": {"id": "2", "title": "b"}},
            {"type": "reply", "reply": {"id": "3", "title": "c"}},
            {"type": "reply", "reply": {"id": "4", "title": "d"}}
        ]}});
        assert_eq!(
            fields(&interactive(four).unwrap_err()),
            vec!["interactive.action.buttons"]
        );
        let none = json!({"type": "button", "body": {"text": "x"}, "action": {"buttons": []}});
        assert_eq!(
            fields(&interactive(none).unwrap_err()),
            vec!["interactive.action.buttons"]
        );
        let bad = json!({"type": "button", "action": {"buttons": [
            {"type": "reply", "reply": {"id": "1", "title": "a title longer than twenty"}},
            {"type": "reply", "reply": {"id": "1", "title": "b"}},
            {"type": "url", "reply": {"title": "c"}}
        ]}});
        assert_eq!(
            fields(&interactive(bad).unwrap_err()),
            vec![
                "interactive.body.text",
                "interactive.action.buttons[0].reply.title",
                "interactive.action.buttons[1].reply.id",
                "interactive.action.buttons[2].type",
                "interactive.action.buttons[2].reply.id",
            ]
        );
        // The body may come from `message`.
        let from_message = validate_text(&TextInput {
            message: Some("Body from message"),
            kind: Some("interactive"),
            interactive: Some(&json!({"type": "button", "action": {"buttons": [
                {"type": "reply", "reply": {"id": "1", "title": "a"}}]}})),
            ..Default::default()
        })
        .unwrap();
        let Content::Interactive(v) = from_message else {
            panic!()
        };
        assert_eq!(v["body"]["text"], "Body from message");
        assert_eq!(
            fields(
                &validate_text(&TextInput {
                    kind: Some("interactive"),
                    ..Default::default()
                })
                .unwrap_err()
            ),
            vec!["interactive"]
        );
        assert_eq!(
            fields(&interactive(json!({"type": "carousel", "body": {"text": "x"}})).unwrap_err()),
            vec!["interactive.type"]
        );
        assert_eq!(
            fields(&interactive(json!("button")).unwrap_err()),
            vec!["interactive"]
        );
    }

    #[test]
    fn lists() {
        let row = |i: usize| json!({"id": format!("r{i}"), "title": format!("Row {i}")});
        let ok = json!({"type": "list", "header": {"type": "text", "text": "Menu"},
        "body": {"text": "Choose"}, "action": {"button": "Options", "sections": [
            {"title": "A", "rows": (0..5).map(row).collect::<Vec<_>>()},
            {"title": "B", "rows": (5..10).map(row).collect::<Vec<_>>()}
        ]}});
        assert!(interactive(ok).is_ok());
        let eleven = json!({"type": "list", "body": {"text": "Choose"}, "action": {"button": "Options",
            "sections": [{"rows": (0..11).map(row).collect::<Vec<_>>()}]}});
        assert_eq!(
            fields(&interactive(eleven).unwrap_err()),
            vec!["interactive.action.sections"]
        );
        let bad = json!({"type": "list", "header": {"type": "image", "image": {"link": "https://x.test/a.png"}},
        "body": {"text": "Choose"}, "action": {"button": "A button label too long",
        "sections": [
            {"rows": [{"id": "a", "title": "a row title that is too long"}]},
            {"title": "two", "rows": [{"id": "a", "title": "dup"}]}
        ]}});
        assert_eq!(
            fields(&interactive(bad).unwrap_err()),
            vec![
                "interactive.header.type",
                "interactive.action.button",
                "interactive.action.sections[0].title",
                "interactive.action.sections[0].rows[0].title",
                "interactive.action.sections[1].rows[0].id",
            ]
        );
    }

    #[test]
    fn media_rules() {
        let ok = validate_media(&MediaInput {
            media_type: Some("document"),
            media_url: Some("https://cdn.example.com/invoice.pdf"),
            caption: Some("Your invoice"),
            file_name: Some("invoice.pdf"),
        })
        .unwrap();
        assert_eq!(
            ok.to_json(),
            json!({"media_type": "document", "media_url": "https://cdn.example.com/invoice.pdf",
                   "caption": "Your invoice", "file_name": "invoice.pdf"})
        );
        let e = validate_media(&MediaInput {
            media_type: Some("pdf"),
            media_url: Some("ftp://example.com/x"),
            caption: None,
            file_name: Some("../etc/passwd"),
        })
        .unwrap_err();
        assert_eq!(fields(&e), vec!["media_type", "media_url", "file_name"]);
        let e = validate_media(&MediaInput {
            media_type: Some("audio"),
            media_url: Some("/relative.mp3"),
            caption: Some("no"),
            file_name: None,
        })
        .unwrap_err();
        assert_eq!(fields(&e), vec!["media_url", "caption"]);
        let e = validate_media(&MediaInput::default()).unwrap_err();
        assert_eq!(fields(&e), vec!["media_type", "media_url"]);
        for bad in [
            "https://user:pw@example.com/a",
            "http://",
            "javascript:alert(1)",
            "example.com/a.pdf",
        ] {
            assert!(check_media_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn template_rules() {
        let ok = validate_template(Some(&json!({"name": "order_update", "language": "en_US",
            "components": [{"type": "body", "parameters": [{"type": "text", "text": "42"}]}]})))
        .unwrap();
        let Content::Template(t) = ok else { panic!() };
        assert_eq!(
            (t.name.as_str(), t.language.as_str()),
            ("order_update", "en_US")
        );
        let ok =
            validate_template(Some(&json!({"name": "x", "language": {"code": "pt_BR"}}))).unwrap();
        let Content::Template(t) = ok else { panic!() };
        assert_eq!(t.language, "pt_BR");
        assert!(t.components.is_empty());

        assert_eq!(
            fields(&validate_template(None).unwrap_err()),
            vec!["template"]
        );
        assert_eq!(
            fields(&validate_template(Some(&json!({}))).unwrap_err()),
            vec!["template.name", "template.language"]
        );
        let e = validate_template(Some(&json!({"name": "", "language": "english please",
            "components": [{"type": "sidebar"}, 3, {"type": "body", "parameters": [{}]}]})))
        .unwrap_err();
        assert_eq!(
            fields(&e),
            vec![
                "template.name",
                "template.language",
                "template.components[0].type",
                "template.components[1]",
                "template.components[2].parameters[0].type",
            ]
        );
        assert_eq!(
            fields(
                &validate_template(Some(
                    &json!({"name": "x", "language": "en", "components": {}})
                ))
                .unwrap_err()
            ),
            vec!["template.components"]
        );
    }

    #[test]
    fn nul_characters_are_found_anywhere() {
        assert!(contains_nul(&json!({"a": [1, {"b": "x\u{0}"}]})));
        assert!(contains_nul(&json!({"k\u{0}": 1})));
        assert!(!contains_nul(&json!({"a": [1, {"b": "x"}]})));
    }
}
