//! Which channel a send uses (specification 4.2, CONVENTIONS.md "Resources"): a pure function
//! over the organization's channels.
//!
//! 1. `channel_id` and `channel_slug` together: 422 `channel_conflict`.
//! 2. `channel_id`: that channel of the organization.
//! 3. `channel_slug`, matched in this order: the explicit slug, the channel UUID, the provider
//!    identifier, the normalized name (trimmed, case-folded, runs of spaces, `-` and `_` as
//!    one). The first rule that matches decides; two channels matching the same rule is a 422.
//! 4. Neither: the API key's default channel, then the organization's default channel, else
//!    422 `no_default_channel`.
//!
//! The channel found must be active and able to send, else 422 `invalid_channel` (also for an
//! unknown channel or one of another organization, which is simply not in the list).

use serde::Serialize;
use uuid::Uuid;

use super::channel::{Channel, normalize_name};

/// What the request and the key say about the channel.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelRequest<'a> {
    pub channel_id: Option<i64>,
    pub channel_slug: Option<&'a str>,
    /// The API key's default channel.
    pub key_default: Option<i64>,
}

/// Why a channel is not usable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidReason {
    /// No channel of the organization matches.
    NotFound,
    Inactive,
    /// The channel type cannot send messages (lead ingestion).
    CannotSend,
    /// The slug matches several channels by identifier or name.
    Ambiguous,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectionError {
    /// Both `channel_id` and `channel_slug` were given.
    Conflict,
    /// Neither was given and there is no key or organization default.
    NoDefault,
    Invalid {
        reason: InvalidReason,
        /// How the channel was chosen: `channel_id`, `channel_slug`, `key_default` or
        /// `organization_default`.
        source: &'static str,
        /// The channels involved (the one found, or the ambiguous matches).
        channel_ids: Vec<i64>,
    },
}

impl SelectionError {
    fn invalid(reason: InvalidReason, source: &'static str, channel_ids: Vec<i64>) -> Self {
        SelectionError::Invalid {
            reason,
            source,
            channel_ids,
        }
    }

    /// A sentence for people.
    pub fn message(&self) -> String {
        match self {
            SelectionError::Conflict => {
                "Give either channel_id or channel_slug, not both.".into()
            }
            SelectionError::NoDefault => "No channel was given and neither the API key nor the organization has a default channel; give channel_id or channel_slug.".into(),
            SelectionError::Invalid { reason, source, .. } => {
                let what = match *source {
                    "key_default" => "The API key's default channel",
                    "organization_default" => "The organization's default channel",
                    _ => "The channel",
                };
                match reason {
                    InvalidReason::NotFound => format!("{what} does not exist in this organization."),
                    InvalidReason::Inactive => format!("{what} is inactive."),
                    InvalidReason::CannotSend => format!("{what} cannot send messages."),
                    InvalidReason::Ambiguous => "channel_slug matches several channels; use channel_id or the channel's slug or UUID.".into(),
                }
            }
        }
    }
}

/// The channels that `slug` designates, by the first matching rule.
pub fn match_slug<'c>(channels: &'c [Channel], slug: &str) -> Vec<&'c Channel> {
    let slug = slug.trim();
    let by_slug: Vec<&Channel> = channels.iter().filter(|c| c.slug == slug).collect();
    if !by_slug.is_empty() {
        return by_slug;
    }
    if let Ok(uuid) = Uuid::parse_str(slug) {
        let by_uuid: Vec<&Channel> = channels.iter().filter(|c| c.uuid == uuid).collect();
        if !by_uuid.is_empty() {
            return by_uuid;
        }
    }
    let by_identifier: Vec<&Channel> = channels.iter().filter(|c| c.identifier == slug).collect();
    if !by_identifier.is_empty() {
        return by_identifier;
    }
    let normalized = normalize_name(slug);
    if normalized.is_empty() {
        return Vec::new();
    }
    channels
        .iter()
        .filter(|c| normalize_name(&c.name) == normalized)
        .collect()
}

/// Chooses the channel of a send among the organization's `channels`.
pub fn select_channel<'c>(
    channels: &'c [Channel],
    request: &ChannelRequest<'_>,
) -> Result<&'c Channel, SelectionError> {
    let (found, source) = match (request.channel_id, request.channel_slug) {
        (Some(_), Some(_)) => return Err(SelectionError::Conflict),
        (Some(id), None) => (channels.iter().find(|c| c.id == id), "channel_id"),
        (None, Some(slug)) => {
            let matches = match_slug(channels, slug);
            if matches.len() > 1 {
                return Err(SelectionError::invalid(
                    InvalidReason::Ambiguous,
                    "channel_slug",
                    matches.iter().map(|c| c.id).collect(),
                ));
            }
            (matches.into_iter().next(), "channel_slug")
        }
        (None, None) => match request.key_default {
            Some(id) => (channels.iter().find(|c| c.id == id), "key_default"),
            None => match channels.iter().find(|c| c.is_default) {
                Some(c) => (Some(c), "organization_default"),
                None => return Err(SelectionError::NoDefault),
            },
        },
    };
    let Some(channel) = found else {
        return Err(SelectionError::invalid(
            InvalidReason::NotFound,
            source,
            Vec::new(),
        ));
    };
    if !channel.is_active() {
        return Err(SelectionError::invalid(
            InvalidReason::Inactive,
            source,
            vec![channel.id],
        ));
    }
    if !channel.channel_type.can_send_messages() {
        return Err(SelectionError::invalid(
            InvalidReason::CannotSend,
            source,
            vec![channel.id],
        ));
    }
    Ok(channel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;
    use crate::channel::{ChannelStatus, ChannelType};

    fn ch(id: i64, slug: &str, name: &str, identifier: &str) -> Channel {
        Channel {
            id,
            uuid: Uuid::from_u128(id as u128),
            org_id: 1,
            slug: slug.into(),
            channel_type: ChannelType::Sandbox,
            name: name.into(),
            identifier: identifier.into(),
            status: ChannelStatus::Active,
            is_default: false,
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
        }
    }

    fn channels() -> Vec<Channel> {
        let mut inactive = ch(3, "old", "Old Line", "333");
        inactive.status = ChannelStatus::Inactive;
        let mut leads = ch(4, "leads", "Leads", "444");
        leads.channel_type = ChannelType::LeadIngestion;
        let mut default = ch(5, "main", "Main Line", "555");
        default.is_default = true;
        vec![
            ch(1, "sales", "Sales WhatsApp", "1098765"),
            ch(2, "support", "Support", "sales"),
            inactive,
            leads,
            default,
            ch(6, "twin-a", "Twin", "777"),
            ch(7, "twin-b", "twin", "777"),
        ]
    }

    fn pick(req: ChannelRequest<'_>) -> Result<i64, SelectionError> {
        let list = channels();
        select_channel(&list, &req).map(|c| c.id)
    }

    fn slug(s: &str) -> Result<i64, SelectionError> {
        pick(ChannelRequest {
            channel_slug: Some(s),
            ..Default::default()
        })
    }

    fn reason(r: Result<i64, SelectionError>) -> InvalidReason {
        match r {
            Err(SelectionError::Invalid { reason, .. }) => reason,
            other => panic!("expected invalid_channel, got {other:?}"),
        }
    }

    #[test]
    fn explicit_selectors() {
        assert_eq!(
            pick(ChannelRequest {
                channel_id: Some(2),
                ..Default::default()
            }),
            Ok(2)
        );
        assert_eq!(
            pick(ChannelRequest {
                channel_id: Some(1),
                channel_slug: Some("sales"),
                key_default: None
            }),
            Err(SelectionError::Conflict)
        );
        assert_eq!(
            reason(pick(ChannelRequest {
                channel_id: Some(99),
                ..Default::default()
            })),
            InvalidReason::NotFound
        );
        assert_eq!(
            reason(pick(ChannelRequest {
                channel_id: Some(3),
                ..Default::default()
            })),
            InvalidReason::Inactive
        );
        assert_eq!(
            reason(pick(ChannelRequest {
                channel_id: Some(4),
                ..Default::default()
            })),
            InvalidReason::CannotSend
        );
    }

    #[test]
    fn slug_matching_order() {
        assert_eq!(
            slug("sales"),
            Ok(1),
            "explicit slug, before channel 2's identifier `sales`"
        );
        assert_eq!(slug(&Uuid::from_u128(2).to_string()), Ok(2), "uuid");
        assert_eq!(
            slug(&Uuid::from_u128(2).to_string().to_uppercase()),
            Ok(2),
            "uuid in capitals"
        );
        assert_eq!(slug("1098765"), Ok(1), "provider identifier");
        assert_eq!(slug("  sales   WHATSAPP "), Ok(1), "normalized name");
        assert_eq!(slug("sales_whatsapp"), Ok(1));
        assert_eq!(reason(slug("Twin")), InvalidReason::Ambiguous);
        assert_eq!(reason(slug("777")), InvalidReason::Ambiguous);
        assert_eq!(reason(slug("nope")), InvalidReason::NotFound);
        assert_eq!(reason(slug("  ")), InvalidReason::NotFound);
        assert_eq!(reason(slug("old")), InvalidReason::Inactive);
        assert_eq!(reason(slug("Leads")), InvalidReason::CannotSend);
    }

    #[test]
    fn defaults() {
        assert_eq!(
            pick(ChannelRequest::default()),
            Ok(5),
            "organization default"
        );
        assert_eq!(
            pick(ChannelRequest {
                key_default: Some(2),
                ..Default::default()
            }),
            Ok(2),
            "the key's default wins"
        );
        // An unusable key default is an error, not a fall-through to the organization's.
        assert_eq!(
            reason(pick(ChannelRequest {
                key_default: Some(3),
                ..Default::default()
            })),
            InvalidReason::Inactive
        );
        let no_default: Vec<Channel> = channels().into_iter().filter(|c| !c.is_default).collect();
        assert_eq!(
            select_channel(&no_default, &ChannelRequest::default()),
            Err(SelectionError::NoDefault)
        );
        assert_eq!(
            select_channel(&[], &ChannelRequest::default()),
            Err(SelectionError::NoDefault)
        );
    }
}
