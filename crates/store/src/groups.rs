//! Records and the storage interface of contact groups and their memberships.

use async_trait::async_trait;
use uuid::Uuid;

use crate::page::PageQuery;
use crate::{EffectsFn, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;

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

/// Contact groups and their members.
#[async_trait]
pub trait GroupStore: Send + Sync {
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
}
