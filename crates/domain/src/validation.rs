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
