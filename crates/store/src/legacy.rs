//! Records and the storage interface of the legacy data routes under `/api`: contact listing,
//! change and (soft) deletion, contact groups, canned replies, the template catalogue page,
//! campaigns with their recipients, and flows.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use super::{EffectsFn, StoreResult};
use crate::TemplateRecord;
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::phone::Phone;
use switchboard_domain::template::TemplateStatus;

/// A position in a newest-first list: the (time, id) of the last row returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePosition {
    pub time: Timestamp,
    pub id: i64,
}

/// A page request: rows strictly after `after` in newest-first order, at most `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageQuery {
    pub after: Option<PagePosition>,
    pub limit: i64,
}

// ---------------------------------------------------------------------------------------------
// Contacts

/// Contact search: by exact phone (E.164) and/or name substring (case-insensitive).
#[derive(Clone, Debug, Default)]
pub struct ContactQuery {
    pub phone: Option<Phone>,
    /// Lower-cased.
    pub name_contains: Option<String>,
}

/// A change to a contact: each field that is `Some` is replaced (`name: Some(None)` clears it).
#[derive(Clone, Debug, Default)]
pub struct ContactPatch {
    pub phone: Option<Phone>,
    pub name: Option<Option<String>>,
}

/// A contact before and after a change.
#[derive(Clone, Debug)]
pub struct ContactChange {
    pub before: Contact,
    pub after: Contact,
}

// ---------------------------------------------------------------------------------------------
// Groups

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub name: String,
    pub member_count: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A group member: the contact and when it joined (the page position is `(added_at, id)`).
#[derive(Clone, Debug)]
pub struct GroupMember {
    pub contact: Contact,
    pub added_at: Timestamp,
}

/// What a membership change did.
#[derive(Clone, Debug)]
pub enum MembershipOutcome {
    /// The group after the change, and how many memberships were added or removed.
    Changed { group: GroupRecord, changed: i64 },
    /// Some contacts are not (live) contacts of the organization: nothing changed.
    UnknownContacts(Vec<Uuid>),
}

// ---------------------------------------------------------------------------------------------
// Canned replies

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CannedReplyRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub shortcut: String,
    pub text: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

// ---------------------------------------------------------------------------------------------
// Campaigns

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

// ---------------------------------------------------------------------------------------------
// Flows

#[derive(Clone, Debug, PartialEq)]
pub struct FlowRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub name: String,
    pub channel_id: i64,
    /// `{"type": "text", "text"}` or `{"type": "template", "template_uuid", "language", "params"}`.
    pub action: Value,
    pub active: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Clone, Debug)]
pub struct NewFlow {
    pub uuid: Uuid,
    pub org_id: i64,
    pub name: String,
    pub channel_id: i64,
    pub action: Value,
    pub active: bool,
    pub now: Timestamp,
}

/// The legacy data routes' storage.
#[async_trait]
pub trait LegacyStore: Send + Sync {
    // Contacts (created with `MessageStore::create_contact`).
    /// A page of the organization's live contacts, newest first.
    async fn list_contacts(
        &self,
        org_id: i64,
        query: &ContactQuery,
        page: PageQuery,
    ) -> StoreResult<Vec<Contact>>;
    /// Changes a live contact; a phone another live contact has is `UniqueViolation`.
    async fn update_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        patch: ContactPatch,
        now: Timestamp,
        effects: EffectsFn<'_, ContactChange>,
    ) -> StoreResult<ContactChange>;
    /// Deletes a live contact: the row stays (messages keep referring to it) without its phone,
    /// name and Telegram chat, and leaves its groups. Returns the contact as it was.
    async fn delete_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
        effects: EffectsFn<'_, Contact>,
    ) -> StoreResult<Contact>;
    /// A contact of the organization by UUID, deleted ones included (for filters over history,
    /// whose messages keep referring to deleted contacts).
    async fn find_contact_with_deleted(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<Option<Contact>>;
    /// Live contacts of the organization by UUID (unknown ones are missing from the answer).
    async fn resolve_contacts(&self, org_id: i64, uuids: &[Uuid]) -> StoreResult<Vec<Contact>>;

    // Groups
    async fn create_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        name: &str,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord>;
    async fn find_group(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<GroupRecord>>;
    async fn list_groups(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<GroupRecord>>;
    async fn rename_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        name: &str,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord>;
    /// Deletes a group and its memberships (the contacts stay).
    async fn delete_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord>;
    /// Adds (`add`) or removes live contacts of the organization to or from a group, all or
    /// nothing. Effects are written only when something changed.
    async fn change_group_members(
        &self,
        org_id: i64,
        uuid: Uuid,
        contacts: &[Uuid],
        add: bool,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<MembershipOutcome>;
    /// A page of a group's members, newest membership first.
    async fn list_group_members(
        &self,
        group_id: i64,
        page: PageQuery,
    ) -> StoreResult<Vec<GroupMember>>;

    // Canned replies
    /// A shortcut the organization has is `UniqueViolation`.
    async fn create_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: &str,
        text: &str,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord>;
    async fn list_canned_replies(
        &self,
        org_id: i64,
        page: PageQuery,
    ) -> StoreResult<Vec<CannedReplyRecord>>;
    async fn update_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: Option<&str>,
        text: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord>;
    async fn delete_canned_reply(&self, org_id: i64, uuid: Uuid) -> StoreResult<()>;

    // Templates
    /// A page of the organization's catalogue, newest first, optionally filtered.
    async fn list_templates_page(
        &self,
        org_id: i64,
        channel_id: Option<i64>,
        status: Option<TemplateStatus>,
        page: PageQuery,
    ) -> StoreResult<Vec<TemplateRecord>>;

    // Campaigns
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

    // Flows
    async fn create_flow(&self, new: NewFlow) -> StoreResult<FlowRecord>;
    async fn find_flow(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<FlowRecord>>;
    async fn list_flows(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<FlowRecord>>;
}
