//! Provider template sends: the `template` object (`name`, `language`, `components`).

use serde_json::Value;

use super::{
    Content, MAX_TEMPLATE_COMPONENTS, MAX_TEMPLATE_NAME_CHARS, Template, array, check_text,
    contains_nul, object, str_member,
};
use crate::ValidationErrors;

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
