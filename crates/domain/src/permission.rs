//! Member permissions: the catalogue of named permissions, the roles and what each grants, and
//! per-membership overrides (grants and revocations).
//!
//! Effective permissions are always computed ([`effective`]): the role's permissions, plus the
//! membership's grants, minus its revocations. Only the role name and the overrides are stored,
//! so nothing is stored twice and a change to a role's definition applies to every member at once.
//!
//! These are permissions of people (organization members), distinct from the API scopes of keys
//! (`domain::scope`). Switchboard stores and reports them; the product that people log in to
//! enforces them.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

macro_rules! permissions {
    ($( $variant:ident => $name:literal, $desc:literal; )*) => {
        /// One named permission of the catalogue. Variants are declared in the alphabetical
        /// order of their names, so the derived order is the order of the names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Permission { $( $variant, )* }

        impl Permission {
            /// Every permission, sorted by name.
            pub const ALL: &'static [Permission] = &[ $( Permission::$variant, )* ];

            pub const fn as_str(self) -> &'static str {
                match self { $( Permission::$variant => $name, )* }
            }

            /// What the permission allows, for people.
            pub const fn description(self) -> &'static str {
                match self { $( Permission::$variant => $desc, )* }
            }
        }

        impl FromStr for Permission {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $name => Ok(Permission::$variant), )*
                    _ => Err(format!(
                        "unknown permission `{}` (see GET /api/v1/integrations/permissions for the catalogue)",
                        s.chars().take(64).collect::<String>()
                    )),
                }
            }
        }
    };
}

permissions! {
    ApiKeysManage => "api_keys.manage", "Create, rotate and revoke the organization's API keys.";
    AuditView => "audit.view", "Read the organization's audit, admin and security log.";
    BillingManage => "billing.manage", "Change the plan, payment methods and billing details.";
    BillingView => "billing.view", "See the plan, usage, credit balance and invoices.";
    CampaignsManage => "campaigns.manage", "Create, schedule, pause and send campaigns.";
    CannedRepliesManage => "canned_replies.manage", "Create, edit and delete canned replies.";
    ChannelsManage => "channels.manage", "Connect, configure and disconnect messaging channels.";
    ContactsManage => "contacts.manage", "Create, edit, import, group and delete contacts.";
    ContactsRead => "contacts.read", "See contacts and contact groups.";
    ConversationsManage => "conversations.manage", "Assign, transfer, close and reopen conversations.";
    FlowsManage => "flows.manage", "Create, edit and trigger automation flows.";
    MessagesRead => "messages.read", "Read conversations and message history.";
    MessagesSend => "messages.send", "Send text, interactive, media and template messages.";
    ReportsView => "reports.view", "See reports and analytics.";
    SettingsManage => "settings.manage", "Change the organization's settings.";
    TemplatesManage => "templates.manage", "Create, edit and submit message templates.";
    UsersManage => "users.manage", "Add and remove members, change their roles and permissions.";
    WebhooksManage => "webhooks.manage", "Manage webhook endpoints and inspect and retry deliveries.";
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Permission {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A member's role in an organization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Role {
    Owner,
    Admin,
    Manager,
    Agent,
    Viewer,
}

impl Role {
    /// Every role, from the most to the least privileged.
    pub const ALL: &'static [Role] = &[
        Role::Owner,
        Role::Admin,
        Role::Manager,
        Role::Agent,
        Role::Viewer,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Manager => "manager",
            Role::Agent => "agent",
            Role::Viewer => "viewer",
        }
    }

    pub const fn description(self) -> &'static str {
        match self {
            Role::Owner => "Full control of the organization, including billing.",
            Role::Admin => {
                "Runs the organization: members, channels, integrations, API keys and settings; sees billing but cannot change it."
            }
            Role::Manager => {
                "Runs the team's messaging: contacts, templates, canned replies, campaigns, flows and reports."
            }
            Role::Agent => "Handles conversations: reads and sends messages and sees contacts.",
            Role::Viewer => "Read-only access to conversations, contacts and reports.",
        }
    }

    /// The permissions the role grants, sorted by name.
    pub fn permissions(self) -> &'static [Permission] {
        use Permission::*;
        match self {
            Role::Owner => Permission::ALL,
            Role::Admin => &[
                ApiKeysManage,
                AuditView,
                BillingView,
                CampaignsManage,
                CannedRepliesManage,
                ChannelsManage,
                ContactsManage,
                ContactsRead,
                ConversationsManage,
                FlowsManage,
                MessagesRead,
                MessagesSend,
                ReportsView,
                SettingsManage,
                TemplatesManage,
                UsersManage,
                WebhooksManage,
            ],
            Role::Manager => &[
                CampaignsManage,
                CannedRepliesManage,
                ContactsManage,
                ContactsRead,
                ConversationsManage,
                FlowsManage,
                MessagesRead,
                MessagesSend,
                ReportsView,
                TemplatesManage,
            ],
            Role::Agent => &[
                ContactsRead,
                ConversationsManage,
                MessagesRead,
                MessagesSend,
            ],
            Role::Viewer => &[ContactsRead, MessagesRead, ReportsView],
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown role `{}` (expected owner, admin, manager, agent or viewer)",
                    s.chars().take(64).collect::<String>()
                )
            })
    }
}

/// A per-membership override of one permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverrideEffect {
    /// The member has the permission whatever the role.
    Grant,
    /// The member lacks the permission whatever the role.
    Revoke,
}

impl OverrideEffect {
    pub const fn as_str(self) -> &'static str {
        match self {
            OverrideEffect::Grant => "grant",
            OverrideEffect::Revoke => "revoke",
        }
    }
}

impl FromStr for OverrideEffect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grant" => Ok(OverrideEffect::Grant),
            "revoke" => Ok(OverrideEffect::Revoke),
            other => Err(format!("unknown permission override `{other}`")),
        }
    }
}

/// A membership's overrides: at most one per permission.
pub type Overrides = Vec<(Permission, OverrideEffect)>;

/// The effective permissions: the role's, plus grants, minus revocations (sorted by name).
pub fn effective(role: Role, overrides: &[(Permission, OverrideEffect)]) -> BTreeSet<Permission> {
    let mut set: BTreeSet<Permission> = role.permissions().iter().copied().collect();
    for (p, effect) in overrides {
        match effect {
            OverrideEffect::Grant => set.insert(*p),
            OverrideEffect::Revoke => set.remove(p),
        };
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_is_sorted_by_name_and_round_trips() {
        let names: Vec<&str> = Permission::ALL.iter().map(|p| p.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(
            names, sorted,
            "declare permissions in the order of their names"
        );
        for p in Permission::ALL {
            assert_eq!(p.as_str().parse::<Permission>().unwrap(), *p);
            assert!(p.description().ends_with('.'));
            let (resource, verb) = p.as_str().split_once('.').unwrap();
            assert!(!resource.is_empty() && !verb.is_empty());
        }
        assert!("messages.delete".parse::<Permission>().is_err());
        assert!("MESSAGES.SEND".parse::<Permission>().is_err());
    }

    #[test]
    fn role_permissions_are_sorted_subsets_that_narrow_down() {
        for r in Role::ALL {
            let perms = r.permissions();
            assert!(perms.windows(2).all(|w| w[0] < w[1]), "{r} is sorted");
            assert_eq!(r.as_str().parse::<Role>().unwrap(), *r);
        }
        let set = |r: Role| -> BTreeSet<Permission> { r.permissions().iter().copied().collect() };
        assert_eq!(set(Role::Owner).len(), Permission::ALL.len());
        assert!(set(Role::Admin).is_subset(&set(Role::Owner)));
        assert!(!set(Role::Admin).contains(&Permission::BillingManage));
        assert!(set(Role::Manager).is_subset(&set(Role::Admin)));
        assert!(set(Role::Agent).is_subset(&set(Role::Manager)));
        assert!(set(Role::Viewer).is_subset(&set(Role::Manager)));
        assert!(set(Role::Agent).len() < set(Role::Owner).len());
        assert!(!set(Role::Viewer).contains(&Permission::MessagesSend));
        assert!("superuser".parse::<Role>().is_err());
        assert!("Owner".parse::<Role>().is_err());
    }

    #[test]
    fn effective_permissions_add_grants_and_remove_revocations() {
        let base = effective(Role::Agent, &[]);
        assert!(base.contains(&Permission::MessagesSend));
        assert!(!base.contains(&Permission::ReportsView));
        let changed = effective(
            Role::Agent,
            &[
                (Permission::ReportsView, OverrideEffect::Grant),
                (Permission::MessagesSend, OverrideEffect::Revoke),
                // A revocation of a permission the role lacks changes nothing now, and keeps
                // the member without it after a promotion.
                (Permission::BillingManage, OverrideEffect::Revoke),
            ],
        );
        assert!(changed.contains(&Permission::ReportsView));
        assert!(!changed.contains(&Permission::MessagesSend));
        assert_eq!(changed.len(), base.len());
        let promoted = effective(
            Role::Owner,
            &[(Permission::BillingManage, OverrideEffect::Revoke)],
        );
        assert_eq!(promoted.len(), Permission::ALL.len() - 1);
    }
}
