//! The template catalogue and consent evidence (specification 1.5, 2.6 and 4.3).
//!
//! * Templates: a channel's provider templates (`name`, `language`, `category`, `status`,
//!   `active`) with their WhatsApp component definitions, from which the parameters a send
//!   must supply are derived ([`TemplateDefinition`]).
//! * What a send supplies: the `template` object of a catalog send ([`RequestTemplate`]) and
//!   whether its parameters fit the definition ([`fit_parameters`]).
//! * Consent: the opt-in evidence of a catalog send ([`parse_consent`]) and which purposes
//!   allow which template categories ([`purpose_allows`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::message::{check_language, string_enum};

mod consent;
mod definition;
mod parameters;

pub use consent::{Consent, ConsentRules, parse_consent};
pub use definition::{ButtonDef, HeaderDef, TemplateDefinition, parse_definition};
pub use parameters::{RequestTemplate, fit_parameters, parse_request_template};

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

#[cfg(test)]
mod tests;
