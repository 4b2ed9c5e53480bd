//! Messages, contacts and conversations as the API, their events' `data` and the admin tools
//! show them.

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::contact::{Contact, Conversation, ConversationStatus};
use switchboard_domain::message::{Direction, InboundContext, MessageStatus, MessageType};
use switchboard_store::MessageRecord;

/// A message as the API shows it. The content is under the key named by `type` (CONVENTIONS
/// "Every kind of message, in and out"): `text` (`{"body", "preview_url"?}`), `interactive`
/// (the WhatsApp Cloud API object), `media` (`{"media_type", "media_url" | "media_id",
/// "caption"?, "file_name"?, ...}`), `template` (`{"name", "language", "components"}`),
/// `reaction`, `location`, `contacts`, `order`, `system` or `unsupported`; a message the
/// customer deleted has its member null. Inbound messages also carry `reply_to`, `forwarded`,
/// `frequently_forwarded` and `referral`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct MessageOut {
    pub id: i64,
    pub uuid: Uuid,
    pub direction: Direction,
    #[serde(rename = "type")]
    pub message_type: MessageType,
    /// Outbound: queued, sent, delivered, read or failed. Inbound: received.
    pub status: MessageStatus,
    pub contact_uuid: Uuid,
    pub conversation_uuid: Option<Uuid>,
    /// The channel identity object.
    pub channel: ChannelIdentity,
    pub provider_message_id: Option<String>,
    /// Why the message failed: `{"code", "message", "provider", "provider_code", ...}`.
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The consent evidence a catalog template was sent under (conversation initiation and
    /// campaign sends); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consent_uuid: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub text: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub interactive: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub media: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub template: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::ReactionMember>)]
    pub reaction: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::LocationMember>)]
    pub location: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::ContactsMember>)]
    pub contacts: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::OrderMember>)]
    pub order: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::SystemMember>)]
    pub system: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<switchboard_domain::message::UnsupportedMember>)]
    pub unsupported: Option<Value>,
    /// Inbound: `reply_to`, `forwarded`, `frequently_forwarded`, `referral`; outbound, when it
    /// was sent as a reply: the same members, with `reply_to` the message it quotes.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub context: Option<InboundContext>,
    /// When the customer edited the message (absent when never edited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<Timestamp>,
    /// When the customer deleted the message (its member is then null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Timestamp>,
    /// Outbound WhatsApp: the last `pricing` WhatsApp reported (`{"billable", "category",
    /// "pricing_model"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub pricing: Option<Value>,
    /// Outbound WhatsApp: the last conversation WhatsApp reported (`{"id", "origin",
    /// "expires_at"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub provider_conversation: Option<Value>,
}

impl From<&MessageRecord> for MessageOut {
    fn from(m: &MessageRecord) -> Self {
        let content = |t: MessageType| (m.message_type == t).then(|| m.content.clone());
        MessageOut {
            id: m.id,
            uuid: m.uuid,
            direction: m.direction,
            message_type: m.message_type,
            status: m.status,
            contact_uuid: m.contact_uuid,
            conversation_uuid: m.conversation_uuid,
            channel: m.channel.clone(),
            provider_message_id: m.provider_message_id.clone(),
            error: m.error.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            consent_uuid: m.consent_uuid,
            text: content(MessageType::Text),
            interactive: content(MessageType::Interactive),
            media: content(MessageType::Media),
            template: content(MessageType::Template),
            reaction: content(MessageType::Reaction),
            location: content(MessageType::Location),
            contacts: content(MessageType::Contacts),
            order: content(MessageType::Order),
            system: content(MessageType::System),
            unsupported: content(MessageType::Unsupported),
            // Inbound: always; outbound: a reply's `reply_to`.
            context: match m.direction {
                Direction::Inbound => Some(m.context.clone().unwrap_or_default()),
                Direction::Outbound => m.context.clone(),
            },
            edited_at: m.edited_at,
            deleted_at: m.deleted_at,
            pricing: m.pricing.clone(),
            provider_conversation: m.provider_conversation.clone(),
        }
    }
}

/// A contact as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ContactOut {
    pub uuid: Uuid,
    /// E.164, e.g. `+4915123456789`; null for contacts known only by a Telegram chat.
    pub phone: Option<String>,
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telegram_chat_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&Contact> for ContactOut {
    fn from(c: &Contact) -> Self {
        ContactOut {
            uuid: c.uuid,
            phone: c.phone.as_ref().map(|p| p.as_str().to_owned()),
            name: c.name.clone(),
            telegram_chat_id: c.telegram_chat_id.clone(),
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// A conversation as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ConversationOut {
    pub uuid: Uuid,
    pub status: ConversationStatus,
    pub contact_uuid: Uuid,
    pub channel_id: i64,
    /// The time of the contact's last inbound message.
    pub last_inbound_at: Option<Timestamp>,
    /// When the 24-hour customer-service window closes (enforced on whatsapp_cloud channels).
    pub window_expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The consent evidence under which the business initiated the conversation; absent when
    /// the contact opened it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consent_uuid: Option<Uuid>,
}

impl From<&Conversation> for ConversationOut {
    fn from(c: &Conversation) -> Self {
        ConversationOut {
            uuid: c.uuid,
            status: c.status,
            contact_uuid: c.contact_uuid,
            channel_id: c.channel_id,
            last_inbound_at: c.last_inbound_at,
            window_expires_at: c.window_expires_at(),
            created_at: c.created_at,
            updated_at: c.updated_at,
            consent_uuid: c.consent_uuid,
        }
    }
}
