//! Text and interactive sends: the body text, and WhatsApp Cloud API `interactive` objects of
//! type `button` or `list`, normalized.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{
    Content, MAX_BUTTON_ID_CHARS, MAX_BUTTON_TITLE_CHARS, MAX_BUTTONS, MAX_FOOTER_TEXT_CHARS,
    MAX_HEADER_TEXT_CHARS, MAX_INTERACTIVE_BODY_CHARS, MAX_LIST_BUTTON_CHARS, MAX_LIST_ROWS,
    MAX_LIST_SECTIONS, MAX_ROW_DESCRIPTION_CHARS, MAX_ROW_ID_CHARS, MAX_ROW_TITLE_CHARS,
    MAX_SECTION_TITLE_CHARS, MAX_TEXT_CHARS, MessageType, array, check_media_url, check_text,
    object, str_member,
};
use crate::ValidationErrors;

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
