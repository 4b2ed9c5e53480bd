//! Records and the storage interface of flows: a stored action (a text or a template) that a
//! trigger sends.

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use crate::StoreResult;
use crate::page::PageQuery;
use switchboard_domain::Timestamp;

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

/// Flows.
#[async_trait]
pub trait FlowStore: Send + Sync {
    async fn create_flow(&self, new: NewFlow) -> StoreResult<FlowRecord>;
    async fn find_flow(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<FlowRecord>>;
    async fn list_flows(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<FlowRecord>>;
}
