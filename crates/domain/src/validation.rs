//! Field-level validation results, reported as `details.fields` of a 422.

use serde::Serialize;

/// One problem with one field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// The field's path, e.g. `template.language` or `interactive.action.buttons[3]`.
    pub field: String,
    /// What is wrong with it, for people.
    pub issue: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, issue: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            issue: issue.into(),
        }
    }
}

/// The issue of a field a request does not have (CONVENTIONS: v1 bodies refuse them).
pub const UNKNOWN_FIELD: &str = "unknown_field";

/// Adds [`UNKNOWN_FIELD`] for every member of the object `value` (when it is one) that is not
/// in `known`, named `{path}.{member}`: for objects a request keeps as JSON but whose members
/// are fixed (a template's `name`, `language`, `components`).
pub fn unknown_members(
    errors: &mut ValidationErrors,
    value: Option<&serde_json::Value>,
    path: &str,
    known: &[&str],
) {
    if let Some(serde_json::Value::Object(map)) = value {
        for key in map.keys().filter(|k| !known.contains(&k.as_str())) {
            errors.add(format!("{path}.{key}"), UNKNOWN_FIELD);
        }
    }
}

/// An accumulator of field errors, so that one response reports every problem at once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, field: impl Into<String>, issue: impl Into<String>) {
        self.0.push(FieldError::new(field, issue));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One line for people: the one problem (`field: issue`), or how many fields are invalid.
    pub fn summary(&self) -> String {
        match self.0.as_slice() {
            [one] => format!("{}: {}", one.field, one.issue),
            many => format!("{} fields are invalid.", many.len()),
        }
    }

    /// `Ok(())` when nothing was reported.
    pub fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl From<FieldError> for ValidationErrors {
    fn from(e: FieldError) -> Self {
        ValidationErrors(vec![e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_one_problem_or_counts_them() {
        let mut e = ValidationErrors::new();
        e.add("phone", "is required");
        assert_eq!(e.summary(), "phone: is required");
        e.add("message", "must not be blank");
        assert_eq!(e.summary(), "2 fields are invalid.");
    }

    #[test]
    fn unknown_members_are_named_with_their_path() {
        let mut e = ValidationErrors::new();
        let v = serde_json::json!({"name": "a", "lang": "en", "x": 1});
        unknown_members(&mut e, Some(&v), "template", &["name", "language"]);
        assert_eq!(
            e.0,
            [
                FieldError::new("template.lang", UNKNOWN_FIELD),
                FieldError::new("template.x", UNKNOWN_FIELD),
            ]
        );
        unknown_members(&mut e, Some(&serde_json::json!("text")), "template", &[]);
        unknown_members(&mut e, None, "template", &[]);
        assert_eq!(e.0.len(), 2);
    }
}
