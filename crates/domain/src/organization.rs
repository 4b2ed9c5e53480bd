//! Organizations: the tenant boundary. Every key, channel and record belongs to one.

use serde::Serialize;
use uuid::Uuid;

use super::Timestamp;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Organization {
    pub id: i64,
    pub uuid: Uuid,
    pub name: String,
    pub created_at: Timestamp,
}
