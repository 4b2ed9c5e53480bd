//! Contact groups of the legacy `/api/groups` routes: created, renamed, deleted and their
//! members changed, each with its event in the transaction of the change (`group.created`,
//! `group.updated` (also for membership changes, naming the contacts), `group.deleted`).
//! Errors are the store's: `NotFound` for a group that is not the organization's.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::views::groups::GroupOut;
use switchboard_domain::Timestamp;
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_store::legacy::{GroupRecord, MembershipOutcome};
use switchboard_store::{Store, StoreError};

/// `name` for a group, with `extra` members in its data.
pub(crate) fn group_event(g: &GroupRecord, name: &str, extra: Value, now: Timestamp) -> NewEvent {
    let mut data = json!({ "group_uuid": g.uuid, "group": GroupOut::from(g) });
    if let (Some(d), Value::Object(extra)) = (data.as_object_mut(), extra) {
        d.extend(extra);
    }
    NewEvent::new(g.org_id, name, data, None, now)
}

/// Creates a group named `name` (checked by the caller).
pub async fn create_group(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    name: &str,
) -> Result<GroupRecord, StoreError> {
    let now = clock.now();
    store
        .create_group(
            org_id,
            Uuid::now_v7(),
            name,
            now,
            Box::new(move |g| {
                Effects::none().event(group_event(g, "group.created", json!({}), now))
            }),
        )
        .await
}

pub async fn rename_group(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    uuid: Uuid,
    name: &str,
) -> Result<GroupRecord, StoreError> {
    let now = clock.now();
    store
        .rename_group(
            org_id,
            uuid,
            name,
            now,
            Box::new(move |g| {
                Effects::none().event(group_event(g, "group.updated", json!({}), now))
            }),
        )
        .await
}

/// Deletes a group and its memberships (the contacts stay).
pub async fn delete_group(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    uuid: Uuid,
) -> Result<GroupRecord, StoreError> {
    let now = clock.now();
    store
        .delete_group(
            org_id,
            uuid,
            Box::new(move |g| {
                Effects::none().event(group_event(g, "group.deleted", json!({}), now))
            }),
        )
        .await
}

/// Adds (`add`) or removes contacts of the organization, all or nothing; the event names the
/// contacts listed and is written only when something changed.
pub async fn change_members(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    uuid: Uuid,
    contacts: &[Uuid],
    add: bool,
) -> Result<MembershipOutcome, StoreError> {
    let now = clock.now();
    let listed = contacts.to_vec();
    store
        .change_group_members(
            org_id,
            uuid,
            contacts,
            add,
            now,
            Box::new(move |g| {
                let extra = if add {
                    json!({ "added_contact_uuids": listed })
                } else {
                    json!({ "removed_contact_uuids": listed })
                };
                Effects::none().event(group_event(g, "group.updated", extra, now))
            }),
        )
        .await
}
