//! What a catalog send supplies: its `template` object, and whether its parameters fit the
//! catalog template's definition.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::definition::{HeaderDef, TemplateDefinition};
use super::validate_name;
use crate::ValidationErrors;
use crate::message::{check_language, validate_template_components};

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
            return Err(crate::FieldError::new(
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
                fit_body(&mut errors, def, &path, params);
            }
            "header" => {
                if std::mem::replace(&mut header_seen, true) {
                    errors.add(
                        format!("{path}.type"),
                        "only one header component may be given",
                    );
                    continue;
                }
                fit_header(&mut errors, def, &path, params);
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

/// A body component's parameters: as many as the template's body takes, each text, currency
/// or date_time.
fn fit_body(errors: &mut ValidationErrors, def: &TemplateDefinition, path: &str, params: &[Value]) {
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
        check_text_param(errors, p, &ppath);
    }
}

/// A header component's parameters: as many as the template's header takes, of its format.
fn fit_header(
    errors: &mut ValidationErrors,
    def: &TemplateDefinition,
    path: &str,
    params: &[Value],
) {
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
        return;
    }
    if let (Some(wanted), Some(p)) = (wanted, params.first()) {
        if param_type(p) != wanted {
            errors.add(
                format!("{path}.parameters[0].type"),
                format!("must be {wanted}: the template's header is of that format"),
            );
        }
        check_text_param(errors, p, &format!("{path}.parameters[0]"));
    }
}
