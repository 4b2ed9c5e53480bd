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
}
