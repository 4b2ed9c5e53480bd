//! Records and the storage interface of canned replies (an organization's saved texts).

use async_trait::async_trait;
use uuid::Uuid;

use crate::StoreResult;
use crate::page::PageQuery;
use switchboard_domain::Timestamp;

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

/// Canned replies.
#[async_trait]
pub trait CannedReplyStore: Send + Sync {
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
}
