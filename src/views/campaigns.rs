//! Campaigns and their recipients as the legacy API and the campaign events show them.

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_store::legacy::{
    CampaignCounts, CampaignRecord, CampaignStatus, RecipientRecord, RecipientStatus,
};

/// One recipient of a campaign.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RecipientOut {
    pub contact_uuid: Uuid,
    /// `pending`, `sent`, `refused` (a rule of campaign sends refused it; see `error_code`) or
    /// `failed` (the provider rejected it, or stayed unavailable).
    pub status: RecipientStatus,
    /// The message sent (also for a provider rejection, recorded as a failed message).
    pub message_id: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub attempts: i64,
    pub updated_at: Timestamp,
}

impl From<&RecipientRecord> for RecipientOut {
    fn from(r: &RecipientRecord) -> Self {
        RecipientOut {
            contact_uuid: r.contact_uuid,
            status: r.status,
            message_id: r.message_id,
            error_code: r.error_code.clone(),
            error_message: r.error_message.clone(),
            attempts: r.attempts,
            updated_at: r.updated_at,
        }
    }
}

/// A campaign and its progress.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CampaignOut {
    /// The campaign's id (a UUID).
    pub uuid: Uuid,
    pub name: String,
    /// `running`, `completed` (every recipient done, at least one sent) or `failed` (none sent).
    pub status: CampaignStatus,
    pub channel_id: i64,
    pub template_uuid: Option<String>,
    /// The `template` object as given.
    #[schema(value_type = Option<Object>)]
    pub template: Value,
    pub group_uuid: Option<Uuid>,
    /// Recipients per state.
    pub counts: CampaignCounts,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub completed_at: Option<Timestamp>,
    /// On `GET /api/campaigns/{id}`: the first 1000 recipients, in the order given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipients: Option<Vec<RecipientOut>>,
}

impl From<&CampaignRecord> for CampaignOut {
    fn from(c: &CampaignRecord) -> Self {
        CampaignOut {
            uuid: c.uuid,
            name: c.name.clone(),
            status: c.status,
            channel_id: c.channel_id,
            template_uuid: c
                .request
                .get("template_uuid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            template: c.request.get("template").cloned().unwrap_or(Value::Null),
            group_uuid: c.group_uuid,
            counts: c.counts,
            created_at: c.created_at,
            updated_at: c.updated_at,
            completed_at: c.completed_at,
            recipients: None,
        }
    }
}

/// The campaign object of events.
pub fn describe(c: &CampaignRecord) -> Value {
    serde_json::to_value(CampaignOut::from(c)).unwrap_or(Value::Null)
}
