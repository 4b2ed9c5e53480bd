//! Contact groups as the legacy API and the group events show them.

use serde::Serialize;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_store::legacy::GroupRecord;

/// A contact group.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct GroupOut {
    pub uuid: Uuid,
    pub name: String,
    pub member_count: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&GroupRecord> for GroupOut {
    fn from(g: &GroupRecord) -> Self {
        GroupOut {
            uuid: g.uuid,
            name: g.name.clone(),
            member_count: g.member_count,
            created_at: g.created_at,
            updated_at: g.updated_at,
        }
    }
}
