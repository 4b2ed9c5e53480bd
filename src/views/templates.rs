//! Catalog templates and consent evidence as the API and the admin tools show them.

use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::template::{Consent, TemplateCategory, TemplateStatus, parse_definition};
use switchboard_store::TemplateRecord;

/// A catalog template as the API and the admin tools show it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TemplateOut {
    pub uuid: Uuid,
    pub channel_id: i64,
    pub name: String,
    pub language: String,
    pub category: TemplateCategory,
    pub status: TemplateStatus,
    pub active: bool,
    /// The WhatsApp component definitions (`[]` when not defined).
    #[schema(value_type = Vec<Object>)]
    pub components: Value,
    /// Parameters a send supplies for the BODY (null when the components are not defined:
    /// parameters are then not checked).
    pub body_parameters: Option<i64>,
    /// Parameters a send supplies for the header (0 or 1; null when not defined).
    pub header_parameters: Option<i64>,
    /// Parameters a send supplies for the buttons, in all (null when not defined).
    pub button_parameters: Option<i64>,
    /// The provider's template id, when known.
    pub provider_template_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&TemplateRecord> for TemplateOut {
    fn from(t: &TemplateRecord) -> Self {
        let def = parse_definition(&t.components, "components").ok().flatten();
        TemplateOut {
            uuid: t.uuid,
            channel_id: t.channel_id,
            name: t.name.clone(),
            language: t.language.clone(),
            category: t.category,
            status: t.status,
            active: t.active,
            components: if t.components.is_array() {
                t.components.clone()
            } else {
                json!([])
            },
            body_parameters: t.body_parameters,
            header_parameters: def.as_ref().map(|d| d.header_parameters() as i64),
            button_parameters: def.as_ref().map(|d| d.button_parameters() as i64),
            provider_template_id: t.provider_template_id.clone(),
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

/// Consent evidence as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ConsentOut {
    pub uuid: Uuid,
    /// Always true: only confirmed consent is accepted.
    pub confirmed: bool,
    /// utility, marketing or authentication.
    pub purpose: String,
    /// customer_request, website_form, checkout, in_person, phone_call or import.
    pub source: String,
    pub reference: String,
    pub captured_at: Timestamp,
    /// When Switchboard stored the evidence.
    pub recorded_at: Timestamp,
}

impl ConsentOut {
    /// The evidence `c`, stored as `uuid` at `recorded_at`.
    pub fn new(uuid: Uuid, c: &Consent, recorded_at: Timestamp) -> Self {
        ConsentOut {
            uuid,
            confirmed: true,
            purpose: c.purpose.as_str().to_owned(),
            source: c.source.as_str().to_owned(),
            reference: c.reference.clone(),
            captured_at: c.captured_at,
            recorded_at,
        }
    }
}
