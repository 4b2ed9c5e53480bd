//! Records of the template catalogue and of consent evidence.

use serde_json::Value;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::template::{
    ConsentPurpose, ConsentSource, TemplateCategory, TemplateStatus,
};

/// A catalog template as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub channel_id: i64,
    pub name: String,
    pub language: String,
    pub category: TemplateCategory,
    pub status: TemplateStatus,
    pub active: bool,
    /// The WhatsApp component definitions (an array; empty when not defined).
    pub components: Value,
    /// The number of BODY parameters (`None`: components not defined).
    pub body_parameters: Option<i64>,
    pub provider_template_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Clone, Debug)]
pub struct NewTemplate {
    pub uuid: Uuid,
    pub org_id: i64,
    pub channel_id: i64,
    pub name: String,
    pub language: String,
    pub category: TemplateCategory,
    pub status: TemplateStatus,
    pub active: bool,
    pub components: Value,
    pub body_parameters: Option<i64>,
    pub provider_template_id: Option<String>,
    pub now: Timestamp,
}

/// A change to a template; `None` leaves a field as it is.
#[derive(Clone, Debug, Default)]
pub struct TemplatePatch {
    pub category: Option<TemplateCategory>,
    pub status: Option<TemplateStatus>,
    pub active: Option<bool>,
    /// New components with their derived body parameter count.
    pub components: Option<(Value, Option<i64>)>,
    pub provider_template_id: Option<String>,
}

/// A template before and after a change.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateChange {
    pub before: TemplateRecord,
    pub after: TemplateRecord,
}

/// A template status reported by the provider for one channel.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderTemplateStatus {
    /// The provider's template id (matched first).
    pub provider_template_id: Option<String>,
    /// Name and language (matched when the id matches nothing).
    pub name: Option<String>,
    pub language: Option<String>,
    pub status: TemplateStatus,
}

/// Why consent evidence was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsentContext {
    /// A conversation initiation (`ensure_conversation: true`).
    Initiation,
    /// A synchronized campaign recipient message.
    Campaign,
}

impl ConsentContext {
    pub const fn as_str(self) -> &'static str {
        match self {
            ConsentContext::Initiation => "initiation",
            ConsentContext::Campaign => "campaign",
        }
    }
}

/// Consent evidence to store with a message.
#[derive(Clone, Debug)]
pub struct NewConsent {
    pub uuid: Uuid,
    pub template_id: i64,
    pub api_key_id: Option<i64>,
    pub context: ConsentContext,
    pub purpose: ConsentPurpose,
    pub source: ConsentSource,
    pub reference: String,
    pub captured_at: Timestamp,
}

/// Consent evidence as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsentRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub contact_id: i64,
    pub channel_id: i64,
    pub template_id: i64,
    pub api_key_id: Option<i64>,
    pub context: String,
    pub purpose: ConsentPurpose,
    pub source: ConsentSource,
    pub reference: String,
    pub captured_at: Timestamp,
    pub recorded_at: Timestamp,
}
