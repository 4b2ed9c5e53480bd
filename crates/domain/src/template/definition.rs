//! Component definitions: the WhatsApp components of a catalog template, from which the
//! parameters a send must supply are derived.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{
    MAX_BODY_CHARS, MAX_BUTTONS, MAX_DEFINITION_COMPONENTS, MAX_FOOTER_CHARS, MAX_HEADER_CHARS,
};
use crate::ValidationErrors;
use crate::message::contains_nul;

/// What a template's header needs when sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderDef {
    /// No header.
    None,
    /// A text header with 0 or 1 placeholder.
    Text { parameters: usize },
    /// A media or location header: a send supplies one parameter of this type (`image`,
    /// `video`, `document` or `location`).
    Media(&'static str),
}

/// One button of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ButtonDef {
    /// The button type in upper case (`QUICK_REPLY`, `URL`, `COPY_CODE`, `OTP`, ...).
    pub kind: String,
    /// How many parameters a send must supply for it (0 or 1).
    pub required: usize,
    /// How many it may supply.
    pub allowed: usize,
}

/// What a template's component definitions ask of a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateDefinition {
    pub header: HeaderDef,
    /// The number of BODY parameters (the highest `{{n}}`).
    pub body_parameters: usize,
    pub buttons: Vec<ButtonDef>,
}

impl TemplateDefinition {
    pub fn header_parameters(&self) -> usize {
        match self.header {
            HeaderDef::None => 0,
            HeaderDef::Text { parameters } => parameters,
            HeaderDef::Media(_) => 1,
        }
    }

    /// Parameters the buttons need, in all.
    pub fn button_parameters(&self) -> usize {
        self.buttons.iter().map(|b| b.required).sum()
    }
}

/// The numbered placeholders (`{{1}}`, `{{2}}`, ...) of a text, in order of appearance;
/// `Err` names the first placeholder that is not a positive number.
fn placeholders(text: &str) -> Result<Vec<usize>, String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let inner = after[..end].trim();
        match inner.parse::<usize>() {
            Ok(n) if n >= 1 && inner.bytes().all(|b| b.is_ascii_digit()) => found.push(n),
            _ => {
                return Err(format!(
                    "has the placeholder {{{{{}}}}}: only numbered placeholders {{{{1}}}}, {{{{2}}}}, ... are supported",
                    inner.chars().take(40).collect::<String>()
                ));
            }
        }
        rest = &after[end + 2..];
    }
    Ok(found)
}

/// Checks the placeholders of a text: numbered 1..n without gaps, at most `max` distinct ones.
/// Returns n.
fn count_placeholders(text: &str, max: Option<usize>) -> Result<usize, String> {
    let found: BTreeSet<usize> = placeholders(text)?.into_iter().collect();
    let n = found.len();
    if let Some(&highest) = found.iter().next_back() {
        if highest != n {
            let missing: Vec<String> = (1..=highest)
                .filter(|i| !found.contains(i))
                .map(|i| format!("{{{{{i}}}}}"))
                .collect();
            return Err(format!(
                "numbers its placeholders with gaps (missing {}): use {{{{1}}}} to {{{{{highest}}}}} in order",
                missing.join(", ")
            ));
        }
    }
    if let Some(max) = max {
        if n > max {
            return Err(format!("may have at most {max} placeholder(s), found {n}"));
        }
    }
    Ok(n)
}

fn upper_member(c: &Map<String, Value>, key: &str) -> Option<String> {
    c.get(key)
        .and_then(Value::as_str)
        .map(|s| s.trim().to_ascii_uppercase())
}

fn text_member<'a>(
    errors: &mut ValidationErrors,
    c: &'a Map<String, Value>,
    path: &str,
    max: usize,
) -> Option<&'a str> {
    match c.get("text") {
        Some(Value::String(t)) if !t.trim().is_empty() => {
            if t.chars().count() > max {
                errors.add(
                    format!("{path}.text"),
                    format!("must be at most {max} characters"),
                );
            }
            Some(t.as_str())
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            errors.add(format!("{path}.text"), "is required");
            None
        }
        Some(_) => {
            errors.add(format!("{path}.text"), "must be a string");
            None
        }
    }
}

/// Parses and checks a template's component definitions (the WhatsApp Cloud API form:
/// `[{"type": "HEADER", "format": "TEXT", "text": "..."}, {"type": "BODY", "text": "Hi
/// {{1}}"}, {"type": "FOOTER", "text": "..."}, {"type": "BUTTONS", "buttons": [{"type":
/// "URL", "text": "Track", "url": "https://x.test/{{1}}"}]}]`; types and formats in any
/// case). Known component types only; exactly one BODY with text; placeholders numbered 1..n
/// without gaps (HEADER text and URL buttons at most `{{1}}`). `null` and `[]` mean "not
/// defined": `Ok(None)`, and a send's parameters are then not checked.
///
/// Errors are reported under `path` (e.g. `--components` or `components`).
pub fn parse_definition(
    components: &Value,
    path: &str,
) -> Result<Option<TemplateDefinition>, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let items = match components {
        Value::Null => return Ok(None),
        Value::Array(items) if items.is_empty() => return Ok(None),
        Value::Array(items) => items,
        _ => {
            errors.add(path, "must be a JSON array of component objects");
            return Err(errors);
        }
    };
    if contains_nul(components) {
        errors.add(path, "must not contain NUL characters");
        return Err(errors);
    }
    if items.len() > MAX_DEFINITION_COMPONENTS {
        errors.add(
            path,
            format!("must hold at most {MAX_DEFINITION_COMPONENTS} components"),
        );
        return Err(errors);
    }
    let mut header = HeaderDef::None;
    let mut body = None;
    let mut buttons = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, c) in items.iter().enumerate() {
        let cpath = format!("{path}[{i}]");
        let Some(c) = c.as_object() else {
            errors.add(cpath, "must be an object");
            continue;
        };
        let Some(kind) = upper_member(c, "type") else {
            errors.add(
                format!("{cpath}.type"),
                "is required: HEADER, BODY, FOOTER or BUTTONS",
            );
            continue;
        };
        if !["HEADER", "BODY", "FOOTER", "BUTTONS"].contains(&kind.as_str()) {
            errors.add(
                format!("{cpath}.type"),
                "must be HEADER, BODY, FOOTER or BUTTONS",
            );
            continue;
        }
        if !seen.insert(kind.clone()) {
            errors.add(
                format!("{cpath}.type"),
                format!("{kind} appears more than once"),
            );
            continue;
        }
        match kind.as_str() {
            "BODY" => {
                if let Some(text) = text_member(&mut errors, c, &cpath, MAX_BODY_CHARS) {
                    match count_placeholders(text, None) {
                        Ok(n) => body = Some(n),
                        Err(e) => errors.add(format!("{cpath}.text"), e),
                    }
                }
            }
            "HEADER" => header = header_def(&mut errors, c, &cpath),
            "FOOTER" => {
                if let Some(text) = text_member(&mut errors, c, &cpath, MAX_FOOTER_CHARS) {
                    match count_placeholders(text, Some(0)) {
                        Ok(_) => {}
                        Err(e) => errors.add(format!("{cpath}.text"), e),
                    }
                }
            }
            _ => button_defs(&mut errors, c, &cpath, &mut buttons),
        }
    }
    if !seen.contains("BODY") && errors.is_empty() {
        errors.add(path, "must have a BODY component with its text");
    }
    errors.into_result()?;
    Ok(Some(TemplateDefinition {
        header,
        body_parameters: body.unwrap_or(0),
        buttons,
    }))
}

/// A `HEADER` component: text (at most one parameter) or media.
fn header_def(errors: &mut ValidationErrors, c: &Map<String, Value>, cpath: &str) -> HeaderDef {
    let format = upper_member(c, "format").unwrap_or_else(|| "TEXT".into());
    match format.as_str() {
        "TEXT" => match text_member(errors, c, cpath, MAX_HEADER_CHARS) {
            Some(text) => match count_placeholders(text, Some(1)) {
                Ok(n) => HeaderDef::Text { parameters: n },
                Err(e) => {
                    errors.add(format!("{cpath}.text"), e);
                    HeaderDef::None
                }
            },
            None => HeaderDef::None,
        },
        "IMAGE" => HeaderDef::Media("image"),
        "VIDEO" => HeaderDef::Media("video"),
        "DOCUMENT" => HeaderDef::Media("document"),
        "LOCATION" => HeaderDef::Media("location"),
        _ => {
            errors.add(
                format!("{cpath}.format"),
                "must be TEXT, IMAGE, VIDEO, DOCUMENT or LOCATION",
            );
            HeaderDef::None
        }
    }
}

/// A `BUTTONS` component: 1 to 10 buttons, each with the parameters its type takes.
fn button_defs(
    errors: &mut ValidationErrors,
    c: &Map<String, Value>,
    cpath: &str,
    buttons: &mut Vec<ButtonDef>,
) {
    let list = match c.get("buttons") {
        Some(Value::Array(b)) if !b.is_empty() && b.len() <= MAX_BUTTONS => b,
        _ => {
            errors.add(
                format!("{cpath}.buttons"),
                format!("must be an array of 1 to {MAX_BUTTONS} buttons"),
            );
            return;
        }
    };
    for (j, b) in list.iter().enumerate() {
        let bpath = format!("{cpath}.buttons[{j}]");
        let Some(b) = b.as_object() else {
            errors.add(bpath, "must be an object");
            continue;
        };
        let Some(kind) = upper_member(b, "type").filter(|k| !k.is_empty()) else {
            errors.add(
                format!("{bpath}.type"),
                "is required (QUICK_REPLY, URL, PHONE_NUMBER, COPY_CODE, OTP, ...)",
            );
            continue;
        };
        let (required, allowed) = match kind.as_str() {
            "URL" => match b.get("url") {
                Some(Value::String(url)) if !url.trim().is_empty() => {
                    match count_placeholders(url, Some(1)) {
                        Ok(n) => (n, n),
                        Err(e) => {
                            errors.add(format!("{bpath}.url"), e);
                            (0, 0)
                        }
                    }
                }
                _ => {
                    errors.add(format!("{bpath}.url"), "is required for URL buttons");
                    (0, 0)
                }
            },
            "QUICK_REPLY" => (0, 1),
            "COPY_CODE" | "OTP" => (1, 1),
            "PHONE_NUMBER" | "VOICE_CALL" => (0, 0),
            _ => (0, 1),
        };
        buttons.push(ButtonDef {
            kind,
            required,
            allowed,
        });
    }
}
