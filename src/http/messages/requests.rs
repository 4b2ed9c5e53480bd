//! What a send's body asks for, checked for shape: the addressing (channel and recipient) and
//! either validated content (a plain send) or a catalog plan (conversation initiation or a
//! campaign recipient, whose rules need the catalogue: `ops::sending::catalog`). Field problems
//! are one 422 `validation_failed`.

use uuid::Uuid;

use crate::ops::sending::{CatalogMode, CatalogRequest};
use serde_json::Value;
use switchboard_domain::ValidationErrors;
use switchboard_domain::contact::validate_contact_name;
use switchboard_domain::message::{
    Content, MediaInput, ReactionMember, TextInput, contains_nul, validate_contacts,
    validate_location, validate_media, validate_reaction_emoji, validate_template, validate_text,
};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::parse_request_template;
use switchboard_domain::validation::unknown_members;

use super::MAX_SLUG_INPUT;
use super::views::{SendMediaRequest, SendMessageRequest, SendTemplateRequest};
use crate::http::error::ApiError;

/// The channel and recipient fields shared by the three sends.
pub struct Addressing {
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
    /// The message the send replies to.
    pub reply_to: Option<Uuid>,
}

/// What a send's body asks for, once checked for shape: a plain send of validated content,
/// or a catalog template send (conversation initiation or a campaign recipient), whose rules
/// need the catalogue and are checked by `ops::sending::catalog`.
pub enum SendPlan {
    Plain(Addressing, Content),
    Catalog(Addressing, CatalogPlan),
}

impl From<(Addressing, Content)> for SendPlan {
    fn from((addressing, content): (Addressing, Content)) -> Self {
        SendPlan::Plain(addressing, content)
    }
}

/// A catalog send, checked for shape.
pub struct CatalogPlan {
    pub mode: CatalogMode,
    pub request: CatalogRequest,
    pub first_name: Option<String>,
}

/// Checks the channel and recipient fields of a send, adding field errors.
pub fn addressing(
    errors: &mut ValidationErrors,
    channel_id: Option<i64>,
    channel_slug: Option<&str>,
    contact_uuid: Option<&str>,
    phone: Option<&str>,
    reply_to: Option<&str>,
) -> Addressing {
    let channel_slug = match channel_slug {
        Some(s) if s.trim().is_empty() => {
            errors.add("channel_slug", "must not be blank");
            None
        }
        Some(s) if s.chars().count() > MAX_SLUG_INPUT || s.contains('\0') => {
            errors.add(
                "channel_slug",
                format!("must be at most {MAX_SLUG_INPUT} characters"),
            );
            None
        }
        other => other.map(str::to_owned),
    };
    let contact_uuid = contact_uuid.and_then(|s| match Uuid::parse_str(s.trim()) {
        Ok(u) if s.len() <= 64 => Some(u),
        _ => {
            errors.add("contact_uuid", "must be a UUID");
            None
        }
    });
    let phone = phone.and_then(|p| match Phone::parse(p) {
        Ok(p) => Some(p),
        Err(e) => {
            errors.add("phone", e.to_string());
            None
        }
    });
    let reply_to = reply_to.and_then(|s| match Uuid::parse_str(s.trim()) {
        Ok(u) if s.len() <= 64 => Some(u),
        _ => {
            errors.add("reply_to", "must be the UUID of a message");
            None
        }
    });
    Addressing {
        channel_id,
        channel_slug,
        contact_uuid,
        phone,
        reply_to,
    }
}

/// The members of the objects a send body keeps as JSON that have a fixed set of members
/// (checked on v1, where a member they do not have is refused like any unknown field; the
/// WhatsApp `interactive` object is the provider's own and is not listed).
pub trait FixedMembers {
    fn unknown_members(&self) -> ValidationErrors {
        ValidationErrors::new()
    }
}

impl FixedMembers for SendMessageRequest {
    fn unknown_members(&self) -> ValidationErrors {
        let mut errors = ValidationErrors::new();
        unknown_members(
            &mut errors,
            self.reaction.as_ref(),
            "reaction",
            &["message_uuid", "emoji"],
        );
        unknown_members(
            &mut errors,
            self.location.as_ref(),
            "location",
            &["latitude", "longitude", "name", "address"],
        );
        errors
    }
}
impl FixedMembers for SendMediaRequest {}

impl FixedMembers for SendTemplateRequest {
    fn unknown_members(&self) -> ValidationErrors {
        let mut errors = ValidationErrors::new();
        unknown_members(
            &mut errors,
            self.template.as_ref(),
            "template",
            &["name", "language", "components"],
        );
        let consent = members_of::<super::views::ConsentInput>();
        let consent: Vec<&str> = consent.iter().map(String::as_str).collect();
        unknown_members(&mut errors, self.consent.as_ref(), "consent", &consent);
        errors
    }
}

/// The members of an object schema (sorted by name).
fn members_of<T: utoipa::ToSchema>() -> Vec<String> {
    use utoipa::openapi::{RefOr, schema::Schema};
    match T::schema() {
        RefOr::T(Schema::Object(o)) => o.properties.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// A plain send needs its recipient: `contact_uuid`, or the legacy `phone`.
fn require_recipient(
    errors: &mut ValidationErrors,
    contact_uuid: Option<&str>,
    phone: Option<&str>,
) {
    if contact_uuid.is_none() && phone.is_none() {
        errors.add(
            "contact_uuid",
            "is required (or give the recipient's phone)",
        );
    }
}

fn merge(
    errors: &mut ValidationErrors,
    result: Result<Content, ValidationErrors>,
) -> Option<Content> {
    match result {
        Ok(c) => Some(c),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    }
}

pub fn text_request(r: SendMessageRequest) -> Result<(Addressing, Content), ApiError> {
    let mut errors = ValidationErrors::new();
    require_recipient(&mut errors, r.contact_uuid.as_deref(), r.phone.as_deref());
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
        r.reply_to.as_deref(),
    );
    if r.interactive.as_ref().is_some_and(contains_nul) {
        errors.add("interactive", "must not contain NUL characters");
    }
    if let Some(content) = other_kind(&mut errors, &r) {
        return match (errors.is_empty(), content) {
            (true, Some(c)) => Ok((addressing, c)),
            _ => Err(ApiError::validation(errors)),
        };
    }
    let content = merge(
        &mut errors,
        validate_text(&TextInput {
            message: r.message.as_deref(),
            kind: r.message_type.as_deref(),
            interactive: r.interactive.as_ref(),
            preview_url: r.preview_url,
        }),
    );
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok((addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// A reaction, location or contacts send (`reaction`, `location` or `contacts` in place of
/// `message` and `interactive`): `None` when the body asks for none of them.
fn other_kind(errors: &mut ValidationErrors, r: &SendMessageRequest) -> Option<Option<Content>> {
    let given: Vec<&str> = [
        ("reaction", r.reaction.is_some()),
        ("location", r.location.is_some()),
        ("contacts", r.contacts.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect();
    let kind = *given.first()?;
    if given.len() > 1 {
        errors.add(given[1], format!("cannot be sent together with `{kind}`"));
    }
    for (field, present) in [
        ("message", r.message.is_some()),
        ("interactive", r.interactive.is_some()),
        // `type` is not needed; when given, it names the kind.
        ("type", r.message_type.as_deref().is_some_and(|t| t != kind)),
    ] {
        if present {
            errors.add(field, format!("cannot be sent together with `{kind}`"));
        }
    }
    let content = match kind {
        "reaction" => {
            let obj = r.reaction.as_ref().and_then(Value::as_object);
            if obj.is_none() {
                errors.add(
                    "reaction",
                    "must be an object {\"message_uuid\", \"emoji\"}",
                );
            }
            let uuid = obj.and_then(|o| o.get("message_uuid"));
            let message_uuid = match uuid
                .and_then(Value::as_str)
                .map(|s| Uuid::parse_str(s.trim()))
            {
                Some(Ok(u)) => Some(u),
                _ => {
                    errors.add(
                        "reaction.message_uuid",
                        "is required: the uuid of a message of the recipient's",
                    );
                    None
                }
            };
            let emoji = match obj.and_then(|o| o.get("emoji")) {
                Some(Value::String(e)) => Some(e.as_str()),
                None | Some(Value::Null) => None,
                Some(_) => Some("\u{0}"),
            };
            let emoji = merge_value(errors, validate_reaction_emoji(emoji));
            match (message_uuid, emoji) {
                (Some(u), Some(emoji)) => Some(Content::Reaction(ReactionMember {
                    emoji,
                    message_uuid: Some(u),
                    // Resolved by the send (`ops::sending::plain`).
                    provider_message_id: String::new(),
                })),
                _ => None,
            }
        }
        "location" => {
            let obj = r.location.as_ref().and_then(Value::as_object);
            if obj.is_none() {
                errors.add(
                    "location",
                    "must be an object {\"latitude\", \"longitude\", \"name\", \"address\"}",
                );
                return Some(None);
            }
            let number = |k: &str| obj.and_then(|o| o.get(k)).and_then(Value::as_f64);
            let text = |k: &str| obj.and_then(|o| o.get(k)).and_then(Value::as_str);
            merge_value(
                errors,
                validate_location(
                    number("latitude"),
                    number("longitude"),
                    text("name"),
                    text("address"),
                ),
            )
            .map(Content::Location)
        }
        _ => merge_value(errors, validate_contacts(r.contacts.as_ref())).map(Content::Contacts),
    };
    Some(content)
}

fn merge_value<T>(errors: &mut ValidationErrors, result: Result<T, ValidationErrors>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    }
}

pub fn media_request(r: SendMediaRequest) -> Result<(Addressing, Content), ApiError> {
    let mut errors = ValidationErrors::new();
    require_recipient(&mut errors, r.contact_uuid.as_deref(), r.phone.as_deref());
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
        r.reply_to.as_deref(),
    );
    let content = merge(
        &mut errors,
        validate_media(&MediaInput {
            media_type: r.media_type.as_deref(),
            media_url: r.media_url.as_deref(),
            caption: r.caption.as_deref(),
            file_name: r.file_name.as_deref(),
        }),
    );
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok((addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// A template send: with `ensure_conversation: true`, a conversation initiation; with
/// `template_uuid` or `consent` (and without `ensure_conversation: true`), a synchronized
/// campaign recipient; otherwise a plain template send.
pub fn template_request(r: SendTemplateRequest) -> Result<SendPlan, ApiError> {
    if r.ensure_conversation == Some(true) || r.template_uuid.is_some() || r.consent.is_some() {
        return catalog_request(r);
    }
    let mut errors = ValidationErrors::new();
    require_recipient(&mut errors, r.contact_uuid.as_deref(), r.phone.as_deref());
    let addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
        r.reply_to.as_deref(),
    );
    let content = merge(&mut errors, validate_template(r.template.as_ref()));
    match (errors.is_empty(), content) {
        (true, Some(c)) => Ok(SendPlan::Plain(addressing, c)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// Checks the shape of a catalog send: the addressing, `phone` (required for an initiation
/// unless `contact_uuid` is given), `first_name`, and the `template` object (optional: the
/// catalog template gives name and language). Field problems are one 422
/// `validation_failed`; the catalogue and consent rules come later.
pub fn catalog_request(r: SendTemplateRequest) -> Result<SendPlan, ApiError> {
    let mode = if r.ensure_conversation == Some(true) {
        CatalogMode::Initiation
    } else {
        CatalogMode::Campaign
    };
    let mut errors = ValidationErrors::new();
    let addressing: Addressing = addressing(
        &mut errors,
        r.channel_id,
        r.channel_slug.as_deref(),
        r.contact_uuid.as_deref(),
        r.phone.as_deref(),
        r.reply_to.as_deref(),
    );
    if r.phone.is_none() && r.contact_uuid.is_none() {
        errors.add(
            "phone",
            match mode {
                CatalogMode::Initiation => {
                    "is required: the number to start the conversation with, e.g. +4915123456789"
                }
                CatalogMode::Campaign => {
                    "is required (or give contact_uuid): the recipient, e.g. +4915123456789"
                }
            },
        );
    }
    let first_name = r.first_name.as_deref().and_then(|n| {
        validate_contact_name(n)
            .map_err(|e| errors.add("first_name", e))
            .ok()
    });
    let template = match parse_request_template(r.template.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok(SendPlan::Catalog(
        addressing,
        CatalogPlan {
            mode,
            request: CatalogRequest {
                template_uuid: r.template_uuid,
                template,
                consent: r.consent,
            },
            first_name,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consent_members_are_its_schemas() {
        assert_eq!(
            members_of::<super::super::views::ConsentInput>(),
            ["captured_at", "confirmed", "purpose", "reference", "source"]
        );
    }
}
