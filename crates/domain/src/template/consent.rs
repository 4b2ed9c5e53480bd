//! Consent evidence: the opt-in a catalog send is made under, checked field by field.

use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{ConsentPurpose, ConsentSource, MAX_REFERENCE_CHARS};
use crate::{Timestamp, ValidationErrors};

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
    let reference = reference(&mut errors, obj.get("reference"));
    let captured_at = captured_at(&mut errors, obj.get("captured_at"), now, rules);
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

/// `consent.reference`: where the opt-in can be found, 1 to 256 characters.
fn reference(errors: &mut ValidationErrors, value: Option<&Value>) -> Option<String> {
    match value {
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
    }
}

/// `consent.captured_at`: RFC 3339, not in the future (beyond the allowed clock skew), not
/// older than the deployment's maximum age.
fn captured_at(
    errors: &mut ValidationErrors,
    value: Option<&Value>,
    now: Timestamp,
    rules: &ConsentRules,
) -> Option<Timestamp> {
    match value {
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
                            crate::time::format_duration(max)
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
    }
}
