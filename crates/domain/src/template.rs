//! The template catalogue and consent evidence (specification 1.5, 2.6 and 4.3).
//!
//! * Templates: a channel's provider templates (`name`, `language`, `category`, `status`,
//!   `active`) with their WhatsApp component definitions, from which the parameters a send
//!   must supply are derived ([`TemplateDefinition`]).
//! * What a send supplies: the `template` object of a catalog send ([`RequestTemplate`]) and
//!   whether its parameters fit the definition ([`fit_parameters`]).
//! * Consent: the opt-in evidence of a catalog send ([`parse_consent`]) and which purposes
//!   allow which template categories ([`purpose_allows`]).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::{check_language, contains_nul, string_enum, validate_template_components};
use super::{Timestamp, ValidationErrors};

/// Longest template name (WhatsApp allows 512).
pub const MAX_NAME_CHARS: usize = 512;
/// At most this many component definitions.
pub const MAX_DEFINITION_COMPONENTS: usize = 10;
/// Longest BODY text of a definition (WhatsApp: 1024).
pub const MAX_BODY_CHARS: usize = 1024;
/// Longest HEADER and FOOTER text of a definition (WhatsApp: 60).
pub const MAX_HEADER_CHARS: usize = 60;
pub const MAX_FOOTER_CHARS: usize = 60;
/// At most this many buttons (WhatsApp: 10).
pub const MAX_BUTTONS: usize = 10;
/// Longest provider template id.
pub const MAX_PROVIDER_ID_CHARS: usize = 128;
/// Longest consent `reference`.
pub const MAX_REFERENCE_CHARS: usize = 256;

string_enum!(
    /// A template's category (the WhatsApp categories, in lower case).
    TemplateCategory {
        Utility => "utility",
        Marketing => "marketing",
        Authentication => "authentication",
    }
);

string_enum!(
    /// A template's review status at the provider. Only `approved` templates can be sent.
    TemplateStatus {
        Approved => "approved",
        Pending => "pending",
        Rejected => "rejected",
        Paused => "paused",
        Disabled => "disabled",
    }
);

string_enum!(
    /// What the contact agreed to receive (must allow the template's category).
    ConsentPurpose {
        Utility => "utility",
        Marketing => "marketing",
        Authentication => "authentication",
    }
);

string_enum!(
    /// Where the opt-in was captured.
    ConsentSource {
        CustomerRequest => "customer_request",
        WebsiteForm => "website_form",
        Checkout => "checkout",
        InPerson => "in_person",
        PhoneCall => "phone_call",
        Import => "import",
    }
);

/// Which template categories a consent purpose allows: exactly the category of the same name
/// (CONVENTIONS.md: the purpose must match the template's category). Marketing consent does
/// not cover utility or authentication templates, nor the other way round: each kind of
/// message needs the contact's agreement to that kind.
pub fn purpose_allows(purpose: ConsentPurpose, category: TemplateCategory) -> bool {
    matches!(
        (purpose, category),
        (ConsentPurpose::Utility, TemplateCategory::Utility)
            | (ConsentPurpose::Marketing, TemplateCategory::Marketing)
            | (
                ConsentPurpose::Authentication,
                TemplateCategory::Authentication
            )
    )
}

/// The status a WhatsApp `message_template_status_update` event moves a template to; `None`
/// for events that do not change the status (`FLAGGED` is a warning, ...).
pub fn status_of_provider_event(event: &str) -> Option<TemplateStatus> {
    match event.trim().to_ascii_uppercase().as_str() {
        "APPROVED" | "REINSTATED" | "UNPAUSED" => Some(TemplateStatus::Approved),
        "PENDING" | "IN_APPEAL" => Some(TemplateStatus::Pending),
        "REJECTED" => Some(TemplateStatus::Rejected),
        "PAUSED" => Some(TemplateStatus::Paused),
        "DISABLED" | "PENDING_DELETION" | "DELETED" | "ARCHIVED" | "LIMIT_EXCEEDED" => {
            Some(TemplateStatus::Disabled)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Names, languages, provider ids

/// Checks a template name: 1 to 512 characters, no surrounding spaces, no control characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be blank".into());
    }
    if name.trim() != name {
        return Err("must not start or end with spaces".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("must be at most {MAX_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

/// Checks a template language code (`en`, `en_US`, `pt_BR`, ...).
pub fn validate_language(language: &str) -> Result<(), String> {
    check_language(language)
}

/// Whether two language codes name the same language (`en_US`, `en-us` and `EN_us` do).
pub fn same_language(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim().replace('-', "_").to_ascii_lowercase();
    norm(a) == norm(b)
}

/// Checks a provider template id: 1 to 128 printable characters without spaces.
pub fn validate_provider_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.chars().count() > MAX_PROVIDER_ID_CHARS
        || !id.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(format!(
            "must be 1 to {MAX_PROVIDER_ID_CHARS} visible ASCII characters"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Component definitions

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
            "HEADER" => {
                let format = upper_member(c, "format").unwrap_or_else(|| "TEXT".into());
                header = match format.as_str() {
                    "TEXT" => match text_member(&mut errors, c, &cpath, MAX_HEADER_CHARS) {
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
                };
            }
            "FOOTER" => {
                if let Some(text) = text_member(&mut errors, c, &cpath, MAX_FOOTER_CHARS) {
                    match count_placeholders(text, Some(0)) {
                        Ok(_) => {}
                        Err(e) => errors.add(format!("{cpath}.text"), e),
                    }
                }
            }
            _ => {
                let list = match c.get("buttons") {
                    Some(Value::Array(b)) if !b.is_empty() && b.len() <= MAX_BUTTONS => b,
                    _ => {
                        errors.add(
                            format!("{cpath}.buttons"),
                            format!("must be an array of 1 to {MAX_BUTTONS} buttons"),
                        );
                        continue;
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

// ---------------------------------------------------------------------------------------------
// What a send supplies

/// The `template` object of a catalog send: `name` and `language` optional (they must agree
/// with the catalog template when given), `components` as in any template send.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestTemplate {
    pub name: Option<String>,
    pub language: Option<String>,
    pub components: Vec<Value>,
}

/// Parses the `template` object of a catalog send (absent: `None`).
pub fn parse_request_template(
    value: Option<&Value>,
) -> Result<Option<RequestTemplate>, ValidationErrors> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(super::FieldError::new(
                "template",
                "must be an object: {name, language, components}",
            )
            .into());
        }
    };
    let mut errors = ValidationErrors::new();
    let name = match obj.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match validate_name(s.trim()) {
            Ok(()) => Some(s.trim().to_owned()),
            Err(e) => {
                errors.add("template.name", e);
                None
            }
        },
        Some(_) => {
            errors.add("template.name", "must be a string");
            None
        }
    };
    let language = match obj.get("language") {
        None | Some(Value::Null) => None,
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
    let language = language.and_then(|l| match check_language(l) {
        Ok(()) => Some(l.to_owned()),
        Err(e) => {
            errors.add("template.language", e);
            None
        }
    });
    let components = validate_template_components(&mut errors, obj.get("components"));
    errors.into_result()?;
    Ok(Some(RequestTemplate {
        name,
        language,
        components,
    }))
}

fn params_of(c: &Map<String, Value>) -> &[Value] {
    c.get("parameters")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn param_type(p: &Value) -> String {
    p.get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// A text parameter needs a non-empty `text`.
fn check_text_param(errors: &mut ValidationErrors, p: &Value, path: &str) {
    if param_type(p) == "text"
        && p.get("text")
            .and_then(Value::as_str)
            .is_none_or(|t| t.trim().is_empty())
    {
        errors.add(format!("{path}.text"), "is required for a text parameter");
    }
}

/// The button index of a send's `button` component (`"0"` or `0`).
fn button_index(c: &Map<String, Value>) -> Option<usize> {
    match c.get("index")? {
        Value::String(s)
            if !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()) =>
        {
            s.parse().ok()
        }
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    }
}

/// Checks that a send's `components` supply exactly the parameters the definition asks for:
/// the BODY's count, the header's (one text parameter for a text header with `{{1}}`, one
/// parameter of the media type for a media header), one per URL button with a placeholder
/// and per COPY_CODE / OTP button (by `index`), at most one payload per quick reply, none for
/// footers. Problems are reported under `template.components`.
pub fn fit_parameters(def: &TemplateDefinition, components: &[Value]) -> ValidationErrors {
    let mut errors = ValidationErrors::new();
    let mut body_seen = false;
    let mut header_seen = false;
    let mut buttons_seen = BTreeSet::new();
    for (i, c) in components.iter().enumerate() {
        let path = format!("template.components[{i}]");
        let Some(c) = c.as_object() else { continue };
        let kind = c
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase();
        let params = params_of(c);
        match kind.as_str() {
            "body" => {
                if std::mem::replace(&mut body_seen, true) {
                    errors.add(
                        format!("{path}.type"),
                        "only one body component may be given",
                    );
                    continue;
                }
                if params.len() != def.body_parameters {
                    errors.add(
                        format!("{path}.parameters"),
                        format!(
                            "the template's body takes {} parameter(s), {} given",
                            def.body_parameters,
                            params.len()
                        ),
                    );
                }
                for (j, p) in params.iter().enumerate() {
                    let ppath = format!("{path}.parameters[{j}]");
                    if !["text", "currency", "date_time"].contains(&param_type(p).as_str()) {
                        errors.add(
                            format!("{ppath}.type"),
                            "must be text, currency or date_time in a body",
                        );
                    }
                    check_text_param(&mut errors, p, &ppath);
                }
            }
            "header" => {
                if std::mem::replace(&mut header_seen, true) {
                    errors.add(
                        format!("{path}.type"),
                        "only one header component may be given",
                    );
                    continue;
                }
                let (count, wanted) = match def.header {
                    HeaderDef::None => (0, None),
                    HeaderDef::Text { parameters } => (parameters, Some("text")),
                    HeaderDef::Media(kind) => (1, Some(kind)),
                };
                if params.len() != count {
                    errors.add(
                        format!("{path}.parameters"),
                        format!(
                            "the template's header takes {count} parameter(s), {} given",
                            params.len()
                        ),
                    );
                    continue;
                }
                if let (Some(wanted), Some(p)) = (wanted, params.first()) {
                    if param_type(p) != wanted {
                        errors.add(
                            format!("{path}.parameters[0].type"),
                            format!("must be {wanted}: the template's header is of that format"),
                        );
                    }
                    check_text_param(&mut errors, p, &format!("{path}.parameters[0]"));
                }
            }
            "footer" if !params.is_empty() => {
                errors.add(format!("{path}.parameters"), "a footer takes no parameters");
            }
            "button" | "buttons" => {
                let Some(index) = button_index(c) else {
                    errors.add(
                        format!("{path}.index"),
                        "is required: the button's position in the template, from \"0\"",
                    );
                    continue;
                };
                let Some(button) = def.buttons.get(index) else {
                    errors.add(
                        format!("{path}.index"),
                        format!(
                            "the template has {} button(s); index {index} does not exist",
                            def.buttons.len()
                        ),
                    );
                    continue;
                };
                if !buttons_seen.insert(index) {
                    errors.add(
                        format!("{path}.index"),
                        format!("button {index} is given more than once"),
                    );
                    continue;
                }
                if params.len() < button.required || params.len() > button.allowed {
                    errors.add(
                        format!("{path}.parameters"),
                        format!(
                            "the template's {} button {index} takes {} parameter(s), {} given",
                            button.kind,
                            if button.required == button.allowed {
                                button.required.to_string()
                            } else {
                                format!("{} to {}", button.required, button.allowed)
                            },
                            params.len()
                        ),
                    );
                }
                for (j, p) in params.iter().enumerate() {
                    check_text_param(&mut errors, p, &format!("{path}.parameters[{j}]"));
                }
            }
            _ => {}
        }
    }
    if !body_seen && def.body_parameters > 0 {
        errors.add(
            "template.components",
            format!(
                "the template's body takes {} parameter(s): add {{\"type\": \"body\", \"parameters\": [...]}}",
                def.body_parameters
            ),
        );
    }
    if !header_seen && def.header_parameters() > 0 {
        errors.add(
            "template.components",
            "the template's header takes 1 parameter: add {\"type\": \"header\", \"parameters\": [...]}",
        );
    }
    for (index, b) in def.buttons.iter().enumerate() {
        if b.required > 0 && !buttons_seen.contains(&index) {
            errors.add(
                "template.components",
                format!(
                    "the template's {} button {index} takes {} parameter(s): add {{\"type\": \"button\", \"index\": \"{index}\", \"parameters\": [...]}}",
                    b.kind, b.required
                ),
            );
        }
    }
    errors
}

// ---------------------------------------------------------------------------------------------
// Consent

/// Valid opt-in evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Consent {
    pub purpose: ConsentPurpose,
    pub source: ConsentSource,
    pub reference: String,
    pub captured_at: Timestamp,
}

/// The time rules of consent evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsentRules {
    /// How far in the future `captured_at` may lie (the caller's clock may run ahead).
    pub clock_skew: Duration,
    /// How old `captured_at` may be (`None`: any age).
    pub max_age: Option<Duration>,
}

impl Default for ConsentRules {
    fn default() -> Self {
        ConsentRules {
            clock_skew: Duration::ZERO,
            max_age: None,
        }
    }
}

fn enum_member<T: FromStr>(
    errors: &mut ValidationErrors,
    obj: &Map<String, Value>,
    key: &str,
    allowed: &[&str],
) -> Option<T> {
    let field = format!("consent.{key}");
    let expected = format!("must be one of {}", allowed.join(", "));
    match obj.get(key) {
        None | Some(Value::Null) => {
            errors.add(field, format!("is required; {expected}"));
            None
        }
        Some(Value::String(s)) => match s.parse::<T>() {
            Ok(v) => Some(v),
            Err(_) => {
                errors.add(
                    field,
                    format!(
                        "{expected} (got `{}`)",
                        s.chars().take(40).collect::<String>()
                    ),
                );
                None
            }
        },
        Some(_) => {
            errors.add(field, format!("{expected} (a string)"));
            None
        }
    }
}

/// Parses the `consent` object of a catalog send: `confirmed` must be `true`; `purpose` and
/// `source` from their lists; `reference` 1 to 256 characters without control characters;
/// `captured_at` an RFC 3339 time not later than `now` plus the clock skew (and, when a
/// maximum age is set, not older than that). Every problem is reported, under `consent.*`.
pub fn parse_consent(
    value: Option<&Value>,
    now: Timestamp,
    rules: &ConsentRules,
) -> Result<Consent, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let obj = match value {
        None | Some(Value::Null) => {
            errors.add(
                "consent",
                "is required: the opt-in evidence {confirmed, purpose, source, reference, captured_at}",
            );
            return Err(errors);
        }
        Some(Value::Object(o)) => o,
        Some(_) => {
            errors.add(
                "consent",
                "must be an object: {confirmed, purpose, source, reference, captured_at}",
            );
            return Err(errors);
        }
    };
    match obj.get("confirmed") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => errors.add(
            "consent.confirmed",
            "must be true: the contact's opt-in must be confirmed",
        ),
        None | Some(Value::Null) => errors.add("consent.confirmed", "is required and must be true"),
        Some(_) => errors.add("consent.confirmed", "must be the boolean true"),
    }
    let purpose = enum_member::<ConsentPurpose>(
        &mut errors,
        obj,
        "purpose",
        &ConsentPurpose::ALL
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>(),
    );
    let source = enum_member::<ConsentSource>(
        &mut errors,
        obj,
        "source",
        &ConsentSource::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    );
    let reference = match obj.get("reference") {
        None | Some(Value::Null) => {
            errors.add(
                "consent.reference",
                "is required: where the opt-in can be found (a form submission id, an order number, a call id, ...)",
            );
            None
        }
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() {
                errors.add("consent.reference", "must not be blank");
                None
            } else if t.chars().count() > MAX_REFERENCE_CHARS {
                errors.add(
                    "consent.reference",
                    format!("must be at most {MAX_REFERENCE_CHARS} characters"),
                );
                None
            } else if t.chars().any(char::is_control) {
                errors.add("consent.reference", "must not contain control characters");
                None
            } else {
                Some(t.to_owned())
            }
        }
        Some(_) => {
            errors.add("consent.reference", "must be a string");
            None
        }
    };
    let captured_at = match obj.get("captured_at") {
        None | Some(Value::Null) => {
            errors.add(
                "consent.captured_at",
                "is required: when the opt-in was captured (RFC 3339, e.g. 2026-08-14T09:30:00Z)",
            );
            None
        }
        Some(Value::String(s)) => match Timestamp::parse_rfc3339(s) {
            Ok(t) if t < Timestamp::UNIX_EPOCH => {
                errors.add("consent.captured_at", "must not be before 1970");
                None
            }
            Ok(t) if t > now.saturating_add(rules.clock_skew) => {
                errors.add(
                    "consent.captured_at",
                    format!(
                        "lies in the future (now is {now}); give the time the opt-in was captured"
                    ),
                );
                None
            }
            Ok(t) => match rules.max_age {
                Some(max) if t < now.saturating_sub(max) => {
                    errors.add(
                        "consent.captured_at",
                        format!(
                            "is too old: consent captured more than {} ago must be renewed",
                            super::time::format_duration(max)
                        ),
                    );
                    None
                }
                _ => Some(t),
            },
            Err(_) => {
                errors.add(
                    "consent.captured_at",
                    "must be an RFC 3339 time such as 2026-08-14T09:30:00Z",
                );
                None
            }
        },
        Some(_) => {
            errors.add(
                "consent.captured_at",
                "must be an RFC 3339 time string such as 2026-08-14T09:30:00Z",
            );
            None
        }
    };
    // Each member that is `None` reported why; `confirmed` reports without a value. So the
    // consent exists exactly when nothing was reported.
    match (purpose, source, reference, captured_at) {
        (Some(purpose), Some(source), Some(reference), Some(captured_at)) if errors.is_empty() => {
            Ok(Consent {
                purpose,
                source,
                reference,
                captured_at,
            })
        }
        _ => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(e: &ValidationErrors) -> Vec<&str> {
        e.0.iter().map(|f| f.field.as_str()).collect()
    }

    fn def(v: Value) -> TemplateDefinition {
        parse_definition(&v, "components").unwrap().unwrap()
    }

    fn def_err(v: Value) -> Vec<String> {
        parse_definition(&v, "components")
            .unwrap_err()
            .0
            .into_iter()
            .map(|f| format!("{}: {}", f.field, f.issue))
            .collect()
    }

    #[test]
    fn enums_round_trip() {
        assert_eq!(
            "marketing".parse::<TemplateCategory>(),
            Ok(TemplateCategory::Marketing)
        );
        assert!("MARKETING".parse::<TemplateCategory>().is_err());
        assert_eq!(
            "paused".parse::<TemplateStatus>(),
            Ok(TemplateStatus::Paused)
        );
        assert_eq!(ConsentSource::ALL.len(), 6);
        assert_eq!(
            "in_person".parse::<ConsentSource>(),
            Ok(ConsentSource::InPerson)
        );
        assert!("newsletter".parse::<ConsentPurpose>().is_err());
    }

    #[test]
    fn purposes_match_categories_exactly() {
        use ConsentPurpose as P;
        use TemplateCategory as C;
        for p in P::ALL {
            for c in C::ALL {
                assert_eq!(
                    purpose_allows(*p, *c),
                    p.as_str() == c.as_str(),
                    "{p} / {c}"
                );
            }
        }
    }

    #[test]
    fn provider_events_map_to_statuses() {
        assert_eq!(
            status_of_provider_event("APPROVED"),
            Some(TemplateStatus::Approved)
        );
        assert_eq!(
            status_of_provider_event("rejected"),
            Some(TemplateStatus::Rejected)
        );
        assert_eq!(
            status_of_provider_event("PAUSED"),
            Some(TemplateStatus::Paused)
        );
        assert_eq!(
            status_of_provider_event("DISABLED"),
            Some(TemplateStatus::Disabled)
        );
        assert_eq!(
            status_of_provider_event("PENDING"),
            Some(TemplateStatus::Pending)
        );
        assert_eq!(
            status_of_provider_event("REINSTATED"),
            Some(TemplateStatus::Approved)
        );
        assert_eq!(status_of_provider_event("FLAGGED"), None);
        assert_eq!(status_of_provider_event(""), None);
    }

    #[test]
    fn names_languages_and_provider_ids() {
        assert!(validate_name("order_update").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name(" x").is_err());
        assert!(validate_name("a\u{7}").is_err());
        assert!(validate_name(&"x".repeat(513)).is_err());
        assert!(validate_language("en_US").is_ok());
        assert!(validate_language("english please").is_err());
        assert!(same_language("en_US", "en-us"));
        assert!(!same_language("en_US", "en_GB"));
        assert!(validate_provider_id("1234567890").is_ok());
        assert!(validate_provider_id("has space").is_err());
        assert!(validate_provider_id("").is_err());
    }

    #[test]
    fn definitions_derive_their_parameters() {
        let d = def(json!([
            {"type": "HEADER", "format": "TEXT", "text": "Order {{1}}"},
            {"type": "BODY", "text": "Hi {{1}}, order {{2}} ships {{3}}. Thanks {{1}}!"},
            {"type": "FOOTER", "text": "Acme"},
            {"type": "BUTTONS", "buttons": [
                {"type": "URL", "text": "Track", "url": "https://x.test/t/{{1}}"},
                {"type": "QUICK_REPLY", "text": "Stop"},
                {"type": "PHONE_NUMBER", "text": "Call", "phone_number": "+4915123456789"}
            ]}
        ]));
        assert_eq!(d.header, HeaderDef::Text { parameters: 1 });
        assert_eq!(d.body_parameters, 3);
        assert_eq!(d.header_parameters(), 1);
        assert_eq!(d.button_parameters(), 1);
        assert_eq!(d.buttons[1].allowed, 1);
        assert_eq!(d.buttons[2].allowed, 0);
        // Lower case works too; no placeholders at all is fine.
        let plain = def(json!([{"type": "body", "text": "Your appointment is confirmed."}]));
        assert_eq!(plain.body_parameters, 0);
        assert_eq!(plain.header, HeaderDef::None);
        let media =
            def(json!([{"type": "HEADER", "format": "image"}, {"type": "BODY", "text": "x"}]));
        assert_eq!(media.header, HeaderDef::Media("image"));
        // Not defined.
        assert_eq!(parse_definition(&json!([]), "c").unwrap(), None);
        assert_eq!(parse_definition(&Value::Null, "c").unwrap(), None);
    }

    #[test]
    fn definitions_are_checked() {
        assert_eq!(
            def_err(json!({"type": "BODY"})),
            vec!["components: must be a JSON array of component objects"]
        );
        assert_eq!(
            def_err(json!([{"type": "FOOTER", "text": "x"}])),
            vec!["components: must have a BODY component with its text"]
        );
        assert!(
            def_err(json!([{"type": "BODY"}]))[0].starts_with("components[0].text: is required")
        );
        assert!(
            def_err(json!([{"type": "BODY", "text": "  "}]))[0].starts_with("components[0].text")
        );
        assert!(
            def_err(json!([{"type": "CAROUSEL"}]))[0].starts_with("components[0].type: must be")
        );
        assert!(def_err(json!([{"text": "x"}]))[0].starts_with("components[0].type: is required"));
        assert!(def_err(json!([1]))[0].starts_with("components[0]: must be an object"));
        let gaps = def_err(json!([{"type": "BODY", "text": "{{1}} and {{3}}"}]));
        assert!(gaps[0].contains("missing {{2}}"), "{gaps:?}");
        let zero = def_err(json!([{"type": "BODY", "text": "{{0}}"}]));
        assert!(zero[0].contains("only numbered placeholders"), "{zero:?}");
        let named = def_err(json!([{"type": "BODY", "text": "Hi {{first_name}}"}]));
        assert!(named[0].contains("{{first_name}}"), "{named:?}");
        let header2 = def_err(
            json!([{"type": "HEADER", "format": "TEXT", "text": "{{1}} {{2}}"}, {"type": "BODY", "text": "x"}]),
        );
        assert!(
            header2[0].starts_with("components[0].text: may have at most 1"),
            "{header2:?}"
        );
        let footer =
            def_err(json!([{"type": "BODY", "text": "x"}, {"type": "FOOTER", "text": "{{1}}"}]));
        assert!(footer[0].starts_with("components[1].text"), "{footer:?}");
        let twice = def_err(json!([{"type": "BODY", "text": "x"}, {"type": "body", "text": "y"}]));
        assert!(twice[0].contains("more than once"), "{twice:?}");
        let fmt =
            def_err(json!([{"type": "HEADER", "format": "GIF"}, {"type": "BODY", "text": "x"}]));
        assert!(fmt[0].starts_with("components[0].format"), "{fmt:?}");
        let nobuttons =
            def_err(json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": []}]));
        assert!(
            nobuttons[0].starts_with("components[1].buttons"),
            "{nobuttons:?}"
        );
        let nourl = def_err(
            json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": [{"type": "URL", "text": "a"}]}]),
        );
        assert!(
            nourl[0].starts_with("components[1].buttons[0].url"),
            "{nourl:?}"
        );
        let long = def_err(json!([{"type": "BODY", "text": "x".repeat(1025)}]));
        assert!(long[0].contains("at most 1024"), "{long:?}");
        assert!(!def_err(json!([{"type": "BODY", "text": "a\u{0}b"}])).is_empty());
        // An unclosed brace is text, not a placeholder.
        assert_eq!(
            def(json!([{"type": "BODY", "text": "{{1}} costs {{ 2 }} {{"}])).body_parameters,
            2
        );
    }

    fn fit(def_json: Value, components: Value) -> Vec<String> {
        let d = def(def_json);
        fit_parameters(&d, components.as_array().unwrap())
            .0
            .into_iter()
            .map(|f| format!("{}: {}", f.field, f.issue))
            .collect()
    }

    #[test]
    fn parameters_must_fit() {
        let body2 = json!([{"type": "BODY", "text": "Hi {{1}}, order {{2}}"}]);
        let text = |t: &str| json!({"type": "text", "text": t});
        assert!(
            fit(
                body2.clone(),
                json!([{"type": "body", "parameters": [text("Ada"), text("42")]}])
            )
            .is_empty()
        );
        let few = fit(
            body2.clone(),
            json!([{"type": "body", "parameters": [text("Ada")]}]),
        );
        assert_eq!(
            few,
            vec![
                "template.components[0].parameters: the template's body takes 2 parameter(s), 1 given"
            ]
        );
        let many = fit(
            body2.clone(),
            json!([{"type": "body", "parameters": [text("a"), text("b"), text("c")]}]),
        );
        assert_eq!(many.len(), 1);
        let none = fit(body2.clone(), json!([]));
        assert!(
            none[0].starts_with("template.components: the template's body takes 2"),
            "{none:?}"
        );
        let empty_text = fit(
            body2.clone(),
            json!([{"type": "body", "parameters": [text(""), text("x")]}]),
        );
        assert_eq!(
            empty_text,
            vec!["template.components[0].parameters[0].text: is required for a text parameter"]
        );
        let image_in_body = fit(
            body2.clone(),
            json!([{"type": "body", "parameters": [{"type": "image", "image": {"link": "https://x.test/a.png"}}, text("x")]}]),
        );
        assert!(image_in_body[0].ends_with("must be text, currency or date_time in a body"));
        // A template without parameters takes none.
        let plain = json!([{"type": "BODY", "text": "Hello"}]);
        assert!(fit(plain.clone(), json!([])).is_empty());
        assert_eq!(
            fit(
                plain.clone(),
                json!([{"type": "body", "parameters": [text("x")]}])
            )
            .len(),
            1
        );
        assert_eq!(
            fit(
                plain.clone(),
                json!([{"type": "header", "parameters": [text("x")]}])
            )
            .len(),
            1
        );
        assert_eq!(
            fit(
                plain,
                json!([{"type": "footer", "parameters": [text("x")]}])
            )
            .len(),
            1
        );
        // Headers.
        let media =
            json!([{"type": "HEADER", "format": "DOCUMENT"}, {"type": "BODY", "text": "x"}]);
        assert!(fit(media.clone(), json!([{"type": "header", "parameters": [{"type": "document", "document": {"link": "https://x.test/a.pdf"}}]}])).is_empty());
        assert_eq!(
            fit(
                media.clone(),
                json!([{"type": "header", "parameters": [text("x")]}])
            ),
            vec![
                "template.components[0].parameters[0].type: must be document: the template's header is of that format"
            ]
        );
        assert!(fit(media, json!([]))[0].contains("header takes 1 parameter"));
        // Buttons.
        let buttons = json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": [
            {"type": "URL", "text": "Track", "url": "https://x.test/{{1}}"}, {"type": "QUICK_REPLY", "text": "Stop"}]}]);
        let url =
            json!({"type": "button", "sub_type": "url", "index": "0", "parameters": [text("abc")]});
        assert!(fit(buttons.clone(), json!([url.clone()])).is_empty());
        assert!(fit(buttons.clone(), json!([url.clone(), {"type": "button", "sub_type": "quick_reply", "index": 1, "parameters": [{"type": "payload", "payload": "STOP"}]}])).is_empty());
        assert!(fit(buttons.clone(), json!([]))[0].contains("URL button 0 takes 1"));
        assert!(
            fit(
                buttons.clone(),
                json!([url.clone(), {"type": "button", "index": "5", "parameters": []}])
            )[0]
            .contains("index 5 does not exist")
        );
        assert!(
            fit(buttons.clone(), json!([url.clone(), url.clone()]))[0].contains("more than once")
        );
        assert!(
            fit(
                buttons.clone(),
                json!([{"type": "button", "parameters": [text("a")]}])
            )[0]
            .starts_with("template.components[0].index")
        );
        assert!(
            fit(
                buttons,
                json!([{"type": "button", "index": "0", "parameters": []}])
            )[0]
            .contains("takes 1 parameter(s), 0 given")
        );
    }

    #[test]
    fn request_templates_are_parsed() {
        assert_eq!(parse_request_template(None).unwrap(), None);
        let t = parse_request_template(Some(
            &json!({"name": "order_update", "language": {"code": "en_US"}}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(t.name.as_deref(), Some("order_update"));
        assert_eq!(t.language.as_deref(), Some("en_US"));
        let only_components = parse_request_template(Some(
            &json!({"components": [{"type": "body", "parameters": []}]}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(only_components.name, None);
        assert_eq!(only_components.components.len(), 1);
        let e = parse_request_template(Some(
            &json!({"name": 5, "language": "english please", "components": [{"type": "nope"}]}),
        ))
        .unwrap_err();
        assert_eq!(
            fields(&e),
            vec![
                "template.name",
                "template.language",
                "template.components[0].type"
            ]
        );
        assert_eq!(
            fields(&parse_request_template(Some(&json!("x"))).unwrap_err()),
            vec!["template"]
        );
    }

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-08-14T09:30:00Z").unwrap()
    }

    fn consent(v: Value) -> Result<Consent, ValidationErrors> {
        parse_consent(Some(&v), now(), &ConsentRules::default())
    }

    fn good() -> Value {
        json!({"confirmed": true, "purpose": "utility", "source": "customer_request",
               "reference": "form-123", "captured_at": "2026-08-14T09:00:00Z"})
    }

    #[test]
    fn consent_is_parsed() {
        let c = consent(good()).unwrap();
        assert_eq!(c.purpose, ConsentPurpose::Utility);
        assert_eq!(c.source, ConsentSource::CustomerRequest);
        assert_eq!(c.reference, "form-123");
        assert_eq!(
            c.captured_at,
            Timestamp::parse_rfc3339("2026-08-14T09:00:00Z").unwrap()
        );
        // Any offset, converted to UTC.
        let mut v = good();
        v["captured_at"] = json!("2026-08-14T11:29:00+02:00");
        assert_eq!(
            consent(v).unwrap().captured_at,
            Timestamp::parse_rfc3339("2026-08-14T09:29:00Z").unwrap()
        );
    }

    #[test]
    fn bad_consent_names_every_field() {
        assert_eq!(
            fields(&parse_consent(None, now(), &ConsentRules::default()).unwrap_err()),
            vec!["consent"]
        );
        assert_eq!(fields(&consent(json!("yes")).unwrap_err()), vec!["consent"]);
        assert_eq!(
            fields(&consent(json!({})).unwrap_err()),
            vec![
                "consent.confirmed",
                "consent.purpose",
                "consent.source",
                "consent.reference",
                "consent.captured_at"
            ]
        );
        for (key, value) in [
            ("confirmed", json!(false)),
            ("confirmed", json!("true")),
            ("purpose", json!("newsletter")),
            ("purpose", json!(1)),
            ("source", json!("carrier_pigeon")),
            ("reference", json!("")),
            ("reference", json!("   ")),
            ("reference", json!("x".repeat(257))),
            ("reference", json!("a\nb")),
            ("reference", json!(42)),
            ("captured_at", json!("yesterday")),
            ("captured_at", json!("2026-08-14")),
            ("captured_at", json!(1786000000)),
            ("captured_at", json!("2026-08-14T09:36:00Z")),
            ("captured_at", json!("2027-01-01T00:00:00Z")),
            ("captured_at", json!("1969-12-31T23:59:59Z")),
        ] {
            let mut v = good();
            v[key] = value.clone();
            let e = consent(v).unwrap_err();
            assert_eq!(
                fields(&e),
                [format!("consent.{key}").as_str()],
                "{key} = {value}"
            );
        }
        // By default a second ahead is in the future; now itself is not.
        let mut ahead = good();
        ahead["captured_at"] = json!("2026-08-14T09:30:01Z");
        assert_eq!(
            fields(&consent(ahead.clone()).unwrap_err()),
            ["consent.captured_at"]
        );
        let mut edge = good();
        edge["captured_at"] = json!("2026-08-14T09:30:00Z");
        assert!(consent(edge).is_ok());
        // An operator may allow clock skew: exactly at its edge is accepted.
        let skew = ConsentRules {
            clock_skew: Duration::from_secs(300),
            max_age: None,
        };
        assert!(parse_consent(Some(&ahead), now(), &skew).is_ok());
        let mut edge = good();
        edge["captured_at"] = json!("2026-08-14T09:35:00Z");
        assert!(parse_consent(Some(&edge), now(), &skew).is_ok());
        edge["captured_at"] = json!("2026-08-14T09:35:01Z");
        assert!(parse_consent(Some(&edge), now(), &skew).is_err());
    }

    #[test]
    fn consent_max_age_is_optional() {
        let rules = ConsentRules {
            clock_skew: Duration::from_secs(300),
            max_age: Some(Duration::from_secs(365 * 86400)),
        };
        let mut old = good();
        old["captured_at"] = json!("2024-01-01T00:00:00Z");
        assert!(parse_consent(Some(&old), now(), &ConsentRules::default()).is_ok());
        let e = parse_consent(Some(&old), now(), &rules).unwrap_err();
        assert!(e.0[0].issue.contains("too old"), "{e:?}");
        assert!(parse_consent(Some(&good()), now(), &rules).is_ok());
    }
}
