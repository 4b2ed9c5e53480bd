//! Channels: types, status, slugs and the identity object shown in sends and webhooks.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Timestamp;

/// The channel service types (CONVENTIONS.md "Resources").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelType {
    /// WhatsApp Cloud API: the template-capable business-messaging type.
    WhatsappCloud,
    /// Telegram Bot API.
    Telegram,
    /// No provider: sends succeed at once; inbound traffic comes from `admin sandbox`.
    Sandbox,
    /// Receives leads only; cannot send.
    LeadIngestion,
}

impl ChannelType {
    pub const ALL: [ChannelType; 4] = [
        ChannelType::WhatsappCloud,
        ChannelType::Telegram,
        ChannelType::Sandbox,
        ChannelType::LeadIngestion,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelType::WhatsappCloud => "whatsapp_cloud",
            ChannelType::Telegram => "telegram",
            ChannelType::Sandbox => "sandbox",
            ChannelType::LeadIngestion => "lead_ingestion",
        }
    }

    /// `false` only for the lead-ingestion type.
    pub const fn can_send_messages(self) -> bool {
        !matches!(self, ChannelType::LeadIngestion)
    }

    /// Whether media messages can be sent on this type.
    pub const fn supports_media(self) -> bool {
        !matches!(self, ChannelType::LeadIngestion)
    }

    /// Whether the type has a provider template catalogue (and conversation initiation).
    pub const fn is_template_capable(self) -> bool {
        matches!(self, ChannelType::WhatsappCloud)
    }
}

impl fmt::Display for ChannelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChannelType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ChannelType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown channel type `{s}` (expected one of whatsapp_cloud, telegram, sandbox, lead_ingestion)"
                )
            })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelStatus {
    Active,
    Inactive,
}

impl ChannelStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelStatus::Active => "active",
            ChannelStatus::Inactive => "inactive",
        }
    }
}

impl FromStr for ChannelStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "active" => Ok(ChannelStatus::Active),
            "inactive" => Ok(ChannelStatus::Inactive),
            _ => Err(format!("unknown channel status `{s}`")),
        }
    }
}

/// A channel as stored (the provider configuration is kept encrypted and is not part of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub slug: String,
    pub channel_type: ChannelType,
    pub name: String,
    pub identifier: String,
    pub status: ChannelStatus,
    pub is_default: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Channel {
    pub fn is_active(&self) -> bool {
        self.status == ChannelStatus::Active
    }

    pub fn identity(&self) -> ChannelIdentity {
        ChannelIdentity {
            id: self.id,
            uuid: self.uuid,
            slug: self.slug.clone(),
            channel_type: self.channel_type,
            name: self.name.clone(),
            identifier: self.identifier.clone(),
        }
    }
}

/// The channel identity object of specification 2.2, shown in send responses and webhook
/// envelopes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChannelIdentity {
    /// Numeric identifier, used as `channel_id`.
    pub id: i64,
    pub uuid: Uuid,
    /// Stable API-facing name.
    pub slug: String,
    /// Channel service type.
    #[serde(rename = "type")]
    pub channel_type: ChannelType,
    /// Display name.
    pub name: String,
    /// Identifier assigned by the provider.
    pub identifier: String,
}

/// Checks an explicit slug: 1 to 64 characters of `a-z`, `0-9`, `-` and `_`, starting with a
/// letter or digit.
pub fn validate_slug(slug: &str) -> Result<(), String> {
    let ok = !slug.is_empty()
        && slug.len() <= 64
        && slug.as_bytes()[0].is_ascii_alphanumeric()
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{slug}` is not a valid slug (1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit)"
        ))
    }
}

/// A slug derived from a display name: lower-case ASCII letters and digits, other runs as `-`.
pub fn slugify(name: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
        if out.len() >= 56 {
            break;
        }
    }
    if out.is_empty() {
        "channel".to_owned()
    } else {
        out
    }
}

/// The normalized form of a channel name used by `channel_slug` matching: trimmed,
/// case-folded, and every run of spaces, `-` and `_` collapsed into one `-`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.trim().chars().flat_map(char::to_lowercase) {
        if c.is_whitespace() || c == '-' || c == '_' {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c);
        }
    }
    out
}

/// Checks a display name: 1 to 200 characters, not only white space, no control characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("the name is empty".into());
    }
    if name.chars().count() > 200 {
        return Err("the name is longer than 200 characters".into());
    }
    if name.chars().any(char::is_control) {
        return Err("the name contains control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_and_capabilities() {
        for t in ChannelType::ALL {
            assert_eq!(t.as_str().parse::<ChannelType>().unwrap(), t);
        }
        assert!(!ChannelType::LeadIngestion.can_send_messages());
        assert!(ChannelType::Sandbox.can_send_messages());
        assert!(ChannelType::WhatsappCloud.is_template_capable());
        assert!(!ChannelType::Telegram.is_template_capable());
        assert!("whatsapp".parse::<ChannelType>().is_err());
    }

    #[test]
    fn slugs() {
        assert!(validate_slug("sales-whatsapp_2").is_ok());
        assert!(validate_slug("").is_err());
        assert!(validate_slug("-x").is_err());
        assert!(validate_slug("Sales").is_err());
        assert!(validate_slug(&"a".repeat(65)).is_err());
        assert_eq!(slugify("  Sales  WhatsApp (EU) "), "sales-whatsapp-eu");
        assert_eq!(slugify("***"), "channel");
    }

    #[test]
    fn name_normalization() {
        assert_eq!(normalize_name("  Sales   WhatsApp "), "sales-whatsapp");
        assert_eq!(normalize_name("sales__whatsapp"), "sales-whatsapp");
        assert_eq!(normalize_name("SALES - whatsapp"), "sales-whatsapp");
        assert_eq!(normalize_name("Ventes été"), "ventes-été");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn derived_slugs_are_valid_and_normalization_is_idempotent(name in "\\PC{0,300}") {
                prop_assert!(validate_slug(&slugify(&name)).is_ok());
                let n = normalize_name(&name);
                prop_assert_eq!(normalize_name(&n), n.clone());
                let _ = validate_name(&name);
            }
        }
    }
}
