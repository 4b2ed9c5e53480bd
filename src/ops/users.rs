//! Members of organizations: add, change role, grant/revoke/reset a permission, remove.
//!
//! Every change writes, in its own transaction:
//! * an organization log entry (category `admin`): `team.member_added`, `team.role_changed`,
//!   `team.member_removed`, `team.permission_granted`, `team.permission_revoked`,
//!   `team.permission_reset`. The log is permanent (append-only), so its details name the user
//!   by UUID only: no e-mail address or name.
//! * for the names in the webhook catalogue (`team.member_added`, `team.role_changed`,
//!   `team.member_removed`), an outbox event whose `data` carries `user_uuid`, `email` and
//!   `role` (and `previous_role`): what the organization's own systems need to keep their
//!   copy of the team in step. Never a credential (none exists).
//!
//! A change that changes nothing (the same role again, a grant that is already there) succeeds
//! and records nothing.

use serde_json::{Value, json};

use switchboard_domain::Timestamp;
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects, EventCategory, NewEvent, OrgEvent, Subject};
use switchboard_domain::org_log::team;
use switchboard_domain::permission::{OverrideEffect, Permission, Role};
use switchboard_domain::user::{Email, validate_user_name};
use switchboard_store::{Member, MemberChange, NewMember, Store, StoreError};

use super::{OpError, OpResult};

pub struct AddUser {
    pub org_id: i64,
    pub email: String,
    pub name: Option<String>,
    pub role: Role,
}

fn parse_email(raw: &str) -> OpResult<Email> {
    Email::parse(raw).map_err(|e| OpError::invalid_field("email", e))
}

fn sorted_permissions(m: &Member) -> Vec<&'static str> {
    m.effective_permissions()
        .iter()
        .map(|p| p.as_str())
        .collect()
}

fn log_entry(
    m: &Member,
    event_type: &str,
    details: Value,
    actor: &Actor,
    now: Timestamp,
) -> OrgEvent {
    OrgEvent::new(
        m.org_id,
        event_type,
        EventCategory::Admin,
        actor.clone(),
        Some(Subject::new("user", m.user.uuid)),
        details,
        now,
    )
}

pub(crate) fn webhook(m: &Member, name: &str, mut data: Value, now: Timestamp) -> NewEvent {
    data["user_uuid"] = json!(m.user.uuid);
    data["email"] = json!(m.user.email);
    data["role"] = json!(m.role);
    NewEvent::new(m.org_id, name, data, None, now)
}

fn member_not_found(org_id: i64, email: &Email) -> impl Fn(StoreError) -> OpError + '_ {
    move |e| match e {
        StoreError::NotFound => {
            OpError::not_found(format!("{email} is not a member of organization {org_id}"))
        }
        StoreError::Conflict(m) => OpError::conflict(m),
        other => other.into(),
    }
}

pub async fn add_user(
    store: &dyn Store,
    clock: &dyn Clock,
    input: AddUser,
    actor: Actor,
) -> OpResult<Member> {
    let email = parse_email(&input.email)?;
    let name = input
        .name
        .as_deref()
        .map(|n| validate_user_name(n).map_err(|e| OpError::invalid_field("name", e)))
        .transpose()?;
    super::orgs::require_org(store, input.org_id).await?;
    let now = clock.now();
    store
        .add_member(
            NewMember {
                org_id: input.org_id,
                email: email.clone(),
                name,
                role: input.role,
                now,
            },
            Box::new(move |m| {
                Effects::none()
                    .log(log_entry(
                        m,
                        team::MEMBER_ADDED,
                        json!({ "user_uuid": m.user.uuid, "role": m.role, "permissions": sorted_permissions(m) }),
                        &actor,
                        now,
                    ))
                    .event(webhook(m, team::MEMBER_ADDED, json!({}), now))
            }),
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => OpError::conflict(format!(
                "{email} is already a member of organization {}",
                input.org_id
            )),
            other => other.into(),
        })
}

pub async fn change_role(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    email: &str,
    role: Role,
    actor: Actor,
) -> OpResult<Member> {
    let email = parse_email(email)?;
    super::orgs::require_org(store, org_id).await?;
    let now = clock.now();
    let change = store
        .set_member_role(
            org_id,
            email.normalized(),
            role,
            now,
            Box::new(move |c: &MemberChange| {
                if !c.changed() {
                    return Effects::none();
                }
                let (before, after) = (&c.before, &c.after);
                Effects::none()
                    .log(log_entry(
                        after,
                        team::ROLE_CHANGED,
                        json!({
                            "user_uuid": after.user.uuid,
                            "role": after.role,
                            "previous_role": before.role,
                            "permissions": sorted_permissions(after),
                        }),
                        &actor,
                        now,
                    ))
                    .event(webhook(
                        after,
                        team::ROLE_CHANGED,
                        json!({ "previous_role": before.role }),
                        now,
                    ))
            }),
        )
        .await
        .map_err(member_not_found(org_id, &email))?;
    Ok(change.after)
}

/// What to do with one permission of a membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermissionChange {
    Grant,
    Revoke,
    /// Remove the override: the role decides again.
    Reset,
}

pub async fn change_permission(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    email: &str,
    permission: Permission,
    change: PermissionChange,
    actor: Actor,
) -> OpResult<Member> {
    let email = parse_email(email)?;
    super::orgs::require_org(store, org_id).await?;
    let now = clock.now();
    let effect = match change {
        PermissionChange::Grant => Some(OverrideEffect::Grant),
        PermissionChange::Revoke => Some(OverrideEffect::Revoke),
        PermissionChange::Reset => None,
    };
    let result = store
        .set_member_permission(
            org_id,
            email.normalized(),
            permission,
            effect,
            now,
            Box::new(move |c: &MemberChange| {
                if !c.changed() {
                    return Effects::none();
                }
                let event_type = match change {
                    PermissionChange::Grant => team::PERMISSION_GRANTED,
                    PermissionChange::Revoke => team::PERMISSION_REVOKED,
                    PermissionChange::Reset => team::PERMISSION_RESET,
                };
                let mut details = json!({
                    "user_uuid": c.after.user.uuid,
                    "permission": permission,
                    "role": c.after.role,
                    "permissions": sorted_permissions(&c.after),
                });
                if let Some(previous) = c.before.override_of(permission) {
                    details["previous_override"] = json!(previous.as_str());
                }
                Effects::none().log(log_entry(&c.after, event_type, details, &actor, now))
            }),
        )
        .await
        .map_err(member_not_found(org_id, &email))?;
    Ok(result.after)
}

pub async fn remove_user(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    email: &str,
    actor: Actor,
) -> OpResult<Member> {
    let email = parse_email(email)?;
    super::orgs::require_org(store, org_id).await?;
    let now = clock.now();
    store
        .remove_member(
            org_id,
            email.normalized(),
            Box::new(move |m| {
                Effects::none()
                    .log(log_entry(
                        m,
                        team::MEMBER_REMOVED,
                        json!({ "user_uuid": m.user.uuid, "role": m.role }),
                        &actor,
                        now,
                    ))
                    .event(webhook(m, team::MEMBER_REMOVED, json!({}), now))
            }),
        )
        .await
        .map_err(member_not_found(org_id, &email))
}

/// One member, by organization and e-mail address (any case).
pub async fn get_user(store: &dyn Store, org_id: i64, email: &str) -> OpResult<Member> {
    let email = parse_email(email)?;
    super::orgs::require_org(store, org_id).await?;
    store
        .get_member(org_id, email.normalized())
        .await
        .map_err(member_not_found(org_id, &email))
}
