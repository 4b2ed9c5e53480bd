//! Users (people) and their memberships of organizations.
//!
//! A user is one person, identified by a UUID and an e-mail address that is unique without
//! regard to case. No password, hash or other credential is stored: people do not log in to
//! Switchboard; it keeps who belongs to which organization, with which role and permissions.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// The longest e-mail address accepted (RFC 5321 path limit).
pub const MAX_EMAIL_LEN: usize = 254;
/// The longest display name accepted, in characters.
pub const MAX_NAME_LEN: usize = 200;

/// A checked e-mail address: as given (trimmed) and its case-folded form, which is unique.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Email {
    display: String,
    normalized: String,
}

impl Email {
    /// Checks an address: one `@`, a non-empty local part, a domain of dot-separated labels
    /// (letters, digits, `-`; at least two labels), no spaces or control characters, at most
    /// 254 characters.
    pub fn parse(raw: &str) -> Result<Email, String> {
        let s = raw.trim();
        if s.is_empty() {
            return Err("the e-mail address is empty".into());
        }
        if s.chars().count() > MAX_EMAIL_LEN {
            return Err(format!(
                "the e-mail address is longer than {MAX_EMAIL_LEN} characters"
            ));
        }
        let bad = || format!("`{s}` is not an e-mail address (expected name@example.com)");
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad());
        }
        let (local, domain) = s.rsplit_once('@').ok_or_else(bad)?;
        if local.is_empty()
            || local.len() > 64
            || local.contains('@')
            || local.starts_with('.')
            || local.ends_with('.')
            || local.contains("..")
            || local.contains(['"', '(', ')', ',', ':', ';', '<', '>', '[', '\\', ']'])
        {
            return Err(bad());
        }
        let labels: Vec<&str> = domain.split('.').collect();
        if labels.len() < 2
            || labels.iter().any(|l| {
                l.is_empty()
                    || l.len() > 63
                    || l.starts_with('-')
                    || l.ends_with('-')
                    || !l.chars().all(|c| c.is_alphanumeric() || c == '-')
            })
        {
            return Err(bad());
        }
        Ok(Email {
            display: s.to_owned(),
            normalized: s.to_lowercase(),
        })
    }

    /// The address as given.
    pub fn as_str(&self) -> &str {
        &self.display
    }

    /// The case-folded address: the unique key.
    pub fn normalized(&self) -> &str {
        &self.normalized
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

/// Checks a display name: 1 to 200 characters after trimming, no control characters.
pub fn validate_user_name(name: &str) -> Result<String, String> {
    let n = name.trim();
    if n.is_empty() {
        return Err("the name is empty".into());
    }
    if n.chars().count() > MAX_NAME_LEN {
        return Err(format!("the name is longer than {MAX_NAME_LEN} characters"));
    }
    if n.chars().any(char::is_control) {
        return Err("the name contains control characters".into());
    }
    Ok(n.to_owned())
}

/// The state of a membership. Memberships are created `active`; removing a member deletes the
/// membership (the organization log keeps the history).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MembershipStatus {
    Active,
}

impl MembershipStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            MembershipStatus::Active => "active",
        }
    }
}

impl FromStr for MembershipStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "active" => Ok(MembershipStatus::Active),
            other => Err(format!("unknown membership status `{other}`")),
        }
    }
}

impl Serialize for MembershipStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_checked_and_case_folded() {
        let e = Email::parse("  Alice.Smith+crm@Example.COM ").unwrap();
        assert_eq!(e.as_str(), "Alice.Smith+crm@Example.COM");
        assert_eq!(e.normalized(), "alice.smith+crm@example.com");
        assert_eq!(
            Email::parse("ALICE@example.com").unwrap().normalized(),
            Email::parse("alice@EXAMPLE.com").unwrap().normalized()
        );
        assert!(Email::parse("josé@exämple.de").is_ok());
        for bad in [
            "",
            "   ",
            "alice",
            "alice@",
            "@example.com",
            "alice@example",
            "alice@@example.com",
            "al ice@example.com",
            "alice@exa mple.com",
            "alice@-example.com",
            "alice@example..com",
            ".alice@example.com",
            "alice.@example.com",
            "a..b@example.com",
            "al\u{0}ice@example.com",
            "<alice@example.com>",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad:?} must be refused");
        }
        let long = format!("{}@example.com", "a".repeat(250));
        assert!(Email::parse(&long).is_err());
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(validate_user_name("  Alice  ").unwrap(), "Alice");
        assert!(validate_user_name("").is_err());
        assert!(validate_user_name("  ").is_err());
        assert!(validate_user_name("a\u{7}b").is_err());
        assert!(validate_user_name(&"é".repeat(200)).is_ok());
        assert!(validate_user_name(&"é".repeat(201)).is_err());
    }
}
