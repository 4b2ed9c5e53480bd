//! Records and the storage interface of campaigns: a template sent to a group's contacts by a
//! background worker, recipient by recipient.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use crate::{EffectsFn, StoreResult};
use switchboard_domain::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CampaignStatus {
    Running,
    Completed,
    Failed,
}

impl CampaignStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignStatus::Running => "running",
            CampaignStatus::Completed => "completed",
            CampaignStatus::Failed => "failed",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(CampaignStatus::Running),
            "completed" => Some(CampaignStatus::Completed),
            "failed" => Some(CampaignStatus::Failed),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecipientStatus {
    Pending,
    Sent,
    Refused,
    Failed,
}

impl RecipientStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RecipientStatus::Pending => "pending",
            RecipientStatus::Sent => "sent",
            RecipientStatus::Refused => "refused",
            RecipientStatus::Failed => "failed",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(RecipientStatus::Pending),
            "sent" => Some(RecipientStatus::Sent),
            "refused" => Some(RecipientStatus::Refused),
            "failed" => Some(RecipientStatus::Failed),
            _ => None,
        }
    }
}

/// Recipient counts per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CampaignCounts {
    pub total: i64,
    pub pending: i64,
    pub sent: i64,
    pub refused: i64,
    pub failed: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CampaignRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub api_key_id: i64,
    pub api_key_prefix: String,
    pub name: String,
    pub channel_id: i64,
    pub group_uuid: Option<Uuid>,
    /// `{"template_uuid", "template"}` as given.
    pub request: Value,
    pub status: CampaignStatus,
    pub counts: CampaignCounts,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

#[derive(Clone, Debug)]
pub struct NewCampaign {
    pub uuid: Uuid,
    pub org_id: i64,
    pub api_key_id: i64,
    pub api_key_prefix: String,
    pub name: String,
    pub channel_id: i64,
    pub group_uuid: Option<Uuid>,
    pub request: Value,
    /// (contact id, consent object) per recipient; contacts are distinct.
    pub recipients: Vec<(i64, Value)>,
    pub now: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RecipientRecord {
    pub id: i64,
    pub campaign_id: i64,
    pub contact_id: i64,
    pub contact_uuid: Uuid,
    pub consent: Value,
    pub status: RecipientStatus,
    pub attempts: i64,
    pub message_id: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub updated_at: Timestamp,
}

/// A recipient claimed by a worker, with its campaign.
#[derive(Clone, Debug)]
pub struct ClaimedRecipient {
    pub recipient: RecipientRecord,
    pub campaign: CampaignRecord,
    pub token: Uuid,
}

/// How a recipient ended.
#[derive(Clone, Debug)]
pub struct RecipientOutcome {
    /// `Sent`, `Refused` or `Failed`.
    pub status: RecipientStatus,
    pub message_id: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

/// What finishing a recipient did.
#[derive(Clone, Debug)]
pub struct RecipientFinished {
    pub recipient: RecipientRecord,
    /// The campaign when this recipient was its last one (now `completed` or `failed`).
    pub campaign_finished: Option<CampaignRecord>,
}

/// Campaigns and their recipients.
#[async_trait]
pub trait CampaignStore: Send + Sync {
    /// Creates a campaign and its pending recipients in one transaction.
    async fn create_campaign(
        &self,
        new: NewCampaign,
        effects: EffectsFn<'_, CampaignRecord>,
    ) -> StoreResult<CampaignRecord>;
    async fn find_campaign(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<CampaignRecord>>;
    /// A campaign's recipients, in creation order, at most `limit`.
    async fn list_campaign_recipients(
        &self,
        campaign_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<RecipientRecord>>;
    /// Claims up to `limit` pending recipients whose lease is free or expired, with a fresh
    /// token and a lease of `lease`.
    async fn claim_campaign_recipients(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: i64,
    ) -> StoreResult<Vec<ClaimedRecipient>>;
    /// Records a claimed recipient's outcome (only while `token` holds the claim, else
    /// `Conflict`); when it was the campaign's last pending recipient, the campaign becomes
    /// `completed` (some sent) or `failed` (none) and `effects` of the finished campaign are
    /// written, in the same transaction.
    async fn finish_campaign_recipient(
        &self,
        recipient_id: i64,
        token: Uuid,
        outcome: RecipientOutcome,
        now: Timestamp,
        effects: EffectsFn<'_, CampaignRecord>,
    ) -> StoreResult<RecipientFinished>;
}
