//! Records of organization data: users, memberships and their permission overrides, and the
//! organization log as read by the API.

use std::collections::BTreeSet;

use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::event::OrgEvent;
use switchboard_domain::org_log::OrgEventFilter;
use switchboard_domain::permission::{self, Overrides, Permission, Role};
use switchboard_domain::user::{Email, MembershipStatus};

/// A person. Never carries a password or any other credential: none is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRecord {
    pub id: i64,
    pub uuid: Uuid,
    /// As first given.
    pub email: String,
    pub name: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A user's membership of one organization, with its permission overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub membership_id: i64,
    pub org_id: i64,
    pub user: UserRecord,
    pub role: Role,
    pub status: MembershipStatus,
    /// At most one per permission, sorted by permission.
    pub overrides: Overrides,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Member {
    /// The role's permissions, plus grants, minus revocations.
    pub fn effective_permissions(&self) -> BTreeSet<Permission> {
        permission::effective(self.role, &self.overrides)
    }

    /// The override of one permission, if any.
    pub fn override_of(&self, p: Permission) -> Option<permission::OverrideEffect> {
        self.overrides
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, effect)| *effect)
    }
}

/// A membership to create (and the user, when no user has the address).
#[derive(Clone, Debug)]
pub struct NewMember {
    pub org_id: i64,
    pub email: Email,
    /// Set on a new user; replaces an existing user's name when given.
    pub name: Option<String>,
    pub role: Role,
    pub now: Timestamp,
}

/// A membership before and after a change (equal when the change changed nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberChange {
    pub before: Member,
    pub after: Member,
}

impl MemberChange {
    pub fn changed(&self) -> bool {
        self.before != self.after
    }
}

/// A page of an organization's members, oldest membership first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberQuery {
    pub role: Option<Role>,
    /// Members strictly after this position: (membership created_at, membership id).
    pub after: Option<(Timestamp, i64)>,
    pub limit: i64,
}

/// An organization log entry with its position (for cursors).
#[derive(Clone, Debug, PartialEq)]
pub struct OrgEventRecord {
    pub id: i64,
    pub event: OrgEvent,
}

/// A page of the organization log, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrgEventQuery {
    pub filter: OrgEventFilter,
    /// Entries strictly before this position: (created_at, id).
    pub before: Option<(Timestamp, i64)>,
    pub limit: i64,
}
