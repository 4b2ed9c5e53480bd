//! Reading the organization log: the filters of `GET /api/v1/integrations/events`, and the
//! type names of the entries this part of the service writes.

use super::Timestamp;
use super::event::EventCategory;

/// Log types written by the member (team) operations. All are of category `admin`.
pub mod team {
    pub const MEMBER_ADDED: &str = "team.member_added";
    pub const ROLE_CHANGED: &str = "team.role_changed";
    pub const MEMBER_REMOVED: &str = "team.member_removed";
    pub const PERMISSION_GRANTED: &str = "team.permission_granted";
    pub const PERMISSION_REVOKED: &str = "team.permission_revoked";
    pub const PERMISSION_RESET: &str = "team.permission_reset";
}

/// The longest type filter accepted.
const MAX_TYPE_LEN: usize = 100;

/// The `type` filter: one exact type, or every type under a prefix (`team.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeFilter {
    Exact(String),
    /// The text before `*`, ending with a dot (`team.`).
    Prefix(String),
}

impl TypeFilter {
    /// Parses `security.api_key_created`, `security.*` or `webhook_endpoint.*`.
    ///
    /// A type is two or more dot-separated segments of `a-z`, `0-9` and `_`. A well-formed type
    /// that no entry has (yet) matches nothing: the log is additive (specification 9.2), so a
    /// filter written for a newer version still works.
    pub fn parse(s: &str) -> Result<TypeFilter, String> {
        let bad = || {
            format!(
                "type must be an event type such as security.api_key_created, or a prefix such as security.* (got `{}`)",
                s.chars().take(64).collect::<String>()
            )
        };
        if s.is_empty() || s.len() > MAX_TYPE_LEN {
            return Err(bad());
        }
        let segment_ok = |seg: &str| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if let Some(prefix) = s.strip_suffix(".*") {
            if prefix.split('.').all(segment_ok) {
                return Ok(TypeFilter::Prefix(format!("{prefix}.")));
            }
            return Err(bad());
        }
        let segments: Vec<&str> = s.split('.').collect();
        if segments.len() >= 2 && segments.iter().all(|seg| segment_ok(seg)) {
            Ok(TypeFilter::Exact(s.to_owned()))
        } else {
            Err(bad())
        }
    }

    pub fn matches(&self, event_type: &str) -> bool {
        match self {
            TypeFilter::Exact(t) => t == event_type,
            TypeFilter::Prefix(p) => event_type.starts_with(p.as_str()),
        }
    }
}

/// The `actor` filter: `api_key:ID`, `api_key` (any key), `admin` or `system` (the forms of
/// `Actor::filter_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActorFilter {
    /// One key, or any key when `None`.
    ApiKey(Option<i64>),
    Admin,
    System,
}

impl ActorFilter {
    pub fn parse(s: &str) -> Result<ActorFilter, String> {
        let bad = || {
            format!(
                "actor must be api_key:ID, api_key, admin or system (got `{}`)",
                s.chars().take(64).collect::<String>()
            )
        };
        match s {
            "api_key" => Ok(ActorFilter::ApiKey(None)),
            "admin" => Ok(ActorFilter::Admin),
            "system" => Ok(ActorFilter::System),
            _ => {
                let id = s.strip_prefix("api_key:").ok_or_else(bad)?;
                if id.is_empty() || id.len() > 18 || !id.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let id: i64 = id.parse().map_err(|_| bad())?;
                if id < 1 {
                    return Err(bad());
                }
                Ok(ActorFilter::ApiKey(Some(id)))
            }
        }
    }

    /// The stored `actor_type`.
    pub const fn actor_type(self) -> &'static str {
        match self {
            ActorFilter::ApiKey(_) => "api_key",
            ActorFilter::Admin => "admin",
            ActorFilter::System => "system",
        }
    }
}

/// What `GET /events` selects. `since` is inclusive, `until` exclusive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrgEventFilter {
    pub category: Option<EventCategory>,
    pub event_type: Option<TypeFilter>,
    pub actor: Option<ActorFilter>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_filters() {
        assert_eq!(
            TypeFilter::parse("security.api_key_created").unwrap(),
            TypeFilter::Exact("security.api_key_created".into())
        );
        assert_eq!(
            TypeFilter::parse("team.*").unwrap(),
            TypeFilter::Prefix("team.".into())
        );
        let nested = TypeFilter::parse("message.status.*").unwrap();
        assert!(nested.matches("message.status.update"));
        assert!(!nested.matches("message.statusupdate"));
        let team = TypeFilter::parse("team.*").unwrap();
        assert!(team.matches("team.member_added"));
        assert!(!team.matches("teams.member_added"));
        assert!(!team.matches("team"));
        for bad in [
            "",
            "team",
            "*",
            ".*",
            "team.",
            "Team.member_added",
            "team..x",
            "team.*.x",
            "team*",
            "team.member-added",
            "team.member added",
            "team.%",
            "team._%",
            &"a.".repeat(60),
        ] {
            assert!(TypeFilter::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn actor_filters() {
        assert_eq!(
            ActorFilter::parse("api_key:12").unwrap(),
            ActorFilter::ApiKey(Some(12))
        );
        assert_eq!(
            ActorFilter::parse("api_key").unwrap(),
            ActorFilter::ApiKey(None)
        );
        assert_eq!(ActorFilter::parse("admin").unwrap(), ActorFilter::Admin);
        assert_eq!(ActorFilter::parse("system").unwrap(), ActorFilter::System);
        for bad in [
            "",
            "api_key:",
            "api_key:abc",
            "api_key:-1",
            "api_key:0",
            "api_key:+3",
            "api_key:99999999999999999999",
            "API_KEY:1",
            "user",
            "Admin",
            "api_key:1:2",
        ] {
            assert!(ActorFilter::parse(bad).is_err(), "{bad:?} must be refused");
        }
        // Every actor's filter key parses back to a filter that selects it.
        use crate::event::Actor;
        for (actor, expected) in [
            (
                Actor::ApiKey {
                    api_key_id: 7,
                    api_key_prefix: "sbk_x".into(),
                },
                ActorFilter::ApiKey(Some(7)),
            ),
            (Actor::Admin, ActorFilter::Admin),
            (Actor::System, ActorFilter::System),
        ] {
            assert_eq!(ActorFilter::parse(&actor.filter_key()).unwrap(), expected);
        }
    }
}
