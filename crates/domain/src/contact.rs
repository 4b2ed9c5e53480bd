//! Contacts (the people an organization messages) and conversations (one contact on one
//! channel, with the customer-service window).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Timestamp;
use super::phone::Phone;

/// The WhatsApp customer-service window: free-form messages are allowed for 24 hours after the
/// contact's last inbound message.
pub const SERVICE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The longest contact name kept.
pub const MAX_NAME_CHARS: usize = 200;

/// A contact of one organization.
/// Who an inbound message is from, as a provider reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboundSender {
    /// A phone number (WhatsApp's `wa_id`, the sandbox's `--from`).
    Phone(Phone),
    /// A Telegram chat.
    Telegram { chat_id: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contact {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    /// E.164; unique in the organization. `None` for contacts known only by a Telegram chat.
    pub phone: Option<Phone>,
    pub name: Option<String>,
    /// The Telegram chat id (private chats: the user id); unique in the organization.
    pub telegram_chat_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConversationStatus {
    Open,
    Closed,
}

impl ConversationStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ConversationStatus::Open => "open",
            ConversationStatus::Closed => "closed",
        }
    }
}

impl fmt::Display for ConversationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ConversationStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "open" => Ok(ConversationStatus::Open),
            "closed" => Ok(ConversationStatus::Closed),
            _ => Err(format!("unknown conversation status `{s}`")),
        }
    }
}

/// One contact on one channel. At most one is open per contact and channel (enforced by the
/// database).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub contact_id: i64,
    pub contact_uuid: Uuid,
    pub channel_id: i64,
    pub status: ConversationStatus,
    /// The time of the contact's last inbound message (the provider's time, never later than
    /// when it was received).
    pub last_inbound_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The consent evidence under which the business initiated the conversation (conversation
    /// initiation), if any.
    pub consent_uuid: Option<Uuid>,
}

/// Why a free-form message cannot be sent on a windowed channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// No open conversation with the contact on the channel.
    ConversationRequired,
    /// The conversation is open but the contact's last message is older than the window.
    OutsideServiceWindow,
}

impl Conversation {
    /// When the customer-service window closes (`None`: it never opened).
    pub fn window_expires_at(&self) -> Option<Timestamp> {
        self.last_inbound_at
            .map(|t| t.saturating_add(SERVICE_WINDOW))
    }

    /// Whether the window is open at `now`.
    pub fn window_open(&self, now: Timestamp) -> bool {
        self.status == ConversationStatus::Open
            && self.window_expires_at().is_some_and(|end| now < end)
    }
}

/// The customer-service window rule for free-form (text, interactive, media) messages.
pub fn check_service_window(
    conversation: Option<&Conversation>,
    now: Timestamp,
) -> Result<(), WindowError> {
    match conversation {
        Some(c) if c.status == ConversationStatus::Open => {
            if c.window_open(now) {
                Ok(())
            } else {
                Err(WindowError::OutsideServiceWindow)
            }
        }
        _ => Err(WindowError::ConversationRequired),
    }
}

/// Whether free-form content may go to a contact now (`GET .../reachability`): on a windowed
/// channel (WhatsApp Cloud) only inside the customer-service window, with the reason
/// (`conversation_required`, `outside_service_window`) and when the window closes; on other
/// channels always.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FreeForm {
    pub allowed: bool,
    /// Null when allowed: `outside_service_window` or `conversation_required`.
    pub reason: Option<&'static str>,
    /// When the window closes (windowed channels with an open window), else null.
    pub window_closes_at: Option<Timestamp>,
}

pub fn free_form(windowed: bool, conversation: Option<&Conversation>, now: Timestamp) -> FreeForm {
    if !windowed {
        return FreeForm {
            allowed: true,
            reason: None,
            window_closes_at: None,
        };
    }
    let closes = conversation
        .filter(|c| c.window_open(now))
        .and_then(Conversation::window_expires_at);
    match check_service_window(conversation, now) {
        Ok(()) => FreeForm {
            allowed: true,
            reason: None,
            window_closes_at: closes,
        },
        Err(WindowError::OutsideServiceWindow) => FreeForm {
            allowed: false,
            reason: Some("outside_service_window"),
            window_closes_at: None,
        },
        Err(WindowError::ConversationRequired) => FreeForm {
            allowed: false,
            reason: Some("conversation_required"),
            window_closes_at: None,
        },
    }
}

/// Checks a contact name: 1 to 200 characters after trimming, no control characters.
pub fn validate_contact_name(name: &str) -> Result<String, String> {
    let t = name.trim();
    if t.is_empty() {
        return Err("must not be blank".into());
    }
    if t.chars().count() > MAX_NAME_CHARS {
        return Err(format!("must be at most {MAX_NAME_CHARS} characters"));
    }
    if t.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(t.to_owned())
}

/// A name from a provider profile: trimmed, control characters removed, cut to the maximum;
/// `None` when nothing is left.
pub fn clean_profile_name(name: &str) -> Option<String> {
    let cleaned: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_NAME_CHARS)
        .collect();
    let t = cleaned.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(status: ConversationStatus, last: Option<i64>) -> Conversation {
        Conversation {
            id: 1,
            uuid: Uuid::nil(),
            org_id: 1,
            contact_id: 1,
            contact_uuid: Uuid::nil(),
            channel_id: 1,
            status,
            last_inbound_at: last.map(Timestamp::from_millis),
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
            consent_uuid: None,
        }
    }

    #[test]
    fn the_window_is_24_hours_after_the_last_inbound_message() {
        let day = 86_400_000;
        let now = Timestamp::from_millis(10 * day);
        let open = conv(ConversationStatus::Open, Some(10 * day - day + 1));
        assert_eq!(check_service_window(Some(&open), now), Ok(()));
        let old = conv(ConversationStatus::Open, Some(10 * day - day));
        assert_eq!(
            check_service_window(Some(&old), now),
            Err(WindowError::OutsideServiceWindow)
        );
        let never = conv(ConversationStatus::Open, None);
        assert_eq!(
            check_service_window(Some(&never), now),
            Err(WindowError::OutsideServiceWindow)
        );
        let closed = conv(ConversationStatus::Closed, Some(10 * day));
        assert_eq!(
            check_service_window(Some(&closed), now),
            Err(WindowError::ConversationRequired)
        );
        assert_eq!(
            check_service_window(None, now),
            Err(WindowError::ConversationRequired)
        );
        assert_eq!(
            open.window_expires_at(),
            Some(Timestamp::from_millis(10 * day + 1))
        );
    }

    #[test]
    fn free_form_reachability() {
        let day = 86_400_000;
        let now = Timestamp::from_millis(10 * day);
        let open = conv(ConversationStatus::Open, Some(10 * day - 1000));
        assert_eq!(
            free_form(true, Some(&open), now),
            FreeForm {
                allowed: true,
                reason: None,
                window_closes_at: Some(Timestamp::from_millis(11 * day - 1000)),
            }
        );
        let old = conv(ConversationStatus::Open, Some(8 * day));
        assert_eq!(
            free_form(true, Some(&old), now).reason,
            Some("outside_service_window")
        );
        assert_eq!(
            free_form(true, None, now).reason,
            Some("conversation_required")
        );
        assert!(!free_form(true, None, now).allowed);
        assert_eq!(
            free_form(false, None, now),
            FreeForm {
                allowed: true,
                reason: None,
                window_closes_at: None
            }
        );
    }

    #[test]
    fn names() {
        assert_eq!(validate_contact_name("  Ada  ").unwrap(), "Ada");
        assert!(validate_contact_name(" ").is_err());
        assert!(validate_contact_name("a\u{7}b").is_err());
        assert!(validate_contact_name(&"x".repeat(201)).is_err());
        assert_eq!(clean_profile_name(" Bob\u{0} "), Some("Bob".into()));
        assert_eq!(clean_profile_name("\u{0}"), None);
    }
}
