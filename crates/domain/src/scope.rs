//! API scopes (specification section 5) and scope sets held by keys.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

macro_rules! scopes {
    ($( $variant:ident => $name:literal, $desc:literal; )*) => {
        /// One API scope of the closed list of specification section 5.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Scope { $( $variant, )* }

        impl Scope {
            /// Every scope, in catalogue order.
            pub const ALL: &'static [Scope] = &[ $( Scope::$variant, )* ];

            pub const fn as_str(self) -> &'static str {
                match self { $( Scope::$variant => $name, )* }
            }

            /// What the scope allows, for people.
            pub const fn description(self) -> &'static str {
                match self { $( Scope::$variant => $desc, )* }
            }
        }

        impl FromStr for Scope {
            type Err = UnknownScope;
            fn from_str(s: &str) -> Result<Self, UnknownScope> {
                match s { $( $name => Ok(Scope::$variant), )* _ => Err(UnknownScope(s.to_owned())) }
            }
        }
    };
}

scopes! {
    ChannelsRead => "channels:read", "List the organization's channels.";
    ContactsRead => "contacts:read", "Read contacts.";
    ContactsWrite => "contacts:write", "Create, update and delete contacts.";
    GroupsRead => "groups:read", "Read contact groups.";
    GroupsWrite => "groups:write", "Create, update and delete contact groups and their members.";
    MessagesRead => "messages:read", "Read message history.";
    MessagesWrite => "messages:write", "Send text, interactive, media and template messages.";
    CampaignsWrite => "campaigns:write", "Create template campaigns and read their progress.";
    TemplatesRead => "templates:read", "Read the template catalogue.";
    CannedRepliesRead => "canned_replies:read", "Read canned replies.";
    CannedRepliesWrite => "canned_replies:write", "Create, update and delete canned replies.";
    UsersRead => "users:read", "Read members, roles and effective permissions.";
    PermissionsRead => "permissions:read", "Read the permission and API-scope catalogues.";
    EventsRead => "events:read", "Read the organization's audit, admin and security events.";
    WebhooksRead => "webhooks:read", "Read webhook endpoints, the event catalogue and the delivery ledger.";
    WebhooksWrite => "webhooks:write", "Create, update, delete, test and rotate webhook endpoints; retry deliveries.";
    FlowRead => "flow:read", "Read automation flows.";
    FlowWrite => "flow:write", "Trigger automation flows.";
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A scope name that is not in the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope `{0}`; the scopes are {all}, or '*' for all", all = Scope::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))]
pub struct UnknownScope(pub String);

/// What a key may do: everything (`*`, and keys from before scopes existed) or a set of scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeSet {
    Wildcard,
    Only(BTreeSet<Scope>),
}

impl ScopeSet {
    pub fn allows(&self, scope: Scope) -> bool {
        match self {
            ScopeSet::Wildcard => true,
            ScopeSet::Only(set) => set.contains(&scope),
        }
    }

    pub fn is_wildcard(&self) -> bool {
        matches!(self, ScopeSet::Wildcard)
    }

    /// Parses a list such as `channels:read,messages:write` or `*`.
    ///
    /// Items are separated by commas and/or white space; `*` anywhere makes the set a
    /// wildcard; an unknown scope is an error; an empty list is an error.
    pub fn parse_list(s: &str) -> Result<ScopeSet, ScopeListError> {
        let items: Vec<&str> = s
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|i| !i.is_empty())
            .collect();
        Self::from_items(items)
    }

    pub fn from_items<'a>(
        items: impl IntoIterator<Item = &'a str>,
    ) -> Result<ScopeSet, ScopeListError> {
        let mut set = BTreeSet::new();
        let mut wildcard = false;
        let mut any = false;
        for item in items {
            any = true;
            if item == "*" {
                wildcard = true;
            } else {
                set.insert(item.parse::<Scope>().map_err(ScopeListError::Unknown)?);
            }
        }
        if !any {
            return Err(ScopeListError::Empty);
        }
        Ok(if wildcard {
            ScopeSet::Wildcard
        } else {
            ScopeSet::Only(set)
        })
    }

    /// The scope names as stored and shown: `["*"]` or the sorted list.
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            ScopeSet::Wildcard => vec!["*"],
            ScopeSet::Only(set) => set.iter().map(|s| s.as_str()).collect(),
        }
    }

    /// The stored form: space-separated names.
    pub fn to_storage(&self) -> String {
        self.names().join(" ")
    }
}

impl Serialize for ScopeSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeListError {
    #[error(transparent)]
    Unknown(UnknownScope),
    #[error("the scope list is empty (give scopes such as channels:read,messages:write, or '*')")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_round_trips() {
        assert_eq!(Scope::ALL.len(), 18);
        for s in Scope::ALL {
            assert_eq!(s.as_str().parse::<Scope>().unwrap(), *s);
        }
    }

    #[test]
    fn parses_lists_and_wildcards() {
        let set = ScopeSet::parse_list("channels:read, messages:write").unwrap();
        assert!(set.allows(Scope::ChannelsRead));
        assert!(set.allows(Scope::MessagesWrite));
        assert!(!set.allows(Scope::MessagesRead));
        assert_eq!(set.names(), vec!["channels:read", "messages:write"]);

        let all = ScopeSet::parse_list("*").unwrap();
        assert!(Scope::ALL.iter().all(|s| all.allows(*s)));
        assert_eq!(
            ScopeSet::parse_list("channels:read,*").unwrap(),
            ScopeSet::Wildcard
        );
    }

    #[test]
    fn rejects_unknown_and_empty() {
        assert_eq!(
            ScopeSet::parse_list("channels:read,channels:write"),
            Err(ScopeListError::Unknown(UnknownScope(
                "channels:write".into()
            )))
        );
        assert_eq!(ScopeSet::parse_list(" , "), Err(ScopeListError::Empty));
        assert!(ScopeSet::parse_list("CHANNELS:READ").is_err());
    }

    #[test]
    fn storage_form_round_trips() {
        let set = ScopeSet::parse_list("webhooks:write webhooks:read").unwrap();
        assert_eq!(ScopeSet::parse_list(&set.to_storage()).unwrap(), set);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn scope_lists_never_panic(s in "\\PC{0,200}") {
                let _ = ScopeSet::parse_list(&s);
            }

            #[test]
            fn subsets_round_trip(mask in 0u32..(1 << 18)) {
                let chosen: Vec<&str> = Scope::ALL.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, s)| s.as_str()).collect();
                prop_assume!(!chosen.is_empty());
                let set = ScopeSet::parse_list(&chosen.join(",")).unwrap();
                prop_assert_eq!(ScopeSet::parse_list(&set.to_storage()).unwrap(), set.clone());
                for s in Scope::ALL {
                    prop_assert_eq!(set.allows(*s), chosen.contains(&s.as_str()));
                }
            }
        }
    }
}
